/* spawn, ps, logs, kill: background processes, which outlive the client. */
#include <errno.h>
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

enum {
    OPT_TAG = 0x3100,
    OPT_PTY,
    OPT_FOLLOW,
    OPT_OFFSET,
    OPT_SIGNAL,
};

/* ---- spawn ---- */

int fb_proc_start_option(const struct fb_command *cmd, int c, const char *arg, json_t *body, json_t **env)
{
    if (c == 'e' || c == FB_OPT_PROC_ENV) {
        if (fb_parse_kv(arg, env) < 0)
            return fb_usage_error(cmd, "--env: expected K=V, got '%s'", arg);
        return 0;
    }
    if (c == FB_OPT_PROC_CWD)
        return json_object_set_new(body, "cwd", json_string(arg)) == 0 ? 0 : FB_EXIT_FAIL;
    if (c == 'u' || c == FB_OPT_PROC_USER)
        return json_object_set_new(body, "user", json_string(arg)) == 0 ? 0 : FB_EXIT_FAIL;
    return FB_OPT_NOT_MINE;
}

static const struct option spawn_longopts[] = {
    {"tag", required_argument, NULL, OPT_TAG},
    {"pty", no_argument, NULL, OPT_PTY},
    FB_PROC_START_LONGOPTS,
    {NULL, 0, NULL, 0},
};

static const struct fb_command spawn_cmd = {
    .name = "spawn",
    .usage = "Usage: forkbox spawn [options] ID -- CMD [ARG...]\n"
             "Starts CMD in sandbox ID as a background process and prints its pid. It keeps\n"
             "running when this client, or forkboxd, goes away; follow it with `forkbox logs`.\n\n"
             "  -t, --tag TAG     a name to find it by in `forkbox ps`\n"
             "      --pty         run it in a terminal (80x24)\n"
             "  -e, --env K=V     environment variable (repeatable)\n"
             "      --cwd DIR     working directory (default: the sandbox's workdir)\n"
             "  -u, --user USER   user name or uid (default root)\n",
    .shortopts = "t:e:u:",
    .longopts = spawn_longopts,
    .stop_at_operand = true,
};

int fb_cmd_spawn(struct fb_cli *cli, int argc, char **argv)
{
    cleanup_json json_t *body = json_object();
    cleanup_json json_t *env = NULL;
    if (body == NULL)
        return FB_EXIT_FAIL;
    struct fb_args a;
    fb_args_init(&a, cli, &spawn_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        int r = fb_proc_start_option(&spawn_cmd, c, optarg, body, &env);
        if (r > 0)
            return r;
        if (c == 't' || c == OPT_TAG)
            json_object_set_new(body, "tag", json_string(optarg));
        else if (c == OPT_PTY)
            json_object_set_new(body, "pty", json_true());
    }
    if (optind < argc && strcmp(argv[optind], "--") == 0)
        optind++;
    if (argc - optind < 2)
        return fb_usage_error(&spawn_cmd, "expected a sandbox id and a command");
    const char *id = argv[optind++];
    if (!fb_valid_name(id))
        return fb_usage_error(&spawn_cmd, "invalid sandbox id '%s'", id);
    if (optind < argc && strcmp(argv[optind], "--") == 0)
        optind++;
    if (optind >= argc)
        return fb_usage_error(&spawn_cmd, "expected a command");
    json_t *cmd = json_array();
    for (int i = optind; i < argc; i++)
        json_array_append_new(cmd, json_string(argv[i]));
    json_object_set_new(body, "cmd", cmd);
    if (env != NULL)
        json_object_set(body, "env", env);

    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_free char *path = fb_sandbox_path(id, "/processes");
    cleanup_json json_t *out = NULL;
    if (path == NULL)
        return FB_EXIT_FAIL;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_json(client, "POST", path, body, &out, &err) < 0)
        return fb_fail(&err);
    if (cli->json)
        fb_print_json(out);
    else
        printf("%lld\n", (long long)json_integer_value(json_object_get(out, "pid")));
    return FB_EXIT_OK;
}

