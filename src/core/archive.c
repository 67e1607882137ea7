/* Tar archives of sandbox directories, both directions.  libarchive does
 * all tar parsing and writing on the host; the host never touches the
 * sandbox's files directly, init applies the (pre-checked) entries. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../runtime/initconn.h"
#include "files.h"
#include "path.h"
#include "tarfilter.h"

#define ARCHIVE_ENTRIES_MAX 200000

static void handle_clearp(struct fb_sandbox_handle *h)
{
    fb_sandbox_handle_clear(h);
}
static void rd_freep(struct archive **a)
{
    if (*a)
        archive_read_free(*a);
}
static void wr_freep(struct archive **a)
{
    if (*a)
        archive_write_free(*a);
}
static void entry_freep(struct archive_entry **e)
{
    if (*e)
        archive_entry_free(*e);
}
#define cleanup_handle __attribute__((cleanup(handle_clearp)))
#define cleanup_archive_rd __attribute__((cleanup(rd_freep)))
#define cleanup_archive_wr __attribute__((cleanup(wr_freep)))

int fb_archive_create(struct fb_core *core, const char *tenant, const char *id, const char *path, int out_fd,
                      fb_error_t *err)
{
    char norm[FB_PATH_MAX + 1];
    if (fb_path_normalize(path, norm, sizeof norm, err) < 0)
        return -1;
    cleanup_handle struct fb_sandbox_handle h = {0};
    if (fb_sandbox_open(core, tenant, id, &h, err) < 0)
        return -1;
    cleanup_close int fd = fb_initconn_open(h.sock_path, err);
    cleanup_json json_t *req = fb_initconn_path_req("walk", norm);
    if (fd < 0 || fb_initconn_send(fd, req, err) < 0)
        return -1;
    cleanup_archive_wr struct archive *a = archive_write_new();
    /* names are bytes: written as they are, not converted through a locale */
    if (a == NULL || archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_set_options(a, "hdrcharset=BINARY") < ARCHIVE_WARN ||
        archive_write_open_fd(a, out_fd) != ARCHIVE_OK)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "start tar: %s",
                            a ? archive_error_string(a) : "no memory");
    long long total = 0;
    for (;;) {
        struct fb_frame f;
        if (fb_initconn_recv(fd, &f, err) < 0)
            return -1;
        if (f.type == FB_MSG_RESULT) {
            int r = fb_initconn_check_result(&f, NULL, err);
            free(f.data);
            if (r < 0)
                return fb_error_wrap(err, "%s", norm);
            break;
        }
        cleanup_json json_t *e = f.type == FB_MSG_ENTRY ? fb_wire_frame_json(&f) : NULL;
        free(f.data);
        if (e == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, EPROTO, "unexpected frame from sandbox init");
        char name[FB_PATH_MAX + 1], link[FB_PATH_MAX + 1];
        const char *type = json_string_value(json_object_get(e, "type"));
        json_int_t size = json_integer_value(json_object_get(e, "size"));
        if (fb_wire_get_bytes(e, "name", name, sizeof name) < 0 || type == NULL || size < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, EPROTO, "malformed entry from sandbox init");
        bool is_file = strcmp(type, "file") == 0;
        total += 512 + (is_file ? size : 0);
        if (total > FB_ARCHIVE_MAX)
            return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "%s: archive would exceed %lld bytes", norm,
                                (long long)FB_ARCHIVE_MAX);
        __attribute__((cleanup(entry_freep))) struct archive_entry *ae = archive_entry_new();
        archive_entry_set_pathname(ae, name);
        archive_entry_set_perm(ae, (mode_t)json_integer_value(json_object_get(e, "mode")));
        archive_entry_set_uid(ae, json_integer_value(json_object_get(e, "uid")));
        archive_entry_set_gid(ae, json_integer_value(json_object_get(e, "gid")));
        json_int_t mtime = json_integer_value(json_object_get(e, "mtime"));
        archive_entry_set_mtime(ae, (time_t)(mtime / 1000), (long)(mtime % 1000) * 1000000L);
        if (is_file) {
            archive_entry_set_filetype(ae, AE_IFREG);
            archive_entry_set_size(ae, size);
        } else if (strcmp(type, "dir") == 0) {
            archive_entry_set_filetype(ae, AE_IFDIR);
        } else {
            archive_entry_set_filetype(ae, AE_IFLNK);
            if (fb_wire_get_bytes(e, "linkname", link, sizeof link) < 0)
                link[0] = '\0';
            archive_entry_set_symlink(ae, link);
        }
        if (archive_write_header(a, ae) < ARCHIVE_WARN)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "tar header for %s: %s", name,
                                archive_error_string(a));
        if (!is_file)
            continue;
        for (;;) {
            struct fb_frame d;
            if (fb_initconn_recv(fd, &d, err) < 0)
                return -1;
            uint16_t t = d.type;
            if (t == FB_MSG_DATA && d.len > 0 && archive_write_data(a, d.data, d.len) < 0) {
                free(d.data);
                return fb_error_set(err, FB_ERR_INTERNAL, 0, "write tar: %s", archive_error_string(a));
            }
            free(d.data);
            if (t == FB_MSG_END)
                break;
            if (t != FB_MSG_DATA)
                return fb_error_set(err, FB_ERR_INTERNAL, EPROTO, "unexpected frame from sandbox init");
        }
    }
    if (archive_write_close(a) != ARCHIVE_OK)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "finish tar: %s", archive_error_string(a));
    return 0;
}

