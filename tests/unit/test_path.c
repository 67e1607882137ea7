#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "core/path.h"

static void expect_norm(const char *in, const char *want)
{
    char out[FB_PATH_MAX + 1];
    cleanup_error fb_error_t err = NULL;
    int r = fb_path_normalize(in, out, sizeof out, &err);
    if (r != 0)
        fail_msg("normalize(\"%s\") failed: %s", in, err->msg);
    assert_null(err);
    assert_string_equal(out, want);
}

static void expect_norm_fail(const char *in, const char *msg_part)
{
    char out[FB_PATH_MAX + 1];
    cleanup_error fb_error_t err = NULL;
    assert_int_equal(fb_path_normalize(in, out, sizeof out, &err), -1);
    assert_non_null(err);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    if (msg_part != NULL && strstr(err->msg, msg_part) == NULL)
        fail_msg("normalize(\"%.40s\"): message \"%s\" lacks \"%s\"", in, err->msg, msg_part);
    assert_string_equal(out, "");
}

static void expect_join(const char *base, const char *member, const char *want)
{
    char out[FB_PATH_MAX + 1];
    cleanup_error fb_error_t err = NULL;
    int r = fb_path_join_member(base, member, out, sizeof out, &err);
    if (r != 0)
        fail_msg("join(\"%s\", \"%s\") failed: %s", base, member, err->msg);
    assert_string_equal(out, want);
}

static void expect_join_fail(const char *base, const char *member, const char *msg_part)
{
    char out[FB_PATH_MAX + 1];
    cleanup_error fb_error_t err = NULL;
    assert_int_equal(fb_path_join_member(base, member, out, sizeof out, &err), -1);
    assert_non_null(err);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    if (msg_part != NULL && strstr(err->msg, msg_part) == NULL)
        fail_msg("join(\"%s\", \"%.40s\"): message \"%s\" lacks \"%s\"", base, member, err->msg, msg_part);
    assert_string_equal(out, "");
}

