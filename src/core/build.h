/* Template builds from a Dockerfile: every RUN in a sandbox of its own
 * (the same isolation as any other, the network the caller chose), every
 * COPY/ADD from the uploaded context without unpacking it on the host,
 * each step's result a content-addressed layer, and each step cached by
 * its inputs so an unchanged prefix is not run again. */
#ifndef FB_CORE_BUILD_H
#define FB_CORE_BUILD_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "../common/error.h"
#include "dockerfile.h"
#include "spec.h"

struct fb_core;

#define FB_BUILD_TIMEOUT_DEFAULT (3600)  /* seconds one RUN may take */
#define FB_BUILD_DISK_MB_DEFAULT (8192)  /* a RUN's writable layer */
#define FB_BUILD_CONTEXT_MAX (4ll << 30) /* bytes of an uploaded context */
#define FB_BUILD_DOCKERFILE_MAX FB_DF_TEXT_MAX

/* Progress, in order: {"type":"step",...} before each instruction runs,
 * stdout/stderr bytes of RUNs, then exactly one {"type":"done",...} or
 * {"type":"error",...}.  Called from the build's thread. */
struct fb_build_sink {
    void (*event)(void *ctx, json_t *ev); /* steals ev */
    void (*output)(void *ctx, int stream, const char *data, size_t len);
    bool (*cancelled)(void *ctx); /* the client went away: stop */
    void *ctx;
};

struct fb_build {
    char name[FB_TEMPLATE_NAME_MAX + 1];
    int context_fd; /* the context tar (owned; -1: none) */
    /* a link to it the build owns (removed by fb_build_clear): the
     * request's own spool goes when the request does */
    char context_path[PATH_MAX];
    json_t *build_args; /* owned; object name -> string, may be NULL */
    char network_mode[FB_NET_MODE_MAX];
    json_t *allow; /* owned: the allowlist for RUN steps */
    bool no_cache;
    int64_t timeout_s; /* per RUN */
    struct fb_dockerfile df;
    /* filled by fb_build_prepare */
    char base_rootfs[PATH_MAX];
    json_t *base_layers; /* owned */
    char base_identity[128];
    int64_t base_bytes; /* a base without layers (default, rootfs imports): its size */
    bool reserved;      /* holds the name against a second build of it */
};

/* Releases what b owns (and the name reservation). */
void fb_build_clear(struct fb_build *b);

/* Reads the Dockerfile at path inside the context tar (context_fd is
 * rewound, not consumed): *text is the caller's.  400 when it is missing
 * or larger than FB_BUILD_DOCKERFILE_MAX. */
int fb_build_context_file(int context_fd, const char *path, char **text, size_t *len, fb_error_t *err);

/* Parses text into b->df (FROM resolved against the templates; no FROM:
 * default_from) and checks that the build can start: the base exists and
 * is ready, the name is valid, not being built, and free or replaceable
 * (no sandbox or checkpoint uses it).  4xx before anything streams. */
int fb_build_prepare(struct fb_core *core, struct fb_build *b, const char *text, size_t len,
                     const char *default_from, fb_error_t *err);

/* Runs a prepared build to the end, reporting through sink.  On success
 * the template exists (replacing one of the same name); on failure none
 * was registered or changed, and the error event says which step failed,
 * on which line, with what exit code. */
void fb_build_run(struct fb_core *core, struct fb_build *b, const struct fb_build_sink *sink);

/* Start-up: removes step sandboxes and stages an interrupted build left. */
void fb_build_remove_orphans(struct fb_core *core);

#endif
