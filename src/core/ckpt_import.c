/* Imports a checkpoint export (docs/checkpoint-format.md) as a new
 * checkpoint of the importing tenant.  The upload is hostile: every member
 * is bounded, listed in the manifest and checked against its sha256 as it
 * is copied out; the layer tar is checked whole before it is unpacked in
 * a child chrooted into the new layer.  Everything is built in a tmp. dir
 * next to the checkpoints and renamed into place when complete, as a
 * checkpoint being taken is, so a failure (or a crash) leaves nothing. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../runtime/copy.h"
#include "../runtime/disk.h"
#include "ckptfmt.h"
#include "internal.h"
#include "export.h"
#include "layertar.h"
#include "spec.h"

#define LAYER_PART "layer.tar.part"
#define SPACE_MARGIN (16ll << 20)

static void rd_freep(struct archive **a)
{
    if (*a)
        archive_read_free(*a);
}
static void manifest_clearp(struct fb_ckpt_manifest *m)
{
    fb_ckpt_manifest_clear(m);
}
#define cleanup_archive_rd __attribute__((cleanup(rd_freep)))
#define cleanup_manifest __attribute__((cleanup(manifest_clearp)))

static void clean_name(const char *in, char *out, size_t len)
{
    while (in[0] == '.' && in[1] == '/')
        in += 2;
    fb_strlcpy(out, in, len);
}

static int read_manifest(struct archive *a, struct fb_ckpt_manifest *m, fb_error_t *err)
{
    struct archive_entry *ae;
    int r = archive_read_next_header(a, &ae);
    if (r < ARCHIVE_WARN || r == ARCHIVE_EOF)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "not a checkpoint export: %s",
                            r == ARCHIVE_EOF ? "empty archive" : archive_error_string(a));
    char name[FB_CKPT_MEMBER_NAME_MAX];
    clean_name(archive_entry_pathname(ae) ? archive_entry_pathname(ae) : "", name, sizeof name);
    if (strcmp(name, FB_CKPT_MANIFEST_NAME) != 0 || archive_entry_filetype(ae) != AE_IFREG)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                            "not a checkpoint export: the first member must be %s", FB_CKPT_MANIFEST_NAME);
    int64_t size = archive_entry_size(ae);
    if (size <= 0 || size > FB_CKPT_MANIFEST_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: size must be 1..%d bytes", FB_CKPT_MANIFEST_NAME,
                            FB_CKPT_MANIFEST_MAX);
    cleanup_free char *text = malloc((size_t)size);
    if (text == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "manifest");
    int64_t got = 0;
    while (got < size) {
        la_ssize_t n = archive_read_data(a, text + got, (size_t)(size - got));
        if (n <= 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: truncated or corrupt: %s",
                                FB_CKPT_MANIFEST_NAME, n < 0 ? archive_error_string(a) : "short");
        got += n;
    }
    return fb_ckpt_manifest_parse(text, (size_t)size, m, err);
}

/* Copies the data of the current member to fd, checking size and sha256. */
static int copy_member(struct archive *a, const struct fb_ckpt_member *e, int fd, fb_error_t *err)
{
    gnutls_hash_hd_t h;
    if (gnutls_hash_init(&h, GNUTLS_DIG_SHA256) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "sha256");
    cleanup_free char *buf = malloc(1 << 16);
    int64_t total = 0;
    int rc = buf ? 0 : fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "buffer");
    while (rc == 0) {
        la_ssize_t n = archive_read_data(a, buf, 1 << 16);
        if (n < 0) {
            rc = fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "member %s: truncated or corrupt: %s", e->name,
                              archive_error_string(a));
            break;
        }
        if (n == 0)
            break;
        total += n;
        if (total > e->size) {
            rc =
                fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "member %s: larger than the manifest says", e->name);
            break;
        }
        gnutls_hash(h, buf, (size_t)n);
        int w = fb_write_all(fd, buf, (size_t)n);
        if (w < 0)
            rc = fb_error_set(err, w == -ENOSPC ? FB_ERR_TOO_LARGE : FB_ERR_INTERNAL, -w, "write member %s",
                              e->name);
    }
    unsigned char d[32];
    gnutls_hash_deinit(h, d);
    if (rc < 0)
        return -1;
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    if (total != e->size)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "member %s: %lld bytes, the manifest says %lld",
                            e->name, (long long)total, (long long)e->size);
    if (strcmp(hex, e->sha256) != 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "member %s: sha256 does not match the manifest",
                            e->name);
    return 0;
}

/* Every member after the manifest, each into tmp: the layer tar as
 * LAYER_PART, CRIU images into criu/. */
