/* A sandbox's processes and memory as CRIU images: dumping a running
 * sandbox, and restoring images into a fresh set of namespaces (the same
 * sandbox after hibernate or rollback, or a new one for a fork).
 *
 * What CRIU cannot see from inside the sandbox is described to it as
 * external: init's control socket (bound under the run dir before
 * pivot_root), the keepers' record files and control sockets (on the
 * layer's host mount), the network namespace and the host device nodes
 * bound into /dev.  A restore hands fresh ones in with --inherit-fd: new
 * sockets bound at the new sandbox's paths, the record files of the new
 * layer copy, and a network namespace (with a user namespace carrying the
 * new uid range and a UTS namespace carrying the new hostname) made by a
 * short-lived holder process. */
#ifndef FB_RUNTIME_MEMSTATE_H
#define FB_RUNTIME_MEMSTATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/error.h"
#include "container.h"

#define FB_MEMSTATE_EXT_MAX 200
#define FB_MEMSTATE_REL_MAX 96

enum fb_memstate_ext_kind {
    FB_EXT_FILE = 1, /* a record file of a keeper, opened again from the new layer */
    FB_EXT_LISTEN,   /* a listening unix socket, bound again at the new paths */
};

/* One external resource: CRIU's key for it and where it lives relative to
 * the sandbox ("run/init.sock", "layer/procs/PID/out", ...). */
struct fb_memstate_ext {
    enum fb_memstate_ext_kind kind;
    char key[48];
    char rel[FB_MEMSTATE_REL_MAX];
    int flags;   /* FB_EXT_FILE: open flags (O_ACCMODE | O_APPEND) */
    int64_t pos; /* FB_EXT_FILE: file offset at the dump */
};

struct fb_memstate_dump {
    const char *criu;                    /* binary */
    const char *images;                  /* existing empty dir for the images */
    const struct fb_container_config *c; /* the sandbox (id, dirs, cgroups) */
    pid_t init_pid;
    bool leave_running; /* false: the processes end once dumped (hibernate) */
    int timeout_ms;
    const atomic_bool *cancel;
};

/* Dumps every process of the sandbox into d->images.  The sandbox's cgroup
 * is frozen by the caller or not; CRIU freezes through it either way and
 * leaves it as it found it.  Fills ext (FB_MEMSTATE_EXT_MAX entries) and
 * *n with the externals a restore must provide.  On failure nothing of the
 * sandbox changed (with leave_running) and *err carries CRIU's first error
 * lines. */
int fb_memstate_dump(const struct fb_memstate_dump *d, struct fb_memstate_ext *ext, size_t *n,
                     fb_error_t *err);

struct fb_memstate_restore {
    const char *criu;
    const char *images;
    /* the sandbox to become: layer already in place (reuse_layer, and
     * keep_records), cgroups, uid range, hostname */
    const struct fb_container_config *c;
    const struct fb_memstate_ext *ext;
    size_t n_ext;
    int timeout_ms;
    const atomic_bool *cancel;
};

/* Restores the images as the sandbox c: makes its cgroups, mounts its
 * root, creates the holder namespaces and runs criu restore.  On success
 * out->init_pid and out->sock_path name the restored init.  On failure
 * everything made is removed again except the writable layer, which stays
 * as the caller left it. */
int fb_memstate_restore(const struct fb_memstate_restore *r, struct fb_container *out, fb_error_t *err);

/* A listening unix socket bound at path, made in the network namespace
 * netns_fd (so CRIU finds it when it dumps that namespace's processes).
 * Returns the fd (caller-owned) or -1 with *err. */
int fb_memstate_listen_in(int netns_fd, const char *path, fb_error_t *err);

/* 1 while a worker of the sandbox's init serves a request (holding a
 * connection to the daemon, which CRIU cannot dump), 0 when none does. */
int fb_memstate_busy(const struct fb_container_config *c, pid_t init_pid, fb_error_t *err);

/* Whether rel is a path a restore may open or bind (so an imported or
 * tampered externals list cannot point anywhere else). */
bool fb_memstate_rel_valid(enum fb_memstate_ext_kind kind, const char *rel);

#endif
