/* Importing OCI layouts and docker-archives: the outer archive's members
 * are staged under numbered names (never under their own), every blob is
 * checked against the digest that names it, and each layer goes to the
 * layer store once. */
#include "image.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/util.h"
#include "core.h"
#include "layers.h"
#include "layertar.h"
#include "spec.h"

#define MEMBERS_MAX 65536
#define MEMBER_NAME_MAX 1024
#define JSON_BLOB_MAX (4 << 20)
#define CONFIG_STRING_MAX 4096

struct stage {
    char dir[PATH_MAX];
    int dir_fd;
    json_t *members; /* name -> {"file": staged name} or {"alias": name} */
};

static void rd_freep(struct archive **a)
{
    if (*a)
        archive_read_free(*a);
}
#define cleanup_archive_rd __attribute__((cleanup(rd_freep)))

void fb_image_clear(struct fb_image *img)
{
    json_decref(img->layers);
    json_decref(img->config);
    json_decref(img->fresh);
    img->layers = img->config = img->fresh = NULL;
}

static struct archive *open_outer(const char *path, fb_error_t *err)
{
    struct archive *a = archive_read_new();
    if (a == NULL) {
        fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "libarchive");
        return NULL;
    }
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    if (archive_read_open_filename(a, path, 1 << 16) != ARCHIVE_OK) {
        fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "not a tar archive: %s", archive_error_string(a));
        archive_read_free(a);
        return NULL;
    }
    return a;
}

/* "./a//b/" -> "a/b"; false for names that climb or are too long. */
static bool member_name(const char *raw, char *out, size_t len)
{
    if (raw == NULL || strlen(raw) >= len || strlen(raw) >= MEMBER_NAME_MAX)
        return false;
    size_t o = 0;
    const char *p = raw;
    while (*p) {
        while (*p == '/')
            p++;
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == 0)
            break;
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return false;
        if (!(n == 1 && p[0] == '.')) {
            if (o > 0)
                out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p += n;
    }
    out[o] = '\0';
    return o > 0;
}

int fb_image_detect(const char *path, enum fb_image_format *fmt, fb_error_t *err)
{
    *fmt = FB_IMAGE_NONE;
    cleanup_archive_rd struct archive *a = open_outer(path, err);
    if (a == NULL)
        return -1;
    bool manifest = false, index = false, layout = false;
    for (long n = 0; n < MEMBERS_MAX; n++) {
        struct archive_entry *ae;
        int r = archive_read_next_header(a, &ae);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "corrupt archive: %s", archive_error_string(a));
        char name[MEMBER_NAME_MAX];
        if (!member_name(archive_entry_pathname(ae), name, sizeof name))
            continue;
        manifest |= strcmp(name, "manifest.json") == 0;
        index |= strcmp(name, "index.json") == 0;
        layout |= strcmp(name, "oci-layout") == 0;
        /* a root filesystem has /etc early on; an image archive never does */
        if (strcmp(name, "etc") == 0 || strncmp(name, "etc/", 4) == 0 || strcmp(name, "usr") == 0)
            break;
    }
    if (manifest)
        *fmt = FB_IMAGE_DOCKER;
    else if (index && layout)
        *fmt = FB_IMAGE_OCI;
    return 0;
}

/* ---- staging ------------------------------------------------------------ */

static void stage_close(struct stage *s)
{
    if (s->dir_fd >= 0)
        close(s->dir_fd);
    if (s->dir[0])
        fb_rm_rf(s->dir);
    json_decref(s->members);
    memset(s, 0, sizeof *s);
    s->dir_fd = -1;
}

static int copy_member(struct archive *a, int fd, const char *name, fb_error_t *err)
{
    cleanup_free char *buf = malloc(1 << 16);
    if (buf == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "buffer");
    for (;;) {
        la_ssize_t n = archive_read_data(a, buf, 1 << 16);
        if (n == 0)
            return 0;
        if (n < 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "corrupt or truncated archive at %.200s: %s",
                                name, archive_error_string(a));
        int r = fb_write_all(fd, buf, (size_t)n);
        if (r < 0)
            return fb_error_set(err, r == -ENOSPC ? FB_ERR_TOO_LARGE : FB_ERR_INTERNAL, -r, "stage %.200s",
                                name);
    }
}

