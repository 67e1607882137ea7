/* The egress proxy's reading of TLS server names and HTTP Hosts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "core/sniff.h"

/* A minimal ClientHello carrying server_name sni (NULL: no extension). */
static size_t client_hello(unsigned char *b, const char *sni)
{
    unsigned char ext[300];
    size_t e = 0;
    if (sni != NULL) {
        size_t n = strlen(sni);
        unsigned char sn[] = {0,
                              0,
                              (unsigned char)((n + 5) >> 8),
                              (unsigned char)(n + 5),
                              (unsigned char)((n + 3) >> 8),
                              (unsigned char)(n + 3),
                              0,
                              (unsigned char)(n >> 8),
                              (unsigned char)n};
        memcpy(ext, sn, sizeof sn);
        memcpy(ext + sizeof sn, sni, n);
        e = sizeof sn + n;
    }
    unsigned char body[512];
    size_t at = 0;
    body[at++] = 3, body[at++] = 3; /* version */
    memset(body + at, 7, 32), at += 32;
    body[at++] = 0;                                                    /* session id */
    body[at++] = 0, body[at++] = 2, body[at++] = 0x13, body[at++] = 1; /* one suite */
    body[at++] = 1, body[at++] = 0;                                    /* null compression */
    body[at++] = (unsigned char)(e >> 8), body[at++] = (unsigned char)e;
    memcpy(body + at, ext, e), at += e;
    size_t hs = at + 4;
    b[0] = 0x16, b[1] = 3, b[2] = 1, b[3] = (unsigned char)(hs >> 8), b[4] = (unsigned char)hs;
    b[5] = 1, b[6] = 0, b[7] = (unsigned char)(at >> 8), b[8] = (unsigned char)at;
    memcpy(b + 9, body, at);
    return 9 + at;
}

static void test_tls_server_name(void **state)
{
    (void)state;
    unsigned char b[600];
    char name[256];
    size_t n = client_hello(b, "WWW.Allowed.Test");
    assert_int_equal(fb_sniff_tls_sni(b, n, name, sizeof name), FB_SNIFF_FOUND);
    assert_string_equal(name, "www.allowed.test");
    /* partial records ask for more; every prefix is handled */
    for (size_t k = 0; k < n; k++)
        assert_int_equal(fb_sniff_tls_sni(b, k, name, sizeof name), FB_SNIFF_MORE);
    n = client_hello(b, NULL);
    assert_int_equal(fb_sniff_tls_sni(b, n, name, sizeof name), FB_SNIFF_INVALID);
    n = client_hello(b, "bad name");
    assert_int_equal(fb_sniff_tls_sni(b, n, name, sizeof name), FB_SNIFF_INVALID);
    n = client_hello(b, "x.test");
    b[5] = 2; /* not a ClientHello */
    assert_int_equal(fb_sniff_tls_sni(b, n, name, sizeof name), FB_SNIFF_INVALID);
    const unsigned char http[] = "GET / HTTP/1.1\r\n";
    assert_int_equal(fb_sniff_tls_sni(http, sizeof http - 1, name, sizeof name), FB_SNIFF_INVALID);
    /* a lying length inside the extensions */
    n = client_hello(b, "x.test");
    b[n - 7 - 2] = 0xff;
    assert_int_equal(fb_sniff_tls_sni(b, n, name, sizeof name), FB_SNIFF_INVALID);
}

static void test_http_host(void **state)
{
    (void)state;
    char name[256];
    const char *ok = "GET /x HTTP/1.1\r\nUser-Agent: t\r\nHOST:  Allowed.Test:8080 \r\n\r\n";
    assert_int_equal(fb_sniff_http_host((const unsigned char *)ok, strlen(ok), name, sizeof name),
                     FB_SNIFF_FOUND);
    assert_string_equal(name, "allowed.test");
    const char *more = "GET /x HTTP/1.1\r\nHost: a.test\r\n";
    assert_int_equal(fb_sniff_http_host((const unsigned char *)more, strlen(more), name, sizeof name),
                     FB_SNIFF_MORE);
    static const char *const bad[] = {
        "GET /x HTTP/1.1\r\n\r\n",                                 /* no Host */
        "GET /x HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", /* two */
        "GET /x HTTP/1.1\r\nHost: a test\r\n\r\n",                 /* not a name */
        "SSH-2.0-OpenSSH\r\n\r\n",                                 /* not HTTP */
        "GET /x HTTP/1.1\r\nHost: \r\n\r\n",                       /* empty */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(fb_sniff_http_host((const unsigned char *)bad[i], strlen(bad[i]), name, sizeof name),
                         FB_SNIFF_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tls_server_name),
        cmocka_unit_test(test_http_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
