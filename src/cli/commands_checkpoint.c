/* forkbox checkpoint, checkpoints, rollback: checkpoints of a sandbox's files
 * and, with --memory, of its running processes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/client.h"
#include "cli/output.h"
#include "common/cleanup.h"
#include "common/json_util.h"

enum { OPT_NAME = 0x2100, OPT_MEMORY };

static const struct option checkpoint_longopts[] = {
    {"name", required_argument, NULL, OPT_NAME},
    {"memory", no_argument, NULL, OPT_MEMORY},
    {NULL, 0, NULL, 0},
};

static const struct fb_command checkpoint_cmd = {
    .name = "checkpoint",
    .usage = "Usage: forkbox checkpoint ID [--name NAME] [--memory]\n"
             "       forkbox checkpoint rm CKPT...\n"
             "       forkbox checkpoint export CKPT [-o FILE]\n"
             "       forkbox checkpoint import FILE\n"
             "Checkpoints the files of sandbox ID and prints the checkpoint's id (the whole\n"
             "object with --json); `rm` deletes checkpoints; `export` writes one as a tar,\n"
             "`import` makes a new one from such a tar (see their --help).\n\n"
             "      --name NAME   a name to remember it by\n"
             "      --memory      also its running processes and their memory (the sandbox\n"
             "                    must be running; needs CRIU on the host)\n",
    .longopts = checkpoint_longopts,
};

static char *checkpoint_path(const char *cid)
{
    cleanup_free char *esc = fb_client_escape(cid);
    char *out = NULL;
    if (esc == NULL || asprintf(&out, "/v1/checkpoints/%s", esc) < 0)
        return NULL;
    return out;
}

static int checkpoint_rm(struct fb_cli *cli, int argc, char **argv)
{
    if (argc < 1)
        return fb_usage_error(&checkpoint_cmd, "expected checkpoint ids");
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    if (fb_cli_client(cli, &client, &err) < 0)
        return fb_fail(&err);
    int rc = FB_EXIT_OK;
    for (int i = 0; i < argc; i++) {
        cleanup_free char *path = checkpoint_path(argv[i]);
        if (path == NULL)
            return FB_EXIT_FAIL;
        if (fb_client_json(client, "DELETE", path, NULL, NULL, &err) < 0) {
            rc = fb_fail(&err);
            continue;
        }
        if (!cli->json)
            printf("%s\n", argv[i]);
    }
    return rc;
}

int fb_cmd_checkpoint(struct fb_cli *cli, int argc, char **argv)
{
    /* before option parsing: these take options of their own */
    if (argc >= 2 && strcmp(argv[1], "export") == 0)
        return fb_cmd_checkpoint_export(cli, argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "import") == 0)
        return fb_cmd_checkpoint_import(cli, argc - 1, argv + 1);
    cleanup_json json_t *body = json_object();
    if (body == NULL)
        return FB_EXIT_FAIL;
    bool memory = false;
    struct fb_args a;
    fb_args_init(&a, cli, &checkpoint_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        if (c == OPT_NAME && json_object_set_new(body, "name", json_string(optarg)) < 0)
            return fb_usage_error(&checkpoint_cmd, "--name: not valid UTF-8");
        if (c == OPT_MEMORY)
            memory = true;
    }
    if (optind < argc && strcmp(argv[optind], "rm") == 0)
        return checkpoint_rm(cli, argc - optind - 1, argv + optind + 1);
    if (argc - optind != 1)
        return fb_usage_error(&checkpoint_cmd, "expected one sandbox id");
    if (json_object_set_new(body, "memory", json_boolean(memory)) < 0)
        return FB_EXIT_FAIL;
    const char *id = argv[optind];
    if (!fb_valid_name(id))
        return fb_usage_error(&checkpoint_cmd, "invalid sandbox id '%s'", id);
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_free char *path = fb_sandbox_path(id, "/checkpoints");
    cleanup_json json_t *ck = NULL;
    if (path == NULL)
        return FB_EXIT_FAIL;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_json(client, "POST", path, body, &ck, &err) < 0)
        return fb_fail(&err);
    if (cli->json)
        fb_print_json(ck);
    else
        printf("%s\n", json_string_value(json_object_get(ck, "id")));
    return FB_EXIT_OK;
}

