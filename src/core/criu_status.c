/* Whether CRIU works on this host: the self-test (runtime/criu.c) runs on a
 * thread of its own at start-up so that a hanging or slow criu never holds
 * up the daemon; until it is done the status is "checking".  Memory
 * features (hibernate, memory checkpoints, fork) ask fb_core_criu_require(). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../common/util.h"
#include "../runtime/criu.h"
#include "core.h"

/* Each criu run of the self-test gets this long; the whole test is bounded
 * by four of them plus ~2 s. */
#define CRIU_STEP_TIMEOUT_MS 10000

struct fb_core_criu {
    pthread_mutex_t lock;
    struct fb_criu_result result; /* guarded by lock */
    atomic_bool cancel;
    pthread_t thread;
    bool started;
    char configured[PATH_MAX];
    char work_dir[PATH_MAX];
};

static void *selftest_main(void *arg)
{
    struct fb_core_criu *c = arg;
    struct fb_criu_probe probe = {
        .configured = c->configured,
        .work_dir = c->work_dir,
        .step_timeout_ms = CRIU_STEP_TIMEOUT_MS,
        .cancel = &c->cancel,
    };
    struct fb_criu_result *r = malloc(sizeof *r);
    if (r == NULL) {
        pthread_mutex_lock(&c->lock);
        c->result.state = FB_CRIU_UNAVAILABLE;
        snprintf(c->result.reason, sizeof c->result.reason, "self-test: out of memory");
        pthread_mutex_unlock(&c->lock);
        return NULL;
    }
    fb_criu_selftest(&probe, r);
    if (r->state == FB_CRIU_AVAILABLE)
        fb_info("criu %s at %s works (dump/restore self-test took %lld ms)", r->version, r->path,
                (long long)r->took_ms);
    else if (!atomic_load(&c->cancel))
        fb_warn("memory checkpoints unavailable: %s", r->reason);
    pthread_mutex_lock(&c->lock);
    c->result = *r;
    pthread_mutex_unlock(&c->lock);
    free(r);
    return NULL;
}

int fb_core_criu_start(struct fb_core *core, fb_error_t *err)
{
    struct fb_core_criu *c = calloc(1, sizeof *c);
    if (c == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "criu status");
    pthread_mutex_init(&c->lock, NULL);
    atomic_init(&c->cancel, false);
    c->result.state = FB_CRIU_CHECKING;
    fb_strlcpy(c->configured, core->cfg.criu_path, sizeof c->configured);
    if (fb_snprintf(c->work_dir, sizeof c->work_dir, "%s/tmp", core->cfg.state_dir) < 0) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "criu work dir");
    }
    core->criu = c;
    int r = pthread_create(&c->thread, NULL, selftest_main, c);
    if (r != 0) {
        c->result.state = FB_CRIU_UNAVAILABLE;
        snprintf(c->result.reason, sizeof c->result.reason, "cannot start the self-test thread: %s",
                 strerror(r));
        return 0;
    }
    c->started = true;
    return 0;
}

void fb_core_criu_stop(struct fb_core *core)
{
    struct fb_core_criu *c = core->criu;
    if (c == NULL)
        return;
    atomic_store(&c->cancel, true); /* a running criu is killed within ~100 ms */
    if (c->started)
        pthread_join(c->thread, NULL);
    pthread_mutex_destroy(&c->lock);
    free(c);
    core->criu = NULL;
}

/* A copy of the current verdict. */
static void snapshot(struct fb_core *core, struct fb_criu_result *out)
{
    struct fb_core_criu *c = core->criu;
    if (c == NULL) {
        memset(out, 0, sizeof *out);
        out->state = FB_CRIU_UNAVAILABLE;
        snprintf(out->reason, sizeof out->reason, "not probed");
        return;
    }
    pthread_mutex_lock(&c->lock);
    *out = c->result;
    pthread_mutex_unlock(&c->lock);
}

int fb_core_criu_require(struct fb_core *core, fb_error_t *err)
{
    struct fb_criu_result *r = malloc(sizeof *r);
    if (r == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "criu status");
    snapshot(core, r);
    int ret = 0;
    if (r->state == FB_CRIU_CHECKING)
        ret = fb_error_set(err, FB_ERR_UNAVAILABLE, EAGAIN,
                           "memory checkpoints: the CRIU self-test is still running; try again shortly");
    else if (r->state != FB_CRIU_AVAILABLE)
        ret = fb_error_set(err, FB_ERR_UNSUPPORTED, ENOTSUP, "memory checkpoints need a working CRIU: %s",
                           r->reason);
    free(r);
    return ret;
}

json_t *fb_core_criu_info(struct fb_core *core)
{
    struct fb_criu_result *r = malloc(sizeof *r);
    if (r == NULL)
        return json_null();
    snapshot(core, r);
    static const char *const states[] = {"checking", "available", "unavailable"};
    json_t *o = json_pack("{s:s, s:b, s:o, s:o, s:o}", "status", states[r->state], "available",
                          r->state == FB_CRIU_AVAILABLE, "version",
                          r->version[0] ? json_string(r->version) : json_null(), "path",
                          r->path[0] ? json_string(r->path) : json_null(), "reason",
                          r->state == FB_CRIU_UNAVAILABLE ? json_string(r->reason) : json_null());
    if (o != NULL && r->state != FB_CRIU_CHECKING)
        json_object_set_new(o, "selftest_ms", json_integer(r->took_ms));
    free(r);
    return o;
}

bool fb_core_criu_missing(struct fb_core *core, char *buf, size_t len)
{
    struct fb_criu_result *r = malloc(sizeof *r);
    if (r == NULL)
        return false;
    snapshot(core, r);
    bool missing = r->state == FB_CRIU_UNAVAILABLE;
    if (missing)
        snprintf(buf, len, "working CRIU (hibernate, memory checkpoints and fork answer 501): %s", r->reason);
    free(r);
    return missing;
}

int fb_core_criu_path(struct fb_core *core, char *out, size_t len, fb_error_t *err)
{
    if (fb_core_criu_require(core, err) < 0)
        return -1;
    struct fb_criu_result *r = malloc(sizeof *r);
    if (r == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "criu status");
    snapshot(core, r);
    int rc =
        fb_strlcpy(out, r->path, len) < 0 ? fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "criu path") : 0;
    free(r);
    return rc;
}
