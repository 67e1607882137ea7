/* Background processes: started in a sandbox, kept by a keeper process
 * inside it (see src/init/keeper.c), and independent of the request, the
 * client and the daemon.  Their records live on the host next to the
 * sandbox's writable layer, on the sandbox's own disk:
 *
 *   layer/procs/<pid>/meta.json   what was started (written by the daemon)
 *   layer/procs/<pid>/status      {"pid"}, then the exit (by the keeper)
 *   layer/procs/<pid>/out, idx    the output and its stream switches
 *   layer/procs/<pid>/ctl.sock    the keeper's control socket
 *
 * so a restarted daemon finds everything again without a store of its own. */
#ifndef FB_CORE_PROCS_H
#define FB_CORE_PROCS_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "core.h"
#include "spec.h"

#define FB_PROCS_MAX 256 /* records kept per sandbox, running or not */
#define FB_PROC_RETAIN_DEFAULT (16 << 20)
#define FB_PROC_TAG_MAX 64
#define FB_PROC_STDIN_MAX (1 << 20)

struct fb_proc_spec {
    struct fb_exec_spec exec;      /* timeout is refused; max_output_bytes is the retained output */
    char tag[FB_PROC_TAG_MAX + 8]; /* a client's: at most FB_PROC_TAG_MAX; "code:<context>" longer */
    bool pty;
    int cols, rows;
};

/* Parses a POST .../processes body.  bad_request on any unknown, wrong or
 * out-of-range field; clear with fb_proc_spec_clear() either way. */
int fb_proc_spec_parse(json_t *body, struct fb_proc_spec *out, fb_error_t *err);
void fb_proc_spec_clear(struct fb_proc_spec *s);

/* Starts a background process; *out is its object (new reference). */
int fb_proc_start(struct fb_core *core, const char *tenant, const char *id, const struct fb_proc_spec *spec,
                  json_t **out, fb_error_t *err);

/* {"processes": [...]} of a sandbox, oldest first (new reference). */
int fb_proc_list(struct fb_core *core, const char *tenant, const char *id, json_t **out, fb_error_t *err);

/* One process's object; not_found for an unknown pid. */
int fb_proc_get(struct fb_core *core, const char *tenant, const char *id, const char *pid, json_t **out,
                fb_error_t *err);

/* Control requests, passed to the keeper: bytes for stdin (eof: close it
 * after them), a signal number, a terminal size.  conflict once the process
 * and its keeper are gone. */
int fb_proc_stdin(struct fb_core *core, const char *tenant, const char *id, const char *pid, const char *data,
                  size_t len, bool eof, fb_error_t *err);
int fb_proc_signal(struct fb_core *core, const char *tenant, const char *id, const char *pid, int sig,
                   fb_error_t *err);
int fb_proc_resize(struct fb_core *core, const char *tenant, const char *id, const char *pid, int cols,
                   int rows, fb_error_t *err);

/* A reader of one process's output from a byte offset. */
struct fb_proc_reader {
    int dir_fd, out_fd, notify_fd;
    uint64_t offset;
    bool pty;
    struct fb_proc_idx *idx; /* stream switches seen so far */
    size_t n_idx, cap_idx;
    uint64_t idx_bytes;
};

/* Opens the output of process pid at offset.  Caller clears the reader. */
int fb_proc_reader_open(struct fb_core *core, const char *tenant, const char *id, const char *pid,
                        uint64_t offset, struct fb_proc_reader *rd, fb_error_t *err);
void fb_proc_reader_clear(struct fb_proc_reader *rd);

/* The next event from the reader's offset (new reference):
 *   {"type": "stdout"|"stderr"|"pty", "offset": N, "data"|"data_b64": ...}
 *   {"type": "dropped", "offset": N, "bytes": M}  (older output discarded)
 *   {"type": "exit", "offset": N, "exit_code", "signal"}  (all output read)
 *   {"type": "lost", "offset": N}  (the keeper vanished: exit unknown)
 * NULL when caught up with a running process: then wait_ms (> 0) is how
 * long fb_proc_reader_wait() may block for more. */
json_t *fb_proc_reader_next(struct fb_proc_reader *rd, size_t max_bytes);

/* Blocks until the output or the status may have changed, or timeout_ms. */
void fb_proc_reader_wait(struct fb_proc_reader *rd, int timeout_ms);

/* Moves the reader to the current end of the output (what is written
 * from now on is what it reads next). */
void fb_proc_reader_seek_end(struct fb_proc_reader *rd);

#endif
