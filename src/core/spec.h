/* Validation of client request bodies into typed, bounded structs.  Every
 * field a client may send is checked here (type, range, length) before any
 * side effect happens; errors are FB_ERR_BAD_REQUEST naming the field. */
#ifndef FB_CORE_SPEC_H
#define FB_CORE_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "../common/error.h"

#define FB_TEMPLATE_NAME_MAX 63 /* [a-z0-9][a-z0-9._-]* */
#define FB_LABELS_MAX 64        /* labels per sandbox */
#define FB_LABEL_KEY_MAX 63
#define FB_LABEL_VALUE_MAX 255
#define FB_SPEC_DEFAULT_DISK_MB 2048
#define FB_NET_MODE_MAX 16
#define FB_ENV_MAX 256      /* env entries per request */
#define FB_ENV_NAME_MAX 255 /* no '=', no NUL, not empty */
#define FB_ENV_VALUE_MAX 32768
#define FB_ARGV_MAX 4096  /* argv entries */
#define FB_ARG_MAX 131071 /* bytes per argument (the kernel counts the NUL too); also cmd string */
#define FB_TTL_MAX (10LL * 365 * 24 * 3600)
#define FB_TIMEOUT_MAX (24 * 3600) /* exec timeout, seconds */
#define FB_TIMEOUT_DEFAULT 60
#define FB_STDIN_MAX (16 << 20)
#define FB_USER_MAX 32
#define FB_OUTPUT_DEFAULT (1 << 20)
#define FB_OUTPUT_MAX (64 << 20)

struct fb_resources {
    double cpus;        /* 0.01 .. 64, default 1 */
    uint64_t memory_mb; /* 16 .. 65536, default 512 */
    uint64_t pids;      /* 16 .. 32768, default 512 */
    uint64_t disk_mb;   /* 16 .. 1048576: the writable layer's filesystem size (and so inodes) */
};

#define FB_CHECKPOINT_ID_LEN 21

#define FB_VOLUME_NAME_MAX 63   /* [a-z0-9][a-z0-9._-]*, as template names */
#define FB_VOLUMES_MAX 16       /* volume mounts per sandbox */
#define FB_VOLUME_PATH_MAX 1024 /* bytes of a mount path inside the sandbox */

/* One volume mounted into a sandbox. */
struct fb_volume_mount {
    char name[FB_VOLUME_NAME_MAX + 1];
    char path[FB_VOLUME_PATH_MAX + 1]; /* absolute, normalised; not /, /proc, /sys, /dev or below */
    bool read_only;
};

struct fb_create_spec {
    char template_name[FB_TEMPLATE_NAME_MAX + 1]; /* default "default" */
    int64_t ttl_s;                                /* 0: never expires */
    int64_t idle_timeout_s;                       /* 0: never paused for idleness */
    char on_expire[16];                           /* "delete" (default), "pause", "hibernate" */
    json_t *labels;                               /* owned: object of string -> string */
    json_t *env;                                  /* owned: object of string -> string */
    json_t *allow;                                /* owned: array of canonical allowlist entries */
    char workdir[4096];                           /* absolute normalised path, default "/root" */
    bool workdir_set;                             /* not stored: the request named a workdir */
    char user[FB_USER_MAX + 1];                   /* who commands run as by default; "": root */
    struct fb_resources res;
    char network_mode[FB_NET_MODE_MAX]; /* "none" or "open" ("allowlist": 501 for now) */
    /* "ckpt_" + 16 hex: the files come from this checkpoint ("": none).  In
     * a stored spec: the checkpoint the sandbox was last created from,
     * rolled back to or checkpointed to (the next checkpoint's parent). */
    char checkpoint[FB_CHECKPOINT_ID_LEN + 1];
    uint32_t layer_uid_from; /* not stored: uid base of the checkpoint's files */
    /* the tenant's volumes mounted into it: no duplicate or nested paths */
    struct fb_volume_mount volumes[FB_VOLUMES_MAX];
    size_t n_volumes;
};

