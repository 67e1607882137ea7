/* The layer store: unpacking once, stacking by hard links, collecting
 * what no template lists any more. */
#include "layers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/util.h"
#include "core.h"
#include "internal.h"
#include "layertar.h"

#define OPAQUE_XATTR "trusted.overlay.opaque"
#define PARTIAL_PREFIX ".partial-"
/* deeper trees are refused: each level holds two fds while it is walked */
#define TREE_DEPTH_MAX 200

bool fb_layer_digest_valid(const char *d)
{
    if (d == NULL || strncmp(d, "sha256:", 7) != 0 || strlen(d) != 7 + 64)
        return false;
    for (const char *p = d + 7; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

static int layer_dir(struct fb_core *core, const char *digest, char *out, size_t len)
{
    return fb_snprintf(out, len, "%s/layers/%s", core->cfg.state_dir, digest + 7);
}

int64_t fb_layer_size(struct fb_core *core, const char *digest)
{
    struct fb_layer_row row;
    cleanup_error fb_error_t e = NULL;
    return fb_store_layer_get(core->store, digest, &row, &e) == 0 ? row.size_bytes : 0;
}

int fb_layer_add(struct fb_core *core, const char *tar_path, const char *expect,
                 char digest[FB_LAYER_DIGEST_MAX], bool *fresh, fb_error_t *err)
{
    *fresh = false;
    cleanup_close int fd = open(tar_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return fb_error_sys(err, "open layer %s", tar_path);
    char hex[65];
    int64_t size;
    if (fb_sha256_fd(fd, hex, &size, err) < 0)
        return -1;
    snprintf(digest, FB_LAYER_DIGEST_MAX, "sha256:%s", hex);
    if (expect != NULL && strcmp(expect, digest) != 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                            "layer digest mismatch: expected %.80s, the content is %s", expect, digest);
    char dir[PATH_MAX], partial[PATH_MAX], rnd[17];
    struct stat st;
    if (layer_dir(core, digest, dir, sizeof dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "layer path");
    if (lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && fb_layer_size(core, digest) > 0)
        return 0;
    if (fb_random_hex(rnd, 8) < 0 || fb_snprintf(partial, sizeof partial, "%s/layers/" PARTIAL_PREFIX "%s-%s",
                                                 core->cfg.state_dir, hex, rnd) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "layer path");
    int r = fb_mkdir_p(partial, 0755);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "create %s", partial);
    if (fb_layer_tar_extract_image(tar_path, partial, err) < 0) {
        fb_rm_rf(partial);
        return fb_error_wrap(err, "layer %.19s", digest);
    }
    struct fb_layer_row row = {.created_ms = fb_now_ms()};
    row.size_bytes = fb_du(partial);
    if (row.size_bytes <= 0)
        row.size_bytes = 1; /* an empty layer still counts as stored */
    fb_strlcpy(row.digest, digest, sizeof row.digest);
    fb_rm_rf(dir); /* a dir without a row: an earlier GC stopped half-way */
    if (rename(partial, dir) < 0) {
        int e = errno;
        fb_rm_rf(partial);
        if (e != EEXIST && e != ENOTEMPTY)
            return fb_error_set(err, FB_ERR_INTERNAL, e, "store layer %s", digest);
    }
    if (fb_store_layer_put(core->store, &row, err) < 0)
        return -1;
    *fresh = true;
    return 0;
}

/* ---- stacking ------------------------------------------------------------ */

static int remove_at(int dirfd, const char *name, int depth, fb_error_t *err);

/* Calls fn for every entry of the dir open at fd (not "." and "..") until
 * one fails; the walk's own fd is a dup, fd stays the caller's. */
struct walk {
    int fd, dst, how, depth;
};
static int each_entry(const struct walk *w,
                      int (*fn)(const struct walk *w, const char *name, fb_error_t *err), fb_error_t *err)
{
    if (w->depth > TREE_DEPTH_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "tree deeper than %d levels", TREE_DEPTH_MAX);
    int dfd = dup(w->fd);
    if (dfd < 0)
        return fb_error_sys(err, "dup");
    DIR *d = fdopendir(dfd);
    if (d == NULL) {
        close(dfd);
        return fb_error_sys(err, "read dir");
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        rc = fn(w, de->d_name, err);
    }
    if (rc == 0 && errno != 0)
        rc = fb_error_sys(err, "read dir");
    closedir(d);
    return rc;
}

static int remove_one(const struct walk *w, const char *name, fb_error_t *err)
{
    return remove_at(w->fd, name, w->depth + 1, err);
}

/* Empties the dir open at fd (keeps fd's dir itself). */
static int empty_dir(int fd, int depth, fb_error_t *err)
{
    struct walk w = {.fd = fd, .depth = depth};
    return each_entry(&w, remove_one, err);
}

static int remove_at(int dirfd, const char *name, int depth, fb_error_t *err)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : fb_error_sys(err, "stat %s", name);
    if (S_ISDIR(st.st_mode)) {
        cleanup_close int sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0)
            return fb_error_sys(err, "open %s", name);
        if (empty_dir(sub, depth, err) < 0)
            return -1;
        if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0)
            return fb_error_sys(err, "remove %s", name);
        return 0;
    }
    if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
        return fb_error_sys(err, "remove %s", name);
    return 0;
}

