/* files ls, cat, put, rm: direct access to one path in a sandbox. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/files.h"
#include "cli/output.h"
#include "common/cleanup.h"
#include "common/json_util.h"
#include "common/util.h"

char *fb_files_url(const char *id, const char *endpoint, const char *path, const char *extra)
{
    cleanup_free char *esc = fb_client_escape(path);
    cleanup_free char *suffix = NULL;
    if (esc == NULL || asprintf(&suffix, "/%s?path=%s%s", endpoint, esc, extra) < 0) {
        suffix = NULL;
        return NULL;
    }
    return fb_sandbox_path(id, suffix);
}

char *fb_path_basename(const char *path)
{
    char *copy = strdup(path);
    if (copy == NULL)
        return NULL;
    size_t n = strlen(copy);
    while (n > 0 && copy[n - 1] == '/')
        copy[--n] = '\0';
    char *slash = strrchr(copy, '/');
    if (slash != NULL)
        memmove(copy, slash + 1, strlen(slash + 1) + 1);
    return copy;
}

char *fb_path_dirname(const char *path)
{
    char *copy = strdup(path);
    if (copy == NULL)
        return NULL;
    size_t n = strlen(copy);
    while (n > 1 && copy[n - 1] == '/')
        copy[--n] = '\0';
    char *slash = strrchr(copy, '/');
    if (slash == NULL) {
        free(copy);
        return strdup(".");
    }
    while (slash > copy && slash[-1] == '/')
        slash--;
    if (slash == copy)
        slash[1] = '\0';
    else
        *slash = '\0';
    return copy;
}

struct listing {
    const char *path;
    char *buf; /* owned */
    size_t len;
};

static int listing_sink(void *ctx, const char *content_type, const char *data, size_t len, fb_error_t *err)
{
    struct listing *l = ctx;
    if (strncmp(content_type, "application/json", 16) != 0)
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "%s is not a directory", l->path);
    if (len > FB_CLIENT_MAX_JSON - l->len)
        return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "directory listing larger than %u MiB",
                            FB_CLIENT_MAX_JSON >> 20);
    char *nb = realloc(l->buf, l->len + len + 1);
    if (nb == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "listing");
    l->buf = nb;
    memcpy(l->buf + l->len, data, len);
    l->len += len;
    l->buf[l->len] = '\0';
    return 0;
}

int fb_files_list(struct fb_client *c, const char *id, const char *path, json_t **out, fb_error_t *err)
{
    cleanup_free char *url = fb_files_url(id, "files", path, "");
    if (url == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "url");
    struct listing l = {.path = path};
    struct fb_request req = {.method = "GET", .path = url, .sink = listing_sink, .sink_ctx = &l};
    cleanup_response struct fb_response resp = {0};
    int r = fb_client_do(c, &req, &resp, err);
    cleanup_free char *buf = l.buf;
    if (r < 0)
        return -1;
    if (strncmp(resp.content_type, "application/json", 16) != 0)
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "%s is not a directory", path);
    json_error_t jerr;
    *out = json_loadb(buf ? buf : "", l.len, 0, &jerr);
    if (*out == NULL || !json_is_array(json_object_get(*out, "entries"))) {
        fb_json_decrefp(out);
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "forkboxd sent an invalid directory listing");
    }
    return 0;
}

static int sandbox_args(const struct fb_command *cmd, int argc, char **argv, const char **id,
                        const char **path)
{
    if (argc - optind != 2)
        return fb_usage_error(cmd, "expected a sandbox id and a path");
    *id = argv[optind];
    *path = argv[optind + 1];
    if (!fb_valid_name(*id))
        return fb_usage_error(cmd, "invalid sandbox id '%s'", *id);
    if ((*path)[0] != '/')
        return fb_usage_error(cmd, "sandbox paths are absolute: '%s'", *path);
    return 0;
}

static const struct fb_command ls_cmd = {
    .name = "files ls",
    .usage = "Usage: forkbox files ls ID PATH\nLists a directory in the sandbox.\n",
};

static int files_ls(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &ls_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    const char *id, *path;
    if (sandbox_args(&ls_cmd, argc, argv, &id, &path) != 0)
        return FB_EXIT_USAGE;
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_json json_t *ans = NULL;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_files_list(client, id, path, &ans, &err) < 0)
        return fb_fail(&err);
    if (cli->json) {
        fb_print_json(ans);
        return FB_EXIT_OK;
    }
    static const char *const head[] = {"NAME", "TYPE", "SIZE", "MODE", "MTIME"};
    cleanup_table struct fb_table t = {0};
    if (fb_table_init(&t, 5, head) < 0)
        return FB_EXIT_FAIL;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(ans, "entries"), i, e)
    {
        char size[32];
        snprintf(size, sizeof size, "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(e, "size")));
        const char *row[] = {
            json_string_value(json_object_get(e, "name")),
            json_string_value(json_object_get(e, "type")),
            size,
            json_string_value(json_object_get(e, "mode")),
            json_string_value(json_object_get(e, "mtime")),
        };
        if (fb_table_add(&t, row) < 0)
            return FB_EXIT_FAIL;
    }
    fb_table_print(&t, stdout);
    return FB_EXIT_OK;
}

struct cat {
    const char *path;
    bool broken_pipe;
};

static int cat_sink(void *ctx, const char *content_type, const char *data, size_t len, fb_error_t *err)
{
    struct cat *cat = ctx;
    if (strncmp(content_type, "application/json", 16) == 0)
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "%s is a directory", cat->path);
    int r = fb_write_all(STDOUT_FILENO, data, len);
    if (r == -EPIPE)
        cat->broken_pipe = true;
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "writing output");
    return 0;
}

