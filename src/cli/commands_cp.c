/* cp: files and directory trees between the host and a sandbox. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/tarball.h"
#include "cli/cli.h"
#include "cli/files.h"
#include "cli/output.h"
#include "common/cleanup.h"
#include "common/json_util.h"
#include "common/util.h"

/* Uploads at least this big get a progress line on a terminal. */
#define PROGRESS_MIN (1 << 20)

static const struct fb_command cp_cmd = {
    .name = "cp",
    .usage = "Usage: forkbox cp SRC DST\n"
             "Copies a file or directory between the host and a sandbox; exactly one side\n"
             "is ID:/path.  When DST is an existing directory, SRC is copied into it.\n\n"
             "  forkbox cp ./data.csv sbx_1f0c9a7e2b4d6c8e:/root/\n"
             "  forkbox cp sbx_1f0c9a7e2b4d6c8e:/root/out ./out\n",
};

/* "ID:/path" names a sandbox side; "./a:b" or "/x:y" stay local. */
static bool split_remote(const char *arg, char **id, const char **path)
{
    const char *colon = strchr(arg, ':');
    const char *slash = strchr(arg, '/');
    if (colon == NULL || colon == arg || (slash != NULL && slash < colon))
        return false;
    *id = strndup(arg, (size_t)(colon - arg));
    *path = colon + 1;
    return true;
}

/* The parent's listing entry for path in *entry (NULL when there is none
 * or the parent cannot be listed): the API has no stat call. */
static int remote_entry(struct fb_client *c, const char *id, const char *path, json_t **entry,
                        fb_error_t *err)
{
    *entry = NULL;
    cleanup_free char *parent = fb_path_dirname(path);
    cleanup_free char *base = fb_path_basename(path);
    if (parent == NULL || base == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "path");
    if (base[0] == '\0')
        return 0;
    cleanup_json json_t *listing = NULL;
    cleanup_error fb_error_t lerr = NULL;
    if (fb_files_list(c, id, parent, &listing, &lerr) < 0) {
        /* the transfer itself will report a bad sandbox or parent better */
        if (lerr->kind == FB_ERR_NOT_FOUND || lerr->kind == FB_ERR_CONFLICT ||
            lerr->kind == FB_ERR_BAD_REQUEST)
            return 0;
        *err = fb_steal_ptr(lerr);
        return -1;
    }
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(listing, "entries"), i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        if (name != NULL && strcmp(name, base) == 0) {
            *entry = json_incref(e);
            break;
        }
    }
    return 0;
}

/* Whether path is a directory in the sandbox; a missing path is not one. */
static int remote_is_dir(struct fb_client *c, const char *id, const char *path, bool *is_dir, fb_error_t *err)
{
    size_t n = strlen(path);
    *is_dir = n > 0 && path[n - 1] == '/';
    if (*is_dir)
        return 0;
    cleanup_json json_t *entry = NULL;
    if (remote_entry(c, id, path, &entry, err) < 0)
        return -1;
    const char *type = json_string_value(json_object_get(entry, "type"));
    *is_dir = type != NULL && strcmp(type, "dir") == 0;
    return 0;
}

/* The permission bits of a sandbox file, 0644 when they cannot be learnt. */
static mode_t remote_mode(struct fb_client *c, const char *id, const char *path)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *entry = NULL;
    const char *text = NULL;
    if (remote_entry(c, id, path, &entry, &err) == 0)
        text = json_string_value(json_object_get(entry, "mode"));
    char *end = NULL;
    unsigned long mode = text ? strtoul(text, &end, 8) : 0;
    if (text == NULL || end == text || *end != '\0')
        return 0644;
    return (mode_t)(mode & 0777);
}

static char *join(const char *dir, const char *name)
{
    char *out = NULL;
    size_t n = strlen(dir);
    if (asprintf(&out, "%s%s%s", dir, (n > 0 && dir[n - 1] == '/') ? "" : "/", name) < 0)
        return NULL;
    return out;
}

