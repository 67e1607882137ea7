/* Interactive attach to a background process over a WebSocket (RFC 6455):
 * GET /v1/sandboxes/{id}/processes/{pid}/attach.
 *
 * Client -> server: binary messages are bytes for the process's stdin (its
 * terminal); text messages are JSON control messages (resize, signal,
 * eof).  Server -> client: binary messages are output bytes as the keeper
 * writes them; text messages are events (exit, lost, dropped, error).
 * Framing is libwslay's.  After the upgrade the connection is served by a
 * relay thread of its own that polls the socket and the output's inotify
 * descriptor; a client that leaves only ends the relay, never the process.
 * Every buffer is bounded: client messages by FRAME_MAX, stdin not yet
 * handed to the keeper by STDIN_PENDING_MAX, output queued for the client
 * by OUT_PENDING_MAX (the relay stops reading output while it is full). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <wslay/wslay.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/text.h"
#include "../common/util.h"
#include "../core/procs.h"
#include "upgrade.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define FRAME_MAX (64u << 10)          /* largest message a client may send */
#define STDIN_PENDING_MAX (256u << 10) /* stdin gathered before it goes to the keeper */
#define OUT_PENDING_MAX (256u << 10)   /* output queued for a slow client */
#define OUT_CHUNK (32u << 10)          /* output bytes per binary message */
#define SLICE_MS 500                   /* how often the relay looks at a stop and the status */
#define PING_MS 30000                  /* an idle connection is pinged ... */
#define PEER_TIMEOUT_MS (3 * PING_MS)  /* ... and dropped when nothing came back */
#define CLOSE_WAIT_MS 5000             /* for the client's answer to our close */

struct attach {
    struct fb_api *api;
    char tenant[64], id[160], pid[160];
    struct fb_proc_reader rd;
    /* after the upgrade */
    MHD_socket sock;
    struct MHD_UpgradeResponseHandle *urh;
    wslay_event_context_ptr ws;
    char *extra; /* bytes MHD read past the handshake: the first frames */
    size_t extra_len, extra_off;
    char *in; /* stdin not yet handed to the keeper */
    size_t in_len;
    bool caught_up;      /* the reader has nothing new: wait for inotify */
    bool ended;          /* the exit (or lost) event is queued, then a close */
    uint16_t close_code; /* a close to send once the queue is empty */
    const char *close_why;
    bool close_queued;
    int64_t close_deadline, last_rx_ms, last_ping_ms;
};

static void attach_free(void *p)
{
    struct attach *a = p;
    if (a == NULL)
        return;
    if (a->ws != NULL)
        wslay_event_context_free(a->ws);
    fb_proc_reader_clear(&a->rd);
    free(a->extra);
    free(a->in);
    free(a);
}

/* ---- sending ---- */

static void queue(struct attach *a, enum wslay_opcode op, const void *data, size_t len)
{
    struct wslay_event_msg m = {.opcode = op, .msg = data, .msg_length = len};
    (void)wslay_event_queue_msg(a->ws, &m); /* refused only once a close is queued */
}

static void queue_json(struct attach *a, json_t *ev)
{
    cleanup_free char *s = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
    json_decref(ev);
    if (s != NULL)
        queue(a, WSLAY_TEXT_FRAME, s, strlen(s));
}

/* The close goes out once everything queued before it has: wslay sends
 * control frames ahead of queued messages. */
static void queue_close(struct attach *a, uint16_t code, const char *why)
{
    if (a->close_code == 0) {
        a->close_code = code;
        a->close_why = why;
        a->close_deadline = fb_mono_ms() + CLOSE_WAIT_MS;
    }
}

static void close_when_sent(struct attach *a)
{
    if (a->close_code != 0 && !a->close_queued && wslay_event_get_queued_msg_count(a->ws) == 0) {
        (void)wslay_event_queue_close(a->ws, a->close_code, (const uint8_t *)a->close_why,
                                      strlen(a->close_why));
        a->close_queued = true;
    }
}

static void queue_error(struct attach *a, const fb_error_t e)
{
    queue_json(a, json_pack("{s:s, s:s, s:s}", "type", "error", "code", fb_error_code(e->kind), "message",
                            e->msg ? e->msg : "error"));
}

/* One output event of the reader: bytes become a binary message, the end
 * an exit (or lost) message and a close. */
