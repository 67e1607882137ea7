#include "criu.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/util.h"

extern char **environ;

/* argv[0] of the process the self-test dumps: lets us tell it from an
 * unrelated process that reused its pid */
#define SELFTEST_ARGV0 "forkbox-criu-selftest"
#define SELFTEST_ARG "86399"
#define OUTPUT_CAP 16384

int fb_criu_parse_version(const char *text, char *version, size_t len, int *major)
{
    for (const char *line = text; line != NULL && *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        if (n > 8 && strncmp(line, "Version:", 8) == 0) {
            const char *v = line + 8;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t vn = strspn(v, "0123456789.");
            if (vn == 0 || v[0] == '.' || vn >= len || (size_t)(v - line) + vn > n)
                return -1;
            memcpy(version, v, vn);
            version[vn] = '\0';
            *major = atoi(version);
            return 0;
        }
        line = end ? end + 1 : NULL;
    }
    return -1;
}

static bool executable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

int fb_criu_locate(const char *configured, char *out, size_t len, fb_error_t *err)
{
    out[0] = '\0';
    if (configured != NULL && configured[0] != '\0') {
        if (!executable(configured))
            return fb_error_set(err, FB_ERR_UNSUPPORTED, 0,
                                "criu binary %s (--criu / FORKBOX_CRIU) is missing or not executable",
                                configured);
        if (fb_strlcpy(out, configured, len) < 0)
            return fb_error_set(err, FB_ERR_UNSUPPORTED, ENAMETOOLONG, "criu path too long");
        return 0;
    }
    if (executable(FB_CRIU_INSTALL_PATH))
        return fb_strlcpy(out, FB_CRIU_INSTALL_PATH, len) < 0 ? -1 : 0;
    const char *path = getenv("PATH");
    if (path == NULL || path[0] == '\0')
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    while (*path) {
        size_t n = strcspn(path, ":");
        char cand[PATH_MAX];
        if (n > 0 && n < sizeof cand - 6) {
            snprintf(cand, sizeof cand, "%.*s/criu", (int)n, path);
            if (executable(cand))
                return fb_strlcpy(out, cand, len) < 0 ? -1 : 0;
        }
        path += n;
        if (*path == ':')
            path++;
    }
    return fb_error_set(err, FB_ERR_UNSUPPORTED, 0,
                        "criu not found (looked at " FB_CRIU_INSTALL_PATH
                        " and PATH); run scripts/install-criu.sh as root");
}

static void kill_group(pid_t pid)
{
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
}

/* Default dispositions and an empty mask for a spawned program: the daemon
 * ignores SIGPIPE and may block signals in its threads. */
static int spawn_attr(posix_spawnattr_t *attr, short flags)
{
    sigset_t none, deflt;
    sigemptyset(&none);
    sigemptyset(&deflt);
    sigaddset(&deflt, SIGPIPE);
    sigaddset(&deflt, SIGTERM);
    sigaddset(&deflt, SIGINT);
    sigaddset(&deflt, SIGHUP);
    sigaddset(&deflt, SIGCHLD);
    int r = posix_spawnattr_init(attr);
    if (r == 0)
        r = posix_spawnattr_setflags(attr, flags | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    if (r == 0)
        r = posix_spawnattr_setsigmask(attr, &none);
    if (r == 0)
        r = posix_spawnattr_setsigdefault(attr, &deflt);
    return r;
}

/* The child side of spawn_criu: only async-signal-safe calls, as the
 * daemon is multi-threaded. */
static void criu_child(const char *path, char *const *argv, char *const *envp, int out_wr, int go_rd,
                       const int *fds, size_t nfds)
{
    setpgid(0, 0);
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    for (int sig = 1; sig < 65; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (go_rd >= 0) {
        char go;
        if (read(go_rd, &go, 1) != 1)
            _exit(126);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out_wr, 1) < 0 || dup2(out_wr, 2) < 0)
        _exit(126);
    /* the inherited fds were moved above FB_CRIU_FD_BASE + nfds by the
     * parent, so these dup2s never overwrite a source still to be moved */
    for (size_t i = 0; i < nfds; i++)
        if (dup2(fds[i], FB_CRIU_FD_BASE + (int)i) < 0)
            _exit(126);
    syscall(SYS_close_range, 3, FB_CRIU_FD_BASE - 1, 0);
    syscall(SYS_close_range, FB_CRIU_FD_BASE + (unsigned)nfds, ~0U, 0);
    execve(path, argv, envp);
    _exit(127);
}

/* Starts criu in a process group of its own, stdout+stderr on out_wr, the
 * fds of cmd at FB_CRIU_FD_BASE.., and cmd->before_exec run (by the parent)
 * while the child waits.  Returns the pid or -1. */
static pid_t spawn_criu(const char *path, const char *const *argv, int out_wr, const struct fb_criu_cmd *cmd,
                        fb_error_t *err)
{
    static const char *const envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                       "LANG=C", "CRIU_FAULT=130", NULL};
    size_t nfds = cmd ? cmd->nfds : 0;
    if (nfds > FB_CRIU_MAX_FDS)
        return fb_error_set(err, FB_ERR_INTERNAL, E2BIG, "too many fds for criu");
    int moved[FB_CRIU_MAX_FDS];
    size_t nmoved = 0;
    int rc = 0;
    for (size_t i = 0; i < nfds && rc == 0; i++) {
        moved[i] = fcntl(cmd->fds[i], F_DUPFD_CLOEXEC, FB_CRIU_FD_BASE + FB_CRIU_MAX_FDS);
        if (moved[i] < 0)
            rc = fb_error_sys(err, "dup an fd for criu");
        else
            nmoved++;
    }
    int go[2] = {-1, -1};
    bool hook = cmd != NULL && cmd->before_exec != NULL;
    if (rc == 0 && hook && pipe2(go, O_CLOEXEC) < 0)
        rc = fb_error_sys(err, "pipe");
    pid_t pid = -1;
    if (rc == 0) {
        pid = fork();
        if (pid == 0)
            criu_child(path, (char *const *)argv, (char *const *)envp, out_wr, go[0], moved, nfds);
        if (pid < 0)
            rc = fb_error_sys(err, "fork for %s", path);
    }
    if (go[0] >= 0)
        close(go[0]);
    if (rc == 0 && hook) {
        if (cmd->before_exec(pid, cmd->arg, err) < 0 || write(go[1], "g", 1) != 1) {
            kill_group(pid);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
            if (err == NULL || *err == NULL)
                fb_error_sys(err, "start criu");
            rc = -1;
        }
    }
    if (go[1] >= 0)
        close(go[1]);
    for (size_t i = 0; i < nmoved; i++)
        close(moved[i]);
    return rc < 0 ? -1 : pid;
}

