/* Background processes: /v1/sandboxes/{id}/processes[/{pid}[/...]]. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/util.h"
#include "../core/procs.h"
#include "api.h"

#define CHUNK_MAX (48u << 10)
#define WAIT_MS 1000
#define HEARTBEAT_MS 15000

static void spec_clearp(struct fb_proc_spec *s)
{
    fb_proc_spec_clear(s);
}

struct MHD_Response *fb_h_proc_start(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *body = NULL;
    __attribute__((cleanup(spec_clearp))) struct fb_proc_spec spec = {0};
    if (fb_req_json(r, &body, &err) < 0)
        return fb_resp_error(err, status);
    if (body == NULL)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "cmd: required");
    if (fb_proc_spec_parse(body, &spec, &err) < 0)
        return fb_resp_error(err, status);
    json_t *out = NULL;
    if (fb_proc_start(r->api->core, r->tenant, r->params[0], &spec, &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 201;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_proc_list(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *out = NULL;
    if (fb_proc_list(r->api->core, r->tenant, r->params[0], &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_proc_get(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *out = NULL;
    if (fb_proc_get(r->api->core, r->tenant, r->params[0], r->params[1], &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_proc_stdin(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    const char *eof = fb_req_query(r, "eof");
    if (eof != NULL && strcmp(eof, "true") != 0 && strcmp(eof, "false") != 0)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "eof: must be true or false");
    if (fb_proc_stdin(r->api->core, r->tenant, r->params[0], r->params[1], r->body, r->body_len,
                      eof != NULL && strcmp(eof, "true") == 0, &err) < 0)
        return fb_resp_error(err, status);
    *status = 204;
    return fb_resp_empty();
}

static const struct {
    const char *name;
    int num;
} signals[] = {
    {"HUP", 1},   {"INT", 2},   {"QUIT", 3},  {"ABRT", 6},  {"KILL", 9},  {"USR1", 10}, {"USR2", 12},
    {"PIPE", 13}, {"ALRM", 14}, {"TERM", 15}, {"CONT", 18}, {"STOP", 19}, {"TSTP", 20}, {"WINCH", 28},
};

int fb_proc_signal_parse(json_t *v)
{
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        return n >= 1 && n <= 64 ? (int)n : 0;
    }
    const char *s = json_string_value(v);
    if (s == NULL)
        return 0;
    if (strncasecmp(s, "SIG", 3) == 0)
        s += 3;
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
        if (strcasecmp(s, signals[i].name) == 0)
            return signals[i].num;
    return 0;
}

struct MHD_Response *fb_h_proc_signal(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *body = NULL;
    if (fb_req_json(r, &body, &err) < 0)
        return fb_resp_error(err, status);
    int sig = fb_proc_signal_parse(json_object_get(body, "signal"));
    if (!json_is_object(body) || json_object_size(body) != 1 || sig == 0)
        return fb_resp_error_new(
            FB_ERR_BAD_REQUEST, status,
            "body must be {\"signal\": NAME or NUMBER}, e.g. \"TERM\", \"KILL\", \"INT\" or 15");
    if (fb_proc_signal(r->api->core, r->tenant, r->params[0], r->params[1], sig, &err) < 0)
        return fb_resp_error(err, status);
    *status = 204;
    return fb_resp_empty();
}

struct MHD_Response *fb_h_proc_resize(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *body = NULL;
    if (fb_req_json(r, &body, &err) < 0)
        return fb_resp_error(err, status);
    json_t *c = json_object_get(body, "cols"), *w = json_object_get(body, "rows");
    if (!json_is_object(body) || json_object_size(body) != 2 || !json_is_integer(c) || !json_is_integer(w))
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "body must be {\"cols\": N, \"rows\": N}");
    json_int_t cols = json_integer_value(c), rows = json_integer_value(w);
    if (fb_proc_resize(r->api->core, r->tenant, r->params[0], r->params[1], cols > 1000 ? 0 : (int)cols,
                       rows > 1000 ? 0 : (int)rows, &err) < 0)
        return fb_resp_error(err, status);
    *status = 204;
    return fb_resp_empty();
}

/* ---- output ---- */

struct out_stream {
    struct fb_api *api;
    struct fb_proc_reader rd;
    bool follow, sse, done;
    char *line;
    size_t len, off;
    int64_t last_ms;
};

