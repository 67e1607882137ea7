#include "dnsmsg.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

#define DNS_HEADER 12

static uint16_t get16(const unsigned char *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

int fb_dns_parse_query(const unsigned char *msg, size_t len, struct fb_dns_question *q)
{
    memset(q, 0, sizeof *q);
    if (len < DNS_HEADER + 5 || len > FB_DNS_MSG_MAX)
        return -EINVAL;
    uint16_t flags = get16(msg + 2);
    /* a query (QR 0), opcode QUERY, exactly one question */
    if ((flags & 0x8000) || ((flags >> 11) & 0xf) != 0 || get16(msg + 4) != 1)
        return -EINVAL;
    size_t at = DNS_HEADER, out = 0;
    for (;;) {
        if (at >= len)
            return -EINVAL;
        unsigned lab = msg[at++];
        if (lab == 0)
            break;
        if (lab > 63 || at + lab > len) /* no compression in a question */
            return -EINVAL;
        if (out + lab + 1 >= sizeof q->name)
            return -EINVAL;
        if (out > 0)
            q->name[out++] = '.';
        for (unsigned i = 0; i < lab; i++) {
            unsigned char c = msg[at + i];
            /* names are matched against policies: only printable, no dots
             * inside a label, compared case-insensitively */
            if (c <= 0x20 || c >= 0x7f || c == '.')
                return -EINVAL;
            q->name[out++] = (char)tolower(c);
        }
        at += lab;
    }
    if (at + 4 > len)
        return -EINVAL;
    q->qtype = get16(msg + at);
    q->qclass = get16(msg + at + 2);
    q->end = at + 4;
    q->id = get16(msg);
    if (out == 0)
        q->name[0] = '.'; /* the root */
    return 0;
}

size_t fb_dns_refusal(const unsigned char *query, const struct fb_dns_question *q, unsigned rcode,
                      unsigned char *out, size_t cap)
{
    if (q->end > cap || q->end < DNS_HEADER)
        return 0;
    memcpy(out, query, q->end);
    /* QR, the query's opcode and RD kept, RA set, the rcode given */
    out[2] = (unsigned char)(0x80 | (query[2] & 0x79));
    out[3] = (unsigned char)(0x80 | (rcode & 0xf));
    out[4] = 0, out[5] = 1;                                    /* one question */
    out[6] = out[7] = out[8] = out[9] = out[10] = out[11] = 0; /* no records */
    return q->end;
}

bool fb_dns_answers(const unsigned char *resp, size_t len, const struct fb_dns_question *q)
{
    if (len < DNS_HEADER || get16(resp) != q->id || !(resp[2] & 0x80))
        return false;
    return true;
}

/* Skips a possibly compressed name at *at. */
static int skip_name(const unsigned char *m, size_t len, size_t *at)
{
    for (int labels = 0; labels < 128; labels++) {
        if (*at >= len)
            return -EINVAL;
        unsigned c = m[*at];
        if (c == 0) {
            *at += 1;
            return 0;
        }
        if ((c & 0xc0) == 0xc0) { /* a pointer ends the name */
            if (*at + 2 > len)
                return -EINVAL;
            *at += 2;
            return 0;
        }
        if (c > 63 || *at + 1 + c > len)
            return -EINVAL;
        *at += 1 + c;
    }
    return -EINVAL;
}

int fb_dns_answer_ipv4(const unsigned char *resp, size_t len, uint32_t *ips, uint32_t *ttls, size_t max)
{
    if (len < DNS_HEADER)
        return -EINVAL;
    unsigned qd = get16(resp + 4), an = get16(resp + 6);
    size_t at = DNS_HEADER, n = 0;
    for (unsigned i = 0; i < qd; i++) {
        if (skip_name(resp, len, &at) < 0 || at + 4 > len)
            return -EINVAL;
        at += 4;
    }
    for (unsigned i = 0; i < an; i++) {
        if (skip_name(resp, len, &at) < 0 || at + 10 > len)
            return -EINVAL;
        uint16_t type = get16(resp + at), class = get16(resp + at + 2);
        uint32_t ttl = (uint32_t)get16(resp + at + 4) << 16 | get16(resp + at + 6);
        size_t rdlen = get16(resp + at + 8);
        at += 10;
        if (at + rdlen > len)
            return -EINVAL;
        if (type == 1 && class == 1 && rdlen == 4 && n < max) {
            ips[n] = (uint32_t)resp[at] << 24 | (uint32_t)resp[at + 1] << 16 | (uint32_t)resp[at + 2] << 8 |
                     resp[at + 3];
            ttls[n] = ttl;
            n++;
        }
        at += rdlen;
    }
    return (int)n;
}
