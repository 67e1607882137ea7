/* Shared by buildcopy.c (reading the context, choosing what to copy) and
 * buildcopy_write.c (writing the layer). */
#ifndef FB_CORE_BUILDCOPY_INT_H
#define FB_CORE_BUILDCOPY_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/error.h"
#include "buildcopy.h"

struct archive;
struct bc_out;

/* one member of the context (the last one of its name), or a directory
 * only implied by the names below it */
struct bc_ent {
    char *name; /* cleaned, "a/b" */
    char type;  /* 'f' file, 'd' dir, 'i' implied dir, 'l' symlink, 'h' hardlink, 's' special */
    bool ignored;
    bool spool; /* a hardlink to it is copied without it: keep its data */
    long ord;   /* position in the context; -1 when implied */
    mode_t perm;
    int64_t mtime;
    long mtime_ns;
    int64_t size;
    char *link; /* symlink target as stored; hardlink target cleaned */
    struct bc_out **outs;
    size_t nouts;
    int64_t spool_off;
};

/* one member of the layer */
struct bc_out {
    char *name;       /* in the layer, "app/x" */
    struct bc_ent *e; /* NULL: a directory made up for dest */
    size_t seq;       /* later wins for the same name */
    bool dir;
    bool archive;     /* ADD: unpack e into root if it is a tar */
    const char *root; /* where to unpack */
    mode_t perm;      /* made-up dirs */
    uid_t uid;
    gid_t gid;
};

struct bc {
    const char *op; /* "COPY" or "ADD", for messages */
    uid_t uid;
    gid_t gid;
    struct bc_ent *ents;
    size_t n;
    struct bc_ent **by_ord; /* context position -> entry, NULL for ones that do not count */
    size_t nord;
    struct bc_out *outs;
    size_t nouts;
    struct archive *w;
    json_t *file_mark; /* "f", what an ADD archive's regular files are noted as */
    char tmpdir[4097];
    int spool_fd;
    int64_t spool_len;
    char *buf;
    struct fb_buildcopy_stats st;
    fb_error_t *err;
};

/* Tar formats and the filters for a context (gzip) or, with
 * archive_filters, an ADD archive (gzip, bzip2, xz): in process only,
 * never through an external program. */
void bc_tar_support(struct archive *a, bool archive_filters);

/* Opens the context at fd as a streamed tar. */
struct archive *bc_open_tar(int fd, fb_error_t *err);

/* Writes the layer: the directories of the plan, then one more streaming
 * pass over context_fd for the rest. */
int bc_write(struct bc *c, int context_fd, int out_fd);

/* member name shown in a message: printable, cut */
const char *bc_show(const char *name, char *buf, size_t len);

#endif