int fb_criu_run(const char *path, const char *const *args, int timeout_ms, size_t cap,
                const atomic_bool *cancel, char **output, int *status, fb_error_t *err)
{
    return fb_criu_run_cmd(path, args, NULL, timeout_ms, cap, cancel, output, status, err);
}

int fb_criu_run_cmd(const char *path, const char *const *args, const struct fb_criu_cmd *cmd, int timeout_ms,
                    size_t cap, const atomic_bool *cancel, char **output, int *status, fb_error_t *err)
{
    *output = NULL;
    *status = 0;
    const char *argv[FB_CRIU_MAX_ARGS];
    size_t argc = 0;
    argv[argc++] = path;
    for (; args[argc - 1] != NULL; argc++) {
        if (argc >= sizeof argv / sizeof argv[0] - 1)
            return fb_error_set(err, FB_ERR_INTERNAL, E2BIG, "too many criu arguments");
        argv[argc] = args[argc - 1];
    }
    argv[argc] = NULL;

    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return fb_error_sys(err, "pipe");
    cleanup_close int rd = pfd[0];
    cleanup_close int wr = pfd[1];
    pid_t pid = spawn_criu(path, argv, wr, cmd, err);
    if (pid < 0)
        return -1;
    fb_closep(&wr);

    cleanup_close int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    cleanup_free char *buf = malloc(cap + 1);
    size_t used = 0;
    int64_t deadline = fb_mono_ms() + timeout_ms;
    bool exited = false, timed_out = false, cancelled = false, out_open = true;
    int st = 0;
    while (!exited) {
        if (cancel != NULL && atomic_load(cancel)) {
            cancelled = true;
            break;
        }
        int64_t left = deadline - fb_mono_ms();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        struct pollfd fds[2] = {{.fd = out_open ? rd : -1, .events = POLLIN},
                                {.fd = pidfd, .events = POLLIN}};
        /* short slices: the cancel flag is read between them, and without a
         * pidfd the exit is found by waitpid */
        int n = poll(fds, 2, left < 100 ? (int)left : 100);
        if (n < 0 && errno != EINTR) {
            timed_out = true; /* cannot wait: treat as a hang, kill it */
            break;
        }
        if (out_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
            char chunk[4096];
            ssize_t got = read(rd, chunk, sizeof chunk);
            if (got > 0) {
                size_t keep = buf && used < cap ? cap - used : 0;
                if ((size_t)got < keep)
                    keep = (size_t)got;
                if (keep > 0)
                    memcpy(buf + used, chunk, keep);
                used += keep;
            } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
                out_open = false;
            }
        }
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid || (w < 0 && errno == ECHILD))
            exited = true;
    }
    if (!exited) {
        kill_group(pid);
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (cancelled)
            return fb_error_set(err, FB_ERR_UNAVAILABLE, 0, "cancelled");
        return fb_error_set(err, FB_ERR_UNAVAILABLE, 0, "timed out after %d ms", timeout_ms);
    }
    /* what is still in the pipe; a helper criu left behind may hold the
     * write end, so never block on it */
    fcntl(rd, F_SETFL, O_NONBLOCK);
    for (;;) {
        char chunk[4096];
        ssize_t got = read(rd, chunk, sizeof chunk);
        if (got <= 0)
            break;
        size_t keep = buf && used < cap ? cap - used : 0;
        if ((size_t)got < keep)
            keep = (size_t)got;
        if (keep > 0)
            memcpy(buf + used, chunk, keep);
        used += keep;
    }
    (void)timed_out;
    if (buf == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "criu output");
    buf[used] = '\0';
    *status = st;
    *output = fb_steal_ptr(buf);
    return 0;
}

