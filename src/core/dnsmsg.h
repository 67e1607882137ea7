/* The little of the DNS wire format the resolver needs: reading a query's
 * question, and answering one with an error code.  Everything else is
 * relayed untouched. */
#ifndef FB_CORE_DNSMSG_H
#define FB_CORE_DNSMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FB_DNS_MSG_MAX 4096 /* queries larger than this are refused */
#define FB_DNS_RCODE_SERVFAIL 2
#define FB_DNS_RCODE_NXDOMAIN 3
#define FB_DNS_RCODE_REFUSED 5

struct fb_dns_question {
    uint16_t id;
    char name[256]; /* lower case, dotted, no trailing dot; "." for the root */
    uint16_t qtype, qclass;
    size_t end; /* offset just past the question */
};

/* Parses a query with exactly one uncompressed question.  0 or -EINVAL
 * for anything else (responses, other opcodes, bad labels, odd bytes). */
int fb_dns_parse_query(const unsigned char *msg, size_t len, struct fb_dns_question *q);

/* Builds the answer to query with rcode and no records in out (cap bytes);
 * returns its length, 0 if it does not fit. */
size_t fb_dns_refusal(const unsigned char *query, const struct fb_dns_question *q, unsigned rcode,
                      unsigned char *out, size_t cap);

/* Collects the IPv4 addresses of the A records in resp's answer section
 * (max at most) with their TTLs.  Returns how many, or -EINVAL for a
 * malformed message. */
int fb_dns_answer_ipv4(const unsigned char *resp, size_t len, uint32_t *ips, uint32_t *ttls, size_t max);

/* Whether resp is a response carrying q's id. */
bool fb_dns_answers(const unsigned char *resp, size_t len, const struct fb_dns_question *q);

#endif
