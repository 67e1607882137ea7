/* exec and run: commands in a sandbox with their output streamed back. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/output.h"
#include "cli/stream.h"
#include "common/cleanup.h"
#include "common/json_util.h"
#include "common/util.h"

/* The API's limit on "stdin". */
#define STDIN_MAX (16u << 20)

enum {
    OPT_TIMEOUT = 0x3000,
    OPT_EXEC_ENV,
    OPT_CWD,
    OPT_USER,
    OPT_STDIN,
};

struct exec_opts {
    json_t *env; /* owned */
    const char *cwd;
    const char *user;
    double timeout; /* < 0: the daemon's default */
    bool send_stdin;
};

static void exec_opts_release(struct exec_opts *o)
{
    fb_json_decrefp(&o->env);
}

/* Handles an exec option shared by exec and run: 1 when it was one, 0 when
 * not, FB_EXIT_USAGE (printed) on a bad value. */
static int exec_option(const struct fb_command *cmd, int c, const char *arg, struct exec_opts *o)
{
    switch (c) {
    case OPT_TIMEOUT:
        if (fb_parse_double(arg, &o->timeout) < 0 || o->timeout <= 0)
            return fb_usage_error(cmd, "--timeout: '%s' is not a positive number of seconds", arg);
        return 1;
    case OPT_EXEC_ENV:
        if (fb_parse_kv(arg, &o->env) < 0)
            return fb_usage_error(cmd, "--env: expected KEY=VALUE, got '%s'", arg);
        return 1;
    case OPT_CWD:
        o->cwd = arg;
        return 1;
    case OPT_USER:
        o->user = arg;
        return 1;
    case OPT_STDIN:
        o->send_stdin = true;
        return 1;
    default:
        return 0;
    }
}

static int read_stdin(char **out, size_t *outlen, fb_error_t *err)
{
    size_t cap = 65536, len = 0;
    cleanup_free char *buf = malloc(cap);
    if (buf == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "stdin");
    for (;;) {
        if (len == cap) {
            if (cap > STDIN_MAX)
                return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "stdin is larger than %u MiB", STDIN_MAX >> 20);
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (nb == NULL)
                return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "stdin");
            buf = nb;
        }
        ssize_t n = read(STDIN_FILENO, buf + len, cap - len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return fb_error_sys(err, "reading stdin");
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > STDIN_MAX)
            return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "stdin is larger than %u MiB", STDIN_MAX >> 20);
    }
    *out = fb_steal_ptr(buf);
    *outlen = len;
    return 0;
}

static json_t *exec_body(int cmdc, char **cmdv, const struct exec_opts *o, fb_error_t *err)
{
    cleanup_json json_t *body = json_object();
    /* set_new takes the array even when it fails, so it never leaks */
    if (body == NULL || json_object_set_new(body, "cmd", json_array()) < 0) {
        fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "exec request");
        return NULL;
    }
    json_t *cmd = json_object_get(body, "cmd");
    for (int i = 0; i < cmdc; i++) {
        if (json_array_append_new(cmd, json_string(cmdv[i])) < 0) {
            fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "argument %d is not valid UTF-8", i + 1);
            return NULL;
        }
    }
    if ((o->env != NULL && json_object_set(body, "env", o->env) < 0) ||
        (o->cwd != NULL && json_object_set_new(body, "cwd", json_string(o->cwd)) < 0) ||
        (o->user != NULL && json_object_set_new(body, "user", json_string(o->user)) < 0) ||
        (o->timeout > 0 && json_object_set_new(body, "timeout", json_real(o->timeout)) < 0)) {
        fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "--cwd and --user must be valid UTF-8");
        return NULL;
    }
    if (o->send_stdin) {
        cleanup_free char *data = NULL;
        size_t len = 0;
        if (read_stdin(&data, &len, err) < 0)
            return NULL;
        if (json_object_set_new(body, "stdin", json_stringn(data, len)) < 0) {
            fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                         "stdin is not valid UTF-8 text, which the exec API requires");
            return NULL;
        }
    }
    return fb_steal_ptr(body);
}

