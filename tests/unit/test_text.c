/* UTF-8 checks and base64 used to carry process output in JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/text.h"

static void test_valid(void **state)
{
    (void)state;
    assert_true(fb_utf8_valid("", 0));
    assert_true(fb_utf8_valid("hello\n", 6));
    assert_true(fb_utf8_valid("h\0i", 3));
    assert_true(fb_utf8_valid("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9)); /* é € 😀 */
    static const char *const bad[] = {
        "\xff",
        "\xc3",
        "\xc0\x80",
        "\xe0\x80\x80",
        "\xed\xa0\x80",
        "\xf4\x90\x80\x80",
        "\xf8\x88\x80\x80\x80",
        "a\x80",
        "\xe2\x82",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(fb_utf8_valid(bad[i], strlen(bad[i])));
}

static void test_complete_prefix(void **state)
{
    (void)state;
    assert_int_equal(fb_utf8_complete_prefix("abc", 3), 3);
    assert_int_equal(fb_utf8_complete_prefix("ab\xc3", 3), 2);
    assert_int_equal(fb_utf8_complete_prefix("ab\xe2\x82", 4), 2);
    assert_int_equal(fb_utf8_complete_prefix("ab\xf0\x9f\x98", 5), 2);
    assert_int_equal(fb_utf8_complete_prefix("ab\xf0\x9f\x98\x80", 6), 6);
    assert_int_equal(fb_utf8_complete_prefix("\xc3\xa9", 2), 2);
    assert_int_equal(fb_utf8_complete_prefix("", 0), 0);
}

static void test_lossy(void **state)
{
    (void)state;
    size_t n = 0;
    char *s = fb_utf8_lossy("a\xff"
                            "b",
                            3, &n);
    assert_non_null(s);
    assert_int_equal(n, 5);
    assert_memory_equal(s,
                        "a\xef\xbf\xbd"
                        "b",
                        5);
    assert_true(fb_utf8_valid(s, n));
    free(s);
}

static void test_base64(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
    } v[] = {{"", ""},        {"f", "Zg=="},        {"fo", "Zm8="},
             {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}, {"\xff\xfe", "//4="}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char *s = fb_base64_encode(v[i].in, strlen(v[i].in));
        assert_non_null(s);
        assert_string_equal(s, v[i].out);
        free(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_complete_prefix),
        cmocka_unit_test(test_lossy),
        cmocka_unit_test(test_base64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
