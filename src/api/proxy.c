/* "Ports in", upstream half: the answer of a server inside a sandbox,
 * parsed with http_parser, relayed to the client as it arrives.  Nothing
 * the sandbox sends may size the daemon's memory: the head is bounded,
 * the body passes through fixed buffers. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <http_parser.h>

#include "../common/cleanup.h"
#include "../common/log.h"
#include "../common/util.h"
#include "proxy.h"
#include "upgrade.h"

#define HEAD_MAX (64 * 1024) /* names and values of the answer's headers */
#define HEADERS_MAX 256
#define IO_BUF (16 * 1024)
#define HEAD_TIMEOUT_MS (300 * 1000) /* for the head; a body may take forever (SSE) */
#define RELAY_BUF (64 * 1024)
#define POLL_SLICE_MS 500 /* how often waits look at the client and at a stop */

struct fb_upstream {
    struct fb_api *api;
    int fd, client_fd;
    unsigned port;
    http_parser p;
    char arena[HEAD_MAX]; /* "name\0value\0" per header */
    size_t arena_len, nhdr;
    uint32_t name_off[HEADERS_MAX], value_off[HEADERS_MAX];
    bool in_value, too_big, interim, head_done, msg_done, head_request, failed, eof;
    unsigned status;
    uint64_t length; /* body length, or UINT64_MAX when not known */
    char in[IO_BUF];
    size_t in_len, in_off;
    /* body bytes parsed but not yet taken by MHD: one execute of at most
     * IO_BUF input bytes yields at most IO_BUF of body, and the parser is
     * only fed when this is empty */
    char out[IO_BUF];
    size_t out_len, out_off;
};

static int arena_add(struct fb_upstream *u, const char *at, size_t len)
{
    if (u->arena_len + len + 1 > HEAD_MAX) {
        u->too_big = true;
        return 1;
    }
    memcpy(u->arena + u->arena_len, at, len);
    u->arena_len += len;
    return 0;
}

/* Ends the current header: NUL after its value (an empty one if the
 * parser never called on_header_value). */
static int finish_header(struct fb_upstream *u)
{
    if (u->nhdr == 0)
        return 0;
    if (!u->in_value) {
        if (arena_add(u, "", 1) != 0)
            return 1;
        u->value_off[u->nhdr - 1] = (uint32_t)u->arena_len;
    }
    u->in_value = false;
    return arena_add(u, "", 1);
}

static int on_field(http_parser *p, const char *at, size_t len)
{
    struct fb_upstream *u = p->data;
    if (u->nhdr == 0 || u->in_value || u->value_off[u->nhdr - 1] != UINT32_MAX) {
        if (finish_header(u) != 0 || u->nhdr == HEADERS_MAX) {
            u->too_big = true;
            return 1;
        }
        u->name_off[u->nhdr] = (uint32_t)u->arena_len;
        u->value_off[u->nhdr] = UINT32_MAX;
        u->nhdr++;
    }
    return arena_add(u, at, len);
}

static int on_value(http_parser *p, const char *at, size_t len)
{
    struct fb_upstream *u = p->data;
    if (u->nhdr == 0)
        return 1;
    if (!u->in_value) {
        if (arena_add(u, "", 1) != 0)
            return 1;
        u->value_off[u->nhdr - 1] = (uint32_t)u->arena_len;
        u->in_value = true;
    }
    return arena_add(u, at, len);
}

static int on_headers_complete(http_parser *p)
{
    struct fb_upstream *u = p->data;
    if (finish_header(u) != 0)
        return -1;
    u->status = p->status_code;
    /* 100 Continue, 103 Early Hints ...: the final answer follows */
    if (u->status >= 100 && u->status < 200 && u->status != 101) {
        u->interim = true;
        return 0;
    }
    u->head_done = true;
    u->length = (p->flags & F_CONTENTLENGTH) && !(p->flags & F_CHUNKED) ? p->content_length : UINT64_MAX;
    return u->head_request ? 1 : 0; /* 1: no body follows a HEAD's answer */
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    struct fb_upstream *u = p->data;
    if (u->out_len + len > sizeof u->out)
        return 1; /* cannot happen: see out */
    memcpy(u->out + u->out_len, at, len);
    u->out_len += len;
    return 0;
}

