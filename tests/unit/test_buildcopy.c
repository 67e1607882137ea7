/* COPY/ADD layers from a build context tar: contexts are built here with
 * libarchive, the layer is read back and every member checked. */
#include <archive.h>
#include <archive_entry.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "core/buildcopy.h"

static char dir[64];
static char ctx[128], out[128];

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/fb-buildcopy-test.XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(ctx, sizeof ctx, "%s/context.tar", dir);
    snprintf(out, sizeof out, "%s/layer.tar", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return fb_rm_rf(dir) < 0 ? -1 : 0;
}

/* type: f file (data), d dir, l symlink (data = target), h hardlink (data
 * = target), c char device, p fifo */
struct spec {
    const char *name;
    char type;
    const char *data;
    mode_t mode;
    size_t len; /* data length when it holds NULs; 0: strlen */
};

static void write_tar(struct archive *a, const struct spec *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *ae = archive_entry_new();
        archive_entry_set_pathname(ae, s[i].name);
        mode_t ft = s[i].type == 'd'   ? AE_IFDIR
                    : s[i].type == 'l' ? AE_IFLNK
                    : s[i].type == 'c' ? AE_IFCHR
                    : s[i].type == 'p' ? AE_IFIFO
                                       : AE_IFREG;
        archive_entry_set_filetype(ae, ft);
        archive_entry_set_perm(ae, s[i].mode ? s[i].mode : (s[i].type == 'd' ? 0755 : 0644));
        archive_entry_set_uid(ae, 501);
        archive_entry_set_gid(ae, 20);
        archive_entry_set_mtime(ae, 1700000000 + (time_t)i, 0);
        size_t len = s[i].type == 'f' && s[i].data ? (s[i].len ? s[i].len : strlen(s[i].data)) : 0;
        archive_entry_set_size(ae, (la_int64_t)len);
        if (s[i].type == 'l')
            archive_entry_set_symlink(ae, s[i].data);
        if (s[i].type == 'h')
            archive_entry_set_hardlink(ae, s[i].data);
        assert_true(archive_write_header(a, ae) >= ARCHIVE_WARN);
        if (len > 0)
            assert_int_equal(archive_write_data(a, s[i].data, len), (la_ssize_t)len);
        archive_entry_free(ae);
    }
}

