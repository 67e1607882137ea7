/* A sandbox's writable layer lives in a filesystem image of its own (ext4
 * on a loop device, sparse on the host), so its size and inode count are
 * hard limits: a sandbox that fills its disk gets ENOSPC inside and the
 * host's filesystem grows by at most the image's size.  This kernel has no
 * quota support compiled in (neither ext4 nor XFS project quotas), which is
 * why the limit is a filesystem boundary rather than a quota. */
#ifndef FB_RUNTIME_DISK_H
#define FB_RUNTIME_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/error.h"

struct fb_disk_usage {
    uint64_t bytes_used;
    uint64_t bytes_total; /* usable by the sandbox */
    uint64_t inodes_used;
    uint64_t inodes_total;
};

/* Whether images can be made and attached here (mkfs.ext4 present,
 * /dev/loop-control usable).  When false, why says what is missing. */
bool fb_disk_supported(char *why, size_t why_len);

/* Creates a sparse image of `bytes` at img (replacing none: it must not
 * exist), formats it and mounts it at mnt (an existing empty dir) with
 * nosuid,nodev.  On failure nothing is left mounted; img may remain and is
 * removed with the sandbox dir. */
int fb_disk_create(const char *img, const char *mnt, uint64_t bytes, fb_error_t *err);

/* Formats the existing (sized) file img as ext4 for a sandbox's layer or a
 * volume: no reserved blocks, a small journal. */
int fb_disk_format(const char *img, uint64_t bytes, fb_error_t *err);

/* Mounts the existing image img at mnt (an existing empty dir) as
 * fb_disk_create does (a restored checkpoint). */
int fb_disk_mount(const char *img, const char *mnt, fb_error_t *err);

/* Binds the open image img_fd to a free loop device (auto-clearing,
 * direct I/O where the host filesystem allows it) and returns the device's
 * fd, which the caller closes once the filesystem on it is mounted; the
 * device's path goes to dev.  -1 with err on failure. */
int fb_disk_attach_loop(int img_fd, char *dev, size_t dev_len, fb_error_t *err);

/* Space and inodes used in the filesystem mounted at mnt.  0 or -errno. */
int fb_disk_usage_read(const char *mnt, struct fb_disk_usage *out);

/* Detaches the filesystem at mnt (lazily: the sandbox's own mount namespace
 * may still hold it while it winds down); its loop device goes with the
 * last reference.  Not mounted is not an error. */
void fb_disk_release(const char *mnt);

#endif
