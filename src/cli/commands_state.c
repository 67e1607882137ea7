/* forkbox fork, pause, hibernate, resume: a sandbox's processes. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/client.h"
#include "cli/output.h"
#include "common/cleanup.h"
#include "common/json_util.h"

/* The daemon's limit on children per fork request. */
#define FORK_MAX 64

static const struct option fork_longopts[] = {
    {"count", required_argument, NULL, 'n'},
    {NULL, 0, NULL, 0},
};

static const struct fb_command fork_cmd = {
    .name = "fork",
    .usage = "Usage: forkbox fork [-n N] ID\n"
             "Forks running sandbox ID: N new sandboxes, each with a copy of its files and of\n"
             "its running processes (memory included) at one instant, and ids, hostnames and\n"
             "network namespaces of their own.  Prints the children's ids, one per line (the\n"
             "whole answer with --json).  Needs CRIU on the host.\n\n"
             "  -n, --count N   how many children, 1 to 64 (default 1)\n",
    .shortopts = "n:",
    .longopts = fork_longopts,
};

int fb_cmd_fork(struct fb_cli *cli, int argc, char **argv)
{
    long long count = 1;
    struct fb_args a;
    fb_args_init(&a, cli, &fork_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        if (c == 'n' && fb_parse_i64(optarg, 1, FORK_MAX, &count) < 0)
            return fb_usage_error(&fork_cmd, "-n: '%s' is not a number from 1 to %d", optarg, FORK_MAX);
    }
    if (argc - optind != 1)
        return fb_usage_error(&fork_cmd, "expected one sandbox id");
    const char *id = argv[optind];
    if (!fb_valid_name(id))
        return fb_usage_error(&fork_cmd, "invalid sandbox id '%s'", id);
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_free char *path = fb_sandbox_path(id, "/fork");
    cleanup_json json_t *body = json_pack("{s:I}", "count", (json_int_t)count);
    cleanup_json json_t *ans = NULL;
    if (path == NULL || body == NULL)
        return FB_EXIT_FAIL;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_json(client, "POST", path, body, &ans, &err) < 0)
        return fb_fail(&err);
    json_t *kids = json_object_get(ans, "sandboxes");
    if (!json_is_array(kids)) {
        fb_error_set(&err, FB_ERR_INTERNAL, 0, "forkboxd answered without a sandbox list");
        return fb_fail(&err);
    }
    if (cli->json) {
        fb_print_json(ans);
        return FB_EXIT_OK;
    }
    size_t i;
    json_t *kid;
    json_array_foreach(kids, i, kid)
    {
        const char *kid_id = json_string_value(json_object_get(kid, "id"));
        cleanup_free char *clean = fb_sanitize(kid_id ? kid_id : "-");
        printf("%s\n", clean ? clean : "-");
    }
    return FB_EXIT_OK;
}

static const struct fb_command pause_cmd = {
    .name = "pause",
    .usage = "Usage: forkbox pause ID\n"
             "Freezes every process of sandbox ID, keeping its memory, and prints the new\n"
             "state; `forkbox resume ID` thaws it.  Pausing a paused sandbox changes nothing.\n",
};

static const struct fb_command hibernate_cmd = {
    .name = "hibernate",
    .usage = "Usage: forkbox hibernate ID\n"
             "Writes the memory and processes of sandbox ID (running or paused) to disk,\n"
             "ends them and prints the new state; `forkbox resume ID` brings them back.\n"
             "Needs CRIU on the host.\n",
};

static const struct fb_command resume_cmd = {
    .name = "resume",
    .usage = "Usage: forkbox resume ID\n"
             "Thaws a paused sandbox or restores a hibernated one and prints the new state.\n"
             "Resuming a running sandbox changes nothing.\n",
};

/* POST /v1/sandboxes/ID/<action> and "ID: <state>" (the object with --json). */
static int state_change(struct fb_cli *cli, const struct fb_command *cmd, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (argc - optind != 1)
        return fb_usage_error(cmd, "expected one sandbox id");
    const char *id = argv[optind];
    if (!fb_valid_name(id))
        return fb_usage_error(cmd, "invalid sandbox id '%s'", id);
    char suffix[32];
    snprintf(suffix, sizeof suffix, "/%s", cmd->name);
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_free char *path = fb_sandbox_path(id, suffix);
    cleanup_json json_t *sbx = NULL;
    if (path == NULL)
        return FB_EXIT_FAIL;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_json(client, "POST", path, NULL, &sbx, &err) < 0)
        return fb_fail(&err);
    if (cli->json) {
        fb_print_json(sbx);
        return FB_EXIT_OK;
    }
    const char *state = json_string_value(json_object_get(sbx, "state"));
    cleanup_free char *clean = fb_sanitize(state ? state : "-");
    printf("%s: %s\n", id, clean ? clean : "-");
    return FB_EXIT_OK;
}

int fb_cmd_pause(struct fb_cli *cli, int argc, char **argv)
{
    return state_change(cli, &pause_cmd, argc, argv);
}

int fb_cmd_hibernate(struct fb_cli *cli, int argc, char **argv)
{
    return state_change(cli, &hibernate_cmd, argc, argv);
}

int fb_cmd_resume(struct fb_cli *cli, int argc, char **argv)
{
    return state_change(cli, &resume_cmd, argc, argv);
}
