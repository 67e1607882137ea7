/* Streams of NDJSON output events (exec, process output): written to
 * stdout and stderr as they arrive, the final exit event kept. */
#ifndef FB_CLI_STREAM_H
#define FB_CLI_STREAM_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "common/error.h"

struct fb_stream {
    bool decided;
    bool whole_json; /* the daemon answered one JSON object instead of a stream */
    bool broken_pipe;
    char *buf; /* owned: the pending partial line, or the whole JSON answer */
    size_t len, cap;
    json_t *exit_event; /* owned */
};

/* Frees what the stream owns; the struct is the caller's. */
void fb_stream_release(struct fb_stream *s);

/* An fb_sink_fn: hands every complete line to fb_stream_event(). */
int fb_stream_sink(void *ctx, const char *content_type, const char *data, size_t len, fb_error_t *err);

/* One event line: output is written out, exit kept in s->exit_event. */
int fb_stream_event(struct fb_stream *s, const char *line, size_t len, fb_error_t *err);

/* Writes obj's text_key (or base64 b64_key) bytes to fd. */
int fb_stream_emit_field(struct fb_stream *s, int fd, json_t *obj, const char *text_key, const char *b64_key,
                         fb_error_t *err);

/* The shell convention for an exit event: the code, 124 for a timeout,
 * 128+n for a signal. */
int fb_stream_exit_status(json_t *ev);

#endif
