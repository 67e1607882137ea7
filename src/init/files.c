/* File operations, executed inside the sandbox's mount namespace and root.
 *
 * Every path is resolved with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
 * from the sandbox root: ".." stops at "/", absolute symlinks resolve
 * inside the sandbox, and /proc magic links (which could lead to another
 * root) are refused.  The final component is never followed when it is
 * replaced or removed, so a planted symlink is replaced, not written
 * through. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/wire.h"
#include "init.h"

#define CHUNK 65536
#define MAX_DEPTH 256
#define MAX_ENTRIES 100000

static int root_fd = -1;

/* While an archive is extracted, every path is resolved beneath its
 * target directory without following any symlink, so links the archive
 * (or the sandbox) planted cannot redirect later members elsewhere. */
static int beneath_fd = -1;
static char beneath_path[4096];

static int resolve(const char *path, int flags, mode_t mode)
{
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .mode = (flags & O_CREAT) ? mode : 0,
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    int dirfd = root_fd;
    if (beneath_fd >= 0) {
        size_t blen = strlen(beneath_path);
        if (strcmp(beneath_path, "/") != 0) {
            if (strncmp(path, beneath_path, blen) != 0 || (path[blen] != '/' && path[blen] != '\0'))
                return -EXDEV;
            path += blen;
        }
        dirfd = beneath_fd;
        how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    }
    while (*path == '/')
        path++;
    if (*path == '\0')
        path = ".";
    int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
    return fd < 0 ? -errno : fd;
}

/* Splits a normalised absolute path into its parent (opened as a directory
 * inside the root, created first when mkdirs) and its last component. */
static int open_parent(const char *path, bool mkdirs, char *name, size_t namelen)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL || slash[1] == '\0' || strcmp(slash + 1, ".") == 0 || strcmp(slash + 1, "..") == 0)
        return -EINVAL;
    if (strlen(slash + 1) >= namelen)
        return -ENAMETOOLONG;
    strcpy(name, slash + 1);
    char dir[4096];
    size_t dlen = (size_t)(slash - path);
    if (dlen >= sizeof dir)
        return -ENAMETOOLONG;
    memcpy(dir, path, dlen);
    dir[dlen] = '\0';
    if (mkdirs) {
        /* create each missing component, resolving every prefix from the
         * root again so no component is trusted across steps */
        for (size_t i = 1; i <= dlen; i++) {
            if (i != dlen && dir[i] != '/')
                continue;
            if (beneath_fd >= 0 && i <= strlen(beneath_path))
                continue; /* the extraction target itself exists already */
            char save = dir[i];
            dir[i] = '\0';
            const char *cslash = strrchr(dir, '/');
            char prefix[4096];
            size_t plen = (size_t)(cslash - dir);
            memcpy(prefix, dir, plen);
            prefix[plen] = '\0';
            int pfd = resolve(prefix, O_PATH | O_DIRECTORY, 0);
            if (pfd < 0)
                return pfd;
            int r = mkdirat(pfd, cslash + 1, 0755);
            int e = errno;
            close(pfd);
            dir[i] = save;
            if (r < 0 && e != EEXIST)
                return -e;
        }
    }
    return resolve(dir, O_PATH | O_DIRECTORY, 0);
}

static const char *type_name(mode_t m)
{
    if (S_ISREG(m))
        return "file";
    if (S_ISDIR(m))
        return "dir";
    if (S_ISLNK(m))
        return "symlink";
    return "other";
}