static int put_stream(struct fb_client *c, const char *url, const char *content_type, FILE *f, int64_t size,
                      const char *label, fb_error_t *err)
{
    struct fb_request req = {
        .method = "PUT",
        .path = url,
        .content_type = content_type,
        .upload = f,
        .upload_size = size,
        .progress_label = size >= PROGRESS_MIN ? label : NULL,
    };
    cleanup_response struct fb_response resp = {0};
    return fb_client_do(c, &req, &resp, err);
}

static int copy_to_sandbox(struct fb_client *c, const char *src, const char *id, const char *dst,
                           fb_error_t *err)
{
    if (dst[0] != '/')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "sandbox paths are absolute: '%s'", dst);
    struct stat st;
    if (stat(src, &st) < 0)
        return fb_error_sys(err, "%s", src);
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: not a regular file or directory", src);

    bool into = false;
    if (remote_is_dir(c, id, dst, &into, err) < 0)
        return -1;
    cleanup_free char *base = fb_path_basename(src);
    cleanup_free char *target = into ? join(dst, base ? base : "") : strdup(dst);
    if (target == NULL || base == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "path");

    if (S_ISDIR(st.st_mode)) {
        cleanup_fclose FILE *tar = fb_temp_file(err);
        long count = 0;
        if (tar == NULL || fb_tar_create(src, tar, &count, err) < 0)
            return -1;
        if (fflush(tar) != 0)
            return fb_error_sys(err, "archive %s", src);
        off_t size = ftello(tar);
        rewind(tar);
        cleanup_free char *url = fb_files_url(id, "archive", target, "");
        if (url == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "url");
        return put_stream(c, url, "application/x-tar", tar, (int64_t)size, src, err);
    }

    cleanup_fclose FILE *f = fopen(src, "rbe");
    if (f == NULL)
        return fb_error_sys(err, "open %s", src);
    if (fstat(fileno(f), &st) < 0)
        return fb_error_sys(err, "%s", src);
    if (!S_ISREG(st.st_mode))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s changed while copying", src);
    char extra[32];
    snprintf(extra, sizeof extra, "&mode=%04o", (unsigned)(st.st_mode & 0777));
    cleanup_free char *url = fb_files_url(id, "files", target, extra);
    if (url == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "url");
    return put_stream(c, url, "application/octet-stream", f, (int64_t)st.st_size, src, err);
}

/* A file download lands in a temp file next to its target, renamed into
 * place only when complete, so a failure never leaves half a file. */
struct download {
    const char *target;
    char *tmp_path; /* owned; unlinked unless renamed */
    int fd;
    bool decided;
    bool is_dir;
};

static int download_open(struct download *d, fb_error_t *err)
{
    cleanup_free char *dir = fb_path_dirname(d->target);
    cleanup_free char *base = fb_path_basename(d->target);
    if (dir == NULL || base == NULL || asprintf(&d->tmp_path, "%s/.%s.forkbox-XXXXXX", dir, base) < 0) {
        d->tmp_path = NULL;
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "path");
    }
    d->fd = mkostemp(d->tmp_path, O_CLOEXEC);
    if (d->fd < 0) {
        fb_error_sys(err, "create %s", d->target);
        fb_freep(&d->tmp_path);
        return -1;
    }
    return 0;
}

static int download_sink(void *ctx, const char *content_type, const char *data, size_t len, fb_error_t *err)
{
    struct download *d = ctx;
    if (!d->decided) {
        d->decided = true;
        d->is_dir = strncmp(content_type, "application/json", 16) == 0;
    }
    if (d->is_dir)
        return 0; /* a listing: the tree comes from the archive endpoint */
    if (d->fd < 0 && download_open(d, err) < 0)
        return -1;
    int r = fb_write_all(d->fd, data, len);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "write %s", d->target);
    return 0;
}

static int download_finish(struct download *d, mode_t mode, fb_error_t *err)
{
    if (d->fd < 0 && download_open(d, err) < 0)
        return -1;
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(d->fd, mode & ~mask) < 0 || fsync(d->fd) < 0)
        return fb_error_sys(err, "write %s", d->target);
    if (close(fb_steal_fd(&d->fd)) < 0)
        return fb_error_sys(err, "write %s", d->target);
    if (rename(d->tmp_path, d->target) < 0)
        return fb_error_sys(err, "create %s", d->target);
    fb_freep(&d->tmp_path);
    return 0;
}

