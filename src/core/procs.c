#include "procs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/text.h"
#include "../common/util.h"
#include "../common/wire.h"
#include "../runtime/memstate.h"
#include "../runtime/initconn.h"
#include "code.h"
#include "exec.h"
#include "internal.h"

#define META_MAX 65536
#define STATUS_MAX 4096
#define IDX_MAX (4u << 20)

struct fb_proc_idx {
    uint64_t offset;
    uint32_t stream;
    uint32_t reserved;
};

static void handle_clearp(struct fb_sandbox_handle *h)
{
    fb_sandbox_handle_clear(h);
}
#define cleanup_handle __attribute__((cleanup(handle_clearp)))

/* ---- the request ---- */

int fb_proc_spec_parse(json_t *body, struct fb_proc_spec *out, fb_error_t *err)
{
    memset(out, 0, sizeof *out);
    if (!json_is_object(body))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "request body must be a JSON object");
    if (json_object_get(body, "timeout") != NULL)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                            "timeout: background processes run until they exit; signal one to stop it");
    cleanup_json json_t *rest = json_copy(body);
    if (rest == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    json_t *tag = json_object_get(body, "tag");
    if (tag != NULL && !json_is_null(tag)) {
        if (!json_is_string(tag) || json_string_length(tag) > FB_PROC_TAG_MAX ||
            strlen(json_string_value(tag)) != json_string_length(tag))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "tag: must be a string of at most %d bytes",
                                FB_PROC_TAG_MAX);
        if (strncmp(json_string_value(tag), FB_CODE_TAG_PREFIX, strlen(FB_CODE_TAG_PREFIX)) == 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "tag: the prefix \"%s\" is reserved for the code interpreter's contexts",
                                FB_CODE_TAG_PREFIX);
        fb_strlcpy(out->tag, json_string_value(tag), sizeof out->tag);
    }
    json_t *pty = json_object_get(body, "pty");
    if (json_is_true(pty)) {
        out->pty = true;
        out->cols = 80;
        out->rows = 24;
    } else if (json_is_object(pty)) {
        json_t *c = json_object_get(pty, "cols"), *r = json_object_get(pty, "rows");
        if (json_object_size(pty) != (size_t)((c != NULL) + (r != NULL)) || (c && !json_is_integer(c)) ||
            (r && !json_is_integer(r)))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "pty: must be {\"cols\": N, \"rows\": N}");
        out->pty = true;
        out->cols = c ? (int)json_integer_value(c) : 80;
        out->rows = r ? (int)json_integer_value(r) : 24;
        if (json_integer_value(c) > 1000 || json_integer_value(r) > 1000 || out->cols < 1 || out->rows < 1)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "pty: cols and rows must be 1..1000");
    } else if (pty != NULL && !json_is_null(pty) && !json_is_false(pty)) {
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "pty: must be true, false or {\"cols\", \"rows\"}");
    }
    json_object_del(rest, "tag");
    json_object_del(rest, "pty");
    bool sized = json_object_get(body, "max_output_bytes") != NULL;
    if (fb_exec_spec_parse(rest, &out->exec, err) < 0)
        return -1;
    if (!sized)
        out->exec.max_output = FB_PROC_RETAIN_DEFAULT;
    if (out->exec.stdin_len > FB_PROC_STDIN_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "stdin: longer than %d bytes", FB_PROC_STDIN_MAX);
    return 0;
}

void fb_proc_spec_clear(struct fb_proc_spec *s)
{
    fb_exec_spec_clear(&s->exec);
}

/* ---- the records on the host ---- */

/* Opens (making it first when asked) the sandbox's procs directory.  The
 * layer directory is the host's: the sandbox sees only layer/upper. */
static int procs_open(struct fb_core *core, const char *id, bool create, fb_error_t *err)
{
    char path[PATH_MAX];
    if (fb_snprintf(path, sizeof path, "%s/sandboxes/%s/layer", core->cfg.state_dir, id) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "state path too long");
    cleanup_close int layer = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (layer < 0)
        return fb_error_sys(err, "open %s", path);
    if (create && mkdirat(layer, "procs", 0700) < 0 && errno != EEXIST)
        return fb_error_sys(err, "make %s/procs", path);
    int fd = openat(layer, "procs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && !create)
        return -2; /* no process was ever started */
    if (fd < 0)
        return fb_error_sys(err, "open %s/procs", path);
    return fd;
}

static bool pid_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 10 || s[0] == '0')
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