static int on_message_complete(http_parser *p)
{
    struct fb_upstream *u = p->data;
    if (u->interim) {
        u->interim = false;
        u->arena_len = u->nhdr = 0;
        u->in_value = false;
        return 0;
    }
    u->msg_done = true;
    return 0;
}

static const http_parser_settings settings = {
    .on_header_field = on_field,
    .on_header_value = on_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* Feeds bytes (len 0: the upstream closed) to the parser; 0, or -1 for a
 * malformed answer.  Whatever follows a complete answer is ignored. */
static int feed(struct fb_upstream *u, const char *data, size_t len)
{
    size_t n = http_parser_execute(&u->p, &settings, data, len);
    u->in_off += n;
    if (u->msg_done || u->p.upgrade)
        return 0;
    return u->too_big || HTTP_PARSER_ERRNO(&u->p) != HPE_OK ? -1 : 0;
}

/* Waits until fd can be read.  -1 with errno ETIMEDOUT (deadline passed;
 * -1: none), ECONNRESET (the client hung up) or ESHUTDOWN (the daemon is
 * stopping). */
static int wait_readable(struct fb_api *api, int fd, int client_fd, int64_t deadline)
{
    for (;;) {
        if (atomic_load(&api->stopping)) {
            errno = ESHUTDOWN;
            return -1;
        }
        int slice = POLL_SLICE_MS;
        if (deadline >= 0) {
            int64_t left = deadline - fb_mono_ms();
            if (left <= 0) {
                errno = ETIMEDOUT;
                return -1;
            }
            if (left < slice)
                slice = (int)left;
        }
        struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = client_fd, .events = POLLRDHUP}};
        int n = poll(p, client_fd >= 0 ? 2 : 1, slice);
        if (n < 0 && errno != EINTR)
            return -1;
        if (n <= 0)
            continue;
        if (client_fd >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
            errno = ECONNRESET;
            return -1;
        }
        if (p[0].revents)
            return 0;
    }
}

int fb_upstream_read_head(struct fb_api *api, int fd, int client_fd, bool head_request, unsigned port,
                          struct fb_upstream **out, fb_error_t *err)
{
    struct fb_upstream *u = calloc(1, sizeof *u);
    if (u == NULL) {
        close(fd);
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "proxy state");
    }
    u->api = api;
    u->fd = fd;
    u->client_fd = client_fd;
    u->port = port;
    u->head_request = head_request;
    http_parser_init(&u->p, HTTP_RESPONSE);
    u->p.data = u;
    int64_t deadline = fb_mono_ms() + HEAD_TIMEOUT_MS;
    while (!u->head_done) {
        if (wait_readable(api, fd, client_fd, deadline) < 0) {
            int e = errno;
            fb_upstream_free(u);
            if (e == ETIMEDOUT)
                return fb_error_set(err, FB_ERR_BAD_GATEWAY, 0,
                                    "the server on port %u sent no answer within %d s", port,
                                    HEAD_TIMEOUT_MS / 1000);
            return fb_error_set(err, FB_ERR_BAD_GATEWAY, e, "waiting for the server on port %u", port);
        }
        ssize_t n = read(fd, u->in, sizeof u->in);
        if (n < 0 && errno == EINTR)
            continue;
        u->in_len = n > 0 ? (size_t)n : 0;
        u->in_off = 0;
        int rc = n < 0 ? -1 : feed(u, u->in, u->in_len);
        if (rc == 0 && n == 0 && !u->head_done)
            rc = -1;
        if (rc < 0) {
            enum http_errno he = HTTP_PARSER_ERRNO(&u->p);
            bool big = u->too_big || he == HPE_HEADER_OVERFLOW;
            fb_upstream_free(u);
            if (n <= 0)
                return fb_error_set(err, FB_ERR_BAD_GATEWAY, n < 0 ? errno : 0,
                                    "the server on port %u closed the connection without answering", port);
            if (big)
                return fb_error_set(err, FB_ERR_BAD_GATEWAY, 0,
                                    "the server on port %u sent more than %d headers or %d bytes of them",
                                    port, HEADERS_MAX, HEAD_MAX);
            return fb_error_set(err, FB_ERR_BAD_GATEWAY, 0, "malformed answer from the server on port %u: %s",
                                port, http_errno_description(he));
        }
    }
    *out = u;
    return 0;
}

unsigned fb_upstream_status(const struct fb_upstream *u)
{
    return u->status;
}