/* Runs the exec request and sets *status to what the CLI should exit with. */
static int exec_in(struct fb_cli *cli, struct fb_client *c, const char *id, json_t *body, int *status,
                   fb_error_t *err)
{
    cleanup_free char *path = fb_sandbox_path(id, "/exec");
    cleanup_free char *text = json_dumps(body, JSON_COMPACT);
    if (path == NULL || text == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "exec request");
    __attribute__((cleanup(fb_stream_release))) struct fb_stream s = {0};
    struct fb_request req = {
        .method = "POST",
        .path = path,
        .accept = cli->json ? "application/json" : "application/x-ndjson",
        .body = text,
        .body_len = strlen(text),
        .sink = fb_stream_sink,
        .sink_ctx = &s,
        .cancellable = true,
    };
    /* --json wants the single result object, so the sink only collects it */
    s.decided = cli->json;
    s.whole_json = cli->json;
    cleanup_response struct fb_response resp = {0};
    int r = fb_client_do(c, &req, &resp, err);
    if (r == 0 && !s.whole_json && s.len > 0)
        r = fb_stream_event(&s, s.buf, s.len, err);
    cleanup_json json_t *result = NULL;
    if (r == 0 && s.whole_json) {
        json_error_t jerr;
        result = json_loadb(s.buf ? s.buf : "", s.len, JSON_ALLOW_NUL, &jerr);
        if (result == NULL)
            r = fb_error_set(err, FB_ERR_INTERNAL, 0, "forkboxd sent invalid JSON: %s", jerr.text);
        else if (cli->json)
            fb_print_json(result);
        else if (fb_stream_emit_field(&s, STDOUT_FILENO, result, "stdout", "stdout_b64", err) < 0 ||
                 fb_stream_emit_field(&s, STDERR_FILENO, result, "stderr", "stderr_b64", err) < 0)
            r = -1;
    }
    if (s.broken_pipe) {
        /* like any filter whose reader went away: quietly, with SIGPIPE's status */
        fb_error_release(err);
        *status = 128 + SIGPIPE;
        return 0;
    }
    json_t *final = result != NULL ? result : s.exit_event;
    if (r == 0 && final == NULL)
        r = fb_error_set(err, FB_ERR_INTERNAL, 0, "forkboxd ended the output without an exit status");
    if (r == 0)
        *status = fb_stream_exit_status(final);
    return r;
}

static const struct option exec_longopts[] = {
    {"env", required_argument, NULL, OPT_EXEC_ENV}, {"cwd", required_argument, NULL, OPT_CWD},
    {"user", required_argument, NULL, OPT_USER},    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"stdin", no_argument, NULL, OPT_STDIN},        {NULL, 0, NULL, 0},
};

static const struct fb_command exec_cmd = {
    .name = "exec",
    .usage = "Usage: forkbox exec [OPTIONS] ID -- CMD [ARGS...]\n"
             "Runs CMD in the sandbox, streaming its output, and exits with its exit code\n"
             "(128+n when killed by signal n, 124 on timeout).\n\n"
             "  -e, --env K=V       extra environment (repeatable)\n"
             "  -w, --cwd P         working directory (default: the sandbox's workdir)\n"
             "  -u, --user U        user name or uid (default root)\n"
             "      --timeout S     kill the command after S seconds (default 60)\n"
             "  -i, --stdin         send this program's stdin (up to 16 MiB of text)\n"
             "      --json          wait and print the result object instead of streaming\n",
    .shortopts = "e:w:u:i",
    .longopts = exec_longopts,
    .stop_at_operand = true,
};

static int exec_short(int c)
{
    switch (c) {
    case 'e':
        return OPT_EXEC_ENV;
    case 'w':
        return OPT_CWD;
    case 'u':
        return OPT_USER;
    case 'i':
        return OPT_STDIN;
    default:
        return c;
    }
}

int fb_cmd_exec(struct fb_cli *cli, int argc, char **argv)
{
    __attribute__((cleanup(exec_opts_release))) struct exec_opts o = {.timeout = -1};
    struct fb_args a;
    fb_args_init(&a, cli, &exec_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        if (exec_option(&exec_cmd, exec_short(c), optarg, &o) != 1)
            return FB_EXIT_USAGE;
    }
    if (optind >= argc)
        return fb_usage_error(&exec_cmd, "expected a sandbox id and a command");
    const char *id = argv[optind++];
    if (!fb_valid_name(id))
        return fb_usage_error(&exec_cmd, "invalid sandbox id '%s'", id);
    if (optind < argc && strcmp(argv[optind], "--") == 0)
        optind++;
    if (optind >= argc)
        return fb_usage_error(&exec_cmd, "expected a command after the sandbox id");

    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_json json_t *body = exec_body(argc - optind, argv + optind, &o, &err);
    int status = FB_EXIT_FAIL;
    if (body == NULL || fb_cli_client(cli, &client, &err) < 0 ||
        exec_in(cli, client, id, body, &status, &err) < 0)
        return fb_fail(&err);
    return status;
}

