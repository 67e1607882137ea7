/* POST /v1/sandboxes/{id}/code: one cell of a persistent Python context,
 * answered as one JSON object or streamed as NDJSON. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/text.h"
#include "../core/code.h"
#include "../core/spec.h"
#include "api.h"

/* buffered answers keep this much of each stream */
#define OUTPUT_CAP FB_OUTPUT_DEFAULT

static void code_spec_clearp(struct fb_code_spec *s)
{
    fb_code_spec_clear(s);
}

struct outbuf {
    char *data;
    size_t len, cap;
};

static int outbuf_add(struct outbuf *b, const char *d, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *nb = realloc(b->data, cap);
        if (nb == NULL)
            return -ENOMEM;
        b->data = nb;
        b->cap = cap;
    }
    memcpy(b->data + b->len, d, n);
    b->len += n;
    return 0;
}

/* Sets key (and key_b64 when not UTF-8) on obj from raw bytes. */
static void set_text(json_t *obj, const char *key, const char *data, size_t len)
{
    if (fb_utf8_valid(data, len)) {
        json_object_set_new(obj, key, json_stringn(data ? data : "", len));
        return;
    }
    size_t ll = 0;
    cleanup_free char *lossy = fb_utf8_lossy(data, len, &ll);
    cleanup_free char *b64 = fb_base64_encode(data, len);
    char k64[32];
    snprintf(k64, sizeof k64, "%s_b64", key);
    json_object_set_new(obj, key, lossy ? json_stringn(lossy, ll) : json_null());
    json_object_set_new(obj, k64, b64 ? json_string(b64) : json_null());
}

/* Whether the client closed its end of the connection.  Only a hang-up
 * counts: bytes it may have sent ahead are not read here. */