static void forward_event(struct attach *a, json_t *ev)
{
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (type == NULL)
        return;
    if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0 || strcmp(type, "pty") == 0) {
        json_t *d = json_object_get(ev, "data");
        if (json_is_string(d)) {
            queue(a, WSLAY_BINARY_FRAME, json_string_value(d), json_string_length(d));
            return;
        }
        const char *b64 = json_string_value(json_object_get(ev, "data_b64"));
        cleanup_free char *buf = b64 ? malloc(OUT_CHUNK + 4) : NULL;
        long n = buf ? fb_base64_decode(b64, strlen(b64), buf, OUT_CHUNK + 4) : -1;
        if (n > 0)
            queue(a, WSLAY_BINARY_FRAME, buf, (size_t)n);
        return;
    }
    if (strcmp(type, "dropped") == 0) {
        queue_json(a, json_incref(ev));
        return;
    }
    if (strcmp(type, "exit") == 0 || strcmp(type, "lost") == 0) {
        queue_json(a, json_incref(ev));
        queue_close(a, WSLAY_CODE_NORMAL_CLOSURE,
                    strcmp(type, "exit") == 0 ? "process exited" : "process lost");
        a->ended = true;
    }
}

/* Moves output into the send queue while the client keeps up. */
static void pump_output(struct attach *a)
{
    while (!a->ended && wslay_event_get_queued_msg_length(a->ws) < OUT_PENDING_MAX) {
        json_t *ev = fb_proc_reader_next(&a->rd, OUT_CHUNK);
        if (ev == NULL) {
            a->caught_up = true;
            return;
        }
        forward_event(a, ev);
        json_decref(ev);
    }
}

/* ---- receiving ---- */

static void flush_stdin(struct attach *a)
{
    if (a->in_len == 0)
        return;
    cleanup_error fb_error_t err = NULL;
    if (fb_proc_stdin(a->api->core, a->tenant, a->id, a->pid, a->in, a->in_len, false, &err) < 0)
        queue_error(a, err);
    a->in_len = 0;
}

static void control(struct attach *a, const uint8_t *data, size_t len)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *m = json_loadb((const char *)data, len, JSON_REJECT_DUPLICATES, NULL);
    const char *type = json_string_value(json_object_get(m, "type"));
    if (type != NULL && strcmp(type, "resize") == 0) {
        json_t *c = json_object_get(m, "cols"), *r = json_object_get(m, "rows");
        json_int_t cols = json_integer_value(c), rows = json_integer_value(r);
        if (!json_is_integer(c) || !json_is_integer(r))
            fb_error_set(&err, FB_ERR_BAD_REQUEST, 0, "resize: needs integer cols and rows");
        else
            fb_proc_resize(a->api->core, a->tenant, a->id, a->pid, cols > 1000 || cols < 0 ? 0 : (int)cols,
                           rows > 1000 || rows < 0 ? 0 : (int)rows, &err);
    } else if (type != NULL && strcmp(type, "signal") == 0) {
        int sig = fb_proc_signal_parse(json_object_get(m, "signal"));
        if (sig == 0)
            fb_error_set(&err, FB_ERR_BAD_REQUEST, 0, "signal: a name like \"INT\" or a number");
        else
            fb_proc_signal(a->api->core, a->tenant, a->id, a->pid, sig, &err);
    } else if (type != NULL && strcmp(type, "eof") == 0) {
        fb_proc_stdin(a->api->core, a->tenant, a->id, a->pid, NULL, 0, true, &err);
    } else {
        fb_error_set(&err, FB_ERR_BAD_REQUEST, 0,
                     "control messages are JSON objects of type resize, signal or eof");
    }
    if (err != NULL)
        queue_error(a, err);
}

static void on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *m, void *user)
{
    (void)ctx;
    struct attach *a = user;
    if (m->opcode == WSLAY_BINARY_FRAME) {
        if (a->in_len + m->msg_length > STDIN_PENDING_MAX)
            flush_stdin(a); /* cannot happen: ws_recv reads no more than fits */
        memcpy(a->in + a->in_len, m->msg, m->msg_length);
        a->in_len += m->msg_length;
    } else if (m->opcode == WSLAY_TEXT_FRAME) {
        flush_stdin(a); /* in order: bytes typed before a signal go first */
        control(a, m->msg, m->msg_length);
    }
}

static void on_frame_start(wslay_event_context_ptr ctx, const struct wslay_event_on_frame_recv_start_arg *f,
                           void *user)
{
    (void)ctx;
    (void)f;
    ((struct attach *)user)->last_rx_ms = fb_mono_ms();
}

