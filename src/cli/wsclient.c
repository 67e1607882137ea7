#include "cli/wsclient.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include "common/cleanup.h"
#include "common/json_util.h"
#include "common/util.h"

#ifndef FB_VERSION
#define FB_VERSION "unknown"
#endif

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define HEAD_MAX (16u << 10)
#define ERROR_BODY_MAX (64u << 10)
#define TIMEOUT_MS 30000

/* Standard base64 of data into out (NUL-terminated); 0 or -1.  (The
 * CLI's output.c has a decoder of its own; gnutls encodes.) */
static int b64(const void *data, size_t len, char *out, size_t outlen)
{
    gnutls_datum_t in = {.data = (unsigned char *)data, .size = (unsigned)len}, res = {0};
    if (gnutls_base64_encode2(&in, &res) < 0)
        return -1;
    int rc = res.size < outlen ? 0 : -1;
    if (rc == 0) {
        memcpy(out, res.data, res.size);
        out[res.size] = '\0';
    }
    gnutls_free(res.data);
    return rc;
}

void fb_ws_conn_release(struct fb_ws_conn *ws)
{
    fb_closep(&ws->fd);
    free(ws->extra);
    ws->extra = NULL;
    ws->extra_len = 0;
}

/* host and port of an http:// base URL, and the path prefix after them. */
static int split_url(const char *url, char *host, size_t hlen, char *port, size_t plen, const char **prefix,
                     fb_error_t *err)
{
    if (strncmp(url, "http://", 7) != 0)
        return fb_error_set(err, FB_ERR_UNSUPPORTED, 0,
                            "shell and attach speak plain HTTP: use the unix socket (--socket) or an "
                            "http:// FORKBOX_URL");
    const char *h = url + 7;
    size_t n = strcspn(h, "/");
    *prefix = h + n;
    char auth[320];
    if (n == 0 || n >= sizeof auth)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "FORKBOX_URL: bad host");
    memcpy(auth, h, n);
    auth[n] = '\0';
    char *name = auth, *p = NULL;
    if (auth[0] == '[') { /* [v6]:port */
        char *close = strchr(auth, ']');
        if (close == NULL || (close[1] != '\0' && close[1] != ':'))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "FORKBOX_URL: bad IPv6 address");
        *close = '\0';
        name = auth + 1;
        p = close[1] == ':' ? close + 2 : NULL;
    } else if ((p = strrchr(auth, ':')) != NULL) {
        *p++ = '\0';
    }
    if (fb_strlcpy(host, name, hlen) < 0 || host[0] == '\0' || fb_strlcpy(port, p ? p : "80", plen) < 0 ||
        port[0] == '\0')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "FORKBOX_URL: bad host or port");
    return 0;
}

static int open_socket(struct fb_client *c, char *host_hdr, size_t hlen, const char **prefix, fb_error_t *err)
{
    *prefix = "";
    if (c->socket_path != NULL) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (fb_strlcpy(sa.sun_path, c->socket_path, sizeof sa.sun_path) < 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, ENAMETOOLONG, "socket path too long: %s",
                                c->socket_path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return fb_error_sys(err, "socket");
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
            int e = errno;
            close(fd);
            return fb_error_set(err, FB_ERR_UNAVAILABLE, e,
                                "cannot reach forkboxd at %s: %s (is it running? try `make run`)",
                                c->socket_path, strerror(e));
        }
        fb_strlcpy(host_hdr, "localhost", hlen);
        return fd;
    }
    char host[256], port[16];
    if (split_url(c->base_url, host, sizeof host, port, sizeof port, prefix, err) < 0)
        return -1;
    snprintf(host_hdr, hlen, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int gr = getaddrinfo(host, port, &hints, &res);
    if (gr != 0)
        return fb_error_set(err, FB_ERR_UNAVAILABLE, 0, "cannot reach forkboxd at %s: %s", c->where,
                            gai_strerror(gr));
    int fd = -1, e = 0;
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
            e = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        return fb_error_set(err, FB_ERR_UNAVAILABLE, e, "cannot reach forkboxd at %s: %s", c->where,
                            strerror(e));
    return fd;
}

/* Reads more into buf (up to cap) within the deadline; bytes read, 0 at EOF. */
static ssize_t read_some(int fd, char *buf, size_t cap, int64_t deadline, fb_error_t *err)
{
    for (;;) {
        int64_t left = deadline - fb_mono_ms();
        if (left <= 0)
            return fb_error_set(err, FB_ERR_UNAVAILABLE, ETIMEDOUT, "forkboxd did not answer the upgrade");
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, (int)left);
        if (n < 0 && errno != EINTR)
            return fb_error_sys(err, "poll");
        if (n <= 0)
            continue;
        ssize_t r = read(fd, buf, cap);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return fb_error_sys(err, "read from forkboxd");
        return r;
    }
}

/* The value of header name in head (CRLF lines), copied into out. */
static bool head_header(const char *head, const char *name, char *out, size_t outlen)
{
    size_t nl = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p != NULL && p[2] != '\r'; p = strstr(p + 2, "\r\n")) {
        const char *line = p + 2;
        if (strncasecmp(line, name, nl) != 0 || line[nl] != ':')
            continue;
        const char *v = line + nl + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t n = strcspn(v, "\r");
        while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
            n--;
        if (n >= outlen)
            n = outlen - 1;
        memcpy(out, v, n);
        out[n] = '\0';
        return true;
    }
    return false;
}