static void on_signal(int sig)
{
    /* the first signals only start the cleanup; insisting still gets out */
    if (++fb_cli_interrupted >= 3) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
}

static const struct fb_command run_cmd = {
    .name = "run",
    .usage = "Usage: forkbox run [OPTIONS] -- CMD [ARGS...]\n"
             "Creates a sandbox, runs CMD in it with streamed output, deletes the sandbox\n"
             "(also on failure or Ctrl-C) and exits with CMD's exit code.\n\n" FB_CREATE_USAGE
             "  -u, --user U          user name or uid (default root)\n"
             "      --timeout S       kill the command after S seconds (default 60)\n"
             "  -i, --stdin           send this program's stdin (up to 16 MiB of text)\n",
    .shortopts = FB_CREATE_SHORTOPTS "u:i",
    .stop_at_operand = true,
};

/* Deletes the sandbox run created; a failure is reported but the command's
 * own status still wins unless it had succeeded. */
static int run_cleanup(struct fb_client *c, const char *id, int status)
{
    cleanup_error fb_error_t err = NULL;
    if (fb_sandbox_delete(c, id, &err) == 0)
        return status;
    fprintf(stderr, "forkbox: could not delete sandbox %s: %s\n", id, err->msg);
    return status == 0 ? FB_EXIT_FAIL : status;
}

int fb_cmd_run(struct fb_cli *cli, int argc, char **argv)
{
    struct option longopts[32] = {{0}};
    size_t n = 0;
    for (const struct option *p = fb_create_longopts; p->name != NULL; p++)
        longopts[n++] = *p;
    for (const struct option *p = exec_longopts; p->name != NULL; p++)
        if (p->val != OPT_EXEC_ENV && p->val != OPT_CWD)
            longopts[n++] = *p;
    struct fb_command cmd = run_cmd;
    cmd.longopts = longopts;

    __attribute__((cleanup(exec_opts_release))) struct exec_opts o = {.timeout = -1};
    cleanup_json json_t *create = json_object();
    if (create == NULL)
        return FB_EXIT_FAIL;
    struct fb_args a;
    fb_args_init(&a, cli, &cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        int r = fb_create_option(&cmd, c, optarg, create);
        if (r == 0)
            r = exec_option(&cmd, exec_short(c), optarg, &o);
        if (r != 1)
            return FB_EXIT_USAGE;
    }
    if (optind >= argc)
        return fb_usage_error(&cmd, "expected a command");

    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_json json_t *body = exec_body(argc - optind, argv + optind, &o, &err);
    if (body == NULL || fb_cli_client(cli, &client, &err) < 0)
        return fb_fail(&err);

    /* From here on a sandbox may exist: signals only mark the interruption
     * so that the delete below always runs. */
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    client->cancel = &fb_cli_interrupted;

    cleanup_json json_t *sbx = NULL;
    if (fb_sandbox_create(client, create, &sbx, &err) < 0) {
        if (fb_cli_interrupted)
            return FB_EXIT_INTERRUPTED;
        return fb_fail(&err);
    }
    const char *id = json_string_value(json_object_get(sbx, "id"));
    if (fb_cli_interrupted)
        return run_cleanup(client, id, FB_EXIT_INTERRUPTED);

    int status = FB_EXIT_FAIL;
    if (exec_in(cli, client, id, body, &status, &err) < 0) {
        if (client->cancelled || fb_cli_interrupted) {
            fb_error_release(&err);
            status = FB_EXIT_INTERRUPTED;
        } else {
            status = fb_fail(&err);
        }
    }
    if (fb_cli_interrupted)
        status = FB_EXIT_INTERRUPTED;
    return run_cleanup(client, id, status);
}
