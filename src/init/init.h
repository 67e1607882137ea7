/* forkbox-init internals: PID 1 of every sandbox.
 *
 * The main loop only accepts connections from the daemon and reaps
 * children.  Each accepted connection is served by a forked worker, so a
 * slow operation never stalls PID 1 and a crash in one operation cannot
 * take the sandbox down.  Workers for exec become child subreapers, so the
 * whole process tree of a command stays theirs to kill. */
#ifndef FB_INIT_INIT_H
#define FB_INIT_INIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include <jansson.h>

/* Serves one "exec" request on conn; never returns. */
void fbi_exec_serve(int conn, json_t *req) __attribute__((noreturn));

/* Serves one "spawn" request on conn (a background process; the worker
 * becomes its keeper and outlives the connection); never returns. */
void fbi_spawn_serve(int conn, json_t *req) __attribute__((noreturn));

/* Serves one file operation on conn; returns the process exit status. */
int fbi_files_serve(int conn, json_t *req);

/* Sends {"ok":false,"errno":e,"error":msg} as the op's result. */
void fbi_send_error(int conn, int e, const char *msg);

/* Sends {"ok":true} merged with extra (may be NULL; reference stolen). */
void fbi_send_ok(int conn, json_t *extra);

struct fbi_user {
    uid_t uid;
    gid_t gid;
    char home[256];
};

/* Resolves a user name or decimal uid through the sandbox's /etc/passwd.
 * Returns 0, or -ENOENT for an unknown name. */
int fbi_user_lookup(const char *spec, struct fbi_user *out);

/* Borrowed argv/envp view of a JSON string array (at most max items), or
 * NULL if it is not one.  The strings stay owned by arr. */
char **fbi_json_strv(json_t *arr, size_t max);

/* Reads STDIN frames up to STDIN_EOF (at most max bytes) into *buf (caller
 * frees).  -1 after answering a bad stream, or when the daemon went away. */
int fbi_read_stdin(int conn, size_t max, char **buf, size_t *len);

/* In a forked child: becomes a session leader (ctty: in_fd is a terminal's
 * slave and becomes the controlling terminal), takes the fds, user and cwd
 * and execs argv.  On failure writes "errno what" to errpipe; never returns. */
void fbi_child_exec(int in_fd, int out_fd, int err_fd, int errpipe, char **argv, char **envp, const char *cwd,
                    const struct fbi_user *u, bool ctty) __attribute__((noreturn));

/* After fbi_child_exec(): reads (and closes) the child's errpipe.  0 when
 * the command started; else its errno, with "exec|chdir|set user PATH:
 * reason" in msg. */
int fbi_exec_failure(int errpipe, const char *cwd, const char *argv0, char *msg, size_t len);

/* Milliseconds on clock (CLOCK_MONOTONIC, CLOCK_REALTIME). */
int64_t fbi_clock_ms(clockid_t clock);

/* {"exit_code": N, "signal": "NAME"|null} of a wait status (new reference). */
json_t *fbi_status_json(int status);

#endif
