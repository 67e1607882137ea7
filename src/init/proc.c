/* The exec worker: runs one command and carries its output to the daemon.
 *
 * The worker is a child subreaper, so every process the command starts
 * (even ones that daemonise) stays in its subtree until it is gone; on a
 * timeout or a vanished daemon the worker kills that whole subtree. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/wire.h"
#include "init.h"

#define CHUNK 65536
#define STDIN_MAX (16u << 20)

static const char *const signames[] = {
    [SIGHUP] = "HUP",   [SIGINT] = "INT",   [SIGQUIT] = "QUIT", [SIGILL] = "ILL",   [SIGTRAP] = "TRAP",
    [SIGABRT] = "ABRT", [SIGBUS] = "BUS",   [SIGFPE] = "FPE",   [SIGKILL] = "KILL", [SIGUSR1] = "USR1",
    [SIGSEGV] = "SEGV", [SIGUSR2] = "USR2", [SIGPIPE] = "PIPE", [SIGALRM] = "ALRM", [SIGTERM] = "TERM",
    [SIGXCPU] = "XCPU", [SIGXFSZ] = "XFSZ", [SIGSYS] = "SYS",
};

int64_t fbi_clock_ms(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void)
{
    return fbi_clock_ms(CLOCK_MONOTONIC);
}

static double mono_ms_f(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* SIGKILLs every descendant of this process, repeatedly, until none is
 * left.  Killed processes cannot fork, so each pass shrinks the tree; the
 * pass bound only guards against a kernel that reports nonsense. */
static void kill_subtree(pid_t main_pid)
{
    if (main_pid > 0)
        kill(-main_pid, SIGKILL);
    for (int pass = 0; pass < 1000; pass++) {
        int found = 0;
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)getpid(), (int)getpid());
        FILE *f = fopen(path, "re");
        if (f != NULL) {
            int pid;
            while (fscanf(f, "%d", &pid) == 1) {
                kill(pid, SIGKILL);
                found = 1;
            }
            fclose(f);
        }
        /* children reparented to us as their parents die are reaped here */
        while (waitpid(-1, NULL, WNOHANG) > 0)
            found = 1;
        if (!found) {
            if (waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD)
                return;
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
}

char **fbi_json_strv(json_t *arr, size_t max)
{
    if (!json_is_array(arr) || json_array_size(arr) > max)
        return NULL;
    size_t n = json_array_size(arr);
    char **v = calloc(n + 1, sizeof *v);
    if (v == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(arr, i));
        if (s == NULL)
            return NULL;
        v[i] = (char *)s; /* borrowed from req, which lives until exit */
    }
    return v;
}

struct outstream {
    int fd;
    uint16_t type;
    int64_t sent;
};

/* Reads what is available from one output pipe and forwards it within the
 * cap.  Returns 1 after data, 0 at EOF, -1 when nothing is ready now. */
static int pump_output(int conn, struct outstream *o, int64_t cap, bool *truncated, bool *conn_dead)
{
    char buf[CHUNK];
    ssize_t n = read(o->fd, buf, sizeof buf);
    if (n < 0)
        return (errno == EINTR || errno == EAGAIN) ? -1 : 0;
    if (n == 0)
        return 0;
    int64_t room = cap - o->sent;
    size_t send_n = (size_t)n;
    if (room < (int64_t)send_n) {
        send_n = room > 0 ? (size_t)room : 0;
        *truncated = true;
    }
    if (send_n > 0 && !*conn_dead) {
        if (fb_wire_send(conn, o->type, buf, send_n) < 0)
            *conn_dead = true;
        o->sent += (int64_t)send_n;
    }
    return 1;
}