/* ---- ps ---- */

static const struct fb_command ps_cmd = {
    .name = "ps",
    .usage = "Usage: forkbox ps ID\n"
             "Lists the background processes of sandbox ID, oldest first, with their state\n"
             "(running, exited, or lost when their keeper was killed) and exit status.\n",
};

int fb_cmd_ps(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &ps_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (argc - optind != 1)
        return fb_usage_error(&ps_cmd, "expected a sandbox id");
    const char *id = argv[optind];
    if (!fb_valid_name(id))
        return fb_usage_error(&ps_cmd, "invalid sandbox id '%s'", id);
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_free char *path = fb_sandbox_path(id, "/processes");
    cleanup_json json_t *out = NULL;
    if (path == NULL)
        return FB_EXIT_FAIL;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_json(client, "GET", path, NULL, &out, &err) < 0)
        return fb_fail(&err);
    if (cli->json) {
        fb_print_json(out);
        return FB_EXIT_OK;
    }
    static const char *const headers[] = {"PID", "TAG", "STATE", "EXIT", "STARTED", "OUTPUT", "COMMAND"};
    struct fb_table t;
    if (fb_table_init(&t, 7, headers) < 0)
        return FB_EXIT_FAIL;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(out, "processes"), i, p)
    {
        char pid[24], exit_s[32], started[64], bytes[32];
        snprintf(pid, sizeof pid, "%lld", (long long)json_integer_value(json_object_get(p, "pid")));
        json_t *code = json_object_get(p, "exit_code"), *sig = json_object_get(p, "signal");
        if (json_is_string(sig))
            snprintf(exit_s, sizeof exit_s, "SIG%s", json_string_value(sig));
        else if (json_is_integer(code))
            snprintf(exit_s, sizeof exit_s, "%lld", (long long)json_integer_value(code));
        else
            snprintf(exit_s, sizeof exit_s, "-");
        fb_format_ago(json_string_value(json_object_get(p, "started_at")), started, sizeof started);
        fb_format_bytes((uint64_t)json_integer_value(json_object_get(p, "output_bytes")), bytes,
                        sizeof bytes);
        char cmd[256] = "";
        size_t len = 0, j;
        json_t *arg;
        json_array_foreach(json_object_get(p, "cmd"), j, arg)
        {
            int n = snprintf(cmd + len, sizeof cmd - len, "%s%s", j ? " " : "", json_string_value(arg));
            if (n < 0 || (size_t)n >= sizeof cmd - len)
                break;
            len += (size_t)n;
        }
        const char *tag = json_string_value(json_object_get(p, "tag"));
        const char *row[] = {pid,
                             tag && tag[0] ? tag : "-",
                             json_string_value(json_object_get(p, "state")),
                             exit_s,
                             started,
                             bytes,
                             cmd};
        fb_table_add(&t, row);
    }
    fb_table_print(&t, stdout);
    fb_table_release(&t);
    return FB_EXIT_OK;
}

/* ---- logs ---- */

static const struct option logs_longopts[] = {
    {"follow", no_argument, NULL, OPT_FOLLOW},
    {"offset", required_argument, NULL, OPT_OFFSET},
    {NULL, 0, NULL, 0},
};

static const struct fb_command logs_cmd = {
    .name = "logs",
    .usage = "Usage: forkbox logs [-f] [--offset N] ID PID\n"
             "Writes the output of background process PID: its stdout to stdout, its stderr\n"
             "to stderr. With -f, follows it until the process ends and then exits with its\n"
             "exit status; interrupted, it can be resumed from any byte offset.\n\n"
             "  -f, --follow      keep following new output\n"
             "      --offset N    start at byte N of the output (default 0)\n",
    .shortopts = "f",
    .longopts = logs_longopts,
};

