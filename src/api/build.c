/* Template builds over HTTP: POST /v1/templates/{name}/build with the
 * context tar as the body, or POST /v1/templates with the Dockerfile in
 * JSON.  The build runs on a thread of its own; its progress goes out as
 * NDJSON while it runs, and a client that leaves cancels it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../core/build.h"
#include "../core/core.h"
#include "api.h"

#define QUEUE_BYTES_MAX (8 << 20) /* output waiting for a slow client: the RUN waits too */

/* builds in flight: the daemon's stop waits for them to wind down */
static pthread_mutex_t active_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t active_cond = PTHREAD_COND_INITIALIZER;
static int active;

struct stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    json_t *queue; /* events not sent yet */
    size_t queued_bytes;
    bool finished; /* the build thread is done */
    bool gone;     /* the client is */
    int refs;      /* the response and the build thread */
    struct fb_core *core;
    struct fb_build b;
    struct fb_utf8_carry carry;
};

static void stream_unref(struct stream *s)
{
    pthread_mutex_lock(&s->mu);
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (!last)
        return;
    json_decref(s->queue);
    fb_build_clear(&s->b);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* Both references at once: a build that never started. */
static void stream_drop(struct stream *s)
{
    stream_unref(s);
    stream_unref(s);
}

static void push(struct stream *s, json_t *ev)
{
    if (ev == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    /* a client reading slowly holds the build back rather than the daemon's memory growing */
    while (!s->gone && !s->core->stopping && s->queued_bytes > QUEUE_BYTES_MAX) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    json_t *d = json_object_get(ev, "data");
    s->queued_bytes += json_is_string(d) ? json_string_length(d) : 64;
    json_array_append_new(s->queue, ev);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void sink_event(void *ctx, json_t *ev)
{
    push(ctx, ev);
}

static void sink_output(void *ctx, int stream, const char *data, size_t len)
{
    struct stream *s = ctx;
    push(s, fb_output_event(&s->carry, stream, data, len, false));
}

static bool sink_cancelled(void *ctx)
{
    struct stream *s = ctx;
    pthread_mutex_lock(&s->mu);
    bool c = s->gone || s->core->stopping;
    pthread_mutex_unlock(&s->mu);
    return c;
}

static void *build_thread(void *arg)
{
    struct stream *s = arg;
    struct fb_build_sink sink = {sink_event, sink_output, sink_cancelled, s};
    fb_build_run(s->core, &s->b, &sink);
    pthread_mutex_lock(&s->mu);
    s->finished = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    stream_unref(s);
    pthread_mutex_lock(&active_lock);
    active--;
    pthread_cond_broadcast(&active_cond);
    pthread_mutex_unlock(&active_lock);
    return NULL;
}

static json_t *next_event(void *ctx)
{
    struct stream *s = ctx;
    pthread_mutex_lock(&s->mu);
    while (json_array_size(s->queue) == 0 && !s->finished) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        if (s->core->stopping && !s->finished) {
            s->gone = true; /* the build sees it and stops; the stream ends now */
            break;
        }
    }
    json_t *ev = NULL;
    if (json_array_size(s->queue) > 0) {
        ev = json_incref(json_array_get(s->queue, 0));
        json_array_remove(s->queue, 0);
        json_t *d = json_object_get(ev, "data");
        size_t n = json_is_string(d) ? json_string_length(d) : 64;
        s->queued_bytes = s->queued_bytes > n ? s->queued_bytes - n : 0;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return ev;
}

static void stream_done(void *ctx)
{
    struct stream *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->gone = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    stream_unref(s);
}

void fb_api_builds_wait(void)
{
    pthread_mutex_lock(&active_lock);
    while (active > 0)
        pthread_cond_wait(&active_cond, &active_lock);
    pthread_mutex_unlock(&active_lock);
}

/* Prepares s->b from text and starts it: an HTTP error before any
 * streaming, else the stream. */
static struct MHD_Response *start(struct fb_req *r, struct stream *s, const char *text, size_t len,
                                  const char *from, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    if (fb_build_prepare(r->api->core, &s->b, text, len, from, &err) < 0) {
        stream_drop(s);
        return fb_resp_error(err, status);
    }
    pthread_mutex_lock(&active_lock);
    active++;
    pthread_mutex_unlock(&active_lock);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &attr, build_thread, s);
    pthread_attr_destroy(&attr);
    if (e != 0) {
        pthread_mutex_lock(&active_lock);
        active--;
        pthread_mutex_unlock(&active_lock);
        stream_drop(s);
        return fb_resp_error_new(FB_ERR_UNAVAILABLE, status, "cannot start the build");
    }
    struct MHD_Response *resp = fb_resp_events(next_event, stream_done, s);
    if (resp == NULL)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    *status = 200;
    return resp;
}

static struct stream *stream_new(struct fb_req *r)
{
    struct stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->queue = json_array();
    s->refs = 2;
    s->core = r->api->core;
    s->b.context_fd = -1;
    s->b.timeout_s = FB_BUILD_TIMEOUT_DEFAULT;
    strcpy(s->b.network_mode, "none");
    return s;
}

/* build_args: an object of strings, bounded. */
static int parse_build_args(json_t *v, json_t **out, fb_error_t *err)
{
    *out = NULL;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_object(v) || json_object_size(v) > FB_ENV_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "build_args: an object of at most %d strings",
                            FB_ENV_MAX);
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x)
    {
        if (!json_is_string(x) || strlen(k) > FB_ENV_NAME_MAX || json_string_length(x) > FB_ENV_VALUE_MAX)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "build_args.%.64s: must be a string", k);
    }
    *out = json_incref(v);
    return 0;
}

