/* Sandbox paths as clients send them.  These are pure string checks; the
 * real containment is done by forkbox-init resolving every path with
 * RESOLVE_IN_ROOT inside the sandbox.  Checking here too gives clients a
 * clear 400 instead of an odd result. */
#ifndef FB_CORE_PATH_H
#define FB_CORE_PATH_H

#include <stddef.h>

#include "../common/error.h"

#define FB_PATH_MAX 4096

/* Normalises a client path into out (outlen bytes): must be absolute,
 * non-empty, no NUL, at most FB_PATH_MAX bytes; "." and empty components
 * are dropped; ".." pops a component but never above "/" (so "/../etc" is
 * "/etc", as the kernel would resolve it at the root).  FB_ERR_BAD_REQUEST
 * on anything else. */
int fb_path_normalize(const char *in, char *out, size_t outlen, fb_error_t *err);

/* Same for a counted string (a decoded query parameter or a JSON string),
 * so that an embedded NUL is refused instead of silently cutting the path. */
int fb_path_normalize_len(const char *in, size_t inlen, char *out, size_t outlen, fb_error_t *err);

/* Joins a normalised base directory and a relative archive member name
 * into out, refusing (FB_ERR_BAD_REQUEST) absolute names and any name whose
 * ".." would climb above base. */
int fb_path_join_member(const char *base, const char *member, char *out, size_t outlen, fb_error_t *err);

#endif
