/* Pausing sandboxes with the cgroup freezer: on request (POST .../pause,
 * .../resume), and after idle_timeout seconds with no request and no
 * process but init, in which case the next request resumes it before it is
 * served.  A paused sandbox keeps its memory; its CPU time stops. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../runtime/cgroup.h"
#include "core.h"
#include "internal.h"

#define IDLE_PREFIX "idle: "
#define PAUSED_BY_REQUEST "paused by request: POST /v1/sandboxes/{id}/resume continues it"

struct activity {
    char id[FB_ID_MAX];
    int64_t last_ms;
};

struct fb_idle {
    pthread_mutex_t lock;
    struct activity *items;
    size_t n, cap;
};

static struct fb_idle *idle_of(struct fb_core *core)
{
    pthread_mutex_lock(&core->lock);
    if (core->idle == NULL) {
        core->idle = calloc(1, sizeof *core->idle);
        if (core->idle != NULL)
            pthread_mutex_init(&core->idle->lock, NULL);
    }
    struct fb_idle *t = core->idle;
    pthread_mutex_unlock(&core->lock);
    return t;
}

void fb_idle_free(struct fb_core *core)
{
    if (core->idle == NULL)
        return;
    pthread_mutex_destroy(&core->idle->lock);
    free(core->idle->items);
    free(core->idle);
    core->idle = NULL;
}

/* When the sandbox was last asked for something; a sandbox never seen by
 * this daemon counts from now (a restart is not idleness). */
static int64_t last_active(struct fb_core *core, const char *id, bool touch)
{
    struct fb_idle *t = idle_of(core);
    int64_t now = fb_mono_ms();
    if (t == NULL)
        return now;
    pthread_mutex_lock(&t->lock);
    size_t i = 0;
    while (i < t->n && strcmp(t->items[i].id, id) != 0)
        i++;
    if (i == t->n) {
        if (t->n == t->cap) {
            size_t cap = t->cap ? t->cap * 2 : 64;
            struct activity *n = realloc(t->items, cap * sizeof *n);
            if (n == NULL) {
                pthread_mutex_unlock(&t->lock);
                return now;
            }
            t->items = n;
            t->cap = cap;
        }
        fb_strlcpy(t->items[t->n].id, id, sizeof t->items[0].id);
        t->items[t->n++].last_ms = now;
    }
    if (touch)
        t->items[i].last_ms = now;
    int64_t v = t->items[i].last_ms;
    pthread_mutex_unlock(&t->lock);
    return v;
}

static void forget(struct fb_core *core, const char *id)
{
    struct fb_idle *t = idle_of(core);
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->items[i].id, id) == 0) {
            t->items[i] = t->items[--t->n];
            break;
        }
    pthread_mutex_unlock(&t->lock);
}

/* Freezes or thaws row's cgroup and records the new state. */
static int set_paused(struct fb_core *core, struct fb_sandbox_row *row, bool paused, const char *reason,
                      fb_error_t *err)
{
    if (fb_cgroup_freeze(&core->cgroups, row->id, paused, err) < 0)
        return fb_error_wrap(err, "%s sandbox %s", paused ? "pause" : "resume", row->id);
    fb_strlcpy(row->state, paused ? "paused" : "running", sizeof row->state);
    fb_strlcpy(row->state_reason, reason, sizeof row->state_reason);
    if (fb_store_sandbox_update(core->store, row, err) < 0) {
        /* the store is what clients see: put the cgroup back the same way */
        cleanup_error fb_error_t undo = NULL;
        fb_cgroup_freeze(&core->cgroups, row->id, !paused, &undo);
        return -1;
    }
    return 0;
}

int fb_core_wake(struct fb_core *core, struct fb_sandbox_row *row, fb_error_t *err)
{
    last_active(core, row->id, true);
    if (strcmp(row->state, "paused") != 0 ||
        strncmp(row->state_reason, IDLE_PREFIX, strlen(IDLE_PREFIX)) != 0)
        return 0;
    pthread_mutex_lock(&core->pause_lock);
    /* another request may have woken it meanwhile */
    cleanup_error fb_error_t gerr = NULL;
    struct fb_sandbox_row now = {0};
    int r = 0;
    if (fb_store_sandbox_get(core->store, NULL, row->id, &now, &gerr) == 0 &&
        strcmp(now.state, "paused") == 0)
        r = set_paused(core, &now, false, "", err);
    if (r == 0) {
        fb_strlcpy(row->state, "running", sizeof row->state);
        row->state_reason[0] = '\0';
        fb_info("sandbox %s resumed: a request came after an idle pause", row->id);
    }
    fb_sandbox_row_clear(&now);
    pthread_mutex_unlock(&core->pause_lock);
    return r;
}

