/* forkbox-init: PID 1 inside a sandbox.
 *
 * Started by the daemon's setup child with the listening control socket as
 * fd 3.  That socket lives outside the sandbox's root, so only the host can
 * connect; it survives the daemon (and every connection), which is what
 * lets a restarted daemon reconnect and lets CRIU checkpoint the sandbox
 * without a live peer on the other end. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/text.h"
#include "common/wire.h"
#include "init.h"

#define LISTEN_FD 3

void fbi_send_error(int conn, int e, const char *msg)
{
    /* messages name paths, which may not be UTF-8 */
    size_t n = 0;
    char *text = fb_utf8_lossy(msg, strlen(msg), &n);
    json_t *r = json_pack("{s:b, s:i, s:s}", "ok", 0, "errno", e, "error", text ? text : "error");
    free(text);
    if (r != NULL) {
        fb_wire_send_json(conn, FB_MSG_RESULT, r);
        json_decref(r);
    }
}

void fbi_send_ok(int conn, json_t *extra)
{
    json_t *r = extra != NULL ? extra : json_object();
    if (r == NULL)
        return;
    json_object_set_new(r, "ok", json_true());
    fb_wire_send_json(conn, FB_MSG_RESULT, r);
    json_decref(r);
}

/* Runs in the forked worker: dispatches the request read by init. */
static void serve_connection(int conn, json_t *req)
{
    const char *op = req ? json_string_value(json_object_get(req, "op")) : NULL;
    if (op == NULL) {
        fbi_send_error(conn, EPROTO, "malformed request");
        _exit(1);
    }
    if (strcmp(op, "ping") == 0) {
        fbi_send_ok(conn, json_pack("{s:i, s:i}", "version", FB_WIRE_VERSION, "pid", (int)getpid()));
        _exit(0);
    }
    if (strcmp(op, "exec") == 0)
        fbi_exec_serve(conn, req);
    if (strcmp(op, "spawn") == 0)
        fbi_spawn_serve(conn, req);
    _exit(fbi_files_serve(conn, req));
}

/* After a restore from a memory checkpoint: a listening socket made in
 * this sandbox's own network namespace replaces the one the restore
 * handed in (made outside it), so the next checkpoint finds it there. */
static void relisten(int conn)
{
    int nfd = -1;
    if (fb_wire_recv_fds(conn, &nfd, 1) < 0) {
        fbi_send_error(conn, EPROTO, "relisten: no socket came");
        return;
    }
    int r = dup3(nfd, LISTEN_FD, O_CLOEXEC);
    int e = errno;
    close(nfd);
    if (r < 0)
        fbi_send_error(conn, e, "relisten: cannot take the socket");
    else
        fbi_send_ok(conn, NULL);
}

static void reap_all(void)
{
    for (;;) {
        pid_t p = waitpid(-1, NULL, WNOHANG);
        if (p <= 0)
            break;
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    /* Only a sandbox's PID 1 is forkbox-init.  A command can still run this
     * binary (a "#!/proc/self/exe" script in an exec worker does): it then
     * does nothing instead of serving whatever happens to be its fd 3. */
    if (getpid() != 1) {
        static const char msg[] = "forkbox-init: runs only as a sandbox's PID 1\n";
        (void)!write(2, msg, sizeof msg - 1);
        return 2;
    }
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0)
        return 1;
    /* A stray SIGPIPE from a vanished daemon must not kill PID 1. */
    signal(SIGPIPE, SIG_IGN);
    /* Not dumpable: root inside the sandbox (without CAP_SYS_PTRACE) can
     * then neither open /proc/1/mem nor take init's or a worker's fds with
     * pidfd_getfd, so the channel to the daemon stays init's alone.
     * Workers inherit this; commands get the default back at execve. */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
        return 1;
    /* seed jansson's hash once here, not in every forked worker (each
     * would read /dev/urandom) */
    json_object_seed(0);
    if (fcntl(LISTEN_FD, F_SETFD, FD_CLOEXEC) < 0)
        return 1;
    (void)!chdir("/");

    for (;;) {
        struct pollfd p[2] = {{.fd = LISTEN_FD, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        if (p[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == sizeof si) {
                /* PID 1 of the sandbox: termination comes from the host as SIGKILL */
            }
            reap_all();
        }
        if (p[0].revents & POLLIN) {
            int conn = accept4(LISTEN_FD, NULL, NULL, SOCK_CLOEXEC);
            if (conn < 0)
                continue;
            /* the request is read here, not in the worker, as one op
             * (relisten) changes init itself; only the daemon can connect,
             * and a request that stalls is dropped after a second */
            struct timeval tv = {.tv_sec = 1};
            setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            struct fb_frame f;
            json_t *req = NULL;
            if (fb_wire_recv(conn, &f) == 0) {
                req = f.type == FB_MSG_REQUEST ? fb_wire_frame_json(&f) : NULL;
                free(f.data);
            }
            struct timeval none = {0};
            setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
            const char *op = req ? json_string_value(json_object_get(req, "op")) : NULL;
            if (op != NULL && strcmp(op, "relisten") == 0) {
                relisten(conn);
                json_decref(req);
                close(conn);
                continue;
            }
            pid_t pid = fork();
            if (pid == 0) {
                close(sfd);
                close(LISTEN_FD);
                sigprocmask(SIG_UNBLOCK, &mask, NULL);
                serve_connection(conn, req);
                _exit(0);
            }
            json_decref(req);
            /* most likely the pids limit (a fork bomb inside): say so
             * rather than hang up without an answer */
            if (pid < 0)
                fbi_send_error(conn, errno, "the sandbox cannot start another process (pids limit reached?)");
            close(conn);
        }
    }
}
