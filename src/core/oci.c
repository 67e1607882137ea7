/* Image archives of a sandbox that podman (or docker) can load: two
 * layers, the template's root filesystem and the sandbox's writable layer,
 * plus an image config with the sandbox's environment and working dir.
 * The template's layer tar is built once per template and kept, with its
 * digest, in STATE_DIR/templates/NAME/ (the digest is also the template's
 * identity in checkpoint exports). */
#include <archive.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../runtime/cgroup.h"
#include "ckptfmt.h"
#include "exec.h"
#include "export.h"
#include "internal.h"
#include "layertar.h"
#include "spec.h"

#define CACHE_TAR "layer.tar"
#define CACHE_ID "layer.tar.id"
#define OCI_MANIFEST_TYPE "application/vnd.oci.image.manifest.v1+json"
#define OCI_CONFIG_TYPE "application/vnd.oci.image.config.v1+json"
#define OCI_LAYER_TYPE "application/vnd.oci.image.layer.v1.tar"

/* one build at a time: two exports of a new template share the result */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

static void wr_freep(struct archive **a)
{
    if (*a)
        archive_write_free(*a);
}
static void row_clearp(struct fb_sandbox_row *r)
{
    fb_sandbox_row_clear(r);
}
#define cleanup_archive_wr __attribute__((cleanup(wr_freep)))
#define cleanup_row __attribute__((cleanup(row_clearp)))

/* What the cache was built from: the rootfs dir itself, a new one (new
 * inode, new ctime) whenever the template is built or imported again. */
