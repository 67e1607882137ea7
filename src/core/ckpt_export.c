/* Exports a checkpoint in the format of docs/checkpoint-format.md:
 * manifest.json, rootfs/layer.tar (the writable layer as an OCI layer,
 * owners as the uids inside) and, for memory checkpoints, criu/ verbatim.
 * The manifest comes first and lists every member's size and sha256, so
 * the layer tar is built into a spool before anything is written out. */
#include <archive.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../runtime/disk.h"
#include "ckptfmt.h"
#include "export.h"
#include "layertar.h"
#include "spec.h"

#ifndef FORKBOX_VERSION
#define FORKBOX_VERSION "unknown"
#endif

static void wr_freep(struct archive **a)
{
    if (*a)
        archive_write_free(*a);
}
static void manifest_clearp(struct fb_ckpt_manifest *m)
{
    fb_ckpt_manifest_clear(m);
}
#define cleanup_archive_wr __attribute__((cleanup(wr_freep)))
#define cleanup_manifest __attribute__((cleanup(manifest_clearp)))

/* An unlinked spool file in STATE_DIR/tmp. */
static int spool_open(struct fb_core *core, fb_error_t *err)
{
    char p[PATH_MAX];
    if (fb_snprintf(p, sizeof p, "%s/tmp/export.XXXXXX", core->cfg.state_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "spool path");
    int fd = mkostemp(p, O_CLOEXEC);
    if (fd < 0)
        return fb_error_sys(err, "create %s", p);
    unlink(p);
    return fd;
}

/* The layer tar of the checkpoint in dir: its image is mounted on a
 * private temp dir for the walk (under pause_lock: nothing else mounts or
 * copies it meanwhile).  Read-write on purpose: the copy is the image of a
 * crash at one instant, readable only once its journal is replayed. */
static int layer_tar(struct fb_core *core, const struct fb_checkpoint_row *ck, const char *dir, int spool,
                     int64_t *size, char sha[65], fb_error_t *err)
{
    bool image = strcmp(ck->layer_kind, "image") == 0;
    struct fb_layer_opts o = {.uid_from = (uid_t)ck->uid_base, .overlay = true, .max_bytes = FB_CKPT_TAR_MAX};
    char upper[PATH_MAX], mnt[PATH_MAX] = "", img[PATH_MAX];
    if (!image) {
        if (fb_snprintf(upper, sizeof upper, "%s/layer/upper", dir) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "layer path");
        cleanup_close int fd = open(upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            return fb_error_sys(err, "open %s", upper);
        return fb_layer_tar_write(fd, &o, spool, size, sha, err);
    }
    if (fb_snprintf(mnt, sizeof mnt, "%s/tmp/mnt.XXXXXX", core->cfg.state_dir) < 0 ||
        fb_snprintf(img, sizeof img, "%s/layer.img", dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "layer path");
    if (mkdtemp(mnt) == NULL)
        return fb_error_sys(err, "create %s", mnt);
    int rc = fb_disk_mount(img, mnt, err);
    if (rc == 0) {
        cleanup_close int fd = -1;
        if (fb_snprintf(upper, sizeof upper, "%s/upper", mnt) < 0 ||
            (fd = open(upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
            rc = fb_error_sys(err, "open the upper dir of %s", ck->id);
        else
            rc = fb_layer_tar_write(fd, &o, spool, size, sha, err);
        fb_disk_release(mnt);
    }
    rmdir(mnt);
    return rc;
}

/* Lists criu/NAME members (sorted) with their digests; none without a
 * criu/ dir.  Our own data, but checked as an import would. */
static int add_criu(const char *dir, struct fb_ckpt_manifest *m, fb_error_t *err)
{
    char p[PATH_MAX];
    if (fb_snprintf(p, sizeof p, "%s/criu", dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "criu path");
    cleanup_close int dfd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : fb_error_sys(err, "open %s", p);
    struct dirent **names = NULL;
    int n = scandirat(dfd, ".", &names, NULL, alphasort);
    if (n < 0)
        return fb_error_sys(err, "list %s", p);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const char *name = names[i]->d_name;
        char member[FB_CKPT_MEMBER_NAME_MAX];
        if (rc == 0 && strcmp(name, ".") != 0 && strcmp(name, "..") != 0) {
            struct stat st;
            cleanup_close int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            char sha[65];
            int64_t size;
            if (fb_snprintf(member, sizeof member, "%s%s", FB_CKPT_CRIU_PREFIX, name) < 0 ||
                !fb_ckpt_member_name_valid(member))
                rc = fb_error_set(err, FB_ERR_INTERNAL, 0, "%s/%s: not a name an export may hold", p, name);
            else if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
                rc = fb_error_set(err, FB_ERR_INTERNAL, fd < 0 ? errno : 0, "%s/%s: not a regular file", p,
                                  name);
            else if (fb_sha256_fd(fd, sha, &size, err) < 0 ||
                     fb_ckpt_manifest_add(m, member, size, sha, err) < 0)
                rc = -1;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

static int write_export(const struct fb_ckpt_manifest *m, const char *dir, int layer_fd, int64_t mtime,
                        int out_fd, fb_error_t *err)
{
    cleanup_json json_t *j = fb_ckpt_manifest_to_json(m);
    cleanup_free char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_ENSURE_ASCII) : NULL;
    if (text == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "manifest");
    cleanup_archive_wr struct archive *a = archive_write_new();
    if (fb_tar_open_fd(a, out_fd, err) < 0 ||
        fb_tar_put(a, FB_CKPT_MANIFEST_NAME, mtime, -1, 0, text, strlen(text), err) < 0)
        return -1;
    for (size_t i = 0; i < m->n_members; i++) {
        const struct fb_ckpt_member *e = &m->members[i];
        if (strcmp(e->name, FB_CKPT_LAYER_NAME) == 0) {
            if (fb_tar_put(a, e->name, mtime, layer_fd, e->size, NULL, 0, err) < 0)
                return -1;
            continue;
        }
        char p[PATH_MAX];
        if (fb_snprintf(p, sizeof p, "%s/%s", dir, e->name) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "member path");
        cleanup_close int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            return fb_error_sys(err, "open %s", p);
        if (fb_tar_put(a, e->name, mtime, fd, e->size, NULL, 0, err) < 0)
            return -1;
    }
    if (archive_write_close(a) != ARCHIVE_OK)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "finish tar: %s", archive_error_string(a));
    return 0;
}

int fb_checkpoint_export(struct fb_core *core, const char *tenant, const char *cid, int out_fd,
                         fb_error_t *err)
{
    struct fb_checkpoint_row ck;
    if (!fb_checkpoint_id_valid(cid))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "checkpoint not found");
    if (fb_store_checkpoint_get(core->store, tenant, cid, &ck, err) < 0)
        return -1;
    cleanup_manifest struct fb_ckpt_manifest m = {0};
    char tpath[PATH_MAX];
    int64_t tsize;
    {
        cleanup_error fb_error_t terr = NULL;
        if (fb_template_layer(core, ck.template_name, tpath, sizeof tpath, m.template_digest, &tsize, &terr) <
            0)
            return terr->kind == FB_ERR_NOT_FOUND
                       ? fb_error_set(
                             err, FB_ERR_CONFLICT, 0,
                             "checkpoint %s: its template %s is gone, and an export names its digest", cid,
                             ck.template_name)
                       : fb_error_set(err, terr->kind, terr->errno_value, "checkpoint %s: %s", cid,
                                      terr->msg);
    }
    char dir[PATH_MAX];
    if (fb_snprintf(dir, sizeof dir, "%s/checkpoints/%s", core->cfg.state_dir, cid) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "checkpoint path");
    cleanup_close int spool = spool_open(core, err);
    if (spool < 0)
        return -1;
    int64_t lsize = 0;
    char lsha[65];
    pthread_mutex_lock(&core->pause_lock);
    /* deleted while we waited for the lock? */
    int rc = fb_store_checkpoint_get(core->store, tenant, cid, &ck, err);
    if (rc == 0)
        rc = layer_tar(core, &ck, dir, spool, &lsize, lsha, err);
    pthread_mutex_unlock(&core->pause_lock);
    if (rc < 0)
        return fb_error_wrap(err, "export checkpoint %s", cid);

    m.version = FB_CKPT_FORMAT_VERSION;
    fb_strlcpy(m.forkbox_version, FORKBOX_VERSION, sizeof m.forkbox_version);
    fb_strlcpy(m.id, ck.id, sizeof m.id);
    fb_strlcpy(m.name, ck.name, sizeof m.name);
    fb_strlcpy(m.parent, ck.parent, sizeof m.parent);
    fb_time_format(ck.created_ms, m.created_at, sizeof m.created_at);
    fb_strlcpy(m.template_name, ck.template_name, sizeof m.template_name);
    fb_strlcpy(m.layer_kind, ck.layer_kind, sizeof m.layer_kind);
    m.uid_base = ck.uid_base;
    if (strcmp(ck.layer_kind, "image") == 0) {
        char img[PATH_MAX];
        struct stat st;
        if (fb_snprintf(img, sizeof img, "%s/layer.img", dir) < 0 || lstat(img, &st) < 0)
            return fb_error_sys(err, "checkpoint %s: image", cid);
        m.disk_bytes = st.st_size;
    }
    if (fb_ckpt_manifest_add(&m, FB_CKPT_LAYER_NAME, lsize, lsha, err) < 0 || add_criu(dir, &m, err) < 0)
        return fb_error_wrap(err, "export checkpoint %s", cid);
    m.memory = m.n_members > 1;
    if (ck.memory && !m.memory)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "checkpoint %s: memory checkpoint without CRIU images",
                            cid);
    if (write_export(&m, dir, spool, ck.created_ms / 1000, out_fd, err) < 0)
        return fb_error_wrap(err, "export checkpoint %s", cid);
    fb_info("checkpoint %s exported (layer %lld bytes, %zu CRIU images)", cid, (long long)lsize,
            m.n_members - 1);
    return 0;
}
