/* Decides whether one entry of an uploaded tar archive may be extracted.
 * Archives are checked whole before anything is written, so a bad entry
 * anywhere rejects the upload with nothing changed. */
#ifndef FB_CORE_TARFILTER_H
#define FB_CORE_TARFILTER_H

#include <stddef.h>
#include <sys/types.h>

#include "../common/error.h"

enum fb_tar_type {
    FB_TAR_FILE = 1,
    FB_TAR_DIR,
    FB_TAR_SYMLINK,
    FB_TAR_HARDLINK,
    FB_TAR_OTHER, /* devices, fifos, sockets: always refused */
};

struct fb_tar_entry {
    const char *name; /* member name as stored in the archive */
    enum fb_tar_type type;
    const char *linkname; /* symlink target or hardlink source, else NULL */
    mode_t mode;
    long long size;
};

struct archive_entry;
/* The kind of a libarchive entry (a hardlink whatever its file type). */
enum fb_tar_type fb_tar_type_of(struct archive_entry *ae);

/* Checks one entry for extraction under base (a normalised absolute sandbox
 * path).  Refused with FB_ERR_BAD_REQUEST naming the member: absolute names,
 * ".." escaping base, NUL or over-long names, device nodes / fifos /
 * sockets, absolute symlink targets, symlink targets that climb above base
 * from the link's own directory, hardlinks whose source is outside base,
 * negative sizes.  On success the full sandbox path is written to out. */
int fb_tar_entry_check(const char *base, const struct fb_tar_entry *e, char *out, size_t outlen,
                       fb_error_t *err);

#endif