static int stage_open(struct fb_core *core, const char *path, struct stage *s, fb_error_t *err)
{
    memset(s, 0, sizeof *s);
    s->dir_fd = -1;
    char rnd[17];
    if (fb_random_hex(rnd, 8) < 0 ||
        fb_snprintf(s->dir, sizeof s->dir, "%s/layers/.partial-stage-%s", core->cfg.state_dir, rnd) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "stage path");
    int r = fb_mkdir_p(s->dir, 0700);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "create %s", s->dir);
    s->dir_fd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    s->members = json_object();
    if (s->dir_fd < 0 || s->members == NULL)
        return fb_error_sys(err, "open %s", s->dir);
    cleanup_archive_rd struct archive *a = open_outer(path, err);
    if (a == NULL)
        return -1;
    for (long n = 0;; n++) {
        struct archive_entry *ae;
        int rr = archive_read_next_header(a, &ae);
        if (rr == ARCHIVE_EOF)
            return 0;
        if (rr < ARCHIVE_WARN)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "corrupt or truncated archive: %s",
                                archive_error_string(a));
        if (n >= MEMBERS_MAX)
            return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "archive has more than %d members", MEMBERS_MAX);
        char name[MEMBER_NAME_MAX], target[MEMBER_NAME_MAX];
        if (!member_name(archive_entry_pathname(ae), name, sizeof name))
            continue;
        mode_t type = archive_entry_filetype(ae);
        const char *hl = archive_entry_hardlink(ae);
        if (hl != NULL || type == AE_IFLNK) {
            /* docker save links repeated layers; resolved by name, inside the archive only */
            const char *t = hl ? hl : archive_entry_symlink(ae);
            char joined[2 * MEMBER_NAME_MAX];
            const char *slash = strrchr(name, '/');
            if (t == NULL || t[0] == '/')
                continue;
            if (hl == NULL && slash != NULL)
                snprintf(joined, sizeof joined, "%.*s/%s", (int)(slash - name), name, t);
            else
                snprintf(joined, sizeof joined, "%s", t);
            if (member_name(joined, target, sizeof target))
                json_object_set_new(s->members, name, json_pack("{s:s}", "alias", target));
            continue;
        }
        if (type != AE_IFREG)
            continue;
        char file[32];
        snprintf(file, sizeof file, "m%ld", n);
        cleanup_close int fd = openat(s->dir_fd, file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
            return fb_error_sys(err, "stage %s", file);
        if (copy_member(a, fd, name, err) < 0)
            return -1;
        json_object_set_new(s->members, name, json_pack("{s:s}", "file", file));
    }
}

/* The staged path of member name (aliases followed a few times), or -1. */
static int stage_path(const struct stage *s, const char *name, char *out, size_t len)
{
    for (int hops = 0; hops < 8; hops++) {
        json_t *m = json_object_get(s->members, name);
        if (m == NULL)
            return -1;
        const char *alias = json_string_value(json_object_get(m, "alias"));
        if (alias == NULL)
            return fb_snprintf(out, len, "%s/%s", s->dir, json_string_value(json_object_get(m, "file")));
        name = alias;
    }
    return -1;
}

static json_t *stage_json(const struct stage *s, const char *name, fb_error_t *err)
{
    char path[PATH_MAX];
    if (stage_path(s, name, path, sizeof path) < 0) {
        fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "the archive has no %.200s", name);
        return NULL;
    }
    char *text = NULL;
    size_t len = 0;
    int r = fb_read_file(path, JSON_BLOB_MAX, &text, &len);
    if (r < 0) {
        fb_error_set(err, r == -EFBIG ? FB_ERR_TOO_LARGE : FB_ERR_INTERNAL, -r, "read %.200s", name);
        return NULL;
    }
    json_error_t je;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (j == NULL)
        fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%.200s is not valid JSON: %s", name, je.text);
    return j;
}

/* ---- digests ------------------------------------------------------------ */

