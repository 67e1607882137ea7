#include "storage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/log.h"
#include "../common/util.h"
#include "disk.h"

static const char *const mkfs_paths[] = {"/usr/sbin/mkfs.btrfs", "/sbin/mkfs.btrfs", "/usr/bin/mkfs.btrfs"};

/* the layer dirs bound from the pool, with the modes the state dir gives them */
static const struct {
    const char *name;
    mode_t mode;
} layer_dirs[] = {{"sandboxes", 0711}, {"checkpoints", 0700}};

const char *fb_storage_kind_name(enum fb_storage_kind kind)
{
    switch (kind) {
    case FB_STORAGE_BTRFS:
        return "btrfs";
    case FB_STORAGE_BTRFS_POOL:
        return "btrfs-pool";
    default:
        return "plain";
    }
}

uint64_t fb_storage_default_bytes(uint64_t host_free)
{
    uint64_t n = host_free < FB_STORAGE_DEFAULT_BYTES ? host_free : FB_STORAGE_DEFAULT_BYTES;
    n &= ~((1ull << 20) - 1);
    return n < FB_STORAGE_MIN_BYTES ? 0 : n;
}

static bool is_btrfs(const char *path)
{
    struct statfs sf;
    return statfs(path, &sf) == 0 && (unsigned long)sf.f_type == (unsigned long)BTRFS_SUPER_MAGIC;
}

/* Whether the dir at path holds anything (an unreadable one counts as full). */
static bool dir_has_entries(const char *path)
{
    cleanup_dir DIR *d = opendir(path);
    if (d == NULL)
        return errno != ENOENT;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            return true;
    return false;
}

static const char *find_mkfs(void)
{
    for (size_t i = 0; i < sizeof mkfs_paths / sizeof mkfs_paths[0]; i++)
        if (access(mkfs_paths[i], X_OK) == 0)
            return mkfs_paths[i];
    return NULL;
}

/* Formats the pool.  Metadata is kept single: the pool is one file on one
 * host filesystem, so a second copy on the same file guards against
 * nothing the host's own filesystem does not.  No discard pass: the file
 * is new and sparse already. */
static int format_pool(const char *file, fb_error_t *err)
{
    const char *mkfs = find_mkfs();
    if (mkfs == NULL)
        return fb_error_set(err, FB_ERR_UNSUPPORTED, ENOENT, "mkfs.btrfs not found (install btrfs-progs)");
    char *argv[] = {(char *)mkfs, "-q", "-K",      "-m",         "single", "-d",
                    "single",     "-L", "forkbox", (char *)file, NULL};
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
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "%s %s failed (status %d)", mkfs, file, status);
    return 0;
}

static void unmount_quietly(const char *path)
{
    if (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT)
        fb_warn("umount %s: %s", path, strerror(errno));
}

/* Binds top/<name> onto state_dir/<name>, private: a layer mounted below
 * it must not appear anywhere else. */
static int bind_dir(int top_fd, const char *top, const char *state_dir, const char *name, mode_t mode,
                    fb_error_t *err)
{
    char src[PATH_MAX], dst[PATH_MAX];
    if (fb_snprintf(src, sizeof src, "%s/%s", top, name) < 0 ||
        fb_snprintf(dst, sizeof dst, "%s/%s", state_dir, name) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "storage path");
    if (mkdirat(top_fd, name, mode) < 0 && errno != EEXIST)
        return fb_error_sys(err, "create %s", src);
    if (fchmodat(top_fd, name, mode, 0) < 0)
        return fb_error_sys(err, "chmod %s", src);
    if (mkdir(dst, mode) < 0 && errno != EEXIST)
        return fb_error_sys(err, "create %s", dst);
    struct stat st;
    if (lstat(dst, &st) < 0 || !S_ISDIR(st.st_mode))
        return fb_error_set(err, FB_ERR_INTERNAL, ENOTDIR, "%s is not a directory", dst);
    if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
        return fb_error_sys(err, "bind %s at %s", src, dst);
    if (mount(NULL, dst, NULL, MS_PRIVATE, NULL) < 0) {
        fb_error_sys(err, "make %s private", dst);
        unmount_quietly(dst);
        return -1;
    }
    return 0;
}

