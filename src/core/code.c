/* The code interpreter: persistent Python contexts on top of background
 * processes.  See code.h for the model and code_driver.h for the kernel. */
#include "code.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/text.h"
#include "../common/util.h"
#include "code_driver.h"
#include "procs.h"
#include "spec.h"

#define CHUNK_MAX (64u << 10) /* output bytes per event */
#define MARK_PREFIX                                                                                          \
    "\x1e"                                                                                                   \
    "FBRESULT "
#define ID_BYTES 16 /* random bytes of a cell id (32 hex digits) */
#define MARK_LEN (sizeof MARK_PREFIX - 1 + 2 * ID_BYTES)
#define LINE_CAP (4u << 20)     /* the result after the stdout marker */
#define SEND_CHUNK (256u << 10) /* bytes per stdin control request */
#define SEND_GIVE_UP_MS 10000   /* the kernel does not read its requests */
#define KILL_WAIT_MS 3000       /* SIGKILL sent: wait for the exit */
#define ENDED_GRACE_MS 500      /* exited, children hold the output: wait for the rest */
#define STATUS_MAX 4096

_Static_assert(sizeof(((struct fb_proc_spec *)0)->tag) >= sizeof FB_CODE_TAG_PREFIX + FB_CODE_CONTEXT_MAX,
               "a kernel's tag must fit a process spec");

static void handle_clearp(struct fb_sandbox_handle *h)
{
    fb_sandbox_handle_clear(h);
}
#define cleanup_handle __attribute__((cleanup(handle_clearp)))

static void proc_spec_clearp(struct fb_proc_spec *s)
{
    fb_proc_spec_clear(s);
}

/* ---- the request ---- */

static bool context_name_ok(const char *s, size_t n)
{
    if (n == 0 || n > FB_CODE_CONTEXT_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

int fb_code_spec_parse(json_t *body, struct fb_code_spec *out, fb_error_t *err)
{
    static const char *const fields[] = {"language", "code", "context", "timeout", NULL};
    memset(out, 0, sizeof *out);
    strcpy(out->context, "default");
    out->timeout_ms = (int64_t)FB_CODE_TIMEOUT_DEFAULT * 1000;
    if (!json_is_object(body))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "request body must be a JSON object");
    const char *key;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach(body, key, klen, v)
    {
        bool known = false;
        for (size_t i = 0; fields[i] != NULL && !known; i++)
            known = strlen(fields[i]) == klen && memcmp(fields[i], key, klen) == 0;
        if (!known) {
            char shown[72];
            size_t j = 0;
            for (size_t i = 0; i < klen && j < 64; i++)
                shown[j++] = key[i] >= 0x20 && key[i] < 0x7f && key[i] != '"' ? key[i] : '?';
            shown[j] = '\0';
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "unknown field \"%s%s\"", shown,
                                klen > 64 ? "..." : "");
        }
    }
    v = json_object_get(body, "language");
    if (v != NULL && !json_is_null(v) &&
        (!json_is_string(v) || json_string_length(v) != 6 || strcmp(json_string_value(v), "python") != 0))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "language: only \"python\" is supported");
    v = json_object_get(body, "code");
    if (v == NULL || json_is_null(v))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "code: required");
    if (!json_is_string(v))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "code: must be a string");
    size_t len = json_string_length(v);
    if (len > FB_CODE_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "code: longer than %d bytes", FB_CODE_MAX);
    if (strlen(json_string_value(v)) != len)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "code: must not contain NUL characters");
    v = json_object_get(body, "context");
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_string(v) || !context_name_ok(json_string_value(v), json_string_length(v)))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "context: must be 1 to %d characters of A-Z a-z 0-9 . _ -",
                                FB_CODE_CONTEXT_MAX);
        memcpy(out->context, json_string_value(v), json_string_length(v) + 1);
    }
    v = json_object_get(body, "timeout");
    if (v != NULL && !json_is_null(v)) {
        double t = json_number_value(v);
        if (!json_is_number(v) || !(t >= 0.001 && t <= FB_CODE_TIMEOUT_MAX))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "timeout: must be a number of seconds between 0.001 and %d",
                                FB_CODE_TIMEOUT_MAX);
        out->timeout_ms = (int64_t)(t * 1000.0 + 0.999);
    }
    out->code = malloc(len + 1);
    if (out->code == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    memcpy(out->code, json_string_value(json_object_get(body, "code")), len + 1);
    out->code_len = len;
    return 0;
}

