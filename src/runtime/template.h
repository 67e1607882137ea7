/* Producing template root filesystems on the host. */
#ifndef FB_RUNTIME_TEMPLATE_H
#define FB_RUNTIME_TEMPLATE_H

#include "../common/error.h"

/* Runs debootstrap (bookworm, minbase, with python3) into dest, a path that
 * must not exist yet.  Progress lines go to the daemon's stderr.  The
 * downloaded packages are kept in cache_dir so a rebuild is fast. */
int fb_template_debootstrap(const char *dest, const char *cache_dir, fb_error_t *err);

/* Extracts a root-filesystem tarball (plain or compressed) into dest, which
 * must not exist yet.  Owners and modes are kept; entries that would land
 * outside dest, and device nodes, are refused or skipped.  On failure dest
 * is removed. */
int fb_template_extract(const char *tar_path, const char *dest, fb_error_t *err);

#endif