static bool client_gone(void *arg)
{
    int fd = (int)(intptr_t)arg;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

/* The cell's result with the request's context (new reference). */
static json_t *result_json(struct fb_code_cell *cell, const char *context)
{
    json_t *res = json_deep_copy(fb_code_cell_result(cell));
    if (res != NULL)
        json_object_set_new(res, "context", json_string(context));
    return res;
}

static struct MHD_Response *code_buffered(struct fb_code_cell *cell, const char *context, unsigned *status)
{
    struct outbuf b[2] = {{0}, {0}};
    bool truncated = false;
    const char *data;
    size_t len;
    enum fb_code_event ev;
    while ((ev = fb_code_cell_next(cell, &data, &len)) != FB_CODE_DONE) {
        struct outbuf *o = &b[ev == FB_CODE_STDERR];
        size_t room = o->len < OUTPUT_CAP ? OUTPUT_CAP - o->len : 0;
        size_t take = len < room ? len : room;
        truncated |= take < len;
        if (take > 0 && outbuf_add(o, data, take) < 0)
            truncated = true;
    }
    json_t *res = result_json(cell, context);
    if (res != NULL) {
        set_text(res, "stdout", b[0].data, b[0].len);
        set_text(res, "stderr", b[1].data, b[1].len);
        json_object_set_new(res, "truncated", json_boolean(truncated));
    }
    free(b[0].data);
    free(b[1].data);
    if (res == NULL)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    *status = 200;
    return fb_resp_json(res);
}

/* Streaming: one NDJSON line per event of the cell. */
struct code_stream {
    struct fb_code_cell *cell;
    char context[FB_CODE_CONTEXT_MAX + 1];
    bool done;
    char *line;
    size_t line_len, line_off;
    char carry[2][4]; /* a UTF-8 sequence cut by a chunk's end */
    size_t carry_len[2];
};

static char *event_line(json_t *ev)
{
    if (ev == NULL)
        return NULL;
    char *s = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    if (s == NULL)
        return NULL;
    size_t n = strlen(s);
    char *l = realloc(s, n + 2);
    if (l == NULL) {
        free(s);
        return NULL;
    }
    l[n] = '\n';
    l[n + 1] = '\0';
    return l;
}

/* The event for one output chunk; a trailing partial UTF-8 sequence waits
 * for the next chunk unless flush.  NULL when nothing is left to send. */
static json_t *output_event(struct code_stream *s, int w, const char *data, size_t len, bool flush)
{
    size_t total = s->carry_len[w] + len;
    cleanup_free char *buf = malloc(total + 1);
    if (buf == NULL)
        return NULL;
    memcpy(buf, s->carry[w], s->carry_len[w]);
    if (len > 0)
        memcpy(buf + s->carry_len[w], data, len);
    size_t keep = flush ? total : fb_utf8_complete_prefix(buf, total);
    s->carry_len[w] = total - keep;
    memcpy(s->carry[w], buf + keep, s->carry_len[w]);
    if (keep == 0)
        return NULL;
    json_t *ev = json_pack("{s:s}", "type", w == 0 ? "stdout" : "stderr");
    if (ev == NULL)
        return NULL;
    if (fb_utf8_valid(buf, keep)) {
        json_object_set_new(ev, "data", json_stringn(buf, keep));
    } else {
        cleanup_free char *b64 = fb_base64_encode(buf, keep);
        json_object_set_new(ev, "data_b64", json_string(b64 ? b64 : ""));
    }
    return ev;
}

static char *next_line(struct code_stream *s)
{
    while (!s->done) {
        const char *data;
        size_t len;
        enum fb_code_event ev = fb_code_cell_next(s->cell, &data, &len);
        if (ev != FB_CODE_DONE) {
            json_t *j = output_event(s, ev == FB_CODE_STDERR, data, len, false);
            if (j != NULL)
                return event_line(j);
            continue;
        }
        for (int w = 0; w < 2; w++)
            if (s->carry_len[w] > 0) {
                json_t *j = output_event(s, w, "", 0, true);
                if (j != NULL)
                    return event_line(j);
            }
        s->done = true;
        json_t *res = result_json(s->cell, s->context);
        if (res != NULL)
            json_object_set_new(res, "type", json_string("result"));
        return event_line(res);
    }
    return NULL;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct code_stream *s = cls;
    if (s->line == NULL || s->line_off == s->line_len) {
        free(s->line);
        s->line = next_line(s);
        if (s->line == NULL)
            return MHD_CONTENT_READER_END_OF_STREAM;
        s->line_len = strlen(s->line);
        s->line_off = 0;
    }
    size_t n = s->line_len - s->line_off;
    if (n > max)
        n = max;
    memcpy(buf, s->line + s->line_off, n);
    s->line_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    struct code_stream *s = cls;
    fb_code_cell_free(s->cell); /* a cell its client left is interrupted */
    free(s->line);
    free(s);
}

struct MHD_Response *fb_h_code(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *body = NULL;
    __attribute__((cleanup(code_spec_clearp))) struct fb_code_spec spec = {0};
    if (fb_req_json(r, &body, &err) < 0)
        return fb_resp_error(err, status);
    if (body == NULL)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "code: required");
    if (fb_code_spec_parse(body, &spec, &err) < 0)
        return fb_resp_error(err, status);
    struct fb_code_cell *cell = NULL;
    if (fb_code_cell_start(r->api->core, r->tenant, r->params[0], &spec, &cell, &err) < 0)
        return fb_resp_error(err, status);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci != NULL)
        fb_code_cell_watch(cell, client_gone, (void *)(intptr_t)ci->connect_fd);
    const char *accept = fb_req_header(r, "Accept");
    if (accept == NULL || strstr(accept, "application/x-ndjson") == NULL) {
        struct MHD_Response *resp = code_buffered(cell, spec.context, status);
        fb_code_cell_free(cell);
        return resp;
    }
    struct code_stream *s = calloc(1, sizeof *s);
    if (s == NULL) {
        fb_code_cell_free(cell);
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    }
    s->cell = cell;
    memcpy(s->context, spec.context, sizeof s->context);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 65536, stream_read, s, stream_free);
    if (resp == NULL) {
        stream_free(s);
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    }
    MHD_add_response_header(resp, "Content-Type", "application/x-ndjson");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    *status = 200;
    return resp;
}