void fb_code_spec_clear(struct fb_code_spec *s)
{
    free(s->code);
    s->code = NULL;
}

/* ---- one cell at a time per context ---- */

/* Held from a cell's start to its free, which may run on another thread
 * than the start: a flag under one mutex, not a mutex per context. */
struct ctx_lock {
    struct ctx_lock *next;
    char key[FB_ID_MAX + FB_CODE_CONTEXT_MAX + 2]; /* sandbox/context */
    unsigned refs;                                 /* holder and waiters */
    bool busy;
};

static pthread_mutex_t locks_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t locks_cv;
static pthread_once_t locks_once = PTHREAD_ONCE_INIT;
static struct ctx_lock *locks;

static void locks_init(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&locks_cv, &a);
    pthread_condattr_destroy(&a);
}

static void ctx_unref(struct ctx_lock *l)
{
    if (--l->refs > 0)
        return;
    for (struct ctx_lock **p = &locks; *p != NULL; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            break;
        }
    free(l);
}

/* Takes the context's lock, waiting at most wait_ms for a running cell. */
static struct ctx_lock *ctx_acquire(const char *key, int64_t wait_ms, fb_error_t *err)
{
    pthread_once(&locks_once, locks_init);
    pthread_mutex_lock(&locks_mu);
    struct ctx_lock *l = locks;
    while (l != NULL && strcmp(l->key, key) != 0)
        l = l->next;
    if (l == NULL) {
        l = calloc(1, sizeof *l);
        if (l == NULL) {
            pthread_mutex_unlock(&locks_mu);
            fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
            return NULL;
        }
        fb_strlcpy(l->key, key, sizeof l->key);
        l->next = locks;
        locks = l;
    }
    l->refs++;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)(wait_ms / 1000);
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    while (l->busy) {
        if (pthread_cond_timedwait(&locks_cv, &locks_mu, &until) == ETIMEDOUT && l->busy) {
            ctx_unref(l);
            pthread_mutex_unlock(&locks_mu);
            fb_error_set(err, FB_ERR_CONFLICT, 0, "the context is still running another cell");
            return NULL;
        }
    }
    l->busy = true;
    pthread_mutex_unlock(&locks_mu);
    return l;
}

static void ctx_release(struct ctx_lock *l)
{
    pthread_mutex_lock(&locks_mu);
    l->busy = false;
    ctx_unref(l);
    pthread_cond_broadcast(&locks_cv);
    pthread_mutex_unlock(&locks_mu);
}

/* ---- the kernel ---- */

/* The pid of the context's running kernel into pid ("" when none). */
static int kernel_find(struct fb_core *core, const char *tenant, const char *id, const char *tag,
                       char pid[16], fb_error_t *err)
{
    pid[0] = '\0';
    cleanup_json json_t *list = NULL;
    if (fb_proc_list(core, tenant, id, &list, err) < 0)
        return -1;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(list, "processes"), i, p)
    {
        const char *t = json_string_value(json_object_get(p, "tag"));
        const char *st = json_string_value(json_object_get(p, "state"));
        if (t != NULL && st != NULL && strcmp(t, tag) == 0 && strcmp(st, "running") == 0)
            snprintf(pid, 16, "%lld", (long long)json_integer_value(json_object_get(p, "pid")));
    }
    return 0;
}