static int copy_dir_meta(int fd, const struct stat *st, fb_error_t *err)
{
    struct timespec ts[2] = {st->st_atim, st->st_mtim};
    if (fchown(fd, st->st_uid, st->st_gid) < 0 || fchmod(fd, st->st_mode & 07777) < 0 || futimens(fd, ts) < 0)
        return fb_error_sys(err, "set dir owner and mode");
    return 0;
}

/* How a tree is stacked: as a layer (whiteouts and opaque markers act;
 * else it is a plain tree linked as it is), and whether dirs already there
 * keep their owner and mode (a COPY's parent dirs must not reset /tmp). */
#define STACK_LAYER 1
#define STACK_KEEP_DIRS 2

static int stack_dir(int src, int dst, int how, int depth, fb_error_t *err);

static int stack_entry(int src, int dst, const char *name, int how, int depth, fb_error_t *err)
{
    bool layer = how & STACK_LAYER;
    struct stat st, cur;
    if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return fb_error_sys(err, "stat %s", name);
    bool exists = fstatat(dst, name, &cur, AT_SYMLINK_NOFOLLOW) == 0;
    if (layer && S_ISCHR(st.st_mode) && st.st_rdev == 0)
        return exists ? remove_at(dst, name, depth, err) : 0;
    if (!S_ISDIR(st.st_mode)) {
        if (exists && remove_at(dst, name, depth, err) < 0)
            return -1;
        if (linkat(src, name, dst, name, 0) < 0)
            return fb_error_sys(err, "link %s", name);
        return 0;
    }
    cleanup_close int sfd = openat(src, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sfd < 0)
        return fb_error_sys(err, "open %s", name);
    char v[4];
    bool opaque = layer && fgetxattr(sfd, OPAQUE_XATTR, v, sizeof v) == 1 && v[0] == 'y';
    if (exists && !S_ISDIR(cur.st_mode) && remove_at(dst, name, depth, err) < 0)
        return -1;
    if ((!exists || !S_ISDIR(cur.st_mode)) && mkdirat(dst, name, 0700) < 0)
        return fb_error_sys(err, "mkdir %s", name);
    cleanup_close int dfd = openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return fb_error_sys(err, "open %s", name);
    if ((opaque && exists && S_ISDIR(cur.st_mode) && empty_dir(dfd, depth, err) < 0) ||
        stack_dir(sfd, dfd, how, depth + 1, err) < 0)
        return -1;
    if ((how & STACK_KEEP_DIRS) && exists && S_ISDIR(cur.st_mode))
        return 0;
    return copy_dir_meta(dfd, &st, err); /* last: the walk changed its times */
}

static int stack_one(const struct walk *w, const char *name, fb_error_t *err)
{
    return stack_entry(w->fd, w->dst, name, w->how, w->depth, err);
}

static int stack_dir(int src, int dst, int how, int depth, fb_error_t *err)
{
    struct walk w = {.fd = src, .dst = dst, .how = how, .depth = depth};
    return each_entry(&w, stack_one, err);
}

int fb_tree_link(int src_fd, int dst_fd, fb_error_t *err)
{
    struct stat st;
    if (fstat(src_fd, &st) < 0)
        return fb_error_sys(err, "stat");
    if (stack_dir(src_fd, dst_fd, 0, 0, err) < 0)
        return -1;
    return copy_dir_meta(dst_fd, &st, err);
}

