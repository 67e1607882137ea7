/* The code interpreter: POST /v1/sandboxes/{id}/code.
 *
 * Each (sandbox, context name) has one kernel: a background process (see
 * procs.h) tagged "code:<context>" that runs `python3 -u -c FB_CODE_DRIVER`
 * (code_driver.h).  A cell is one JSON line on the kernel's stdin; its
 * output is followed in the process's output from the offset it had when
 * the line was sent, up to an end marker carrying the cell's random id on
 * each stream (the one on stdout carries the result).  One cell runs at a
 * time per context; a timeout sends SIGINT (KeyboardInterrupt), and a
 * kernel that does not answer within FB_CODE_GRACE_MS after it is killed:
 * the next call starts a fresh one. */
#ifndef FB_CORE_CODE_H
#define FB_CORE_CODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core.h"

#define FB_CODE_MAX (1 << 20)       /* bytes of code per cell */
#define FB_CODE_CONTEXT_MAX 64      /* [A-Za-z0-9._-]{1,64} */
#define FB_CODE_TIMEOUT_DEFAULT 60  /* seconds */
#define FB_CODE_TIMEOUT_MAX 3600    /* seconds */
#define FB_CODE_GRACE_MS 5000       /* after SIGINT, before SIGKILL */
#define FB_CODE_TAG_PREFIX "code:"  /* reserved for kernels among process tags */
#define FB_CODE_BODY_MAX (8u << 20) /* request body: code, JSON-escaped */

struct fb_code_spec {
    char context[FB_CODE_CONTEXT_MAX + 1]; /* default "default" */
    char *code;                            /* owned, NUL-terminated, no NUL inside */
    size_t code_len;
    int64_t timeout_ms;
};

/* Parses a POST .../code body into *out.  bad_request for an unknown,
 * missing, wrong or out-of-range field (language must be "python"); clear
 * *out with fb_code_spec_clear() either way. */
int fb_code_spec_parse(json_t *body, struct fb_code_spec *out, fb_error_t *err);
void fb_code_spec_clear(struct fb_code_spec *s);

struct fb_code_cell;

/* Starts one cell: checks the sandbox (not_found for another tenant's),
 * waits for the context's previous cell (conflict after the timeout),
 * finds or starts its kernel and sends the code.  On success the caller
 * owns *out and must free it with fb_code_cell_free(). */
int fb_code_cell_start(struct fb_core *core, const char *tenant, const char *id,
                       const struct fb_code_spec *spec, struct fb_code_cell **out, fb_error_t *err);

enum fb_code_event {
    FB_CODE_STDOUT, /* *data, *len: bytes the cell printed (valid until the next call) */
    FB_CODE_STDERR,
    FB_CODE_DONE, /* the cell is over: fb_code_cell_result() */
};

/* Blocks until the next event of the cell; FB_CODE_DONE again once over. */
enum fb_code_event fb_code_cell_next(struct fb_code_cell *c, const char **data, size_t *len);

/* Lets the cell ask, while it waits, whether its client went away (then
 * the cell is interrupted as at a timeout).  gone(arg) must not block. */
void fb_code_cell_watch(struct fb_code_cell *c, bool (*gone)(void *arg), void *arg);

/* After FB_CODE_DONE: {"result": str|null, "error": null|{"name", "value",
 * "traceback"}, "timed_out": bool, "duration_ms": N} (borrowed). */
json_t *fb_code_cell_result(struct fb_code_cell *c);

/* Frees the cell and lets the context's next cell run.  A cell not yet
 * over is interrupted first (its client went away): this may block for
 * up to FB_CODE_GRACE_MS and a little more.  NULL is fine. */
void fb_code_cell_free(struct fb_code_cell *c);

#endif
