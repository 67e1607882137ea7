/* Running a command in a sandbox.  The caller gets the connection to init
 * after the request (and stdin) went out, and reads STDOUT / STDERR frames
 * then one RESULT from it, so it can buffer or stream as it likes. */
#ifndef FB_CORE_EXEC_H
#define FB_CORE_EXEC_H

#include <stdint.h>

#include "core.h"

/* Starts spec in sandbox id of tenant.  Returns a connected fd (caller
 * closes; closing it early kills the command's process tree) or -1. */
int fb_exec_start(struct fb_core *core, const char *tenant, const char *id, const struct fb_exec_spec *spec,
                  fb_error_t *err);

/* The environment of a command as a ["K=V", ...] array (new reference; NULL
 * without memory): defaults, then the sandbox's env, then the request's;
 * later layers win. */
json_t *fb_exec_build_env(json_t *sandbox_env, json_t *exec_env);

/* OOM kills seen so far in the sandbox's memory cgroup (0 if unknown):
 * sampled around a command to tell whether the kernel's OOM killer ended
 * it or one of its children. */
uint64_t fb_exec_oom_count(struct fb_core *core, const char *id);

#endif
