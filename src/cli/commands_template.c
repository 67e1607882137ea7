/* template ls, import, rm. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/output.h"
#include "common/cleanup.h"
#include "common/json_util.h"

static char *template_path(const char *name, const char *suffix)
{
    cleanup_free char *esc = fb_client_escape(name);
    char *out = NULL;
    if (esc == NULL || asprintf(&out, "/v1/templates/%s%s", esc, suffix) < 0)
        return NULL;
    return out;
}

static const struct fb_command ls_cmd = {
    .name = "template ls",
    .usage = "Usage: forkbox template ls\nLists root filesystem templates.\n",
};

static int template_ls(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &ls_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (optind < argc)
        return fb_usage_error(&ls_cmd, "unexpected argument '%s'", argv[optind]);
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_json json_t *ans = NULL;
    if (fb_cli_client(cli, &client, &err) < 0 ||
        fb_client_json(client, "GET", "/v1/templates", NULL, &ans, &err) < 0)
        return fb_fail(&err);
    if (cli->json) {
        fb_print_json(ans);
        return FB_EXIT_OK;
    }
    static const char *const head[] = {"NAME", "SOURCE", "CREATED", "SIZE"};
    cleanup_table struct fb_table t = {0};
    if (fb_table_init(&t, 4, head) < 0)
        return FB_EXIT_FAIL;
    size_t i;
    json_t *tpl;
    json_array_foreach(json_object_get(ans, "templates"), i, tpl)
    {
        char created[64], size[32];
        fb_format_ago(json_string_value(json_object_get(tpl, "created_at")), created, sizeof created);
        json_t *bytes = json_object_get(tpl, "size_bytes");
        if (json_is_integer(bytes))
            fb_format_bytes((uint64_t)json_integer_value(bytes), size, sizeof size);
        else
            snprintf(size, sizeof size, "-");
        const char *row[] = {json_string_value(json_object_get(tpl, "name")),
                             json_string_value(json_object_get(tpl, "source")), created, size};
        if (fb_table_add(&t, row) < 0)
            return FB_EXIT_FAIL;
    }
    fb_table_print(&t, stdout);
    return FB_EXIT_OK;
}

static const struct fb_command import_cmd = {
    .name = "template import",
    .usage = "Usage: forkbox template import NAME FILE.tar\n"
             "Imports a root filesystem tarball (plain, gzip, xz or zstd; e.g. from\n"
             "`podman export`) as template NAME.  FILE - reads stdin.\n",
};

static int template_import(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &import_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (argc - optind != 2)
        return fb_usage_error(&import_cmd, "expected a template name and a tarball");
    const char *name = argv[optind], *file = argv[optind + 1];
    if (!fb_valid_name(name))
        return fb_usage_error(&import_cmd, "invalid template name '%s'", name);

    cleanup_error fb_error_t err = NULL;
    bool from_stdin = strcmp(file, "-") == 0;
    cleanup_fclose FILE *owned = from_stdin ? NULL : fopen(file, "rbe");
    FILE *f = from_stdin ? stdin : owned;
    struct stat st;
    if (f == NULL || fstat(fileno(f), &st) < 0) {
        fb_error_sys(&err, "open %s", file);
        return fb_fail(&err);
    }
    if (S_ISDIR(st.st_mode)) {
        fb_error_set(&err, FB_ERR_BAD_REQUEST, 0, "%s is a directory, not a tarball", file);
        return fb_fail(&err);
    }
    cleanup_free char *path = template_path(name, "/import");
    cleanup_free char *label = NULL;
    if (path == NULL || asprintf(&label, "importing %s", name) < 0)
        return FB_EXIT_FAIL;
    struct fb_request req = {
        .method = "PUT",
        .path = path,
        .content_type = "application/x-tar",
        .upload = f,
        .upload_size = S_ISREG(st.st_mode) ? (int64_t)st.st_size : -1,
        .progress_label = label,
    };
    struct fb_client *client;
    cleanup_response struct fb_response resp = {0};
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_do(client, &req, &resp, &err) < 0)
        return fb_fail(&err);
    cleanup_json json_t *tpl = resp.body ? json_loadb(resp.body, resp.body_len, 0, NULL) : NULL;
    if (cli->json) {
        if (tpl != NULL)
            fb_print_json(tpl);
        return FB_EXIT_OK;
    }
    char size[32] = "";
    json_t *bytes = json_object_get(tpl, "size_bytes");
    if (json_is_integer(bytes))
        fb_format_bytes((uint64_t)json_integer_value(bytes), size, sizeof size);
    printf("imported template %s%s%s%s\n", name, size[0] ? " (" : "", size, size[0] ? ")" : "");
    return FB_EXIT_OK;
}

static const struct fb_command rm_cmd = {
    .name = "template rm",
    .usage = "Usage: forkbox template rm NAME...\nDeletes templates no sandbox uses.\n",
};

static int template_rm(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &rm_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (optind >= argc)
        return fb_usage_error(&rm_cmd, "expected a template name");
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    if (fb_cli_client(cli, &client, &err) < 0)
        return fb_fail(&err);
    int rc = FB_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        cleanup_error fb_error_t one = NULL;
        cleanup_free char *path = fb_valid_name(argv[i]) ? template_path(argv[i], "") : NULL;
        if (path == NULL)
            fb_error_set(&one, FB_ERR_BAD_REQUEST, 0, "invalid template name '%s'", argv[i]);
        else
            fb_client_json(client, "DELETE", path, NULL, NULL, &one);
        if (one != NULL) {
            rc = fb_fail(&one);
            continue;
        }
        if (!cli->json)
            printf("%s\n", argv[i]);
    }
    return rc;
}

static const char template_usage[] = "Usage: forkbox template COMMAND\n"
                                     "\n"
                                     "  ls                    list templates\n"
                                     "  import NAME FILE.tar  import a root filesystem tarball\n"
                                     "  rm NAME...            delete templates\n";

int fb_cmd_template(struct fb_cli *cli, int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(struct fb_cli *, int, char **);
    } subs[] = {
        {"ls", template_ls},
        {"list", template_ls},
        {"import", template_import},
        {"rm", template_rm},
    };
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(template_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? FB_EXIT_USAGE : FB_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (strcmp(argv[1], subs[i].name) == 0)
            return subs[i].fn(cli, argc - 1, argv + 1);
    fprintf(stderr, "forkbox template: unknown command '%s'\n%s", argv[1], template_usage);
    return FB_EXIT_USAGE;
}