static struct archive *open_tar(const char *tar_path, fb_error_t *err)
{
    struct archive *a = archive_read_new();
    if (a == NULL) {
        fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "libarchive");
        return NULL;
    }
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    if (archive_read_open_filename(a, tar_path, 65536) != ARCHIVE_OK) {
        fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "not a tar archive: %s", archive_error_string(a));
        archive_read_free(a);
        return NULL;
    }
    return a;
}

/* Refuses a member that would be written through a symlink created by an
 * earlier member: extraction never follows links, so it would fail half
 * way; refusing it up front keeps a bad archive from changing anything. */
static int through_symlink(json_t *links, const char *full, fb_error_t *err)
{
    if (json_object_size(links) == 0)
        return 0;
    char buf[FB_PATH_MAX + 1];
    snprintf(buf, sizeof buf, "%s", full);
    for (char *slash = strrchr(buf, '/'); slash != NULL && slash != buf; slash = strrchr(buf, '/')) {
        *slash = '\0';
        if (json_object_get(links, buf) != NULL)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "archive member %s would be written through the symlink %s", full, buf);
    }
    return 0;
}

/* One pass over the archive; with fd < 0 it only checks, else it sends
 * every entry to init's batch op. */
static int tar_pass(const char *tar_path, const char *base, int fd, long long max_id, long *count,
                    fb_error_t *err)
{
    cleanup_archive_rd struct archive *a = open_tar(tar_path, err);
    if (a == NULL)
        return -1;
    cleanup_json json_t *links = json_object(); /* symlinks the archive creates */
    *count = 0;
    for (;;) {
        struct archive_entry *ae;
        int r = archive_read_next_header(a, &ae);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "corrupt archive: %s", archive_error_string(a));
        if (++*count > ARCHIVE_ENTRIES_MAX)
            return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "archive has more than %d entries",
                                ARCHIVE_ENTRIES_MAX);
        const char *name = archive_entry_pathname(ae);
        struct fb_tar_entry te = {
            .name = name ? name : "",
            .type = fb_tar_type_of(ae),
            .linkname = archive_entry_hardlink(ae) ? archive_entry_hardlink(ae) : archive_entry_symlink(ae),
            .mode = archive_entry_perm(ae),
            .size = (long long)archive_entry_size(ae),
        };
        char full[FB_PATH_MAX + 1];
        if (fb_tar_entry_check(base, &te, full, sizeof full, err) < 0)
            return -1;
        if (max_id >= 0 && (archive_entry_uid(ae) < 0 || archive_entry_uid(ae) > max_id ||
                            archive_entry_gid(ae) < 0 || archive_entry_gid(ae) > max_id))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "archive member %s: owner outside 0..%lld",
                                te.name, max_id);
        if (fd < 0) {
            if (through_symlink(links, full, err) < 0)
                return -1;
            if (te.type == FB_TAR_SYMLINK)
                json_object_set_new(links, full, json_true());
            continue;
        }
        cleanup_json json_t *op = NULL;
        int mode = (int)(te.mode & 07777);
        if (te.type == FB_TAR_DIR) {
            op = fb_initconn_path_req("mkdir", full);
        } else if (te.type == FB_TAR_FILE) {
            op = fb_initconn_path_req("write", full);
        } else if (te.type == FB_TAR_SYMLINK) {
            op = fb_initconn_path_req("symlink", full);
            if (op != NULL && fb_wire_set_bytes(op, "target", te.linkname) < 0)
                fb_json_decrefp(&op);
        } else {
            char src[FB_PATH_MAX + 1];
            if (fb_path_join_member(base, te.linkname, src, sizeof src, err) < 0)
                return -1;
            op = fb_initconn_path_req("link", full);
            if (op != NULL && fb_wire_set_bytes(op, "target", src) < 0)
                fb_json_decrefp(&op);
        }
        if (op != NULL && (te.type == FB_TAR_DIR || te.type == FB_TAR_FILE) &&
            (json_object_set_new(op, "mode", json_integer(mode)) < 0 ||
             json_object_set_new(op, "parents", json_true()) < 0))
            fb_json_decrefp(&op);
        if (op == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "build op");
        if (strcmp(full, base) == 0 && te.type == FB_TAR_DIR)
            continue; /* "./" itself: the target directory exists already */
        if (fb_wire_send_json(fd, FB_MSG_ENTRY, op) < 0)
            return 1; /* init stopped: its RESULT says why */
        if (te.type != FB_TAR_FILE)
            continue;
        char buf[65536];
        for (;;) {
            la_ssize_t n = archive_read_data(a, buf, sizeof buf);
            if (n < 0)
                return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "corrupt archive data: %s",
                                    archive_error_string(a));
            if (n == 0)
                break;
            if (fb_wire_send(fd, FB_MSG_DATA, buf, (size_t)n) < 0)
                return 1;
        }
        if (fb_wire_send(fd, FB_MSG_END, NULL, 0) < 0)
            return 1;
    }
    return 0;
}