static int read_members(struct archive *a, const struct fb_ckpt_manifest *m, const char *tmp, fb_error_t *err)
{
    cleanup_free bool *seen = calloc(m->n_members, sizeof *seen);
    if (seen == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "members");
    cleanup_close int criu_fd = -1;
    for (;;) {
        struct archive_entry *ae;
        int r = archive_read_next_header(a, &ae);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "truncated or corrupt export: %s",
                                archive_error_string(a));
        char name[FB_CKPT_MEMBER_NAME_MAX + 1];
        const char *raw = archive_entry_pathname(ae);
        if (raw == NULL || strlen(raw) >= sizeof name)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "export member without a name or with one too long");
        clean_name(raw, name, sizeof name);
        /* directories of the layout, as tar(1) adds them when repacking */
        if (archive_entry_filetype(ae) == AE_IFDIR &&
            (strcmp(name, "rootfs/") == 0 || strcmp(name, "criu/") == 0 || strcmp(name, "rootfs") == 0 ||
             strcmp(name, "criu") == 0))
            continue;
        if (strcmp(name, FB_CKPT_MANIFEST_NAME) == 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "export holds a second %s",
                                FB_CKPT_MANIFEST_NAME);
        const struct fb_ckpt_member *e = fb_ckpt_manifest_find(m, name);
        if (e == NULL)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "export member \"%.96s\" is not in the manifest",
                                name);
        size_t idx = (size_t)(e - m->members);
        if (seen[idx])
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "export member %s appears twice", name);
        seen[idx] = true;
        if (archive_entry_filetype(ae) != AE_IFREG || archive_entry_hardlink(ae) != NULL)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "export member %s must be a regular file", name);
        if (archive_entry_size(ae) != e->size)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "member %s: %lld bytes, the manifest says %lld",
                                name, (long long)archive_entry_size(ae), (long long)e->size);
        char p[PATH_MAX];
        cleanup_close int fd = -1;
        if (strcmp(name, FB_CKPT_LAYER_NAME) == 0) {
            if (fb_snprintf(p, sizeof p, "%s/%s", tmp, LAYER_PART) < 0)
                return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "member path");
            fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        } else {
            if (criu_fd < 0) {
                if (fb_snprintf(p, sizeof p, "%s/criu", tmp) < 0 || mkdir(p, 0700) < 0 ||
                    (criu_fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
                    return fb_error_sys(err, "create %s/criu", tmp);
            }
            /* names were checked: one component of [A-Za-z0-9._-] */
            fd = openat(criu_fd, name + strlen(FB_CKPT_CRIU_PREFIX),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        }
        if (fd < 0)
            return fb_error_sys(err, "create the copy of %s", name);
        if (copy_member(a, e, fd, err) < 0)
            return -1;
        if (fsync(fd) < 0)
            return fb_error_sys(err, "sync the copy of %s", name);
    }
    for (size_t i = 0; i < m->n_members; i++)
        if (!seen[i])
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "export member %s is missing (truncated export?)",
                                m->members[i].name);
    return 0;
}

/* The template must be here and hold the same files as where the export
 * was made: the layer only makes sense over it. */
static int check_template(struct fb_core *core, const struct fb_ckpt_manifest *m, fb_error_t *err)
{
    char rootfs[PATH_MAX], path[PATH_MAX], digest[80];
    int64_t size;
    cleanup_error fb_error_t terr = NULL;
    if (fb_template_rootfs(core, m->template_name, rootfs, sizeof rootfs, &terr) < 0)
        return terr->kind == FB_ERR_UNAVAILABLE
                   ? fb_error_set(err, FB_ERR_UNAVAILABLE, 0, "%s", terr->msg)
                   : fb_error_set(err, FB_ERR_CONFLICT, 0,
                                  "the export's template %s does not exist on this host", m->template_name);
    if (fb_template_layer(core, m->template_name, path, sizeof path, digest, &size, err) < 0)
        return -1;
    if (strcmp(digest, m->template_digest) != 0)
        return fb_error_set(err, FB_ERR_CONFLICT, 0,
                            "template %s on this host (%s) is not the one the export was made on (%s)",
                            m->template_name, digest, m->template_digest);
    return 0;
}

static int check_space(const char *dir, int64_t need, fb_error_t *err)
{
    struct statvfs vfs;
    if (statvfs(dir, &vfs) < 0)
        return fb_error_sys(err, "statvfs %s", dir);
    long long avail = (long long)vfs.f_bavail * (long long)vfs.f_frsize;
    if ((long long)need + SPACE_MARGIN > avail)
        return fb_error_set(
            err, FB_ERR_TOO_LARGE, ENOSPC,
            "not enough space on the host's state filesystem: the import needs %lld bytes, %lld "
            "are available",
            (long long)need, avail);
    return 0;
}