/* Whether s is a well-formed checkpoint id: "ckpt_" and 16 lowercase hex. */
bool fb_checkpoint_id_valid(const char *s);

/* Parses a POST /v1/sandboxes body (NULL or {} gives all defaults).  On
 * success the caller owns *out and releases it with fb_create_spec_clear().
 * Unknown top-level fields are refused so typos do not silently vanish. */
int fb_create_spec_parse(json_t *body, struct fb_create_spec *out, fb_error_t *err);

/* Parses a "network" object (as in a create, or PUT .../network) into mode
 * and *allow (new reference: an array of canonical entries).  400 for bad
 * input. */
int fb_network_spec_parse(json_t *v, char mode[FB_NET_MODE_MAX], json_t **allow, fb_error_t *err);
void fb_create_spec_clear(struct fb_create_spec *s);
/* For cleanup_spec: a spec on the stack is cleared when it goes out of scope. */
static inline void fb_create_spec_clearp(struct fb_create_spec *s)
{
    fb_create_spec_clear(s);
}
#define cleanup_spec __attribute__((cleanup(fb_create_spec_clearp)))

/* The spec as stored and returned to clients (labels, env keys, workdir,
 * resources, network, ttl).  New reference owned by the caller. */
json_t *fb_create_spec_to_json(const struct fb_create_spec *s);

/* Rebuilds a spec from fb_create_spec_to_json() output. */
int fb_create_spec_from_json(json_t *j, struct fb_create_spec *out, fb_error_t *err);

struct fb_exec_spec {
    char **argv; /* owned, NULL-terminated; a string cmd becomes /bin/sh -c CMD */
    size_t argc;
    json_t *env;                /* owned: object string -> string (merged over the sandbox env) */
    char cwd[4096];             /* empty: the sandbox workdir */
    char user[FB_USER_MAX + 1]; /* name or decimal uid; "": the sandbox's user (root unless set) */
    int64_t timeout_ms;         /* 1 ms .. FB_TIMEOUT_MAX s, default FB_TIMEOUT_DEFAULT s */
    int64_t max_output;         /* bytes kept per stream, default FB_OUTPUT_DEFAULT, max FB_OUTPUT_MAX */
    char *stdin_data;           /* owned, may be NULL */
    size_t stdin_len;
};

/* Parses a POST .../exec body. */
int fb_exec_spec_parse(json_t *body, struct fb_exec_spec *out, fb_error_t *err);
void fb_exec_spec_clear(struct fb_exec_spec *s);

/* An env object from an image's ["NAME=VALUE", ...] (entries without a
 * name skipped), with over's entries (may be NULL) on top.  New reference;
 * NULL without memory. */
json_t *fb_env_from_list(json_t *list, json_t *over);

/* Validates a user for exec or a sandbox default: a passwd name or a
 * decimal uid below 65536.  400 naming field otherwise. */
int fb_user_check(const char *u, fb_error_t *err);

/* Validates a template name ([a-z0-9][a-z0-9._-]{0,62}). */
int fb_template_name_check(const char *name, fb_error_t *err);

#define FB_VOLUME_DEFAULT_MB 1024
#define FB_VOLUME_MIN_MB 16
#define FB_VOLUME_MAX_MB 1048576 /* 1 TiB: images are sparse, as layers are */

/* Parses a POST /v1/volumes body {"name", "size_mb"} (size optional:
 * FB_VOLUME_DEFAULT_MB).  name holds FB_VOLUME_NAME_MAX + 1 bytes. */
int fb_volume_spec_parse(json_t *body, char *name, uint64_t *size_mb, fb_error_t *err);

/* Validates a volume name (the template name rule); 400 naming "volume". */
int fb_volume_name_check(const char *name, fb_error_t *err);

/* Parses "key=value" label selectors from a list query: checks bounds. */
int fb_label_selector_parse(const char *sel, char *key, size_t keylen, char *val, size_t vallen,
                            fb_error_t *err);

#endif
