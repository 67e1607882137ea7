#include "disk.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/log.h"
#include "../common/util.h"

static const char *const mkfs_paths[] = {"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"};

static const char *find_mkfs(void)
{
    for (size_t i = 0; i < sizeof mkfs_paths / sizeof mkfs_paths[0]; i++)
        if (access(mkfs_paths[i], X_OK) == 0)
            return mkfs_paths[i];
    return NULL;
}

bool fb_disk_supported(char *why, size_t why_len)
{
    if (find_mkfs() == NULL) {
        (void)fb_strlcpy(why, "mkfs.ext4 not found (install e2fsprogs)", why_len);
        return false;
    }
    cleanup_close int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0) {
        (void)fb_snprintf(why, why_len, "/dev/loop-control: %s", strerror(errno));
        return false;
    }
    return true;
}

/* Formats img.  The journal is kept small (it counts against the
 * sandbox's space) and no blocks are reserved for root: the sandbox's root
 * is not the filesystem's root, so a reserve would be space nobody can
 * use.  The program's output goes to the daemon's log only on failure. */
int fb_disk_format(const char *img, uint64_t bytes, fb_error_t *err)
{
    const char *mkfs = find_mkfs();
    if (mkfs == NULL)
        return fb_error_set(err, FB_ERR_UNSUPPORTED, ENOENT, "mkfs.ext4 not found (install e2fsprogs)");
    char *argv[12];
    size_t n = 0;
    argv[n++] = (char *)mkfs;
    argv[n++] = "-q";
    argv[n++] = "-F";
    argv[n++] = "-m";
    argv[n++] = "0";
    argv[n++] = "-E";
    argv[n++] = "lazy_itable_init=1,lazy_journal_init=1,nodiscard";
    if (bytes >= 256ULL << 20) {
        argv[n++] = "-J";
        argv[n++] = "size=16";
    }
    argv[n++] = (char *)img;
    argv[n] = NULL;
    char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
    cleanup_close int out = open("/dev/null", O_WRONLY | O_CLOEXEC);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (out >= 0) {
        posix_spawn_file_actions_adddup2(&fa, out, 1);
        posix_spawn_file_actions_adddup2(&fa, out, 2);
    }
    pid_t pid;
    int r = posix_spawn(&pid, mkfs, &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    if (r != 0)
        return fb_error_set(err, FB_ERR_INTERNAL, r, "run %s", mkfs);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return fb_error_sys(err, "wait for %s", mkfs);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "%s %s failed (status %d)", mkfs, img, status);
    return 0;
}

/* Binds img to a free loop device and returns the device's fd (its name in
 * dev).  AUTOCLEAR detaches the device once the fd is closed and the
 * filesystem on it is unmounted everywhere.  Direct I/O keeps the host's
 * page cache from holding a second copy of what the sandbox writes (the
 * sandbox's own copy is charged to its memory cgroup; the loop's would be
 * nobody's). */
int fb_disk_attach_loop(int img_fd, char *dev, size_t dev_len, fb_error_t *err)
{
    cleanup_close int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        return fb_error_sys(err, "open /dev/loop-control");
    for (int attempt = 0; attempt < 32; attempt++) {
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0)
            return fb_error_sys(err, "find a free loop device");
        if (fb_snprintf(dev, dev_len, "/dev/loop%d", n) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "loop device name");
        int fd = open(dev, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            return fb_error_sys(err, "open %s", dev);
        struct loop_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.fd = (unsigned)img_fd;
        cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO;
        if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0)
            return fd;
        int e = errno;
        if (e == EINVAL) { /* direct I/O refused by the host filesystem */
            cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
            if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0)
                return fd;
            e = errno;
        }
        close(fd);
        if (e != EBUSY) /* EBUSY: another process took it first */
            return fb_error_set(err, FB_ERR_INTERNAL, e, "attach %s", dev);
    }
    return fb_error_set(err, FB_ERR_INTERNAL, EBUSY, "no free loop device after 32 attempts");
}

int fb_disk_create(const char *img, const char *mnt, uint64_t bytes, fb_error_t *err)
{
    {
        cleanup_close int fd = open(img, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return fb_error_sys(err, "create %s", img);
        if (ftruncate(fd, (off_t)bytes) < 0)
            return fb_error_sys(err, "size %s", img);
    }
    if (fb_disk_format(img, bytes, err) < 0)
        return -1;
    return fb_disk_mount(img, mnt, err);
}

int fb_disk_mount(const char *img, const char *mnt, fb_error_t *err)
{
    cleanup_close int img_fd = open(img, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (img_fd < 0)
        return fb_error_sys(err, "open %s", img);
    char dev[64];
    cleanup_close int loop = fb_disk_attach_loop(img_fd, dev, sizeof dev, err);
    if (loop < 0)
        return -1;
    /* discard: space the sandbox frees goes back to the host */
    if (mount(dev, mnt, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, "discard,errors=remount-ro") < 0)
        return fb_error_sys(err, "mount %s at %s", dev, mnt);
    if (mount(NULL, mnt, NULL, MS_PRIVATE, NULL) < 0) {
        fb_error_sys(err, "make %s private", mnt);
        fb_disk_release(mnt);
        return -1;
    }
    return 0;
}

int fb_disk_usage_read(const char *mnt, struct fb_disk_usage *out)
{
    struct statvfs st;
    if (statvfs(mnt, &st) < 0)
        return -errno;
    out->bytes_total = (uint64_t)st.f_blocks * st.f_frsize;
    out->bytes_used = (uint64_t)(st.f_blocks - st.f_bfree) * st.f_frsize;
    out->inodes_total = st.f_files;
    out->inodes_used = st.f_files - st.f_ffree;
    return 0;
}

void fb_disk_release(const char *mnt)
{
    if (umount2(mnt, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT)
        fb_warn("umount %s: %s", mnt, strerror(errno));
}
