/* Forking a running sandbox: see core.h. */
#include "core.h"

int fb_sandbox_fork(struct fb_core *core, const char *tenant, const char *id, json_t *body, json_t **out,
                    fb_error_t *err)
{
    (void)core;
    (void)tenant;
    (void)id;
    (void)body;
    (void)out;
    return fb_error_set(err, FB_ERR_UNSUPPORTED, 0, "fork: not yet");
}
