#include "copy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../common/cleanup.h"

/* deeper trees are refused rather than risking the stack */
#define TREE_DEPTH_MAX 256
#define XATTR_LIST_MAX_ 65536
#define XATTR_VALUE_MAX_ 65536

static int copy_errno(fb_error_t *err, const char *what)
{
    int e = errno;
    if (e == ENOSPC || e == EDQUOT || e == EFBIG)
        return fb_error_set(err, FB_ERR_TOO_LARGE, e, "%s: no space left on the host's state filesystem",
                            what);
    return fb_error_set(err, FB_ERR_INTERNAL, e, "%s", what);
}

int fb_copy_sparse(int src_fd, int dst_fd, fb_error_t *err)
{
    struct stat st;
    if (fstat(src_fd, &st) < 0)
        return fb_error_sys(err, "stat copy source");
    if (!S_ISREG(st.st_mode))
        return fb_error_set(err, FB_ERR_INTERNAL, EINVAL, "copy source is not a regular file");
    off_t size = st.st_size, pos = 0;
    while (pos < size) {
        off_t data = lseek(src_fd, pos, SEEK_DATA);
        if (data < 0 && errno == ENXIO)
            break; /* only a hole is left */
        if (data < 0)
            return fb_error_sys(err, "seek data");
        off_t hole = lseek(src_fd, data, SEEK_HOLE);
        if (hole < 0)
            return fb_error_sys(err, "seek hole");
        off_t in = data, out = data;
        while (in < hole) {
            ssize_t n = copy_file_range(src_fd, &in, dst_fd, &out, (size_t)(hole - in), 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EXDEV || errno == EOPNOTSUPP || errno == EINVAL)) {
                /* between filesystems that cannot copy to each other in
                 * the kernel (ext4 to btrfs): by hand */
                char buf[65536];
                size_t want = (size_t)(hole - in) < sizeof buf ? (size_t)(hole - in) : sizeof buf;
                n = pread(src_fd, buf, want, in);
                if (n > 0 && pwrite(dst_fd, buf, (size_t)n, out) != n)
                    return copy_errno(err, "copy data");
                if (n > 0) {
                    in += n;
                    out += n;
                }
            }
            if (n < 0)
                return copy_errno(err, "copy data");
            if (n == 0)
                break; /* the source shrank under us */
        }
        pos = hole;
    }
    if (ftruncate(dst_fd, size) < 0)
        return copy_errno(err, "size copy");
    return 0;
}

static uid_t shift(uid_t id, uid_t from, uid_t to, uid_t count)
{
    if (from == to || id < from || id - from >= count)
        return id;
    return to + (id - from);
}

static int copy_xattrs(int src_fd, int dst_fd, fb_error_t *err)
{
    cleanup_free char *list = malloc(XATTR_LIST_MAX_);
    cleanup_free char *val = malloc(XATTR_VALUE_MAX_);
    if (list == NULL || val == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "xattr buffers");
    ssize_t n = flistxattr(src_fd, list, XATTR_LIST_MAX_);
    if (n < 0)
        return errno == ENOTSUP ? 0 : fb_error_sys(err, "list xattrs");
    for (ssize_t off = 0; off < n; off += (ssize_t)strlen(list + off) + 1) {
        const char *name = list + off;
        ssize_t v = fgetxattr(src_fd, name, val, XATTR_VALUE_MAX_);
        if (v < 0)
            continue; /* vanished, or not readable: not worth failing for */
        if (fsetxattr(dst_fd, name, val, (size_t)v, 0) < 0 && errno != ENOTSUP && errno != EPERM)
            return copy_errno(err, "set xattr");
    }
    return 0;
}

/* Owner, mode and times of the new entry name in dst_fd (fd when open). */
static int copy_meta(const struct stat *st, int dst_dir, const char *name, int fd, int src_fd, uid_t from,
                     uid_t to, uid_t count, fb_error_t *err)
{
    uid_t uid = shift(st->st_uid, from, to, count);
    gid_t gid = (gid_t)shift(st->st_gid, from, to, count);
    if (fd >= 0 ? fchown(fd, uid, gid) : fchownat(dst_dir, name, uid, gid, AT_SYMLINK_NOFOLLOW))
        return fb_error_sys(err, "chown %s", name);
    /* after chown, which drops file capabilities (and setuid bits) */
    if (fd >= 0 && src_fd >= 0 && copy_xattrs(src_fd, fd, err) < 0)
        return -1;
    if (!S_ISLNK(st->st_mode) &&
        (fd >= 0 ? fchmod(fd, st->st_mode & 07777) : fchmodat(dst_dir, name, st->st_mode & 07777, 0)) < 0)
        return fb_error_sys(err, "chmod %s", name);
    struct timespec ts[2] = {st->st_atim, st->st_mtim};
    if (fd >= 0 ? futimens(fd, ts) : utimensat(dst_dir, name, ts, AT_SYMLINK_NOFOLLOW))
        return fb_error_sys(err, "times of %s", name);
    return 0;
}

static int copy_dir(int src, int dst, uid_t from, uid_t to, uid_t count, int depth, fb_error_t *err);

