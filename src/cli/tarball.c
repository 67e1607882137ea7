#include "cli/tarball.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"

static void archive_readp(struct archive **a)
{
    if (*a != NULL)
        archive_read_free(*a);
    *a = NULL;
}
static void archive_writep(struct archive **a)
{
    if (*a != NULL)
        archive_write_free(*a);
    *a = NULL;
}
static void entryp(struct archive_entry **e)
{
    if (*e != NULL)
        archive_entry_free(*e);
    *e = NULL;
}
#define cleanup_archive_read __attribute__((cleanup(archive_readp)))
#define cleanup_archive_write __attribute__((cleanup(archive_writep)))
#define cleanup_entry __attribute__((cleanup(entryp)))

FILE *fb_temp_file(fb_error_t *err)
{
    const char *dir = getenv("TMPDIR");
    cleanup_free char *tmpl = NULL;
    if (asprintf(&tmpl, "%s/forkbox-XXXXXX", dir && dir[0] ? dir : "/tmp") < 0) {
        tmpl = NULL;
        fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "temp file");
        return NULL;
    }
    cleanup_close int fd = mkostemp(tmpl, O_CLOEXEC);
    if (fd < 0) {
        fb_error_sys(err, "create a temp file in %s", dir && dir[0] ? dir : "/tmp");
        return NULL;
    }
    unlink(tmpl);
    FILE *f = fdopen(fd, "w+");
    if (f == NULL) {
        fb_error_sys(err, "temp file");
        return NULL;
    }
    fb_steal_fd(&fd);
    return f;
}

static int copy_disk_data(struct archive *disk, struct archive *w, const char *name, fb_error_t *err)
{
    char buf[65536];
    for (;;) {
        la_ssize_t n = archive_read_data(disk, buf, sizeof buf);
        if (n < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "read %s: %s", name, archive_error_string(disk));
        if (n == 0)
            return 0;
        if (archive_write_data(w, buf, (size_t)n) != n)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "archive %s: %s", name, archive_error_string(w));
    }
}

/* Member name of path relative to root, or NULL for the root itself. */
static const char *relative_name(const char *path, const char *root, size_t rootlen)
{
    const char *p = path;
    if (strncmp(path, root, rootlen) == 0)
        p = path + rootlen;
    while (*p == '/')
        p++;
    return *p ? p : NULL;
}

int fb_tar_create(const char *dir, FILE *out, long *count, fb_error_t *err)
{
    cleanup_free char *root = strdup(dir);
    if (root == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "archive");
    size_t rootlen = strlen(root);
    while (rootlen > 1 && root[rootlen - 1] == '/')
        root[--rootlen] = '\0';

    cleanup_archive_read struct archive *disk = archive_read_disk_new();
    cleanup_archive_write struct archive *w = archive_write_new();
    if (disk == NULL || w == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "archive");
    archive_read_disk_set_symlink_physical(disk);
    /* host xattrs, ACLs and flags mean nothing inside a sandbox */
    archive_read_disk_set_behavior(disk, ARCHIVE_READDISK_NO_XATTR | ARCHIVE_READDISK_NO_ACL |
                                             ARCHIVE_READDISK_NO_FFLAGS | ARCHIVE_READDISK_NO_SPARSE);
    if (archive_write_set_format_pax_restricted(w) != ARCHIVE_OK ||
        archive_write_open_FILE(w, out) != ARCHIVE_OK)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "archive: %s", archive_error_string(w));
    if (archive_read_disk_open(disk, root) != ARCHIVE_OK)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "%s: %s", root, archive_error_string(disk));

    *count = 0;
    for (;;) {
        cleanup_entry struct archive_entry *e = archive_entry_new();
        if (e == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "archive");
        int r = archive_read_next_header2(disk, e);
        if (r == ARCHIVE_EOF)
            break;
        if (r == ARCHIVE_WARN)
            fprintf(stderr, "forkbox: warning: %s\n", archive_error_string(disk));
        else if (r != ARCHIVE_OK)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "%s: %s", root, archive_error_string(disk));
        archive_read_disk_descend(disk);

        const char *path = archive_entry_pathname(e);
        const char *rel = relative_name(path, root, rootlen);
        if (rel == NULL)
            continue;
        mode_t type = archive_entry_filetype(e);
        if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
            fprintf(stderr, "forkbox: skipping %s: not a file, directory or symlink\n", path);
            continue;
        }
        cleanup_free char *name = strdup(rel);
        cleanup_free char *shown = strdup(path);
        if (name == NULL || shown == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "archive");
        archive_entry_set_pathname(e, name);
        /* host owners mean nothing inside the sandbox, where commands run as root */
        archive_entry_set_uid(e, 0);
        archive_entry_set_gid(e, 0);
        archive_entry_set_uname(e, "root");
        archive_entry_set_gname(e, "root");
        r = archive_write_header(w, e);
        if (r == ARCHIVE_WARN)
            fprintf(stderr, "forkbox: warning: %s: %s\n", shown, archive_error_string(w));
        else if (r != ARCHIVE_OK)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "archive %s: %s", shown, archive_error_string(w));
        if (type == AE_IFREG && archive_entry_size(e) > 0 && copy_disk_data(disk, w, shown, err) < 0)
            return -1;
        (*count)++;
    }
    if (archive_write_close(w) != ARCHIVE_OK)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "archive: %s", archive_error_string(w));
    return 0;
}

