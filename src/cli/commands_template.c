/* template ls, import, rm. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/output.h"
#include "cli/tarball.h"
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
    static const char *const head[] = {"NAME", "SOURCE", "CREATED", "SIZE", "LAYERS", "SHARED"};
    cleanup_table struct fb_table t = {0};
    if (fb_table_init(&t, 6, head) < 0)
        return FB_EXIT_FAIL;
    size_t i;
    json_t *tpl;
    json_array_foreach(json_object_get(ans, "templates"), i, tpl)
    {
        char created[64], size[32], layers[16], shared[32] = "-";
        fb_format_ago(json_string_value(json_object_get(tpl, "created_at")), created, sizeof created);
        json_t *bytes = json_object_get(tpl, "size_bytes");
        if (json_is_integer(bytes))
            fb_format_bytes((uint64_t)json_integer_value(bytes), size, sizeof size);
        else
            snprintf(size, sizeof size, "-");
        snprintf(layers, sizeof layers, "%zu", json_array_size(json_object_get(tpl, "layers")));
        json_t *sb = json_object_get(tpl, "shared_bytes");
        if (json_is_integer(sb))
            fb_format_bytes((uint64_t)json_integer_value(sb), shared, sizeof shared);
        const char *row[] = {json_string_value(json_object_get(tpl, "name")),
                             json_string_value(json_object_get(tpl, "source")),
                             created,
                             size,
                             layers,
                             shared};
        if (fb_table_add(&t, row) < 0)
            return FB_EXIT_FAIL;
    }
    fb_table_print(&t, stdout);
    return FB_EXIT_OK;
}

static const struct option import_longopts[] = {
    {"ref", required_argument, NULL, 'r'},
    {NULL, 0, NULL, 0},
};

static const struct fb_command import_cmd = {
    .name = "template import",
    .usage = "Usage: forkbox template import [--ref REF] NAME FILE.tar|DIR\n"
             "Imports an image as template NAME: an OCI image layout (a dir, or a tar such as\n"
             "`podman save --format oci-archive`), a docker-archive (`docker save`, `podman\n"
             "save`), or a root filesystem tarball (plain, gzip, xz or zstd; e.g. from\n"
             "`podman export`).  FILE - reads stdin.  --ref picks one image of several\n"
             "(a tag, or an OCI ref name).\n",
    .longopts = import_longopts,
};

static int template_import(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &import_cmd, argc, argv);
    int c;
    const char *ref = NULL;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        if (c == 'r')
            ref = optarg;
    }
    if (argc - optind != 2)
        return fb_usage_error(&import_cmd, "expected a template name and a tarball");
    const char *name = argv[optind], *file = argv[optind + 1];
    if (!fb_valid_name(name))
        return fb_usage_error(&import_cmd, "invalid template name '%s'", name);

    cleanup_error fb_error_t err = NULL;
    bool from_stdin = strcmp(file, "-") == 0;
    struct stat st;
    cleanup_fclose FILE *owned = NULL;
    if (!from_stdin && stat(file, &st) == 0 && S_ISDIR(st.st_mode)) {
        /* an OCI layout dir travels as the tar of itself */
        long count = 0;
        owned = fb_temp_file(&err);
        if (owned == NULL || fb_tar_create(file, owned, &count, &err) < 0 || fflush(owned) != 0 ||
            fseek(owned, 0, SEEK_SET) < 0)
            return fb_fail(&err);
    } else if (!from_stdin) {
        owned = fopen(file, "rbe");
    }
    FILE *f = from_stdin ? stdin : owned;
    if (f == NULL || fstat(fileno(f), &st) < 0) {
        fb_error_sys(&err, "open %s", file);
        return fb_fail(&err);
    }
    cleanup_free char *base = template_path(name, "/import");
    cleanup_free char *esc = ref ? fb_client_escape(ref) : NULL;
    char *path = NULL;
    if (base == NULL || (ref && esc == NULL) ||
        asprintf(&path, "%s%s%s", base, ref ? "?ref=" : "", ref ? esc : "") < 0)
        return FB_EXIT_FAIL;
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
    printf("imported template %s (%s, %zu layers%s%s)\n", name,
           json_string_value(json_object_get(tpl, "source")), json_array_size(json_object_get(tpl, "layers")),
           size[0] ? ", " : "", size);
    free(path);
    return FB_EXIT_OK;
}

static const struct fb_command inspect_cmd = {
    .name = "template inspect",
    .usage = "Usage: forkbox template inspect NAME\n"
             "Prints a template as JSON: its layers (and which other templates share them),\n"
             "its image defaults, and the sandboxes and checkpoints that use it.\n",
};

static int template_inspect(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &inspect_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (argc - optind != 1 || !fb_valid_name(argv[optind]))
        return fb_usage_error(&inspect_cmd, "expected one template name");
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_json json_t *ans = NULL;
    cleanup_free char *path = template_path(argv[optind], "");
    if (path == NULL || fb_cli_client(cli, &client, &err) < 0 ||
        fb_client_json(client, "GET", path, NULL, &ans, &err) < 0)
        return path == NULL ? FB_EXIT_FAIL : fb_fail(&err);
    fb_print_json(ans);
    return FB_EXIT_OK;
}

static const struct fb_command gc_cmd = {
    .name = "template gc",
    .usage = "Usage: forkbox template gc\n"
             "Removes stored layers no template uses any more (and their build-cache entries).\n",
};

static int template_gc(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &gc_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (optind < argc)
        return fb_usage_error(&gc_cmd, "unexpected argument '%s'", argv[optind]);
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_json json_t *ans = NULL;
    if (fb_cli_client(cli, &client, &err) < 0 ||
        fb_client_json(client, "POST", "/v1/templates/gc", NULL, &ans, &err) < 0)
        return fb_fail(&err);
    if (cli->json) {
        fb_print_json(ans);
        return FB_EXIT_OK;
    }
    char freed[32];
    fb_format_bytes((uint64_t)json_integer_value(json_object_get(ans, "freed_bytes")), freed, sizeof freed);
    printf("removed %lld layer(s), %s\n",
           (long long)json_integer_value(json_object_get(ans, "removed_layers")), freed);
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

static const char template_usage[] =
    "Usage: forkbox template COMMAND\n"
    "\n"
    "  ls                    list templates (size, layers, bytes shared)\n"
    "  import NAME FILE|DIR  import an OCI layout, docker-archive or rootfs tar\n"
    "  build -t NAME DIR     build a template from DIR/Dockerfile\n"
    "  inspect NAME          show a template's layers, defaults and users\n"
    "  rm NAME...            delete templates (not while in use)\n"
    "  gc                    remove layers no template uses\n";

int fb_cmd_template(struct fb_cli *cli, int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(struct fb_cli *, int, char **);
    } subs[] = {
        {"ls", template_ls},           {"list", template_ls},
        {"import", template_import},   {"build", fb_cmd_template_build},
        {"inspect", template_inspect}, {"gc", template_gc},
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
