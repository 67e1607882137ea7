/* "Ports in": /v1/sandboxes/{id}/ports/{port}[/...] relays HTTP (and
 * WebSocket) to a server listening inside the sandbox; POST
 * /v1/sandboxes/{id}/shares mints share URLs that stand in for the API
 * key on one port of one sandbox until they expire.  This file builds
 * and sends the upstream request; proxy.c relays the answer. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/util.h"
#include "proxy.h"
#include "upgrade.h"

#define SHARE_COOKIE "fb_share"
#define SHARE_DEFAULT_SECONDS 3600
#define SEND_TIMEOUT_S 60 /* a server that stops reading the request body */

/* Digits only, 1..65535: "08080" or "+80" are not ports. */
static int parse_port(const char *s, unsigned *out)
{
    size_t n = strlen(s);
    if (n == 0 || n > 5 || s[0] == '0' || strspn(s, "0123456789") != n)
        return -1;
    unsigned long v = strtoul(s, NULL, 10);
    if (v > 65535)
        return -1;
    *out = (unsigned)v;
    return 0;
}

static const char *cookie_token(struct fb_req *r)
{
    return MHD_lookup_connection_value(r->conn, MHD_COOKIE_KIND, SHARE_COOKIE);
}

struct MHD_Response *fb_ports_authenticate(struct fb_req *r, unsigned *status)
{
    const char *tok = fb_req_query(r, "share");
    bool from_query = tok != NULL;
    if (tok == NULL)
        tok = cookie_token(r);
    if (tok == NULL)
        return fb_resp_error_new(FB_ERR_UNAUTHORIZED, status,
                                 "missing API key (Authorization: Bearer <key>) or share token");
    unsigned port = 0;
    int64_t expires = 0;
    cleanup_error fb_error_t err = NULL;
    if (parse_port(r->params[1], &port) < 0 || strlen(tok) >= sizeof r->share_token ||
        fb_share_verify(r->api->core, r->params[0], port, tok, r->tenant, &expires, &err) < 0)
        return fb_resp_error_new(FB_ERR_UNAUTHORIZED, status, "invalid or expired share token");
    fb_strlcpy(r->share_token, tok, sizeof r->share_token);
    r->share_expires = expires;
    r->share_set_cookie = from_query;
    return NULL;
}

/* ---- a growing text buffer, bounded ---- */

#define HEAD_OUT_MAX (512 * 1024) /* MHD's 256 KiB per connection bounds what comes in */

struct text {
    char *s;
    size_t len, cap;
    bool failed;
};

static void text_addn(struct text *t, const char *s, size_t n)
{
    if (t->failed)
        return;
    if (t->len + n + 1 > HEAD_OUT_MAX) {
        t->failed = true;
        return;
    }
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *ns = realloc(t->s, cap);
        if (ns == NULL) {
            t->failed = true;
            return;
        }
        t->s = ns;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}

static void text_add(struct text *t, const char *s)
{
    text_addn(t, s, strlen(s));
}

static void text_addf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_addf(struct text *t, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf)
        t->failed = true;
    else
        text_addn(t, buf, (size_t)n);
}

static void text_freep(struct text *t)
{
    free(t->s);
}

/* ---- the request target ---- */

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Whether the raw query key k (n bytes) decodes to "share", the way MHD
 * decodes it: a disguised "sh%61re" must not slip through to the server. */
static bool key_is_share(const char *k, size_t n)
{
    static const char want[] = "share";
    size_t w = 0;
    for (size_t i = 0; i < n; i++, w++) {
        char c = k[i];
        if (c == '%' && i + 2 < n && hexval(k[i + 1]) >= 0 && hexval(k[i + 2]) >= 0) {
            c = (char)(hexval(k[i + 1]) * 16 + hexval(k[i + 2]));
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (w >= sizeof want - 1 || c != want[w])
            return false;
    }
    return w == sizeof want - 1;
}

/* The target for the server: the raw path after /ports/PORT ("/" when
 * there is none) and the raw query less its share parameters.  Raw, so
 * that the server sees the client's own escaping. */
static int upstream_target(struct fb_req *r, struct text *out, fb_error_t *err)
{
    const char *p = r->raw_uri;
    if (p == NULL)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "URL too long");
    for (const char *c = p; *c; c++)
        if ((unsigned char)*c <= 0x20 || *c == 0x7f)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "control character in the URL");
    const char *segs[] = {"v1", "sandboxes", r->params[0], "ports", r->params[1]};
    for (size_t i = 0; i < sizeof segs / sizeof segs[0]; i++) {
        size_t n = strlen(segs[i]);
        if (p[0] != '/' || strncmp(p + 1, segs[i], n) != 0 ||
            (p[n + 1] != '/' && p[n + 1] != '?' && p[n + 1]))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "write the sandbox id and port of a ports URL without escapes");
        p += n + 1;
    }
    size_t plen = strcspn(p, "?");
    if (plen == 0)
        text_add(out, "/");
    else
        text_addn(out, p, plen);
    if (p[plen] != '?')
        return 0;
    bool first = true;
    for (const char *q = p + plen + 1; *q;) {
        size_t n = strcspn(q, "&");
        size_t kn = strcspn(q, "=&");
        if (n > 0 && !key_is_share(q, kn)) {
            text_add(out, first ? "?" : "&");
            text_addn(out, q, n);
            first = false;
        }
        q += n;
        if (*q == '&')
            q++;
    }
    return 0;
}

