/* Disk used by checkpoints when their layers share blocks (reflinks on
 * btrfs): how much each holds alone, and how much a sandbox's chain of
 * checkpoints takes together.  Both are read from the filesystem's extent
 * maps (FIEMAP) each time they are asked for: what a checkpoint shares
 * changes as its sandbox writes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../runtime/reflink.h"
#include "internal.h"

/* a layer tree deeper than this was refused when it was copied */
#define WALK_DEPTH_MAX 256

/* Adds the extents of every regular file below dir_fd to l and their
 * unshared bytes to *exclusive.  A file the filesystem cannot map counts
 * whole, as unshared.  0 or -errno (-E2BIG: too many extents). */
static int walk(int dir_fd, struct fb_extent_list *l, uint64_t *exclusive, int depth)
{
    if (depth > WALK_DEPTH_MAX)
        return -ELOOP;
    int dup_fd = dup(dir_fd);
    if (dup_fd < 0)
        return -errno;
    cleanup_dir DIR *d = fdopendir(dup_fd);
    if (d == NULL) {
        int e = errno;
        close(dup_fd);
        return -e;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dir_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            cleanup_close int sub =
                openat(dir_fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            int r = sub < 0 ? 0 : walk(sub, l, exclusive, depth + 1);
            if (r < 0)
                return r;
            continue;
        }
        if (!S_ISREG(st.st_mode))
            continue;
        cleanup_close int fd = openat(dir_fd, de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
            continue;
        int r = fb_extents_read(fd, l, exclusive);
        if (r == -EOPNOTSUPP || r == -ENOTTY) {
            l->unplaced += (uint64_t)st.st_blocks * 512;
            *exclusive += (uint64_t)st.st_blocks * 512;
        } else if (r < 0) {
            return r;
        }
    }
    return 0;
}

/* The extents of checkpoint cid's files; 0 or -errno. */
static int read_checkpoint(struct fb_core *core, const char *cid, struct fb_extent_list *l,
                           uint64_t *exclusive)
{
    char dir[PATH_MAX];
    if (fb_snprintf(dir, sizeof dir, "%s/checkpoints/%s", core->cfg.state_dir, cid) < 0)
        return -ENAMETOOLONG;
    cleanup_close int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    return walk(fd, l, exclusive, 0);
}

void fb_checkpoint_usage_add(struct fb_core *core, const struct fb_checkpoint_row *c, json_t *obj)
{
    struct fb_extent_list l = {0};
    uint64_t exclusive = 0;
    int r = read_checkpoint(core, c->id, &l, &exclusive);
    fb_extent_list_free(&l);
    if (r < 0) {
        fb_debug("checkpoint %s: extents: %s", c->id, strerror(-r));
        json_object_set_new(obj, "exclusive_bytes", json_null());
        return;
    }
    json_object_set_new(obj, "exclusive_bytes", json_integer((json_int_t)exclusive));
}

int64_t fb_checkpoint_usage_total(struct fb_core *core, const struct fb_checkpoint_row *rows, size_t n)
{
    struct fb_extent_list l = {0};
    uint64_t exclusive = 0;
    for (size_t i = 0; i < n; i++) {
        int r = read_checkpoint(core, rows[i].id, &l, &exclusive);
        if (r < 0) {
            fb_debug("checkpoint %s: extents: %s", rows[i].id, strerror(-r));
            fb_extent_list_free(&l);
            return -1;
        }
    }
    uint64_t total = fb_extents_union_bytes(l.v, l.n) + l.unplaced;
    fb_extent_list_free(&l);
    return (int64_t)total;
}
