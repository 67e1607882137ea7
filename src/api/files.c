/* /v1/sandboxes/{id}/files and /archive. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/text.h"
#include "../common/util.h"
#include "../common/wire.h"
#include "../core/files.h"
#include "api.h"

#define LIST_MAX 100000
#define ENTRY_MAX 8192

static const char *required_path(struct fb_req *r, unsigned *status, struct MHD_Response **resp)
{
    const char *p = fb_req_query(r, "path");
    if (p != NULL && *p != '\0')
        return p;
    *resp = fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "path: query parameter required");
    return NULL;
}

/* Parses "0644"-style modes (octal digits only). */
static int parse_mode(const char *s, int *out)
{
    if (s == NULL) {
        *out = 0644;
        return 0;
    }
    size_t n = strlen(s);
    if (n == 0 || n > 5)
        return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '7')
            return -1;
        v = v * 8 + (s[i] - '0');
    }
    if (v > 07777)
        return -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, bool *out)
{
    if (s == NULL || strcmp(s, "false") == 0 || strcmp(s, "0") == 0) {
        *out = false;
        return 0;
    }
    if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0) {
        *out = true;
        return 0;
    }
    return -1;
}

struct download {
    int fd;
    struct fb_frame f;
    size_t off;
    bool end;
};

static ssize_t download_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct download *d = cls;
    while (d->f.data == NULL || d->off == d->f.len) {
        if (d->end)
            return MHD_CONTENT_READER_END_OF_STREAM;
        free(d->f.data);
        d->f.data = NULL;
        d->off = 0;
        if (fb_wire_recv(d->fd, &d->f) < 0 || (d->f.type != FB_MSG_DATA && d->f.type != FB_MSG_END))
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (d->f.type == FB_MSG_END)
            d->end = true;
    }
    size_t n = d->f.len - d->off;
    if (n > max)
        n = max;
    memcpy(buf, d->f.data + d->off, n);
    d->off += n;
    return (ssize_t)n;
}

static void download_free(void *cls)
{
    struct download *d = cls;
    close(d->fd);
    free(d->f.data);
    free(d);
}

static struct MHD_Response *list_dir(int fd, unsigned *status)
{
    json_t *entries = json_array();
    for (;;) {
        struct fb_frame f;
        if (fb_wire_recv(fd, &f) < 0) {
            json_decref(entries);
            return fb_resp_error_new(FB_ERR_UNAVAILABLE, status, "the sandbox went away");
        }
        if (f.type == FB_MSG_END) {
            free(f.data);
            break;
        }
        /* an entry is a name and a few numbers: anything larger is not one */
        json_t *e = f.type == FB_MSG_ENTRY && f.len <= ENTRY_MAX ? fb_wire_frame_json(&f) : NULL;
        free(f.data);
        if (e == NULL)
            continue;
        char mode[8], mtime[40];
        snprintf(mode, sizeof mode, "%04o", (unsigned)json_integer_value(json_object_get(e, "mode")));
        fb_time_format(json_integer_value(json_object_get(e, "mtime")), mtime, sizeof mtime);
        json_object_set_new(e, "mode", json_string(mode));
        json_object_set_new(e, "mtime", json_string(mtime));
        json_object_del(e, "uid");
        json_object_del(e, "gid");
        /* a name that is not UTF-8: readable approximation plus exact bytes */
        char raw[4096];
        if (!json_is_string(json_object_get(e, "name")) &&
            fb_wire_get_bytes(e, "name", raw, sizeof raw) == 0) {
            size_t n = 0;
            char *lossy = fb_utf8_lossy(raw, strlen(raw), &n);
            json_object_set_new(e, "name", lossy ? json_stringn(lossy, n) : json_string("?"));
            free(lossy);
        }
        if (json_array_size(entries) < LIST_MAX)
            json_array_append_new(entries, e);
        else
            json_decref(e);
    }
    *status = 200;
    return fb_resp_json(json_pack("{s:o}", "entries", entries));
}