static int copy_entry_data(struct archive *in, struct archive *out, const char *name, fb_error_t *err)
{
    for (;;) {
        const void *buf;
        size_t size;
        la_int64_t offset;
        int r = archive_read_data_block(in, &buf, &size, &offset);
        if (r == ARCHIVE_EOF)
            return 0;
        if (r != ARCHIVE_OK)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "read %s: %s", name, archive_error_string(in));
        if (archive_write_data_block(out, buf, size, offset) != ARCHIVE_OK)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "write %s: %s", name, archive_error_string(out));
    }
}

static int extract_all(struct archive *in, struct archive *out, long *count, fb_error_t *err)
{
    struct archive_entry *e;
    *count = 0;
    for (;;) {
        int r = archive_read_next_header(in, &e);
        if (r == ARCHIVE_EOF)
            return 0;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "reading the archive: %s", archive_error_string(in));
        cleanup_free char *name = strdup(archive_entry_pathname(e) ? archive_entry_pathname(e) : "?");
        if (name == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "archive");
        mode_t type = archive_entry_filetype(e);
        bool hardlink = archive_entry_hardlink(e) != NULL;
        if (!hardlink && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
            fprintf(stderr, "forkbox: skipping %s: not a file, directory or symlink\n", name);
            continue;
        }
        /* files from a sandbox must never become set-id programs on the host */
        archive_entry_set_perm(e, archive_entry_perm(e) & 0777);
        r = archive_write_header(out, e);
        if (r == ARCHIVE_WARN)
            fprintf(stderr, "forkbox: warning: %s: %s\n", name, archive_error_string(out));
        else if (r != ARCHIVE_OK)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "refusing %s: %s", name,
                                archive_error_string(out));
        if (archive_entry_size(e) > 0 && copy_entry_data(in, out, name, err) < 0)
            return -1;
        if (archive_write_finish_entry(out) < ARCHIVE_WARN)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "write %s: %s", name, archive_error_string(out));
        (*count)++;
    }
}

int fb_tar_extract(int fd, const char *dest, long *count, fb_error_t *err)
{
    if (mkdir(dest, 0777) < 0 && errno != EEXIST)
        return fb_error_sys(err, "create %s", dest);
    cleanup_close int dest_fd = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dest_fd < 0)
        return fb_error_sys(err, "open %s", dest);
    cleanup_close int cwd_fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cwd_fd < 0)
        return fb_error_sys(err, "open the current directory");

    cleanup_archive_read struct archive *in = archive_read_new();
    cleanup_archive_write struct archive *out = archive_write_disk_new();
    if (in == NULL || out == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "archive");
    archive_read_support_format_tar(in);
    archive_read_support_filter_all(in);
    archive_write_disk_set_options(
        out, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                 ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS);
    if (archive_read_open_fd(in, fd, 65536) != ARCHIVE_OK)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "reading the archive: %s", archive_error_string(in));

    /* Relative member names resolve against dest only through the working
     * directory: prefixing them would defeat the absolute-path check. */
    if (fchdir(dest_fd) < 0)
        return fb_error_sys(err, "enter %s", dest);
    int r = extract_all(in, out, count, err);
    /* closing applies deferred directory modes and times by relative name:
     * it must happen here, still inside dest, even after a failure */
    if (archive_write_close(out) != ARCHIVE_OK && r == 0)
        r = fb_error_set(err, FB_ERR_INTERNAL, 0, "%s: %s", dest, archive_error_string(out));
    if (fchdir(cwd_fd) < 0 && r == 0)
        r = fb_error_sys(err, "return to the current directory");
    return r;
}