static json_t *stat_json(const char *name, const struct stat *st)
{
    json_t *j = json_pack("{s:s, s:I, s:i, s:I, s:i, s:i}", "type", type_name(st->st_mode), "size",
                          (json_int_t)st->st_size, "mode", (int)(st->st_mode & 07777), "mtime",
                          (json_int_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000, "uid",
                          (int)st->st_uid, "gid", (int)st->st_gid);
    if (j != NULL && fb_wire_set_bytes(j, "name", name) < 0) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

static int send_entry(int conn, json_t *e)
{
    if (e == NULL)
        return -ENOMEM;
    int r = fb_wire_send_json(conn, FB_MSG_ENTRY, e);
    json_decref(e);
    return r;
}

/* Streams exactly size bytes of fd (zero-padded if the file shrank). */
static int send_content(int conn, int fd, off_t size)
{
    char buf[CHUNK];
    off_t left = size;
    while (left > 0) {
        size_t want = left > (off_t)sizeof buf ? sizeof buf : (size_t)left;
        ssize_t n = read(fd, buf, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            memset(buf, 0, want);
            n = (ssize_t)want;
        }
        int r = fb_wire_send(conn, FB_MSG_DATA, buf, (size_t)n);
        if (r < 0)
            return r;
        left -= n;
    }
    return fb_wire_send(conn, FB_MSG_END, NULL, 0);
}

/* Files that report size 0 (those of /proc and /sys, or plainly empty)
 * are read to their end first, up to a bound, so the answer has a length. */
static int read_unsized(int conn, int fd, const char *path, struct stat *st)
{
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    int r = 0;
    while (buf != NULL) {
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = -errno;
            break;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len == cap) {
            r = -EFBIG;
            break;
        }
    }
    close(fd);
    if (buf == NULL)
        return -ENOMEM;
    if (r < 0) {
        free(buf);
        return r;
    }
    st->st_size = (off_t)len;
    fbi_send_ok(conn, stat_json(strrchr(path, '/') ? strrchr(path, '/') + 1 : path, st));
    for (size_t off = 0; off < len && r == 0;) {
        size_t n = len - off > CHUNK ? CHUNK : len - off;
        r = fb_wire_send(conn, FB_MSG_DATA, buf + off, n);
        off += n;
    }
    free(buf);
    if (r == 0)
        r = fb_wire_send(conn, FB_MSG_END, NULL, 0);
    return r < 0 ? r : 1;
}

static int op_read(int conn, const char *path)
{
    int pfd = resolve(path, O_PATH, 0);
    if (pfd < 0)
        return pfd;
    struct stat st;
    int r = fstat(pfd, &st) < 0 ? -errno : 0;
    close(pfd);
    if (r < 0)
        return r;
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        return -EINVAL;
    /* O_PATH first so that opening never has side effects on fifos or
     * devices; the real open must then find the same inode */
    int fd = resolve(path, O_RDONLY | O_NOCTTY | O_NONBLOCK | (S_ISDIR(st.st_mode) ? O_DIRECTORY : 0), 0);
    if (fd < 0)
        return fd;
    struct stat st2;
    if (fstat(fd, &st2) < 0 || st2.st_ino != st.st_ino || st2.st_dev != st.st_dev) {
        close(fd);
        return -EAGAIN;
    }
    if (S_ISREG(st2.st_mode) && st2.st_size == 0)
        return read_unsized(conn, fd, path, &st2);
    json_t *meta = stat_json(strrchr(path, '/') ? strrchr(path, '/') + 1 : path, &st2);
    fbi_send_ok(conn, meta);
    if (S_ISREG(st2.st_mode)) {
        r = send_content(conn, fd, st2.st_size);
        close(fd);
        return r < 0 ? r : 1;
    }
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return fb_wire_send(conn, FB_MSG_END, NULL, 0) < 0 ? -EPIPE : 1;
    }
    struct dirent *de;
    int count = 0;
    while ((de = readdir(d)) != NULL && count < MAX_ENTRIES) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat est;
        if (fstatat(dirfd(d), de->d_name, &est, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (send_entry(conn, stat_json(de->d_name, &est)) < 0)
            break;
        count++;
    }
    closedir(d);
    fb_wire_send(conn, FB_MSG_END, NULL, 0);
    return 1; /* result already sent */
}

static int op_write(int conn, const char *path, int mode, bool mkdirs, long long *written)
{
    char name[256];
    int dfd = open_parent(path, mkdirs, name, sizeof name);
    if (dfd < 0)
        return dfd;
    char tmp[300];
    snprintf(tmp, sizeof tmp, ".fbtmp.%d.%.200s", (int)getpid(), name);
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        close(dfd);
        return -e;
    }
    int r = 0;
    long long total = 0;
    for (;;) {
        struct fb_frame f;
        r = fb_wire_recv(conn, &f);
        if (r < 0)
            break;
        if (f.type == FB_MSG_END) {
            free(f.data);
            break;
        }
        if (f.type != FB_MSG_DATA) {
            free(f.data);
            r = -EPROTO;
            break;
        }
        size_t off = 0;
        while (off < f.len && r == 0) {
            ssize_t n = write(fd, f.data + off, f.len - off);
            if (n < 0 && errno != EINTR)
                r = -errno;
            else if (n > 0)
                off += (size_t)n;
        }
        total += (long long)f.len;
        free(f.data);
        if (r < 0)
            break;
    }
    if (r == 0 && fchmod(fd, (mode_t)mode) < 0)
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && renameat(dfd, tmp, dfd, name) < 0)
        r = -errno;
    if (r < 0)
        unlinkat(dfd, tmp, 0);
    close(dfd);
    if (r < 0)
        return r;
    *written = total;
    return 0;
}

