#include "text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Length of the well-formed sequence at p (1..4), or 0 if ill-formed or
 * truncated by end. */
static size_t seq_len(const unsigned char *p, const unsigned char *end)
{
    unsigned char c = p[0];
    if (c < 0x80)
        return 1;
    size_t n;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if ((size_t)(end - p) < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

bool fb_utf8_valid(const char *buf, size_t len)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    while (p < end) {
        size_t n = seq_len(p, end);
        if (n == 0)
            return false;
        p += n;
    }
    return true;
}

size_t fb_utf8_complete_prefix(const char *buf, size_t len)
{
    const unsigned char *p = (const unsigned char *)buf;
    /* look back at most 3 bytes for a lead byte whose sequence is cut off */
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned char c = p[len - back];
        if ((c & 0xc0) == 0x80)
            continue; /* continuation byte: keep looking for the lead */
        size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > back ? len - back : len;
    }
    return len;
}

char *fb_utf8_lossy(const char *buf, size_t len, size_t *outlen)
{
    /* worst case every byte becomes the 3-byte U+FFFD */
    char *out = malloc(len * 3 + 1);
    if (out == NULL)
        return NULL;
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    size_t o = 0;
    while (p < end) {
        size_t n = seq_len(p, end);
        if (n == 0) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            p++;
            continue;
        }
        memcpy(out + o, p, n);
        o += n;
        p += n;
    }
    out[o] = '\0';
    *outlen = o;
    return out;
}

char *fb_base64_encode(const void *data, size_t len)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *in = data;
    char *out = malloc(4 * ((len + 2) / 3) + 1);
    if (out == NULL)
        return NULL;
    size_t o = 0, i = 0;
    for (; i + 2 < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = tbl[v >> 18];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = tbl[(v >> 6) & 63];
        out[o++] = tbl[v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < len ? (uint32_t)in[i + 1] << 8 : 0);
        out[o++] = tbl[v >> 18];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    out[o] = '\0';
    return out;
}

long fb_base64_decode(const char *in, size_t inlen, char *out, size_t outlen)
{
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < inlen; i++) {
        unsigned char c = (unsigned char)in[i];
        int v;
        if (c >= 'A' && c <= 'Z')
            v = c - 'A';
        else if (c >= 'a' && c <= 'z')
            v = c - 'a' + 26;
        else if (c >= '0' && c <= '9')
            v = c - '0' + 52;
        else if (c == '+')
            v = 62;
        else if (c == '/')
            v = 63;
        else if (c == '=')
            break;
        else
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o >= outlen)
                return -1;
            out[o++] = (char)((acc >> bits) & 0xff);
        }
    }
    return (long)o;
}