static void download_release(struct download *d)
{
    fb_closep(&d->fd);
    if (d->tmp_path != NULL)
        unlink(d->tmp_path);
    fb_freep(&d->tmp_path);
}

static int file_sink(void *ctx, const char *content_type, const char *data, size_t len, fb_error_t *err)
{
    (void)content_type;
    if (fwrite(data, 1, len, ctx) != len)
        return fb_error_sys(err, "write a temp file");
    return 0;
}

static int copy_tree_from_sandbox(struct fb_client *c, const char *id, const char *src, const char *target,
                                  fb_error_t *err)
{
    cleanup_fclose FILE *tar = fb_temp_file(err);
    if (tar == NULL)
        return -1;
    cleanup_free char *url = fb_files_url(id, "archive", src, "");
    if (url == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "url");
    struct fb_request req = {
        .method = "GET",
        .path = url,
        .accept = "application/x-tar",
        .sink = file_sink,
        .sink_ctx = tar,
    };
    cleanup_response struct fb_response resp = {0};
    if (fb_client_do(c, &req, &resp, err) < 0)
        return -1;
    if (fflush(tar) != 0)
        return fb_error_sys(err, "write a temp file");
    if (lseek(fileno(tar), 0, SEEK_SET) < 0)
        return fb_error_sys(err, "read a temp file");
    long count = 0;
    return fb_tar_extract(fileno(tar), target, &count, err);
}

static int copy_from_sandbox(struct fb_client *c, const char *id, const char *src, const char *dst,
                             fb_error_t *err)
{
    if (src[0] != '/')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "sandbox paths are absolute: '%s'", src);
    struct stat st;
    cleanup_free char *base = fb_path_basename(src);
    if (base == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "path");
    bool into = stat(dst, &st) == 0 && S_ISDIR(st.st_mode);
    cleanup_free char *target = (into && base[0] != '\0') ? join(dst, base) : strdup(dst);
    if (target == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "path");

    cleanup_free char *url = fb_files_url(id, "files", src, "");
    if (url == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "url");
    __attribute__((cleanup(download_release))) struct download d = {.target = target, .fd = -1};
    struct fb_request req = {
        .method = "GET",
        .path = url,
        .accept = "application/octet-stream, application/json",
        .sink = download_sink,
        .sink_ctx = &d,
    };
    cleanup_response struct fb_response resp = {0};
    if (fb_client_do(c, &req, &resp, err) < 0)
        return -1;
    if (strncmp(resp.content_type, "application/json", 16) == 0)
        return copy_tree_from_sandbox(c, id, src, target, err);
    return download_finish(&d, remote_mode(c, id, src), err);
}

int fb_cmd_cp(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &cp_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (argc - optind != 2)
        return fb_usage_error(&cp_cmd, "expected SRC and DST");
    const char *src = argv[optind], *dst = argv[optind + 1];
    cleanup_free char *src_id = NULL, *dst_id = NULL;
    const char *src_path = src, *dst_path = dst;
    bool src_remote = split_remote(src, &src_id, &src_path);
    bool dst_remote = split_remote(dst, &dst_id, &dst_path);
    if (src_remote == dst_remote)
        return fb_usage_error(&cp_cmd, "exactly one of SRC and DST must be ID:/path");
    const char *id = src_remote ? src_id : dst_id;
    if (id == NULL)
        return FB_EXIT_FAIL;
    if (!fb_valid_name(id))
        return fb_usage_error(&cp_cmd, "invalid sandbox id '%s'", id);
    if ((src_remote ? src_path : dst_path)[0] != '/')
        return fb_usage_error(&cp_cmd, "sandbox paths are absolute: '%s'", src_remote ? src : dst);

    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    if (fb_cli_client(cli, &client, &err) < 0)
        return fb_fail(&err);
    int r = src_remote ? copy_from_sandbox(client, id, src_path, dst_path, &err)
                       : copy_to_sandbox(client, src_path, id, dst_path, &err);
    return r < 0 ? fb_fail(&err) : FB_EXIT_OK;
}