static json_t *read_json_at(int dir, const char *name, size_t max)
{
    cleanup_close int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    cleanup_free char *buf = malloc(max + 1);
    if (buf == NULL)
        return NULL;
    ssize_t n = pread(fd, buf, max, 0);
    if (n <= 0)
        return NULL;
    /* the keeper rewrites status in place: the object at the front is the
     * current one, whatever an older, longer one left behind it */
    json_t *j = json_loadb(buf, (size_t)n, JSON_DISABLE_EOF_CHECK, NULL);
    if (j != NULL && !json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* Whether the keeper still holds its lock on the status file. */
static bool keeper_alive(int dir)
{
    cleanup_close int fd = openat(dir, "status", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return false;
    if (flock(fd, LOCK_SH | LOCK_NB) == 0)
        return false;
    return errno == EWOULDBLOCK;
}

/* Removes one record directory (only regular files and the socket in it). */
static void record_remove(int procs, const char *name)
{
    int d = openat(procs, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d >= 0) {
        static const char *const files[] = {"meta.json", "status", "out", "idx", "ctl.sock"};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
            unlinkat(d, files[i], 0);
        close(d);
    }
    if (unlinkat(procs, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        fb_warn("remove process record %s: %s", name, strerror(errno));
}

/* The client-visible object of one record directory, or NULL. */
static json_t *record_json(int dir)
{
    json_t *meta = read_json_at(dir, "meta.json", META_MAX);
    if (meta == NULL)
        return NULL;
    cleanup_json json_t *st = read_json_at(dir, "status", STATUS_MAX);
    bool alive = keeper_alive(dir);
    json_t *exit_code = json_object_get(st, "exit_code");
    const char *state = exit_code != NULL ? "exited" : alive ? "running" : "lost";
    json_object_set_new(meta, "state", json_string(state));
    json_object_set(meta, "exit_code", exit_code ? exit_code : json_null());
    json_t *sig = json_object_get(st, "signal");
    json_object_set(meta, "signal", sig ? sig : json_null());
    json_t *ended = json_object_get(st, "ended_at_ms");
    if (json_is_integer(ended)) {
        char t[40];
        fb_time_format(json_integer_value(ended), t, sizeof t);
        json_object_set_new(meta, "ended_at", json_string(t));
    } else {
        json_object_set_new(meta, "ended_at", json_null());
    }
    if (exit_code != NULL && alive)
        json_object_set_new(meta, "output_open", json_true()); /* children it left still write */
    struct stat sb;
    cleanup_close int out = openat(dir, "out", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (out >= 0 && fstat(out, &sb) == 0) {
        off_t first = lseek(out, 0, SEEK_DATA);
        json_object_set_new(meta, "output_bytes", json_integer((json_int_t)sb.st_size));
        json_object_set_new(meta, "output_dropped",
                            json_integer(first < 0 ? (json_int_t)sb.st_size : (json_int_t)first));
    }
    return meta;
}

struct record {
    char name[32];
    int64_t started;
    bool running;
};

static int record_cmp(const void *a, const void *b)
{
    const struct record *x = a, *y = b;
    return x->started < y->started ? -1 : x->started > y->started;
}

/* Lists the record directories, oldest first.  Starts that a crashed
 * daemon did not finish naming get their pid now; failed ones go. */
static int records_scan(int procs, struct record **out, size_t *n, fb_error_t *err)
{
    *out = NULL;
    *n = 0;
    int dup_fd = dup(procs);
    if (dup_fd < 0)
        return fb_error_sys(err, "scan processes");
    cleanup_dir DIR *d = fdopendir(dup_fd);
    if (d == NULL) {
        close(dup_fd);
        return fb_error_sys(err, "scan processes");
    }
    rewinddir(d);
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && *n < 4 * FB_PROCS_MAX) {
        char name[32];
        if (fb_strlcpy(name, e->d_name, sizeof name) < 0)
            continue;
        bool fresh = strncmp(name, "new.", 4) == 0;
        if (!fresh && !pid_name_ok(name))
            continue;
        cleanup_close int dir = openat(procs, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir < 0)
            continue;
        cleanup_json json_t *meta = read_json_at(dir, "meta.json", META_MAX);
        cleanup_json json_t *st = read_json_at(dir, "status", STATUS_MAX);
        bool alive = keeper_alive(dir);
        if (fresh) {
            json_int_t pid = json_integer_value(json_object_get(st, "pid"));
            char pname[32];
            snprintf(pname, sizeof pname, "%lld", (long long)pid);
            if (pid <= 0 || meta == NULL) {
                if (!alive)
                    record_remove(procs, name); /* a start that never ran */
                continue;
            }
            record_remove(procs, pname); /* an older record of a reused pid */
            if (renameat(procs, name, procs, pname) < 0)
                continue;
            fb_strlcpy(name, pname, sizeof name);
        }
        if (meta == NULL)
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 32;
            struct record *nr = realloc(*out, cap * sizeof *nr);
            if (nr == NULL) {
                free(*out);
                *out = NULL;
                return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
            }
            *out = nr;
        }
        struct record *r = &(*out)[(*n)++];
        fb_strlcpy(r->name, name, sizeof r->name);
        r->started = json_integer_value(json_object_get(meta, "started_at_ms"));
        r->running = alive;
    }
    if (*n > 1)
        qsort(*out, *n, sizeof **out, record_cmp);
    return 0;
}

/* Makes room for one more record: the oldest finished ones go. */
static int records_prune(int procs, fb_error_t *err)
{
    cleanup_free struct record *recs = NULL;
    size_t n = 0;
    if (records_scan(procs, &recs, &n, err) < 0)
        return -1;
    for (size_t i = 0; i < n && n >= FB_PROCS_MAX; i++)
        if (!recs[i].running) {
            record_remove(procs, recs[i].name);
            n--;
        }
    if (n >= FB_PROCS_MAX)
        return fb_error_set(err, FB_ERR_QUOTA, 0, "the sandbox already runs %d background processes",
                            FB_PROCS_MAX);
    return 0;
}

/* ---- start ---- */

static int open_new(int dir, const char *name, int flags, fb_error_t *err)
{
    /* O_CREAT | O_EXCL never follows a symlink; O_NOFOLLOW is left out as
     * it stays in the file's flags, and a restore from a memory checkpoint
     * reopens these files through /proc/self/fd, which it would refuse */
    int fd = openat(dir, name, flags | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return fb_error_sys(err, "create process record %s", name);
    return fd;
}

/* A unix socket path through /proc/self/fd: short whatever the state dir. */
static int ctl_addr(int dir, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    return fb_snprintf(sa->sun_path, sizeof sa->sun_path, "/proc/self/fd/%d/ctl.sock", dir);
}

static json_t *meta_json(const struct fb_proc_spec *spec, const char *cwd, const char *user)
{
    json_t *cmd = json_array();
    for (size_t i = 0; i < spec->exec.argc; i++)
        json_array_append_new(cmd, json_string(spec->exec.argv[i]));
    int64_t now = fb_now_ms();
    char t[40];
    fb_time_format(now, t, sizeof t);
    return json_pack("{s:o, s:s, s:s, s:s, s:b, s:I, s:s, s:I}", "cmd", cmd, "tag", spec->tag, "cwd", cwd,
                     "user", user, "pty", spec->pty, "max_output_bytes", (json_int_t)spec->exec.max_output,
                     "started_at", t, "started_at_ms", (json_int_t)now);
}

static int spawn(const char *sock_path, json_t *req, const int *fds, const struct fb_exec_spec *ex, int *pid,
                 fb_error_t *err)
{
    cleanup_close int c = fb_initconn_open(sock_path, err);
    if (c < 0 || fb_initconn_send(c, req, err) < 0)
        return -1;
    int r = fb_wire_send_fds(c, fds, 4);
    if (r < 0)
        return fb_error_set(err, FB_ERR_UNAVAILABLE, -r, "hand the process's files to the sandbox");
    if (ex->stdin_data != NULL) {
        if ((ex->stdin_len > 0 &&
             fb_initconn_send_data(c, FB_MSG_STDIN, ex->stdin_data, ex->stdin_len, err) < 0) ||
            fb_initconn_send_data(c, FB_MSG_STDIN_EOF, NULL, 0, err) < 0)
            return -1;
    }
    cleanup_json json_t *res = NULL;
    if (fb_initconn_recv_result(c, &res, err) < 0)
        return -1;
    *pid = (int)json_integer_value(json_object_get(res, "pid"));
    if (*pid <= 0)
        return fb_error_set(err, FB_ERR_INTERNAL, EPROTO, "the sandbox did not say which pid it started");
    return 0;
}

int fb_proc_start(struct fb_core *core, const char *tenant, const char *id, const struct fb_proc_spec *spec,
                  json_t **out, fb_error_t *err)
{
    cleanup_handle struct fb_sandbox_handle h = {0};
    if (fb_sandbox_open(core, tenant, id, &h, err) < 0)
        return -1;
    cleanup_close int procs = procs_open(core, h.id, true, err);
    if (procs < 0 || records_prune(procs, err) < 0)
        return -1;
    char name[32], hex[17];
    if (fb_random_hex(hex, 8) < 0)
        return fb_error_sys(err, "random name");
    snprintf(name, sizeof name, "new.%s", hex);
    if (mkdirat(procs, name, 0700) < 0)
        return fb_error_sys(err, "make process record");
    cleanup_close int dir = openat(procs, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0) {
        record_remove(procs, name);
        return fb_error_sys(err, "open process record");
    }
    const char *cwd = spec->exec.cwd[0] ? spec->exec.cwd : h.workdir;
    cleanup_json json_t *meta = meta_json(spec, cwd, spec->exec.user[0] ? spec->exec.user : h.user);
    cleanup_free char *meta_s = meta ? json_dumps(meta, JSON_COMPACT) : NULL;
    cleanup_close int fout = -1, fidx = -1, fstatus = -1, fmeta = -1, ctl = -1, netns = -1;
    cleanup_json json_t *argv = json_array();
    cleanup_json json_t *req = NULL;
    struct sockaddr_un sa;
    int pid = 0, rc = -1;
    if (meta_s == NULL) {
        fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
        goto out;
    }
    if ((fmeta = open_new(dir, "meta.json", O_WRONLY, err)) < 0 ||
        fb_write_all(fmeta, meta_s, strlen(meta_s)) < 0 || (fout = open_new(dir, "out", O_RDWR, err)) < 0 ||
        (fidx = open_new(dir, "idx", O_RDWR, err)) < 0 ||
        (fstatus = open_new(dir, "status", O_RDWR, err)) < 0)
        goto out;
    /* the keeper's files are the sandbox root's: a restore from a memory
     * checkpoint reopens them as that user (they stay out of the sandbox's
     * sight: the records dir is outside its root) */
    if (fchown(fout, (uid_t)h.uid_base, (gid_t)h.uid_base) < 0 ||
        fchown(fidx, (uid_t)h.uid_base, (gid_t)h.uid_base) < 0 ||
        fchown(fstatus, (uid_t)h.uid_base, (gid_t)h.uid_base) < 0) {
        fb_error_sys(err, "hand the process record to the sandbox");
        goto out;
    }
    /* made in the sandbox's network namespace, where a memory checkpoint's
     * dump finds it among the keeper's sockets */
    netns = fb_core_netns_open(h.id, h.init_pid, h.uid_base, err);
    if (netns < 0)
        goto out;
    if (ctl_addr(dir, &sa) < 0) {
        fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "control socket path");
        goto out;
    }
    ctl = fb_memstate_listen_in(netns, sa.sun_path, err);
    if (ctl < 0) {
        fb_error_wrap(err, "make the process's control socket");
        goto out;
    }
    for (size_t i = 0; i < spec->exec.argc; i++)
        json_array_append_new(argv, json_string(spec->exec.argv[i]));
    json_t *env = fb_exec_build_env(h.env, spec->exec.env);
    json_t *pty = spec->pty ? json_pack("{s:i, s:i}", "cols", spec->cols, "rows", spec->rows) : json_null();
    req = json_pack("{s:s, s:O, s:o, s:s, s:s, s:o, s:I, s:b}", "op", "spawn", "argv", argv, "env", env,
                    "cwd", cwd, "user", spec->exec.user[0] ? spec->exec.user : h.user, "pty", pty, "retain",
                    (json_int_t)spec->exec.max_output, "stdin", spec->exec.stdin_data != NULL);
    if (req == NULL) {
        fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "build spawn request");
        goto out;
    }
    int fds[4] = {fout, fidx, fstatus, ctl};
    if (spawn(h.sock_path, req, fds, &spec->exec, &pid, err) < 0)
        goto out;
    char pname[32];
    snprintf(pname, sizeof pname, "%d", pid);
    record_remove(procs, pname); /* an older record of a reused pid */
    if (renameat(procs, name, procs, pname) < 0)
        fb_warn("sandbox %s: name process record %d: %s (listed under its pid later)", h.id, pid,
                strerror(errno));
    json_object_set_new(meta, "pid", json_integer(pid));
    json_object_set_new(meta, "state", json_string("running"));
    json_object_del(meta, "started_at_ms");
    *out = json_incref(meta);
    fb_info("sandbox %s: background process %d started (%s)", h.id, pid, spec->exec.argv[0]);
    rc = 0;
out:
    if (rc < 0)
        record_remove(procs, name);
    return rc;
}

/* ---- list, get ---- */

static json_t *public_json(json_t *rec, const char *pid)
{
    json_object_set_new(rec, "pid", json_integer(atoll(pid)));
    json_object_del(rec, "started_at_ms");
    return rec;
}

int fb_proc_list(struct fb_core *core, const char *tenant, const char *id, json_t **out, fb_error_t *err)
{
    cleanup_handle struct fb_sandbox_handle h = {0};
    if (fb_sandbox_open(core, tenant, id, &h, err) < 0)
        return -1;
    json_t *arr = json_array();
    *out = json_pack("{s:o}", "processes", arr);
    if (*out == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    cleanup_close int procs = procs_open(core, h.id, false, err);
    if (procs == -2)
        return 0;
    cleanup_free struct record *recs = NULL;
    size_t n = 0;
    if (procs < 0 || records_scan(procs, &recs, &n, err) < 0) {
        json_decref(*out);
        *out = NULL;
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        cleanup_close int dir = openat(procs, recs[i].name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        json_t *rec = dir >= 0 ? record_json(dir) : NULL;
        if (rec != NULL)
            json_array_append_new(arr, public_json(rec, recs[i].name));
    }
    return 0;
}

/* Whether a record still waits for its pid name (new.*). */
static bool has_unnamed(int procs)
{
    int fd = dup(procs);
    if (fd < 0)
        return true; /* let the full scan say what is wrong */
    cleanup_dir DIR *d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return true;
    }
    rewinddir(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "new.", 4) == 0)
            return true;
    return false;
}

/* Opens the record of pid in sandbox id of tenant. */
static int record_open(struct fb_core *core, const char *tenant, const char *id, const char *pid,
                       fb_error_t *err)
{
    cleanup_handle struct fb_sandbox_handle h = {0};
    if (fb_sandbox_open(core, tenant, id, &h, err) < 0)
        return -1;
    if (!pid_name_ok(pid))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "pid: must be a positive decimal number");
    cleanup_close int procs = procs_open(core, h.id, false, err);
    if (procs == -2)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "no process %s in sandbox %s", pid, id);
    if (procs < 0)
        return -1;
    /* a start the daemon could not finish naming gets its name now (only
     * then: stdin and resizes come here once per keystroke) */
    cleanup_free struct record *recs = NULL;
    size_t n = 0;
    if (has_unnamed(procs) && records_scan(procs, &recs, &n, err) < 0)
        return -1;
    int dir = openat(procs, pid, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "no process %s in sandbox %s", pid, id);
    return dir;
}

int fb_proc_get(struct fb_core *core, const char *tenant, const char *id, const char *pid, json_t **out,
                fb_error_t *err)
{
    cleanup_close int dir = record_open(core, tenant, id, pid, err);
    if (dir < 0)
        return -1;
    json_t *rec = record_json(dir);
    if (rec == NULL)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "no process %s in sandbox %s", pid, id);
    *out = public_json(rec, pid);
    return 0;
}

