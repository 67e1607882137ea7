#include "wire.h"

#include <stdio.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "text.h"

/* send() with MSG_NOSIGNAL so that a peer that went away shows up as -EPIPE
 * instead of a SIGPIPE killing the process; plain write() for non-sockets. */
static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    int is_socket = 1;
    while (len > 0) {
        ssize_t n = is_socket ? send(fd, p, len, MSG_NOSIGNAL) : write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == ENOTSOCK && is_socket) {
                is_socket = 0;
                continue;
            }
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t len, int *got_any)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return *got_any ? -EPROTO : -ECONNRESET;
        *got_any = 1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int fb_wire_send(int fd, uint16_t type, const void *data, size_t len)
{
    if (len > FB_WIRE_MAX_PAYLOAD)
        return -EMSGSIZE;
    struct fb_frame_header h = {.len = (uint32_t)len, .type = type};
    /* small frames go out in one write: one wakeup for the reader */
    char small[sizeof h + 4096];
    memcpy(small, &h, sizeof h);
    if (len <= sizeof small - sizeof h) {
        if (len > 0)
            memcpy(small + sizeof h, data, len);
        return write_all(fd, small, sizeof h + len);
    }
    int r = write_all(fd, small, sizeof h);
    if (r < 0)
        return r;
    return write_all(fd, data, len);
}

int fb_wire_send_json(int fd, uint16_t type, json_t *obj)
{
    char *s = json_dumps(obj, JSON_COMPACT);
    if (s == NULL)
        return -ENOMEM;
    int r = fb_wire_send(fd, type, s, strlen(s));
    free(s);
    return r;
}

int fb_wire_recv(int fd, struct fb_frame *out)
{
    struct fb_frame_header h;
    int got_any = 0;
    out->data = NULL;
    out->len = 0;
    int r = read_all(fd, &h, sizeof h, &got_any);
    if (r < 0)
        return r;
    if (h.len > FB_WIRE_MAX_PAYLOAD || h.type == 0)
        return -EPROTO;
    char *buf = malloc((size_t)h.len + 1);
    if (buf == NULL)
        return -ENOMEM;
    r = read_all(fd, buf, h.len, &got_any);
    if (r < 0) {
        free(buf);
        return r == -ECONNRESET ? -EPROTO : r;
    }
    buf[h.len] = '\0';
    out->type = h.type;
    out->len = h.len;
    out->data = buf;
    return 0;
}

int fb_wire_send_fds(int sock, const int *fds, size_t n)
{
    if (n == 0 || n > FB_WIRE_MAX_FDS)
        return -EINVAL;
    char byte = 'F';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(FB_WIRE_MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr m = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = u.buf,
                       .msg_controllen = CMSG_SPACE(n * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(n * sizeof(int));
    memcpy(CMSG_DATA(c), fds, n * sizeof(int));
    for (;;) {
        ssize_t r = sendmsg(sock, &m, MSG_NOSIGNAL);
        if (r == 1)
            return 0;
        if (r < 0 && errno == EINTR)
            continue;
        return r < 0 ? -errno : -EPROTO;
    }
}

int fb_wire_recv_fds(int sock, int *fds, size_t n)
{
    if (n == 0 || n > FB_WIRE_MAX_FDS)
        return -EINVAL;
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(FB_WIRE_MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    ssize_t r;
    do
        r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return -errno;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    size_t got = 0;
    if (r == 1 && c != NULL && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len >= CMSG_LEN(0))
        got = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    int tmp[FB_WIRE_MAX_FDS];
    if (got > 0)
        memcpy(tmp, CMSG_DATA(c), (got > FB_WIRE_MAX_FDS ? FB_WIRE_MAX_FDS : got) * sizeof(int));
    /* exactly n, or none kept: a short or long set is a protocol error */
    if (got != n || (m.msg_flags & MSG_CTRUNC)) {
        for (size_t i = 0; i < got && i < FB_WIRE_MAX_FDS; i++)
            close(tmp[i]);
        return -EPROTO;
    }
    memcpy(fds, tmp, n * sizeof(int));
    return 0;
}

json_t *fb_wire_frame_json(const struct fb_frame *f)
{
    if (f->data == NULL)
        return NULL;
    json_t *j = json_loadb(f->data, f->len, JSON_REJECT_DUPLICATES, NULL);
    if (j != NULL && !json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

int fb_wire_set_bytes(json_t *obj, const char *key, const char *bytes)
{
    size_t n = strlen(bytes);
    char k64[64];
    snprintf(k64, sizeof k64, "%s_b64", key);
    if (fb_utf8_valid(bytes, n))
        return json_object_set_new(obj, key, json_stringn(bytes, n)) == 0 ? 0 : -ENOMEM;
    char *b64 = fb_base64_encode(bytes, n);
    if (b64 == NULL)
        return -ENOMEM;
    int r = json_object_set_new(obj, k64, json_string(b64));
    free(b64);
    return r == 0 ? 0 : -ENOMEM;
}

int fb_wire_get_bytes(json_t *obj, const char *key, char *buf, size_t len)
{
    char k64[64];
    snprintf(k64, sizeof k64, "%s_b64", key);
    json_t *v = json_object_get(obj, key);
    if (json_is_string(v)) {
        size_t n = json_string_length(v);
        if (n >= len)
            return -ENAMETOOLONG;
        memcpy(buf, json_string_value(v), n + 1);
        return strlen(buf) == n ? 0 : -EINVAL;
    }
    v = json_object_get(obj, k64);
    if (!json_is_string(v))
        return -ENOENT;
    long n = fb_base64_decode(json_string_value(v), json_string_length(v), buf, len - 1);
    if (n < 0)
        return -EINVAL;
    buf[n] = '\0';
    return strlen(buf) == (size_t)n ? 0 : -EINVAL;
}
