/* Volume images and their host-side tar transfers: see volume.h. */
#include "volume.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/loop.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/log.h"
#include "../common/util.h"
#include "disk.h"

#define ID_MAX 65535   /* owners a sandbox maps */
#define WALK_DEPTH 256 /* directory depth of a download */
#define WALK_ENTRIES 200000
#define NOBODY 65534 /* host uid of the transfer child: owns no host file */

static bool is_mounted(const char *mnt)
{
    char parent[PATH_MAX];
    struct stat a, b;
    if (fb_snprintf(parent, sizeof parent, "%s/..", mnt) < 0 || lstat(mnt, &a) < 0 || stat(parent, &b) < 0)
        return false;
    return S_ISDIR(a.st_mode) && a.st_dev != b.st_dev;
}

/* The loop device backing img (same device and inode), opened: while the
 * fd is held the device cannot be cleared and handed to another file.
 * -1 when there is none. */
static int find_loop(const struct stat *img, char *dev, size_t dev_len)
{
    cleanup_dir DIR *d = opendir("/sys/block");
    if (d == NULL)
        return -1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "loop", 4) != 0 || fb_snprintf(dev, dev_len, "/dev/%s", de->d_name) < 0)
            continue;
        int fd = open(dev, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        struct loop_info64 info;
        if (ioctl(fd, LOOP_GET_STATUS64, &info) == 0 && info.lo_inode == img->st_ino &&
            info.lo_device == (uint64_t)img->st_dev)
            return fd;
        close(fd);
    }
    return -1;
}