static int cache_stamp(const char *rootfs, char *out, size_t len, fb_error_t *err)
{
    struct stat st;
    if (lstat(rootfs, &st) < 0 || !S_ISDIR(st.st_mode))
        return fb_error_sys(err, "stat %s", rootfs);
    return fb_snprintf(out, len, "%ju.%ju.%lld.%ld", (uintmax_t)st.st_dev, (uintmax_t)st.st_ino,
                       (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec) < 0
               ? fb_error_set(err, FB_ERR_INTERNAL, 0, "stamp")
               : 0;
}

static bool cache_valid(const char *idpath, const char *stamp, char digest[80], int64_t *size)
{
    cleanup_free char *text = NULL;
    size_t n = 0;
    if (fb_read_file(idpath, 512, &text, &n) < 0)
        return false;
    char s[128], d[80];
    long long sz;
    if (sscanf(text, "%127s %79s %lld", s, d, &sz) != 3 || strcmp(s, stamp) != 0 ||
        !fb_sha256_hex_valid(d, true))
        return false;
    fb_strlcpy(digest, d, 80);
    *size = sz;
    return true;
}

static int build_cache(const char *rootfs, const char *dir, const char *stamp, char digest[80], int64_t *size,
                       fb_error_t *err)
{
    char tmp[PATH_MAX], tar[PATH_MAX], idp[PATH_MAX];
    if (fb_snprintf(tmp, sizeof tmp, "%s/%s.XXXXXX", dir, CACHE_TAR) < 0 ||
        fb_snprintf(tar, sizeof tar, "%s/%s", dir, CACHE_TAR) < 0 ||
        fb_snprintf(idp, sizeof idp, "%s/%s", dir, CACHE_ID) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "template path");
    cleanup_close int out = mkostemp(tmp, O_CLOEXEC);
    if (out < 0)
        return fb_error_sys(err, "create %s", tmp);
    cleanup_close int in = open(rootfs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    /* the template's files belong to host root, which is root inside */
    struct fb_layer_opts o = {.uid_from = 0, .overlay = false, .max_bytes = FB_CKPT_TAR_MAX};
    char hex[65];
    int64_t t0 = fb_mono_ms();
    int rc = in < 0 ? fb_error_sys(err, "open %s", rootfs) : fb_layer_tar_write(in, &o, out, size, hex, err);
    if (rc == 0 && fsync(out) < 0)
        rc = fb_error_sys(err, "sync %s", tmp);
    if (rc == 0 && rename(tmp, tar) < 0)
        rc = fb_error_sys(err, "rename %s", tmp);
    if (rc < 0) {
        unlink(tmp);
        return -1;
    }
    fb_snprintf(digest, 80, "sha256:%s", hex);
    char line[256];
    int n = snprintf(line, sizeof line, "%s %s %lld\n", stamp, digest, (long long)*size);
    int w = fb_write_file(idp, line, (size_t)n, 0600);
    if (w < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -w, "write %s", idp);
    fb_info("template layer %s built: %lld bytes in %lld ms (%s)", tar, (long long)*size,
            (long long)(fb_mono_ms() - t0), digest);
    return 0;
}

int fb_template_layer(struct fb_core *core, const char *name, char *path, size_t pathlen, char digest[80],
                      int64_t *size, fb_error_t *err)
{
    char rootfs[PATH_MAX], dir[PATH_MAX], idp[PATH_MAX], stamp[128];
    if (fb_template_rootfs(core, name, rootfs, sizeof rootfs, err) < 0)
        return -1;
    if (fb_snprintf(dir, sizeof dir, "%s/templates/%s", core->cfg.state_dir, name) < 0 ||
        fb_snprintf(path, pathlen, "%s/%s", dir, CACHE_TAR) < 0 ||
        fb_snprintf(idp, sizeof idp, "%s/%s", dir, CACHE_ID) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "template path");
    pthread_mutex_lock(&cache_lock);
    int rc = cache_stamp(rootfs, stamp, sizeof stamp, err);
    struct stat st;
    if (rc == 0 && !(cache_valid(idp, stamp, digest, size) && lstat(path, &st) == 0 && S_ISREG(st.st_mode) &&
                     st.st_size == *size))
        rc = build_cache(rootfs, dir, stamp, digest, size, err);
    pthread_mutex_unlock(&cache_lock);
    return rc < 0 ? fb_error_wrap(err, "layer of template %s", name) : 0;
}

/* The sandbox's writable layer into spool, frozen (a paused one already
 * is) and synced, under pause_lock like a checkpoint. */
int fb_sandbox_layer_tar(struct fb_core *core, const char *tenant, const char *id, struct fb_sandbox_row *row,
                         int spool, int64_t *size, char sha[65], fb_error_t *err)
{
    pthread_mutex_lock(&core->pause_lock);
    fb_sandbox_row_clear(row);
    int rc = fb_store_sandbox_get(core->store, tenant, id, row, err);
    if (rc == 0 && strcmp(row->state, "running") != 0 && strcmp(row->state, "paused") != 0)
        rc = fb_error_set(err, strcmp(row->state, "deleting") == 0 ? FB_ERR_NOT_FOUND : FB_ERR_CONFLICT, 0,
                          "sandbox %s is %s", id, row->state);
    bool froze = false;
    if (rc == 0 && strcmp(row->state, "running") == 0 && fb_cgroup_can_freeze(&core->cgroups)) {
        rc = fb_cgroup_freeze(&core->cgroups, row->id, true, err);
        froze = rc == 0;
    }
    if (rc == 0) {
        struct fb_core_paths paths;
        struct fb_container_config cc;
        fb_core_container_config(core, row, "", &paths, &cc);
        char layer[PATH_MAX];
        cleanup_close int lfd = -1, ufd = -1;
        if (fb_snprintf(layer, sizeof layer, "%s/layer", paths.sandbox_dir) < 0 ||
            (lfd = open(layer, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 || syncfs(lfd) < 0 ||
            (ufd = openat(lfd, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
            rc = fb_error_sys(err, "open the layer of %s", id);
        struct fb_layer_opts o = {
            .uid_from = (uid_t)row->uid_base, .overlay = true, .max_bytes = FB_CKPT_TAR_MAX};
        if (rc == 0)
            rc = fb_layer_tar_write(ufd, &o, spool, size, sha, err);
    }
    if (froze) {
        cleanup_error fb_error_t terr = NULL;
        if (fb_cgroup_freeze(&core->cgroups, row->id, false, &terr) < 0)
            fb_warn("sandbox %s: thaw after export: %s", row->id, terr->msg);
    }
    pthread_mutex_unlock(&core->pause_lock);
    return rc;
}

static json_t *image_config(const struct fb_sandbox_row *row, const struct fb_create_spec *spec,
                            const char *tdigest, const char *udigest, const char *created)
{
    json_t *env = fb_exec_build_env(spec->env, NULL);
    char by[256];
    snprintf(by, sizeof by, "forkbox sandbox %s (template %s)", row->id, row->template_name);
    return json_pack("{s:s, s:s, s:s, s:{s:o, s:[s], s:s}, s:{s:s, s:[s,s]}, s:[{s:s, s:s}, {s:s, s:s}]}",
                     "created", created, "architecture", "amd64", "os", "linux", "config", "Env",
                     env ? env : json_array(), "Cmd", "/bin/sh", "WorkingDir", spec->workdir, "rootfs",
                     "type", "layers", "diff_ids", tdigest, udigest, "history", "created", created,
                     "created_by", row->template_name, "created", created, "created_by", by);
}

static int sha_of(const char *text, char out[80])
{
    gnutls_hash_hd_t h;
    unsigned char d[32];
    if (gnutls_hash_init(&h, GNUTLS_DIG_SHA256) < 0)
        return -1;
    gnutls_hash(h, text, strlen(text));
    gnutls_hash_deinit(h, d);
    char *p = out + snprintf(out, 80, "sha256:");
    for (int i = 0; i < 32; i++)
        snprintf(p + 2 * i, 3, "%02x", d[i]);
    return 0;
}

struct blob {
    const char *digest; /* "sha256:<hex>" */
    int fd;             /* or text */
    int64_t size;
    const char *text;
};

static int put_blob(struct archive *a, const char *prefix, const char *suffix, const struct blob *b,
                    int64_t mtime, fb_error_t *err)
{
    char name[256];
    fb_snprintf(name, sizeof name, "%s%s%s", prefix, b->digest + 7, suffix);
    return fb_tar_put(a, name, mtime, b->fd, b->size, b->text, b->text ? strlen(b->text) : 0, err);
}

int fb_sandbox_export_image(struct fb_core *core, const char *tenant, const char *id, const char *format,
                            int out_fd, fb_error_t *err)
{
    bool oci = format == NULL || strcmp(format, "oci") == 0;
    if (!oci && strcmp(format, "docker") != 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "format: must be \"oci\" or \"docker\"");
    cleanup_row struct fb_sandbox_row row = {0};
    if (fb_core_live_row(core, tenant, id, &row, err) < 0)
        return -1;
    char tpath[PATH_MAX], tdigest[80], udigest[80];
    int64_t tsize, usize;
    if (fb_template_layer(core, row.template_name, tpath, sizeof tpath, tdigest, &tsize, err) < 0)
        return -1;
    char spool_path[PATH_MAX];
    if (fb_snprintf(spool_path, sizeof spool_path, "%s/tmp/export.XXXXXX", core->cfg.state_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "spool path");
    cleanup_close int spool = mkostemp(spool_path, O_CLOEXEC);
    if (spool < 0)
        return fb_error_sys(err, "create %s", spool_path);
    unlink(spool_path);
    char hex[65];
    if (fb_sandbox_layer_tar(core, tenant, id, &row, spool, &usize, hex, err) < 0)
        return fb_error_wrap(err, "export sandbox %s", id);
    fb_snprintf(udigest, sizeof udigest, "sha256:%s", hex);

    cleanup_spec struct fb_create_spec spec = {0};
    cleanup_json json_t *sj = json_loads(row.spec_json ? row.spec_json : "{}", 0, NULL);
    if (fb_create_spec_from_json(sj, &spec, err) < 0)
        return -1;
    char created[40], tag[160];
    int64_t now = fb_now_ms();
    fb_time_format(now, created, sizeof created);
    fb_snprintf(tag, sizeof tag, "localhost/forkbox/%s:latest", row.id);
    cleanup_json json_t *cfg = image_config(&row, &spec, tdigest, udigest, created);
    cleanup_free char *cfg_text = cfg ? json_dumps(cfg, JSON_COMPACT) : NULL;
    char cdigest[80];
    if (cfg_text == NULL || sha_of(cfg_text, cdigest) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "image config");
    cleanup_close int tfd = open(tpath, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (tfd < 0)
        return fb_error_sys(err, "open %s", tpath);
    struct blob layers[2] = {{tdigest, tfd, tsize, NULL}, {udigest, spool, usize, NULL}};
    struct blob config = {cdigest, -1, 0, cfg_text};
    cleanup_archive_wr struct archive *a = archive_write_new();
    if (fb_tar_open_fd(a, out_fd, err) < 0)
        return -1;
    int64_t mt = now / 1000;
    if (oci) {
        cleanup_json json_t *man = json_pack(
            "{s:i, s:s, s:{s:s, s:s, s:I}, s:[{s:s, s:s, s:I}, {s:s, s:s, s:I}]}", "schemaVersion", 2,
            "mediaType", OCI_MANIFEST_TYPE, "config", "mediaType", OCI_CONFIG_TYPE, "digest", cdigest, "size",
            (json_int_t)strlen(cfg_text), "layers", "mediaType", OCI_LAYER_TYPE, "digest", tdigest, "size",
            (json_int_t)tsize, "mediaType", OCI_LAYER_TYPE, "digest", udigest, "size", (json_int_t)usize);
        cleanup_free char *man_text = man ? json_dumps(man, JSON_COMPACT) : NULL;
        char mdigest[80];
        if (man_text == NULL || sha_of(man_text, mdigest) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "image manifest");
        cleanup_json json_t *index =
            json_pack("{s:i, s:[{s:s, s:s, s:I, s:{s:s}}]}", "schemaVersion", 2, "manifests", "mediaType",
                      OCI_MANIFEST_TYPE, "digest", mdigest, "size", (json_int_t)strlen(man_text),
                      "annotations", "org.opencontainers.image.ref.name", tag);
        cleanup_free char *index_text = index ? json_dumps(index, JSON_COMPACT) : NULL;
        static const char layout[] = "{\"imageLayoutVersion\":\"1.0.0\"}";
        struct blob mblob = {mdigest, -1, 0, man_text};
        if (index_text == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "image index");
        if (fb_tar_put(a, "oci-layout", mt, -1, 0, layout, strlen(layout), err) < 0 ||
            fb_tar_put(a, "index.json", mt, -1, 0, index_text, strlen(index_text), err) < 0 ||
            put_blob(a, "blobs/sha256/", "", &mblob, mt, err) < 0 ||
            put_blob(a, "blobs/sha256/", "", &config, mt, err) < 0 ||
            put_blob(a, "blobs/sha256/", "", &layers[0], mt, err) < 0 ||
            put_blob(a, "blobs/sha256/", "", &layers[1], mt, err) < 0)
            return -1;
    } else {
        char cname[80], l0[80], l1[80];
        fb_snprintf(cname, sizeof cname, "%s.json", cdigest + 7);
        fb_snprintf(l0, sizeof l0, "%s.tar", tdigest + 7);
        fb_snprintf(l1, sizeof l1, "%s.tar", udigest + 7);
        cleanup_json json_t *man =
            json_pack("[{s:s, s:[s], s:[s,s]}]", "Config", cname, "RepoTags", tag, "Layers", l0, l1);
        cleanup_free char *man_text = man ? json_dumps(man, JSON_COMPACT) : NULL;
        if (man_text == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "image manifest");
        if (put_blob(a, "", ".json", &config, mt, err) < 0 ||
            put_blob(a, "", ".tar", &layers[0], mt, err) < 0 ||
            put_blob(a, "", ".tar", &layers[1], mt, err) < 0 ||
            fb_tar_put(a, "manifest.json", mt, -1, 0, man_text, strlen(man_text), err) < 0)
            return -1;
    }
    if (archive_write_close(a) != ARCHIVE_OK)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "finish tar: %s", archive_error_string(a));
    fb_info("sandbox %s exported as a%s image archive (%s)", id, oci ? "n OCI" : " docker", tag);
    return 0;
}