static ssize_t ws_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
    (void)flags;
    struct attach *a = user;
    if (a->extra_off < a->extra_len) {
        size_t n = a->extra_len - a->extra_off < len ? a->extra_len - a->extra_off : len;
        memcpy(buf, a->extra + a->extra_off, n);
        a->extra_off += n;
        return (ssize_t)n;
    }
    /* the messages one read can complete fit in what is left of in: at
     * most the bytes read plus one message already begun */
    size_t room = STDIN_PENDING_MAX - a->in_len;
    if (room <= FRAME_MAX) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    if (len > room - FRAME_MAX)
        len = room - FRAME_MAX;
    ssize_t n = recv(a->sock, buf, len, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    if (n <= 0) { /* the client went away (or reset) */
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return n;
}

static ssize_t ws_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags, void *user)
{
    (void)flags;
    struct attach *a = user;
    ssize_t n = send(a->sock, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
        wslay_event_set_error(ctx, errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
                                       ? WSLAY_ERR_WOULDBLOCK
                                       : WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return n;
}

/* ---- the relay ---- */

static void *attach_main(void *arg)
{
    struct attach *a = arg;
    struct fb_api *api = a->api;
    a->last_rx_ms = a->last_ping_ms = fb_mono_ms();
    /* where the bytes that follow start: a client may resume from there */
    queue_json(a, json_pack("{s:s, s:I, s:b}", "type", "attached", "offset", (json_int_t)a->rd.offset, "pty",
                            a->rd.pty));
    if (a->extra_len > 0 && wslay_event_recv(a->ws) == 0)
        flush_stdin(a);
    for (;;) {
        int64_t now = fb_mono_ms();
        if (atomic_load(&api->stopping) && a->close_code == 0)
            queue_close(a, WSLAY_CODE_GOING_AWAY, "forkboxd is stopping");
        if (a->close_deadline != 0 && now >= a->close_deadline)
            break;
        if (now - a->last_rx_ms >= PEER_TIMEOUT_MS)
            break; /* no answer to three pings: the client is gone */
        if (now - a->last_ping_ms >= PING_MS) {
            queue(a, WSLAY_PING, "", 0);
            a->last_ping_ms = now;
        }
        pump_output(a);
        close_when_sent(a);
        if (wslay_event_want_write(a->ws) && wslay_event_send(a->ws) < 0)
            break;
        close_when_sent(a);
        if (!wslay_event_want_read(a->ws) && !wslay_event_want_write(a->ws))
            break; /* the close handshake is done (or reading failed) */
        struct pollfd p[2] = {{.fd = a->sock}, {.fd = -1}};
        if (wslay_event_want_read(a->ws))
            p[0].events |= POLLIN;
        if (wslay_event_want_write(a->ws))
            p[0].events |= POLLOUT;
        if (a->caught_up && !a->ended)
            p[1] = (struct pollfd){.fd = a->rd.notify_fd, .events = POLLIN};
        /* output not yet queued because the client is slow waits for
         * POLLOUT; output not yet written waits for inotify or the slice */
        int timeout = a->caught_up || a->ended || wslay_event_want_write(a->ws) ? SLICE_MS : 0;
        int n = poll(p, 2, timeout);
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
            int rc = wslay_event_recv(a->ws);
            flush_stdin(a);
            if (rc < 0)
                break;
        }
        if (n > 0 && p[1].revents)
            fb_proc_reader_wait(&a->rd, 0); /* drains the inotify events */
        a->caught_up = false;               /* look again: inotify, or the slice passed */
    }
    MHD_upgrade_action(a->urh, MHD_UPGRADE_ACTION_CLOSE);
    attach_free(a);
    fb_relay_thread_done(api);
    return NULL;
}

static void on_upgrade(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
                       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    (void)conn;
    struct attach *a = cls;
    struct fb_req *r = con_cls;
    if (r != NULL && r->proxy == a)
        r->proxy = NULL; /* ours from here on */
    a->sock = sock;
    a->urh = urh;
    static const struct wslay_event_callbacks cbs = {
        .recv_callback = ws_recv,
        .send_callback = ws_send,
        .on_frame_recv_start_callback = on_frame_start,
        .on_msg_recv_callback = on_msg,
    };
    cleanup_error fb_error_t err = NULL;
    bool ok = (a->in = malloc(STDIN_PENDING_MAX)) != NULL &&
              (extra_in_size == 0 || (a->extra = malloc(extra_in_size)) != NULL) &&
              wslay_event_context_server_init(&a->ws, &cbs, a) == 0;
    if (ok) {
        if (extra_in_size > 0)
            memcpy(a->extra, extra_in, extra_in_size);
        a->extra_len = extra_in_size;
        wslay_event_config_set_max_recv_msg_length(a->ws, FRAME_MAX);
        ok = fb_relay_thread_start(a->api, attach_main, a, &err) == 0;
    }
    if (!ok) {
        fb_warn("attach: cannot start a WebSocket relay%s%s", err ? ": " : "", err ? err->msg : "");
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        attach_free(a);
    }
}

/* ---- the handshake ---- */

/* Sec-WebSocket-Accept for key: base64(SHA-1(key + GUID)); 0 or -1. */
static int accept_value(const char *key, char *out, size_t outlen)
{
    char buf[128];
    unsigned char digest[20];
    int n = snprintf(buf, sizeof buf, "%s%s", key, WS_GUID);
    if (n < 0 || (size_t)n >= sizeof buf || gnutls_hash_fast(GNUTLS_DIG_SHA1, buf, (size_t)n, digest) != 0)
        return -1;
    cleanup_free char *b64 = fb_base64_encode(digest, sizeof digest);
    return b64 != NULL && fb_strlcpy(out, b64, outlen) >= 0 ? 0 : -1;
}

struct MHD_Response *fb_h_proc_attach(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    if (!fb_req_wants_websocket(r))
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status,
                                 "attach is a WebSocket endpoint: send Connection: Upgrade and "
                                 "Upgrade: websocket");
    const char *key = fb_req_header(r, "Sec-WebSocket-Key");
    const char *version = fb_req_header(r, "Sec-WebSocket-Version");
    char raw[32];
    if (key == NULL || strlen(key) != 24 || fb_base64_decode(key, 24, raw, sizeof raw) != 16)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status,
                                 "Sec-WebSocket-Key: must be 16 random bytes in base64");
    if (version == NULL || strcmp(version, "13") != 0)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "Sec-WebSocket-Version: only 13 is spoken");
    const char *off_s = fb_req_query(r, "offset"), *replay = fb_req_query(r, "replay");
    uint64_t offset = 0;
    if (off_s != NULL && fb_parse_offset(off_s, &offset) < 0)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "offset: must be a byte offset (0 or more)");
    if (replay != NULL && strcmp(replay, "true") != 0 && strcmp(replay, "false") != 0)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "replay: must be true or false");
    bool from_start = replay != NULL && strcmp(replay, "true") == 0;
    if (from_start && off_s != NULL)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "give offset or replay, not both");
    cleanup_json json_t *proc = NULL;
    if (fb_proc_get(r->api->core, r->tenant, r->params[0], r->params[1], &proc, &err) < 0)
        return fb_resp_error(err, status);
    const char *state = json_string_value(json_object_get(proc, "state"));
    /* only new output would follow: there is none to come */
    if (state != NULL && strcmp(state, "running") != 0 && off_s == NULL && !from_start)
        return fb_resp_error_new(FB_ERR_CONFLICT, status,
                                 "process %s has %s; replay its output with ?replay=true or read "
                                 "GET .../processes/%s/output",
                                 r->params[1], strcmp(state, "exited") == 0 ? "exited" : "been lost",
                                 r->params[1]);
    char accept[64];
    if (accept_value(key, accept, sizeof accept) < 0)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "cannot compute Sec-WebSocket-Accept");
    struct attach *a = calloc(1, sizeof *a);
    if (a == NULL)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    a->api = r->api;
    a->sock = -1;
    a->rd.dir_fd = a->rd.out_fd = a->rd.notify_fd = -1;
    fb_strlcpy(a->tenant, r->tenant, sizeof a->tenant);
    fb_strlcpy(a->id, r->params[0], sizeof a->id);
    fb_strlcpy(a->pid, r->params[1], sizeof a->pid);
    if (fb_proc_reader_open(r->api->core, r->tenant, a->id, a->pid, offset, &a->rd, &err) < 0) {
        attach_free(a);
        return fb_resp_error(err, status);
    }
    if (off_s == NULL && !from_start)
        fb_proc_reader_seek_end(&a->rd);
    struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgrade, a);
    if (resp == NULL) {
        attach_free(a);
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    }
    MHD_add_response_header(resp, "Upgrade", "websocket");
    MHD_add_response_header(resp, "Connection", "Upgrade");
    MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
    r->proxy = a;
    r->proxy_free = attach_free;
    *status = 101;
    return resp;
}
