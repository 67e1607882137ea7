/* The resolver's view of DNS queries: what it accepts, what it refuses to
 * judge, and the error answers it makes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "core/dnsmsg.h"

/* A query for name (dotted), type qtype, with the given flags and count. */
static size_t build(unsigned char *buf, const char *name, uint16_t qtype, uint16_t flags, uint16_t qdcount)
{
    unsigned char hdr[12] = {
        0xab, 0xcd, (unsigned char)(flags >> 8), (unsigned char)flags, 0, (unsigned char)qdcount};
    memcpy(buf, hdr, 12);
    size_t at = 12;
    const char *p = name;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        buf[at++] = (unsigned char)n;
        memcpy(buf + at, p, n);
        at += n;
        p += n + (dot ? 1 : 0);
    }
    buf[at++] = 0;
    buf[at++] = (unsigned char)(qtype >> 8);
    buf[at++] = (unsigned char)qtype;
    buf[at++] = 0;
    buf[at++] = 1;
    return at;
}

static void test_parses_a_query(void **state)
{
    (void)state;
    unsigned char buf[512];
    size_t len = build(buf, "WWW.Allowed.test", 16, 0x0100, 1);
    struct fb_dns_question q;
    assert_int_equal(fb_dns_parse_query(buf, len, &q), 0);
    assert_string_equal(q.name, "www.allowed.test");
    assert_int_equal(q.qtype, 16);
    assert_int_equal(q.qclass, 1);
    assert_int_equal(q.id, 0xabcd);
    assert_int_equal(q.end, len);
    /* the root */
    len = build(buf, "", 2, 0x0100, 1);
    assert_int_equal(fb_dns_parse_query(buf, len, &q), 0);
    assert_string_equal(q.name, ".");
}

static void test_refuses_what_it_cannot_judge(void **state)
{
    (void)state;
    unsigned char buf[512];
    struct fb_dns_question q;
    size_t len = build(buf, "a.test", 1, 0x8100, 1); /* a response */
    assert_int_equal(fb_dns_parse_query(buf, len, &q), -EINVAL);
    len = build(buf, "a.test", 1, 0x2800, 1); /* opcode UPDATE */
    assert_int_equal(fb_dns_parse_query(buf, len, &q), -EINVAL);
    len = build(buf, "a.test", 1, 0x0100, 2); /* two questions */
    assert_int_equal(fb_dns_parse_query(buf, len, &q), -EINVAL);
    len = build(buf, "a.test", 1, 0x0100, 1);
    assert_int_equal(fb_dns_parse_query(buf, len - 3, &q), -EINVAL); /* truncated */
    buf[12] = 0xc0;                                                  /* a compression pointer */
    assert_int_equal(fb_dns_parse_query(buf, len, &q), -EINVAL);
    len = build(buf, "a\x01z.test", 1, 0x0100, 1); /* a control byte */
    assert_int_equal(fb_dns_parse_query(buf, len, &q), -EINVAL);
    char big[80];
    memset(big, 'x', 64);
    strcpy(big + 64, ".test");
    len = build(buf, big, 1, 0x0100, 1); /* a 64-byte label */
    assert_int_equal(fb_dns_parse_query(buf, len, &q), -EINVAL);
    assert_int_equal(fb_dns_parse_query(buf, 5, &q), -EINVAL);
    assert_int_equal(fb_dns_parse_query(buf, FB_DNS_MSG_MAX + 1, &q), -EINVAL);
}

static void test_refusal_answers_the_question(void **state)
{
    (void)state;
    unsigned char buf[512], out[512];
    size_t len = build(buf, "tunnel.evil.test", 16, 0x0100, 1);
    struct fb_dns_question q;
    assert_int_equal(fb_dns_parse_query(buf, len, &q), 0);
    size_t n = fb_dns_refusal(buf, &q, FB_DNS_RCODE_NXDOMAIN, out, sizeof out);
    assert_int_equal(n, len);
    assert_int_equal(out[0], 0xab);
    assert_true(out[2] & 0x80);         /* a response */
    assert_true(out[2] & 0x01);         /* RD echoed */
    assert_int_equal(out[3] & 0x0f, 3); /* NXDOMAIN */
    assert_int_equal(out[7], 0);        /* no answers */
    assert_memory_equal(out + 12, buf + 12, len - 12);
    assert_true(fb_dns_answers(out, n, &q));
    assert_false(fb_dns_answers(buf, len, &q)); /* the query itself is not an answer */
    assert_int_equal(fb_dns_refusal(buf, &q, 3, out, 10), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parses_a_query),
        cmocka_unit_test(test_refuses_what_it_cannot_judge),
        cmocka_unit_test(test_refusal_answers_the_question),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
