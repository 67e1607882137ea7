/* The reaper thread: expires sandboxes whose TTL has passed and pauses
 * idle ones. */
#include <time.h>

#include "core.h"
#include "internal.h"

#define REAPER_INTERVAL_MS 250

static void *reaper_main(void *arg)
{
    struct fb_core *core = arg;
    bool retry = true; /* rows left "deleting" by a previous run */
    unsigned tick = 0;
    while (!core->stopping) {
        if (retry)
            retry = fb_sandbox_finish_deletes(core) > 0;
        fb_sandbox_reap_expired(core);
        /* idle timeouts are whole seconds: a look every second is enough */
        if (tick++ % (1000 / REAPER_INTERVAL_MS) == 0)
            fb_sandbox_pause_idle(core);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += REAPER_INTERVAL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&core->lock);
        while (!core->cleanup_wanted && !core->stopping &&
               pthread_cond_timedwait(&core->reaper_cond, &core->lock, &ts) == 0)
            ;
        retry |= core->cleanup_wanted;
        core->cleanup_wanted = false;
        pthread_mutex_unlock(&core->lock);
    }
    /* a clean stop leaves nothing half-deleted */
    fb_sandbox_finish_deletes(core);
    return NULL;
}

int fb_core_reaper_start(struct fb_core *core, fb_error_t *err)
{
    if (pthread_create(&core->reaper, NULL, reaper_main, core) != 0)
        return fb_error_sys(err, "start reaper");
    core->reaper_started = true;
    return 0;
}

void fb_core_reaper_stop(struct fb_core *core)
{
    fb_core_signal_stop(core);
    if (core->reaper_started)
        pthread_join(core->reaper, NULL);
    core->reaper_started = false;
    /* deletes requested while the reaper was already on its way out (the
     * warm pool is drained during the stop) */
    if (core->store != NULL)
        fb_sandbox_finish_deletes(core);
}