/* ---- control ---- */

static int ctl_call(struct fb_core *core, const char *tenant, const char *id, const char *pid, json_t *req,
                    const char *data, size_t len, fb_error_t *err)
{
    cleanup_close int dir = record_open(core, tenant, id, pid, err);
    if (dir < 0)
        return -1;
    struct sockaddr_un sa;
    cleanup_close int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0 || ctl_addr(dir, &sa) < 0)
        return fb_error_sys(err, "control socket");
    if (connect(c, (struct sockaddr *)&sa, sizeof sa) < 0)
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "process %s has exited", pid);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (fb_initconn_send(c, req, err) < 0)
        return -1;
    if (data != NULL) {
        for (size_t off = 0; off < len;) {
            size_t n = len - off > FB_WIRE_MAX_PAYLOAD ? FB_WIRE_MAX_PAYLOAD : len - off;
            if (fb_initconn_send_data(c, FB_MSG_STDIN, data + off, n, err) < 0)
                return -1;
            off += n;
        }
        if (fb_initconn_send_data(c, FB_MSG_STDIN_EOF, NULL, 0, err) < 0)
            return -1;
    }
    return fb_initconn_recv_result(c, NULL, err);
}

int fb_proc_stdin(struct fb_core *core, const char *tenant, const char *id, const char *pid, const char *data,
                  size_t len, bool eof, fb_error_t *err)
{
    if (len > FB_PROC_STDIN_MAX)
        return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "stdin: at most %d bytes per request",
                            FB_PROC_STDIN_MAX);
    cleanup_json json_t *req = json_pack("{s:s, s:b}", "op", "stdin", "eof", eof);
    if (req == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    return ctl_call(core, tenant, id, pid, req, data != NULL ? data : "", len, err);
}

