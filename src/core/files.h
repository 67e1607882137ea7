/* File transfer into and out of a sandbox, through its init. */
#ifndef FB_CORE_FILES_H
#define FB_CORE_FILES_H

#include <stdint.h>

#include "core.h"

#define FB_UPLOAD_MAX (1LL << 30)
/* Spooled bytes (archive uploads and downloads) on the host's disk at any
 * one time, over all requests. */
#define FB_SPOOL_BUDGET (4LL << 30)
#define FB_ARCHIVE_MAX (1LL << 30)

/* Opens path for reading.  *meta gets {"type":"file"|"dir", "size", ...};
 * the returned fd then yields DATA frames (file) or ENTRY frames (dir)
 * until END.  Caller closes the fd and decrefs *meta. */
int fb_files_read_open(struct fb_core *core, const char *tenant, const char *id, const char *path,
                       json_t **meta, fb_error_t *err);

/* Starts writing path (mode, parents created).  The caller sends DATA
 * frames, then calls fb_files_write_finish(). */
int fb_files_write_open(struct fb_core *core, const char *tenant, const char *id, const char *path, int mode,
                        fb_error_t *err);
int fb_files_write_finish(int fd, json_t **out, fb_error_t *err);

/* Removes path; a non-empty directory needs recursive (else conflict). */
int fb_files_delete(struct fb_core *core, const char *tenant, const char *id, const char *path,
                    bool recursive, fb_error_t *err);

/* Writes a tar of the directory at path to out_fd (a file), at most
 * FB_ARCHIVE_MAX bytes (else payload_too_large). */
int fb_archive_create(struct fb_core *core, const char *tenant, const char *id, const char *path, int out_fd,
                      fb_error_t *err);

/* Checks every member of the tar at tar_path against path, then extracts
 * it there.  A bad member rejects the whole archive before anything is
 * written.  *out gets {"path", "entries"}. */
int fb_archive_extract(struct fb_core *core, const char *tenant, const char *id, const char *path,
                       const char *tar_path, json_t **out, fb_error_t *err);

/* Checks every member of the tar at tar_path for extraction under base
 * (the rules of fb_archive_extract: tarfilter.h, and no member below a
 * symlink the archive makes), writing nothing; with max_id >= 0 owners
 * must be 0..max_id too.  400 / 413 naming the member; *count: members. */
int fb_archive_check(const char *tar_path, const char *base, long long max_id, long *count, fb_error_t *err);

#endif