static int answer_error(struct fb_client *c, int fd, int status, const char *head, const char *body,
                        size_t body_len, int64_t deadline, fb_error_t *err)
{
    char cl[32];
    size_t want = ERROR_BODY_MAX;
    if (head_header(head, "Content-Length", cl, sizeof cl))
        want = strtoul(cl, NULL, 10) < ERROR_BODY_MAX ? strtoul(cl, NULL, 10) : ERROR_BODY_MAX;
    cleanup_free char *buf = malloc(ERROR_BODY_MAX + 1);
    if (buf == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    size_t len = body_len < want ? body_len : want;
    memcpy(buf, body, len);
    fb_error_t rerr = NULL;
    while (len < want) {
        ssize_t n = read_some(fd, buf + len, want - len, deadline, &rerr);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    fb_error_release(&rerr);
    cleanup_json json_t *root = json_loadb(buf, len, 0, NULL);
    json_t *e = json_object_get(root, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    enum fb_error_kind kind = FB_ERR_INTERNAL;
    for (int k = FB_ERR_INTERNAL; k <= FB_ERR_BAD_GATEWAY; k++)
        if ((code != NULL && strcmp(code, fb_error_code((enum fb_error_kind)k)) == 0) ||
            (code == NULL && fb_error_http_status((enum fb_error_kind)k) == status))
            kind = (enum fb_error_kind)k;
    const char *hint = status == 401 ? c->key_problem : NULL;
    return fb_error_set(err, kind, 0, "%s%s%s%s", msg ? msg : "forkboxd refused the WebSocket upgrade",
                        hint ? " (" : "", hint ? hint : "", hint ? ")" : "");
}

int fb_ws_connect(struct fb_client *c, const char *path, struct fb_ws_conn *out, fb_error_t *err)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    char host_hdr[300];
    const char *prefix;
    cleanup_close int fd = open_socket(c, host_hdr, sizeof host_hdr, &prefix, err);
    if (fd < 0)
        return -1;
    unsigned char nonce[16];
    if (getrandom(nonce, sizeof nonce, 0) != sizeof nonce)
        return fb_error_sys(err, "getrandom");
    char key[32];
    cleanup_free char *req = NULL;
    if (b64(nonce, sizeof nonce, key, sizeof key) < 0 ||
        asprintf(&req,
                 "GET %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: forkbox/" FB_VERSION
                 "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s%s\r\n",
                 prefix, path, host_hdr, key, c->auth_header ? c->auth_header : "",
                 c->auth_header ? "\r\n" : "") < 0) {
        req = NULL;
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    }
    int wr = fb_write_all(fd, req, strlen(req));
    explicit_bzero(req, strlen(req)); /* it holds the key */
    if (wr < 0)
        return fb_error_set(err, FB_ERR_UNAVAILABLE, errno, "send the upgrade to forkboxd: %s",
                            strerror(errno));
    /* the answer's head, and whatever follows it */
    cleanup_free char *buf = malloc(HEAD_MAX + 1);
    if (buf == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    size_t len = 0;
    char *end = NULL;
    int64_t deadline = fb_mono_ms() + TIMEOUT_MS;
    while (end == NULL) {
        if (len == HEAD_MAX)
            return fb_error_set(err, FB_ERR_INTERNAL, EPROTO, "forkboxd's answer head is too long");
        ssize_t n = read_some(fd, buf + len, HEAD_MAX - len, deadline, err);
        if (n < 0)
            return -1;
        if (n == 0)
            return fb_error_set(err, FB_ERR_UNAVAILABLE, 0, "forkboxd closed the connection at the upgrade");
        len += (size_t)n;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    size_t head_len = (size_t)(end - buf) + 4;
    int status = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
        return fb_error_set(err, FB_ERR_INTERNAL, EPROTO, "forkboxd's answer is not HTTP");
    end[2] = '\0'; /* the head, each line ending in CRLF */
    if (status != 101)
        return answer_error(c, fd, status, buf, buf + head_len, len - head_len, deadline, err);
    char want[64], got[64], input[128];
    unsigned char digest[20];
    snprintf(input, sizeof input, "%s%s", key, WS_GUID);
    if (gnutls_hash_fast(GNUTLS_DIG_SHA1, input, strlen(input), digest) != 0 ||
        b64(digest, sizeof digest, want, sizeof want) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "SHA-1");
    if (!head_header(buf, "Sec-WebSocket-Accept", got, sizeof got) || strcmp(got, want) != 0)
        return fb_error_set(err, FB_ERR_INTERNAL, EPROTO,
                            "forkboxd's WebSocket answer has a wrong accept key");
    if (len > head_len) {
        out->extra = malloc(len - head_len);
        if (out->extra == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
        memcpy(out->extra, buf + head_len, len - head_len);
        out->extra_len = len - head_len;
    }
    out->fd = fb_steal_fd(&fd);
    return 0;
}
