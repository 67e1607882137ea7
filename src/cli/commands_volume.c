/* volume create, ls, rm, download, upload. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/output.h"
#include "common/cleanup.h"
#include "common/json_util.h"

enum { OPT_SIZE = 0x2300, OPT_OUTPUT = 'o', OPT_PATH = 0x2301 };

static char *volume_path(const char *name, const char *suffix, const char *dir)
{
    cleanup_free char *esc = fb_client_escape(name);
    cleanup_free char *esc_dir = dir != NULL ? fb_client_escape(dir) : NULL;
    char *out = NULL;
    if (esc == NULL || (dir != NULL && esc_dir == NULL) ||
        asprintf(&out, "/v1/volumes/%s%s%s%s", esc, suffix, dir != NULL ? "?path=" : "",
                 dir != NULL ? esc_dir : "") < 0)
        return NULL;
    return out;
}

static const struct option create_longopts[] = {
    {"size", required_argument, NULL, OPT_SIZE},
    {NULL, 0, NULL, 0},
};

static const struct fb_command create_cmd = {
    .name = "volume create",
    .usage = "Usage: forkbox volume create NAME [--size MB]\n"
             "Creates an empty persistent volume; mount it with create --volume NAME:/PATH.\n\n"
             "      --size MB   size of its filesystem in MiB (default 1024)\n",
    .longopts = create_longopts,
};

static int volume_create(struct fb_cli *cli, int argc, char **argv)
{
    cleanup_json json_t *body = json_object();
    struct fb_args a;
    fb_args_init(&a, cli, &create_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        long long n;
        if (c == OPT_SIZE) {
            if (fb_parse_i64(optarg, 1, INT64_MAX, &n) < 0)
                return fb_usage_error(&create_cmd, "--size: '%s' is not a number of MiB", optarg);
            json_object_set_new(body, "size_mb", json_integer(n));
        }
    }
    if (argc - optind != 1)
        return fb_usage_error(&create_cmd, "expected one volume name");
    const char *name = argv[optind];
    if (!fb_valid_name(name) || json_object_set_new(body, "name", json_string(name)) < 0)
        return fb_usage_error(&create_cmd, "invalid volume name '%s'", name);
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_json json_t *ans = NULL;
    if (fb_cli_client(cli, &client, &err) < 0 ||
        fb_client_json(client, "POST", "/v1/volumes", body, &ans, &err) < 0)
        return fb_fail(&err);
    if (cli->json) {
        fb_print_json(ans);
        return FB_EXIT_OK;
    }
    printf("%s\n", name);
    return FB_EXIT_OK;
}

static const struct fb_command ls_cmd = {
    .name = "volume ls",
    .usage = "Usage: forkbox volume ls\nLists the tenant's volumes.\n",
};

static int volume_ls(struct fb_cli *cli, int argc, char **argv)
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
        fb_client_json(client, "GET", "/v1/volumes", NULL, &ans, &err) < 0)
        return fb_fail(&err);
    if (cli->json) {
        fb_print_json(ans);
        return FB_EXIT_OK;
    }
    static const char *const head[] = {"NAME", "SIZE", "USED", "CREATED"};
    cleanup_table struct fb_table t = {0};
    if (fb_table_init(&t, 4, head) < 0)
        return FB_EXIT_FAIL;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(ans, "volumes"), i, v)
    {
        char created[64], size[32], used[32] = "-";
        fb_format_ago(json_string_value(json_object_get(v, "created_at")), created, sizeof created);
        fb_format_bytes((uint64_t)json_integer_value(json_object_get(v, "size_bytes")), size, sizeof size);
        json_t *u = json_object_get(v, "used_bytes");
        if (json_is_integer(u))
            fb_format_bytes((uint64_t)json_integer_value(u), used, sizeof used);
        const char *row[] = {json_string_value(json_object_get(v, "name")), size, used, created};
        if (fb_table_add(&t, row) < 0)
            return FB_EXIT_FAIL;
    }
    fb_table_print(&t, stdout);
    return FB_EXIT_OK;
}

static const struct fb_command rm_cmd = {
    .name = "volume rm",
    .usage = "Usage: forkbox volume rm NAME...\n"
             "Deletes volumes and their contents; refused while a sandbox mounts one.\n",
};

static int volume_rm(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &rm_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (optind >= argc)
        return fb_usage_error(&rm_cmd, "expected a volume name");
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    if (fb_cli_client(cli, &client, &err) < 0)
        return fb_fail(&err);
    int rc = FB_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        cleanup_error fb_error_t one = NULL;
        cleanup_free char *path = fb_valid_name(argv[i]) ? volume_path(argv[i], "", NULL) : NULL;
        if (path == NULL)
            fb_error_set(&one, FB_ERR_BAD_REQUEST, 0, "invalid volume name '%s'", argv[i]);
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

static const struct option transfer_longopts[] = {
    {"output", required_argument, NULL, OPT_OUTPUT},
    {"path", required_argument, NULL, OPT_PATH},
    {NULL, 0, NULL, 0},
};

static const struct fb_command download_cmd = {
    .name = "volume download",
    .usage = "Usage: forkbox volume download NAME [-o FILE] [--path DIR]\n"
             "Writes the volume's contents as a tar (owners as inside sandboxes) to FILE,\n"
             "or to stdout.  No sandbox is needed.\n\n"
             "  -o, --output FILE   where to write it (replaced only once complete)\n"
             "      --path DIR      only this directory of the volume (default /)\n",
    .shortopts = "o:",
    .longopts = transfer_longopts,
};

static int volume_download(struct fb_cli *cli, int argc, char **argv)
{
    const char *out = NULL, *dir = NULL;
    struct fb_args a;
    fb_args_init(&a, cli, &download_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        if (c == OPT_OUTPUT)
            out = optarg;
        else if (c == OPT_PATH)
            dir = optarg;
    }
    if (argc - optind != 1 || !fb_valid_name(argv[optind]))
        return fb_usage_error(&download_cmd, "expected one volume name");
    cleanup_free char *path = volume_path(argv[optind], "/archive", dir);
    if (path == NULL)
        return FB_EXIT_FAIL;
    return fb_cli_download(cli, path, out, "downloading");
}

static const struct fb_command upload_cmd = {
    .name = "volume upload",
    .usage = "Usage: forkbox volume upload NAME FILE.tar [--path DIR]\n"
             "Extracts a tar (plain, gzip, xz or zstd) into the volume, keeping owners\n"
             "(0..65535, as inside sandboxes) and modes.  FILE - reads stdin.  The whole\n"
             "archive is checked first: a bad member changes nothing.\n\n"
             "      --path DIR      the directory of the volume to extract into (default /)\n",
    .longopts = transfer_longopts,
};

static int volume_upload(struct fb_cli *cli, int argc, char **argv)
{
    const char *dir = NULL;
    struct fb_args a;
    fb_args_init(&a, cli, &upload_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        if (c == OPT_PATH)
            dir = optarg;
    }
    if (argc - optind != 2)
        return fb_usage_error(&upload_cmd, "expected a volume name and a tar file");
    const char *name = argv[optind], *file = argv[optind + 1];
    if (!fb_valid_name(name))
        return fb_usage_error(&upload_cmd, "invalid volume name '%s'", name);
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
        fb_error_set(&err, FB_ERR_BAD_REQUEST, 0, "%s is a directory, not a tar file", file);
        return fb_fail(&err);
    }
    cleanup_free char *path = volume_path(name, "/archive", dir);
    if (path == NULL)
        return FB_EXIT_FAIL;
    struct fb_request req = {
        .method = "PUT",
        .path = path,
        .content_type = "application/x-tar",
        .upload = f,
        .upload_size = S_ISREG(st.st_mode) ? (int64_t)st.st_size : -1,
        .progress_label = "uploading",
    };
    struct fb_client *client;
    cleanup_response struct fb_response resp = {0};
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_do(client, &req, &resp, &err) < 0)
        return fb_fail(&err);
    cleanup_json json_t *ans = resp.body ? json_loadb(resp.body, resp.body_len, 0, NULL) : NULL;
    if (cli->json) {
        if (ans != NULL)
            fb_print_json(ans);
        return FB_EXIT_OK;
    }
    printf("%lld entries extracted into %s:%s\n",
           (long long)json_integer_value(json_object_get(ans, "entries")), name, dir != NULL ? dir : "/");
    return FB_EXIT_OK;
}

static const char volume_usage[] = "Usage: forkbox volume COMMAND\n"
                                   "\n"
                                   "  create NAME [--size MB]          create an empty volume\n"
                                   "  ls                               list volumes\n"
                                   "  rm NAME...                       delete volumes\n"
                                   "  download NAME [-o FILE]          its contents as a tar\n"
                                   "  upload NAME FILE.tar|-           extract a tar into it\n";

int fb_cmd_volume(struct fb_cli *cli, int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(struct fb_cli *, int, char **);
    } subs[] = {
        {"create", volume_create},     {"ls", volume_ls},         {"list", volume_ls}, {"rm", volume_rm},
        {"download", volume_download}, {"upload", volume_upload},
    };
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(volume_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? FB_EXIT_USAGE : FB_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (strcmp(argv[1], subs[i].name) == 0)
            return subs[i].fn(cli, argc - 1, argv + 1);
    fprintf(stderr, "forkbox volume: unknown command '%s'\n%s", argv[1], volume_usage);
    return FB_EXIT_USAGE;
}
