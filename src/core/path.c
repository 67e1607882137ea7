#include "path.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include "../common/util.h"

/* The kernel refuses longer components with ENAMETOOLONG; saying so up front
 * names the problem instead of surfacing an odd errno from inside the sandbox. */
#define COMPONENT_MAX NAME_MAX

enum {
    PUSH_OK = 0,
    PUSH_TOO_LONG = -1,
    PUSH_ESCAPE = -2,
    PUSH_COMPONENT = -3,
};

/* Appends the components of s[0..slen) to buf, kept in the form "/a/b" with
 * the root as the empty string so a join never produces "//".  ".." never
 * pops below floor: it is either ignored (the kernel's rule at "/") or an
 * escape, depending on clamp. */
static int push_components(char *buf, size_t cap, size_t *len, size_t floor, const char *s, size_t slen,
                           bool clamp)
{
    size_t i = 0;
    while (i < slen) {
        while (i < slen && s[i] == '/')
            i++;
        size_t start = i;
        while (i < slen && s[i] != '/')
            i++;
        size_t n = i - start;
        const char *c = s + start;
        if (n == 0 || (n == 1 && c[0] == '.'))
            continue;
        if (n == 2 && c[0] == '.' && c[1] == '.') {
            if (*len <= floor) {
                if (clamp)
                    continue;
                return PUSH_ESCAPE;
            }
            size_t k = *len;
            while (k > floor && buf[k - 1] != '/')
                k--;
            /* k now points just past the separating slash */
            *len = k > floor ? k - 1 : floor;
            buf[*len] = '\0';
            continue;
        }
        if (n > COMPONENT_MAX)
            return PUSH_COMPONENT;
        if (*len + 1 + n + 1 > cap)
            return PUSH_TOO_LONG;
        buf[(*len)++] = '/';
        memcpy(buf + *len, c, n);
        *len += n;
        buf[*len] = '\0';
    }
    return PUSH_OK;
}

static int finish(const char *buf, size_t len, char *out, size_t outlen, fb_error_t *err)
{
    if (fb_strlcpy(out, len == 0 ? "/" : buf, outlen) < 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "path longer than %zu bytes",
                            outlen > 0 ? outlen - 1 : 0);
    return 0;
}

int fb_path_normalize_len(const char *in, size_t inlen, char *out, size_t outlen, fb_error_t *err)
{
    if (outlen > 0)
        out[0] = '\0';
    if (in == NULL || inlen == 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "path must not be empty");
    if (memchr(in, '\0', inlen) != NULL)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "path must not contain NUL bytes");
    if (inlen > FB_PATH_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "path longer than %d bytes", FB_PATH_MAX);
    if (in[0] != '/')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "path must be absolute");

    char buf[FB_PATH_MAX + 1];
    size_t len = 0;
    buf[0] = '\0';
    switch (push_components(buf, sizeof buf, &len, 0, in, inlen, true)) {
    case PUSH_OK:
        break;
    case PUSH_COMPONENT:
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "path has a component longer than %d bytes",
                            COMPONENT_MAX);
    default:
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "path longer than %d bytes", FB_PATH_MAX);
    }
    return finish(buf, len, out, outlen, err);
}

int fb_path_normalize(const char *in, char *out, size_t outlen, fb_error_t *err)
{
    return fb_path_normalize_len(in, in != NULL ? strlen(in) : 0, out, outlen, err);
}

int fb_path_join_member(const char *base, const char *member, char *out, size_t outlen, fb_error_t *err)
{
    if (outlen > 0)
        out[0] = '\0';
    char buf[FB_PATH_MAX + 1];
    /* Normalising base again is cheap and makes the floor below exact even
     * when a caller hands in "/srv/x/" or "/srv//x". */
    if (fb_path_normalize(base, buf, sizeof buf, err) < 0)
        return fb_error_wrap(err, "base directory");
    size_t len = strcmp(buf, "/") == 0 ? 0 : strlen(buf);
    if (len == 0)
        buf[0] = '\0';

    if (member == NULL || member[0] == '\0')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "name must not be empty");
    size_t mlen = strlen(member);
    if (mlen > FB_PATH_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "name longer than %d bytes", FB_PATH_MAX);
    if (member[0] == '/')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "name must be relative");

    switch (push_components(buf, sizeof buf, &len, len, member, mlen, false)) {
    case PUSH_OK:
        break;
    case PUSH_ESCAPE:
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "name climbs above the target directory");
    case PUSH_COMPONENT:
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "name has a component longer than %d bytes",
                            COMPONENT_MAX);
    default:
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "path longer than %d bytes", FB_PATH_MAX);
    }
    return finish(buf, len, out, outlen, err);
}
