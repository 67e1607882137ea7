/* The per-sandbox gate that serialises memory captures (memory
 * checkpoints, forks, hibernation) with the requests that talk to a
 * sandbox's init (commands, file operations, background processes).
 *
 * A CRIU dump cannot take a process holding a connection to the daemon
 * (the daemon is outside the sandbox), so a capture closes the gate: new
 * requests wait at it, and the capture waits until the requests already
 * inside have left and their workers in the sandbox have ended. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/util.h"
#include "core.h"
#include "internal.h"

struct gate_entry {
    char id[FB_ID_MAX];
    int active;
    bool closed;
};

struct fb_gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct gate_entry *items;
    size_t n, cap;
};

static struct fb_gate *gate_of(struct fb_core *core)
{
    pthread_mutex_lock(&core->lock);
    if (core->gate == NULL) {
        core->gate = calloc(1, sizeof *core->gate);
        if (core->gate != NULL) {
            pthread_mutex_init(&core->gate->lock, NULL);
            pthread_cond_init(&core->gate->cond, NULL);
        }
    }
    struct fb_gate *g = core->gate;
    pthread_mutex_unlock(&core->lock);
    return g;
}

void fb_gate_free(struct fb_core *core)
{
    if (core->gate == NULL)
        return;
    pthread_mutex_destroy(&core->gate->lock);
    pthread_cond_destroy(&core->gate->cond);
    free(core->gate->items);
    free(core->gate);
    core->gate = NULL;
}

/* The entry of id, made if missing; NULL when out of memory.  Under lock. */
static struct gate_entry *entry(struct fb_gate *g, const char *id)
{
    for (size_t i = 0; i < g->n; i++)
        if (strcmp(g->items[i].id, id) == 0)
            return &g->items[i];
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 32;
        struct gate_entry *v = realloc(g->items, cap * sizeof *v);
        if (v == NULL)
            return NULL;
        g->items = v;
        g->cap = cap;
    }
    struct gate_entry *e = &g->items[g->n++];
    memset(e, 0, sizeof *e);
    fb_strlcpy(e->id, id, sizeof e->id);
    return e;
}

/* Drops entries nobody uses (keeps the table as small as the sandboxes in
 * use).  Under lock. */
static void compact(struct fb_gate *g)
{
    for (size_t i = 0; i < g->n;)
        if (g->items[i].active == 0 && !g->items[i].closed)
            g->items[i] = g->items[--g->n];
        else
            i++;
}

static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

int fb_gate_enter(struct fb_core *core, const char *id, fb_error_t *err)
{
    struct fb_gate *g = gate_of(core);
    if (g == NULL)
        return 0;
    struct timespec ts;
    deadline_in(&ts, FB_GATE_WAIT_MS);
    pthread_mutex_lock(&g->lock);
    struct gate_entry *e = entry(g, id);
    int rc = 0;
    while (e != NULL && e->closed && rc == 0) {
        if (pthread_cond_timedwait(&g->cond, &g->lock, &ts) == ETIMEDOUT)
            rc = fb_error_set(err, FB_ERR_UNAVAILABLE, EBUSY,
                              "sandbox %s is being checkpointed; try again shortly", id);
        e = entry(g, id); /* the table may have moved */
    }
    if (rc == 0 && e != NULL)
        e->active++;
    pthread_mutex_unlock(&g->lock);
    return rc;
}

void fb_gate_leave(struct fb_core *core, const char *id)
{
    struct fb_gate *g = core->gate;
    if (g == NULL)
        return;
    pthread_mutex_lock(&g->lock);
    struct gate_entry *e = entry(g, id);
    if (e != NULL && e->active > 0)
        e->active--;
    compact(g);
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

int fb_gate_close(struct fb_core *core, const char *id, fb_error_t *err)
{
    struct fb_gate *g = gate_of(core);
    if (g == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    struct timespec ts;
    deadline_in(&ts, FB_GATE_WAIT_MS);
    pthread_mutex_lock(&g->lock);
    struct gate_entry *e = entry(g, id);
    int rc = e == NULL ? fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory") : 0;
    if (rc == 0)
        e->closed = true;
    while (rc == 0 && e->active > 0) {
        if (pthread_cond_timedwait(&g->cond, &g->lock, &ts) == ETIMEDOUT)
            rc = fb_error_set(err, FB_ERR_CONFLICT, EBUSY,
                              "requests to sandbox %s did not finish within %d s; a memory capture waits "
                              "for them",
                              id, FB_GATE_WAIT_MS / 1000);
        e = entry(g, id);
    }
    if (rc < 0 && e != NULL)
        e->closed = false;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
    return rc;
}

void fb_gate_open(struct fb_core *core, const char *id)
{
    struct fb_gate *g = core->gate;
    if (g == NULL)
        return;
    pthread_mutex_lock(&g->lock);
    struct gate_entry *e = entry(g, id);
    if (e != NULL)
        e->closed = false;
    compact(g);
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}