static int file_digest(const char *path, char out[FB_LAYER_DIGEST_MAX], int64_t *size, fb_error_t *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return fb_error_sys(err, "open %s", path);
    char hex[65];
    if (fb_sha256_fd(fd, hex, size, err) < 0)
        return -1;
    snprintf(out, FB_LAYER_DIGEST_MAX, "sha256:%s", hex);
    return 0;
}

/* Checks the staged member against a descriptor's digest (and size, when
 * the descriptor has one). */
static int verify_blob(const char *path, const char *what, const char *digest, json_int_t size,
                       fb_error_t *err)
{
    char got[FB_LAYER_DIGEST_MAX];
    int64_t n;
    if (file_digest(path, got, &n, err) < 0)
        return -1;
    if (strcmp(got, digest) != 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                            "%s: digest mismatch: the manifest says %.80s, the blob is %s", what, digest,
                            got);
    if (size >= 0 && n != size)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: the manifest says %lld bytes, the blob has %lld",
                            what, (long long)size, (long long)n);
    return 0;
}

/* An uncompressed copy of a (maybe gzip/zstd/xz/bzip2) layer blob at
 * out; same path back when it was not compressed. */
static int layer_plain(const char *blob, const char *out, const char **use, fb_error_t *err)
{
    unsigned char magic[6] = {0};
    {
        cleanup_close int fd = open(blob, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || read(fd, magic, sizeof magic) < 0)
            return fb_error_sys(err, "read %s", blob);
    }
    bool compressed = (magic[0] == 0x1f && magic[1] == 0x8b) ||
                      (magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd) ||
                      (magic[0] == 0xfd && memcmp(magic + 1, "7zXZ", 4) == 0) || memcmp(magic, "BZh", 3) == 0;
    if (!compressed) {
        *use = blob;
        return 0;
    }
    cleanup_archive_rd struct archive *a = archive_read_new();
    if (a == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "libarchive");
    archive_read_support_filter_all(a);
    archive_read_support_format_raw(a);
    struct archive_entry *ae;
    if (archive_read_open_filename(a, blob, 1 << 16) != ARCHIVE_OK ||
        archive_read_next_header(a, &ae) != ARCHIVE_OK)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "layer is not a readable compressed stream: %s",
                            archive_error_string(a));
    cleanup_close int fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return fb_error_sys(err, "create %s", out);
    if (copy_member(a, fd, "a compressed layer", err) < 0)
        return -1;
    *use = out;
    return 0;
}

/* ---- config ------------------------------------------------------------- */

static int string_array(json_t *v, const char *what, size_t max, json_t **out, fb_error_t *err)
{
    *out = NULL;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_array(v) || json_array_size(v) > max)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                            "image config %s: not an array of at most %zu strings", what, max);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        if (!json_is_string(e) || json_string_length(e) > FB_ENV_VALUE_MAX ||
            strlen(json_string_value(e)) != json_string_length(e))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "image config %s[%zu]: not a string", what, i);
    }
    *out = json_incref(v);
    return 0;
}

