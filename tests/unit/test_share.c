/* Share tokens of ports in: what is signed, and that every change to a
 * token or to what it is checked against is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <gnutls/crypto.h>

#include "core/share.h"

static const unsigned char key[FB_SHARE_KEY_LEN] = "0123456789abcdef0123456789abcdef";
#define NOW 1800000000LL

static void test_format_and_mac(void **state)
{
    (void)state;
    char tok[FB_SHARE_TOKEN_MAX];
    assert_int_equal(fb_share_sign(key, "default", "sbx_00", 8000, NOW + 60, tok), 0);
    /* the MAC is HMAC-SHA256 over "tenant\nid\nport\nexpiry", in hex */
    unsigned char mac[32];
    const char msg[] = "default\nsbx_00\n8000\n1800000060";
    assert_int_equal(gnutls_hmac_fast(GNUTLS_MAC_SHA256, key, sizeof key, msg, strlen(msg), mac), 0);
    char want[FB_SHARE_TOKEN_MAX];
    int off = snprintf(want, sizeof want, "1800000060.");
    for (size_t i = 0; i < sizeof mac; i++)
        off += snprintf(want + off, sizeof want - (size_t)off, "%02x", mac[i]);
    assert_string_equal(tok, want);
    assert_int_equal(strlen(tok), 11 + 64);
}

static void test_valid_token(void **state)
{
    (void)state;
    char tok[FB_SHARE_TOKEN_MAX];
    int64_t exp = 0;
    assert_int_equal(fb_share_sign(key, "t", "sbx_1", 80, NOW + 3600, tok), 0);
    assert_int_equal(fb_share_check(key, "t", "sbx_1", 80, tok, NOW, &exp), 0);
    assert_int_equal(exp, NOW + 3600);
    assert_int_equal(fb_share_check(key, "t", "sbx_1", 80, tok, NOW + 3599, &exp), 0);
}

static void test_refused(void **state)
{
    (void)state;
    char tok[FB_SHARE_TOKEN_MAX], bad[FB_SHARE_TOKEN_MAX + 8];
    int64_t exp = 0;
    assert_int_equal(fb_share_sign(key, "t", "sbx_1", 80, NOW + 100, tok), 0);
    /* expired, or exactly at expiry */
    assert_int_equal(fb_share_check(key, "t", "sbx_1", 80, tok, NOW + 100, &exp), -1);
    assert_int_equal(fb_share_check(key, "t", "sbx_1", 80, tok, NOW + 1000, &exp), -1);
    /* other port, sandbox, tenant, key */
    assert_int_equal(fb_share_check(key, "t", "sbx_1", 81, tok, NOW, &exp), -1);
    assert_int_equal(fb_share_check(key, "t", "sbx_2", 80, tok, NOW, &exp), -1);
    assert_int_equal(fb_share_check(key, "u", "sbx_1", 80, tok, NOW, &exp), -1);
    unsigned char other[FB_SHARE_KEY_LEN];
    memcpy(other, key, sizeof other);
    other[0] ^= 1;
    assert_int_equal(fb_share_check(other, "t", "sbx_1", 80, tok, NOW, &exp), -1);
    /* every single hex digit of the MAC flipped */
    for (size_t i = strlen(tok) - 64; i < strlen(tok); i++) {
        strcpy(bad, tok);
        bad[i] = bad[i] == '0' ? '1' : '0';
        assert_int_equal(fb_share_check(key, "t", "sbx_1", 80, bad, NOW, &exp), -1);
    }
    /* a later expiry with the old MAC */
    snprintf(bad, sizeof bad, "%lld%s", NOW + 101, strchr(tok, '.'));
    assert_int_equal(fb_share_check(key, "t", "sbx_1", 80, bad, NOW, &exp), -1);
    /* non-canonical forms of the same token */
    snprintf(bad, sizeof bad, "0%s", tok);
    assert_int_equal(fb_share_check(key, "t", "sbx_1", 80, bad, NOW, &exp), -1);
    snprintf(bad, sizeof bad, "%s", tok);
    for (char *p = strchr(bad, '.'); *p; p++)
        if (*p >= 'a' && *p <= 'f')
            *p = (char)(*p - 'a' + 'A');
    assert_int_equal(fb_share_check(key, "t", "sbx_1", 80, bad, NOW, &exp), -1);
    snprintf(bad, sizeof bad, "%sx", tok);
    assert_int_equal(fb_share_check(key, "t", "sbx_1", 80, bad, NOW, &exp), -1);
    static const char *const junk[] = {
        "", ".", "x", "1.", ".abc", "-5.00", "99999999999999999999.00", "1800000100"};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++)
        assert_int_equal(fb_share_check(key, "t", "sbx_1", 80, junk[i], NOW, &exp), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_and_mac),
        cmocka_unit_test(test_valid_token),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
