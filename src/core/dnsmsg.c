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
