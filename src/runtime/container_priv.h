/* Steps of sandbox setup shared by a fresh start (container.c) and a
 * restore from CRIU images (restore.c); not for use outside runtime/. */
#ifndef FB_RUNTIME_CONTAINER_PRIV_H
#define FB_RUNTIME_CONTAINER_PRIV_H

#include "container.h"

/* Creates the sandbox and run dirs and the writable layer (or mounts the
 * existing one when c->reuse_layer); fills *err. */
int fb_container_prepare_dirs(const struct fb_container_config *c, fb_error_t *err);

/* Writes uid_map and gid_map of pid's user namespace: 0 base FB_UID_COUNT. */
int fb_container_write_maps(pid_t pid, uid_t base, fb_error_t *err);

/* Mounts the idmapped template and the overlay at sandbox_dir/rootfs on
 * the host, keyed on the user namespace of pid. */
int fb_container_mount_root(const struct fb_container_config *c, pid_t pid, fb_error_t *err);

/* Detaches the host's rootfs and lower mounts of the sandbox (idempotent). */
void fb_container_unmount_root(const struct fb_container_config *c);

#endif