int fb_image_config_parse(json_t *blob, json_t **out, fb_error_t *err)
{
    *out = NULL;
    if (!json_is_object(blob))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "image config is not an object");
    json_t *c = json_object_get(blob, "config");
    if (c == NULL)
        c = json_object_get(blob, "container_config");
    cleanup_json json_t *env = NULL, *cmd = NULL, *ep = NULL;
    json_t *none = json_object();
    if (c == NULL || json_is_null(c))
        c = none;
    if (!json_is_object(c)) {
        json_decref(none);
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "image config: \"config\" is not an object");
    }
    int rc = string_array(json_object_get(c, "Env"), "Env", FB_ENV_MAX, &env, err);
    if (rc == 0)
        rc = string_array(json_object_get(c, "Cmd"), "Cmd", FB_ARGV_MAX, &cmd, err);
    if (rc == 0)
        rc = string_array(json_object_get(c, "Entrypoint"), "Entrypoint", FB_ARGV_MAX, &ep, err);
    const char *wd = json_string_value(json_object_get(c, "WorkingDir"));
    const char *user = json_string_value(json_object_get(c, "User"));
    if (rc == 0 && wd != NULL && wd[0] != '\0' && (wd[0] != '/' || strlen(wd) >= CONFIG_STRING_MAX))
        rc = fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "image config WorkingDir must be an absolute path");
    if (rc == 0 && user != NULL && strlen(user) > FB_USER_MAX)
        rc = fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "image config User is longer than %d bytes",
                          FB_USER_MAX);
    size_t i;
    json_t *e;
    json_array_foreach(env, i, e)
    {
        const char *s = json_string_value(e);
        const char *eq = strchr(s, '=');
        if (rc == 0 && (eq == NULL || eq == s || (size_t)(eq - s) > FB_ENV_NAME_MAX))
            rc = fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "image config Env[%zu] is not NAME=VALUE", i);
    }
    json_decref(none);
    if (rc < 0)
        return -1;
    *out = json_pack("{s:o, s:s, s:s, s:o, s:o}", "env", env ? json_incref(env) : json_array(), "workdir",
                     wd ? wd : "", "user", user ? user : "", "cmd", cmd ? json_incref(cmd) : json_null(),
                     "entrypoint", ep ? json_incref(ep) : json_null());
    return *out ? 0 : fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "image config");
}

/* ---- the two formats ---------------------------------------------------- */

/* Stores one layer: blob is the staged member, digest what names it (NULL:
 * nothing does), diff_id what the config says its content is. */
static int add_layer(struct fb_core *core, const struct stage *s, const char *blob, int idx,
                     const char *diff_id, struct fb_image *img, fb_error_t *err)
{
    char plain[PATH_MAX], digest[FB_LAYER_DIGEST_MAX];
    const char *use;
    bool fresh;
    if (fb_snprintf(plain, sizeof plain, "%s/plain%d", s->dir, idx) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "stage path");
    if (layer_plain(blob, plain, &use, err) < 0 || fb_layer_add(core, use, diff_id, digest, &fresh, err) < 0)
        return fb_error_wrap(err, "layer %d", idx + 1);
    if (use == plain)
        unlink(plain);
    fb_info("image layer %d: %s %s", idx + 1, digest, fresh ? "unpacked" : "already stored");
    if (fresh)
        json_array_append_new(img->fresh, json_string(digest));
    return json_array_append_new(img->layers, json_string(digest));
}

static json_t *diff_ids(json_t *config, size_t want, fb_error_t *err)
{
    json_t *ids = json_object_get(json_object_get(config, "rootfs"), "diff_ids");
    if (!json_is_array(ids) || json_array_size(ids) != want) {
        fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "image config lists %zu diff ids for %zu layers",
                     json_is_array(ids) ? json_array_size(ids) : 0, want);
        return NULL;
    }
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v)
    {
        if (!fb_layer_digest_valid(json_string_value(v))) {
            fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "image config diff_ids[%zu] is not a sha256 digest", i);
            return NULL;
        }
    }
    return ids;
}

/* The digest a docker-archive member name carries ("HEX.json",
 * "blobs/sha256/HEX"), or "" when it carries none. */
static void name_digest(const char *raw, char out[FB_LAYER_DIGEST_MAX])
{
    char d[FB_LAYER_DIGEST_MAX], name[MEMBER_NAME_MAX];
    out[0] = '\0';
    if (fb_strlcpy(name, raw, sizeof name) < 0)
        return;
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    if (strncmp(name, "blobs/sha256/", 13) == 0 && strchr(name + 13, '/') == NULL)
        snprintf(d, sizeof d, "sha256:%.64s", name + 13);
    else if (strlen(base) == 64 + 5 && strcmp(base + 64, ".json") == 0)
        snprintf(d, sizeof d, "sha256:%.64s", base);
    else
        return;
    if (fb_layer_digest_valid(d))
        fb_strlcpy(out, d, FB_LAYER_DIGEST_MAX);
}

static bool has_ref(json_t *tags, const char *ref)
{
    size_t i;
    json_t *v;
    json_array_foreach(tags, i, v)
    {
        const char *t = json_string_value(v);
        if (t != NULL &&
            (strcmp(t, ref) == 0 || (strncmp(t, "localhost/", 10) == 0 && strcmp(t + 10, ref) == 0)))
            return true;
    }
    return false;
}

