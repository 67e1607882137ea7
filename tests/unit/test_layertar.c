/* OCI layer tars of an overlay upper dir: written and unpacked again, the
 * tree comes back with its whiteouts, opaque dirs, owners and links; a bad
 * layer is refused before anything is written.  Needs root (chroot, mknod,
 * trusted.* xattrs), as the daemon does. */
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "core/layertar.h"

#define BASE 200000u

static char dir[64];

static int setup(void **state)
{
    (void)state;
    if (geteuid() != 0)
        return 0;
    strcpy(dir, "/var/tmp/fb-layertar-test.XXXXXX");
    return mkdtemp(dir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    return dir[0] && fb_rm_rf(dir) < 0 ? -1 : 0;
}

static void path(char *out, const char *a, const char *b)
{
    assert_int_equal(fb_snprintf(out, PATH_MAX, "%s/%s", a, b), 0);
}

static void put(const char *root, const char *rel, const char *text, uid_t uid)
{
    char p[PATH_MAX];
    path(p, root, rel);
    assert_int_equal(fb_write_file(p, text, strlen(text), 0640), 0);
    assert_int_equal(lchown(p, uid, uid), 0);
}

static void make_upper(const char *up)
{
    char p[PATH_MAX];
    assert_int_equal(mkdir(up, 0755), 0);
    path(p, up, "etc");
    assert_int_equal(mkdir(p, 0755), 0);
    path(p, up, "etc/apt");
    assert_int_equal(mkdir(p, 0700), 0);
    assert_int_equal(setxattr(p, "trusted.overlay.opaque", "y", 1, 0), 0);
    put(up, "etc/apt/only", "fresh\n", BASE);
    path(p, up, "etc/issue");
    assert_int_equal(mknod(p, S_IFCHR, makedev(0, 0)), 0);
    put(up, "etc/owned", "mine\n", BASE + 1000);
    put(up, "etc/foreign", "host\n", 7); /* outside the range: nobody */
    char q[PATH_MAX];
    path(p, up, "etc/owned");
    path(q, up, "etc/hard");
    assert_int_equal(link(p, q), 0);
    path(p, up, "etc/rel");
    assert_int_equal(symlink("owned", p), 0);
    path(p, up, "etc/abs");
    assert_int_equal(symlink("/etc/hostname", p), 0);
    path(p, up, "etc/owned");
    assert_int_equal(setxattr(p, "user.note", "kept", 4, 0), 0);
    assert_int_equal(setxattr(p, "trusted.secret", "dropped", 7, 0), 0);
}

static int write_tar(const char *up, const char *tar, int64_t *size, char sha[65])
{
    cleanup_close int in = open(up, O_RDONLY | O_DIRECTORY);
    cleanup_close int out = open(tar, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    struct fb_layer_opts o = {.uid_from = BASE, .overlay = true, .max_bytes = 1 << 30};
    cleanup_error fb_error_t err = NULL;
    int r = fb_layer_tar_write(in, &o, out, size, sha, &err);
    if (r < 0)
        fail_msg("write: %s", err->msg);
    return r;
}

static void test_round_trip(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    char up[PATH_MAX], tar[PATH_MAX], tar2[PATH_MAX], back[PATH_MAX], p[PATH_MAX];
    path(up, dir, "upper");
    path(tar, dir, "layer.tar");
    path(tar2, dir, "layer2.tar");
    path(back, dir, "back");
    make_upper(up);
    int64_t size, size2;
    char sha[65], sha2[65];
    write_tar(up, tar, &size, sha);
    assert_true(size > 0 && size % 512 == 0);
    /* the same tree gives the same bytes: digests identify templates */
    write_tar(up, tar2, &size2, sha2);
    assert_int_equal(size, size2);
    assert_string_equal(sha, sha2);
    {
        cleanup_close int fd = open(tar, O_RDONLY);
        char again[65];
        int64_t n;
        assert_int_equal(fb_sha256_fd(fd, again, &n, NULL), 0);
        assert_string_equal(again, sha);
        assert_int_equal(n, size);
    }

    assert_int_equal(mkdir(back, 0755), 0);
    cleanup_error fb_error_t err = NULL;
    if (fb_layer_tar_extract(tar, back, 300000, &err) < 0)
        fail_msg("extract: %s", err->msg);
    struct stat st, st2;
    path(p, back, "etc/issue");
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0));
    char v[8] = "";
    path(p, back, "etc/apt");
    assert_int_equal(getxattr(p, "trusted.overlay.opaque", v, sizeof v), 1);
    assert_int_equal(v[0], 'y');
    assert_int_equal(lstat(p, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);
    path(p, back, "etc/owned");
    assert_int_equal(lstat(p, &st), 0);
    assert_int_equal(st.st_uid, 300000 + 1000);
    assert_int_equal(st.st_mode & 07777, 0640);
    assert_int_equal(getxattr(p, "user.note", v, sizeof v), 4);
    assert_int_equal(getxattr(p, "trusted.secret", v, sizeof v), -1);
    path(p, back, "etc/hard");
    assert_int_equal(lstat(p, &st2), 0);
    assert_int_equal(st.st_ino, st2.st_ino);
    path(p, back, "etc/foreign");
    assert_int_equal(lstat(p, &st), 0);
    assert_int_equal(st.st_uid, 300000 + 65534);
    char t[64];
    path(p, back, "etc/abs");
    ssize_t n = readlink(p, t, sizeof t - 1);
    assert_true(n > 0);
    t[n] = '\0';
    assert_string_equal(t, "/etc/hostname");
    path(p, back, "etc/apt/.wh..wh..opq");
    assert_int_equal(lstat(p, &st), -1);
}

/* A one-entry layer tar at tar. */
static void one_entry(const char *tar, const char *name, mode_t type, const char *link, int64_t uid)
{
    struct archive *a = archive_write_new();
    assert_non_null(a);
    assert_int_equal(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
    assert_int_equal(archive_write_open_filename(a, tar), ARCHIVE_OK);
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, type);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_uid(e, uid);
    if (type == AE_IFLNK)
        archive_entry_set_symlink(e, link);
    if (type == AE_IFCHR)
        archive_entry_set_rdev(e, makedev(1, 3));
    archive_entry_set_size(e, 0);
    assert_true(archive_write_header(a, e) >= ARCHIVE_WARN);
    archive_entry_free(e);
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

static void test_refusals(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    static const struct {
        const char *name;
        mode_t type;
        const char *link;
        int64_t uid;
    } bad[] = {
        {"../evil", AE_IFREG, NULL, 0},   {"/evil", AE_IFREG, NULL, 0},
        {"dev/null", AE_IFCHR, NULL, 0},  {"x", AE_IFLNK, "../../../etc", 0},
        {"etc/.wh..", AE_IFREG, NULL, 0}, {"a/.wh..wh.other", AE_IFREG, NULL, 0},
        {"big", AE_IFREG, NULL, 70000},   {"a/../../b", AE_IFREG, NULL, 0},
    };
    char tar[PATH_MAX], dest[PATH_MAX];
    path(tar, dir, "bad.tar");
    path(dest, dir, "dest");
    assert_int_equal(mkdir(dest, 0755), 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        one_entry(tar, bad[i].name, bad[i].type, bad[i].link, bad[i].uid);
        cleanup_error fb_error_t err = NULL;
        if (fb_layer_tar_extract(tar, dest, BASE, &err) != -1)
            fail_msg("%s accepted", bad[i].name);
        assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
        /* checked before anything was written */
        cleanup_dir DIR *d = opendir(dest);
        int entries = 0;
        for (struct dirent *e; (e = readdir(d)) != NULL;)
            entries += e->d_name[0] != '.';
        assert_int_equal(entries, 0);
    }
    /* not a tar at all */
    assert_int_equal(fb_write_file(tar, "hello", 5, 0600), 0);
    cleanup_error fb_error_t err = NULL;
    assert_int_equal(fb_layer_tar_extract(tar, dest, BASE, &err), -1);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
