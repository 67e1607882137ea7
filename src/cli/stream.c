/* NDJSON output streams shared by exec, run and logs. */
#include "cli/stream.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/output.h"
#include "common/cleanup.h"
#include "common/json_util.h"
#include "common/util.h"

/* One ndjson event; chunks are far smaller, this only bounds a broken stream. */
#define EVENT_MAX (64u << 20)

static const struct {
    const char *name;
    int num;
} signals[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},     {"QUIT", SIGQUIT}, {"ILL", SIGILL},   {"TRAP", SIGTRAP},
    {"ABRT", SIGABRT}, {"BUS", SIGBUS},     {"FPE", SIGFPE},   {"KILL", SIGKILL}, {"USR1", SIGUSR1},
    {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},   {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM},
    {"CHLD", SIGCHLD}, {"CONT", SIGCONT},   {"STOP", SIGSTOP}, {"TSTP", SIGTSTP}, {"TTIN", SIGTTIN},
    {"TTOU", SIGTTOU}, {"URG", SIGURG},     {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ}, {"VTALRM", SIGVTALRM},
    {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"IO", SIGIO},     {"SYS", SIGSYS},
};

static int signal_number(json_t *sig)
{
    if (json_is_integer(sig))
        return (int)json_integer_value(sig);
    const char *name = json_string_value(sig);
    if (name == NULL)
        return 0;
    if (strncmp(name, "SIG", 3) == 0)
        name += 3;
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
        if (strcmp(name, signals[i].name) == 0)
            return signals[i].num;
    return SIGKILL; /* unknown name: still a death by signal */
}

/* The shell convention: 124 for a timeout, 128+n for a signal. */
int fb_stream_exit_status(json_t *ev)
{
    if (json_is_true(json_object_get(ev, "truncated")))
        fprintf(stderr, "forkbox: output was truncated (over max_output_bytes)\n");
    if (json_is_true(json_object_get(ev, "timed_out")))
        return 124;
    json_t *sig = json_object_get(ev, "signal");
    if (sig != NULL && !json_is_null(sig)) {
        int n = signal_number(sig);
        return n > 0 && n < 128 ? 128 + n : 255;
    }
    json_t *code = json_object_get(ev, "exit_code");
    if (!json_is_integer(code))
        return FB_EXIT_FAIL;
    json_int_t v = json_integer_value(code);
    return v >= 0 && v <= 255 ? (int)v : 255;
}

void fb_stream_release(struct fb_stream *s)
{
    fb_freep(&s->buf);
    fb_json_decrefp(&s->exit_event);
}

static int emit(struct fb_stream *s, int fd, const void *data, size_t len, fb_error_t *err)
{
    int r = fb_write_all(fd, data, len);
    if (r == -EPIPE) {
        s->broken_pipe = true;
        return fb_error_set(err, FB_ERR_INTERNAL, EPIPE, "writing output");
    }
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "writing output");
    return 0;
}

/* Writes one stream's text or base64 bytes (data / data_b64, stdout /
 * stdout_b64) to fd. */
int fb_stream_emit_field(struct fb_stream *s, int fd, json_t *obj, const char *text_key, const char *b64_key,
                         fb_error_t *err)
{
    json_t *b64 = json_object_get(obj, b64_key);
    if (json_is_string(b64)) {
        size_t inlen = json_string_length(b64), outlen = 0;
        cleanup_free unsigned char *raw = malloc(inlen / 4 * 3 + 3);
        if (raw == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "output");
        if (fb_base64_decode(json_string_value(b64), inlen, raw, &outlen) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "forkboxd sent invalid base64 output");
        return emit(s, fd, raw, outlen, err);
    }
    json_t *text = json_object_get(obj, text_key);
    if (json_is_string(text))
        return emit(s, fd, json_string_value(text), json_string_length(text), err);
    return 0;
}

int fb_stream_event(struct fb_stream *s, const char *line, size_t len, fb_error_t *err)
{
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
        len--;
    if (len == 0)
        return 0;
    json_error_t jerr;
    cleanup_json json_t *ev = json_loadb(line, len, JSON_ALLOW_NUL, &jerr);
    if (ev == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "forkboxd sent an invalid event: %s", jerr.text);
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (type == NULL)
        return 0;
    /* a terminal's output is one stream */
    if (strcmp(type, "stdout") == 0 || strcmp(type, "pty") == 0)
        return fb_stream_emit_field(s, STDOUT_FILENO, ev, "data", "data_b64", err);
    if (strcmp(type, "stderr") == 0)
        return fb_stream_emit_field(s, STDERR_FILENO, ev, "data", "data_b64", err);
    if (strcmp(type, "dropped") == 0) {
        fprintf(stderr, "forkbox: [%lld bytes of earlier output were dropped]\n",
                (long long)json_integer_value(json_object_get(ev, "bytes")));
        return 0;
    }
    if (strcmp(type, "lost") == 0)
        return fb_error_set(err, FB_ERR_CONFLICT, 0,
                            "the process's keeper was killed inside the sandbox: its exit status is unknown");
    if (strcmp(type, "exit") == 0) {
        fb_json_decrefp(&s->exit_event);
        s->exit_event = fb_steal_ptr(ev);
        return 0;
    }
    if (strcmp(type, "error") == 0) {
        const char *msg = json_string_value(json_object_get(json_object_get(ev, "error"), "message"));
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "%s", msg ? msg : "exec failed");
    }
    return 0; /* event types added later are not ours to fail on */
}

int fb_stream_sink(void *ctx, const char *content_type, const char *data, size_t len, fb_error_t *err)
{
    struct fb_stream *s = ctx;
    if (!s->decided) {
        s->decided = true;
        s->whole_json = strncmp(content_type, "application/json", 16) == 0;
    }
    if (len > EVENT_MAX - s->len)
        return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "output event larger than %u MiB", EVENT_MAX >> 20);
    if (s->len + len > s->cap) {
        size_t ncap = s->cap ? s->cap : 65536;
        while (ncap < s->len + len)
            ncap *= 2;
        char *nb = realloc(s->buf, ncap);
        if (nb == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "output");
        s->buf = nb;
        s->cap = ncap;
    }
    memcpy(s->buf + s->len, data, len);
    s->len += len;
    if (s->whole_json)
        return 0;
    /* hand every complete line on now: output must appear as it arrives */
    size_t start = 0;
    for (size_t i = s->len - len; i < s->len; i++) {
        if (s->buf[i] != '\n')
            continue;
        if (fb_stream_event(s, s->buf + start, i - start, err) < 0)
            return -1;
        start = i + 1;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
    return 0;
}