void fbi_child_exec(int in_fd, int out_fd, int err_fd, int errpipe, char **argv, char **envp, const char *cwd,
                    const struct fbi_user *u, bool ctty)
{
    setsid();
    /* a terminal's slave end becomes the session's controlling terminal */
    if (ctty)
        (void)ioctl(in_fd, TIOCSCTTY, 0);
    signal(SIGPIPE, SIG_DFL);
    dup2(in_fd, 0);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    int e = 0;
    const char *what = "chdir";
    if (chdir(cwd) < 0) {
        e = errno;
    } else if (u->uid != 0 || u->gid != 0) {
        what = "set user";
        if (setgroups(0, NULL) < 0 || setresgid(u->gid, u->gid, u->gid) < 0 ||
            setresuid(u->uid, u->uid, u->uid) < 0)
            e = errno;
    }
    if (e == 0) {
        what = "exec";
        /* HOME comes from the user's passwd entry unless the caller set it */
        size_t n = 0;
        int has_home = 0;
        for (; envp[n] != NULL; n++)
            has_home |= strncmp(envp[n], "HOME=", 5) == 0;
        char home[300];
        char **full = has_home ? envp : calloc(n + 2, sizeof *full);
        if (full != NULL && !has_home) {
            memcpy(full, envp, n * sizeof *full);
            snprintf(home, sizeof home, "HOME=%s", u->home[0] ? u->home : "/");
            full[n] = home;
        }
        extern char **environ;
        environ = full != NULL ? full : envp;
        execvp(argv[0], argv);
        e = errno;
    }
    char msg[512];
    int len = snprintf(msg, sizeof msg, "%d %s", e, what);
    (void)!write(errpipe, msg, (size_t)len);
    _exit(127);
}

int fbi_exec_failure(int errpipe, const char *cwd, const char *argv0, char *msg, size_t len)
{
    char exmsg[512];
    ssize_t n = read(errpipe, exmsg, sizeof exmsg - 1);
    close(errpipe);
    if (n <= 0)
        return 0; /* closed on exec: it started */
    exmsg[n] = '\0';
    int e = atoi(exmsg);
    const char *what = strchr(exmsg, ' ');
    what = what != NULL ? what + 1 : "exec";
    snprintf(msg, len, "%s %s: %s", what, strcmp(what, "chdir") == 0 ? cwd : argv0, strerror(e));
    return e != 0 ? e : EIO;
}

int fbi_read_stdin(int conn, size_t max, char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    for (;;) {
        struct fb_frame f;
        if (fb_wire_recv(conn, &f) < 0)
            return -1;
        if (f.type == FB_MSG_STDIN_EOF) {
            free(f.data);
            return 0;
        }
        if (f.type != FB_MSG_STDIN || *len + f.len > max) {
            free(f.data);
            fbi_send_error(conn, EPROTO, "bad stdin stream");
            return -1;
        }
        char *nb = realloc(*buf, *len + f.len + 1);
        if (nb == NULL) {
            free(f.data);
            return -1;
        }
        *buf = nb;
        memcpy(*buf + *len, f.data, f.len);
        *len += f.len;
        free(f.data);
    }
}

json_t *fbi_status_json(int status)
{
    json_t *res = json_object();
    if (res == NULL)
        return NULL;
    if (WIFEXITED(status)) {
        json_object_set_new(res, "exit_code", json_integer(WEXITSTATUS(status)));
        json_object_set_new(res, "signal", json_null());
    } else {
        int sig = WTERMSIG(status);
        json_object_set_new(res, "exit_code", json_integer(128 + sig));
        const char *name = (sig > 0 && sig < (int)(sizeof signames / sizeof signames[0]) && signames[sig])
                               ? signames[sig]
                               : NULL;
        json_object_set_new(res, "signal", name ? json_string(name) : json_integer(sig));
    }
    return res;
}

