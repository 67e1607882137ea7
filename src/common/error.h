/* forkbox error objects.
 *
 * One convention everywhere: a function that can fail returns an int, 0 on
 * success and a negative value on failure, and takes a trailing
 * `fb_error_t *err` that it fills on failure.  The caller owns the error and
 * releases it with fb_error_release() (or `cleanup_error`).  The kind says
 * how a client should see it (it maps 1:1 to the API's error codes); errno
 * is kept for logs.
 */
#ifndef FB_COMMON_ERROR_H
#define FB_COMMON_ERROR_H

#include <errno.h>
#include <stdarg.h>

enum fb_error_kind {
    FB_ERR_INTERNAL = 0, /* 500 internal: never for bad input */
    FB_ERR_BAD_REQUEST,  /* 400 bad_request */
    FB_ERR_UNAUTHORIZED, /* 401 unauthorized */
    FB_ERR_NOT_FOUND,    /* 404 not_found */
    FB_ERR_CONFLICT,     /* 409 conflict */
    FB_ERR_TOO_LARGE,    /* 413 payload_too_large */
    FB_ERR_QUOTA,        /* 429 quota_exceeded */
    FB_ERR_UNSUPPORTED,  /* 501 unsupported */
    FB_ERR_UNAVAILABLE,  /* 503 unavailable: try again later */
    FB_ERR_BAD_GATEWAY,  /* 502 bad_gateway: a server inside a sandbox did not answer */
};

struct fb_error_s {
    enum fb_error_kind kind;
    int errno_value; /* 0 when the failure did not come from a syscall */
    char *msg;
};
typedef struct fb_error_s *fb_error_t;

/* Fills *err (if err and *err is NULL) and returns -1, so callers can write
 * `return fb_error_set(err, ...)`.  A first error is never overwritten. */
int fb_error_set(fb_error_t *err, enum fb_error_kind kind, int errno_value, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Same, with errno as the cause and the kind internal. */
#define fb_error_sys(err, ...) fb_error_set((err), FB_ERR_INTERNAL, errno, __VA_ARGS__)

/* Prefixes the message of an existing error with more context; returns -1. */
int fb_error_wrap(fb_error_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Frees the error and sets *err to NULL; safe on NULL. */
void fb_error_release(fb_error_t *err);

/* HTTP status and API code string ("not_found") for a kind. */
int fb_error_http_status(enum fb_error_kind kind);
const char *fb_error_code(enum fb_error_kind kind);

#endif