int fb_layer_apply(struct fb_core *core, const char *digest, int dst_fd, bool keep_dirs, fb_error_t *err)
{
    char dir[PATH_MAX];
    if (!fb_layer_digest_valid(digest) || layer_dir(core, digest, dir, sizeof dir) < 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "bad layer digest");
    cleanup_close int src = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (src < 0)
        return errno == ENOENT ? fb_error_set(err, FB_ERR_NOT_FOUND, 0, "layer %s is not stored", digest)
                               : fb_error_sys(err, "open %s", dir);
    if (stack_dir(src, dst_fd, STACK_LAYER | (keep_dirs ? STACK_KEEP_DIRS : 0), 0, err) < 0)
        return fb_error_wrap(err, "apply layer %.19s", digest);
    return 0;
}

/* ---- collection ---------------------------------------------------------- */

json_t *fb_layer_counts(const struct fb_template_row *rows, size_t n)
{
    json_t *counts = json_object();
    for (size_t i = 0; counts && i < n; i++) {
        cleanup_json json_t *arr = json_loads(rows[i].layers_json ? rows[i].layers_json : "[]", 0, NULL);
        size_t k;
        json_t *v;
        json_array_foreach(arr, k, v)
        {
            const char *d = json_string_value(v);
            if (d == NULL)
                continue;
            json_object_set_new(counts, d, json_integer(json_integer_value(json_object_get(counts, d)) + 1));
        }
    }
    return counts;
}

/* Every digest some template lists (object keys). */
static json_t *referenced_layers(struct fb_core *core, fb_error_t *err)
{
    struct fb_template_row *rows = NULL;
    size_t n = 0;
    if (fb_store_template_list(core->store, &rows, &n, err) < 0)
        return NULL;
    json_t *set = fb_layer_counts(rows, n);
    fb_template_rows_free(rows, n);
    if (set == NULL)
        fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "layer set");
    return set;
}

int fb_layers_gc(struct fb_core *core, json_t **out, fb_error_t *err)
{
    pthread_rwlock_wrlock(&core->layers_lock);
    cleanup_json json_t *used = referenced_layers(core, err);
    struct fb_layer_row *rows = NULL;
    size_t n = 0;
    int rc = used != NULL ? fb_store_layer_list(core->store, &rows, &n, err) : -1;
    int64_t removed = 0, freed = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (json_object_get(used, rows[i].digest) != NULL)
            continue;
        char dir[PATH_MAX];
        if (!fb_layer_digest_valid(rows[i].digest) || layer_dir(core, rows[i].digest, dir, sizeof dir) < 0)
            continue;
        /* the row goes first: a dir without a row is only ever redone */
        rc = fb_store_layer_delete(core->store, rows[i].digest, err);
        if (rc == 0) {
            fb_rm_rf(dir);
            removed++;
            freed += rows[i].size_bytes;
        }
    }
    free(rows);
    pthread_rwlock_unlock(&core->layers_lock);
    if (rc < 0)
        return -1;
    if (removed > 0)
        fb_info("template gc: removed %lld layer(s), %lld bytes", (long long)removed, (long long)freed);
    *out = json_pack("{s:I, s:I}", "removed_layers", (json_int_t)removed, "freed_bytes", (json_int_t)freed);
    return 0;
}

void fb_layers_drop_unused(struct fb_core *core, json_t *digests)
{
    if (json_array_size(digests) == 0)
        return;
    pthread_rwlock_wrlock(&core->layers_lock);
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *used = referenced_layers(core, &err);
    size_t i;
    json_t *v;
    json_array_foreach(digests, i, v)
    {
        const char *d = json_string_value(v);
        char dir[PATH_MAX];
        if (used == NULL || !fb_layer_digest_valid(d) || json_object_get(used, d) != NULL ||
            layer_dir(core, d, dir, sizeof dir) < 0)
            continue;
        cleanup_error fb_error_t e = NULL;
        if (fb_store_layer_delete(core->store, d, &e) == 0)
            fb_rm_rf(dir);
    }
    pthread_rwlock_unlock(&core->layers_lock);
}

void fb_layers_remove_partial(struct fb_core *core)
{
    char dir[PATH_MAX];
    if (fb_snprintf(dir, sizeof dir, "%s/layers", core->cfg.state_dir) < 0 || fb_mkdir_p(dir, 0700) < 0)
        return;
    fb_rm_prefixed(dir, PARTIAL_PREFIX);
}
