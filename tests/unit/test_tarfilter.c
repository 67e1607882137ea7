#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "core/path.h"
#include "core/tarfilter.h"

static struct fb_tar_entry entry(const char *name, enum fb_tar_type type, const char *link)
{
    struct fb_tar_entry e = {.name = name, .type = type, .linkname = link, .mode = 0644, .size = 0};
    if (type == FB_TAR_DIR)
        e.mode = 0755;
    return e;
}

static void expect_ok(const char *base, struct fb_tar_entry e, const char *want)
{
    char out[FB_PATH_MAX + 1];
    cleanup_error fb_error_t err = NULL;
    if (fb_tar_entry_check(base, &e, out, sizeof out, &err) != 0)
        fail_msg("entry \"%s\" -> \"%s\" refused: %s", e.name, e.linkname ? e.linkname : "", err->msg);
    assert_null(err);
    assert_string_equal(out, want);
}

static void expect_refused(const char *base, struct fb_tar_entry e, const char *msg_part)
{
    char out[FB_PATH_MAX + 1];
    cleanup_error fb_error_t err = NULL;
    if (fb_tar_entry_check(base, &e, out, sizeof out, &err) != -1)
        fail_msg("entry \"%.60s\" -> \"%s\" accepted as %s", e.name ? e.name : "(null)",
                 e.linkname ? e.linkname : "", out);
    assert_non_null(err);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    if (msg_part != NULL && strstr(err->msg, msg_part) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", err->msg, msg_part);
    assert_string_equal(out, "");
}

static void test_plain_entries(void **state)
{
    (void)state;
    expect_ok("/root", entry("a.txt", FB_TAR_FILE, NULL), "/root/a.txt");
    expect_ok("/root", entry("dir/", FB_TAR_DIR, NULL), "/root/dir");
    expect_ok("/root", entry("dir/sub/f", FB_TAR_FILE, NULL), "/root/dir/sub/f");
    expect_ok("/root", entry("./", FB_TAR_DIR, NULL), "/root");
    expect_ok("/root", entry(".", FB_TAR_DIR, NULL), "/root");
    expect_ok("/root", entry("./x/./y", FB_TAR_FILE, NULL), "/root/x/y");
    expect_ok("/", entry("etc/motd", FB_TAR_FILE, NULL), "/etc/motd");
    expect_ok("/root/", entry("a", FB_TAR_FILE, NULL), "/root/a");

    struct fb_tar_entry big = entry("big", FB_TAR_FILE, NULL);
    big.size = 1LL << 40;
    expect_ok("/root", big, "/root/big");
}

static void test_name_escapes(void **state)
{
    (void)state;
    expect_refused("/root", entry("../../etc/passwd", FB_TAR_FILE, NULL), "climbs above");
    expect_refused("/root", entry("..", FB_TAR_DIR, NULL), "climbs above");
    expect_refused("/root", entry("a/../../b", FB_TAR_FILE, NULL), "climbs above");
    expect_refused("/root", entry("./../root/x", FB_TAR_FILE, NULL), "climbs above");
    expect_refused("/", entry("../etc/shadow", FB_TAR_FILE, NULL), "climbs above");
    expect_refused("/root", entry("/etc/passwd", FB_TAR_FILE, NULL), "relative");
    expect_refused("/root", entry("//etc/passwd", FB_TAR_FILE, NULL), "relative");
    expect_ok("/root", entry("a/../b", FB_TAR_FILE, NULL), "/root/b");
}

static void test_names_refused(void **state)
{
    (void)state;
    expect_refused("/root", entry("", FB_TAR_FILE, NULL), "without a name");
    expect_refused("/root", entry(NULL, FB_TAR_FILE, NULL), "without a name");

    char *long_name = malloc(FB_PATH_MAX + 2);
    assert_non_null(long_name);
    memset(long_name, 'a', FB_PATH_MAX + 1);
    for (size_t i = 100; i < FB_PATH_MAX; i += 100)
        long_name[i] = '/';
    long_name[FB_PATH_MAX + 1] = '\0';
    expect_refused("/root", entry(long_name, FB_TAR_FILE, NULL), "longer than 4096");
    free(long_name);

    /* names that land on base itself may only be the directory */
    expect_refused("/root", entry(".", FB_TAR_FILE, NULL), "directory itself");
    expect_refused("/root", entry("x/..", FB_TAR_SYMLINK, "/etc"), "directory itself");
    expect_refused("/root", entry("./", FB_TAR_SYMLINK, "sub"), "directory itself");
    expect_refused("/root", entry("a/..", FB_TAR_HARDLINK, "b"), "directory itself");

    cleanup_error fb_error_t err = NULL;
    char out[64];
    assert_int_equal(fb_tar_entry_check("/root", NULL, out, sizeof out, &err), -1);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
}

static void test_message_shows_name_safely(void **state)
{
    (void)state;
    char out[64];
    cleanup_error fb_error_t err = NULL;
    struct fb_tar_entry e = entry("../\x01\xff\"x", FB_TAR_FILE, NULL);
    assert_int_equal(fb_tar_entry_check("/root", &e, out, sizeof out, &err), -1);
    assert_non_null(strstr(err->msg, "archive member \"../???x\""));
    fb_error_release(&err);

    char name[600];
    memset(name, 'q', sizeof name - 1);
    name[0] = '/';
    name[sizeof name - 1] = '\0';
    e = entry(name, FB_TAR_FILE, NULL);
    assert_int_equal(fb_tar_entry_check("/root", &e, out, sizeof out, &err), -1);
    assert_non_null(strstr(err->msg, "...\""));
    assert_true(strlen(err->msg) < 300);
}

static void test_special_types(void **state)
{
    (void)state;
    struct fb_tar_entry e = entry("dev/sda", FB_TAR_OTHER, NULL);
    e.mode = 0660;
    expect_refused("/root", e, "device nodes");
    expect_refused("/root", entry("fifo", FB_TAR_OTHER, NULL), "device nodes");
    expect_refused("/root", entry("a", (enum fb_tar_type)0, NULL), "unknown entry type");
    expect_refused("/root", entry("a", (enum fb_tar_type)42, NULL), "unknown entry type");

    struct fb_tar_entry neg = entry("a", FB_TAR_FILE, NULL);
    neg.size = -1;
    expect_refused("/root", neg, "negative size");
}

static void test_symlinks_inside(void **state)
{
    (void)state;
    expect_ok("/root", entry("link", FB_TAR_SYMLINK, "target"), "/root/link");
    expect_ok("/root", entry("link", FB_TAR_SYMLINK, "."), "/root/link");
    expect_ok("/root", entry("link", FB_TAR_SYMLINK, "./a/../b"), "/root/link");
    expect_ok("/root", entry("sub/link", FB_TAR_SYMLINK, "../x"), "/root/sub/link");
    expect_ok("/root", entry("sub/link", FB_TAR_SYMLINK, ".."), "/root/sub/link");
    expect_ok("/root", entry("a/b/c/link", FB_TAR_SYMLINK, "../../../x"), "/root/a/b/c/link");
    expect_ok("/root", entry("a/b/link", FB_TAR_SYMLINK, "x/../../y"), "/root/a/b/link");
    expect_ok("/root", entry("sub//link", FB_TAR_SYMLINK, "..//x/"), "/root/sub/link");
    /* a dangling target that does not climb is fine */
    expect_ok("/root", entry("link", FB_TAR_SYMLINK, "no/such/file"), "/root/link");
    /* names are normalised before the link's directory is taken */
    expect_ok("/root", entry("a/b/../link", FB_TAR_SYMLINK, "../x"), "/root/a/link");
}

static void test_symlinks_escaping(void **state)
{
    (void)state;
    expect_refused("/root", entry("link", FB_TAR_SYMLINK, "/etc/passwd"), "absolute symlink");
    expect_refused("/root", entry("link", FB_TAR_SYMLINK, "//etc"), "absolute symlink");
    expect_refused("/root", entry("link", FB_TAR_SYMLINK, "/"), "absolute symlink");
    expect_refused("/root", entry("link", FB_TAR_SYMLINK, ".."), "outside");
    expect_refused("/root", entry("link", FB_TAR_SYMLINK, "../x"), "outside");
    expect_refused("/root", entry("link", FB_TAR_SYMLINK, "../root/x"), "outside");
    expect_refused("/root", entry("sub/link", FB_TAR_SYMLINK, "../../x"), "outside");
    expect_refused("/root", entry("sub/link", FB_TAR_SYMLINK, "../../../../etc/shadow"), "outside");
    expect_refused("/root", entry("a/b/link", FB_TAR_SYMLINK, "../../../x"), "outside");
    /* climbing out and back in still leaves base on the way */
    expect_refused("/root", entry("sub/link", FB_TAR_SYMLINK, "../../root/sub"), "outside");
    expect_refused("/root", entry("link", FB_TAR_SYMLINK, "a/../../x"), "outside");
    expect_refused("/root", entry("link", FB_TAR_SYMLINK, "./../x"), "outside");
    /* a link at the top of "/" still cannot climb */
    expect_refused("/", entry("link", FB_TAR_SYMLINK, "../etc"), "outside");
    /* the link's directory is the normalised one, not the literal prefix */
    expect_refused("/root", entry("a/b/../link", FB_TAR_SYMLINK, "../../x"), "outside");
}

static void test_symlink_bad_targets(void **state)
{
    (void)state;
    expect_refused("/root", entry("link", FB_TAR_SYMLINK, NULL), "without a target");
    expect_refused("/root", entry("link", FB_TAR_SYMLINK, ""), "without a target");

    char *t = malloc(FB_PATH_MAX + 1);
    assert_non_null(t);
    memset(t, 'a', FB_PATH_MAX);
    t[FB_PATH_MAX] = '\0';
    expect_refused("/root", entry("link", FB_TAR_SYMLINK, t), "target longer than");
    t[FB_PATH_MAX - 1] = '\0';
    expect_ok("/root", entry("link", FB_TAR_SYMLINK, t), "/root/link");
    free(t);
}

static void test_hardlinks(void **state)
{
    (void)state;
    expect_ok("/root", entry("b", FB_TAR_HARDLINK, "a"), "/root/b");
    expect_ok("/root", entry("sub/b", FB_TAR_HARDLINK, "other/a"), "/root/sub/b");
    /* the source is an archive member name, so it is relative to base, not to
     * the link: "../x" from a subdirectory is still outside */
    expect_ok("/root", entry("sub/b", FB_TAR_HARDLINK, "sub/../a"), "/root/sub/b");
    expect_refused("/root", entry("sub/b", FB_TAR_HARDLINK, "../x"), "hardlink source");
    expect_refused("/root", entry("b", FB_TAR_HARDLINK, "../x"), "climbs above");
    expect_refused("/root", entry("b", FB_TAR_HARDLINK, "/etc/shadow"), "hardlink source");
    expect_refused("/root", entry("b", FB_TAR_HARDLINK, "/etc/shadow"), "relative");
    expect_refused("/root", entry("b", FB_TAR_HARDLINK, "a/../../etc/shadow"), "climbs above");
    expect_refused("/root", entry("b", FB_TAR_HARDLINK, "."), "target directory itself");
    expect_refused("/root", entry("b", FB_TAR_HARDLINK, "./"), "target directory itself");
    expect_refused("/root", entry("b", FB_TAR_HARDLINK, NULL), "without a source");
    expect_refused("/root", entry("b", FB_TAR_HARDLINK, ""), "without a source");
    expect_refused("/", entry("b", FB_TAR_HARDLINK, "../etc/shadow"), "climbs above");
}

static void test_bad_base(void **state)
{
    (void)state;
    expect_refused("root", entry("a", FB_TAR_FILE, NULL), "archive target");
    expect_refused(NULL, entry("a", FB_TAR_FILE, NULL), "archive target");
    expect_refused("", entry("a", FB_TAR_FILE, NULL), "archive target");
}

static void test_output_too_small(void **state)
{
    (void)state;
    char out[10];
    cleanup_error fb_error_t err = NULL;
    struct fb_tar_entry e = entry("abc", FB_TAR_FILE, NULL);
    assert_int_equal(fb_tar_entry_check("/root", &e, out, sizeof out, &err), 0);
    assert_string_equal(out, "/root/abc");
    e.name = "abcd";
    assert_int_equal(fb_tar_entry_check("/root", &e, out, sizeof out, &err), -1);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    assert_string_equal(out, "");
}

static void test_first_error_kept(void **state)
{
    (void)state;
    char out[64];
    fb_error_t err = NULL;
    fb_error_set(&err, FB_ERR_CONFLICT, 0, "earlier");
    struct fb_tar_entry e = entry("../x", FB_TAR_FILE, NULL);
    assert_int_equal(fb_tar_entry_check("/root", &e, out, sizeof out, &err), -1);
    assert_int_equal(err->kind, FB_ERR_CONFLICT);
    assert_string_equal(err->msg, "earlier");
    fb_error_release(&err);
    assert_null(err);
    assert_int_equal(fb_tar_entry_check("/root", &e, out, sizeof out, NULL), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_entries),     cmocka_unit_test(test_name_escapes),
        cmocka_unit_test(test_names_refused),     cmocka_unit_test(test_message_shows_name_safely),
        cmocka_unit_test(test_special_types),     cmocka_unit_test(test_symlinks_inside),
        cmocka_unit_test(test_symlinks_escaping), cmocka_unit_test(test_symlink_bad_targets),
        cmocka_unit_test(test_hardlinks),         cmocka_unit_test(test_bad_base),
        cmocka_unit_test(test_output_too_small),  cmocka_unit_test(test_first_error_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