/* ---- request headers ---- */

struct head_ctx {
    struct text *t;
    bool ws;
    const char *connection;
};

/* Cookie without the share cookie, which is the daemon's, not the app's. */
static void add_cookie(struct text *t, const char *value)
{
    bool any = false;
    for (const char *p = value; *p;) {
        while (*p == ' ' || *p == ';')
            p++;
        size_t n = strcspn(p, ";");
        while (n > 0 && p[n - 1] == ' ')
            n--;
        if (n > 0 && !(strncmp(p, SHARE_COOKIE "=", sizeof SHARE_COOKIE) == 0)) {
            text_add(t, any ? "; " : "Cookie: ");
            text_addn(t, p, n);
            any = true;
        }
        p += n;
    }
    if (any)
        text_add(t, "\r\n");
}

static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    struct head_ctx *h = cls;
    /* never for the sandbox: the API key; replaced: what the daemon sets
     * itself; hop-by-hop: what describes the client's connection only */
    static const char *const drop[] = {"Authorization",
                                       "Host",
                                       "Content-Length",
                                       "Expect",
                                       "Connection",
                                       "Keep-Alive",
                                       "TE",
                                       "Trailer",
                                       "Transfer-Encoding",
                                       "X-Forwarded-For",
                                       "X-Forwarded-Proto",
                                       "X-Forwarded-Host",
                                       "X-Forwarded-Prefix"};
    if (value == NULL)
        value = "";
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
        if (strcasecmp(key, drop[i]) == 0)
            return MHD_YES;
    if (strncasecmp(key, "Proxy-", 6) == 0)
        return MHD_YES;
    if (strcasecmp(key, "Upgrade") == 0) {
        if (h->ws)
            text_addf(h->t, "Upgrade: %.900s\r\n", value);
        return MHD_YES;
    }
    if (h->connection != NULL && fb_http_list_has(h->connection, key))
        return MHD_YES;
    if (strcasecmp(key, "Cookie") == 0) {
        add_cookie(h->t, value);
        return MHD_YES;
    }
    text_add(h->t, key);
    text_add(h->t, ": ");
    text_add(h->t, value);
    text_add(h->t, "\r\n");
    return MHD_YES;
}

static void client_address(struct fb_req *r, char *out, size_t len)
{
    out[0] = '\0';
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci == NULL || ci->client_addr == NULL)
        return;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)len);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)len);
}

static int build_head(struct fb_req *r, unsigned port, bool ws, struct text *t, fb_error_t *err)
{
    text_add(t, r->route->method);
    text_add(t, " ");
    if (upstream_target(r, t, err) < 0)
        return -1;
    text_add(t, " HTTP/1.1\r\n");
    const char *host = fb_req_header(r, "Host");
    char fallback[32];
    snprintf(fallback, sizeof fallback, "127.0.0.1:%u", port);
    if (host == NULL || host[0] == '\0')
        host = fallback;
    text_addf(t, "Host: %.900s\r\n", host);
    struct head_ctx h = {.t = t, .ws = ws, .connection = fb_req_header(r, "Connection")};
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, add_header, &h);
    char ip[64];
    client_address(r, ip, sizeof ip);
    const char *xff = fb_req_header(r, "X-Forwarded-For");
    if (xff != NULL && ip[0])
        text_addf(t, "X-Forwarded-For: %.900s, %s\r\n", xff, ip);
    else if (xff != NULL || ip[0])
        text_addf(t, "X-Forwarded-For: %.900s\r\n", xff ? xff : ip);
    text_addf(t, "X-Forwarded-Proto: http\r\nX-Forwarded-Host: %.900s\r\n", host);
    text_addf(t, "X-Forwarded-Prefix: /v1/sandboxes/%s/ports/%u\r\n", r->params[0], port);
    const char *m = r->route->method;
    if (r->received > 0 || strcmp(m, "POST") == 0 || strcmp(m, "PUT") == 0 || strcmp(m, "PATCH") == 0)
        text_addf(t, "Content-Length: %lld\r\n", r->received);
    text_add(t, ws ? "Connection: Upgrade\r\n\r\n" : "Connection: close\r\n\r\n");
    if (t->failed)
        return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "request headers too large to forward");
    return 0;
}

