/* Copies of a sandbox's writable layer for checkpoints: a sparse copy of
 * its ext4 image, or (hosts without loop devices) a copy of its directory
 * tree.  Neither follows a symlink. */
#ifndef FB_RUNTIME_COPY_H
#define FB_RUNTIME_COPY_H

#include <stdint.h>
#include <sys/types.h>

#include "../common/error.h"

/* Copies the regular file src_fd to dst_fd (empty, writable) so that only
 * the ranges holding data are read and written (SEEK_DATA/SEEK_HOLE with
 * copy_file_range): holes stay holes.  dst ends with src's size.
 * ENOSPC is reported as FB_ERR_TOO_LARGE. */
int fb_copy_sparse(int src_fd, int dst_fd, fb_error_t *err);

/* Copies the tree below the directory src_fd into the (empty) directory
 * dst_fd: regular files (sparsely), directories, symlinks, fifos and
 * character devices 0:0 (overlayfs whiteouts), with modes, owners, times and
 * extended attributes.  Owners inside [uid_from, uid_from + count) move to
 * the same offset from uid_to (uid_from == uid_to: unchanged).  Sockets
 * and other devices are skipped.  Depth is bounded. */
int fb_copy_tree(int src_fd, int dst_fd, uid_t uid_from, uid_t uid_to, uid_t count, fb_error_t *err);

/* Moves owners of every entry below dir_fd (and dir_fd itself) from
 * [uid_from, uid_from + count) to the same offset from uid_to, in place. */
int fb_tree_shift_owner(int dir_fd, uid_t uid_from, uid_t uid_to, uid_t count, fb_error_t *err);

#endif
