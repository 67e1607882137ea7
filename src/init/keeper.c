/* Background processes: the worker that serves a "spawn" becomes the
 * process's keeper and outlives both the request and the daemon.
 *
 * The daemon hands over four fds, all opened on the host in a directory the
 * sandbox cannot reach (next to its writable layer, on its own disk):
 *   out     the output, appended as it comes: file offset == stream offset
 *   idx     one record per switch between stdout and stderr
 *   status  {"pid"} while running, then the exit; flock()ed while the
 *           keeper lives, so a daemon can tell a running process from one
 *           whose keeper was killed
 *   ctl     a listening unix socket the daemon connects to (stdin, signals,
 *           resize); its path lives on the host only
 * None of them lets the sandbox reach a host path.  Output beyond the
 * retained size is dropped from the front by punching a hole, so offsets
 * never move and a reader finds the first kept byte with SEEK_DATA. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "common/wire.h"
#include "init.h"

#define KEEP_CHUNK 65536
#define STDIN_PENDING_MAX (1u << 20)
#define IDX_MAX (4u << 20)

enum { FD_OUT, FD_IDX, FD_STATUS, FD_CTL, N_FDS };

struct idx_record {
    uint64_t offset;
    uint32_t stream; /* 1 stdout (or the terminal), 2 stderr */
    uint32_t reserved;
};

struct keeper {
    int fds[N_FDS];
    pid_t pid;
    int pidfd;
    int out[2];     /* read ends: stdout, stderr (or the terminal, and -1) */
    int in;         /* write end of stdin, or the terminal */
    bool in_shared; /* in is out[0] (a terminal): never closed alone */
    bool pty;
    char *pending; /* stdin not yet written */
    size_t pending_len;
    bool close_in_after; /* close stdin once pending is written */
    uint64_t written, dropped, retain;
    uint32_t last_stream;
    uint64_t idx_len;
    bool exited;
    int64_t paused_until_ms; /* output write failed (disk full): retry later */
};

static int64_t now_ms(void)
{
    return fbi_clock_ms(CLOCK_MONOTONIC);
}

static int64_t wall_ms(void)
{
    return fbi_clock_ms(CLOCK_REALTIME);
}

/* Rewrites the status file with obj (stolen). */
static void status_write(struct keeper *k, json_t *obj)
{
    if (obj == NULL)
        return;
    json_object_set_new(obj, "pid", json_integer(k->pid));
    char *s = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (s == NULL)
        return;
    size_t n = strlen(s);
    /* one write from offset 0, then the tail cut: a reader sees the old or
     * the new object, or a prefix it rejects and reads again */
    if (pwrite(k->fds[FD_STATUS], s, n, 0) == (ssize_t)n)
        (void)!ftruncate(k->fds[FD_STATUS], (off_t)n);
    free(s);
}

static bool write_full(int fd, const char *p, size_t n, uint64_t off)
{
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return true;
}

/* Appends data of stream to the output; false when the disk refused it
 * (nothing is then counted as written: the caller retries later). */
static bool output_append(struct keeper *k, uint32_t stream, const char *data, size_t n)
{
    if (stream != k->last_stream && k->idx_len + sizeof(struct idx_record) <= IDX_MAX) {
        struct idx_record r = {.offset = k->written, .stream = stream};
        if (!write_full(k->fds[FD_IDX], (const char *)&r, sizeof r, k->idx_len))
            return false;
        k->idx_len += sizeof r;
        k->last_stream = stream;
    }
    if (!write_full(k->fds[FD_OUT], data, n, k->written))
        return false;
    k->written += n;
    /* keep at most retain bytes: punch whole blocks off the front */
    if (k->written - k->dropped > k->retain + (1u << 20)) {
        uint64_t upto = (k->written - k->retain) & ~(uint64_t)4095;
        if (upto > k->dropped && fallocate(k->fds[FD_OUT], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                           (off_t)k->dropped, (off_t)(upto - k->dropped)) == 0)
            k->dropped = upto;
    }
    return true;
}

/* Holds output that could not be written (disk full) until it can be. */
struct held {
    char buf[KEEP_CHUNK];
    size_t len;
    uint32_t stream;
};

