/* Signed share tokens for "ports in" URLs: pure functions (no I/O), so
 * they can be unit-tested.  A token is "<expiry>.<hex HMAC-SHA256>" over
 * "tenant\nid\nport\nexpiry" with the daemon's share key; it names no
 * tenant or sandbox itself, the URL it travels in does. */
#ifndef FB_CORE_SHARE_H
#define FB_CORE_SHARE_H

#include <stdint.h>

#define FB_SHARE_KEY_LEN 32
/* 19 digits, '.', 64 hex digits, NUL, rounded up */
#define FB_SHARE_TOKEN_MAX 96

/* Writes the token of (tenant, id, port, expiry) to out.  0, or -1 when
 * the HMAC cannot be computed. */
int fb_share_sign(const unsigned char key[FB_SHARE_KEY_LEN], const char *tenant, const char *id,
                  unsigned port, int64_t expiry, char out[FB_SHARE_TOKEN_MAX]);

/* 0 and *expiry when token is well formed, signed for exactly (tenant, id,
 * port) and not expired at now_s; -1 otherwise.  The signature is compared
 * in constant time. */
int fb_share_check(const unsigned char key[FB_SHARE_KEY_LEN], const char *tenant, const char *id,
                   unsigned port, const char *token, int64_t now_s, int64_t *expiry);

#endif