static int kernel_start(struct fb_core *core, const char *tenant, const char *id, const char *tag,
                        char pid[16], fb_error_t *err)
{
    cleanup_json json_t *body =
        json_pack("{s:[s,s,s,s], s:{s:s, s:s}}", "cmd", "python3", "-u", "-c", FB_CODE_DRIVER, "env",
                  "PYTHONUNBUFFERED", "1", "PYTHONIOENCODING", "utf-8");
    __attribute__((cleanup(proc_spec_clearp))) struct fb_proc_spec spec = {0};
    if (body == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    if (fb_exec_spec_parse(body, &spec.exec, err) < 0)
        return -1;
    spec.exec.max_output = FB_PROC_RETAIN_DEFAULT;
    if (fb_snprintf(spec.tag, sizeof spec.tag, "%s", tag) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "kernel tag too long");
    cleanup_json json_t *obj = NULL;
    if (fb_proc_start(core, tenant, id, &spec, &obj, err) < 0)
        return fb_error_wrap(err, "start the python kernel");
    snprintf(pid, 16, "%lld", (long long)json_integer_value(json_object_get(obj, "pid")));
    fb_info("sandbox %s: python kernel %s started (%s)", id, pid, tag);
    return 0;
}

/* Writes the request line to the kernel's stdin, in pieces its keeper
 * takes (it holds at most 1 MiB the kernel has not read yet). */
static int kernel_send(struct fb_core *core, const char *tenant, const char *id, const char *pid,
                       const char *line, size_t len, fb_error_t *err)
{
    int64_t give_up = fb_mono_ms() + SEND_GIVE_UP_MS;
    for (size_t off = 0; off < len;) {
        size_t n = len - off < SEND_CHUNK ? len - off : SEND_CHUNK;
        cleanup_error fb_error_t e = NULL;
        if (fb_proc_stdin(core, tenant, id, pid, line + off, n, false, &e) == 0) {
            off += n;
            continue;
        }
        /* conflict: the kernel is gone; else its keeper's buffer is full */
        if (e == NULL || e->kind == FB_ERR_CONFLICT || e->kind == FB_ERR_NOT_FOUND ||
            fb_mono_ms() > give_up) {
            if (off > 0) {
                /* half a request would garble the next one: end this kernel */
                cleanup_error fb_error_t ke = NULL;
                fb_proc_signal(core, tenant, id, pid, SIGKILL, &ke);
            }
            if (err != NULL && *err == NULL)
                *err = fb_steal_ptr(e);
            return -1;
        }
        usleep(20000);
    }
    return 0;
}

/* ---- a cell ---- */

/* The end marker's scanner on one stream: output before it is the
 * cell's; a tail that may be the start of it is held back. */
struct scan {
    char hold[MARK_LEN];
    size_t hold_len;
    bool in_mark, done;
    char *line; /* after the marker, up to the newline (stdout: " {json}") */
    size_t line_len;
    bool line_over;
};

enum phase { RUNNING, INTERRUPTED, KILLED };

struct fb_code_cell {
    struct fb_core *core;
    char tenant[FB_ID_MAX], id[FB_ID_MAX], pid[16];
    struct ctx_lock *lock;
    struct fb_proc_reader rd;
    bool sent;
    char mark[MARK_LEN + 1];
    struct scan sc[2];
    char *out; /* the current event's bytes */
    size_t out_len, out_cap;
    enum phase phase;
    int64_t timeout_ms, started_us, deadline_ms, exited_seen_ms;
    json_t *result;
    bool (*gone)(void *);
    void *gone_arg;
    bool left; /* the client went away */
};

static int out_add(struct fb_code_cell *c, const char *d, size_t n)
{
    if (n == 0)
        return 0;
    if (c->out_len + n > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + n)
            cap *= 2;
        char *nb = realloc(c->out, cap);
        if (nb == NULL)
            return -1;
        c->out = nb;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, d, n);
    c->out_len += n;
    return 0;
}

