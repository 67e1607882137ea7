/* Copies of layer images that share their blocks with the original
 * (reflinks: FICLONE, copy-on-write) where the filesystem can, full sparse
 * copies where it cannot, and the accounting of what such copies share
 * (FIEMAP). */
#ifndef FB_RUNTIME_REFLINK_H
#define FB_RUNTIME_REFLINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/error.h"

/* extents one accounting pass may collect (16 bytes each): beyond it the
 * files are too fragmented to count, and a total is not reported */
#define FB_EXTENTS_MAX (1u << 20)

enum fb_clone_how { FB_CLONE_REFLINK, FB_CLONE_COPY };

/* Makes dst_fd (an empty regular file open for writing) a copy of the
 * regular file src_fd.  With reflink, FICLONE comes first; when the
 * filesystem cannot clone (EXDEV, EOPNOTSUPP, EINVAL, ENOTTY, EPERM) or
 * reflink is false, fb_copy_sparse copies the data, once fstatvfs shows
 * room on dst's filesystem for src's allocated bytes plus margin.  No
 * space is FB_ERR_TOO_LARGE (dst may hold part of a copy: the caller
 * removes it).  *how (may be NULL) says which copy was made. */
int fb_layer_clone(int src_fd, int dst_fd, bool reflink, int64_t margin, enum fb_clone_how *how,
                   fb_error_t *err);

struct fb_extent {
    uint64_t physical;
    uint64_t length;
};

/* Extents collected from files; caller-owned, freed with
 * fb_extent_list_free(). */
struct fb_extent_list {
    struct fb_extent *v;
    size_t n, cap;
    uint64_t unplaced; /* bytes with no physical address yet (delalloc, inline) */
};

/* Appends the extents of the regular file fd to l (FIEMAP) and adds to
 * *exclusive (may be NULL) the bytes of those not marked shared with
 * another file.  0, -E2BIG past FB_EXTENTS_MAX, or -errno (EOPNOTSUPP:
 * the filesystem has no FIEMAP). */
int fb_extents_read(int fd, struct fb_extent_list *l, uint64_t *exclusive);

/* Frees l's extents and empties it; l itself is the caller's. */
void fb_extent_list_free(struct fb_extent_list *l);

/* Bytes covered by the union of v[0..n) (sorted in place): extents that
 * overlap or repeat count once.  Pure. */
uint64_t fb_extents_union_bytes(struct fb_extent *v, size_t n);

#endif