static int load_docker(struct fb_core *core, const struct stage *s, const char *ref, struct fb_image *out,
                       fb_error_t *err)
{
    cleanup_json json_t *manifest = stage_json(s, "manifest.json", err);
    if (manifest == NULL)
        return -1;
    if (!json_is_array(manifest) || json_array_size(manifest) == 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest.json lists no image");
    json_t *pick = NULL;
    if (ref != NULL) {
        size_t i;
        json_t *m;
        json_array_foreach(manifest, i, m) if (has_ref(json_object_get(m, "RepoTags"), ref)) pick = m;
        if (pick == NULL)
            return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "the archive has no image tagged %.200s", ref);
    } else if (json_array_size(manifest) > 1) {
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                            "the archive holds %zu images: pick one with ?ref=TAG",
                            json_array_size(manifest));
    } else {
        pick = json_array_get(manifest, 0);
    }
    const char *cfg_name = json_string_value(json_object_get(pick, "Config"));
    json_t *layers = json_object_get(pick, "Layers");
    if (cfg_name == NULL || !json_is_array(layers))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest.json: an image without Config or Layers");
    if (json_array_size(layers) > FB_TEMPLATE_LAYERS_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "the image has more than %d layers",
                            FB_TEMPLATE_LAYERS_MAX);
    char path[PATH_MAX], named[FB_LAYER_DIGEST_MAX];
    if (stage_path(s, cfg_name, path, sizeof path) < 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "the archive has no config %.200s", cfg_name);
    name_digest(cfg_name, named);
    if (named[0] && verify_blob(path, "image config", named, -1, err) < 0)
        return -1;
    cleanup_json json_t *config = stage_json(s, cfg_name, err);
    json_t *ids = config ? diff_ids(config, json_array_size(layers), err) : NULL;
    if (ids == NULL || fb_image_config_parse(config, &out->config, err) < 0)
        return -1;
    out->layers = json_array();
    size_t i;
    json_t *l;
    json_array_foreach(layers, i, l)
    {
        const char *name = json_string_value(l);
        if (name == NULL || stage_path(s, name, path, sizeof path) < 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "the image references a missing layer %.200s",
                                name ? name : "(not a string)");
        name_digest(name, named);
        if ((named[0] && verify_blob(path, name, named, -1, err) < 0) ||
            add_layer(core, s, path, (int)i, json_string_value(json_array_get(ids, i)), out, err) < 0)
            return -1;
    }
    return 0;
}

/* A descriptor's blob, checked: its staged path in out. */
static int oci_blob(const struct stage *s, json_t *desc, const char *what, char *out, size_t len,
                    fb_error_t *err)
{
    const char *digest = json_string_value(json_object_get(desc, "digest"));
    json_t *size = json_object_get(desc, "size");
    if (!fb_layer_digest_valid(digest))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: a descriptor without a sha256 digest", what);
    char name[128];
    snprintf(name, sizeof name, "blobs/sha256/%s", digest + 7);
    if (stage_path(s, name, out, len) < 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "the image references a missing blob %s (%s)", digest,
                            what);
    return verify_blob(out, what, digest, json_is_integer(size) ? json_integer_value(size) : -1, err);
}