int fb_proc_signal(struct fb_core *core, const char *tenant, const char *id, const char *pid, int sig,
                   fb_error_t *err)
{
    cleanup_json json_t *req = json_pack("{s:s, s:i}", "op", "signal", "signal", sig);
    if (req == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    return ctl_call(core, tenant, id, pid, req, NULL, 0, err);
}

int fb_proc_resize(struct fb_core *core, const char *tenant, const char *id, const char *pid, int cols,
                   int rows, fb_error_t *err)
{
    if (cols < 1 || cols > 1000 || rows < 1 || rows > 1000)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "cols and rows must be 1..1000");
    cleanup_json json_t *req = json_pack("{s:s, s:i, s:i}", "op", "resize", "cols", cols, "rows", rows);
    if (req == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    return ctl_call(core, tenant, id, pid, req, NULL, 0, err);
}

/* ---- output ---- */

int fb_proc_reader_open(struct fb_core *core, const char *tenant, const char *id, const char *pid,
                        uint64_t offset, struct fb_proc_reader *rd, fb_error_t *err)
{
    memset(rd, 0, sizeof *rd);
    rd->dir_fd = rd->out_fd = rd->notify_fd = -1;
    rd->dir_fd = record_open(core, tenant, id, pid, err);
    if (rd->dir_fd < 0)
        return -1;
    cleanup_json json_t *meta = read_json_at(rd->dir_fd, "meta.json", META_MAX);
    rd->pty = json_is_true(json_object_get(meta, "pty"));
    rd->out_fd = openat(rd->dir_fd, "out", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (rd->out_fd < 0)
        return fb_error_sys(err, "open the output of process %s", pid);
    rd->offset = offset;
    /* wake-ups for new output and for the keeper's last close of status */
    rd->notify_fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (rd->notify_fd >= 0) {
        char p[64];
        snprintf(p, sizeof p, "/proc/self/fd/%d/out", rd->dir_fd);
        inotify_add_watch(rd->notify_fd, p, IN_MODIFY);
        snprintf(p, sizeof p, "/proc/self/fd/%d/status", rd->dir_fd);
        inotify_add_watch(rd->notify_fd, p, IN_MODIFY | IN_CLOSE_WRITE);
    }
    return 0;
}

void fb_proc_reader_clear(struct fb_proc_reader *rd)
{
    fb_closep(&rd->dir_fd);
    fb_closep(&rd->out_fd);
    fb_closep(&rd->notify_fd);
    free(rd->idx);
    rd->idx = NULL;
    rd->n_idx = rd->cap_idx = 0;
}

/* Reads the stream switches the keeper added since the last call. */
static void idx_refresh(struct fb_proc_reader *rd)
{
    cleanup_close int fd = openat(rd->dir_fd, "idx", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) < 0)
        return;
    uint64_t size = (uint64_t)sb.st_size > IDX_MAX ? IDX_MAX : (uint64_t)sb.st_size;
    size -= size % sizeof(struct fb_proc_idx);
    while (rd->idx_bytes < size) {
        if (rd->n_idx == rd->cap_idx) {
            size_t cap = rd->cap_idx ? rd->cap_idx * 2 : 16;
            struct fb_proc_idx *n = realloc(rd->idx, cap * sizeof *n);
            if (n == NULL)
                return;
            rd->idx = n;
            rd->cap_idx = cap;
        }
        if (pread(fd, &rd->idx[rd->n_idx], sizeof rd->idx[0], (off_t)rd->idx_bytes) != sizeof rd->idx[0])
            return;
        rd->n_idx++;
        rd->idx_bytes += sizeof rd->idx[0];
    }
}

/* The stream of the byte at off and where the next switch is (UINT64_MAX:
 * none known). */
static uint32_t stream_at(const struct fb_proc_reader *rd, uint64_t off, uint64_t *next)
{
    size_t lo = 0, hi = rd->n_idx;
    while (lo < hi) { /* first record past off */
        size_t mid = (lo + hi) / 2;
        if (rd->idx[mid].offset <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    *next = lo < rd->n_idx ? rd->idx[lo].offset : UINT64_MAX;
    return lo > 0 ? rd->idx[lo - 1].stream : 1;
}

static json_t *data_event(const char *type, uint64_t offset, const char *buf, size_t n)
{
    json_t *ev = json_pack("{s:s, s:I}", "type", type, "offset", (json_int_t)offset);
    if (ev == NULL)
        return NULL;
    if (fb_utf8_valid(buf, n)) {
        json_object_set_new(ev, "data", json_stringn(buf, n));
    } else {
        cleanup_free char *b64 = fb_base64_encode(buf, n);
        json_object_set_new(ev, "data_b64", b64 ? json_string(b64) : json_null());
    }
    return ev;
}

json_t *fb_proc_reader_next(struct fb_proc_reader *rd, size_t max_bytes)
{
    struct stat sb;
    if (fstat(rd->out_fd, &sb) < 0)
        return NULL;
    uint64_t size = (uint64_t)sb.st_size;
    bool alive = keeper_alive(rd->dir_fd);
    if (!alive && fstat(rd->out_fd, &sb) == 0)
        size = (uint64_t)sb.st_size; /* what it wrote before it went */
    off_t first = lseek(rd->out_fd, 0, SEEK_DATA);
    uint64_t kept = first < 0 ? size : (uint64_t)first;
    if (rd->offset < kept) {
        json_t *ev = json_pack("{s:s, s:I, s:I}", "type", "dropped", "offset", (json_int_t)rd->offset,
                               "bytes", (json_int_t)(kept - rd->offset));
        rd->offset = kept;
        return ev;
    }
    if (rd->offset < size) {
        idx_refresh(rd);
        uint64_t next;
        uint32_t stream = stream_at(rd, rd->offset, &next);
        uint64_t want = size - rd->offset;
        if (want > max_bytes)
            want = max_bytes;
        if (next != UINT64_MAX && next - rd->offset < want)
            want = next - rd->offset;
        cleanup_free char *buf = malloc(want ? want : 1);
        if (buf == NULL)
            return NULL;
        ssize_t n = pread(rd->out_fd, buf, want, (off_t)rd->offset);
        if (n <= 0)
            return NULL;
        size_t use = (size_t)n;
        /* a character cut by the chunk's end goes out whole with the next */
        size_t whole = fb_utf8_complete_prefix(buf, use);
        if (whole > 0 && whole < use && use - whole < 4 && rd->offset + use < size)
            use = whole;
        const char *type = rd->pty ? "pty" : stream == 2 ? "stderr" : "stdout";
        json_t *ev = data_event(type, rd->offset, buf, use);
        rd->offset += use;
        return ev;
    }
    if (alive)
        return NULL;
    cleanup_json json_t *st = read_json_at(rd->dir_fd, "status", STATUS_MAX);
    json_t *code = json_object_get(st, "exit_code");
    if (code == NULL)
        return json_pack("{s:s, s:I}", "type", "lost", "offset", (json_int_t)rd->offset);
    json_t *sig = json_object_get(st, "signal");
    return json_pack("{s:s, s:I, s:O, s:O}", "type", "exit", "offset", (json_int_t)rd->offset, "exit_code",
                     code, "signal", sig ? sig : json_null());
}

void fb_proc_reader_wait(struct fb_proc_reader *rd, int timeout_ms)
{
    if (rd->notify_fd < 0) {
        usleep((useconds_t)(timeout_ms > 200 ? 200 : timeout_ms) * 1000);
        return;
    }
    struct pollfd p = {.fd = rd->notify_fd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) > 0) {
        char buf[4096];
        while (read(rd->notify_fd, buf, sizeof buf) > 0)
            ;
    }
}

void fb_proc_reader_seek_end(struct fb_proc_reader *rd)
{
    struct stat sb;
    if (fstat(rd->out_fd, &sb) == 0)
        rd->offset = (uint64_t)sb.st_size;
}