static void pump(struct keeper *k, int which, struct held *h)
{
    if (h->len > 0)
        return; /* the held chunk goes first */
    ssize_t n = read(k->out[which], h->buf, sizeof h->buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        /* EOF, or EIO once every slave end of a terminal is closed */
        if (!(k->in_shared && which == 0))
            close(k->out[which]);
        k->out[which] = -1;
        return;
    }
    h->len = (size_t)n;
    h->stream = (uint32_t)which + 1;
    if (output_append(k, h->stream, h->buf, h->len))
        h->len = 0;
    else
        k->paused_until_ms = now_ms() + 200;
}

static void stdin_flush(struct keeper *k)
{
    while (k->in >= 0 && k->pending_len > 0) {
        ssize_t w = write(k->in, k->pending, k->pending_len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            return;
        if (w <= 0) {
            k->pending_len = 0; /* the reader is gone */
            break;
        }
        memmove(k->pending, k->pending + w, k->pending_len - (size_t)w);
        k->pending_len -= (size_t)w;
    }
    if (k->pending_len == 0 && k->close_in_after && k->in >= 0) {
        if (k->pty) {
            /* a terminal has no half-close: ^D at the start of a line */
            (void)!write(k->in, "\004", 1);
        } else {
            close(k->in);
            k->in = -1;
        }
        k->close_in_after = false;
    }
}

static int stdin_add(struct keeper *k, const char *data, size_t n)
{
    if (k->in < 0)
        return -EPIPE;
    if (k->pending_len + n > STDIN_PENDING_MAX)
        return -ENOBUFS;
    char *nb = realloc(k->pending, k->pending_len + n + 1);
    if (nb == NULL)
        return -ENOMEM;
    k->pending = nb;
    memcpy(k->pending + k->pending_len, data, n);
    k->pending_len += n;
    return 0;
}

/* One control request of the daemon's; the connection is answered and
 * closed.  The daemon is trusted, but a half-sent request (a daemon killed
 * mid-write) must not stall the output: reads time out. */
static void serve_ctl(struct keeper *k, int c)
{
    struct timeval tv = {.tv_sec = 2};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct fb_frame f;
    if (fb_wire_recv(c, &f) < 0)
        return;
    json_t *req = f.type == FB_MSG_REQUEST ? fb_wire_frame_json(&f) : NULL;
    free(f.data);
    const char *op = json_string_value(json_object_get(req, "op"));
    int e = 0;
    const char *msg = NULL;
    if (op == NULL) {
        e = EPROTO;
        msg = "malformed request";
    } else if (strcmp(op, "stdin") == 0) {
        for (;;) {
            if (fb_wire_recv(c, &f) < 0) {
                e = EPROTO;
                msg = "stdin stream cut short";
                break;
            }
            if (f.type == FB_MSG_STDIN_EOF) {
                free(f.data);
                break;
            }
            int r = f.type == FB_MSG_STDIN ? stdin_add(k, f.data, f.len) : -EPROTO;
            free(f.data);
            if (r < 0) {
                e = -r;
                msg = r == -EPIPE     ? "the process's stdin is closed"
                      : r == -ENOBUFS ? "the process is not reading its stdin: 1 MiB is pending"
                                      : "bad stdin stream";
                break;
            }
        }
        if (e == 0 && json_is_true(json_object_get(req, "eof")))
            k->close_in_after = true;
        stdin_flush(k);
    } else if (strcmp(op, "signal") == 0) {
        json_int_t sig = json_integer_value(json_object_get(req, "signal"));
        if (k->exited) {
            e = ESRCH;
            msg = "the process has exited";
        } else if (sig <= 0 || sig >= 65 || kill(k->pid, (int)sig) < 0) {
            e = sig <= 0 || sig >= 65 ? EINVAL : errno;
            msg = "cannot signal the process";
        }
    } else if (strcmp(op, "relisten") == 0) {
        /* after a restore from a memory checkpoint: a listening socket made
         * in this sandbox's own network namespace replaces the one the
         * restore handed in, so the next checkpoint finds it there */
        int nfd = -1;
        if (fb_wire_recv_fds(c, &nfd, 1) < 0) {
            e = EPROTO;
            msg = "relisten: no socket came";
        } else {
            if (dup3(nfd, k->fds[FD_CTL], O_CLOEXEC) < 0) {
                e = errno;
                msg = "relisten: cannot take the socket";
            } else {
                fcntl(k->fds[FD_CTL], F_SETFL, O_NONBLOCK);
            }
            close(nfd);
        }
    } else if (strcmp(op, "resize") == 0) {
        json_int_t cols = json_integer_value(json_object_get(req, "cols"));
        json_int_t rows = json_integer_value(json_object_get(req, "rows"));
        struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
        if (!k->pty) {
            e = EINVAL;
            msg = "the process has no terminal";
        } else if (cols < 1 || cols > 1000 || rows < 1 || rows > 1000 || ioctl(k->in, TIOCSWINSZ, &ws) < 0) {
            e = EINVAL;
            msg = "cannot resize the terminal";
        }
    } else {
        e = EPROTO;
        msg = "unknown control op";
    }
    json_decref(req);
    if (e != 0)
        fbi_send_error(c, e, msg);
    else
        fbi_send_ok(c, NULL);
}

static bool output_open(const struct keeper *k)
{
    return k->out[0] >= 0 || k->out[1] >= 0;
}

static void keep(struct keeper *k) __attribute__((noreturn));
static void keep(struct keeper *k)
{
    struct held held[2] = {{.len = 0}, {.len = 0}};
    for (int i = 0; i < 2; i++)
        if (k->out[i] >= 0)
            fcntl(k->out[i], F_SETFL, O_NONBLOCK);
    if (k->in >= 0)
        fcntl(k->in, F_SETFL, O_NONBLOCK);
    fcntl(k->fds[FD_CTL], F_SETFL, O_NONBLOCK);
    int status = 0;
    /* done when the process has exited and every writer of its output is
     * gone (children it left behind may still be writing) */
    while (!k->exited || output_open(k) || held[0].len > 0 || held[1].len > 0) {
        struct pollfd p[8];
        int np = 0, ix_out[2] = {-1, -1}, ix_in = -1, ix_pid = -1, ix_ctl;
        bool paused = now_ms() < k->paused_until_ms;
        for (int i = 0; i < 2; i++)
            if (k->out[i] >= 0 && !paused && held[i].len == 0) {
                ix_out[i] = np;
                p[np++] = (struct pollfd){.fd = k->out[i], .events = POLLIN};
            }
        if (k->in >= 0 && k->pending_len > 0 && !k->in_shared) {
            ix_in = np;
            p[np++] = (struct pollfd){.fd = k->in, .events = POLLOUT};
        }
        if (!k->exited) {
            ix_pid = np;
            p[np++] = (struct pollfd){.fd = k->pidfd, .events = POLLIN};
        }
        ix_ctl = np;
        p[np++] = (struct pollfd){.fd = k->fds[FD_CTL], .events = POLLIN};
        int timeout = paused || held[0].len || held[1].len || (k->in_shared && k->pending_len) ? 100 : 5000;
        int r = poll(p, (nfds_t)np, timeout);
        if (r < 0 && errno != EINTR)
            _exit(1);
        /* output held back by a full disk, retried first */
        for (int i = 0; i < 2; i++)
            if (held[i].len > 0 && now_ms() >= k->paused_until_ms) {
                if (output_append(k, held[i].stream, held[i].buf, held[i].len))
                    held[i].len = 0;
                else
                    k->paused_until_ms = now_ms() + 200;
            }
        if (r <= 0) {
            stdin_flush(k);
            continue;
        }
        for (int i = 0; i < 2; i++)
            if (ix_out[i] >= 0 && p[ix_out[i]].revents)
                pump(k, i, &held[i]);
        if (ix_in >= 0 && p[ix_in].revents)
            stdin_flush(k);
        if (k->in_shared && k->pending_len > 0)
            stdin_flush(k);
        if (ix_pid >= 0 && p[ix_pid].revents && waitpid(k->pid, &status, WNOHANG) == k->pid) {
            k->exited = true;
            json_t *st = fbi_status_json(status);
            if (st != NULL)
                json_object_set_new(st, "ended_at_ms", json_integer(wall_ms()));
            status_write(k, st);
        }
        if (p[ix_ctl].revents & POLLIN) {
            int c = accept4(k->fds[FD_CTL], NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0) {
                serve_ctl(k, c);
                close(c);
            }
        }
    }
    _exit(0);
}

/* Opens a terminal pair inside the sandbox: *master for the keeper, the
 * slave for the process.  Returns the slave fd or -1. */
static int open_pty(int *master, json_t *size)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0)
        return -1;
    int unlock = 0;
    char name[64];
    if (ioctl(m, TIOCSPTLCK, &unlock) < 0 || ptsname_r(m, name, sizeof name) != 0) {
        close(m);
        return -1;
    }
    int s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (s < 0) {
        close(m);
        return -1;
    }
    json_int_t cols = json_integer_value(json_object_get(size, "cols"));
    json_int_t rows = json_integer_value(json_object_get(size, "rows"));
    struct winsize ws = {.ws_row = (unsigned short)(rows > 0 ? rows : 24),
                         .ws_col = (unsigned short)(cols > 0 ? cols : 80)};
    (void)ioctl(m, TIOCSWINSZ, &ws);
    *master = m;
    return s;
}