/* upper/ (the sandbox's "/", owned by its root) and work/ in layer_dir. */
static int make_layer_dirs(const char *layer_dir, char *upper, size_t len, fb_error_t *err)
{
    char work[PATH_MAX];
    if (fb_snprintf(upper, len, "%s/upper", layer_dir) < 0 ||
        fb_snprintf(work, sizeof work, "%s/work", layer_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "layer path");
    if (mkdir(upper, 0755) < 0 || chown(upper, FB_IMPORT_UID_BASE, FB_IMPORT_UID_BASE) < 0 ||
        chmod(upper, 0755) < 0 || mkdir(work, 0700) < 0)
        return fb_error_sys(err, "create %s", upper);
    return 0;
}

/* A memory checkpoint's keepers' records travel as criu/forkbox-record.
 * PID.NAME (the layer tar holds only the sandbox's own files): they go
 * back to procs/PID/NAME beside upper/ in the new layer, where a restore
 * finds them.  Any other forkbox-record.* name is refused. */
static int place_records(const char *tmp, const char *layer_root, fb_error_t *err)
{
    char p[PATH_MAX];
    if (fb_snprintf(p, sizeof p, "%s/criu", tmp) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "criu path");
    cleanup_close int src = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (src < 0)
        return errno == ENOENT ? 0 : fb_error_sys(err, "open %s", p);
    cleanup_close int root = open(layer_root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root < 0)
        return fb_error_sys(err, "open %s", layer_root);
    cleanup_dir DIR *d = fdopendir(dup(src));
    if (d == NULL)
        return fb_error_sys(err, "list %s", p);
    cleanup_close int procs = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        size_t pl = strlen(FB_RECORD_PREFIX);
        if (strncmp(n, FB_RECORD_PREFIX, pl) != 0)
            continue;
        const char *pid = n + pl;
        size_t digits = strspn(pid, "0123456789");
        const char *leaf = pid + digits + 1;
        if (digits == 0 || digits > 10 || pid[digits] != '.' ||
            (strcmp(leaf, "meta.json") != 0 && strcmp(leaf, "out") != 0 && strcmp(leaf, "idx") != 0 &&
             strcmp(leaf, "status") != 0))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "export member criu/%.96s: not a record name", n);
        char dir[16];
        snprintf(dir, sizeof dir, "%.*s", (int)digits, pid);
        if (procs < 0) {
            if (mkdirat(root, "procs", 0700) < 0 && errno != EEXIST)
                return fb_error_sys(err, "create procs in the imported layer");
            procs = openat(root, "procs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (procs < 0)
                return fb_error_sys(err, "open procs in the imported layer");
        }
        if (mkdirat(procs, dir, 0700) < 0 && errno != EEXIST)
            return fb_error_sys(err, "create record %s", dir);
        cleanup_close int rd = openat(procs, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        cleanup_close int in = openat(src, n, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        cleanup_close int out =
            rd < 0 ? -1 : openat(rd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (in < 0 || out < 0)
            return fb_error_sys(err, "restore record %s/%s", dir, leaf);
        if (fb_copy_sparse(in, out, err) < 0)
            return -1;
    }
    return 0;
}

/* Builds the layer from LAYER_PART: an ext4 image of the manifest's size
 * when this host's sandboxes have images, else a directory tree. */
static int build_layer(struct fb_core *core, const struct fb_ckpt_manifest *m, const char *tmp,
                       fb_error_t *err)
{
    char part[PATH_MAX], upper[PATH_MAX], layer[PATH_MAX];
    if (fb_snprintf(part, sizeof part, "%s/%s", tmp, LAYER_PART) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "layer path");
    if (!core->disk_limits) {
        if (fb_snprintf(layer, sizeof layer, "%s/layer", tmp) < 0 || mkdir(layer, 0700) < 0)
            return fb_error_sys(err, "create the layer dir");
        if (make_layer_dirs(layer, upper, sizeof upper, err) < 0 ||
            fb_layer_tar_extract(part, upper, FB_IMPORT_UID_BASE, err) < 0)
            return -1;
        return place_records(tmp, layer, err);
    }
    char img[PATH_MAX], mnt[PATH_MAX];
    uint64_t bytes = m->disk_bytes > 0 ? (uint64_t)m->disk_bytes : (uint64_t)FB_SPEC_DEFAULT_DISK_MB << 20;
    /* the mount point sits in tmp: removing a left-over tmp. dir never
     * crosses into a mount (fb_rm_rf stays on one filesystem) */
    if (fb_snprintf(img, sizeof img, "%s/layer.img", tmp) < 0 ||
        fb_snprintf(mnt, sizeof mnt, "%s/mnt", tmp) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "layer path");
    if (mkdir(mnt, 0700) < 0)
        return fb_error_sys(err, "create %s", mnt);
    int rc = fb_disk_create(img, mnt, bytes, err);
    if (rc < 0) {
        rmdir(mnt);
        return -1;
    }
    rc = make_layer_dirs(mnt, upper, sizeof upper, err);
    if (rc == 0)
        rc = fb_layer_tar_extract(part, upper, FB_IMPORT_UID_BASE, err);
    if (rc == 0)
        rc = place_records(tmp, mnt, err);
    if (rc == 0) {
        cleanup_close int fd = open(mnt, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || syncfs(fd) < 0)
            rc = fb_error_sys(err, "sync the imported layer");
    }
    fb_disk_release(mnt);
    if (rmdir(mnt) < 0 && rc == 0)
        rc = fb_error_sys(err, "remove %s", mnt);
    return rc;
}

/* Everything but the row, into tmp. */
static int import_into(struct fb_core *core, const char *tar_path, const char *tmp,
                       struct fb_ckpt_manifest *m, fb_error_t *err)
{
    cleanup_archive_rd struct archive *a = archive_read_new();
    if (a == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "libarchive");
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_zstd(a);
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    if (archive_read_open_filename(a, tar_path, 65536) != ARCHIVE_OK)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "not a tar archive: %s", archive_error_string(a));
    if (read_manifest(a, m, err) < 0 || check_template(core, m, err) < 0)
        return -1;
    int64_t need = 0;
    for (size_t i = 0; i < m->n_members; i++)
        need += m->members[i].size * (strcmp(m->members[i].name, FB_CKPT_LAYER_NAME) == 0 ? 2 : 1);
    if (check_space(tmp, need, err) < 0 || read_members(a, m, tmp, err) < 0 ||
        build_layer(core, m, tmp, err) < 0)
        return -1;
    char part[PATH_MAX];
    if (fb_snprintf(part, sizeof part, "%s/%s", tmp, LAYER_PART) < 0 || unlink(part) < 0)
        return fb_error_sys(err, "remove the layer tar");
    return 0;
}

int fb_checkpoint_import(struct fb_core *core, const char *tenant, const char *tar_path, json_t **out,
                         fb_error_t *err)
{
    char base[PATH_MAX], tmp[PATH_MAX], final[PATH_MAX];
    struct fb_checkpoint_row ck = {0};
    char hex[17];
    if (fb_random_hex(hex, 8) < 0)
        return fb_error_sys(err, "random id");
    snprintf(ck.id, sizeof ck.id, "ckpt_%s", hex);
    if (fb_snprintf(base, sizeof base, "%s/checkpoints", core->cfg.state_dir) < 0 ||
        fb_snprintf(tmp, sizeof tmp, "%s/tmp.XXXXXX", base) < 0 ||
        fb_snprintf(final, sizeof final, "%s/%s", base, ck.id) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "checkpoint path");
    int r = fb_mkdir_p(base, 0700);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "create %s", base);
    if (mkdtemp(tmp) == NULL)
        return fb_error_sys(err, "create %s", tmp);
    cleanup_manifest struct fb_ckpt_manifest m = {0};
    if (import_into(core, tar_path, tmp, &m, err) < 0) {
        fb_rm_rf(tmp);
        return fb_error_wrap(err, "import checkpoint");
    }
    int64_t used = fb_du(tmp);
    fb_strlcpy(ck.tenant, tenant, sizeof ck.tenant);
    fb_strlcpy(ck.name, m.name, sizeof ck.name);
    fb_strlcpy(ck.template_name, m.template_name, sizeof ck.template_name);
    fb_strlcpy(ck.layer_kind, core->disk_limits ? "image" : "dir", sizeof ck.layer_kind);
    ck.uid_base = FB_IMPORT_UID_BASE;
    ck.size_bytes = used > 0 ? used : 0;
    ck.created_ms = fb_now_ms();
    ck.memory = m.memory;
    if (rename(tmp, final) < 0) {
        fb_error_sys(err, "rename %s", tmp);
        fb_rm_rf(tmp);
        return -1;
    }
    if (fb_store_checkpoint_insert(core->store, &ck, err) < 0) {
        fb_rm_rf(final);
        return -1;
    }
    fb_info("checkpoint %s imported from export of %s (tenant %s, %s, %lld bytes)", ck.id, m.id, tenant,
            ck.layer_kind, (long long)ck.size_bytes);
    return fb_checkpoint_get(core, tenant, ck.id, out, err);
}
