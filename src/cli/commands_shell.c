/* shell, attach: an interactive session with a background process over the
 * attach WebSocket.  The local terminal is put in raw mode, so every key
 * (Ctrl-C included) is a byte for the remote terminal; it is restored on
 * every way out.  Ctrl-] detaches: the process keeps running. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <wslay/wslay.h>

#include "cli/cli.h"
#include "cli/stream.h"
#include "cli/wsclient.h"
#include "common/cleanup.h"
#include "common/json_util.h"
#include "common/util.h"

#define DETACH_KEY 0x1d               /* Ctrl-] */
#define STDIN_CHUNK (16u << 10)       /* bytes of input per message */
#define SEND_PENDING_MAX (256u << 10) /* input queued for a slow daemon */
#define MSG_MAX (1u << 20)            /* largest message accepted from the daemon */
#define CLOSE_WAIT_MS 5000

enum {
    OPT_REPLAY = 0x3200,
    OPT_OFFSET,
};

/* ---- the local terminal ---- */

static struct termios saved_tio;
static volatile sig_atomic_t raw_on;
static int sig_pipe[2] = {-1, -1};

static void term_restore(void)
{
    if (raw_on) {
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tio);
        raw_on = 0;
    }
}

static int term_raw(void)
{
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_tio) < 0)
        return 0;
    struct termios t = saved_tio;
    cfmakeraw(&t);
    if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &t) < 0)
        return -1;
    raw_on = 1;
    atexit(term_restore);
    return 0;
}

static void term_size(int *cols, int *rows)
{
    struct winsize ws;
    *cols = 80;
    *rows = 24;
    if ((ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 || ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) &&
        ws.ws_col > 0 && ws.ws_row > 0) {
        *cols = ws.ws_col > 1000 ? 1000 : ws.ws_col;
        *rows = ws.ws_row > 1000 ? 1000 : ws.ws_row;
    }
}

/* Signals become bytes on a pipe the session polls. */
static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (sig_pipe[1] >= 0)
        (void)!write(sig_pipe[1], &b, 1);
    errno = saved;
}