static const struct fb_command checkpoints_cmd = {
    .name = "checkpoints",
    .usage = "Usage: forkbox checkpoints ID\n"
             "Lists the checkpoints of sandbox ID, oldest first.\n",
};

int fb_cmd_checkpoints(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &checkpoints_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (argc - optind != 1)
        return fb_usage_error(&checkpoints_cmd, "expected one sandbox id");
    const char *id = argv[optind];
    if (!fb_valid_name(id))
        return fb_usage_error(&checkpoints_cmd, "invalid sandbox id '%s'", id);
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_free char *path = fb_sandbox_path(id, "/checkpoints");
    cleanup_json json_t *list = NULL;
    if (path == NULL)
        return FB_EXIT_FAIL;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_json(client, "GET", path, NULL, &list, &err) < 0)
        return fb_fail(&err);
    if (cli->json) {
        fb_print_json(list);
        return FB_EXIT_OK;
    }
    static const char *const head[] = {"ID", "NAME", "PARENT", "MEMORY", "SIZE", "CREATED"};
    cleanup_table struct fb_table t = {0};
    if (fb_table_init(&t, 6, head) < 0)
        return FB_EXIT_FAIL;
    size_t i;
    json_t *ck;
    json_array_foreach(json_object_get(list, "checkpoints"), i, ck)
    {
        char created[64], size[32];
        fb_format_ago(json_string_value(json_object_get(ck, "created_at")), created, sizeof created);
        fb_format_bytes((uint64_t)json_integer_value(json_object_get(ck, "size_bytes")), size, sizeof size);
        const char *name = json_string_value(json_object_get(ck, "name"));
        const char *parent = json_string_value(json_object_get(ck, "parent"));
        const char *memory = json_is_true(json_object_get(ck, "memory")) ? "yes" : "no";
        const char *row[] = {json_string_value(json_object_get(ck, "id")),
                             name ? name : "-",
                             parent ? parent : "-",
                             memory,
                             size,
                             created};
        if (fb_table_add(&t, row) < 0)
            return FB_EXIT_FAIL;
    }
    fb_table_print(&t, stdout);
    return FB_EXIT_OK;
}

static const struct fb_command rollback_cmd = {
    .name = "rollback",
    .usage = "Usage: forkbox rollback ID CKPT\n"
             "Ends every process of sandbox ID and gives it exactly the files of checkpoint\n"
             "CKPT; the sandbox runs again with the same id.  For a memory checkpoint\n"
             "(`forkbox checkpoint --memory`) its processes come back too, as they were.\n",
};

int fb_cmd_rollback(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &rollback_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (argc - optind != 2)
        return fb_usage_error(&rollback_cmd, "expected a sandbox id and a checkpoint id");
    const char *id = argv[optind];
    if (!fb_valid_name(id))
        return fb_usage_error(&rollback_cmd, "invalid sandbox id '%s'", id);
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_free char *path = fb_sandbox_path(id, "/rollback");
    cleanup_json json_t *body = json_pack("{s:s}", "checkpoint", argv[optind + 1]);
    cleanup_json json_t *sbx = NULL;
    if (path == NULL || body == NULL)
        return body == NULL ? fb_usage_error(&rollback_cmd, "checkpoint id: not valid UTF-8") : FB_EXIT_FAIL;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_json(client, "POST", path, body, &sbx, &err) < 0)
        return fb_fail(&err);
    if (cli->json)
        fb_print_json(sbx);
    else
        printf("%s: rolled back to %s\n", id, argv[optind + 1]);
    return FB_EXIT_OK;
}