static const struct fb_command cat_cmd = {
    .name = "files cat",
    .usage = "Usage: forkbox files cat ID PATH\nWrites a file of the sandbox to stdout, byte for byte.\n",
};

static int files_cat(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &cat_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    const char *id, *path;
    if (sandbox_args(&cat_cmd, argc, argv, &id, &path) != 0)
        return FB_EXIT_USAGE;
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_free char *url = fb_files_url(id, "files", path, "");
    if (url == NULL)
        return FB_EXIT_FAIL;
    struct cat cat = {.path = path};
    struct fb_request req = {
        .method = "GET",
        .path = url,
        .accept = "application/octet-stream, application/json",
        .sink = cat_sink,
        .sink_ctx = &cat,
    };
    cleanup_response struct fb_response resp = {0};
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_do(client, &req, &resp, &err) < 0) {
        if (cat.broken_pipe)
            return 128 + SIGPIPE;
        return fb_fail(&err);
    }
    if (strncmp(resp.content_type, "application/json", 16) == 0) {
        fb_error_set(&err, FB_ERR_CONFLICT, 0, "%s is a directory", path);
        return fb_fail(&err);
    }
    return FB_EXIT_OK;
}

enum { OPT_MODE = 0x4000 };

static const struct option put_longopts[] = {
    {"mode", required_argument, NULL, OPT_MODE},
    {NULL, 0, NULL, 0},
};

static const struct fb_command put_cmd = {
    .name = "files put",
    .usage = "Usage: forkbox files put [--mode MODE] ID PATH < DATA\n"
             "Writes stdin to a file in the sandbox, creating parent directories.\n\n"
             "      --mode MODE   octal permissions (default 0644)\n",
    .longopts = put_longopts,
};

static int files_put(struct fb_cli *cli, int argc, char **argv)
{
    const char *mode = "0644";
    struct fb_args a;
    fb_args_init(&a, cli, &put_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        if (c == OPT_MODE)
            mode = optarg;
    }
    if (strlen(mode) < 1 || strlen(mode) > 4 || strspn(mode, "01234567") != strlen(mode))
        return fb_usage_error(&put_cmd, "--mode: '%s' is not an octal mode", mode);
    const char *id, *path;
    if (sandbox_args(&put_cmd, argc, argv, &id, &path) != 0)
        return FB_EXIT_USAGE;

    char extra[32];
    snprintf(extra, sizeof extra, "&mode=%s", mode);
    cleanup_free char *url = fb_files_url(id, "files", path, extra);
    if (url == NULL)
        return FB_EXIT_FAIL;
    /* a regular file on stdin has a known length; a pipe goes chunked */
    struct stat st;
    int64_t size = (fstat(STDIN_FILENO, &st) == 0 && S_ISREG(st.st_mode)) ? (int64_t)st.st_size : -1;
    if (size >= 0) {
        off_t pos = lseek(STDIN_FILENO, 0, SEEK_CUR);
        if (pos > 0)
            size -= pos;
    }
    struct fb_request req = {
        .method = "PUT",
        .path = url,
        .content_type = "application/octet-stream",
        .upload = stdin,
        .upload_size = size,
    };
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_response struct fb_response resp = {0};
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_do(client, &req, &resp, &err) < 0)
        return fb_fail(&err);
    cleanup_json json_t *ans = resp.body ? json_loadb(resp.body, resp.body_len, 0, NULL) : NULL;
    if (cli->json && ans != NULL)
        fb_print_json(ans);
    return FB_EXIT_OK;
}

enum { OPT_RECURSIVE = 'r' };

static const struct option rm_longopts[] = {
    {"recursive", no_argument, NULL, OPT_RECURSIVE},
    {NULL, 0, NULL, 0},
};

static const struct fb_command rm_cmd = {
    .name = "files rm",
    .usage = "Usage: forkbox files rm [-r] ID PATH\n"
             "Deletes a file or empty directory in the sandbox.\n\n"
             "  -r, --recursive   delete a directory with its contents\n",
    .shortopts = "r",
    .longopts = rm_longopts,
};

static int files_rm(struct fb_cli *cli, int argc, char **argv)
{
    bool recursive = false;
    struct fb_args a;
    fb_args_init(&a, cli, &rm_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        if (c == OPT_RECURSIVE)
            recursive = true;
    }
    const char *id, *path;
    if (sandbox_args(&rm_cmd, argc, argv, &id, &path) != 0)
        return FB_EXIT_USAGE;
    cleanup_free char *url = fb_files_url(id, "files", path, recursive ? "&recursive=true" : "");
    if (url == NULL)
        return FB_EXIT_FAIL;
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_json(client, "DELETE", url, NULL, NULL, &err) < 0)
        return fb_fail(&err);
    return FB_EXIT_OK;
}

static const char files_usage[] = "Usage: forkbox files COMMAND ID PATH\n"
                                  "\n"
                                  "  ls ID PATH          list a directory\n"
                                  "  cat ID PATH         write a file to stdout\n"
                                  "  put ID PATH < DATA  write stdin to a file\n"
                                  "  rm [-r] ID PATH     delete a file or directory\n";

int fb_cmd_files(struct fb_cli *cli, int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(struct fb_cli *, int, char **);
    } subs[] = {{"ls", files_ls}, {"cat", files_cat}, {"put", files_put}, {"rm", files_rm}};
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(files_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? FB_EXIT_USAGE : FB_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (strcmp(argv[1], subs[i].name) == 0)
            return subs[i].fn(cli, argc - 1, argv + 1);
    fprintf(stderr, "forkbox files: unknown command '%s'\n%s", argv[1], files_usage);
    return FB_EXIT_USAGE;
}
