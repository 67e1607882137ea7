#include "sniff.h"

#include <ctype.h>
#include <stdint.h>
#include <string.h>

static size_t be16(const unsigned char *p)
{
    return (size_t)p[0] << 8 | p[1];
}

/* A host name as the policy compares it: letters, digits, '-', '_', '.';
 * stored lower case.  Anything else (IP literals included) is no name. */
static int take_name(const unsigned char *s, size_t n, char *name, size_t cap)
{
    if (n == 0 || n >= cap || n > 253)
        return FB_SNIFF_INVALID;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (!(isalnum(c) || c == '-' || c == '_' || c == '.'))
            return FB_SNIFF_INVALID;
        name[i] = (char)tolower(c);
    }
    name[n] = '\0';
    if (name[n - 1] == '.') /* a fully qualified form */
        name[n - 1] = '\0';
    return name[0] != '\0' ? FB_SNIFF_FOUND : FB_SNIFF_INVALID;
}

int fb_sniff_tls_sni(const unsigned char *buf, size_t len, char *name, size_t cap)
{
    if (len < 5)
        return FB_SNIFF_MORE;
    if (buf[0] != 0x16 || buf[1] != 3) /* handshake record, TLS */
        return FB_SNIFF_INVALID;
    size_t rec = be16(buf + 3);
    if (rec < 4 || rec > 16384)
        return FB_SNIFF_INVALID;
    if (len < 5 + rec)
        return FB_SNIFF_MORE;
    const unsigned char *p = buf + 5, *end = buf + 5 + rec;
    if (p[0] != 1) /* ClientHello */
        return FB_SNIFF_INVALID;
    size_t hs = (size_t)p[1] << 16 | be16(p + 2);
    p += 4;
    if (hs > (size_t)(end - p)) /* spread over several records: not judged */
        return FB_SNIFF_INVALID;
    end = p + hs;
    if (end - p < 2 + 32 + 1)
        return FB_SNIFF_INVALID;
    p += 2 + 32; /* version, random */
    size_t sid = p[0];
    p += 1;
    if ((size_t)(end - p) < sid + 2)
        return FB_SNIFF_INVALID;
    p += sid;
    size_t suites = be16(p);
    p += 2;
    if ((size_t)(end - p) < suites + 1)
        return FB_SNIFF_INVALID;
    p += suites;
    size_t comp = p[0];
    p += 1;
    if ((size_t)(end - p) < comp + 2)
        return FB_SNIFF_INVALID;
    p += comp;
    size_t exts = be16(p);
    p += 2;
    if ((size_t)(end - p) < exts)
        return FB_SNIFF_INVALID;
    end = p + exts;
    while (end - p >= 4) {
        size_t type = be16(p), elen = be16(p + 2);
        p += 4;
        if ((size_t)(end - p) < elen)
            return FB_SNIFF_INVALID;
        if (type == 0) { /* server_name: a list; the host_name entry */
            const unsigned char *q = p, *qend = p + elen;
            if (qend - q < 2 || be16(q) != elen - 2)
                return FB_SNIFF_INVALID;
            q += 2;
            while (qend - q >= 3) {
                unsigned kind = q[0];
                size_t nlen = be16(q + 1);
                q += 3;
                if ((size_t)(qend - q) < nlen)
                    return FB_SNIFF_INVALID;
                if (kind == 0)
                    return take_name(q, nlen, name, cap);
                q += nlen;
            }
            return FB_SNIFF_INVALID;
        }
        p += elen;
    }
    return FB_SNIFF_INVALID; /* no server name */
}

int fb_sniff_http_host(const unsigned char *buf, size_t len, char *name, size_t cap)
{
    /* the headers end at the first empty line */
    const unsigned char *hend = NULL;
    for (size_t i = 0; i + 3 < len; i++)
        if (memcmp(buf + i, "\r\n\r\n", 4) == 0) {
            hend = buf + i + 2;
            break;
        }
    if (hend == NULL)
        return len >= 16384 ? FB_SNIFF_INVALID : FB_SNIFF_MORE;
    const unsigned char *line = buf;
    /* the request line must look like HTTP/1.x */
    const unsigned char *eol = memchr(line, '\n', (size_t)(hend - line));
    if (eol == NULL || eol - line < 14 || memcmp(eol - 9, "HTTP/1.", 7) != 0)
        return FB_SNIFF_INVALID;
    int found = FB_SNIFF_INVALID;
    for (line = eol + 1; line < hend;) {
        eol = memchr(line, '\n', (size_t)(hend - line));
        if (eol == NULL)
            break;
        size_t n = (size_t)(eol - line);
        if (n > 0 && line[n - 1] == '\r')
            n--;
        if (n > 5 && strncasecmp((const char *)line, "host:", 5) == 0) {
            if (found != FB_SNIFF_INVALID) /* two Host headers: ambiguous */
                return FB_SNIFF_INVALID;
            const unsigned char *v = line + 5, *vend = line + n;
            while (v < vend && (*v == ' ' || *v == '\t'))
                v++;
            while (vend > v && (vend[-1] == ' ' || vend[-1] == '\t'))
                vend--;
            const unsigned char *colon = memchr(v, ':', (size_t)(vend - v));
            if (colon != NULL)
                vend = colon;
            found = take_name(v, (size_t)(vend - v), name, cap);
            if (found != FB_SNIFF_FOUND)
                return FB_SNIFF_INVALID;
        }
        line = eol + 1;
    }
    return found;
}