/* Attaches file to a loop device, mounts it at state_dir/storage.mnt long
 * enough to bind its layer dirs, and detaches that mount again: what
 * stays are the two binds (and the loop device, cleared with the last of
 * them). */
static int mount_pool(const char *state_dir, const char *file, fb_error_t *err)
{
    char top[PATH_MAX];
    if (fb_snprintf(top, sizeof top, "%s/storage.mnt", state_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "storage path");
    if (mkdir(top, 0700) < 0 && errno != EEXIST)
        return fb_error_sys(err, "create %s", top);
    cleanup_close int fd = open(file, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return fb_error_sys(err, "open %s", file);
    char dev[64];
    cleanup_close int loop = fb_disk_attach_loop(fd, dev, sizeof dev, err);
    if (loop < 0)
        return -1;
    /* discard: space freed in the pool is handed back to the host file */
    if (mount(dev, top, "btrfs", MS_NOSUID | MS_NODEV | MS_NOATIME, "discard=async") < 0)
        return fb_error_sys(err, "mount %s (%s) at %s", file, dev, top);
    int rc = mount(NULL, top, NULL, MS_PRIVATE, NULL) < 0 ? fb_error_sys(err, "make %s private", top) : 0;
    cleanup_close int top_fd = rc == 0 ? open(top, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (rc == 0 && top_fd < 0)
        rc = fb_error_sys(err, "open %s", top);
    size_t bound = 0;
    for (; rc == 0 && bound < sizeof layer_dirs / sizeof layer_dirs[0]; bound++)
        if (bind_dir(top_fd, top, state_dir, layer_dirs[bound].name, layer_dirs[bound].mode, err) < 0)
            rc = -1;
    if (rc < 0) {
        for (size_t i = 0; i + 1 < bound; i++) {
            char dst[PATH_MAX];
            if (fb_snprintf(dst, sizeof dst, "%s/%s", state_dir, layer_dirs[i].name) == 0)
                unmount_quietly(dst);
        }
    }
    unmount_quietly(top);
    return rc;
}

/* Makes and formats the pool as <file>.new, renamed into place once
 * formatted: a pool file that exists is always a whole one. */
static int create_pool(const char *file, uint64_t bytes, fb_error_t *err)
{
    char tmp[PATH_MAX];
    if (fb_snprintf(tmp, sizeof tmp, "%s.new", file) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "storage path");
    (void)unlink(tmp);
    {
        cleanup_close int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return fb_error_sys(err, "create %s", tmp);
        if (ftruncate(fd, (off_t)bytes) < 0) {
            fb_error_sys(err, "size %s", tmp);
            (void)unlink(tmp);
            return -1;
        }
    }
    if (format_pool(tmp, err) < 0 || rename(tmp, file) < 0) {
        if (err != NULL && *err == NULL)
            fb_error_sys(err, "rename %s", tmp);
        (void)unlink(tmp);
        return -1;
    }
    return 0;
}

static void set_plain(struct fb_storage *st, const char *state_dir, const char *why)
{
    st->kind = FB_STORAGE_PLAIN;
    st->reflink = false;
    (void)fb_strlcpy(st->path, state_dir, sizeof st->path);
    (void)fb_strlcpy(st->why, why, sizeof st->why);
}

/* Which of the layer dirs are btrfs mounts already: a daemon restart finds
 * both, a host restart neither. */
static int count_mounted(const char *state_dir, fb_error_t *err)
{
    int n = 0;
    for (size_t i = 0; i < sizeof layer_dirs / sizeof layer_dirs[0]; i++) {
        char p[PATH_MAX];
        if (fb_snprintf(p, sizeof p, "%s/%s", state_dir, layer_dirs[i].name) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "storage path");
        n += is_btrfs(p);
    }
    return n;
}

int fb_storage_open(const char *state_dir, bool plain, uint64_t pool_bytes, struct fb_storage *st,
                    fb_error_t *err)
{
    memset(st, 0, sizeof *st);
    if (is_btrfs(state_dir)) {
        st->kind = FB_STORAGE_BTRFS;
        st->reflink = !plain;
        (void)fb_strlcpy(st->path, state_dir, sizeof st->path);
        if (plain)
            (void)fb_strlcpy(st->why, "--storage=plain: full copies", sizeof st->why);
        return 0;
    }
    char file[PATH_MAX];
    if (fb_snprintf(file, sizeof file, "%s/storage.btrfs", state_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "storage path");
    int mounted = count_mounted(state_dir, err);
    if (mounted < 0)
        return -1;
    struct stat fst;
    bool exists = lstat(file, &fst) == 0;
    if (exists && !S_ISREG(fst.st_mode))
        return fb_error_set(err, FB_ERR_INTERNAL, EINVAL, "%s is not a regular file", file);
    if (mounted == 1)
        return fb_error_set(err, FB_ERR_INTERNAL, EBUSY,
                            "only one of %s/sandboxes and %s/checkpoints is a btrfs mount: unmount it "
                            "(umount -l) and start again",
                            state_dir, state_dir);
    if (mounted == 0 && exists) {
        /* after a host restart: everything made before lives in it */
        if (mount_pool(state_dir, file, err) < 0)
            return fb_error_wrap(err, "storage pool %s exists but cannot be mounted", file);
        fb_info("storage: mounted the btrfs pool %s", file);
        mounted = 2;
    }
    if (mounted == 2) {
        st->kind = FB_STORAGE_BTRFS_POOL;
        st->reflink = !plain;
        (void)fb_strlcpy(st->path, file, sizeof st->path);
        if (plain)
            (void)fb_strlcpy(st->why, "--storage=plain: full copies (the existing pool stays mounted)",
                             sizeof st->why);
        return 0;
    }
    if (plain) {
        set_plain(st, state_dir, "--storage=plain");
        return 0;
    }
    for (size_t i = 0; i < sizeof layer_dirs / sizeof layer_dirs[0]; i++) {
        char p[PATH_MAX];
        if (fb_snprintf(p, sizeof p, "%s/%s", state_dir, layer_dirs[i].name) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "storage path");
        if (dir_has_entries(p)) {
            /* a pool mounted over them would hide sandboxes made before it */
            char why[256];
            (void)fb_snprintf(why, sizeof why, "%s holds layers from before the pool: full copies", p);
            set_plain(st, state_dir, why);
            return 0;
        }
    }
    if (find_mkfs() == NULL) {
        set_plain(st, state_dir, "mkfs.btrfs not found (install btrfs-progs): full copies");
        return 0;
    }
    uint64_t bytes = pool_bytes;
    if (bytes == 0) {
        struct statvfs vfs;
        if (statvfs(state_dir, &vfs) < 0)
            return fb_error_sys(err, "statvfs %s", state_dir);
        bytes = fb_storage_default_bytes((uint64_t)vfs.f_bavail * vfs.f_frsize);
        if (bytes == 0) {
            set_plain(st, state_dir, "too little free space for a storage pool: full copies");
            return 0;
        }
    }
    cleanup_error fb_error_t perr = NULL;
    if (create_pool(file, bytes, &perr) < 0 || mount_pool(state_dir, file, &perr) < 0) {
        char why[256];
        (void)fb_snprintf(why, sizeof why, "no storage pool (%s): full copies", perr->msg);
        (void)unlink(file);
        set_plain(st, state_dir, why);
        return 0;
    }
    fb_info("storage: made the btrfs pool %s (%llu bytes, sparse)", file, (unsigned long long)bytes);
    st->kind = FB_STORAGE_BTRFS_POOL;
    st->reflink = true;
    st->created = true;
    (void)fb_strlcpy(st->path, file, sizeof st->path);
    return 0;
}

int fb_storage_space(const struct fb_storage *st, const char *state_dir, uint64_t *size, uint64_t *free_bytes,
                     uint64_t *host_bytes)
{
    char p[PATH_MAX];
    if (fb_snprintf(p, sizeof p, "%s/sandboxes", state_dir) < 0)
        return -ENAMETOOLONG;
    struct statvfs vfs;
    if (statvfs(p, &vfs) < 0)
        return -errno;
    *size = (uint64_t)vfs.f_blocks * vfs.f_frsize;
    *free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    *host_bytes = 0;
    struct stat fst;
    if (st->kind == FB_STORAGE_BTRFS_POOL && lstat(st->path, &fst) == 0)
        *host_bytes = (uint64_t)fst.st_blocks * 512;
    return 0;
}
