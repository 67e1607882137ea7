/* Layer copies for checkpoints: sparse files keep their holes, trees keep
 * their shape, and nothing follows a symlink. */
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
#include "runtime/copy.h"

#define MIB (1024 * 1024)

static char dir[64];

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/fb-copy-test.XXXXXX");
    return mkdtemp(dir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    return fb_rm_rf(dir) < 0 ? -1 : 0;
}

static void fill(int fd, off_t at, size_t n, char c)
{
    char *buf = malloc(n);
    assert_non_null(buf);
    memset(buf, c, n);
    assert_int_equal(pwrite(fd, buf, n, at), (ssize_t)n);
    free(buf);
}

static void test_sparse_file(void **state)
{
    (void)state;
    char src[128], dst[128];
    snprintf(src, sizeof src, "%s/src", dir);
    snprintf(dst, sizeof dst, "%s/dst", dir);
    cleanup_close int in = open(src, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(in >= 0);
    /* 256 MiB apparent, 2 MiB of data in three extents, a hole at the end */
    assert_int_equal(ftruncate(in, 256 * MIB), 0);
    fill(in, 0, MIB, 'a');
    fill(in, 100 * MIB, 512 * 1024, 'b');
    fill(in, 200 * MIB + 4096, 512 * 1024, 'c');
    assert_int_equal(fsync(in), 0);
    cleanup_close int out = open(dst, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(out >= 0);
    cleanup_error fb_error_t err = NULL;
    assert_int_equal(fb_copy_sparse(in, out, &err), 0);

    struct stat a, b;
    assert_int_equal(fstat(in, &a), 0);
    assert_int_equal(fstat(out, &b), 0);
    assert_int_equal(a.st_size, b.st_size);
    /* similar block usage: far below the apparent size */
    assert_true((long long)b.st_blocks * 512 <= (long long)a.st_blocks * 512 + MIB);
    assert_true((long long)b.st_blocks * 512 < 16LL * MIB);
    /* identical content, holes read as zeros */
    char *x = malloc(MIB), *y = malloc(MIB);
    assert_non_null(x);
    assert_non_null(y);
    for (off_t off = 0; off < a.st_size; off += MIB) {
        assert_int_equal(pread(in, x, MIB, off), MIB);
        assert_int_equal(pread(out, y, MIB, off), MIB);
        assert_memory_equal(x, y, MIB);
    }
    free(x);
    free(y);
}

static void test_empty_and_all_hole(void **state)
{
    (void)state;
    char src[128], dst[128];
    snprintf(src, sizeof src, "%s/hole", dir);
    snprintf(dst, sizeof dst, "%s/hole.copy", dir);
    cleanup_close int in = open(src, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_int_equal(ftruncate(in, 64 * MIB), 0);
    cleanup_close int out = open(dst, O_RDWR | O_CREAT | O_EXCL, 0600);
    cleanup_error fb_error_t err = NULL;
    assert_int_equal(fb_copy_sparse(in, out, &err), 0);
    struct stat b;
    assert_int_equal(fstat(out, &b), 0);
    assert_int_equal(b.st_size, 64 * MIB);
    assert_true(b.st_blocks * 512 <= 65536);
}

static void test_tree(void **state)
{
    (void)state;
    char src[128], dst[128], p[256];
    snprintf(src, sizeof src, "%s/tree", dir);
    snprintf(dst, sizeof dst, "%s/tree.copy", dir);
    assert_int_equal(mkdir(src, 0755), 0);
    assert_int_equal(mkdir(dst, 0700), 0);
    snprintf(p, sizeof p, "%s/sub", src);
    assert_int_equal(mkdir(p, 0750), 0);
    snprintf(p, sizeof p, "%s/sub/file", src);
    assert_int_equal(fb_write_file(p, "hello", 5, 0640), 0);
    snprintf(p, sizeof p, "%s/link", src);
    assert_int_equal(symlink("/etc/passwd", p), 0); /* copied as a link, never followed */
    snprintf(p, sizeof p, "%s/fifo", src);
    assert_int_equal(mkfifo(p, 0600), 0);

    cleanup_close int in = open(src, O_RDONLY | O_DIRECTORY);
    cleanup_close int out = open(dst, O_RDONLY | O_DIRECTORY);
    cleanup_error fb_error_t err = NULL;
    assert_int_equal(fb_copy_tree(in, out, getuid(), getuid(), 1, &err), 0);

    struct stat st;
    snprintf(p, sizeof p, "%s/sub", dst);
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0750);
    snprintf(p, sizeof p, "%s/sub/file", dst);
    assert_int_equal(lstat(p, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0640);
    cleanup_free char *data = NULL;
    size_t len = 0;
    assert_int_equal(fb_read_file(p, 64, &data, &len), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(data, "hello", 5);
    snprintf(p, sizeof p, "%s/link", dst);
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    char target[64] = {0};
    assert_int_equal(readlink(p, target, sizeof target - 1), 11);
    assert_string_equal(target, "/etc/passwd");
    snprintf(p, sizeof p, "%s/fifo", dst);
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sparse_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_and_all_hole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tree, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
