/* forkbox checkpoint export / import, forkbox export: checkpoints and
 * sandboxes as tar files (docs/checkpoint-format.md). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/client.h"
#include "cli/output.h"
#include "common/cleanup.h"
#include "common/json_util.h"

enum { OPT_OUTPUT = 'o', OPT_FORMAT = 0x2200 };

static int file_sink(void *ctx, const char *content_type, const char *data, size_t len, fb_error_t *err)
{
    (void)content_type;
    if (fwrite(data, 1, len, ctx) != len)
        return fb_error_sys(err, "write the archive");
    return 0;
}

int fb_cli_download(struct fb_cli *cli, const char *path, const char *out, const char *label)
{
    cleanup_error fb_error_t err = NULL;
    if (out == NULL && isatty(STDOUT_FILENO)) {
        fb_error_set(&err, FB_ERR_BAD_REQUEST, 0, "not writing a tar to a terminal: use -o FILE or a pipe");
        return fb_fail(&err);
    }
    cleanup_free char *tmp = NULL;
    cleanup_fclose FILE *owned = NULL;
    if (out != NULL) {
        if (asprintf(&tmp, "%s.partXXXXXX", out) < 0)
            return FB_EXIT_FAIL;
        int fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0 || (owned = fdopen(fd, "wb")) == NULL) {
            fb_error_sys(&err, "create %s", tmp);
            if (fd >= 0)
                close(fd);
            return fb_fail(&err);
        }
    }
    struct fb_request req = {
        .method = "GET",
        .path = path,
        .accept = "application/x-tar",
        .sink = file_sink,
        .sink_ctx = owned ? owned : stdout,
        .progress_label = out ? label : NULL,
    };
    struct fb_client *client;
    cleanup_response struct fb_response resp = {0};
    int rc = fb_cli_client(cli, &client, &err) < 0 || fb_client_do(client, &req, &resp, &err) < 0 ? -1 : 0;
    if (rc == 0 && fflush(owned ? owned : stdout) != 0)
        rc = fb_error_sys(&err, "write the archive");
    if (rc == 0 && owned != NULL && (fsync(fileno(owned)) < 0 || rename(tmp, out) < 0))
        rc = fb_error_sys(&err, "write %s", out);
    if (rc < 0) {
        if (tmp != NULL)
            unlink(tmp);
        return fb_fail(&err);
    }
    return FB_EXIT_OK;
}

static const struct option out_longopts[] = {
    {"output", required_argument, NULL, OPT_OUTPUT},
    {NULL, 0, NULL, 0},
};

static const struct fb_command ckpt_export_cmd = {
    .name = "checkpoint export",
    .usage = "Usage: forkbox checkpoint export CKPT [-o FILE]\n"
             "Writes checkpoint CKPT as a tar in the checkpoint format (manifest.json,\n"
             "rootfs/layer.tar, criu/ for memory checkpoints) to FILE, or to stdout.\n\n"
             "  -o, --output FILE   where to write it (replaced only once complete)\n",
    .shortopts = "o:",
    .longopts = out_longopts,
};

int fb_cmd_checkpoint_export(struct fb_cli *cli, int argc, char **argv)
{
    const char *out = NULL;
    struct fb_args a;
    fb_args_init(&a, cli, &ckpt_export_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        if (c == OPT_OUTPUT)
            out = optarg;
    }
    if (argc - optind != 1)
        return fb_usage_error(&ckpt_export_cmd, "expected one checkpoint id");
    cleanup_free char *esc = fb_client_escape(argv[optind]);
    cleanup_free char *path = NULL;
    if (esc == NULL || asprintf(&path, "/v1/checkpoints/%s/export", esc) < 0)
        return FB_EXIT_FAIL;
    return fb_cli_download(cli, path, out, "exporting");
}

static const struct fb_command ckpt_import_cmd = {
    .name = "checkpoint import",
    .usage = "Usage: forkbox checkpoint import FILE\n"
             "Makes a new checkpoint from an export (plain, gzip or zstd; FILE - reads\n"
             "stdin) and prints its id (the whole object with --json).  The template it\n"
             "was made on must exist here with the same files.\n",
};

int fb_cmd_checkpoint_import(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &ckpt_import_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (argc - optind != 1)
        return fb_usage_error(&ckpt_import_cmd, "expected one file");
    const char *file = argv[optind];
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
        fb_error_set(&err, FB_ERR_BAD_REQUEST, 0, "%s is a directory, not an export", file);
        return fb_fail(&err);
    }
    struct fb_request req = {
        .method = "POST",
        .path = "/v1/checkpoints/import",
        .content_type = "application/x-tar",
        .upload = f,
        .upload_size = S_ISREG(st.st_mode) ? (int64_t)st.st_size : -1,
        .progress_label = "importing",
    };
    struct fb_client *client;
    cleanup_response struct fb_response resp = {0};
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_do(client, &req, &resp, &err) < 0)
        return fb_fail(&err);
    cleanup_json json_t *ck = resp.body ? json_loadb(resp.body, resp.body_len, 0, NULL) : NULL;
    if (cli->json)
        fb_print_json(ck);
    else
        printf("%s\n", json_string_value(json_object_get(ck, "id"))
                           ? json_string_value(json_object_get(ck, "id"))
                           : "");
    return FB_EXIT_OK;
}

static const struct option export_longopts[] = {
    {"output", required_argument, NULL, OPT_OUTPUT},
    {"format", required_argument, NULL, OPT_FORMAT},
    {NULL, 0, NULL, 0},
};

static const struct fb_command export_cmd = {
    .name = "export",
    .usage = "Usage: forkbox export ID [--format oci|docker] [-o FILE]\n"
             "Writes an image archive of sandbox ID's files (its template plus what it\n"
             "changed) that `podman load` / `docker load` accept; the sandbox is frozen\n"
             "while its layer is read.\n\n"
             "      --format F      oci (an OCI image layout, the default) or docker\n"
             "  -o, --output FILE   where to write it (default stdout)\n",
    .shortopts = "o:",
    .longopts = export_longopts,
};

int fb_cmd_export(struct fb_cli *cli, int argc, char **argv)
{
    const char *out = NULL, *format = "oci";
    struct fb_args a;
    fb_args_init(&a, cli, &export_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        if (c == OPT_OUTPUT)
            out = optarg;
        else if (c == OPT_FORMAT)
            format = optarg;
    }
    if (strcmp(format, "oci") != 0 && strcmp(format, "docker") != 0)
        return fb_usage_error(&export_cmd, "--format: oci or docker");
    if (argc - optind != 1)
        return fb_usage_error(&export_cmd, "expected one sandbox id");
    const char *id = argv[optind];
    if (!fb_valid_name(id))
        return fb_usage_error(&export_cmd, "invalid sandbox id '%s'", id);
    cleanup_free char *base = fb_sandbox_path(id, "/export?format=");
    cleanup_free char *path = NULL;
    if (base == NULL || asprintf(&path, "%s%s", base, format) < 0)
        return FB_EXIT_FAIL;
    return fb_cli_download(cli, path, out, "exporting");
}
