/* Where sandboxes' writable layers and checkpoints live, and whether
 * copies of them can share blocks.  Layers stay ext4 images (the disk
 * limit is a filesystem boundary); what changes is the filesystem holding
 * the images: on btrfs an image is cloned (FICLONE) in near-constant time
 * and the clone takes no space until one side writes.  A state dir on
 * btrfs is used as it is; elsewhere STATE_DIR/storage.btrfs, a sparse file
 * formatted as btrfs, is loop-mounted and its top-level sandboxes/ and
 * checkpoints/ are bound onto STATE_DIR/sandboxes and
 * STATE_DIR/checkpoints (one filesystem, so clones across them work). */
#ifndef FB_RUNTIME_STORAGE_H
#define FB_RUNTIME_STORAGE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "../common/error.h"

#define FB_STORAGE_DEFAULT_BYTES (64ull << 30)
/* below this a pool is not worth making (btrfs itself wants ~120 MiB) */
#define FB_STORAGE_MIN_BYTES (256ull << 20)
#define FB_STORAGE_MAX_BYTES (1ull << 50)

enum fb_storage_kind {
    FB_STORAGE_PLAIN,      /* full copies on the state dir's filesystem */
    FB_STORAGE_BTRFS,      /* the state dir is on btrfs: clones in place */
    FB_STORAGE_BTRFS_POOL, /* clones on the loop-mounted STATE_DIR/storage.btrfs */
};

struct fb_storage {
    enum fb_storage_kind kind;
    bool reflink;        /* copies try FICLONE first */
    bool created;        /* this start made the pool */
    char path[PATH_MAX]; /* the pool file, or the dir whose filesystem holds the layers */
    char why[256];       /* plain or no reflink: why, for /v1/info and the log */
};

/* Prepares layer storage below state_dir (which exists and is locked by
 * this daemon): finds the pool mounted (a daemon restart), mounts it (a
 * host restart), or makes it when no pool exists yet, sandboxes/ and
 * checkpoints/ are empty and plain is false.  pool_bytes 0 picks the lesser
 * of FB_STORAGE_DEFAULT_BYTES and the free space.  When no pool can be
 * made, st says why and copies are plain (not an error).  An existing pool
 * that cannot be mounted, or one half mounted, is an error: its data would
 * otherwise seem lost.  plain also turns reflinks off on btrfs. */
int fb_storage_open(const char *state_dir, bool plain, uint64_t pool_bytes, struct fb_storage *st,
                    fb_error_t *err);

/* Size, free bytes of the filesystem holding state_dir/sandboxes, and the
 * bytes the pool file takes on the host (0 without a pool).  0 or -errno. */
int fb_storage_space(const struct fb_storage *st, const char *state_dir, uint64_t *size, uint64_t *free_bytes,
                     uint64_t *host_bytes);

/* "plain", "btrfs" or "btrfs-pool". */
const char *fb_storage_kind_name(enum fb_storage_kind kind);

/* The pool size picked when none is configured: the lesser of
 * FB_STORAGE_DEFAULT_BYTES and host_free rounded down to a MiB, or 0 when
 * that is below FB_STORAGE_MIN_BYTES.  Pure. */
uint64_t fb_storage_default_bytes(uint64_t host_free);

#endif
