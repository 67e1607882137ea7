/* The reaper thread: expires sandboxes whose TTL has passed. */
#include <time.h>

#include "core.h"
#include "internal.h"

#define REAPER_INTERVAL_MS 250

static void *reaper_main(void *arg)
{
    struct fb_core *core = arg;
    while (!core->stopping) {
        fb_sandbox_reap_expired(core);
        struct timespec ts = {0, REAPER_INTERVAL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
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
    core->stopping = true;
    if (core->reaper_started)
        pthread_join(core->reaper, NULL);
    core->reaper_started = false;
}