/* A string of n copies of c (heap, caller frees). */
static char *repeat(char c, size_t n)
{
    char *s = malloc(n + 1);
    assert_non_null(s);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

/* "/xxxx/xxxx/..." of exactly total bytes, components of at most 200 bytes. */
static char *long_path(size_t total)
{
    char *s = repeat('x', total);
    for (size_t i = 0; i < total; i += 201)
        s[i] = '/';
    return s;
}

static void test_normalize_plain(void **state)
{
    (void)state;
    expect_norm("/", "/");
    expect_norm("/root", "/root");
    expect_norm("/root/a.txt", "/root/a.txt");
    expect_norm("/a b/c\td", "/a b/c\td");
    expect_norm("/.hidden/..x/x..", "/.hidden/..x/x..");
    expect_norm("/...", "/...");
}

static void test_normalize_slashes_and_dots(void **state)
{
    (void)state;
    expect_norm("//", "/");
    expect_norm("///root//a///", "/root/a");
    expect_norm("/root/", "/root");
    expect_norm("/./root/./a/.", "/root/a");
    expect_norm("/.", "/");
    expect_norm("/./", "/");
    expect_norm("/root/a/..", "/root");
    expect_norm("/root/a/../", "/root");
    expect_norm("/root/a/../b", "/root/b");
    expect_norm("/a/b/c/../../d", "/a/d");
    expect_norm("/a/./b/.././c//", "/a/c");
}

static void test_normalize_dotdot_stops_at_root(void **state)
{
    (void)state;
    expect_norm("/..", "/");
    expect_norm("/../", "/");
    expect_norm("/../etc", "/etc");
    expect_norm("/../../../../etc/passwd", "/etc/passwd");
    expect_norm("/a/../../b", "/b");
    expect_norm("/root/../../../etc/shadow", "/etc/shadow");
}

static void test_normalize_refuses(void **state)
{
    (void)state;
    expect_norm_fail(NULL, "empty");
    expect_norm_fail("", "empty");
    expect_norm_fail("root", "absolute");
    expect_norm_fail("./root", "absolute");
    expect_norm_fail("../etc/passwd", "absolute");
    expect_norm_fail(" /root", "absolute");
    expect_norm_fail("~/x", "absolute");
}

static void test_normalize_nul(void **state)
{
    (void)state;
    char out[64];
    cleanup_error fb_error_t err = NULL;
    static const char in[] = "/root\0/../etc/shadow";
    assert_int_equal(fb_path_normalize_len(in, sizeof in - 1, out, sizeof out, &err), -1);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    assert_non_null(strstr(err->msg, "NUL"));
    fb_error_release(&err);

    assert_int_equal(fb_path_normalize_len("/x\0", 3, out, sizeof out, &err), -1);
    fb_error_release(&err);

    /* a counted string need not be terminated right after its length */
    assert_int_equal(fb_path_normalize_len("/root/ajunk", 7, out, sizeof out, &err), 0);
    assert_string_equal(out, "/root/a");
    assert_int_equal(fb_path_normalize_len("/root", 0, out, sizeof out, &err), -1);
    assert_non_null(strstr(err->msg, "empty"));
}

static void test_normalize_length_limits(void **state)
{
    (void)state;
    cleanup_free char *max = long_path(FB_PATH_MAX);
    expect_norm(max, max);

    cleanup_free char *over = long_path(FB_PATH_MAX + 1);
    expect_norm_fail(over, "longer than 4096");

    /* over-long input is refused even if it would shrink below the limit */
    cleanup_free char *slashes = repeat('/', FB_PATH_MAX + 1);
    expect_norm_fail(slashes, "longer than");
    cleanup_free char *slashes_ok = repeat('/', FB_PATH_MAX);
    expect_norm(slashes_ok, "/");

    cleanup_free char *name255 = repeat('n', 255);
    name255[0] = '/';
    expect_norm(name255, name255);
    cleanup_free char *name256 = repeat('n', 257);
    name256[0] = '/';
    expect_norm_fail(name256, "component longer than 255");
}

static void test_normalize_small_output(void **state)
{
    (void)state;
    char out[8];
    cleanup_error fb_error_t err = NULL;
    assert_int_equal(fb_path_normalize("/abcdef", out, sizeof out, &err), 0);
    assert_string_equal(out, "/abcdef");
    assert_int_equal(fb_path_normalize("/abcdefg", out, sizeof out, &err), -1);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    assert_string_equal(out, "");
    fb_error_release(&err);
    /* shrinking happens before the size check */
    assert_int_equal(fb_path_normalize("/abcdefgh/../x", out, sizeof out, &err), 0);
    assert_string_equal(out, "/x");
}

static void test_normalize_null_err(void **state)
{
    (void)state;
    char out[16];
    assert_int_equal(fb_path_normalize("relative", out, sizeof out, NULL), -1);
    assert_int_equal(fb_path_normalize("/ok", out, sizeof out, NULL), 0);
}

static void test_join_plain(void **state)
{
    (void)state;
    expect_join("/root", "a.txt", "/root/a.txt");
    expect_join("/root", "dir/sub/file", "/root/dir/sub/file");
    expect_join("/root", "dir/", "/root/dir");
    expect_join("/", "etc/passwd", "/etc/passwd");
    expect_join("/root", "./a", "/root/a");
    expect_join("/root", "./", "/root");
    expect_join("/root", ".", "/root");
    expect_join("/root", "a//b/./c/", "/root/a/b/c");
    expect_join("/root", "..a/b..", "/root/..a/b..");
}

static void test_join_dotdot_inside(void **state)
{
    (void)state;
    expect_join("/root", "a/../b", "/root/b");
    expect_join("/root", "a/b/../../c", "/root/c");
    expect_join("/root", "a/..", "/root");
    expect_join("/", "a/../b", "/b");
}

static void test_join_escapes(void **state)
{
    (void)state;
    expect_join_fail("/root", "..", "climbs above");
    expect_join_fail("/root", "../", "climbs above");
    expect_join_fail("/root", "../x", "climbs above");
    expect_join_fail("/root", "../../etc/passwd", "climbs above");
    expect_join_fail("/root", "a/../../b", "climbs above");
    expect_join_fail("/root", "./../root/x", "climbs above");
    expect_join_fail("/root", "a/b/../../../root", "climbs above");
    /* at "/" the kernel would clamp, but an archive must still not do it */
    expect_join_fail("/", "../etc/passwd", "climbs above");
    /* base is normalised first, so a sloppy base cannot move the floor */
    expect_join_fail("/root/sub/..", "../x", "climbs above");
    expect_join("/root//sub/", "x", "/root/sub/x");
}

static void test_join_refuses(void **state)
{
    (void)state;
    expect_join_fail("/root", "/etc/passwd", "relative");
    expect_join_fail("/root", "//etc", "relative");
    expect_join_fail("/root", "", "empty");
    expect_join_fail("/root", NULL, "empty");
    expect_join_fail("root", "x", "base directory");
    expect_join_fail(NULL, "x", "base directory");
    expect_join_fail("", "x", "base directory");
}

static void test_join_length_limits(void **state)
{
    (void)state;
    char out[FB_PATH_MAX + 1];
    cleanup_error fb_error_t err = NULL;

    cleanup_free char *long_member = repeat('m', FB_PATH_MAX + 1);
    expect_join_fail("/root", long_member, "longer than");

    cleanup_free char *comp = repeat('c', 256);
    expect_join_fail("/root", comp, "component longer than 255");

    /* the joined result must fit as well: "/root/" plus 4090 bytes is the
     * 4096 allowed, one more byte is not */
    cleanup_free char *m = long_path(4091);
    m[0] = 'y';
    assert_int_equal(fb_path_join_member("/root", m + 1, out, sizeof out, &err), 0);
    assert_int_equal(strlen(out), FB_PATH_MAX);
    assert_int_equal(fb_path_join_member("/root", m, out, sizeof out, &err), -1);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    fb_error_release(&err);

    char small[10];
    assert_int_equal(fb_path_join_member("/root", "abc", small, sizeof small, &err), 0);
    assert_string_equal(small, "/root/abc");
    assert_int_equal(fb_path_join_member("/root", "abcd", small, sizeof small, &err), -1);
    assert_string_equal(small, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normalize_plain),
        cmocka_unit_test(test_normalize_slashes_and_dots),
        cmocka_unit_test(test_normalize_dotdot_stops_at_root),
        cmocka_unit_test(test_normalize_refuses),
        cmocka_unit_test(test_normalize_nul),
        cmocka_unit_test(test_normalize_length_limits),
        cmocka_unit_test(test_normalize_small_output),
        cmocka_unit_test(test_normalize_null_err),
        cmocka_unit_test(test_join_plain),
        cmocka_unit_test(test_join_dotdot_inside),
        cmocka_unit_test(test_join_escapes),
        cmocka_unit_test(test_join_refuses),
        cmocka_unit_test(test_join_length_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
