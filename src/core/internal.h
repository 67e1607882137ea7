/* Declarations shared by the core's own files only. */
#ifndef FB_CORE_INTERNAL_H
#define FB_CORE_INTERNAL_H

#include "../runtime/container.h"
#include "core.h"

struct fb_core_paths {
    char sandbox_dir[PATH_MAX];
    char run_dir[PATH_MAX];
    char sock_path[108];
    char hostname[64];
};

/* Fills the container config (pointing into *paths) for a stored row. */
void fb_core_container_config(struct fb_core *core, const struct fb_sandbox_row *row, const char *rootfs,
                              struct fb_core_paths *paths, struct fb_container_config *c);

int fb_core_readopt(struct fb_core *core, fb_error_t *err);
int fb_core_templates_init(struct fb_core *core, fb_error_t *err);
void fb_core_templates_stop(struct fb_core *core);
int fb_core_reaper_start(struct fb_core *core, fb_error_t *err);
void fb_core_reaper_stop(struct fb_core *core);

#endif