void fbi_spawn_serve(int conn, json_t *req)
{
    struct keeper k = {.in = -1, .out = {-1, -1}, .pidfd = -1};
    char **argv = fbi_json_strv(json_object_get(req, "argv"), 65536);
    char **envp = fbi_json_strv(json_object_get(req, "env"), 65536);
    const char *cwd = json_string_value(json_object_get(req, "cwd"));
    const char *user = json_string_value(json_object_get(req, "user"));
    json_t *pty = json_object_get(req, "pty");
    json_int_t retain = json_integer_value(json_object_get(req, "retain"));
    bool want_stdin = json_is_true(json_object_get(req, "stdin"));
    if (argv == NULL || argv[0] == NULL || envp == NULL || cwd == NULL || retain < 4096) {
        fbi_send_error(conn, EINVAL, "malformed spawn request");
        _exit(1);
    }
    if (fb_wire_recv_fds(conn, k.fds, N_FDS) < 0) {
        fbi_send_error(conn, EPROTO, "spawn: the daemon's files did not arrive");
        _exit(1);
    }
    k.retain = (uint64_t)retain;
    k.pty = json_is_object(pty);
    struct fbi_user u;
    if (fbi_user_lookup(user != NULL ? user : "root", &u) < 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "unknown user %.64s", user ? user : "");
        fbi_send_error(conn, EINVAL, msg);
        _exit(1);
    }
    char *in_buf = NULL;
    size_t in_len = 0;
    if (want_stdin && fbi_read_stdin(conn, STDIN_PENDING_MAX, &in_buf, &in_len) < 0)
        _exit(1);
    if (flock(k.fds[FD_STATUS], LOCK_EX | LOCK_NB) < 0) {
        fbi_send_error(conn, errno, "spawn: status file is locked");
        _exit(1);
    }
    /* the keeper is this worker: a daemon that goes away must not take the
     * process with it (exec workers do the opposite) */
    int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1}, pex[2];
    int slave = -1, master = -1;
    if (k.pty) {
        slave = open_pty(&master, pty);
        if (slave < 0) {
            fbi_send_error(conn, errno, "cannot open a terminal in the sandbox");
            _exit(1);
        }
    } else if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0) {
        fbi_send_error(conn, errno, "pipe");
        _exit(1);
    }
    if (pipe2(pex, O_CLOEXEC) < 0) {
        fbi_send_error(conn, errno, "pipe");
        _exit(1);
    }
    pid_t pid = fork();
    if (pid < 0) {
        fbi_send_error(conn, errno,
                       errno == EAGAIN ? "cannot start the process: the sandbox is at its pids limit"
                                       : "cannot start the process: fork failed");
        _exit(1);
    }
    if (pid == 0) {
        if (k.pty)
            fbi_child_exec(slave, slave, slave, pex[1], argv, envp, cwd, &u, true);
        fbi_child_exec(pin[0], pout[1], perr[1], pex[1], argv, envp, cwd, &u, false);
    }
    close(pex[1]);
    char why[640];
    int e = fbi_exec_failure(pex[0], cwd, argv[0], why, sizeof why);
    if (e != 0) {
        char line[680];
        snprintf(line, sizeof line, "cannot start the process: %s", why);
        waitpid(pid, NULL, 0);
        fbi_send_error(conn, e, line);
        _exit(1);
    }
    k.pid = pid;
    k.pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (k.pty) {
        close(slave);
        k.out[0] = master;
        k.in = master;
        k.in_shared = true;
    } else {
        close(pin[0]);
        close(pout[1]);
        close(perr[1]);
        k.out[0] = pout[0];
        k.out[1] = perr[0];
        k.in = pin[1];
    }
    if (in_len > 0)
        (void)stdin_add(&k, in_buf, in_len);
    free(in_buf);
    if (want_stdin && !k.pty)
        k.close_in_after = true; /* stdin given at start is the whole of it */
    status_write(&k, json_pack("{s:I}", "started_at_ms", (json_int_t)wall_ms()));
    fbi_send_ok(conn, json_pack("{s:i}", "pid", (int)pid));
    close(conn);
    keep(&k);
}
