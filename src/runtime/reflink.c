#include "reflink.h"

#include <errno.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "../common/cleanup.h"
#include "copy.h"

/* extents asked for per FIEMAP call: 4 pages of buffer */
#define FIEMAP_BATCH 512

/* Errors that mean "this filesystem (or this pair of files) cannot share
 * blocks", after which a copy is the right answer; anything else is a
 * real failure. */
static bool clone_unsupported(int e)
{
    return e == EXDEV || e == EOPNOTSUPP || e == ENOTSUP || e == EINVAL || e == ENOTTY || e == EPERM ||
           e == ENOSYS;
}

static int room_for_copy(int src_fd, int dst_fd, int64_t margin, fb_error_t *err)
{
    struct stat st;
    struct statvfs vfs;
    if (fstat(src_fd, &st) < 0 || fstatvfs(dst_fd, &vfs) < 0)
        return fb_error_sys(err, "measure space for a copy");
    long long need = (long long)st.st_blocks * 512 + margin;
    long long avail = (long long)vfs.f_bavail * (long long)vfs.f_frsize;
    if (need > avail)
        return fb_error_set(err, FB_ERR_TOO_LARGE, ENOSPC,
                            "not enough space on the host's state filesystem: the copy needs %lld bytes "
                            "(with %lld kept free), %lld are available",
                            need, (long long)margin, avail);
    return 0;
}

int fb_layer_clone(int src_fd, int dst_fd, bool reflink, int64_t margin, enum fb_clone_how *how,
                   fb_error_t *err)
{
    if (reflink) {
        if (ioctl(dst_fd, FICLONE, src_fd) == 0) {
            if (how != NULL)
                *how = FB_CLONE_REFLINK;
            return 0;
        }
        int e = errno;
        if (e == ENOSPC || e == EDQUOT)
            return fb_error_set(err, FB_ERR_TOO_LARGE, e,
                                "clone the layer: no space left on the host's state filesystem");
        if (!clone_unsupported(e))
            return fb_error_set(err, FB_ERR_INTERNAL, e, "clone the layer");
    }
    /* a full copy needs the space a reflink did not */
    if (room_for_copy(src_fd, dst_fd, margin, err) < 0)
        return -1;
    if (how != NULL)
        *how = FB_CLONE_COPY;
    return fb_copy_sparse(src_fd, dst_fd, err);
}

static int extent_push(struct fb_extent_list *l, uint64_t physical, uint64_t length)
{
    if (l->n == l->cap) {
        if (l->cap >= FB_EXTENTS_MAX)
            return -E2BIG;
        size_t cap = l->cap ? l->cap * 2 : 256;
        if (cap > FB_EXTENTS_MAX)
            cap = FB_EXTENTS_MAX;
        struct fb_extent *v = realloc(l->v, cap * sizeof *v);
        if (v == NULL)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (struct fb_extent){physical, length};
    return 0;
}

int fb_extents_read(int fd, struct fb_extent_list *l, uint64_t *exclusive)
{
    size_t len = sizeof(struct fiemap) + FIEMAP_BATCH * sizeof(struct fiemap_extent);
    cleanup_free struct fiemap *fm = calloc(1, len);
    if (fm == NULL)
        return -ENOMEM;
    uint64_t start = 0;
    for (;;) {
        memset(fm, 0, len);
        fm->fm_start = start;
        fm->fm_length = FIEMAP_MAX_OFFSET - start;
        fm->fm_extent_count = FIEMAP_BATCH;
        if (ioctl(fd, FS_IOC_FIEMAP, fm) < 0)
            return -errno;
        if (fm->fm_mapped_extents == 0)
            return 0;
        bool last = false;
        for (uint32_t i = 0; i < fm->fm_mapped_extents; i++) {
            const struct fiemap_extent *x = &fm->fm_extents[i];
            bool placed = !(x->fe_flags & (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC |
                                           FIEMAP_EXTENT_DATA_INLINE | FIEMAP_EXTENT_NOT_ALIGNED));
            if (placed) {
                int r = extent_push(l, x->fe_physical, x->fe_length);
                if (r < 0)
                    return r;
            } else {
                l->unplaced += x->fe_length;
            }
            if (exclusive != NULL && !(x->fe_flags & FIEMAP_EXTENT_SHARED))
                *exclusive += x->fe_length;
            start = x->fe_logical + x->fe_length;
            last = (x->fe_flags & FIEMAP_EXTENT_LAST) != 0;
        }
        if (last)
            return 0;
    }
}

void fb_extent_list_free(struct fb_extent_list *l)
{
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int by_start(const void *a, const void *b)
{
    const struct fb_extent *x = a, *y = b;
    return x->physical < y->physical ? -1 : x->physical > y->physical;
}

uint64_t fb_extents_union_bytes(struct fb_extent *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, by_start);
    uint64_t total = 0, lo = v[0].physical, hi = v[0].physical + v[0].length;
    for (size_t i = 1; i < n; i++) {
        uint64_t s = v[i].physical, e = v[i].physical + v[i].length;
        if (s > hi) {
            total += hi - lo;
            lo = s;
            hi = e;
        } else if (e > hi) {
            hi = e;
        }
    }
    return total + (hi - lo);
}