static void line_add(struct scan *s, const char *d, size_t n)
{
    if (s->line_over || n == 0)
        return;
    if (s->line_len + n > LINE_CAP) {
        s->line_over = true;
        return;
    }
    char *nb = realloc(s->line, s->line_len + n + 1);
    if (nb == NULL) {
        s->line_over = true;
        return;
    }
    s->line = nb;
    memcpy(s->line + s->line_len, d, n);
    s->line_len += n;
    s->line[s->line_len] = '\0';
}

/* Feeds output of stream w: the cell's bytes go to c->out. */
static void scan_feed(struct fb_code_cell *c, int w, const char *data, size_t n)
{
    struct scan *s = &c->sc[w];
    if (s->done)
        return; /* after the marker: a thread of an earlier cell, not this one */
    size_t total = s->hold_len + n;
    cleanup_free char *buf = malloc(total ? total : 1);
    if (buf == NULL)
        return;
    memcpy(buf, s->hold, s->hold_len);
    memcpy(buf + s->hold_len, data, n);
    s->hold_len = 0;
    size_t i = 0;
    while (i < total && !s->done) {
        if (s->in_mark) {
            const char *nl = memchr(buf + i, '\n', total - i);
            size_t take = nl ? (size_t)(nl - (buf + i)) : total - i;
            line_add(s, buf + i, take);
            i += take;
            if (nl != NULL) {
                i++;
                s->done = true;
            }
            continue;
        }
        const char *m = memmem(buf + i, total - i, c->mark, MARK_LEN);
        if (m != NULL) {
            out_add(c, buf + i, (size_t)(m - (buf + i)));
            i = (size_t)(m - buf) + MARK_LEN;
            s->in_mark = true;
            continue;
        }
        /* the longest tail that could begin the marker waits for more */
        size_t k = total - i < MARK_LEN - 1 ? total - i : MARK_LEN - 1;
        while (k > 0 && memcmp(buf + total - k, c->mark, k) != 0)
            k--;
        out_add(c, buf + i, total - i - k);
        memcpy(s->hold, buf + total - k, k);
        s->hold_len = k;
        i = total;
    }
}

static json_t *error_obj(const char *name, const char *value)
{
    return json_pack("{s:s, s:s, s:[]}", "name", name, "value", value, "traceback");
}

/* Ends the cell with result (stolen: {"result", "error"}). */
static void finish(struct fb_code_cell *c, json_t *result)
{
    if (result == NULL)
        result = json_pack("{s:n, s:o}", "result", "error", error_obj("InternalError", "out of memory"));
    if (result == NULL)
        result = json_object();
    json_object_set_new(result, "timed_out", json_boolean(c->phase != RUNNING));
    json_object_set_new(result, "duration_ms", json_real((double)(fb_mono_us() - c->started_us) / 1000.0));
    c->result = result;
}

/* Copies the kernel's answer, checking every part: it is the sandbox's. */
static json_t *answer_parse(struct fb_code_cell *c)
{
    struct scan *s = &c->sc[0];
    if (s->line_over || s->line_len < 2 || s->line[0] != ' ')
        return NULL;
    cleanup_json json_t *j = json_loadb(s->line + 1, s->line_len - 1, 0, NULL);
    json_t *res = json_object_get(j, "result"), *e = json_object_get(j, "error");
    if (!json_is_object(j) || !(json_is_string(res) || json_is_null(res)) ||
        !(json_is_object(e) || json_is_null(e)))
        return NULL;
    json_t *err = json_null();
    if (json_is_object(e)) {
        json_t *name = json_object_get(e, "name"), *value = json_object_get(e, "value");
        json_t *tb = json_object_get(e, "traceback");
        if (!json_is_string(name) || !json_is_string(value) || !json_is_array(tb))
            return NULL;
        size_t i;
        json_t *l;
        json_array_foreach(tb, i, l) if (!json_is_string(l)) return NULL;
        err = json_pack("{s:O, s:O, s:O}", "name", name, "value", value, "traceback", tb);
        if (err != NULL && c->phase != RUNNING && strcmp(json_string_value(name), "KeyboardInterrupt") == 0) {
            char msg[160];
            snprintf(msg, sizeof msg, "timeout: the cell ran longer than %g s and was interrupted",
                     (double)c->timeout_ms / 1000.0);
            json_object_set_new(err, "value", json_string(msg));
        }
    }
    return json_pack("{s:O, s:o}", "result", res, "error", err);
}

