/* forkbox: command-line client of forkboxd. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "cli/cli.h"
#include "common/cleanup.h"
#include "common/util.h"

volatile sig_atomic_t fb_cli_interrupted;

enum {
    OPT_JSON = 0x1000,
    OPT_SOCKET,
    OPT_KEY,
    OPT_HELP,
    OPT_VERSION,
};

static const struct option global_longopts[] = {
    {"json", no_argument, NULL, OPT_JSON},
    {"socket", required_argument, NULL, OPT_SOCKET},
    {"key", required_argument, NULL, OPT_KEY},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static const char main_usage[] =
    "Usage: forkbox [--json] [--socket PATH] [--key KEY] COMMAND [ARGS...]\n"
    "\n"
    "Sandboxes:\n"
    "  create        create a sandbox and print its id\n"
    "  ls            list sandboxes\n"
    "  get, inspect  show one sandbox\n"
    "  rm            delete sandboxes\n"
    "  ttl           set a sandbox's time to live\n"
    "  network       change a running sandbox's network policy (none, open, allowlist ...)\n"
    "  exec          run a command in a sandbox, streaming its output\n"
    "  run           create a sandbox, run one command in it, delete it\n"
    "  port          print the URL of a server inside a sandbox (or a share URL)\n"
    "Background processes:\n"
    "  spawn         start a process that outlives this client and prints its pid\n"
    "  ps            list a sandbox's background processes\n"
    "  logs          print (-f: follow) a background process's output\n"
    "  kill          send a signal to a background process\n"
    "  shell         open an interactive terminal session in a sandbox\n"
    "  attach        attach this terminal to a background process\n"
    "Files:\n"
    "  cp            copy files between the host and a sandbox\n"
    "  files         ls, cat, put, rm files inside a sandbox\n"
    "Checkpoints and processes:\n"
    "  checkpoint    checkpoint a sandbox's files (--memory: and processes) and print the id;\n"
    "                checkpoint rm CKPT...; checkpoint export CKPT / import FILE: a checkpoint\n"
    "                as a tar, to move it\n"
    "  checkpoints   list a sandbox's checkpoints\n"
    "  rollback      give a sandbox the files (and processes) of one of its checkpoints\n"
    "  fork          make N copies of a running sandbox, processes included; print their ids\n"
    "  pause         freeze a sandbox's processes\n"
    "  hibernate     write a sandbox's processes and memory to disk and end them\n"
    "  resume        thaw a paused sandbox or bring back a hibernated one\n"
    "  export        write an image archive of a sandbox (podman load / docker load)\n"
    "Templates and daemon:\n"
    "  template      ls, import, rm root filesystem templates\n"
    "  volume        create, ls, rm, download, upload persistent volumes\n"
    "  info          show what the daemon and host support\n"
    "  version       show client and daemon versions\n"
    "\n"
    "Global options (also accepted after the command):\n"
    "  --json            machine-readable output\n"
    "  --socket PATH     forkboxd unix socket (default: $FORKBOX_SOCKET or " FB_DEFAULT_SOCKET ")\n"
    "  --key KEY         API key (default: $FORKBOX_API_KEY or $FORKBOX_STATE_DIR/api-key)\n"
    "  -h, --help        this text; `forkbox COMMAND --help` for a command\n"
    "\n"
    "Environment: FORKBOX_URL (e.g. http://127.0.0.1:7420) selects TCP instead of the socket.\n";

int fb_cli_client(struct fb_cli *cli, struct fb_client **out, fb_error_t *err)
{
    if (!cli->client_open) {
        struct fb_client_opts opts = {.socket_path = cli->socket_path, .key = cli->key};
        if (fb_client_open(&cli->client, &opts, err) < 0)
            return -1;
        cli->client_open = true;
    }
    *out = &cli->client;
    return 0;
}

void fb_args_init(struct fb_args *a, struct fb_cli *cli, const struct fb_command *cmd, int argc, char **argv)
{
    memset(a, 0, sizeof(*a));
    a->cli = cli;
    a->cmd = cmd;
    a->argc = argc;
    a->argv = argv;
    size_t n = 0;
    for (const struct option *o = cmd->longopts; o != NULL && o->name != NULL; o++)
        if (n + 1 < sizeof a->merged / sizeof a->merged[0] - 5)
            a->merged[n++] = *o;
    for (const struct option *o = global_longopts; o->name != NULL; o++)
        a->merged[n++] = *o;
    /* the merged tail stays zeroed: that is getopt's terminator */
    snprintf(a->shortopts, sizeof a->shortopts, "%sh%s", cmd->stop_at_operand ? "+" : "",
             cmd->shortopts ? cmd->shortopts : "");
    /* getopt names argv[0] in its messages */
    static char prog[64];
    snprintf(prog, sizeof prog, "forkbox %s", cmd->name);
    a->argv[0] = prog;
    optind = 0;
    opterr = 1;
}

int fb_args_next(struct fb_args *a)
{
    for (;;) {
        int c = getopt_long(a->argc, a->argv, a->shortopts, a->merged, NULL);
        switch (c) {
        case OPT_JSON:
            a->cli->json = true;
            continue;
        case OPT_SOCKET:
            a->cli->socket_path = optarg;
            continue;
        case OPT_KEY:
            a->cli->key = optarg;
            continue;
        case 'h':
        case OPT_HELP:
            fputs(a->cmd->usage, stdout);
            a->exit_code = FB_EXIT_OK;
            return FB_ARGS_EXIT;
        case '?':
        case ':':
            fprintf(stderr, "Try 'forkbox %s --help'.\n", a->cmd->name);
            a->exit_code = FB_EXIT_USAGE;
            return FB_ARGS_EXIT;
        default:
            return c;
        }
    }
}

