/* Persistent volumes on the host: each is an ext4 image file with a size
 * of its own (so a full volume is ENOSPC inside, never a full host disk),
 * mounted at one private host dir while it is used.  Sandboxes get
 * idmapped binds of that mount (container.c), so the files are stored with
 * sandbox-relative owners 0..65535 whatever a sandbox's host uid range is.
 *
 * The image's contents are written by sandboxes: the host only ever reads
 * or writes them from a forked child chrooted into the mount, without the
 * capabilities that could leave a chroot. */
#ifndef FB_RUNTIME_VOLUME_H
#define FB_RUNTIME_VOLUME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/error.h"

/* Creates the image img (which must not exist) of bytes, formats it with
 * an empty root dir owned by 0:0 (root inside any sandbox) and mounts it at
 * mnt (an existing empty dir).  On failure nothing is mounted and img is
 * removed. */
int fb_volume_image_create(const char *img, const char *mnt, uint64_t bytes, fb_error_t *err);

/* Makes sure img's filesystem is mounted at mnt (an existing dir); a mount
 * already there is kept.  When a loop device still backs img (a sandbox
 * holds the filesystem after the host's mount went: a daemon restart),
 * that device is mounted again, never a second one: two filesystem
 * instances of one image would corrupt it. */
int fb_volume_image_mount(const char *img, const char *mnt, fb_error_t *err);

/* Whether a filesystem is mounted at mnt (the volume's, as only the
 * daemon mounts there). */
bool fb_volume_image_mounted(const char *mnt);

/* Detaches the host's mount at mnt, lazily: sandboxes keep their binds.
 * Not mounted is not an error. */
void fb_volume_image_release(const char *mnt);

/* Maps an archive member name to the path it is written at, relative to
 * the volume's root (no leading '/'); -1 with msg filled refuses it. */
typedef int (*fb_volume_member_fn)(void *ctx, const char *member, char *out, size_t outlen, char *msg,
                                   size_t msglen);

/* Extracts the tar at tar_path (already checked whole by the caller) into
 * the volume mounted at mnt, keeping owners (bounded to 0..65535) and
 * modes, after making the directory base (relative, "" for the root) with
 * no symlink on its way.  bad_request / payload_too_large (volume full)
 * name the member; members written before a failure stay. */
int fb_volume_tar_extract(const char *mnt, const char *base, const char *tar_path, fb_volume_member_fn map,
                          void *ctx, fb_error_t *err);

/* Writes a pax tar of the directory base (relative, "" for the root) of
 * the volume mounted at mnt to out_fd, names relative to base, owners as
 * stored (sandbox-relative).  Symlinks are archived as links, never
 * followed, and base may not pass one (bad_request); fifos and sockets are
 * skipped.  not_found, bad_request, payload_too_large past max bytes. */
int fb_volume_tar_create(const char *mnt, const char *base, int out_fd, long long max, fb_error_t *err);

#endif