static json_t *oci_pick(const struct stage *s, json_t *index, const char *ref, int depth, fb_error_t *err)
{
    json_t *ms = json_object_get(index, "manifests");
    if (!json_is_array(ms) || json_array_size(ms) == 0) {
        fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "index.json lists no manifest");
        return NULL;
    }
    json_t *pick = NULL;
    size_t i, found = 0;
    json_t *m;
    json_array_foreach(ms, i, m)
    {
        const char *name = json_string_value(
            json_object_get(json_object_get(m, "annotations"), "org.opencontainers.image.ref.name"));
        const char *arch = json_string_value(json_object_get(json_object_get(m, "platform"), "architecture"));
        if (ref != NULL && depth == 0 && (name == NULL || (strcmp(name, ref) != 0 && !strstr(ref, name))))
            continue;
        if (arch != NULL && strcmp(arch, "amd64") != 0)
            continue;
        pick = pick ? pick : m;
        found++;
    }
    if (pick == NULL) {
        fb_error_set(err, ref ? FB_ERR_NOT_FOUND : FB_ERR_BAD_REQUEST, 0, "the layout has no %s%.200s image",
                     ref ? "" : "linux/amd64", ref ? ref : "");
        return NULL;
    }
    if (found > 1 && ref == NULL && depth == 0) {
        fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "the layout holds %zu images: pick one with ?ref=NAME",
                     found);
        return NULL;
    }
    char path[PATH_MAX];
    if (oci_blob(s, pick, "manifest", path, sizeof path, err) < 0)
        return NULL;
    const char *digest = json_string_value(json_object_get(pick, "digest"));
    char name[128];
    snprintf(name, sizeof name, "blobs/sha256/%s", digest + 7);
    json_t *man = stage_json(s, name, err);
    if (man != NULL && json_object_get(man, "manifests") != NULL) { /* a nested index */
        json_t *inner = depth < 2
                            ? oci_pick(s, man, ref, depth + 1, err)
                            : (fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "indexes nested too deep"), NULL);
        json_decref(man);
        return inner;
    }
    return man;
}

static int load_oci(struct fb_core *core, const struct stage *s, const char *ref, struct fb_image *out,
                    fb_error_t *err)
{
    cleanup_json json_t *layout = stage_json(s, "oci-layout", err);
    if (layout == NULL)
        return -1;
    const char *ver = json_string_value(json_object_get(layout, "imageLayoutVersion"));
    if (ver == NULL || strncmp(ver, "1.", 2) != 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "oci-layout: unknown imageLayoutVersion");
    cleanup_json json_t *index = stage_json(s, "index.json", err);
    cleanup_json json_t *man = index ? oci_pick(s, index, ref, 0, err) : NULL;
    if (man == NULL)
        return -1;
    json_t *layers = json_object_get(man, "layers");
    if (!json_is_array(layers) || json_array_size(layers) > FB_TEMPLATE_LAYERS_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: layers missing or more than %d",
                            FB_TEMPLATE_LAYERS_MAX);
    char path[PATH_MAX];
    if (oci_blob(s, json_object_get(man, "config"), "image config", path, sizeof path, err) < 0)
        return -1;
    const char *cdig = json_string_value(json_object_get(json_object_get(man, "config"), "digest"));
    char cname[128];
    snprintf(cname, sizeof cname, "blobs/sha256/%s", cdig + 7);
    cleanup_json json_t *config = stage_json(s, cname, err);
    json_t *ids = config ? diff_ids(config, json_array_size(layers), err) : NULL;
    if (ids == NULL || fb_image_config_parse(config, &out->config, err) < 0)
        return -1;
    out->layers = json_array();
    size_t i;
    json_t *l;
    json_array_foreach(layers, i, l)
    {
        const char *mt = json_string_value(json_object_get(l, "mediaType"));
        if (mt != NULL && strstr(mt, "nondistributable") != NULL)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "layer %zu: foreign layers are not supported",
                                i + 1);
        char what[32];
        snprintf(what, sizeof what, "layer %zu", i + 1);
        if (oci_blob(s, l, what, path, sizeof path, err) < 0 ||
            add_layer(core, s, path, (int)i, json_string_value(json_array_get(ids, i)), out, err) < 0)
            return -1;
    }
    return 0;
}

int fb_image_load(struct fb_core *core, const char *path, enum fb_image_format fmt, const char *ref,
                  struct fb_image *out, fb_error_t *err)
{
    memset(out, 0, sizeof *out);
    out->fresh = json_array();
    struct stage s;
    int rc = stage_open(core, path, &s, err);
    if (rc == 0)
        rc =
            fmt == FB_IMAGE_DOCKER ? load_docker(core, &s, ref, out, err) : load_oci(core, &s, ref, out, err);
    stage_close(&s);
    return rc; /* on failure the caller still drops out->fresh */
}