/* Sends the head and the spooled body.  A server may answer before it has
 * read all of the body and close: its answer still counts, so a failed
 * send is not an error here. */
static void send_request(struct fb_req *r, int fd, const struct text *head)
{
    struct timeval tv = {.tv_sec = SEND_TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (fb_write_all(fd, head->s, head->len) < 0)
        return;
    if (r->received <= 0 || r->spool_fd < 0)
        return;
    off_t off = 0;
    while (off < r->received) {
        ssize_t n = sendfile(fd, r->spool_fd, &off, (size_t)(r->received - off));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
    }
}

struct MHD_Response *fb_h_port_proxy(struct fb_req *r, unsigned *status)
{
    unsigned port = 0;
    if (parse_port(r->params[1], &port) < 0)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "port: '%s' is not a port number (1..65535)",
                                 r->params[1]);
    cleanup_error fb_error_t err = NULL;
    bool ws = fb_req_wants_websocket(r);
    __attribute__((cleanup(text_freep))) struct text head = {0};
    if (build_head(r, port, ws, &head, &err) < 0)
        return fb_resp_error(err, status);
    int fd = fb_port_connect(r->api->core, r->tenant, r->params[0], port, &err);
    if (fd < 0)
        return fb_resp_error(err, status);
    send_request(r, fd, &head);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct fb_upstream *u = NULL;
    if (fb_upstream_read_head(r->api, fd, ci ? ci->connect_fd : -1, strcmp(r->route->method, "HEAD") == 0,
                              port, &u, &err) < 0)
        return fb_resp_error(err, status);
    struct MHD_Response *resp = fb_upstream_response(r, u, ws, status);
    if (resp != NULL && r->share_set_cookie) {
        /* relative sub-requests of a shared page carry the token from here on */
        int64_t left = r->share_expires - fb_now_ms() / 1000;
        char cookie[512];
        snprintf(cookie, sizeof cookie,
                 SHARE_COOKIE "=%s; Path=/v1/sandboxes/%s/ports/%u/; Max-Age=%lld; HttpOnly; SameSite=Lax",
                 r->share_token, r->params[0], port, (long long)(left > 0 ? left : 0));
        MHD_add_response_header(resp, "Set-Cookie", cookie);
    }
    return resp;
}

struct MHD_Response *fb_h_shares_create(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *body = NULL;
    if (fb_req_json(r, &body, &err) < 0)
        return fb_resp_error(err, status);
    if (body == NULL)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "port: required");
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
    {
        if (strcmp(key, "port") != 0 && strcmp(key, "expires_in") != 0)
            return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "unknown field: %s", key);
    }
    json_t *jp = json_object_get(body, "port"), *je = json_object_get(body, "expires_in");
    if (!json_is_integer(jp))
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "port: required, an integer 1..65535");
    if (je != NULL && !json_is_integer(je))
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status,
                                 "expires_in: must be an integer number of seconds");
    int64_t port = json_integer_value(jp);
    int64_t expires_in = je ? json_integer_value(je) : SHARE_DEFAULT_SECONDS;
    char token[FB_SHARE_TOKEN_MAX];
    int64_t expires_at = 0;
    if (fb_share_create(r->api->core, r->tenant, r->params[0], port, expires_in, token, &expires_at, &err) <
        0)
        return fb_resp_error(err, status);
    char url[512];
    snprintf(url, sizeof url, "/v1/sandboxes/%s/ports/%lld/?share=%s", r->params[0], (long long)port, token);
    *status = 201;
    return fb_resp_json(json_pack("{s:s, s:s, s:I, s:I}", "url", url, "token", token, "port",
                                  (json_int_t)port, "expires_at", (json_int_t)expires_at));
}