static void make_ctx_at(const char *path, const struct spec *s, size_t n, const char *filter)
{
    struct archive *a = archive_write_new();
    assert_int_equal(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
    if (filter != NULL)
        assert_int_equal(archive_write_add_filter_by_name(a, filter), ARCHIVE_OK);
    assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
    write_tar(a, s, n);
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

#define MAKE_CTX(arr) make_ctx_at(ctx, (arr), sizeof(arr) / sizeof((arr)[0]), NULL)

/* An archive in memory, to be put into a context as a file. */
static char *tar_bytes(const struct spec *s, size_t n, const char *filter, size_t *len)
{
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    assert_non_null(buf);
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    if (filter != NULL)
        assert_int_equal(archive_write_add_filter_by_name(a, filter), ARCHIVE_OK);
    assert_int_equal(archive_write_open_memory(a, buf, cap, len), ARCHIVE_OK);
    write_tar(a, s, n);
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
    return buf;
}

#define GOT_MAX 64

struct got {
    char name[512];
    char type; /* f d l h */
    mode_t mode;
    long uid, gid;
    char link[512];
    char data[256];
    long mtime;
};

static size_t read_layer(struct got *g)
{
    struct archive *a = archive_read_new();
    archive_read_support_format_tar(a);
    assert_int_equal(archive_read_open_filename(a, out, 10240), ARCHIVE_OK);
    size_t n = 0;
    struct archive_entry *ae;
    while (archive_read_next_header(a, &ae) == ARCHIVE_OK) {
        assert_true(n < GOT_MAX);
        struct got *x = &g[n++];
        memset(x, 0, sizeof *x);
        snprintf(x->name, sizeof x->name, "%s", archive_entry_pathname(ae));
        size_t l = strlen(x->name);
        if (l > 0 && x->name[l - 1] == '/')
            x->name[l - 1] = '\0';
        assert_true(x->name[0] != '/');
        x->mode = archive_entry_perm(ae);
        x->uid = (long)archive_entry_uid(ae);
        x->gid = (long)archive_entry_gid(ae);
        x->mtime = (long)archive_entry_mtime(ae);
        if (archive_entry_hardlink(ae)) {
            x->type = 'h';
            snprintf(x->link, sizeof x->link, "%s", archive_entry_hardlink(ae));
        } else if (archive_entry_filetype(ae) == AE_IFDIR) {
            x->type = 'd';
        } else if (archive_entry_filetype(ae) == AE_IFLNK) {
            x->type = 'l';
            snprintf(x->link, sizeof x->link, "%s", archive_entry_symlink(ae));
        } else {
            assert_int_equal(archive_entry_filetype(ae), AE_IFREG);
            x->type = 'f';
            la_ssize_t r = archive_read_data(a, x->data, sizeof x->data - 1);
            assert_true(r >= 0);
        }
    }
    archive_read_free(a);
    return n;
}

static const struct got *get(const struct got *g, size_t n, const char *name)
{
    for (size_t i = n; i-- > 0;)
        if (strcmp(g[i].name, name) == 0)
            return &g[i];
    return NULL;
}

static void names_are(const struct got *g, size_t n, const char *const *want, size_t nwant)
{
    for (size_t i = 0; i < nwant; i++)
        if (get(g, n, want[i]) == NULL)
            fail_msg("layer lacks %s", want[i]);
    if (n != nwant) {
        for (size_t i = 0; i < n; i++)
            print_message("  got %c %s\n", g[i].type, g[i].name);
        fail_msg("layer has %zu members, want %zu", n, nwant);
    }
}

#define NAMES_ARE(g, n, ...)                                                                                 \
    do {                                                                                                     \
        const char *const w_[] = {__VA_ARGS__};                                                              \
        names_are((g), (n), w_, sizeof w_ / sizeof w_[0]);                                                   \
    } while (0)

static void expect_file(const struct got *g, size_t n, const char *name, const char *data, mode_t mode,
                        long uid)
{
    const struct got *x = get(g, n, name);
    if (x == NULL)
        fail_msg("no %s", name);
    assert_int_equal(x->type, 'f');
    assert_string_equal(x->data, data);
    assert_int_equal(x->mode, mode);
    assert_int_equal(x->uid, uid);
    assert_int_equal(x->gid, uid);
}

static void expect_dir(const struct got *g, size_t n, const char *name, mode_t mode, long uid)
{
    const struct got *x = get(g, n, name);
    if (x == NULL)
        fail_msg("no %s", name);
    assert_int_equal(x->type, 'd');
    assert_int_equal(x->mode, mode);
    assert_int_equal(x->uid, uid);
}

#define COPY_OK(dest, add, uid, ...)                                                                         \
    do {                                                                                                     \
        cleanup_error fb_error_t e_ = NULL;                                                                  \
        const char *s_[] = {__VA_ARGS__};                                                                    \
        if (copy_v((dest), (add), (uid), &e_, s_, sizeof s_ / sizeof s_[0]) != 0)                            \
            fail_msg("refused: %s", e_->msg);                                                                \
    } while (0)

static int copy_v(const char *dest, bool add, uid_t uid, fb_error_t *err, const char *const *srcs, size_t n)
{
    struct fb_buildcopy_stats st;
    unlink(out);
    int rc = fb_buildcopy_layer(ctx, srcs, n, dest, uid, uid, add, out, &st, err);
    if (rc == 0)
        assert_true(st.entries > 0);
    else
        assert_int_equal(access(out, F_OK), -1); /* no partial layer left */
    return rc;
}

static void expect_refused(const char *dest, bool add, const char *part, size_t n, const char *const *srcs)
{
    cleanup_error fb_error_t err = NULL;
    if (copy_v(dest, add, 0, &err, srcs, n) != -1)
        fail_msg("accepted");
    if (strstr(err->msg, part) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", err->msg, part);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
}

#define REFUSED(dest, add, part, ...)                                                                        \
    do {                                                                                                     \
        const char *s_[] = {__VA_ARGS__};                                                                    \
        expect_refused((dest), (add), (part), sizeof s_ / sizeof s_[0], s_);                                 \
    } while (0)

static const struct spec app[] = {
    {"./", 'd', NULL, 0755, 0},
    {"./app/", 'd', NULL, 0750, 0},
    {"./app/main.py", 'f', "print(1)\n", 0755, 0},
    {"./app/util.py", 'f', "u\n", 0644, 0},
    {"./app/README", 'f', "r\n", 0600, 0},
    {"./app/lib/x.py", 'f', "x\n", 0644, 0}, /* app/lib has no member: implied */
    {"./a.txt", 'f', "a\n", 04755, 0},
    {"./b.txt", 'f', "b\n", 0644, 0},
    {"./c1.md", 'f', "c\n", 0644, 0},
    {"./.hidden", 'f', "h\n", 0644, 0},
};

static void test_file_to_file(void **state)
{
    (void)state;
    MAKE_CTX(app);
    struct got g[GOT_MAX];
    COPY_OK("/srv/bin/run.py", false, 0, "app/main.py");
    size_t n = read_layer(g);
    NAMES_ARE(g, n, "srv", "srv/bin", "srv/bin/run.py");
    expect_dir(g, n, "srv", 0755, 0);
    expect_file(g, n, "srv/bin/run.py", "print(1)\n", 0755, 0);
    assert_int_equal(get(g, n, "srv/bin/run.py")->mtime, 1700000002);
    /* a leading '/' is the context root too; setuid is kept */
    COPY_OK("/a", false, 0, "/a.txt");
    n = read_layer(g);
    NAMES_ARE(g, n, "a");
    expect_file(g, n, "a", "a\n", 04755, 0);
}

static void test_file_to_dir_and_chown(void **state)
{
    (void)state;
    MAKE_CTX(app);
    struct got g[GOT_MAX];
    COPY_OK("/srv/", false, 1000, "app/main.py");
    size_t n = read_layer(g);
    NAMES_ARE(g, n, "srv", "srv/main.py");
    expect_dir(g, n, "srv", 0755, 1000);
    expect_file(g, n, "srv/main.py", "print(1)\n", 0755, 1000);
    /* dest "/" */
    COPY_OK("/", false, 7, "b.txt");
    n = read_layer(g);
    NAMES_ARE(g, n, "b.txt");
    expect_file(g, n, "b.txt", "b\n", 0644, 7);
}

static void test_dir_contents(void **state)
{
    (void)state;
    MAKE_CTX(app);
    struct got g[GOT_MAX];
    COPY_OK("/opt/app", false, 1000, "app");
    size_t n = read_layer(g);
    NAMES_ARE(g, n, "opt", "opt/app", "opt/app/main.py", "opt/app/util.py", "opt/app/README", "opt/app/lib",
              "opt/app/lib/x.py");
    expect_dir(g, n, "opt", 0755, 0);
    expect_dir(g, n, "opt/app", 0750, 1000); /* the source dir's mode */
    expect_dir(g, n, "opt/app/lib", 0755, 1000);
    expect_file(g, n, "opt/app/README", "r\n", 0600, 1000);
    /* directories come before what is in them */
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            assert_false(strncmp(g[i].name, g[j].name, strlen(g[j].name)) == 0 &&
                         g[i].name[strlen(g[j].name)] == '/');
}

static void test_globs(void **state)
{
    (void)state;
    MAKE_CTX(app);
    struct got g[GOT_MAX];
    COPY_OK("/d/", false, 0, "app/*.py");
    size_t n = read_layer(g);
    NAMES_ARE(g, n, "d", "d/main.py", "d/util.py");
    COPY_OK("/d", false, 0, "?.txt", "c[0-9].md");
    n = read_layer(g);
    NAMES_ARE(g, n, "d", "d/a.txt", "d/b.txt", "d/c1.md");
    /* one match into a dest without '/': a file */
    COPY_OK("/only", false, 0, "c*.md");
    n = read_layer(g);
    NAMES_ARE(g, n, "only");
    /* * matches dot files, as in Docker */
    COPY_OK("/h/", false, 0, "*hidden");
    n = read_layer(g);
    NAMES_ARE(g, n, "h", "h/.hidden");
    REFUSED("/x/", false, "COPY: app/*.rs: no such file or directory in the build context", "app/*.rs");
}

static void test_whole_context_and_multiple(void **state)
{
    (void)state;
    MAKE_CTX(app);
    struct got g[GOT_MAX];
    COPY_OK("/w/", false, 0, ".");
    size_t n = read_layer(g);
    NAMES_ARE(g, n, "w", "w/app", "w/app/main.py", "w/app/util.py", "w/app/README", "w/app/lib",
              "w/app/lib/x.py", "w/a.txt", "w/b.txt", "w/c1.md", "w/.hidden");
    COPY_OK("/", false, 0, "./");
    n = read_layer(g);
    assert_non_null(get(g, n, "app/lib/x.py"));
    /* several sources: dest is a directory even without '/' */
    COPY_OK("/m", false, 0, "a.txt", "b.txt");
    n = read_layer(g);
    NAMES_ARE(g, n, "m", "m/a.txt", "m/b.txt");
    /* the same name twice: one member */
    COPY_OK("/m/", false, 0, "a.txt", "a.txt");
    n = read_layer(g);
    NAMES_ARE(g, n, "m", "m/a.txt");
}

static void test_missing_and_escapes(void **state)
{
    (void)state;
    MAKE_CTX(app);
    struct got g[GOT_MAX];
    REFUSED("/x", false, "COPY: nope.txt: no such file or directory in the build context", "nope.txt");
    REFUSED("/x", true, "ADD: nope: no such file or directory in the build context", "a.txt", "nope");
    REFUSED("/x", false, "COPY: ../etc/passwd: is outside the build context", "../etc/passwd");
    REFUSED("/x", false, "is outside the build context", "app/../../x");
    REFUSED("relative", false, "the destination must be an absolute path", "a.txt");
    /* ".." inside the context is fine */
    COPY_OK("/x", false, 0, "app/../a.txt");
    size_t n = read_layer(g);
    NAMES_ARE(g, n, "x");
}

static void test_symlinks_not_followed(void **state)
{
    (void)state;
    const struct spec s[] = {
        {"etc-link", 'l', "/etc/passwd", 0, 0},
        {"app/", 'd', NULL, 0, 0},
        {"app/f", 'f', "f\n", 0, 0},
        {"dirlink", 'l', "app", 0, 0},
        {"up", 'l', "../../../../etc", 0, 0},
    };
    MAKE_CTX(s);
    struct got g[GOT_MAX];
    COPY_OK("/l", false, 5, "etc-link");
    size_t n = read_layer(g);
    NAMES_ARE(g, n, "l");
    assert_int_equal(get(g, n, "l")->type, 'l');
    assert_string_equal(get(g, n, "l")->link, "/etc/passwd");
    assert_int_equal(get(g, n, "l")->uid, 5);
    /* a path through a symlink of the context does not exist */
    REFUSED("/x", false, "COPY: dirlink/f: no such file or directory in the build context", "dirlink/f");
    COPY_OK("/c/", false, 0, ".");
    n = read_layer(g);
    NAMES_ARE(g, n, "c", "c/etc-link", "c/app", "c/app/f", "c/dirlink", "c/up");
    assert_string_equal(get(g, n, "c/up")->link, "../../../../etc");
    /* a source symlink and a source dir that would put members under it */
    const struct spec t[] = {{"x/", 'd', NULL, 0, 0},
                             {"x/sub/", 'd', NULL, 0, 0},
                             {"x/sub/f", 'f', "f", 0, 0},
                             {"y/", 'd', NULL, 0, 0},
                             {"y/sub", 'l', "/etc", 0, 0}};
    MAKE_CTX(t);
    REFUSED("/d/", false, "would be below \"d/sub\", which is not a directory", "x", "y");
}

static void test_specials_refused(void **state)
{
    (void)state;
    const struct spec s[] = {{"dev/", 'd', NULL, 0, 0},
                             {"dev/null", 'c', NULL, 0666, 0},
                             {"fifo", 'p', NULL, 0644, 0},
                             {"ok", 'f', "ok", 0, 0}};
    MAKE_CTX(s);
    REFUSED("/x/", false, "COPY: \"dev/null\": device nodes, fifos and sockets cannot be copied", "dev");
    REFUSED("/x/", false, "\"fifo\": device nodes, fifos and sockets cannot be copied", "fifo");
    REFUSED("/x/", false, "device nodes", ".");
    /* left out of the selection they do not matter */
    struct got g[GOT_MAX];
    COPY_OK("/x", false, 0, "ok");
    size_t n = read_layer(g);
    NAMES_ARE(g, n, "x");
}

static void test_hostile_context(void **state)
{
    (void)state;
    const struct spec up[] = {{"../evil", 'f', "x", 0, 0}};
    MAKE_CTX(up);
    REFUSED("/x", false, "build context member \"../evil\": climbs above the context root", "evil");
    const struct spec wh[] = {{"d/.wh.passwd", 'f', "", 0, 0}};
    MAKE_CTX(wh);
    REFUSED("/etc/", false, "names starting with .wh. are reserved for layer whiteouts", "d");
    const struct spec under[] = {{"f", 'l', "/etc", 0, 0}, {"f/passwd", 'f', "x", 0, 0}};
    MAKE_CTX(under);
    REFUSED("/x/", false, "build context member \"f/passwd\": below a member that is not a directory", ".");
    const struct spec hl[] = {{"h", 'h', "later", 0, 0}, {"later", 'f', "x", 0, 0}};
    MAKE_CTX(hl);
    REFUSED("/x/", false, "hardlink to a member that is not before it", "h");
    /* not a tar at all */
    assert_int_equal(fb_write_file(ctx, "garbage garbage garbage", 23, 0644), 0);
    REFUSED("/x", false, "build context: not a tar archive", "a");
}

static void test_hardlinks(void **state)
{
    (void)state;
    const struct spec s[] = {
        {"data/", 'd', NULL, 0, 0},
        {"data/orig", 'f', "shared\n", 0640, 0},
        {"data/link", 'h', "data/orig", 0640, 0},
        {"solo", 'h', "data/orig", 0640, 0},
    };
    MAKE_CTX(s);
    struct got g[GOT_MAX];
    COPY_OK("/h/", false, 0, "data", "solo");
    size_t n = read_layer(g);
    NAMES_ARE(g, n, "h", "h/orig", "h/link", "h/solo");
    expect_file(g, n, "h/orig", "shared\n", 0640, 0);
    assert_int_equal(get(g, n, "h/link")->type, 'h');
    assert_string_equal(get(g, n, "h/link")->link, "h/orig");
    assert_string_equal(get(g, n, "h/solo")->link, "h/orig");
    /* without its target, a hardlink is a file of its own */
    COPY_OK("/one", false, 0, "data/link");
    n = read_layer(g);
    NAMES_ARE(g, n, "one");
    expect_file(g, n, "one", "shared\n", 0640, 0);
}

static void test_gzip_context(void **state)
{
    (void)state;
    make_ctx_at(ctx, app, sizeof app / sizeof app[0], "gzip");
    struct got g[GOT_MAX];
    COPY_OK("/z/", false, 0, "b.txt");
    size_t n = read_layer(g);
    NAMES_ARE(g, n, "z", "z/b.txt");
    expect_file(g, n, "z/b.txt", "b\n", 0644, 0);
}

static void test_add_archives(void **state)
{
    (void)state;
    const struct spec inner[] = {
        {"./", 'd', NULL, 0755, 0},        {"pkg/", 'd', NULL, 0700, 0},
        {"pkg/a", 'f', "A\n", 0644, 0},    {"pkg/deep/b", 'f', "B\n", 0600, 0},
        {"pkg/ln", 'l', "/usr/bin", 0, 0}, {"pkg/hl", 'h', "pkg/a", 0644, 0},
    };
    size_t tl = 0, gl = 0, xl = 0;
    cleanup_free char *t = tar_bytes(inner, 6, NULL, &tl);
    cleanup_free char *tgz = tar_bytes(inner, 6, "gzip", &gl);
    cleanup_free char *txz = tar_bytes(inner, 6, "xz", &xl);
    const struct spec s[] = {
        {"plain.tar", 'f', t, 0644, tl},
        {"data.tar.gz", 'f', tgz, 0644, gl},
        {"data.tar.xz", 'f', txz, 0644, xl},
        {"notes.txt", 'f', "not an archive\n", 0644, 0},
    };
    MAKE_CTX(s);
    struct got g[GOT_MAX];
    const char *names[] = {"plain.tar", "data.tar.gz", "data.tar.xz"};
    for (size_t i = 0; i < 3; i++) {
        COPY_OK("/opt", true, 1000, names[i]);
        size_t n = read_layer(g);
        NAMES_ARE(g, n, "opt", "opt/pkg", "opt/pkg/a", "opt/pkg/deep", "opt/pkg/deep/b", "opt/pkg/ln",
                  "opt/pkg/hl");
        expect_dir(g, n, "opt/pkg", 0700, 1000);
        expect_dir(g, n, "opt/pkg/deep", 0755, 1000); /* implied */
        expect_file(g, n, "opt/pkg/deep/b", "B\n", 0600, 1000);
        assert_string_equal(get(g, n, "opt/pkg/ln")->link, "/usr/bin");
        assert_string_equal(get(g, n, "opt/pkg/hl")->link, "opt/pkg/a");
    }
    /* ADD of a file that is no archive copies it; COPY never unpacks */
    COPY_OK("/n/", true, 0, "notes.txt", "plain.tar");
    size_t n = read_layer(g);
    NAMES_ARE(g, n, "n", "n/notes.txt", "n/pkg", "n/pkg/a", "n/pkg/deep", "n/pkg/deep/b", "n/pkg/ln",
              "n/pkg/hl");
    COPY_OK("/c/", false, 0, "data.tar.gz");
    n = read_layer(g);
    NAMES_ARE(g, n, "c", "c/data.tar.gz");

    REFUSED("/x", true,
            "ADD from a URL is not supported (no network during builds); download it into the context",
            "https://example.com/x.tar.gz");
    REFUSED("/x", false, "COPY cannot fetch a URL", "http://example.com/x");
}

static void add_refused(const struct spec *inner, size_t n, const char *part)
{
    size_t tl = 0;
    cleanup_free char *t = tar_bytes(inner, n, NULL, &tl);
    const struct spec s[] = {{"evil.tar", 'f', t, 0644, tl}};
    MAKE_CTX(s);
    REFUSED("/opt/", true, part, "evil.tar");
}

static void test_add_hostile_archives(void **state)
{
    (void)state;
    const struct spec up[] = {{"ok", 'f', "x", 0, 0}, {"../../etc/passwd", 'f', "x", 0, 0}};
    add_refused(up, 2, "ADD: evil.tar: archive member \"../../etc/passwd\": climbs above the destination");
    const struct spec abs[] = {{"ok", 'f', "x", 0, 0}, {"/etc/passwd", 'f', "x", 0, 0}};
    add_refused(abs, 2, "archive member \"/etc/passwd\": absolute");
    const struct spec dev[] = {{"ok", 'f', "x", 0, 0}, {"null", 'c', NULL, 0, 0}};
    add_refused(dev, 2, "archive member \"opt/null\": device nodes");
    const struct spec hl[] = {{"ok", 'f', "x", 0, 0}, {"shadow", 'h', "../../etc/shadow", 0, 0}};
    add_refused(hl, 2, "archive member \"../../etc/shadow\": climbs above the destination");
    const struct spec hl2[] = {{"ok", 'f', "x", 0, 0}, {"shadow", 'h', "etc/shadow", 0, 0}};
    add_refused(hl2, 2, "hardlink to one not before it in the archive");
    const struct spec thru[] = {{"l", 'l', "/etc", 0, 0}, {"l/passwd", 'f', "x", 0, 0}};
    add_refused(thru, 2, "archive member \"opt/l/passwd\" is below one that is not a directory");
    const struct spec wh[] = {{".wh.bin", 'f', "", 0, 0}};
    add_refused(wh, 1, "names starting with .wh. are reserved");
}

static void test_dockerignore(void **state)
{
    (void)state;
    const struct spec s[] = {
        {".dockerignore", 'f', "# comment\n*.log\n!keep.log\n**/tmp\nsecret\n/build\n\n", 0, 0},
        {"a.log", 'f', "x", 0, 0},
        {"keep.log", 'f', "k", 0, 0},
        {"src/", 'd', NULL, 0, 0},
        {"src/b.log", 'f', "in a subdir: not matched by *.log", 0, 0},
        {"src/tmp/", 'd', NULL, 0, 0},
        {"src/tmp/t", 'f', "t", 0, 0},
        {"tmp/u", 'f', "u", 0, 0},
        {"secret/key", 'f', "k", 0, 0},
        {"build/out", 'f', "o", 0, 0},
        {"main.c", 'f', "m", 0, 0},
    };
    MAKE_CTX(s);
    struct got g[GOT_MAX];
    COPY_OK("/w/", false, 0, ".");
    size_t n = read_layer(g);
    NAMES_ARE(g, n, "w", "w/.dockerignore", "w/keep.log", "w/src", "w/src/b.log", "w/main.c");
    REFUSED("/x", false, "COPY: secret/key: no such file or directory in the build context", "secret/key");
    COPY_OK("/x/", false, 0, "*.log");
    n = read_layer(g);
    NAMES_ARE(g, n, "x", "x/keep.log");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_to_file),
        cmocka_unit_test(test_file_to_dir_and_chown),
        cmocka_unit_test(test_dir_contents),
        cmocka_unit_test(test_globs),
        cmocka_unit_test(test_whole_context_and_multiple),
        cmocka_unit_test(test_missing_and_escapes),
        cmocka_unit_test(test_symlinks_not_followed),
        cmocka_unit_test(test_specials_refused),
        cmocka_unit_test(test_hostile_context),
        cmocka_unit_test(test_hardlinks),
        cmocka_unit_test(test_gzip_context),
        cmocka_unit_test(test_add_archives),
        cmocka_unit_test(test_add_hostile_archives),
        cmocka_unit_test(test_dockerignore),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
