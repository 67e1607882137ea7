#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *vformat(const char *fmt, va_list ap)
{
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        return NULL;
    return s;
}

int fb_error_set(fb_error_t *err, enum fb_error_kind kind, int errno_value, const char *fmt, ...)
{
    if (err == NULL || *err != NULL)
        return -1;
    struct fb_error_s *e = calloc(1, sizeof(*e));
    if (e == NULL)
        abort(); /* out of memory while reporting an error: nothing sane left */
    va_list ap;
    va_start(ap, fmt);
    char *base = vformat(fmt, ap);
    va_end(ap);
    if (base != NULL && errno_value != 0) {
        char *full = NULL;
        if (asprintf(&full, "%s: %s", base, strerror(errno_value)) >= 0) {
            free(base);
            base = full;
        }
    }
    e->kind = kind;
    e->errno_value = errno_value;
    e->msg = base != NULL ? base : strdup("error");
    *err = e;
    return -1;
}

int fb_error_wrap(fb_error_t *err, const char *fmt, ...)
{
    if (err == NULL || *err == NULL)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    char *prefix = vformat(fmt, ap);
    va_end(ap);
    char *full = NULL;
    if (prefix != NULL && asprintf(&full, "%s: %s", prefix, (*err)->msg) >= 0) {
        free((*err)->msg);
        (*err)->msg = full;
    }
    free(prefix);
    return -1;
}

void fb_error_release(fb_error_t *err)
{
    if (err == NULL || *err == NULL)
        return;
    free((*err)->msg);
    free(*err);
    *err = NULL;
}

static const struct {
    int status;
    const char *code;
} kinds[] = {
    [FB_ERR_INTERNAL] = {500, "internal"},         [FB_ERR_BAD_REQUEST] = {400, "bad_request"},
    [FB_ERR_UNAUTHORIZED] = {401, "unauthorized"}, [FB_ERR_NOT_FOUND] = {404, "not_found"},
    [FB_ERR_CONFLICT] = {409, "conflict"},         [FB_ERR_TOO_LARGE] = {413, "payload_too_large"},
    [FB_ERR_QUOTA] = {429, "quota_exceeded"},      [FB_ERR_UNSUPPORTED] = {501, "unsupported"},
    [FB_ERR_UNAVAILABLE] = {503, "unavailable"},   [FB_ERR_BAD_GATEWAY] = {502, "bad_gateway"},
};

int fb_error_http_status(enum fb_error_kind kind)
{
    if ((unsigned)kind >= sizeof(kinds) / sizeof(kinds[0]))
        return 500;
    return kinds[kind].status;
}

const char *fb_error_code(enum fb_error_kind kind)
{
    if ((unsigned)kind >= sizeof(kinds) / sizeof(kinds[0]))
        return "internal";
    return kinds[kind].code;
}