int fb_volume_image_mount(const char *img, const char *mnt, fb_error_t *err)
{
    if (is_mounted(mnt))
        return 0;
    cleanup_close int img_fd = open(img, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (img_fd < 0)
        return fb_error_sys(err, "open %s", img);
    struct stat st;
    if (fstat(img_fd, &st) < 0)
        return fb_error_sys(err, "stat %s", img);
    char dev[64];
    cleanup_close int loop = find_loop(&st, dev, sizeof dev);
    if (loop >= 0)
        fb_info("volume %s: its filesystem is still in use on %s: mounting that again", img, dev);
    else if ((loop = fb_disk_attach_loop(img_fd, dev, sizeof dev, err)) < 0)
        return -1;
    /* discard: space freed inside goes back to the host */
    if (mount(dev, mnt, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, "discard,errors=remount-ro") < 0)
        return fb_error_sys(err, "mount %s at %s", dev, mnt);
    if (mount(NULL, mnt, NULL, MS_PRIVATE, NULL) < 0) {
        fb_error_sys(err, "make %s private", mnt);
        fb_volume_image_release(mnt);
        return -1;
    }
    return 0;
}

bool fb_volume_image_mounted(const char *mnt)
{
    return is_mounted(mnt);
}

void fb_volume_image_release(const char *mnt)
{
    if (umount2(mnt, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT)
        fb_warn("umount %s: %s", mnt, strerror(errno));
}

int fb_volume_image_create(const char *img, const char *mnt, uint64_t bytes, fb_error_t *err)
{
    {
        cleanup_close int fd = open(img, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return fb_error_sys(err, "create %s", img);
        if (ftruncate(fd, (off_t)bytes) < 0) {
            fb_error_sys(err, "size %s", img);
            unlink(img);
            return -1;
        }
    }
    if (fb_disk_format(img, bytes, err) < 0 || fb_volume_image_mount(img, mnt, err) < 0) {
        unlink(img);
        return -1;
    }
    /* an empty volume is empty: fsck recreates lost+found if it needs one */
    char lf[PATH_MAX];
    if (fb_snprintf(lf, sizeof lf, "%s/lost+found", mnt) == 0)
        (void)rmdir(lf);
    return 0;
}

/* ---- the transfer child ---------------------------------------------------
 * Runs chrooted into the volume's mount as host uid NOBODY with only the
 * capabilities a transfer needs (owners, modes, reading and writing any
 * file).  Without CAP_SYS_CHROOT, CAP_SYS_ADMIN and CAP_DAC_READ_SEARCH
 * (open_by_handle_at) nothing in it can leave the chroot, whatever the
 * archive or the volume holds; as NOBODY it cannot signal host processes. */

enum child_kind { CK_INTERNAL = 'i', CK_BAD = 'b', CK_NOT_FOUND = 'n', CK_TOO_LARGE = 't' };

static void report(int fd, enum child_kind kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(int fd, enum child_kind kind, const char *fmt, ...)
{
    char msg[512];
    msg[0] = (char)kind;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + 1, sizeof msg - 1, fmt, ap);
    va_end(ap);
    (void)!write(fd, msg, strlen(msg));
}

static int enter_volume(const char *mnt, int report_fd)
{
    static const int keep[] = {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID};
    uint64_t mask = 0;
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        mask |= 1ULL << keep[i];
    if (chroot(mnt) < 0 || chdir("/") < 0) {
        report(report_fd, CK_INTERNAL, "enter the volume: %s", strerror(errno));
        return -1;
    }
    for (int cap = 0; cap < 64; cap++)
        if (!(mask & (1ULL << cap)) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL) {
            report(report_fd, CK_INTERNAL, "drop capability %d: %s", cap, strerror(errno));
            return -1;
        }
    /* raw calls: the child of a threaded daemon need not tell other threads */
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 || syscall(SYS_setgroups, 0, NULL) < 0 ||
        syscall(SYS_setresgid, NOBODY, NOBODY, NOBODY) < 0 ||
        syscall(SYS_setresuid, NOBODY, NOBODY, NOBODY) < 0) {
        report(report_fd, CK_INTERNAL, "drop to uid %d: %s", NOBODY, strerror(errno));
        return -1;
    }
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    d[0].effective = d[0].permitted = (uint32_t)mask;
    if (syscall(SYS_capset, &h, d) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        report(report_fd, CK_INTERNAL, "set capabilities: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* Runs fn in a child chrooted into mnt with data_fd as fd 3; its report
 * (a kind byte and a message) becomes *err. */
static int run_child(const char *mnt, int data_fd, int (*fn)(void *arg, int report_fd), void *arg,
                     const char *what, fb_error_t *err)
{
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        return fb_error_sys(err, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        /* only the data and the report pipe go with it: 3 and 4 */
        int lo = (data_fd > pipefd[1] ? data_fd : pipefd[1]) + 1;
        int d = fcntl(data_fd, F_DUPFD, lo), r = fcntl(pipefd[1], F_DUPFD, lo);
        if (d < 0 || r < 0 || dup2(d, 3) < 0 || dup2(r, 4) < 0)
            _exit(1);
        syscall(SYS_close_range, 5, ~0U, 0);
        if (enter_volume(mnt, 4) < 0)
            _exit(1);
        _exit(fn(arg, 4) == 0 ? 0 : 1);
    }
    close(pipefd[1]);
    char msg[512];
    ssize_t n = 0;
    if (pid > 0)
        while ((n = read(pipefd[0], msg, sizeof msg - 1)) < 0 && errno == EINTR)
            ;
    close(pipefd[0]);
    if (pid < 0)
        return fb_error_sys(err, "fork the %s child", what);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (n <= 1)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "volume %s failed (status %d)", what, status);
    msg[n] = '\0';
    enum fb_error_kind kind = msg[0] == CK_BAD         ? FB_ERR_BAD_REQUEST
                              : msg[0] == CK_NOT_FOUND ? FB_ERR_NOT_FOUND
                              : msg[0] == CK_TOO_LARGE ? FB_ERR_TOO_LARGE
                                                       : FB_ERR_INTERNAL;
    return fb_error_set(err, kind, 0, "%s", msg + 1);
}

/* The directory base under the chroot's root, each component opened with
 * no symlink followed; with make, missing ones are created. */
static int open_base(const char *base, bool make, int report_fd)
{
    int cur = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char buf[PATH_MAX];
    if (cur < 0 || fb_strlcpy(buf, base, sizeof buf) < 0) {
        report(report_fd, CK_INTERNAL, "open the volume's root");
        return -1;
    }
    char *save = NULL;
    for (char *c = strtok_r(buf, "/", &save); c != NULL; c = strtok_r(NULL, "/", &save)) {
        if (make && mkdirat(cur, c, 0755) == 0)
            (void)fchownat(cur, c, 0, 0, AT_SYMLINK_NOFOLLOW);
        int next = openat(cur, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        struct stat st;
        /* O_NOFOLLOW with O_DIRECTORY says ENOTDIR for a symlink */
        if (next < 0 && e == ENOTDIR && fstatat(cur, c, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
            e = ELOOP;
        close(cur);
        if (next < 0) {
            report(report_fd, e == ENOENT ? CK_NOT_FOUND : CK_BAD, "path /%s: %s", base,
                   e == ELOOP     ? "passes a symlink in the volume"
                   : e == ENOENT  ? "no such directory in the volume"
                   : e == ENOTDIR ? "not a directory"
                                  : strerror(e));
            return -1;
        }
        cur = next;
    }
    return cur;
}

struct extract_job {
    const char *base;
    fb_volume_member_fn map;
    void *ctx;
};

static int extract_in_volume(void *arg, int report_fd)
{
    struct extract_job *j = arg;
    int bfd = open_base(j->base, true, report_fd);
    if (bfd < 0)
        return -1;
    close(bfd);
    struct archive *in = archive_read_new();
    struct archive *out = archive_write_disk_new();
    int rc = -1;
    if (in == NULL || out == NULL) {
        report(report_fd, CK_INTERNAL, "libarchive: out of memory");
        goto done;
    }
    archive_read_support_filter_all(in);
    archive_read_support_format_tar(in);
    archive_read_support_format_gnutar(in);
    /* no xattrs: nothing like security.capability reaches the volume */
    archive_write_disk_set_options(out, ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                                            ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                            ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                                            ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS | ARCHIVE_EXTRACT_UNLINK);
    if (archive_read_open_fd(in, 3, 65536) != ARCHIVE_OK) {
        report(report_fd, CK_BAD, "not a tar archive: %s", archive_error_string(in));
        goto done;
    }
    for (;;) {
        struct archive_entry *e;
        int r = archive_read_next_header(in, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN) {
            report(report_fd, CK_BAD, "corrupt archive: %s", archive_error_string(in));
            goto done;
        }
        char name[PATH_MAX], link[PATH_MAX], msg[400];
        const char *member = archive_entry_pathname(e);
        if (member == NULL || j->map(j->ctx, member, name, sizeof name, msg, sizeof msg) < 0) {
            report(report_fd, CK_BAD, "%s", member == NULL ? "archive member without a name" : msg);
            goto done;
        }
        if (name[0] == '\0')
            continue; /* the base itself: made above */
        const char *hard = archive_entry_hardlink(e);
        if (hard != NULL) {
            if (j->map(j->ctx, hard, link, sizeof link, msg, sizeof msg) < 0) {
                report(report_fd, CK_BAD, "%s", msg);
                goto done;
            }
            archive_entry_set_hardlink(e, link);
        }
        if (archive_entry_uid(e) > ID_MAX || archive_entry_gid(e) > ID_MAX || archive_entry_uid(e) < 0 ||
            archive_entry_gid(e) < 0) {
            report(report_fd, CK_BAD, "archive member %.200s: owner outside 0..%d", member, ID_MAX);
            goto done;
        }
        archive_entry_set_pathname(e, name);
        r = archive_read_extract2(in, e, out);
        if (r < ARCHIVE_WARN) {
            int en = archive_errno(out);
            report(report_fd, en == ENOSPC || en == EDQUOT ? CK_TOO_LARGE : CK_BAD,
                   "cannot extract %.200s: %s", member,
                   en == ENOSPC ? "the volume is full" : archive_error_string(out));
            goto done;
        }
    }
    if (archive_write_close(out) != ARCHIVE_OK) {
        int en = archive_errno(out);
        report(report_fd, en == ENOSPC ? CK_TOO_LARGE : CK_INTERNAL, "finish extraction: %s",
               archive_error_string(out));
        goto done;
    }
    rc = 0;
done:
    if (in)
        archive_read_free(in);
    if (out)
        archive_write_free(out);
    return rc;
}

int fb_volume_tar_extract(const char *mnt, const char *base, const char *tar_path, fb_volume_member_fn map,
                          void *ctx, fb_error_t *err)
{
    cleanup_close int fd = open(tar_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fb_error_sys(err, "open %s", tar_path);
    struct extract_job j = {base, map, ctx};
    return run_child(mnt, fd, extract_in_volume, &j, "extraction", err);
}

struct walk_state {
    struct archive *a;
    long long total, max;
    long entries;
    dev_t dev;
    int report_fd;
};

static int add_file(struct walk_state *w, int dfd, const char *leaf, const struct stat *st,
                    struct archive_entry *ae)
{
    int fd = openat(dfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat now;
    /* replaced since the listing (a racing sandbox): skipped, never followed */
    if (fd < 0 || fstat(fd, &now) < 0 || now.st_ino != st->st_ino || !S_ISREG(now.st_mode)) {
        if (fd >= 0)
            close(fd);
        return 1;
    }
    archive_entry_set_size(ae, now.st_size);
    int rc = 0;
    if (archive_write_header(w->a, ae) < ARCHIVE_WARN)
        rc = -1;
    char buf[65536];
    long long left = now.st_size;
    while (rc == 0 && left > 0) {
        ssize_t n = read(fd, buf, (size_t)(left < (long long)sizeof buf ? left : (long long)sizeof buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* shrank meanwhile: libarchive pads the entry */
        if (archive_write_data(w->a, buf, (size_t)n) < 0)
            rc = -1;
        left -= n;
    }
    close(fd);
    if (rc < 0)
        report(w->report_fd, CK_INTERNAL, "write tar: %s", archive_error_string(w->a));
    return rc;
}

static int walk(struct walk_state *w, int dfd, const char *rel, int depth)
{
    if (depth > WALK_DEPTH)
        return 0;
    DIR *d = fdopendir(dfd);
    if (d == NULL) {
        close(dfd);
        return 0;
    }
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char sub[PATH_MAX];
        struct stat st;
        if (fb_snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", de->d_name) < 0 ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_dev != w->dev)
            continue;
        if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode))
            continue; /* fifos and sockets: nothing a tar should carry */
        if (++w->entries > WALK_ENTRIES) {
            report(w->report_fd, CK_TOO_LARGE, "more than %d entries", WALK_ENTRIES);
            rc = -1;
            break;
        }
        w->total += 512 + (S_ISREG(st.st_mode) ? st.st_size : 0);
        if (w->total > w->max) {
            report(w->report_fd, CK_TOO_LARGE, "the archive would exceed %lld bytes", w->max);
            rc = -1;
            break;
        }
        struct archive_entry *ae = archive_entry_new();
        if (ae == NULL) {
            rc = -1;
            break;
        }
        archive_entry_set_pathname(ae, sub);
        archive_entry_set_perm(ae, st.st_mode & 07777);
        archive_entry_set_uid(ae, st.st_uid);
        archive_entry_set_gid(ae, st.st_gid);
        archive_entry_set_mtime(ae, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
        if (S_ISREG(st.st_mode)) {
            archive_entry_set_filetype(ae, AE_IFREG);
            rc = add_file(w, dirfd(d), de->d_name, &st, ae) < 0 ? -1 : 0;
            archive_entry_free(ae);
            continue;
        }
        if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t n = readlinkat(dirfd(d), de->d_name, target, sizeof target - 1);
            if (n < 0) {
                archive_entry_free(ae);
                continue;
            }
            target[n] = '\0';
            archive_entry_set_filetype(ae, AE_IFLNK);
            archive_entry_set_symlink(ae, target);
        } else {
            archive_entry_set_filetype(ae, AE_IFDIR);
        }
        if (archive_write_header(w->a, ae) < ARCHIVE_WARN) {
            report(w->report_fd, CK_INTERNAL, "write tar: %s", archive_error_string(w->a));
            rc = -1;
        }
        archive_entry_free(ae);
        if (rc == 0 && S_ISDIR(st.st_mode)) {
            int sfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sfd >= 0)
                rc = walk(w, sfd, sub, depth + 1);
        }
    }
    closedir(d);
    return rc;
}

struct create_job {
    const char *base;
    long long max;
};

static int archive_in_volume(void *arg, int report_fd)
{
    struct create_job *j = arg;
    int bfd = open_base(j->base, false, report_fd);
    if (bfd < 0)
        return -1;
    struct stat st;
    if (fstat(bfd, &st) < 0) {
        close(bfd);
        return -1;
    }
    struct walk_state w = {.a = archive_write_new(), .max = j->max, .dev = st.st_dev, .report_fd = report_fd};
    /* names are bytes: written as they are, not converted through a locale */
    if (w.a == NULL || archive_write_set_format_pax_restricted(w.a) != ARCHIVE_OK ||
        archive_write_set_options(w.a, "hdrcharset=BINARY") < ARCHIVE_WARN ||
        archive_write_open_fd(w.a, 3) != ARCHIVE_OK) {
        report(report_fd, CK_INTERNAL, "start tar");
        close(bfd);
        return -1;
    }
    int rc = walk(&w, bfd, "", 0);
    if (rc == 0 && archive_write_close(w.a) != ARCHIVE_OK) {
        report(report_fd, CK_INTERNAL, "finish tar: %s", archive_error_string(w.a));
        rc = -1;
    }
    archive_write_free(w.a);
    return rc;
}

int fb_volume_tar_create(const char *mnt, const char *base, int out_fd, long long max, fb_error_t *err)
{
    struct create_job j = {base, max};
    return run_child(mnt, out_fd, archive_in_volume, &j, "archive", err);
}
