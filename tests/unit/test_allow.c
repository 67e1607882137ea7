/* Allowlist entries: parsing, canonical form, name matching, and the
 * ranges that can never be listed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "common/cleanup.h"
#include "core/allow.h"

static struct fb_allow parse_ok(const char *text)
{
    struct fb_allow a;
    cleanup_error fb_error_t err = NULL;
    if (fb_allow_parse(text, &a, &err) != 0)
        fail_msg("refused %s: %s", text, err->msg);
    return a;
}

static void test_canonical_forms(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"PyPI.org", "pypi.org"},
        {"*.GitHub.com:443", "*.github.com:443"},
        {"203.0.113.77/24", "203.0.113.0/24"},
        {"198.51.100.7", "198.51.100.7"},
        {"198.51.100.7/32:22", "198.51.100.7:22"},
        {"files_1.example.org", "files_1.example.org"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct fb_allow a = parse_ok(cases[i][0]);
        char out[FB_ALLOW_TEXT_MAX];
        fb_allow_format(&a, out, sizeof out);
        assert_string_equal(out, cases[i][1]);
        /* the canonical form parses to itself */
        struct fb_allow b = parse_ok(out);
        char again[FB_ALLOW_TEXT_MAX];
        fb_allow_format(&b, again, sizeof again);
        assert_string_equal(again, out);
    }
}

static void test_matching(void **state)
{
    (void)state;
    struct fb_allow exact = parse_ok("example.com");
    struct fb_allow wild = parse_ok("*.example.com");
    struct fb_allow cidr = parse_ok("203.0.113.0/24");
    assert_true(fb_allow_matches(&exact, "example.com"));
    assert_false(fb_allow_matches(&exact, "www.example.com"));
    assert_false(fb_allow_matches(&exact, "example.com.evil.test"));
    assert_true(fb_allow_matches(&wild, "www.example.com"));
    assert_true(fb_allow_matches(&wild, "a.b.example.com"));
    assert_false(fb_allow_matches(&wild, "example.com"));
    assert_false(fb_allow_matches(&wild, "badexample.com"));
    assert_false(fb_allow_matches(&wild, "example.com.evil.test"));
    assert_false(fb_allow_matches(&cidr, "203.0.113.1"));
}

static void test_refusals_and_blocked(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",         "com",        "-x.com",     "x-.com",      "a..b", "a b.com",   "x.com:0", "x.com:65536",
        "x.com:+1", "1.2.3.4/33", "1.2.3.4/-1", "2001:db8::1", "*.",   "*.*.x.com", "x.com:",  "é.com"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct fb_allow a;
        cleanup_error fb_error_t err = NULL;
        if (fb_allow_parse(bad[i], &a, &err) == 0)
            fail_msg("accepted \"%s\"", bad[i]);
        assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    }
    static const char *const blocked[] = {"10.1.2.3",  "169.254.169.254", "192.168.0.0/16", "0.0.0.0/0",
                                          "127.0.0.1", "224.0.0.1",       "100.64.0.1",     "172.31.255.255"};
    for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++) {
        struct fb_allow a = parse_ok(blocked[i]);
        if (!fb_allow_blocked(&a))
            fail_msg("%s not seen as blocked", blocked[i]);
    }
    struct fb_allow pub = parse_ok("203.0.113.0/24");
    assert_false(fb_allow_blocked(&pub));
    struct fb_allow lab = parse_ok("198.18.0.0/15");
    assert_false(fb_allow_blocked(&lab));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_canonical_forms),
        cmocka_unit_test(test_matching),
        cmocka_unit_test(test_refusals_and_blocked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