struct MHD_Response *fb_h_files_get(struct fb_req *r, unsigned *status)
{
    struct MHD_Response *resp = NULL;
    const char *path = required_path(r, status, &resp);
    if (path == NULL)
        return resp;
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *meta = NULL;
    cleanup_close int fd = fb_files_read_open(r->api->core, r->tenant, r->params[0], path, &meta, &err);
    if (fd < 0)
        return fb_resp_error(err, status);
    const char *type = json_string_value(json_object_get(meta, "type"));
    if (type != NULL && strcmp(type, "dir") == 0)
        return list_dir(fd, status);
    struct download *d = calloc(1, sizeof *d);
    if (d == NULL)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    d->fd = fb_steal_fd(&fd);
    json_int_t size = json_integer_value(json_object_get(meta, "size"));
    resp = MHD_create_response_from_callback((uint64_t)size, 65536, download_read, d, download_free);
    if (resp == NULL) {
        download_free(d);
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    }
    MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
    *status = 200;
    return resp;
}

int fb_files_put_begin(struct fb_req *r, fb_error_t *err)
{
    const char *path = fb_req_query(r, "path");
    int mode = 0644;
    if (path == NULL || *path == '\0')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "path: query parameter required");
    if (parse_mode(fb_req_query(r, "mode"), &mode) < 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "mode: must be octal digits, e.g. 0644");
    r->file_fd = fb_files_write_open(r->api->core, r->tenant, r->params[0], path, mode, err);
    return r->file_fd < 0 ? -1 : 0;
}

struct MHD_Response *fb_h_files_put(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    if (r->file_fd < 0 && fb_files_put_begin(r, &err) < 0) /* an empty body */
        return fb_resp_error(err, status);
    json_t *out = NULL;
    int r2 = fb_files_write_finish(r->file_fd, &out, &err);
    close(r->file_fd);
    r->file_fd = -1;
    if (r2 < 0)
        return fb_resp_error(err, status);
    json_object_del(out, "ok");
    json_object_set_new(out, "path", json_string(fb_req_query(r, "path")));
    *status = 201;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_files_delete(struct fb_req *r, unsigned *status)
{
    struct MHD_Response *resp = NULL;
    const char *path = required_path(r, status, &resp);
    if (path == NULL)
        return resp;
    bool recursive;
    if (parse_bool(fb_req_query(r, "recursive"), &recursive) < 0)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "recursive: must be true or false");
    cleanup_error fb_error_t err = NULL;
    if (fb_files_delete(r->api->core, r->tenant, r->params[0], path, recursive, &err) < 0)
        return fb_resp_error(err, status);
    *status = 204;
    return fb_resp_empty();
}

struct MHD_Response *fb_h_archive_get(struct fb_req *r, unsigned *status)
{
    struct MHD_Response *resp = NULL;
    const char *path = required_path(r, status, &resp);
    if (path == NULL)
        return resp;
    char spool[PATH_MAX];
    if (fb_snprintf(spool, sizeof spool, "%s/tmp/archive.XXXXXX", r->api->core->cfg.state_dir) < 0)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "spool path too long");
    cleanup_close int fd = mkostemp(spool, O_CLOEXEC);
    if (fd < 0)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "create spool: %s", strerror(errno));
    unlink(spool); /* the open fd is all the response needs */
    cleanup_error fb_error_t err = NULL;
    if (fb_archive_create(r->api->core, r->tenant, r->params[0], path, fd, &err) < 0)
        return fb_resp_error(err, status);
    struct stat st;
    if (fstat(fd, &st) < 0 || lseek(fd, 0, SEEK_SET) < 0)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "spool: %s", strerror(errno));
    if (fb_spool_reserve(r, (long long)st.st_size, &err) < 0)
        return fb_resp_error(err, status);
    resp = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
    if (resp == NULL)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    fd = -1; /* owned by the response now */
    MHD_add_response_header(resp, "Content-Type", "application/x-tar");
    *status = 200;
    return resp;
}

struct MHD_Response *fb_h_archive_put(struct fb_req *r, unsigned *status)
{
    struct MHD_Response *resp = NULL;
    const char *path = required_path(r, status, &resp);
    if (path == NULL)
        return resp;
    cleanup_error fb_error_t err = NULL;
    json_t *out = NULL;
    if (fb_archive_extract(r->api->core, r->tenant, r->params[0], path, r->spool_path, &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 201;
    return fb_resp_json(out);
}