static int copy_entry(int src, int dst, const char *name, uid_t from, uid_t to, uid_t count, int depth,
                      fb_error_t *err)
{
    struct stat st;
    if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : fb_error_sys(err, "stat %s", name);
    if (S_ISREG(st.st_mode)) {
        cleanup_close int in = openat(src, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0)
            return fb_error_sys(err, "open %s", name);
        cleanup_close int out = openat(dst, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (out < 0)
            return copy_errno(err, "create copy");
        if (fb_copy_sparse(in, out, err) < 0)
            return -1;
        return copy_meta(&st, dst, name, out, in, from, to, count, err);
    }
    if (S_ISDIR(st.st_mode)) {
        if (depth >= TREE_DEPTH_MAX)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, ELOOP, "directory tree deeper than %d levels",
                                TREE_DEPTH_MAX);
        if (mkdirat(dst, name, 0700) < 0)
            return copy_errno(err, "create directory copy");
        cleanup_close int sd = openat(src, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        cleanup_close int dd = openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sd < 0 || dd < 0)
            return fb_error_sys(err, "open directory %s", name);
        if (copy_dir(sd, dd, from, to, count, depth + 1, err) < 0)
            return -1;
        return copy_meta(&st, dst, name, dd, sd, from, to, count, err);
    }
    if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlinkat(src, name, target, sizeof target - 1);
        if (n < 0)
            return fb_error_sys(err, "readlink %s", name);
        target[n] = '\0';
        if (symlinkat(target, dst, name) < 0)
            return copy_errno(err, "create symlink copy");
        return copy_meta(&st, dst, name, -1, -1, from, to, count, err);
    }
    bool whiteout = S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0);
    if (S_ISFIFO(st.st_mode) || whiteout) {
        if (mknodat(dst, name, st.st_mode & (S_IFMT | 0777), st.st_rdev) < 0)
            return copy_errno(err, "create node copy");
        return copy_meta(&st, dst, name, -1, -1, from, to, count, err);
    }
    return 0; /* sockets and real devices: not part of a file checkpoint */
}

static int copy_dir(int src, int dst, uid_t from, uid_t to, uid_t count, int depth, fb_error_t *err)
{
    int dup_fd = dup(src);
    if (dup_fd < 0)
        return fb_error_sys(err, "dup");
    cleanup_dir DIR *d = fdopendir(dup_fd);
    if (d == NULL) {
        close(dup_fd);
        return fb_error_sys(err, "read directory");
    }
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (copy_entry(src, dst, de->d_name, from, to, count, depth, err) < 0)
            return -1;
        errno = 0;
    }
    if (errno != 0)
        return fb_error_sys(err, "read directory");
    return 0;
}

int fb_copy_tree(int src_fd, int dst_fd, uid_t uid_from, uid_t uid_to, uid_t count, fb_error_t *err)
{
    return copy_dir(src_fd, dst_fd, uid_from, uid_to, count, 0, err);
}

static int shift_dir(int dir, uid_t from, uid_t to, uid_t count, int depth, fb_error_t *err)
{
    int dup_fd = dup(dir);
    if (dup_fd < 0)
        return fb_error_sys(err, "dup");
    cleanup_dir DIR *d = fdopendir(dup_fd);
    if (d == NULL) {
        close(dup_fd);
        return fb_error_sys(err, "read directory");
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dir, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            if (depth >= TREE_DEPTH_MAX)
                return fb_error_set(err, FB_ERR_BAD_REQUEST, ELOOP, "directory tree deeper than %d levels",
                                    TREE_DEPTH_MAX);
            cleanup_close int sd = openat(dir, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sd < 0 || shift_dir(sd, from, to, count, depth + 1, err) < 0)
                return sd < 0 ? fb_error_sys(err, "open %s", de->d_name) : -1;
        }
        uid_t uid = shift(st.st_uid, from, to, count);
        gid_t gid = (gid_t)shift(st.st_gid, from, to, count);
        if ((uid != st.st_uid || gid != st.st_gid) &&
            fchownat(dir, de->d_name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
            return fb_error_sys(err, "chown %s", de->d_name);
        /* chown clears setuid/setgid bits of files: put them back */
        if (!S_ISLNK(st.st_mode) && !S_ISDIR(st.st_mode) && (st.st_mode & 06000) != 0 &&
            fchmodat(dir, de->d_name, st.st_mode & 07777, 0) < 0)
            return fb_error_sys(err, "chmod %s", de->d_name);
    }
    return 0;
}

int fb_tree_shift_owner(int dir_fd, uid_t uid_from, uid_t uid_to, uid_t count, fb_error_t *err)
{
    if (uid_from == uid_to)
        return 0;
    struct stat st;
    if (fstat(dir_fd, &st) < 0)
        return fb_error_sys(err, "stat");
    if (shift_dir(dir_fd, uid_from, uid_to, count, 0, err) < 0)
        return -1;
    uid_t uid = shift(st.st_uid, uid_from, uid_to, count);
    gid_t gid = (gid_t)shift(st.st_gid, uid_from, uid_to, count);
    if (fchown(dir_fd, uid, gid) < 0)
        return fb_error_sys(err, "chown");
    return 0;
}
