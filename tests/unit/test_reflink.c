/* Layer clones and the accounting of what they share: the union of
 * extents counts shared blocks once, and where the filesystem cannot
 * clone (the ext4 or tmpfs of /tmp) a clone is a plain sparse copy. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "runtime/reflink.h"
#include "runtime/storage.h"

#define MIB (1024 * 1024)

static char dir[64];

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/var/tmp/fb-reflink-test.XXXXXX");
    return mkdtemp(dir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    return fb_rm_rf(dir) < 0 ? -1 : 0;
}

static void test_union_empty_and_single(void **state)
{
    (void)state;
    assert_int_equal(fb_extents_union_bytes(NULL, 0), 0);
    struct fb_extent one[] = {{4096, 8192}};
    assert_int_equal(fb_extents_union_bytes(one, 1), 8192);
}

static void test_union_counts_shared_once(void **state)
{
    (void)state;
    /* two checkpoints sharing [0, 1M), one with [2M, 3M) of its own, and
     * an extent overlapping the shared one's tail */
    struct fb_extent v[] = {
        {2 * MIB, MIB}, {0, MIB}, {0, MIB}, {MIB / 2, MIB}, {10 * MIB, 4096}, {10 * MIB + 4096, 4096},
    };
    /* [0, 1.5M) + [2M, 3M) + [10M, 10M + 8K) */
    assert_int_equal(fb_extents_union_bytes(v, sizeof v / sizeof v[0]), MIB + MIB / 2 + MIB + 8192);
}

static void test_union_contained(void **state)
{
    (void)state;
    struct fb_extent v[] = {{100, 1000}, {200, 10}, {150, 100}, {1100, 0}};
    assert_int_equal(fb_extents_union_bytes(v, 4), 1000);
}

static void fill(int fd, off_t at, size_t n, char c)
{
    char *buf = malloc(n);
    assert_non_null(buf);
    memset(buf, c, n);
    assert_int_equal(pwrite(fd, buf, n, at), (ssize_t)n);
    free(buf);
}

static int make_source(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 64 * MIB), 0);
    fill(fd, 0, MIB, 'a');
    fill(fd, 40 * MIB, 256 * 1024, 'b');
    assert_int_equal(fsync(fd), 0);
    return fd;
}

static void same_content(int a, int b)
{
    struct stat sa, sb;
    assert_int_equal(fstat(a, &sa), 0);
    assert_int_equal(fstat(b, &sb), 0);
    assert_int_equal(sa.st_size, sb.st_size);
    char *x = malloc(MIB), *y = malloc(MIB);
    assert_non_null(x);
    assert_non_null(y);
    for (off_t off = 0; off < sa.st_size; off += MIB) {
        assert_int_equal(pread(a, x, MIB, off), MIB);
        assert_int_equal(pread(b, y, MIB, off), MIB);
        assert_memory_equal(x, y, MIB);
    }
    free(x);
    free(y);
}

/* Whatever the filesystem under /var/tmp can do, the clone is exact; where
 * it cannot share blocks the clone is a copy, and a copy keeps holes. */
static void test_clone_exact_with_fallback(void **state)
{
    (void)state;
    char src[128], dst[128], dst2[128];
    snprintf(src, sizeof src, "%s/src", dir);
    snprintf(dst, sizeof dst, "%s/dst", dir);
    snprintf(dst2, sizeof dst2, "%s/dst2", dir);
    cleanup_close int in = make_source(src);
    cleanup_close int out = open(dst, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(out >= 0);
    enum fb_clone_how how = FB_CLONE_REFLINK;
    fb_error_t err = NULL;
    assert_int_equal(fb_layer_clone(in, out, true, 0, &how, &err), 0);
    assert_null(err);
    same_content(in, out);
    struct stat st;
    assert_int_equal(fstat(out, &st), 0);
    assert_true(st.st_blocks * 512 < 4 * MIB); /* holes stayed holes */

    /* reflink off (--storage=plain): always the plain copy */
    cleanup_close int out2 = open(dst2, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(out2 >= 0);
    how = FB_CLONE_REFLINK;
    assert_int_equal(fb_layer_clone(in, out2, false, 0, &how, &err), 0);
    assert_int_equal(how, FB_CLONE_COPY);
    same_content(in, out2);
}

/* A copy that cannot fit is refused before a byte is written. */
static void test_copy_refused_without_room(void **state)
{
    (void)state;
    char src[128], dst[128];
    snprintf(src, sizeof src, "%s/src", dir);
    snprintf(dst, sizeof dst, "%s/dst", dir);
    cleanup_close int in = make_source(src);
    cleanup_close int out = open(dst, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(out >= 0);
    fb_error_t err = NULL;
    /* a margin no filesystem here has */
    assert_int_equal(fb_layer_clone(in, out, false, INT64_MAX / 2, NULL, &err), -1);
    assert_non_null(err);
    assert_int_equal(err->kind, FB_ERR_TOO_LARGE);
    fb_error_release(&err);
    struct stat st;
    assert_int_equal(fstat(out, &st), 0);
    assert_int_equal(st.st_size, 0);
}

/* A file alone on its filesystem shares nothing: all its data is its own. */
static void test_extents_of_unshared_file(void **state)
{
    (void)state;
    char src[128];
    snprintf(src, sizeof src, "%s/src", dir);
    cleanup_close int in = make_source(src);
    struct fb_extent_list l = {0};
    uint64_t exclusive = 0;
    int r = fb_extents_read(in, &l, &exclusive);
    if (r == -EOPNOTSUPP) { /* tmpfs has no FIEMAP */
        fb_extent_list_free(&l);
        skip();
    }
    assert_int_equal(r, 0);
    uint64_t all = fb_extents_union_bytes(l.v, l.n) + l.unplaced;
    assert_true(all >= MIB + 256 * 1024 && all < 4 * MIB);
    assert_int_equal(exclusive, all);
    fb_extent_list_free(&l);
}

static void test_default_pool_size(void **state)
{
    (void)state;
    assert_int_equal(fb_storage_default_bytes(1ull << 40), FB_STORAGE_DEFAULT_BYTES);
    assert_int_equal(fb_storage_default_bytes((10ull << 30) + 12345), 10ull << 30);
    assert_int_equal(fb_storage_default_bytes(FB_STORAGE_MIN_BYTES - 1), 0);
    assert_string_equal(fb_storage_kind_name(FB_STORAGE_BTRFS_POOL), "btrfs-pool");
    assert_string_equal(fb_storage_kind_name(FB_STORAGE_PLAIN), "plain");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_union_empty_and_single),
        cmocka_unit_test(test_union_counts_shared_once),
        cmocka_unit_test(test_union_contained),
        cmocka_unit_test_setup_teardown(test_clone_exact_with_fallback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_refused_without_room, setup, teardown),
        cmocka_unit_test_setup_teardown(test_extents_of_unshared_file, setup, teardown),
        cmocka_unit_test(test_default_pool_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