int fb_archive_check(const char *tar_path, const char *base, long long max_id, long *count, fb_error_t *err)
{
    return tar_pass(tar_path, base, -1, max_id, count, err);
}

int fb_archive_extract(struct fb_core *core, const char *tenant, const char *id, const char *path,
                       const char *tar_path, json_t **out, fb_error_t *err)
{
    char base[FB_PATH_MAX + 1];
    if (fb_path_normalize(path, base, sizeof base, err) < 0)
        return -1;
    cleanup_handle struct fb_sandbox_handle h = {0};
    if (fb_sandbox_open(core, tenant, id, &h, err) < 0)
        return -1;
    long count = 0;
    if (tar_pass(tar_path, base, -1, -1, &count, err) < 0)
        return -1;
    /* the target directory itself, then the members */
    cleanup_json json_t *mk = fb_initconn_path_req("mkdir", base);
    if (mk == NULL || json_object_set_new(mk, "mode", json_integer(0755)) < 0 ||
        json_object_set_new(mk, "parents", json_true()) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "build request");
    if (strcmp(base, "/") != 0 && fb_initconn_call(h.sock_path, mk, NULL, err) < 0)
        return fb_error_wrap(err, "%s", base);
    cleanup_close int fd = fb_initconn_open(h.sock_path, err);
    cleanup_json json_t *req = fb_initconn_path_req("batch", base);
    if (fd < 0 || fb_initconn_send(fd, req, err) < 0)
        return -1;
    int r = tar_pass(tar_path, base, fd, -1, &count, err);
    if (r < 0)
        return -1;
    if (r == 0)
        fb_wire_send(fd, FB_MSG_END, NULL, 0);
    r = fb_initconn_recv_result(fd, NULL, err);
    if (r < 0)
        return -1;
    *out = json_pack("{s:I}", "entries", (json_int_t)count);
    fb_wire_set_bytes(*out, "path", base);
    return 0;
}