static int rm_tree(int dfd, const char *name, dev_t dev, int depth)
{
    if (depth > MAX_DEPTH)
        return -ELOOP;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return -errno;
    }
    int r = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            if (st.st_dev != dev) {
                r = -EBUSY; /* a mount point: never descend into other filesystems */
                continue;
            }
            int rr = rm_tree(dirfd(d), de->d_name, dev, depth + 1);
            if (rr < 0)
                r = rr;
        } else if (unlinkat(dirfd(d), de->d_name, 0) < 0) {
            r = -errno;
        }
    }
    closedir(d);
    if (r == 0 && unlinkat(dfd, name, AT_REMOVEDIR) < 0)
        r = -errno;
    return r;
}

static int op_delete(const char *path, bool recursive)
{
    char name[256];
    int dfd = open_parent(path, false, name, sizeof name);
    if (dfd < 0)
        return dfd;
    struct stat st;
    int r = 0;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        r = -errno;
    else if (!S_ISDIR(st.st_mode))
        r = unlinkat(dfd, name, 0) < 0 ? -errno : 0;
    else if (!recursive)
        r = unlinkat(dfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
    else
        r = rm_tree(dfd, name, st.st_dev, 0);
    close(dfd);
    return r;
}

static int op_mkdir(const char *path, int mode)
{
    if (strcmp(path, "/") == 0)
        return 0;
    char name[256];
    int dfd = open_parent(path, true, name, sizeof name);
    if (dfd < 0)
        return dfd;
    int r = 0;
    if (mkdirat(dfd, name, (mode_t)mode) < 0) {
        r = -errno;
        struct stat st;
        if (r == -EEXIST && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
            r = fchmodat(dfd, name, (mode_t)mode, 0) < 0 ? -errno : 0;
    }
    close(dfd);
    return r;
}

/* Removes a non-directory at name so that a link can take its place. */
static int clear_slot(int dfd, const char *name)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (S_ISDIR(st.st_mode))
        return -EISDIR;
    return unlinkat(dfd, name, 0) < 0 ? -errno : 0;
}

static int op_symlink(const char *path, const char *target)
{
    char name[256];
    int dfd = open_parent(path, true, name, sizeof name);
    if (dfd < 0)
        return dfd;
    int r = clear_slot(dfd, name);
    if (r == 0 && symlinkat(target, dfd, name) < 0)
        r = -errno;
    close(dfd);
    return r;
}

static int op_link(const char *path, const char *source)
{
    char sname[256], name[256];
    int sfd = open_parent(source, false, sname, sizeof sname);
    if (sfd < 0)
        return sfd;
    int dfd = open_parent(path, true, name, sizeof name);
    if (dfd < 0) {
        close(sfd);
        return dfd;
    }
    int r = clear_slot(dfd, name);
    if (r == 0 && linkat(sfd, sname, dfd, name, 0) < 0)
        r = -errno;
    close(sfd);
    close(dfd);
    return r;
}

static int walk(int conn, int dfd, const char *rel, dev_t dev, int depth, int *count)
{
    if (depth > MAX_DEPTH || *count >= MAX_ENTRIES)
        return 0;
    DIR *d = fdopendir(dfd);
    if (d == NULL) {
        close(dfd);
        return 0;
    }
    struct dirent *de;
    int r = 0;
    while (r == 0 && (de = readdir(d)) != NULL && *count < MAX_ENTRIES) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char sub[4096];
        if (snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", de->d_name) >= (int)sizeof sub)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISDIR(st.st_mode) && st.st_dev != dev)
            continue; /* other filesystems (proc, sys, dev) are not part of the tree */
        if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode))
            continue;
        json_t *e = stat_json(sub, &st);
        if (S_ISLNK(st.st_mode)) {
            char target[4096];
            ssize_t n = readlinkat(dirfd(d), de->d_name, target, sizeof target - 1);
            if (n < 0) {
                json_decref(e);
                continue;
            }
            target[n] = '\0';
            fb_wire_set_bytes(e, "linkname", target);
        }
        int fd = -1;
        if (S_ISREG(st.st_mode)) {
            fd = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0) {
                json_decref(e);
                continue;
            }
        }
        (*count)++;
        r = send_entry(conn, e);
        if (r == 0 && fd >= 0)
            r = send_content(conn, fd, st.st_size);
        if (fd >= 0)
            close(fd);
        if (r == 0 && S_ISDIR(st.st_mode)) {
            int sfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sfd >= 0)
                r = walk(conn, sfd, sub, dev, depth + 1, count);
        }
    }
    closedir(d);
    return r;
}