static int signals_install(void)
{
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return -1;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    static const int sigs[] = {SIGWINCH, SIGTERM, SIGHUP, SIGINT, SIGQUIT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
    return 0;
}

/* ---- the session ---- */

struct session {
    int fd;
    const char *extra;
    size_t extra_len, extra_off;
    wslay_event_context_ptr ws;
    json_t *exit_event; /* owned */
    bool lost, detached, stdin_open, out_broken, pty;
    int exit_signal;       /* a signal that ended the session here */
    const char *close_why; /* a close to send once the queue is empty */
    bool close_queued;
    int64_t close_deadline;
};

static ssize_t ws_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
    (void)flags;
    struct session *s = user;
    if (s->extra_off < s->extra_len) {
        size_t n = s->extra_len - s->extra_off < len ? s->extra_len - s->extra_off : len;
        memcpy(buf, s->extra + s->extra_off, n);
        s->extra_off += n;
        return (ssize_t)n;
    }
    ssize_t n = recv(s->fd, buf, len, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    if (n <= 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return n;
}

static ssize_t ws_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags, void *user)
{
    (void)flags;
    struct session *s = user;
    ssize_t n = send(s->fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
        wslay_event_set_error(ctx, errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
                                       ? WSLAY_ERR_WOULDBLOCK
                                       : WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return n;
}

static int ws_genmask(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *user)
{
    (void)user;
    if (getrandom(buf, len, 0) != (ssize_t)len) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return 0;
}

static void on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *m, void *user)
{
    (void)ctx;
    struct session *s = user;
    if (m->opcode == WSLAY_BINARY_FRAME) {
        if (!s->out_broken && fb_write_all(STDOUT_FILENO, m->msg, m->msg_length) < 0)
            s->out_broken = true;
        return;
    }
    if (m->opcode != WSLAY_TEXT_FRAME)
        return;
    cleanup_json json_t *ev = json_loadb((const char *)m->msg, m->msg_length, 0, NULL);
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (type == NULL)
        return;
    if (strcmp(type, "exit") == 0) {
        json_decref(s->exit_event);
        s->exit_event = json_incref(ev);
    } else if (strcmp(type, "lost") == 0) {
        s->lost = true;
    } else if (strcmp(type, "attached") == 0) {
        s->pty = json_is_true(json_object_get(ev, "pty"));
    } else if (strcmp(type, "error") == 0) {
        const char *msg = json_string_value(json_object_get(ev, "message"));
        fprintf(stderr, "%sforkbox: %s%s", raw_on ? "\r\n" : "", msg ? msg : "error", raw_on ? "\r\n" : "\n");
    }
}

static void send_msg(struct session *s, enum wslay_opcode op, const void *data, size_t len)
{
    struct wslay_event_msg m = {.opcode = op, .msg = data, .msg_length = len};
    (void)wslay_event_queue_msg(s->ws, &m);
}

static void send_resize(struct session *s)
{
    int cols, rows;
    term_size(&cols, &rows);
    char msg[96];
    snprintf(msg, sizeof msg, "{\"type\":\"resize\",\"cols\":%d,\"rows\":%d}", cols, rows);
    send_msg(s, WSLAY_TEXT_FRAME, msg, strlen(msg));
}

/* The close goes out once everything queued before it has (wslay sends
 * control frames first): see close_when_sent(). */
static void start_close(struct session *s, const char *why)
{
    if (s->close_why == NULL) {
        s->close_why = why;
        s->close_deadline = fb_mono_ms() + CLOSE_WAIT_MS;
    }
    s->stdin_open = false;
}

static void close_when_sent(struct session *s)
{
    if (s->close_why != NULL && !s->close_queued && wslay_event_get_queued_msg_count(s->ws) == 0) {
        (void)wslay_event_queue_close(s->ws, WSLAY_CODE_NORMAL_CLOSURE, (const uint8_t *)s->close_why,
                                      strlen(s->close_why));
        s->close_queued = true;
    }
}

static void read_stdin(struct session *s)
{
    char buf[STDIN_CHUNK];
    ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) { /* the end of our input: the remote terminal sees ^D */
        static const char eof[] = "{\"type\":\"eof\"}";
        send_msg(s, WSLAY_TEXT_FRAME, eof, sizeof eof - 1);
        s->stdin_open = false;
        return;
    }
    const char *detach = raw_on ? memchr(buf, DETACH_KEY, (size_t)n) : NULL;
    size_t use = detach ? (size_t)(detach - buf) : (size_t)n;
    if (use > 0)
        send_msg(s, WSLAY_BINARY_FRAME, buf, use);
    if (detach != NULL) {
        s->detached = true;
        start_close(s, "detached");
    }
}

static void on_local_signal(struct session *s)
{
    unsigned char sigs[16];
    ssize_t n = read(sig_pipe[0], sigs, sizeof sigs);
    for (ssize_t i = 0; i < n; i++) {
        if (sigs[i] == SIGWINCH) {
            send_resize(s);
        } else if (sigs[i] == SIGINT && !raw_on) {
            /* no raw terminal here: Ctrl-C goes to the process as SIGINT */
            static const char intr[] = "{\"type\":\"signal\",\"signal\":\"INT\"}";
            send_msg(s, WSLAY_TEXT_FRAME, intr, sizeof intr - 1);
        } else if (s->exit_signal == 0) {
            s->exit_signal = sigs[i];
            s->detached = true;
            start_close(s, "detached");
        }
    }
}

/* Runs the session until the process ends, the client detaches or the
 * connection breaks. */
static void session_run(struct session *s)
{
    for (;;) {
        bool want_r = wslay_event_want_read(s->ws), want_w = wslay_event_want_write(s->ws);
        if (!want_r && !want_w)
            break;
        if (s->close_deadline != 0 && fb_mono_ms() >= s->close_deadline)
            break;
        struct pollfd p[3] = {{.fd = s->fd}, {.fd = -1}, {.fd = sig_pipe[0], .events = POLLIN}};
        if (want_r)
            p[0].events |= POLLIN;
        if (want_w)
            p[0].events |= POLLOUT;
        if (s->stdin_open && wslay_event_get_queued_msg_length(s->ws) < SEND_PENDING_MAX)
            p[1] = (struct pollfd){.fd = STDIN_FILENO, .events = POLLIN};
        int timeout = s->close_deadline != 0 ? 200 : -1;
        if (s->extra_off < s->extra_len)
            timeout = 0;
        int n = poll(p, 3, timeout);
        if (n < 0 && errno != EINTR)
            break;
        if (p[2].revents & POLLIN)
            on_local_signal(s);
        if ((n > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) || s->extra_off < s->extra_len) {
            if (wslay_event_recv(s->ws) < 0)
                break;
            if (s->out_broken && !s->detached) {
                s->detached = true; /* nowhere to write: leave the process be */
                start_close(s, "output closed");
            }
        }
        if (n > 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
            read_stdin(s);
        close_when_sent(s);
        if (wslay_event_want_write(s->ws) && wslay_event_send(s->ws) < 0)
            break;
        close_when_sent(s);
    }
}

/* Attaches to pid of sandbox id (query: the attach options) and returns
 * the exit status for the command line. */
static int attach_session(struct fb_cli *cli, const char *id, long long pid, const char *query)
{
    char suffix[128];
    snprintf(suffix, sizeof suffix, "/processes/%lld/attach%s", pid, query);
    cleanup_free char *path = fb_sandbox_path(id, suffix);
    if (path == NULL)
        return FB_EXIT_FAIL;
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    __attribute__((cleanup(fb_ws_conn_release))) struct fb_ws_conn conn = {.fd = -1};
    if (fb_cli_client(cli, &client, &err) < 0 || fb_ws_connect(client, path, &conn, &err) < 0)
        return fb_fail(&err);
    struct session s = {.fd = conn.fd, .extra = conn.extra, .extra_len = conn.extra_len, .stdin_open = true};
    static const struct wslay_event_callbacks cbs = {
        .recv_callback = ws_recv,
        .send_callback = ws_send,
        .genmask_callback = ws_genmask,
        .on_msg_recv_callback = on_msg,
    };
    if (wslay_event_context_client_init(&s.ws, &cbs, &s) != 0 || signals_install() < 0) {
        if (s.ws != NULL)
            wslay_event_context_free(s.ws);
        fprintf(stderr, "forkbox: out of memory\n");
        return FB_EXIT_FAIL;
    }
    wslay_event_config_set_max_recv_msg_length(s.ws, MSG_MAX);
    if (term_raw() < 0) {
        wslay_event_context_free(s.ws);
        fprintf(stderr, "forkbox: cannot put the terminal in raw mode: %s\n", strerror(errno));
        return FB_EXIT_FAIL;
    }
    if (raw_on)
        send_resize(&s); /* the terminal may have changed since the process started */
    session_run(&s);
    term_restore();
    wslay_event_context_free(s.ws);
    int rc;
    if (s.exit_event != NULL) {
        rc = fb_stream_exit_status(s.exit_event);
    } else if (s.lost) {
        fprintf(stderr, "forkbox: process %lld was lost (its keeper was killed): its exit is unknown\n", pid);
        rc = FB_EXIT_FAIL;
    } else if (s.detached) {
        if (!s.out_broken)
            fprintf(stderr, "forkbox: detached; process %lld keeps running (forkbox attach %s %lld)\n", pid,
                    id, pid);
        rc = s.exit_signal ? 128 + s.exit_signal : FB_EXIT_OK;
    } else {
        fprintf(stderr,
                "forkbox: connection to forkboxd lost; process %lld keeps running (forkbox attach %s %lld)\n",
                pid, id, pid);
        rc = FB_EXIT_FAIL;
    }
    json_decref(s.exit_event);
    return rc;
}

/* ---- shell ---- */

static const struct option shell_longopts[] = {
    FB_PROC_START_LONGOPTS,
    {NULL, 0, NULL, 0},
};

static const struct fb_command shell_cmd = {
    .name = "shell",
    .usage = "Usage: forkbox shell [options] ID [-- CMD [ARG...]]\n"
             "Opens an interactive terminal session in sandbox ID: starts CMD (default: a login\n"
             "shell, /bin/bash -l or else /bin/sh -l) as a background process in a terminal the\n"
             "size of yours, and attaches to it. Exits with its exit status when it ends.\n"
             "Ctrl-] detaches and leaves it running (forkbox attach ID PID reattaches).\n\n"
             "  -e, --env K=V     environment variable (repeatable; TERM defaults to yours)\n"
             "      --cwd DIR     working directory (default: the sandbox's workdir)\n"
             "  -u, --user USER   user name or uid (default root)\n",
    .shortopts = "e:u:",
    .longopts = shell_longopts,
    .stop_at_operand = true,
};

int fb_cmd_shell(struct fb_cli *cli, int argc, char **argv)
{
    cleanup_json json_t *body = json_object();
    cleanup_json json_t *env = NULL;
    if (body == NULL)
        return FB_EXIT_FAIL;
    struct fb_args a;
    fb_args_init(&a, cli, &shell_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        int r = fb_proc_start_option(&shell_cmd, c, optarg, body, &env);
        if (r > 0)
            return r;
    }
    if (optind >= argc)
        return fb_usage_error(&shell_cmd, "expected a sandbox id");
    const char *id = argv[optind++];
    if (!fb_valid_name(id))
        return fb_usage_error(&shell_cmd, "invalid sandbox id '%s'", id);
    if (optind < argc && strcmp(argv[optind], "--") == 0)
        optind++;
    json_t *cmd = json_array();
    if (optind < argc) {
        for (int i = optind; i < argc; i++)
            json_array_append_new(cmd, json_string(argv[i]));
    } else {
        json_array_append_new(cmd, json_string("/bin/sh"));
        json_array_append_new(cmd, json_string("-c"));
        json_array_append_new(cmd, json_string("[ -x /bin/bash ] && exec /bin/bash -l; exec /bin/sh -l"));
    }
    json_object_set_new(body, "cmd", cmd);
    if (env == NULL && (env = json_object()) == NULL)
        return FB_EXIT_FAIL;
    if (json_object_get(env, "TERM") == NULL) {
        const char *term = getenv("TERM");
        json_object_set_new(env, "TERM", json_string(term != NULL && term[0] ? term : "xterm-256color"));
    }
    json_object_set(body, "env", env);
    int cols, rows;
    term_size(&cols, &rows);
    json_object_set_new(body, "pty", json_pack("{s:i, s:i}", "cols", cols, "rows", rows));
    json_object_set_new(body, "tag", json_string("shell"));

    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_free char *path = fb_sandbox_path(id, "/processes");
    cleanup_json json_t *out = NULL;
    if (path == NULL)
        return FB_EXIT_FAIL;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_json(client, "POST", path, body, &out, &err) < 0)
        return fb_fail(&err);
    long long pid = (long long)json_integer_value(json_object_get(out, "pid"));
    /* from the first byte: the prompt may already be there */
    return attach_session(cli, id, pid, "?offset=0");
}

/* ---- attach ---- */

static const struct option attach_longopts[] = {
    {"replay", no_argument, NULL, OPT_REPLAY},
    {"offset", required_argument, NULL, OPT_OFFSET},
    {NULL, 0, NULL, 0},
};

static const struct fb_command attach_cmd = {
    .name = "attach",
    .usage = "Usage: forkbox attach [--replay | --offset N] ID PID\n"
             "Attaches this terminal to background process PID of sandbox ID: your keys go to\n"
             "its terminal (or stdin), its output comes here, starting with what it writes from\n"
             "now on. Exits with its exit status when it ends; Ctrl-] detaches and leaves it\n"
             "running.\n\n"
             "      --replay      first write all of its output kept so far\n"
             "      --offset N    start at byte N of its output\n",
    .longopts = attach_longopts,
};

int fb_cmd_attach(struct fb_cli *cli, int argc, char **argv)
{
    long long offset = -1, pid = 0;
    bool replay = false;
    struct fb_args a;
    fb_args_init(&a, cli, &attach_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        if (c == OPT_REPLAY)
            replay = true;
        else if (c == OPT_OFFSET && fb_parse_i64(optarg, 0, (1LL << 62), &offset) < 0)
            return fb_usage_error(&attach_cmd, "--offset: '%s' is not a byte offset", optarg);
    }
    if (replay && offset >= 0)
        return fb_usage_error(&attach_cmd, "--replay and --offset exclude each other");
    if (argc - optind != 2)
        return fb_usage_error(&attach_cmd, "expected a sandbox id and a pid");
    const char *id = argv[optind];
    if (!fb_valid_name(id))
        return fb_usage_error(&attach_cmd, "invalid sandbox id '%s'", id);
    if (fb_parse_i64(argv[optind + 1], 1, 0x7fffffff, &pid) < 0)
        return fb_usage_error(&attach_cmd, "'%s' is not a pid", argv[optind + 1]);
    char query[48] = "";
    if (replay)
        snprintf(query, sizeof query, "?replay=true");
    else if (offset >= 0)
        snprintf(query, sizeof query, "?offset=%lld", offset);
    return attach_session(cli, id, pid, query);
}
