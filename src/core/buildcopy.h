/* COPY and ADD of a template build: the files an instruction adds, taken
 * from an uploaded build context tar and written as an OCI layer tar.  The
 * context is hostile input and is never extracted on the host: it is read
 * twice as a stream (names first, then data) and only re-packed. */
#ifndef FB_CORE_BUILDCOPY_H
#define FB_CORE_BUILDCOPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/error.h"

#define FB_BUILDCOPY_ENTRIES_MAX 1000000 /* members of the context, and of the layer */
#define FB_BUILDCOPY_SRCS_MAX 256

struct fb_buildcopy_stats {
    uint64_t entries; /* members written to the layer */
    uint64_t bytes;   /* file content bytes written */
};

/* Writes to out_tar (created or truncated; removed if it fails after that) an
 * uncompressed pax layer tar with what `COPY srcs dest` (ADD when add)
 * adds, read from context_tar (tar or tar.gz).  dest is absolute, as
 * fb_dockerfile_parse gives it; it is a directory when it ends in '/',
 * when there are several sources or matches, or when a source is a
 * directory (whose contents are copied).  Sources are relative to the
 * context root (a leading '/' too), may be globs, "." is the whole
 * context; .dockerignore at the context root is honoured.  Every member
 * gets uid:gid, keeps its mode (setuid bits included) and mtime; the
 * directories above dest are added as 0755 0:0, dest itself as 0755
 * uid:gid.  Symlinks are copied, never followed; a hardlink whose target
 * is copied too stays a hardlink, else it becomes a regular file.  With
 * add, a source file that is a tar (gzip, bzip2 or xz) is unpacked into
 * dest instead.  FB_ERR_BAD_REQUEST for a missing source, ".." above the
 * root, a URL, device nodes / fifos / sockets, names starting with ".wh."
 * or members below a symlink, and a bad context or archive;
 * FB_ERR_TOO_LARGE past FB_BUILDCOPY_ENTRIES_MAX.  stats may be NULL. */
int fb_buildcopy_layer(const char *context_tar, const char *const *srcs, size_t nsrcs, const char *dest,
                       uid_t uid, gid_t gid, bool add, const char *out_tar, struct fb_buildcopy_stats *stats,
                       fb_error_t *err);

#endif