/* The lines of text worth showing in a reason: those that mention an error
 * if there are any, else the first ones; joined with " | ". */
static void summarize(const char *text, char *dst, size_t len)
{
    dst[0] = '\0';
    if (text == NULL || len == 0)
        return;
    bool any_error = strstr(text, "Error") != NULL || strstr(text, "error") != NULL;
    size_t used = 0, lines = 0;
    for (const char *line = text; *line && lines < 4;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        bool pick = n > 0 && (!any_error || memmem(line, n, "rror", 4) != NULL);
        if (pick) {
            int w = snprintf(dst + used, len - used, "%s%.*s", used ? " | " : "", (int)n, line);
            if (w < 0 || (size_t)w >= len - used) {
                dst[len - 1] = '\0';
                return;
            }
            used += (size_t)w;
            lines++;
        }
        if (end == NULL)
            break;
        line = end + 1;
    }
}

static void set_reason(struct fb_criu_result *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_reason(struct fb_criu_result *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->reason, sizeof out->reason, fmt, ap);
    va_end(ap);
    out->state = FB_CRIU_UNAVAILABLE;
}

static void describe_status(int st, char *buf, size_t len)
{
    if (WIFEXITED(st))
        snprintf(buf, len, "exited %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(buf, len, "killed by signal %d", WTERMSIG(st));
    else
        snprintf(buf, len, "ended (status %d)", st);
}

/* Runs one criu step; on failure fills out->reason with what and the first
 * lines of log_path (or of criu's own output) and returns -1. */
static int step(const struct fb_criu_probe *probe, struct fb_criu_result *out, const char *what,
                const char *const *args, const char *log_path, char **output_out)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_free char *output = NULL;
    int st = 0;
    if (fb_criu_run(out->path, args, probe->step_timeout_ms, OUTPUT_CAP, probe->cancel, &output, &st, &err) <
        0) {
        set_reason(out, "%s: %s", what, err->msg);
        return -1;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        if (output_out != NULL)
            *output_out = fb_steal_ptr(output);
        return 0;
    }
    char how[64], lines[512];
    describe_status(st, how, sizeof how);
    cleanup_free char *log = NULL;
    size_t log_len = 0;
    if (log_path != NULL && fb_read_file(log_path, 1 << 20, &log, &log_len) == 0)
        summarize(log, lines, sizeof lines);
    else
        summarize(output, lines, sizeof lines);
    set_reason(out, "%s %s: %s", what, how, lines[0] ? lines : "(no output)");
    return -1;
}

/* Whether pid is the self-test's sleeper (and not a process that reused
 * its pid). */
static bool is_sleeper(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    cleanup_free char *text = NULL;
    size_t len = 0;
    if (fb_read_file(path, 4096, &text, &len) < 0)
        return false;
    static const char want[] = SELFTEST_ARGV0 "\0" SELFTEST_ARG;
    return len >= sizeof want && memcmp(text, want, sizeof want) == 0;
}

/* Kills the sleeper (if pid is still it) and reaps it if it is our child;
 * waits up to ~1 s for it to be gone. */