static int op_walk(int conn, const char *path)
{
    int fd = resolve(path, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0)
        return fd;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return -errno;
    }
    int count = 0;
    int r = walk(conn, fd, "", st.st_dev, 0, &count);
    if (r < 0)
        return r;
    fbi_send_ok(conn, json_pack("{s:i}", "entries", count));
    return 1;
}

/* Runs one mutating op described by req.  Returns <0 (-errno) or 0, with
 * *written set for writes. */
static int run_op(int conn, json_t *req, long long *written)
{
    const char *op = json_string_value(json_object_get(req, "op"));
    char path[4096], argbuf[4096];
    if (op == NULL || fb_wire_get_bytes(req, "path", path, sizeof path) < 0 || path[0] != '/')
        return -EINVAL;
    json_t *jmode = json_object_get(req, "mode");
    int mode = json_is_integer(jmode) ? (int)(json_integer_value(jmode) & 07777) : -1;
    bool flag =
        json_is_true(json_object_get(req, "recursive")) || json_is_true(json_object_get(req, "parents"));
    const char *arg = fb_wire_get_bytes(req, "target", argbuf, sizeof argbuf) == 0 ? argbuf : NULL;
    *written = -1;
    if (strcmp(op, "write") == 0)
        return op_write(conn, path, mode >= 0 ? mode : 0644, flag, written);
    if (strcmp(op, "delete") == 0)
        return op_delete(path, flag);
    if (strcmp(op, "mkdir") == 0)
        return op_mkdir(path, mode >= 0 ? mode : 0755);
    if (strcmp(op, "symlink") == 0)
        return arg ? op_symlink(path, arg) : -EINVAL;
    if (strcmp(op, "link") == 0)
        return arg ? op_link(path, arg) : -EINVAL;
    return -EOPNOTSUPP;
}

/* A stream of ops (ENTRY frames, each write followed by its data) ended
 * by END: how archives are extracted without a connection per member. */
static int op_batch(int conn, const char *base)
{
    long long count = 0;
    int bfd = resolve(base, O_PATH | O_DIRECTORY, 0);
    if (bfd < 0)
        return bfd;
    snprintf(beneath_path, sizeof beneath_path, "%s", base);
    beneath_fd = bfd;
    for (;;) {
        struct fb_frame f;
        int r = fb_wire_recv(conn, &f);
        if (r < 0)
            return r;
        if (f.type == FB_MSG_END) {
            free(f.data);
            break;
        }
        json_t *e = f.type == FB_MSG_ENTRY ? fb_wire_frame_json(&f) : NULL;
        free(f.data);
        if (e == NULL)
            return -EPROTO;
        long long written;
        r = run_op(conn, e, &written);
        if (r < 0) {
            char msg[600];
            char p[4096];
            if (fb_wire_get_bytes(e, "path", p, sizeof p) < 0)
                strcpy(p, "?");
            snprintf(msg, sizeof msg, "%.500s: %s", p, strerror(-r));
            fbi_send_error(conn, -r, msg);
            json_decref(e);
            return 1;
        }
        json_decref(e);
        count++;
    }
    fbi_send_ok(conn, json_pack("{s:I}", "entries", (json_int_t)count));
    return 1;
}

int fbi_files_serve(int conn, json_t *req)
{
    const char *op = json_string_value(json_object_get(req, "op"));
    char path[4096];
    if (op == NULL || fb_wire_get_bytes(req, "path", path, sizeof path) < 0 || path[0] != '/') {
        fbi_send_error(conn, EINVAL, "path must be absolute");
        return 1;
    }
    umask(0);
    root_fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0) {
        fbi_send_error(conn, errno, "open root");
        return 1;
    }
    int r;
    long long written = -1;
    if (strcmp(op, "read") == 0)
        r = op_read(conn, path);
    else if (strcmp(op, "walk") == 0)
        r = op_walk(conn, path);
    else if (strcmp(op, "batch") == 0)
        r = op_batch(conn, path);
    else
        r = run_op(conn, req, &written);
    if (r < 0) {
        fbi_send_error(conn, -r, strerror(-r));
        return 1;
    }
    if (r == 0)
        fbi_send_ok(conn, written >= 0 ? json_pack("{s:I}", "size", (json_int_t)written) : NULL);
    return 0;
}