static int change(struct fb_core *core, const char *tenant, const char *id, bool pause, json_t **out,
                  fb_error_t *err)
{
    pthread_mutex_lock(&core->pause_lock);
    struct fb_sandbox_row row = {0};
    int r = fb_store_sandbox_get(core->store, tenant, id, &row, err);
    if (r == 0 && strcmp(row.state, "deleting") == 0)
        r = fb_error_set(err, FB_ERR_NOT_FOUND, 0, "sandbox %s not found", id);
    if (r == 0 && !pause && strcmp(row.state, "hibernated") == 0) {
        r = fb_memory_resume_locked(core, &row, err);
        if (r == 0)
            last_active(core, id, true);
        pthread_mutex_unlock(&core->pause_lock);
        fb_sandbox_row_clear(&row);
        return r < 0 ? fb_error_wrap(err, "resume sandbox %s", id)
                     : fb_sandbox_get(core, tenant, id, out, err);
    }
    const char *want_from = pause ? "running" : "paused";
    if (r == 0 && strcmp(row.state, want_from) != 0 && strcmp(row.state, pause ? "paused" : "running") != 0)
        r = fb_error_set(err, FB_ERR_CONFLICT, 0, "sandbox %s is %s", id, row.state);
    /* pausing a paused sandbox (or resuming a running one) changes nothing */
    if (r == 0 && strcmp(row.state, want_from) == 0)
        r = set_paused(core, &row, pause, pause ? PAUSED_BY_REQUEST : "", err);
    if (r == 0) {
        last_active(core, id, true);
        fb_info("sandbox %s %s", id, row.state);
    }
    pthread_mutex_unlock(&core->pause_lock);
    fb_sandbox_row_clear(&row);
    if (r < 0)
        return -1;
    return fb_sandbox_get(core, tenant, id, out, err);
}

int fb_sandbox_pause(struct fb_core *core, const char *tenant, const char *id, json_t **out, fb_error_t *err)
{
    if (!fb_cgroup_can_freeze(&core->cgroups))
        return fb_error_set(err, FB_ERR_UNSUPPORTED, 0,
                            "pause needs a cgroup freezer (cgroup v2, or v1 freezer)");
    return change(core, tenant, id, true, out, err);
}

int fb_sandbox_resume(struct fb_core *core, const char *tenant, const char *id, json_t **out, fb_error_t *err)
{
    return change(core, tenant, id, false, out, err);
}

void fb_sandbox_pause_idle(struct fb_core *core)
{
    if (!fb_cgroup_can_freeze(&core->cgroups))
        return;
    struct fb_sandbox_row *rows = NULL;
    size_t n = 0;
    cleanup_error fb_error_t err = NULL;
    if (fb_store_sandbox_list(core->store, NULL, &rows, &n, &err) < 0)
        return;
    int64_t now = fb_mono_ms();
    for (size_t i = 0; i < n; i++) {
        struct fb_sandbox_row *row = &rows[i];
        if (strcmp(row->state, "running") != 0) {
            if (strcmp(row->state, "paused") != 0)
                forget(core, row->id);
            continue;
        }
        cleanup_json json_t *spec = row->spec_json ? json_loads(row->spec_json, 0, NULL) : NULL;
        json_int_t idle = json_integer_value(json_object_get(spec, "idle_timeout"));
        if (idle <= 0 || now - last_active(core, row->id, false) < idle * 1000)
            continue;
        /* idle means nothing runs but init: no command, no background
         * process (and its keeper), no exec worker */
        struct fb_cgroup_usage u = {0};
        cleanup_error fb_error_t uerr = NULL;
        if (fb_cgroup_usage_read(&core->cgroups, row->id, &u, &uerr) < 0 || u.pids > 1)
            continue;
        char reason[128];
        snprintf(reason, sizeof reason,
                 IDLE_PREFIX "paused after %lld s without requests or processes; the next "
                             "request resumes it",
                 (long long)idle);
        pthread_mutex_lock(&core->pause_lock);
        cleanup_error fb_error_t perr = NULL;
        struct fb_sandbox_row cur = {0};
        /* a request between the list and now wins */
        if (fb_store_sandbox_get(core->store, NULL, row->id, &cur, &perr) == 0 &&
            strcmp(cur.state, "running") == 0 &&
            fb_mono_ms() - last_active(core, row->id, false) >= idle * 1000) {
            if (set_paused(core, &cur, true, reason, &perr) == 0)
                fb_info("sandbox %s paused: idle for %lld s", row->id, (long long)idle);
            else
                fb_warn("sandbox %s: idle pause: %s", row->id, perr->msg);
        }
        fb_sandbox_row_clear(&cur);
        pthread_mutex_unlock(&core->pause_lock);
    }
    fb_sandbox_rows_free(rows, n);
}