void fb_upstream_free(struct fb_upstream *u)
{
    if (u == NULL)
        return;
    if (u->fd >= 0)
        close(u->fd);
    free(u);
}

/* ---- streamed body ---- */

static ssize_t body_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct fb_upstream *u = cls;
    for (;;) {
        if (u->out_off < u->out_len) {
            size_t n = u->out_len - u->out_off < max ? u->out_len - u->out_off : max;
            memcpy(buf, u->out + u->out_off, n);
            u->out_off += n;
            return (ssize_t)n;
        }
        u->out_off = u->out_len = 0;
        if (u->msg_done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        /* a server that stops mid-body ends the client's answer as broken,
         * never as complete */
        if (u->failed || u->eof)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (u->in_off < u->in_len) {
            if (feed(u, u->in + u->in_off, u->in_len - u->in_off) < 0)
                u->failed = true;
            continue;
        }
        if (wait_readable(u->api, u->fd, u->client_fd, -1) < 0) {
            u->failed = true;
            continue;
        }
        ssize_t n = read(u->fd, u->in, sizeof u->in);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            u->failed = true;
            continue;
        }
        u->in_len = (size_t)n;
        u->in_off = 0;
        if (n == 0)
            u->eof = true; /* a body read until close ends here */
        if (feed(u, u->in, u->in_len) < 0)
            u->failed = true;
    }
}

static void body_free(void *cls)
{
    fb_upstream_free(cls);
}

/* ---- headers ---- */

static bool name_is(const char *name, const char *want)
{
    return strcasecmp(name, want) == 0;
}

/* Headers that describe one hop, not the answer, and those MHD writes
 * itself from the response it sends. */
static bool hop_by_hop(const char *name, const char *connection)
{
    static const char *const hop[] = {"Connection", "Keep-Alive",     "TE",  "Trailer", "Transfer-Encoding",
                                      "Upgrade",    "Content-Length", "Date"};
    for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
        if (name_is(name, hop[i]))
            return true;
    return strncasecmp(name, "Proxy-", 6) == 0 || (connection != NULL && fb_http_list_has(connection, name));
}

static const char *header(const struct fb_upstream *u, const char *name)
{
    for (size_t i = 0; i < u->nhdr; i++)
        if (name_is(u->arena + u->name_off[i], name))
            return u->arena + u->value_off[i];
    return NULL;
}

static void copy_headers(struct MHD_Response *resp, const struct fb_upstream *u)
{
    const char *connection = header(u, "Connection");
    for (size_t i = 0; i < u->nhdr; i++) {
        const char *name = u->arena + u->name_off[i], *value = u->arena + u->value_off[i];
        /* MHD refuses CR/LF in names and values itself; a refused header
         * is dropped, never sent in pieces */
        if (!hop_by_hop(name, connection))
            MHD_add_response_header(resp, name, value);
    }
}

/* ---- WebSocket relay ---- */

struct pipe_buf {
    char *data;
    size_t len, off, cap;
};

struct relay {
    struct fb_api *api;
    int up;          /* owned */
    MHD_socket down; /* MHD's: closed through urh */
    struct MHD_UpgradeResponseHandle *urh;
    struct pipe_buf to_up, to_down;
};

static int buf_init(struct pipe_buf *b, const char *data, size_t len)
{
    b->cap = len > RELAY_BUF ? len : RELAY_BUF;
    b->data = malloc(b->cap);
    if (b->data == NULL)
        return -1;
    memcpy(b->data, data, len);
    b->len = len;
    return 0;
}

/* Moves bytes from fd into b (if room) or from b to fd (if any); -1 at
 * EOF or on an error. */
static int pump_in(int fd, struct pipe_buf *b)
{
    if (b->off == b->len)
        b->off = b->len = 0;
    ssize_t n = recv(fd, b->data + b->len, b->cap - b->len, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0)
        return -1;
    b->len += (size_t)n;
    return 0;
}

static int pump_out(int fd, struct pipe_buf *b)
{
    ssize_t n = send(fd, b->data + b->off, b->len - b->off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n < 0)
        return -1;
    b->off += (size_t)n;
    return 0;
}

