/* Running a command in a sandbox.  The caller gets the connection to init
 * after the request (and stdin) went out, and reads STDOUT / STDERR frames
 * then one RESULT from it, so it can buffer or stream as it likes. */
#ifndef FB_CORE_EXEC_H
#define FB_CORE_EXEC_H

#include "core.h"

/* Starts spec in sandbox id of tenant.  Returns a connected fd (caller
 * closes; closing it early kills the command's process tree) or -1. */
int fb_exec_start(struct fb_core *core, const char *tenant, const char *id, const struct fb_exec_spec *spec,
                  fb_error_t *err);

#endif