/* The kernel is gone (or going): the context is lost. */
static void kernel_ended(struct fb_code_cell *c, json_t *code, json_t *sig)
{
    char msg[512];
    if (c->phase == KILLED) {
        snprintf(msg, sizeof msg,
                 "timeout: the cell ran longer than %g s and did not stop within %d s of an interrupt; "
                 "the context was killed and its state is lost (the next call starts a new one)",
                 (double)c->timeout_ms / 1000.0, FB_CODE_GRACE_MS / 1000);
        finish(c, json_pack("{s:n, s:o}", "result", "error", error_obj("ContextLost", msg)));
        return;
    }
    char how[64] = "its keeper vanished";
    if (json_is_string(sig))
        snprintf(how, sizeof how, "killed by signal %.16s", json_string_value(sig));
    else if (json_is_integer(code))
        snprintf(how, sizeof how, "exit code %lld", (long long)json_integer_value(code));
    snprintf(msg, sizeof msg,
             "the context ended: its python process exited (%s) while the cell ran; its state is lost and "
             "the next call starts a new one",
             how);
    finish(c, json_pack("{s:n, s:o}", "result", "error", error_obj("ContextEnded", msg)));
}

/* Whether the kernel has exited although its output is still open (a
 * child it left holds it): the keeper's status says so. */
static bool status_exited(struct fb_code_cell *c, json_t **code, json_t **sig)
{
    cleanup_close int fd = openat(c->rd.dir_fd, "status", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    char buf[STATUS_MAX];
    ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf, 0) : -1;
    if (n <= 0)
        return false;
    cleanup_json json_t *st = json_loadb(buf, (size_t)n, JSON_DISABLE_EOF_CHECK, NULL);
    json_t *ec = json_object_get(st, "exit_code");
    if (ec == NULL)
        return false;
    *code = json_incref(ec);
    *sig = json_incref(json_object_get(st, "signal"));
    return true;
}

/* Timeouts, and a kernel that exited while a child holds its output. */
static void tick(struct fb_code_cell *c)
{
    int64_t now = fb_mono_ms();
    json_t *code = NULL, *sig = NULL;
    if (status_exited(c, &code, &sig)) {
        if (c->exited_seen_ms == 0)
            c->exited_seen_ms = now;
        else if (now - c->exited_seen_ms >= ENDED_GRACE_MS)
            kernel_ended(c, code, sig);
        json_decref(code);
        json_decref(sig);
        if (c->result != NULL)
            return;
    }
    if (now < c->deadline_ms)
        return;
    cleanup_error fb_error_t e = NULL;
    switch (c->phase) {
    case RUNNING:
        c->phase = INTERRUPTED;
        c->deadline_ms = now + FB_CODE_GRACE_MS;
        fb_proc_signal(c->core, c->tenant, c->id, c->pid, SIGINT, &e);
        break;
    case INTERRUPTED:
        fb_warn("sandbox %s: python kernel %s ignored an interrupt: killing it", c->id, c->pid);
        c->phase = KILLED;
        c->deadline_ms = now + KILL_WAIT_MS;
        fb_proc_signal(c->core, c->tenant, c->id, c->pid, SIGKILL, &e);
        break;
    case KILLED:
        kernel_ended(c, NULL, NULL);
        break;
    }
}

/* Handles one reader event; the cell's bytes (if any) land in c->out.
 * Returns the stream they came from. */