int fb_cmd_logs(struct fb_cli *cli, int argc, char **argv)
{
    bool follow = false;
    long long offset = 0, pid = 0;
    struct fb_args a;
    fb_args_init(&a, cli, &logs_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        if (c == 'f' || c == OPT_FOLLOW)
            follow = true;
        else if (c == OPT_OFFSET && fb_parse_i64(optarg, 0, (1LL << 62), &offset) < 0)
            return fb_usage_error(&logs_cmd, "--offset: '%s' is not a byte offset", optarg);
    }
    if (argc - optind != 2)
        return fb_usage_error(&logs_cmd, "expected a sandbox id and a pid");
    const char *id = argv[optind];
    if (!fb_valid_name(id))
        return fb_usage_error(&logs_cmd, "invalid sandbox id '%s'", id);
    if (fb_parse_i64(argv[optind + 1], 1, 0x7fffffff, &pid) < 0)
        return fb_usage_error(&logs_cmd, "'%s' is not a pid", argv[optind + 1]);
    char suffix[96];
    snprintf(suffix, sizeof suffix, "/processes/%lld/output?offset=%lld&follow=%s", pid, offset,
             follow ? "true" : "false");
    cleanup_free char *path = fb_sandbox_path(id, suffix);
    if (path == NULL)
        return FB_EXIT_FAIL;
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    if (fb_cli_client(cli, &client, &err) < 0)
        return fb_fail(&err);
    __attribute__((cleanup(fb_stream_release))) struct fb_stream s = {.decided = true};
    struct fb_request req = {
        .method = "GET",
        .path = path,
        .accept = "application/x-ndjson",
        .sink = fb_stream_sink,
        .sink_ctx = &s,
        .cancellable = true,
    };
    cleanup_response struct fb_response resp = {0};
    int r = fb_client_do(client, &req, &resp, &err);
    if (r == 0 && s.len > 0)
        r = fb_stream_event(&s, s.buf, s.len, &err);
    if (s.broken_pipe)
        return 141;
    if (r < 0)
        return fb_fail(&err);
    /* an ended process's status is the command's; a running one's is 0 */
    return s.exit_event != NULL ? fb_stream_exit_status(s.exit_event) : FB_EXIT_OK;
}

/* ---- kill ---- */

static const struct option kill_longopts[] = {
    {"signal", required_argument, NULL, OPT_SIGNAL},
    {NULL, 0, NULL, 0},
};

static const struct fb_command kill_cmd = {
    .name = "kill",
    .usage = "Usage: forkbox kill [-s SIGNAL] ID PID\n"
             "Sends SIGNAL (a name like TERM, INT or KILL, or a number; default TERM) to\n"
             "background process PID of sandbox ID.\n",
    .shortopts = "s:",
    .longopts = kill_longopts,
};

int fb_cmd_kill(struct fb_cli *cli, int argc, char **argv)
{
    const char *sig = "TERM";
    long long pid = 0;
    struct fb_args a;
    fb_args_init(&a, cli, &kill_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        if (c == 's' || c == OPT_SIGNAL)
            sig = optarg;
    }
    if (argc - optind != 2)
        return fb_usage_error(&kill_cmd, "expected a sandbox id and a pid");
    const char *id = argv[optind];
    if (!fb_valid_name(id))
        return fb_usage_error(&kill_cmd, "invalid sandbox id '%s'", id);
    if (fb_parse_i64(argv[optind + 1], 1, 0x7fffffff, &pid) < 0)
        return fb_usage_error(&kill_cmd, "'%s' is not a pid", argv[optind + 1]);
    long long num = 0;
    cleanup_json json_t *body = fb_parse_i64(sig, 1, 64, &num) == 0
                                    ? json_pack("{s:I}", "signal", (json_int_t)num)
                                    : json_pack("{s:s}", "signal", sig);
    char suffix[64];
    snprintf(suffix, sizeof suffix, "/processes/%lld/signal", pid);
    cleanup_free char *path = fb_sandbox_path(id, suffix);
    if (body == NULL || path == NULL)
        return FB_EXIT_FAIL;
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_json(client, "POST", path, body, NULL, &err) < 0)
        return fb_fail(&err);
    return FB_EXIT_OK;
}
