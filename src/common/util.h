/* Small helpers shared by every host program. */
#ifndef FB_COMMON_UTIL_H
#define FB_COMMON_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

/* Wall-clock and monotonic time in milliseconds. */
int64_t fb_now_ms(void);
int64_t fb_mono_ms(void);
int64_t fb_mono_us(void);

/* Formats epoch milliseconds as RFC 3339 UTC ("2026-11-29T10:00:00.123Z")
 * into buf (at least 32 bytes). */
void fb_time_format(int64_t ms, char *buf, size_t len);

/* Fills buf with 2*nbytes lowercase hex characters of kernel randomness and
 * a NUL (buf must hold 2*nbytes+1).  Returns 0 or -errno. */
int fb_random_hex(char *buf, size_t nbytes);

/* Bounded copy: copies src into dst (dstlen bytes, NUL-terminated).
 * Returns 0, or -ENAMETOOLONG when src does not fit (dst then holds ""). */
int fb_strlcpy(char *dst, const char *src, size_t dstlen);

/* snprintf that reports truncation as -ENAMETOOLONG instead of silently
 * cutting; returns 0 on success. */
int fb_snprintf(char *dst, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* mkdir -p with mode for each created component. Returns 0 or -errno. */
int fb_mkdir_p(const char *path, mode_t mode);

/* Writes all of buf to fd, retrying short writes and EINTR.  0 or -errno. */
int fb_write_all(int fd, const void *buf, size_t len);

/* Writes len bytes to path (created with mode, truncated, O_NOFOLLOW).
 * Returns 0 or -errno. */
int fb_write_file(const char *path, const void *data, size_t len, mode_t mode);

/* Reads at most max bytes of path into a NUL-terminated heap buffer (*out,
 * caller frees).  Returns 0, -EFBIG if longer than max, or -errno. */
int fb_read_file(const char *path, size_t max, char **out, size_t *outlen);

/* Removes a directory tree without following symlinks and without
 * crossing into other mounts. Absent path is not an error. */
int fb_rm_rf(const char *path);

/* Removes (as fb_rm_rf) every entry of dir whose name starts with prefix:
 * what an interrupted run left.  Absent dir is not an error. */
void fb_rm_prefixed(const char *dir, const char *prefix);

/* Size in bytes of a tree (no symlinks followed). */
int64_t fb_du(const char *path);

#endif