void fbi_exec_serve(int conn, json_t *req)
{
    char **argv = fbi_json_strv(json_object_get(req, "argv"), 65536);
    char **envp = fbi_json_strv(json_object_get(req, "env"), 65536);
    const char *cwd = json_string_value(json_object_get(req, "cwd"));
    const char *user = json_string_value(json_object_get(req, "user"));
    json_int_t timeout_ms = json_integer_value(json_object_get(req, "timeout_ms"));
    json_int_t cap = json_integer_value(json_object_get(req, "max_output"));
    bool want_stdin = json_is_true(json_object_get(req, "stdin"));
    if (argv == NULL || argv[0] == NULL || envp == NULL || cwd == NULL || timeout_ms <= 0 || cap < 0) {
        fbi_send_error(conn, EINVAL, "malformed exec request");
        _exit(1);
    }
    struct fbi_user u;
    if (fbi_user_lookup(user != NULL ? user : "root", &u) < 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "unknown user %.64s", user);
        fbi_send_error(conn, EINVAL, msg);
        _exit(1);
    }

    /* Stdin arrives in full before the command starts: the daemon bounds
     * it, and having it all avoids a pipe deadlock against a command that
     * writes before it reads. */
    char *in_buf = NULL;
    size_t in_len = 0;
    if (want_stdin && fbi_read_stdin(conn, STDIN_MAX, &in_buf, &in_len) < 0)
        _exit(1);

    prctl(PR_SET_CHILD_SUBREAPER, 1);
    int pin[2], pout[2], perr[2], pex[2];
    if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0 ||
        pipe2(pex, O_CLOEXEC) < 0) {
        fbi_send_error(conn, errno, "pipe");
        _exit(1);
    }
    double started = mono_ms_f();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        fbi_send_error(conn, e,
                       e == EAGAIN ? "cannot start the command: the sandbox is at its pids limit"
                                   : "cannot start the command: fork failed");
        _exit(1);
    }
    if (pid == 0)
        fbi_child_exec(pin[0], pout[1], perr[1], pex[1], argv, envp, cwd, &u, false);
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    close(pex[1]);
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);

    char why[640];
    if (fbi_exec_failure(pex[0], cwd, argv[0], why, sizeof why) != 0) {
        char line[660];
        int len = snprintf(line, sizeof line, "forkbox: %s\n", why);
        fb_wire_send(conn, FB_MSG_STDERR, line, (size_t)len);
    }

    fcntl(pin[1], F_SETFL, O_NONBLOCK);
    fcntl(pout[0], F_SETFL, O_NONBLOCK);
    fcntl(perr[0], F_SETFL, O_NONBLOCK);
    struct outstream outs[2] = {{pout[0], FB_MSG_STDOUT, 0}, {perr[0], FB_MSG_STDERR, 0}};
    bool out_open[2] = {true, true};
    size_t in_off = 0;
    int in_fd = pin[1];
    if (in_len == 0) {
        close(in_fd);
        in_fd = -1;
    }
    bool truncated = false, conn_dead = false, timed_out = false, exited = false;
    int status = 0;
    int64_t deadline = mono_ms() + timeout_ms;

    while (!exited) {
        struct pollfd p[5];
        int np = 0, ix_conn, ix_pid, ix_in = -1, ix_out[2] = {-1, -1};
        ix_conn = np;
        p[np++] = (struct pollfd){.fd = conn, .events = POLLIN};
        ix_pid = np;
        p[np++] = (struct pollfd){.fd = pidfd, .events = POLLIN};
        for (int i = 0; i < 2; i++)
            if (out_open[i]) {
                ix_out[i] = np;
                p[np++] = (struct pollfd){.fd = outs[i].fd, .events = POLLIN};
            }
        if (in_fd >= 0) {
            ix_in = np;
            p[np++] = (struct pollfd){.fd = in_fd, .events = POLLOUT};
        }
        int64_t left = deadline - mono_ms();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        int r = poll(p, (nfds_t)np, left > 1000 ? 1000 : (int)left);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        if (p[ix_conn].revents) {
            /* the daemon sends nothing more after stdin: any event is a hangup */
            conn_dead = true;
            break;
        }
        for (int i = 0; i < 2; i++)
            if (ix_out[i] >= 0 && p[ix_out[i]].revents &&
                pump_output(conn, &outs[i], cap, &truncated, &conn_dead) == 0)
                out_open[i] = false;
        if (conn_dead)
            break;
        if (ix_in >= 0 && p[ix_in].revents) {
            ssize_t w = write(in_fd, in_buf + in_off, in_len - in_off);
            if (w > 0)
                in_off += (size_t)w;
            if ((w < 0 && errno != EAGAIN && errno != EINTR) || in_off == in_len) {
                close(in_fd);
                in_fd = -1;
            }
        }
        if (p[ix_pid].revents) {
            if (waitpid(pid, &status, WNOHANG) == pid)
                exited = true;
        }
    }

    if (!exited) {
        kill_subtree(pid);
        if (waitpid(pid, &status, 0) != pid)
            status = SIGKILL;
    }
    /* what the command wrote before it exited is still in the pipes */
    for (int i = 0; i < 2; i++)
        while (out_open[i] && !conn_dead && pump_output(conn, &outs[i], cap, &truncated, &conn_dead) == 1)
            ;
    if (conn_dead)
        _exit(1);

    json_t *res = fbi_status_json(status);
    if (res == NULL)
        _exit(1);
    json_object_set_new(res, "timed_out", json_boolean(timed_out));
    json_object_set_new(res, "truncated", json_boolean(truncated));
    json_object_set_new(res, "duration_ms", json_real(mono_ms_f() - started));
    fbi_send_ok(conn, res);
    _exit(0);
}
