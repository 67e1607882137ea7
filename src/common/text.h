/* UTF-8 and base64 for carrying process output in JSON. */
#ifndef FB_COMMON_TEXT_H
#define FB_COMMON_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* Whether buf[0..len) is well-formed UTF-8 (no overlongs, surrogates or
 * code points above U+10FFFF).  NUL bytes count as valid. */
bool fb_utf8_valid(const char *buf, size_t len);

/* Length of the longest prefix of buf that does not end inside a
 * multi-byte sequence which the next bytes could still complete. */
size_t fb_utf8_complete_prefix(const char *buf, size_t len);

/* A heap copy with every ill-formed sequence replaced by U+FFFD; NULL on
 * allocation failure.  *outlen gets the length. */
char *fb_utf8_lossy(const char *buf, size_t len, size_t *outlen);

/* Standard base64 with padding, NUL-terminated heap string; NULL on
 * allocation failure. */
char *fb_base64_encode(const void *data, size_t len);

/* Decodes standard base64 (padding optional) into out (outlen bytes);
 * returns the decoded length or -1 on bad input or overflow. */
long fb_base64_decode(const char *in, size_t inlen, char *out, size_t outlen);

#endif