static int take_event(struct fb_code_cell *c, json_t *ev)
{
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (type == NULL)
        return 0;
    if (strcmp(type, "exit") == 0 || strcmp(type, "lost") == 0) {
        kernel_ended(c, json_object_get(ev, "exit_code"), json_object_get(ev, "signal"));
        return 0;
    }
    int w = strcmp(type, "stderr") == 0 ? 1 : 0;
    if (strcmp(type, "stdout") != 0 && strcmp(type, "stderr") != 0 && strcmp(type, "pty") != 0)
        return w; /* "dropped": output the cell printed faster than it could be kept */
    json_t *d = json_object_get(ev, "data");
    if (json_is_string(d)) {
        scan_feed(c, w, json_string_value(d), json_string_length(d));
        return w;
    }
    d = json_object_get(ev, "data_b64");
    if (!json_is_string(d))
        return w;
    size_t cap = json_string_length(d) / 4 * 3 + 3;
    cleanup_free char *raw = malloc(cap);
    long n = raw ? fb_base64_decode(json_string_value(d), json_string_length(d), raw, cap) : -1;
    if (n > 0)
        scan_feed(c, w, raw, (size_t)n);
    return w;
}

enum fb_code_event fb_code_cell_next(struct fb_code_cell *c, const char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    for (;;) {
        c->out_len = 0;
        if (c->result != NULL) {
            /* a held-back tail that never became a marker is output */
            for (int w = 0; w < 2; w++)
                if (c->sc[w].hold_len > 0) {
                    out_add(c, c->sc[w].hold, c->sc[w].hold_len);
                    c->sc[w].hold_len = 0;
                    *data = c->out;
                    *len = c->out_len;
                    return w == 0 ? FB_CODE_STDOUT : FB_CODE_STDERR;
                }
            return FB_CODE_DONE;
        }
        if (c->sc[0].done && c->sc[1].done) {
            json_t *ans = answer_parse(c);
            finish(c, ans ? ans
                          : json_pack("{s:n, s:o}", "result", "error",
                                      error_obj("InternalError", "the kernel's answer was malformed")));
            continue;
        }
        json_t *ev = fb_proc_reader_next(&c->rd, CHUNK_MAX);
        if (ev != NULL) {
            int w = take_event(c, ev);
            json_decref(ev);
            if (c->out_len > 0) {
                *data = c->out;
                *len = c->out_len;
                return w == 0 ? FB_CODE_STDOUT : FB_CODE_STDERR;
            }
            continue;
        }
        if (c->gone != NULL && !c->left && c->gone(c->gone_arg)) {
            c->left = true;
            if (c->phase == RUNNING)
                c->deadline_ms = 0;
        }
        tick(c);
        if (c->result != NULL)
            continue;
        int64_t wait = c->deadline_ms - fb_mono_ms();
        if ((c->exited_seen_ms != 0 || (c->gone != NULL && !c->left)) && wait > 250)
            wait = c->exited_seen_ms != 0 ? 100 : 250;
        fb_proc_reader_wait(&c->rd, wait < 1 ? 1 : wait > 1000 ? 1000 : (int)wait);
    }
}

void fb_code_cell_watch(struct fb_code_cell *c, bool (*gone)(void *arg), void *arg)
{
    c->gone = gone;
    c->gone_arg = arg;
}

json_t *fb_code_cell_result(struct fb_code_cell *c)
{
    return c->result;
}

void fb_code_cell_free(struct fb_code_cell *c)
{
    if (c == NULL)
        return;
    if (c->sent && c->result == NULL) {
        /* nobody waits for this cell any more: interrupt it now, and let the
         * next cell start only once the kernel listens again (or is gone) */
        c->gone = NULL;
        if (c->phase == RUNNING)
            c->deadline_ms = 0;
        const char *d;
        size_t n;
        while (fb_code_cell_next(c, &d, &n) != FB_CODE_DONE)
            ;
    }
    fb_proc_reader_clear(&c->rd);
    for (int w = 0; w < 2; w++)
        free(c->sc[w].line);
    free(c->out);
    json_decref(c->result);
    if (c->lock != NULL)
        ctx_release(c->lock);
    free(c);
}

