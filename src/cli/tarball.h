/* Tar streams for `forkbox cp` of directories (libarchive). */
#ifndef FB_CLI_TARBALL_H
#define FB_CLI_TARBALL_H

#include <stdio.h>

#include "common/error.h"

/* An anonymous read-write temp file under $TMPDIR (or /tmp), already
 * unlinked.  Returns NULL with *err filled. */
FILE *fb_temp_file(fb_error_t *err);

/* Writes the tree under dir to out as a pax tar, members named relative to
 * dir, owned by root.  Symlinks are stored, not followed; device nodes,
 * fifos and sockets are skipped with a warning (the API refuses them).
 * *count receives the number of members. */
int fb_tar_create(const char *dir, FILE *out, long *count, fb_error_t *err);

/* Extracts the tar read from fd under dest (created if missing).  Members
 * that are absolute, contain "..", or lead through a symlink are refused;
 * permissions are kept without set-id bits and ownership is the caller's. */
int fb_tar_extract(int fd, const char *dest, long *count, fb_error_t *err);

#endif
