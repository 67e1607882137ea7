/* OCI-image-spec layer tars of a directory tree, both directions: written
 * from an overlay upper dir (whiteouts and opaque dirs converted to
 * ".wh." names, owners moved to the uids inside) or a template rootfs,
 * and unpacked into an upper dir again.  libarchive reads and writes the
 * tar; the host never follows a link in the tree. */
#ifndef FB_CORE_LAYERTAR_H
#define FB_CORE_LAYERTAR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/error.h"

/* members of one layer tar */
#define FB_LAYER_ENTRIES_MAX 1000000

struct fb_layer_opts {
    /* host uid of root inside: owners in [uid_from, uid_from + 65536) are
     * written as the uid inside, any other as 65534 (nobody) */
    uid_t uid_from;
    bool overlay;      /* dir_fd is an overlay upper dir: convert its whiteouts */
    int64_t max_bytes; /* the tar may not grow past this (FB_ERR_TOO_LARGE) */
};

/* Writes the tree below dir_fd as a layer tar to out_fd (names relative,
 * sorted, so the same tree gives the same bytes) and reports its size and
 * lowercase hex sha256.  Regular files, dirs, symlinks and hardlinks are
 * kept with modes, owners, mtimes and user.* / security.capability xattrs;
 * fifos, sockets and devices (other than whiteouts) are left out. */
int fb_layer_tar_write(int dir_fd, const struct fb_layer_opts *o, int out_fd, int64_t *size, char sha256[65],
                       fb_error_t *err);

/* Checks the layer tar at tar_path whole (tarfilter rules, whiteout names,
 * owners < 65536, entry count, no member below a symlink an earlier member
 * made), then unpacks it into dest (an existing
 * upper dir, host path) in a child chrooted there: owners move up by
 * uid_base, ".wh.NAME" becomes a 0:0 character device, ".wh..wh..opq"
 * the xattr trusted.overlay.opaque=y.  FB_ERR_BAD_REQUEST for a bad tar,
 * FB_ERR_TOO_LARGE when dest's filesystem fills up.  On failure dest holds
 * a partial tree: the caller discards it. */
int fb_layer_tar_extract(const char *tar_path, const char *dest, uid_t uid_base, fb_error_t *err);

/* The same for an image layer (owners kept as they are), except that
 * device nodes directly below dev/ are dropped: root filesystems turned
 * into images carry them, and a sandbox gets its own /dev. */
int fb_layer_tar_extract_image(const char *tar_path, const char *dest, fb_error_t *err);

struct archive;

/* Opens a: pax tar written to out_fd, names as bytes.  a is the caller's
 * (archive_write_free). */
int fb_tar_open_fd(struct archive *a, int out_fd, fb_error_t *err);

/* Adds a regular file member name (mode 0644, mtime_s) holding size bytes
 * read from fd's start, or len bytes of data when fd < 0. */
int fb_tar_put(struct archive *a, const char *name, int64_t mtime_s, int fd, int64_t size, const void *data,
               size_t len, fb_error_t *err);

/* sha256 (lowercase hex) and size of the rest of fd from its current
 * offset. */
int fb_sha256_fd(int fd, char hex[65], int64_t *size, fb_error_t *err);

#endif
