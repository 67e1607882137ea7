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
    struct fb_outbuf b[2] = {{0}, {0}};
    bool truncated = false;
    const char *data;
    size_t len;
    enum fb_code_event ev;
    while ((ev = fb_code_cell_next(cell, &data, &len)) != FB_CODE_DONE) {
        struct fb_outbuf *o = &b[ev == FB_CODE_STDERR];
        size_t room = o->len < OUTPUT_CAP ? OUTPUT_CAP - o->len : 0;
        size_t take = len < room ? len : room;
        truncated |= take < len;
        if (take > 0 && fb_outbuf_add(o, data, take) < 0)
            truncated = true;
    }
    json_t *res = result_json(cell, context);
    if (res != NULL) {
        fb_json_set_text(res, "stdout", b[0].data, b[0].len);
        fb_json_set_text(res, "stderr", b[1].data, b[1].len);
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
    struct fb_utf8_carry carry; /* UTF-8 sequences cut by a chunk's end */
};

static json_t *next_event(void *ctx)
{
    struct code_stream *s = ctx;
    while (!s->done) {
        const char *data;
        size_t len;
        enum fb_code_event ev = fb_code_cell_next(s->cell, &data, &len);
        if (ev != FB_CODE_DONE) {
            json_t *j = fb_output_event(&s->carry, ev == FB_CODE_STDERR, data, len, false);
            if (j != NULL)
                return j;
            continue;
        }
        for (int w = 0; w < 2; w++)
            if (s->carry.len[w] > 0) {
                json_t *j = fb_output_event(&s->carry, w, "", 0, true);
                if (j != NULL)
                    return j;
            }
        s->done = true;
        json_t *res = result_json(s->cell, s->context);
        if (res != NULL)
            json_object_set_new(res, "type", json_string("result"));
        return res;
    }
    return NULL;
}

static void stream_free(void *cls)
{
    struct code_stream *s = cls;
    fb_code_cell_free(s->cell); /* a cell its client left is interrupted */
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
    struct MHD_Response *resp = fb_resp_events(next_event, stream_free, s);
    if (resp == NULL)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    *status = 200;
    return resp;
}