static void out_stream_free(void *cls)
{
    struct out_stream *s = cls;
    fb_proc_reader_clear(&s->rd);
    free(s->line);
    free(s);
}

/* Queues ev (stolen) as the next line: NDJSON, or an SSE event whose id is
 * the offset to resume from (EventSource sends it back on reconnect). */
static void queue_event(struct out_stream *s, json_t *ev)
{
    char type[16];
    fb_strlcpy(type,
               json_string_value(json_object_get(ev, "type")) ? json_string_value(json_object_get(ev, "type"))
                                                              : "message",
               sizeof type);
    if (strcmp(type, "exit") == 0 || strcmp(type, "lost") == 0 || strcmp(type, "end") == 0)
        s->done = true;
    cleanup_free char *j = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    free(s->line);
    s->line = NULL;
    s->len = s->off = 0;
    if (j == NULL)
        return;
    size_t jl = strlen(j), cap = jl + 128;
    s->line = malloc(cap);
    if (s->line == NULL)
        return;
    int n = s->sse ? snprintf(s->line, cap, "id: %llu\nevent: %s\ndata: %s\n\n",
                              (unsigned long long)s->rd.offset, type, j)
                   : snprintf(s->line, cap, "%s\n", j);
    s->len = n > 0 && (size_t)n < cap ? (size_t)n : 0;
    s->last_ms = fb_mono_ms();
}

static ssize_t out_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct out_stream *s = cls;
    for (;;) {
        if (s->off < s->len) {
            size_t n = s->len - s->off < max ? s->len - s->off : max;
            memcpy(buf, s->line + s->off, n);
            s->off += n;
            return (ssize_t)n;
        }
        if (s->done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        json_t *ev = fb_proc_reader_next(&s->rd, CHUNK_MAX);
        if (ev != NULL) {
            queue_event(s, ev);
            continue;
        }
        if (!s->follow) {
            queue_event(s, json_pack("{s:s, s:I}", "type", "end", "offset", (json_int_t)s->rd.offset));
            continue;
        }
        /* a stopping daemon cuts the stream short (the client sees it
         * unfinished and resumes from its offset later): a follower of a
         * process that runs on must not hold the stop up */
        if (atomic_load(&s->api->stopping))
            return MHD_CONTENT_READER_END_WITH_ERROR;
        /* a client that went away is noticed at the next write: idle
         * streams carry a heartbeat so that it comes */
        if (fb_mono_ms() - s->last_ms >= HEARTBEAT_MS) {
            if (s->sse) {
                static const char ping[] = ": heartbeat\n\n";
                s->last_ms = fb_mono_ms();
                size_t n = sizeof ping - 1 < max ? sizeof ping - 1 : max;
                memcpy(buf, ping, n);
                return (ssize_t)n;
            }
            queue_event(s, json_pack("{s:s, s:I}", "type", "heartbeat", "offset", (json_int_t)s->rd.offset));
            continue;
        }
        fb_proc_reader_wait(&s->rd, WAIT_MS);
    }
}

struct MHD_Response *fb_h_proc_output(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    const char *accept = fb_req_header(r, "Accept");
    bool sse = accept != NULL && strstr(accept, "text/event-stream") != NULL;
    uint64_t offset = 0;
    if (fb_parse_offset(fb_req_query(r, "offset"), &offset) < 0)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "offset: must be a byte offset (0 or more)");
    /* an EventSource that reconnects says where it was */
    if (sse && fb_parse_offset(fb_req_header(r, "Last-Event-ID"), &offset) < 0)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "Last-Event-ID: must be a byte offset");
    const char *follow = fb_req_query(r, "follow");
    if (follow != NULL && strcmp(follow, "true") != 0 && strcmp(follow, "false") != 0)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "follow: must be true or false");
    struct out_stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    s->api = r->api;
    s->sse = sse;
    s->follow = follow != NULL && strcmp(follow, "true") == 0;
    s->last_ms = fb_mono_ms();
    if (fb_proc_reader_open(r->api->core, r->tenant, r->params[0], r->params[1], offset, &s->rd, &err) < 0) {
        out_stream_free(s);
        return fb_resp_error(err, status);
    }
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 65536, out_stream_read, s, out_stream_free);
    if (resp == NULL) {
        out_stream_free(s);
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    }
    MHD_add_response_header(resp, "Content-Type", sse ? "text/event-stream" : "application/x-ndjson");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    *status = 200;
    return resp;
}