static void end_sleeper(pid_t pid)
{
    if (pid <= 0)
        return;
    for (int i = 0; i < 100; i++) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return;
        if (!is_sleeper(pid))
            return; /* gone (or a zombie of another parent, which reaps it) */
        kill(pid, SIGKILL);
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static pid_t spawn_sleeper(char *why, size_t len)
{
    static const char *const argv[] = {SELFTEST_ARGV0, SELFTEST_ARG, NULL};
    static const char *const envp[] = {"PATH=/usr/bin:/bin", NULL};
    const char *bin = access("/usr/bin/sleep", X_OK) == 0 ? "/usr/bin/sleep" : "/bin/sleep";
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int r = posix_spawn_file_actions_init(&fa);
    for (int fd = 0; r == 0 && fd < 3; fd++)
        r = posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);
    if (r == 0)
        r = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    if (r == 0)
        r = posix_spawn_file_actions_addchdir_np(&fa, "/");
    if (r == 0)
        r = spawn_attr(&attr, POSIX_SPAWN_SETSID);
    pid_t pid = -1;
    if (r == 0)
        r = posix_spawn(&pid, bin, &fa, &attr, (char *const *)argv, (char *const *)envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (r != 0) {
        snprintf(why, len, "cannot start %s for the dump/restore test: %s", bin, strerror(r));
        return -1;
    }
    return pid;
}

/* Dumps a sleeping process (criu kills it), restores it detached, checks
 * it runs again, kills it. */
static void dump_restore(const struct fb_criu_probe *probe, struct fb_criu_result *out)
{
    char dir[PATH_MAX];
    if (fb_snprintf(dir, sizeof dir, "%s/criu-selftest.XXXXXX", probe->work_dir) < 0 ||
        mkdtemp(dir) == NULL) {
        set_reason(out, "cannot create a directory for the dump/restore test in %s: %s", probe->work_dir,
                   strerror(errno));
        return;
    }
    char why[256];
    pid_t pid = spawn_sleeper(why, sizeof why);
    if (pid < 0) {
        set_reason(out, "%s", why);
        fb_rm_rf(dir);
        return;
    }
    char pid_s[16], dump_log[PATH_MAX + 16], restore_log[PATH_MAX + 16];
    snprintf(pid_s, sizeof pid_s, "%d", (int)pid);
    snprintf(dump_log, sizeof dump_log, "%s/dump.log", dir);
    snprintf(restore_log, sizeof restore_log, "%s/restore.log", dir);
    const char *const dump[] = {"dump", "-t", pid_s, "-D", dir, "-o", "dump.log", "-v2", NULL};
    if (step(probe, out, "dump test: criu dump", dump, dump_log, NULL) < 0) {
        end_sleeper(pid);
        fb_rm_rf(dir);
        return;
    }
    /* criu killed the original after dumping it; its pid must be free
     * before the restore can take it again */
    end_sleeper(pid);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    const char *const restore[] = {"restore", "-d", "-D", dir, "-o", "restore.log", "-v2", NULL};
    if (step(probe, out, "dump test: criu restore", restore, restore_log, NULL) < 0) {
        end_sleeper(pid);
        fb_rm_rf(dir);
        return;
    }
    if (!is_sleeper(pid))
        set_reason(out, "dump test: criu restore succeeded but process %d is not running afterwards",
                   (int)pid);
    end_sleeper(pid);
    fb_rm_rf(dir);
}

static void selftest(const struct fb_criu_probe *probe, struct fb_criu_result *out)
{
    cleanup_error fb_error_t err = NULL;
    if (fb_criu_locate(probe->configured, out->path, sizeof out->path, &err) < 0) {
        set_reason(out, "%s", err->msg);
        return;
    }
    cleanup_free char *version_text = NULL;
    static const char *const version[] = {"--version", NULL};
    if (step(probe, out, "criu --version", version, NULL, &version_text) < 0)
        return;
    int major = 0;
    if (fb_criu_parse_version(version_text, out->version, sizeof out->version, &major) < 0) {
        char lines[256];
        summarize(version_text, lines, sizeof lines);
        set_reason(out, "%s --version printed no version: %s", out->path, lines[0] ? lines : "(no output)");
        return;
    }
    if (major < FB_CRIU_MIN_MAJOR) {
        set_reason(out,
                   "criu %s at %s is older than %d.0 (Debian 12's criu fails on current kernels); "
                   "run scripts/install-criu.sh",
                   out->version, out->path, FB_CRIU_MIN_MAJOR);
        return;
    }
    static const char *const check[] = {"check", NULL};
    if (step(probe, out, "criu check", check, NULL, NULL) < 0)
        return;
    dump_restore(probe, out);
}

void fb_criu_selftest(const struct fb_criu_probe *probe, struct fb_criu_result *out)
{
    int64_t start = fb_mono_ms();
    memset(out, 0, sizeof *out);
    out->state = FB_CRIU_CHECKING;
    selftest(probe, out);
    if (out->state == FB_CRIU_CHECKING)
        out->state = FB_CRIU_AVAILABLE;
    out->took_ms = fb_mono_ms() - start;
}

void fb_criu_log_summary(const char *log_path, const char *output, char *dst, size_t len)
{
    cleanup_free char *log = NULL;
    size_t log_len = 0;
    if (log_path != NULL && fb_read_file(log_path, 4 << 20, &log, &log_len) == 0)
        summarize(log, dst, len);
    else
        summarize(output, dst, len);
}