static int parse_network(json_t *v, struct fb_build *b, fb_error_t *err)
{
    if (v == NULL || json_is_null(v))
        return 0;
    json_decref(b->allow);
    b->allow = NULL;
    return fb_network_spec_parse(v, b->network_mode, &b->allow, err);
}

struct MHD_Response *fb_h_template_build(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    struct stream *s = stream_new(r);
    if (s == NULL)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    fb_strlcpy(s->b.name, r->params[0], sizeof s->b.name);
    const char *q;
    int rc = 0;
    if ((q = fb_req_query(r, "network")) != NULL) {
        cleanup_json json_t *net = json_pack("{s:s}", "mode", q);
        rc = parse_network(net, &s->b, &err);
    }
    if (rc == 0 && (q = fb_req_query(r, "build_args")) != NULL) {
        cleanup_json json_t *args = json_loads(q, JSON_REJECT_DUPLICATES, NULL);
        rc = args == NULL ? fb_error_set(&err, FB_ERR_BAD_REQUEST, 0, "build_args: not a JSON object")
                          : parse_build_args(args, &s->b.build_args, &err);
    }
    if (rc == 0 && (q = fb_req_query(r, "timeout")) != NULL) {
        char *end;
        long long t = strtoll(q, &end, 10);
        if (*end != '\0' || t < 1 || t > FB_TIMEOUT_MAX)
            rc = fb_error_set(&err, FB_ERR_BAD_REQUEST, 0, "timeout: seconds, 1..%d", FB_TIMEOUT_MAX);
        s->b.timeout_s = t;
    }
    q = fb_req_query(r, "no_cache");
    s->b.no_cache = q != NULL && (strcmp(q, "1") == 0 || strcmp(q, "true") == 0);
    const char *path = fb_req_query(r, "dockerfile");
    cleanup_free char *text = NULL;
    size_t len = 0;
    if (rc == 0 && r->received == 0)
        rc = fb_error_set(&err, FB_ERR_BAD_REQUEST, 0, "the body must be the build context as a tar archive");
    if (rc == 0 &&
        (fb_snprintf(s->b.context_path, sizeof s->b.context_path, "%s.context", r->spool_path) < 0 ||
         link(r->spool_path, s->b.context_path) < 0)) {
        s->b.context_path[0] = '\0';
        rc = fb_error_sys(&err, "keep the context");
    }
    if (rc == 0 && (s->b.context_fd = open(s->b.context_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        rc = fb_error_sys(&err, "open the context");
    if (rc == 0)
        rc = fb_build_context_file(s->b.context_fd, path ? path : "Dockerfile", &text, &len, &err);
    if (rc < 0) {
        stream_drop(s);
        return fb_resp_error(err, status);
    }
    return start(r, s, text, len, fb_req_query(r, "from"), status);
}

struct MHD_Response *fb_h_template_create(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *body = NULL;
    if (fb_req_json(r, &body, &err) < 0)
        return fb_resp_error(err, status);
    static const char *const known[] = {"name",    "from",     "dockerfile", "build_args",
                                        "network", "no_cache", NULL};
    const char *k;
    json_t *v;
    if (!json_is_object(body))
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "the body must be a JSON object");
    json_object_foreach(body, k, v)
    {
        bool ok = false;
        for (size_t i = 0; known[i]; i++)
            ok |= strcmp(known[i], k) == 0;
        if (!ok)
            return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "unknown field \"%.64s\"", k);
    }
    const char *name = json_string_value(json_object_get(body, "name"));
    const char *df = json_string_value(json_object_get(body, "dockerfile"));
    const char *from = json_string_value(json_object_get(body, "from"));
    if (name == NULL || df == NULL)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "name and dockerfile are required strings");
    if (json_object_get(body, "from") != NULL && from == NULL)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "from: must be a template name");
    struct stream *s = stream_new(r);
    if (s == NULL)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    if (fb_strlcpy(s->b.name, name, sizeof s->b.name) < 0 ||
        parse_build_args(json_object_get(body, "build_args"), &s->b.build_args, &err) < 0 ||
        parse_network(json_object_get(body, "network"), &s->b, &err) < 0) {
        stream_drop(s);
        return err ? fb_resp_error(err, status)
                   : fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "name: at most %d bytes",
                                       FB_TEMPLATE_NAME_MAX);
    }
    s->b.no_cache = json_is_true(json_object_get(body, "no_cache"));
    return start(r, s, df, strlen(df), from ? from : "default", status);
}
