/* POST /v1/sandboxes/{id}/exec: buffered JSON or streamed NDJSON. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/text.h"
#include "../common/util.h"
#include "../common/wire.h"
#include "../core/exec.h"
#include "api.h"

static void exec_clearp(struct fb_exec_spec *s)
{
    fb_exec_spec_clear(s);
}

/* Whether the OOM killer struck in the sandbox while the command ran: the
 * cgroup's counter is read before and after (a concurrent command's OOM in
 * the same sandbox would be counted too). */
struct oom_probe {
    struct fb_core *core;
    char id[64];
    uint64_t before;
};

static bool oom_happened(const struct oom_probe *p)
{
    return fb_exec_oom_count(p->core, p->id) > p->before;
}

/* init caps output per stream; the daemon enforces the same cap itself,
 * since nothing from a sandbox may size the daemon's memory. */
/* A command init could not start is the request's fault (no such program,
 * bad cwd or user), unless the sandbox is out of processes or memory:
 * then it is worth trying again. */
static enum fb_error_kind exec_error_kind(json_t *result)
{
    int e = (int)json_integer_value(json_object_get(result, "errno"));
    return e == EAGAIN || e == ENOMEM ? FB_ERR_UNAVAILABLE : FB_ERR_BAD_REQUEST;
}

static struct MHD_Response *exec_buffered(int fd, int64_t cap, struct oom_probe *oom, unsigned *status)
{
    bool dropped = false;
    struct fb_outbuf out = {0}, errb = {0};
    cleanup_error fb_error_t err = NULL;
    struct MHD_Response *resp = NULL;
    for (;;) {
        struct fb_frame f;
        if (fb_wire_recv(fd, &f) < 0) {
            fb_error_set(&err, FB_ERR_UNAVAILABLE, 0, "the sandbox went away while the command ran");
            resp = fb_resp_error(err, status);
            break;
        }
        if (f.type == FB_MSG_STDOUT || f.type == FB_MSG_STDERR) {
            struct fb_outbuf *b = f.type == FB_MSG_STDOUT ? &out : &errb;
            size_t room = b->len < (size_t)cap ? (size_t)cap - b->len : 0;
            size_t take = f.len < room ? f.len : room;
            dropped |= take < f.len;
            if (take > 0)
                fb_outbuf_add(b, f.data, take);
            free(f.data);
            continue;
        }
        cleanup_json json_t *res = NULL;
        cleanup_error fb_error_t rerr = NULL;
        int r = f.type == FB_MSG_RESULT ? 0 : -1;
        json_t *j = NULL;
        if (r == 0) {
            j = fb_wire_frame_json(&f);
            if (j && !json_is_true(json_object_get(j, "ok"))) {
                const char *m = json_string_value(json_object_get(j, "error"));
                fb_error_set(&rerr, exec_error_kind(j), 0, "%s", m ? m : "exec failed");
                r = -1;
            }
        }
        free(f.data);
        res = j;
        if (r < 0 || res == NULL) {
            if (rerr == NULL)
                fb_error_set(&rerr, FB_ERR_INTERNAL, EPROTO, "malformed answer from sandbox init");
            resp = fb_resp_error(rerr, status);
            break;
        }
        json_object_del(res, "ok");
        if (dropped)
            json_object_set_new(res, "truncated", json_true());
        json_object_set_new(res, "oom_killed", json_boolean(oom_happened(oom)));
        fb_json_set_text(res, "stdout", out.data, out.len);
        fb_json_set_text(res, "stderr", errb.data, errb.len);
        *status = 200;
        resp = fb_resp_json(json_incref(res));
        break;
    }
    free(out.data);
    free(errb.data);
    return resp;
}

/* Streaming state: one NDJSON line at a time from init's frames. */
struct exec_stream {
    int fd;
    struct fb_frame first; /* read before the response started */
    bool have_first, done;
    struct fb_utf8_carry carry; /* UTF-8 sequences cut by a chunk's end */
    struct oom_probe oom;
};