/* Opens the kernel's output at its end and sends the cell. */
static int cell_send(struct fb_code_cell *c, const char *line, size_t len, fb_error_t *err)
{
    fb_proc_reader_clear(&c->rd);
    if (fb_proc_reader_open(c->core, c->tenant, c->id, c->pid, 0, &c->rd, err) < 0)
        return -1;
    struct stat sb;
    if (fstat(c->rd.out_fd, &sb) < 0)
        return fb_error_sys(err, "the kernel's output");
    c->rd.offset = (uint64_t)sb.st_size;
    return kernel_send(c->core, c->tenant, c->id, c->pid, line, len, err);
}

/* Takes the context, finds or starts its kernel, sends the line. */
static int cell_prepare(struct fb_code_cell *c, const char *key, const char *tag, int64_t wait_ms,
                        const char *line, size_t len, fb_error_t *err)
{
    /* the previous cell of this context may still run: wait for it */
    if ((c->lock = ctx_acquire(key, wait_ms, err)) == NULL)
        return -1;
    if (kernel_find(c->core, c->tenant, c->id, tag, c->pid, err) < 0)
        return -1;
    bool fresh = c->pid[0] == '\0';
    if (fresh && kernel_start(c->core, c->tenant, c->id, tag, c->pid, err) < 0)
        return -1;
    cleanup_error fb_error_t e = NULL;
    if (cell_send(c, line, len, &e) == 0)
        return 0;
    /* a kernel that went away since it was listed: one fresh start */
    if (fresh || e == NULL || e->kind != FB_ERR_CONFLICT) {
        if (err != NULL && *err == NULL)
            *err = fb_steal_ptr(e);
        return -1;
    }
    if (kernel_start(c->core, c->tenant, c->id, tag, c->pid, err) < 0)
        return -1;
    return cell_send(c, line, len, err);
}

int fb_code_cell_start(struct fb_core *core, const char *tenant, const char *id,
                       const struct fb_code_spec *spec, struct fb_code_cell **out, fb_error_t *err)
{
    *out = NULL;
    cleanup_handle struct fb_sandbox_handle h = {0};
    if (fb_sandbox_open(core, tenant, id, &h, err) < 0)
        return -1;
    char key[FB_ID_MAX + FB_CODE_CONTEXT_MAX + 2], tag[sizeof FB_CODE_TAG_PREFIX + FB_CODE_CONTEXT_MAX];
    char hex[2 * ID_BYTES + 1];
    snprintf(key, sizeof key, "%s/%s", h.id, spec->context);
    snprintf(tag, sizeof tag, "%s%s", FB_CODE_TAG_PREFIX, spec->context);
    if (fb_random_hex(hex, ID_BYTES) < 0)
        return fb_error_sys(err, "random cell id");
    /* one line: JSON escapes every newline of the code */
    cleanup_json json_t *req = json_pack("{s:s, s:s%}", "id", hex, "code", spec->code, spec->code_len);
    cleanup_free char *line = req ? json_dumps(req, JSON_COMPACT) : NULL;
    size_t len = line ? strlen(line) : 0;
    char *nl = line ? realloc(line, len + 2) : NULL;
    if (nl == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    line = nl;
    line[len++] = '\n';
    line[len] = '\0';
    struct fb_code_cell *c = calloc(1, sizeof *c);
    if (c == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    c->rd.dir_fd = c->rd.out_fd = c->rd.notify_fd = -1;
    c->core = core;
    c->timeout_ms = spec->timeout_ms;
    fb_strlcpy(c->tenant, tenant, sizeof c->tenant);
    fb_strlcpy(c->id, h.id, sizeof c->id);
    snprintf(c->mark, sizeof c->mark, "%s%s", MARK_PREFIX, hex);
    if (cell_prepare(c, key, tag, spec->timeout_ms, line, len, err) < 0) {
        fb_code_cell_free(c);
        return -1;
    }
    c->sent = true;
    c->started_us = fb_mono_us();
    c->deadline_ms = fb_mono_ms() + spec->timeout_ms;
    *out = c;
    return 0;
}