int fb_usage_error(const struct fb_command *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "forkbox %s: ", cmd->name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'forkbox %s --help'.\n", cmd->name);
    va_end(ap);
    return FB_EXIT_USAGE;
}

int fb_fail(fb_error_t *err)
{
    fprintf(stderr, "forkbox: %s\n", (err && *err) ? (*err)->msg : "failed");
    fb_error_release(err);
    return FB_EXIT_FAIL;
}

int fb_parse_i64(const char *s, long long min, long long max, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int fb_parse_double(const char *s, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

int fb_parse_kv(const char *s, json_t **obj)
{
    const char *eq = strchr(s, '=');
    if (eq == NULL || eq == s)
        return -1;
    cleanup_free char *key = strndup(s, (size_t)(eq - s));
    if (key == NULL)
        return -1;
    if (*obj == NULL) {
        *obj = json_object();
        if (*obj == NULL)
            return -1;
    }
    json_t *v = json_string(eq + 1);
    if (v == NULL)
        return -1;
    return json_object_set_new(*obj, key, v) == 0 ? 0 : -1;
}

bool fb_valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 255 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

static int cmd_help(struct fb_cli *cli, int argc, char **argv);

static const struct {
    const char *name;
    int (*fn)(struct fb_cli *cli, int argc, char **argv);
} commands[] = {
    {"create", fb_cmd_create},
    {"ls", fb_cmd_ls},
    {"list", fb_cmd_ls},
    {"get", fb_cmd_get},
    {"inspect", fb_cmd_get},
    {"rm", fb_cmd_rm},
    {"delete", fb_cmd_rm},
    {"ttl", fb_cmd_ttl},
    {"network", fb_cmd_network},
    {"port", fb_cmd_port},
    {"exec", fb_cmd_exec},
    {"run", fb_cmd_run},
    {"spawn", fb_cmd_spawn},
    {"ps", fb_cmd_ps},
    {"logs", fb_cmd_logs},
    {"kill", fb_cmd_kill},
    {"shell", fb_cmd_shell},
    {"attach", fb_cmd_attach},
    {"cp", fb_cmd_cp},
    {"files", fb_cmd_files},
    {"checkpoint", fb_cmd_checkpoint},
    {"checkpoints", fb_cmd_checkpoints},
    {"rollback", fb_cmd_rollback},
    {"export", fb_cmd_export},
    {"fork", fb_cmd_fork},
    {"pause", fb_cmd_pause},
    {"hibernate", fb_cmd_hibernate},
    {"resume", fb_cmd_resume},
    {"volume", fb_cmd_volume},
    {"volumes", fb_cmd_volume},
    {"template", fb_cmd_template},
    {"templates", fb_cmd_template},
    {"info", fb_cmd_info},
    {"version", fb_cmd_version},
    {"help", cmd_help},
};

static int dispatch(struct fb_cli *cli, int argc, char **argv)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[0], commands[i].name) == 0)
            return commands[i].fn(cli, argc, argv);
    fprintf(stderr, "forkbox: unknown command '%s'\nTry 'forkbox --help'.\n", argv[0]);
    return FB_EXIT_USAGE;
}

static int cmd_help(struct fb_cli *cli, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "help") == 0) {
        fputs(main_usage, stdout);
        return FB_EXIT_OK;
    }
    char *args[] = {argv[1], (char *)"--help", NULL};
    return dispatch(cli, 2, args);
}

int main(int argc, char **argv)
{
    /* a closed stdout must show up as EPIPE on write, not kill us mid-cleanup */
    signal(SIGPIPE, SIG_IGN);
    struct fb_cli cli = {0};

    static const struct option longopts[] = {
        {"json", no_argument, NULL, OPT_JSON},       {"socket", required_argument, NULL, OPT_SOCKET},
        {"key", required_argument, NULL, OPT_KEY},   {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION}, {NULL, 0, NULL, 0},
    };
    bool want_version = false;
    int c;
    while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_JSON:
            cli.json = true;
            break;
        case OPT_SOCKET:
            cli.socket_path = optarg;
            break;
        case OPT_KEY:
            cli.key = optarg;
            break;
        case 'h':
        case OPT_HELP:
            fputs(main_usage, stdout);
            return FB_EXIT_OK;
        case OPT_VERSION:
            want_version = true;
            break;
        default:
            fprintf(stderr, "Try 'forkbox --help'.\n");
            return FB_EXIT_USAGE;
        }
    }
    char *version_argv[] = {(char *)"version", NULL};
    if (!want_version && optind >= argc) {
        fputs(main_usage, stderr);
        return FB_EXIT_USAGE;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "forkbox: cannot initialise libcurl\n");
        return FB_EXIT_FAIL;
    }
    int rc =
        want_version ? fb_cmd_version(&cli, 1, version_argv) : dispatch(&cli, argc - optind, argv + optind);
    if (cli.client_open)
        fb_client_close(&cli.client);
    curl_global_cleanup();
    if (fflush(stdout) != 0 && errno != EPIPE) {
        fprintf(stderr, "forkbox: writing output: %s\n", strerror(errno));
        return FB_EXIT_FAIL;
    }
    return rc;
}