/* The next event to send, or NULL at the end. */
static json_t *next_event(void *ctx)
{
    struct exec_stream *s = ctx;
    while (!s->done) {
        struct fb_frame f;
        if (s->have_first) {
            f = s->first;
            s->have_first = false;
        } else if (fb_wire_recv(s->fd, &f) < 0) {
            s->done = true;
            return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "code", "unavailable",
                             "message", "the sandbox went away while the command ran");
        }
        if (f.type == FB_MSG_STDOUT || f.type == FB_MSG_STDERR) {
            json_t *ev = fb_output_event(&s->carry, f.type == FB_MSG_STDOUT ? 0 : 1, f.data, f.len, false);
            free(f.data);
            if (ev != NULL)
                return ev;
            continue;
        }
        s->done = true;
        json_t *res = f.type == FB_MSG_RESULT ? fb_wire_frame_json(&f) : NULL;
        free(f.data);
        /* flush held-back bytes first: they are ill-formed by now */
        for (int w = 0; w < 2; w++) {
            if (s->carry.len[w] > 0) {
                json_t *ev = fb_output_event(&s->carry, w, "", 0, true);
                if (ev != NULL) {
                    s->done = false;
                    s->have_first = true;
                    s->first.type = FB_MSG_RESULT;
                    s->first.data = res ? json_dumps(res, JSON_COMPACT) : NULL;
                    s->first.len = s->first.data ? (uint32_t)strlen(s->first.data) : 0;
                    json_decref(res);
                    return ev;
                }
            }
        }
        if (res == NULL || !json_is_true(json_object_get(res, "ok"))) {
            const char *m = res ? json_string_value(json_object_get(res, "error")) : NULL;
            json_t *ev = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "code", "internal",
                                   "message", m ? m : "malformed answer from sandbox init");
            json_decref(res);
            return ev;
        }
        json_object_del(res, "ok");
        json_object_set_new(res, "oom_killed", json_boolean(oom_happened(&s->oom)));
        json_object_set_new(res, "type", json_string("exit"));
        return res;
    }
    return NULL;
}

static void stream_free(void *cls)
{
    struct exec_stream *s = cls;
    close(s->fd); /* a client that left mid-stream kills the command */
    if (s->have_first)
        free(s->first.data);
    free(s);
}

static bool wants_ndjson(struct fb_req *r)
{
    const char *accept = fb_req_header(r, "Accept");
    return accept != NULL && strstr(accept, "application/x-ndjson") != NULL;
}

struct MHD_Response *fb_h_exec(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *body = NULL;
    __attribute__((cleanup(exec_clearp))) struct fb_exec_spec spec = {0};
    if (fb_req_json(r, &body, &err) < 0)
        return fb_resp_error(err, status);
    if (body == NULL)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "cmd: required");
    if (fb_exec_spec_parse(body, &spec, &err) < 0)
        return fb_resp_error(err, status);
    struct oom_probe oom = {.core = r->api->core};
    fb_strlcpy(oom.id, r->params[0], sizeof oom.id);
    oom.before = fb_exec_oom_count(r->api->core, oom.id);
    cleanup_close int fd = fb_exec_start(r->api->core, r->tenant, r->params[0], &spec, &err);
    if (fd < 0)
        return fb_resp_error(err, status);
    if (!wants_ndjson(r))
        return exec_buffered(fd, spec.max_output, &oom, status);

    /* the first frame decides between an HTTP error and a stream */
    struct fb_frame first;
    if (fb_wire_recv(fd, &first) < 0)
        return fb_resp_error_new(FB_ERR_UNAVAILABLE, status, "the sandbox went away");
    if (first.type == FB_MSG_RESULT) {
        cleanup_json json_t *j = fb_wire_frame_json(&first);
        if (j != NULL && !json_is_true(json_object_get(j, "ok"))) {
            free(first.data);
            const char *m = json_string_value(json_object_get(j, "error"));
            return fb_resp_error_new(exec_error_kind(j), status, "%s", m ? m : "exec failed");
        }
    }
    struct exec_stream *s = calloc(1, sizeof *s);
    if (s == NULL) {
        free(first.data);
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    }
    s->fd = fb_steal_fd(&fd);
    s->oom = oom;
    s->first = first;
    s->have_first = true;
    struct MHD_Response *resp = fb_resp_events(next_event, stream_free, s);
    if (resp == NULL)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    *status = 200;
    return resp;
}