static void *relay_main(void *arg)
{
    struct relay *rl = arg;
    for (;;) {
        if (atomic_load(&rl->api->stopping))
            break;
        struct pollfd p[2] = {{.fd = rl->down}, {.fd = rl->up}};
        if (rl->to_up.len < rl->to_up.cap)
            p[0].events |= POLLIN;
        if (rl->to_down.off < rl->to_down.len)
            p[0].events |= POLLOUT;
        if (rl->to_down.len < rl->to_down.cap)
            p[1].events |= POLLIN;
        if (rl->to_up.off < rl->to_up.len)
            p[1].events |= POLLOUT;
        int n = poll(p, 2, POLL_SLICE_MS);
        if (n < 0 && errno != EINTR)
            break;
        if (n <= 0)
            continue;
        /* either side closing ends the relay: WebSocket has its own close
         * handshake, already passed through by then */
        if (((p[0].revents & POLLOUT) && pump_out(rl->down, &rl->to_down) < 0) ||
            ((p[1].revents & POLLOUT) && pump_out(rl->up, &rl->to_up) < 0))
            break;
        if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && pump_in(rl->down, &rl->to_up) < 0)
            break;
        if ((p[1].revents & (POLLIN | POLLHUP | POLLERR)) && pump_in(rl->up, &rl->to_down) < 0) {
            pump_out(rl->down, &rl->to_down); /* the server's last words, best effort */
            break;
        }
    }
    close(rl->up);
    MHD_upgrade_action(rl->urh, MHD_UPGRADE_ACTION_CLOSE);
    struct fb_api *api = rl->api;
    free(rl->to_up.data);
    free(rl->to_down.data);
    free(rl);
    fb_relay_thread_done(api);
    return NULL;
}

static void on_upgrade(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
                       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    (void)conn;
    struct fb_upstream *u = cls;
    struct fb_req *r = con_cls;
    if (r != NULL && r->proxy == u)
        r->proxy = NULL; /* ours from here on */
    struct relay *rl = calloc(1, sizeof *rl);
    bool ok = rl != NULL && buf_init(&rl->to_up, extra_in, extra_in_size) == 0 &&
              buf_init(&rl->to_down, u->in + u->in_off, u->in_len - u->in_off) == 0;
    if (ok) {
        rl->api = u->api;
        rl->up = u->fd;
        rl->down = sock;
        rl->urh = urh;
        u->fd = -1;
        cleanup_error fb_error_t err = NULL;
        ok = fb_relay_thread_start(rl->api, relay_main, rl, &err) == 0;
        if (!ok)
            close(rl->up);
    }
    if (!ok) {
        fb_warn("ports: cannot start a WebSocket relay");
        if (rl != NULL) {
            free(rl->to_up.data);
            free(rl->to_down.data);
            free(rl);
        }
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
    }
    fb_upstream_free(u);
}

static void upstream_free_cb(void *p)
{
    fb_upstream_free(p);
}

struct MHD_Response *fb_upstream_response(struct fb_req *r, struct fb_upstream *u, bool upgrade,
                                          unsigned *status)
{
    struct MHD_Response *resp;
    if (u->status == 101) {
        if (!upgrade || !u->p.upgrade) {
            unsigned port = u->port;
            fb_upstream_free(u);
            return fb_resp_error_new(FB_ERR_BAD_GATEWAY, status,
                                     "the server on port %u switched protocols without being asked to", port);
        }
        resp = MHD_create_response_for_upgrade(on_upgrade, u);
        if (resp == NULL) {
            fb_upstream_free(u);
            return NULL;
        }
        copy_headers(resp, u);
        const char *up = header(u, "Upgrade");
        MHD_add_response_header(resp, "Upgrade", up ? up : "websocket");
        MHD_add_response_header(resp, "Connection", "Upgrade");
        r->proxy = u;
        r->proxy_free = upstream_free_cb;
        *status = 101;
        return resp;
    }
    if (u->status == 204 || u->status == 304) {
        resp = fb_resp_empty();
        if (resp != NULL)
            copy_headers(resp, u);
        *status = u->status;
        fb_upstream_free(u);
        return resp;
    }
    uint64_t size = u->length == UINT64_MAX ? MHD_SIZE_UNKNOWN : u->length;
    resp = MHD_create_response_from_callback(size, IO_BUF, body_read, u, body_free);
    if (resp == NULL) {
        fb_upstream_free(u);
        return NULL;
    }
    copy_headers(resp, u);
    *status = u->status;
    return resp;
}
