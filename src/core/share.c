/* Share tokens: sign and check.  See share.h. */
#include "share.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <gnutls/crypto.h>

int fb_share_sign(const unsigned char key[FB_SHARE_KEY_LEN], const char *tenant, const char *id,
                  unsigned port, int64_t expiry, char out[FB_SHARE_TOKEN_MAX])
{
    char msg[512];
    int n = snprintf(msg, sizeof msg, "%s\n%s\n%u\n%lld", tenant, id, port, (long long)expiry);
    if (n < 0 || (size_t)n >= sizeof msg || expiry < 0)
        return -1;
    unsigned char mac[32];
    if (gnutls_hmac_fast(GNUTLS_MAC_SHA256, key, FB_SHARE_KEY_LEN, msg, (size_t)n, mac) < 0)
        return -1;
    int off = snprintf(out, FB_SHARE_TOKEN_MAX, "%lld.", (long long)expiry);
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof mac; i++) {
        out[off++] = hex[mac[i] >> 4];
        out[off++] = hex[mac[i] & 15];
    }
    out[off] = '\0';
    return 0;
}

/* Whether a and b (same length) are equal, in time independent of where
 * they differ. */
static bool equal_ct(const char *a, const char *b, size_t n)
{
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

int fb_share_check(const unsigned char key[FB_SHARE_KEY_LEN], const char *tenant, const char *id,
                   unsigned port, const char *token, int64_t now_s, int64_t *expiry)
{
    /* only the canonical form: digits without a leading zero, '.', 64
     * lowercase hex digits; anything else is refused before any HMAC */
    size_t len = strnlen(token, FB_SHARE_TOKEN_MAX);
    const char *dot = memchr(token, '.', len);
    if (dot == NULL || dot == token || dot - token > 18 || token[0] == '0' ||
        len - (size_t)(dot - token) != 65)
        return -1;
    long long e = 0;
    for (const char *p = token; p < dot; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        e = e * 10 + (*p - '0');
    }
    if (e <= now_s)
        return -1;
    char want[FB_SHARE_TOKEN_MAX];
    if (fb_share_sign(key, tenant, id, port, e, want) < 0 || strlen(want) != len ||
        !equal_ct(want, token, len))
        return -1;
    *expiry = e;
    return 0;
}
