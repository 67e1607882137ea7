/* Sandbox creation: see container.h for the shape.
 *
 * The setup child is created with a raw clone() from a multi-threaded
 * daemon, so between clone and execve it must not allocate or take locks
 * another thread might hold: every string and buffer it uses is prepared
 * by the parent in struct child_plan before the clone. */
#include "container.h"
#include "container_priv.h"
#include "copy.h"
#include "disk.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/log.h"
#include "../common/util.h"

/* Capabilities root inside a sandbox keeps (Docker's default set less
 * NET_RAW and MKNOD): enough for package managers and chown, nothing that
 * administers the kernel. */
static const int kept_caps[] = {0 /* CHOWN */,       1 /* DAC_OVERRIDE */, 3 /* FOWNER */,
                                4 /* FSETID */,      5 /* KILL */,         6 /* SETGID */,
                                7 /* SETUID */,      8 /* SETPCAP */,      10 /* NET_BIND_SERVICE */,
                                18 /* SYS_CHROOT */, 29 /* AUDIT_WRITE */, 31 /* SETFCAP */};

/* Host device nodes bind-mounted into the sandbox's private /dev. */
static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
#define N_DEV (sizeof dev_nodes / sizeof dev_nodes[0])

/* Kernel interfaces of the host that /proc and /sys show a sandbox anyway
 * (they are not namespaced).  Files are covered with /dev/null, directories
 * with an empty read-only tmpfs, and the rest made read-only.  Missing paths
 * are skipped: not every kernel has every entry. */
enum mask_kind { MASK_FILE, MASK_DIR, MASK_RDONLY };
static const struct {
    const char *path;
    enum mask_kind kind;
} masks[] = {
    {"/proc/kcore", MASK_FILE},                  /* physical memory as an ELF core */
    {"/proc/kallsyms", MASK_FILE},               /* kernel symbol addresses, for exploits */
    {"/proc/keys", MASK_FILE},                   /* keyrings are not namespaced */
    {"/proc/key-users", MASK_FILE},              /* same */
    {"/proc/kmsg", MASK_FILE},                   /* kernel log */
    {"/proc/timer_list", MASK_FILE},             /* host timers, with kernel pointers */
    {"/proc/timer_stats", MASK_FILE},            /* same, older kernels */
    {"/proc/sched_debug", MASK_FILE},            /* every host task's name and pid */
    {"/proc/latency_stats", MASK_FILE},          /* host-wide latency records */
    {"/proc/sysrq-trigger", MASK_FILE},          /* magic sysrq: reboot, crash, kill all */
    {"/proc/acpi", MASK_DIR},                    /* firmware interfaces of the host */
    {"/proc/scsi", MASK_DIR},                    /* host storage (scsi add/remove-single-device) */
    {"/proc/asound", MASK_DIR},                  /* host sound hardware */
    {"/proc/driver", MASK_DIR},                  /* driver state, e.g. rtc */
    {"/sys/firmware", MASK_DIR},                 /* ACPI tables, EFI variables, DMI */
    {"/sys/devices/virtual/powercap", MASK_DIR}, /* RAPL energy counters: a side channel */
    {"/sys/kernel/debug", MASK_DIR},             /* debugfs, if mounted */
    {"/proc/sys", MASK_RDONLY},                  /* host sysctls */
    {"/proc/bus", MASK_RDONLY},                  /* PCI config space */
    {"/proc/fs", MASK_RDONLY},                   /* filesystem tunables */
    {"/proc/irq", MASK_RDONLY},                  /* IRQ affinity of the host */
};
#define N_MASK (sizeof masks / sizeof masks[0])

enum setup_step {
    STEP_SYNC = 1,
    STEP_IDS,
    STEP_UNSHARE,
    STEP_PRIVATE,
    STEP_PROC,
    STEP_DEV,
    STEP_SYS,
    STEP_HOSTNAME,
    STEP_LOOPBACK,
    STEP_SOCKET,
    STEP_PIVOT,
    STEP_MASK,
    STEP_CAPS,
    STEP_SECCOMP,
    STEP_EXEC,
};

static const char *const step_names[] = {
    [STEP_SYNC] = "wait for parent",
    [STEP_IDS] = "switch to root of the user namespace",
    [STEP_UNSHARE] = "unshare namespaces",
    [STEP_PRIVATE] = "make mounts private",
    [STEP_PROC] = "mount /proc",
    [STEP_DEV] = "populate /dev",
    [STEP_SYS] = "mount /sys",
    [STEP_HOSTNAME] = "set hostname",
    [STEP_LOOPBACK] = "bring up loopback",
    [STEP_SOCKET] = "bind control socket",
    [STEP_PIVOT] = "pivot_root",
    [STEP_MASK] = "mask /proc",
    [STEP_CAPS] = "drop capabilities",
    [STEP_SECCOMP] = "install seccomp filter",
    [STEP_EXEC] = "execute forkbox-init",
};

struct child_report {
    int step;
    int errno_value;
};

struct child_plan {
    int sync_rd;   /* parent -> child: go */
    int report_wr; /* child -> parent: failure report; EOF at exec = success */
    int init_fd;
    const struct fb_seccomp_prog *seccomp;
    int cap_last;
    char rootfs[PATH_MAX];
    char hostname[64];
    struct sockaddr_un sock;
    char dev_paths[N_DEV][64];   /* host /dev/X */
    char dev_targets[N_DEV][80]; /* dev/X under the new root */
};

static void child_fail(const struct child_plan *p, int step)
{
    struct child_report r = {step, errno};
    (void)!write(p->report_wr, &r, sizeof r);
    _exit(1);
}

/* Creates an empty file or dir target for a bind mount if it is missing;
 * refuses symlinks so a template cannot redirect our mounts. */
static int ensure_target(const char *path, int dir)
{
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISLNK(st.st_mode)) {
            errno = ELOOP;
            return -1;
        }
        return 0;
    }
    if (dir)
        return mkdir(path, 0755);
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

static void child_mount_dev(const struct child_plan *p)
{
    if (ensure_target("dev", 1) < 0 || mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                             "mode=755,size=65536k,nr_inodes=4096") < 0)
        child_fail(p, STEP_DEV);
    for (size_t i = 0; i < N_DEV; i++) {
        if (ensure_target(p->dev_targets[i], 0) < 0 ||
            mount(p->dev_paths[i], p->dev_targets[i], NULL, MS_BIND, NULL) < 0)
            child_fail(p, STEP_DEV);
    }
    if (mkdir("dev/pts", 0755) < 0 || mkdir("dev/shm", 01777) < 0 ||
        mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620") <
            0 ||
        mount("shm", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=65536k,nr_inodes=16384") < 0 ||
        symlink("pts/ptmx", "dev/ptmx") < 0 || symlink("/proc/self/fd", "dev/fd") < 0 ||
        symlink("/proc/self/fd/0", "dev/stdin") < 0 || symlink("/proc/self/fd/1", "dev/stdout") < 0 ||
        symlink("/proc/self/fd/2", "dev/stderr") < 0)
        child_fail(p, STEP_DEV);
}

static int child_mask(const char *path, enum mask_kind kind)
{
    const unsigned long ro = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
    switch (kind) {
    case MASK_FILE:
        return mount("/dev/null", path, NULL, MS_BIND, NULL);
    case MASK_DIR:
        return mount("tmpfs", path, "tmpfs", ro, "size=0,nr_inodes=1,mode=555");
    case MASK_RDONLY:
        if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) < 0)
            return -1;
        return mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | ro, NULL);
    }
    errno = EINVAL;
    return -1;
}

static void child_loopback(const struct child_plan *p)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        child_fail(p, STEP_LOOPBACK);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    memcpy(ifr.ifr_name, "lo", 3);
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        child_fail(p, STEP_LOOPBACK);
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
        child_fail(p, STEP_LOOPBACK);
    close(s);
}

static int child_main(const struct child_plan *p)
{
    /* If the daemon dies before saying go, this child must not linger
     * holding copies of the daemon's fds (its listening sockets among
     * them); the thread that cloned it waits until init runs, so the signal
     * only fires for a daemon that is gone.  Cleared before init starts. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        _exit(1);
    char go;
    if (read(p->sync_rd, &go, 1) != 1)
        _exit(1); /* parent gave up */
    /* raw syscalls: glibc's wrappers broadcast the change to every thread
     * it believes exists, and after clone() from a threaded daemon they
     * wait forever for threads this process does not have */
    if (syscall(SYS_setresgid, 0, 0, 0) < 0 || syscall(SYS_setresuid, 0, 0, 0) < 0)
        child_fail(p, STEP_IDS);
    /* init leads a session of its own: nothing of the daemon's session
     * reaches inside, and CRIU dumps only trees whose session leader is in
     * the pid namespace */
    if (setsid() < 0)
        child_fail(p, STEP_IDS);
    if (unshare(CLONE_NEWNS | CLONE_NEWCGROUP) < 0)
        child_fail(p, STEP_UNSHARE);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        child_fail(p, STEP_PRIVATE);
    /* the listening socket must be bound while the host's run dir is visible */
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    if (ls < 0 || bind(ls, (const struct sockaddr *)&p->sock, sizeof p->sock) < 0 || listen(ls, 64) < 0)
        child_fail(p, STEP_SOCKET);
    /* mounts copied from the host's namespace are locked and pivot_root
     * refuses a locked new root: bind the root again, owned by this ns */
    if (mount(p->rootfs, p->rootfs, NULL, MS_BIND | MS_REC, NULL) < 0 || chdir(p->rootfs) < 0)
        child_fail(p, STEP_PIVOT);
    if (ensure_target("proc", 1) < 0 ||
        mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        child_fail(p, STEP_PROC);
    child_mount_dev(p);
    /* a read-only sysfs of our own network namespace; absence is tolerable */
    if (ensure_target("sys", 1) == 0)
        (void)!mount("sysfs", "sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    if (sethostname(p->hostname, strlen(p->hostname)) < 0)
        child_fail(p, STEP_HOSTNAME);
    child_loopback(p);
    if (syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
        child_fail(p, STEP_PIVOT);
    for (size_t i = 0; i < N_MASK; i++)
        if (child_mask(masks[i].path, masks[i].kind) < 0 && errno != ENOENT)
            child_fail(p, STEP_MASK);

    for (int cap = 0; cap <= p->cap_last; cap++) {
        int keep = 0;
        for (size_t i = 0; i < sizeof kept_caps / sizeof kept_caps[0]; i++)
            keep |= kept_caps[i] == cap;
        if (!keep && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0)
            child_fail(p, STEP_CAPS);
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        child_fail(p, STEP_CAPS);

    int devnull = open("/dev/null", O_RDWR);
    if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 || dup2(devnull, 2) < 0)
        child_fail(p, STEP_EXEC);
    if (dup2(ls, 3) < 0)
        child_fail(p, STEP_EXEC);
    int report = p->report_wr, init_fd = p->init_fd;
    /* keep only 0-3, the report pipe and the binary: every daemon fd is shut */
    if (report > 3 && init_fd > 3) {
        int lo = report < init_fd ? report : init_fd, hi = report < init_fd ? init_fd : report;
        syscall(SYS_close_range, 4, lo - 1, 0);
        if (hi - lo > 1)
            syscall(SYS_close_range, lo + 1, hi - 1, 0);
        syscall(SYS_close_range, hi + 1, ~0U, 0);
    }
    if (prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0) < 0)
        child_fail(p, STEP_EXEC);
    if (fb_seccomp_install(p->seccomp) < 0)
        child_fail(p, STEP_SECCOMP);
    char *const argv[] = {"forkbox-init", NULL};
    char *const envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    syscall(SYS_execveat, init_fd, "", argv, envp, AT_EMPTY_PATH);
    child_fail(p, STEP_EXEC);
    return 1;
}

/* A throwaway process in a user namespace with the sandbox's mapping: its
 * namespace fd is what the template's idmapped mount is keyed on. */
int fb_container_write_maps(pid_t pid, uid_t base, fb_error_t *err)
{
    char path[64], map[64];
    snprintf(map, sizeof map, "0 %u %u\n", (unsigned)base, FB_UID_COUNT);
    snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
    int r = fb_write_file(path, map, strlen(map), 0);
    if (r == 0) {
        snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
        r = fb_write_file(path, map, strlen(map), 0);
    }
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "write id map of pid %d", (int)pid);
    return 0;
}

static int mount_idmapped(const char *src, const char *dst, int userns_fd, fb_error_t *err)
{
    cleanup_close int tree =
        (int)open_tree(AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (tree < 0)
        return fb_error_sys(err, "open_tree %s", src);
    struct mount_attr attr = {
        .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        .userns_fd = (uint64_t)userns_fd,
    };
    if (mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) < 0) {
        int e = errno;
        return fb_error_set(err, e == EINVAL || e == EOPNOTSUPP ? FB_ERR_UNSUPPORTED : FB_ERR_INTERNAL, e,
                            "idmapped mount of %s (the filesystem must support idmapped mounts)", src);
    }
    if (move_mount(tree, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        return fb_error_sys(err, "attach idmapped template at %s", dst);
    return 0;
}

/* The directory at target (absolute) under the root rootfd, created with
 * its missing parents (owned by the sandbox's root).  Resolved as the
 * sandbox would, with symlinks from the template or the layer kept inside
 * the root, and never onto another mount.  Returns an O_PATH fd. */
static int volume_target(int rootfd, const char *target, uid_t base, fb_error_t *err)
{
    char prefix[PATH_MAX];
    size_t len = 0;
    cleanup_close int cur = fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
    if (cur < 0)
        return fb_error_sys(err, "volume target %s", target);
    for (const char *p = target; *p != '\0';) {
        while (*p == '/')
            p++;
        const char *end = strchr(p, '/');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if (n == 0)
            break;
        if (len + n + 2 > sizeof prefix || n > NAME_MAX)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, ENAMETOOLONG, "volume path %s: too long", target);
        char leaf[NAME_MAX + 1];
        memcpy(leaf, p, n);
        leaf[n] = '\0';
        if (len > 0)
            prefix[len++] = '/';
        memcpy(prefix + len, p, n);
        len += n;
        prefix[len] = '\0';
        p += n;
        struct open_how how = {
            .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
            .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
        };
        int next = (int)syscall(SYS_openat2, rootfd, prefix, &how, sizeof how);
        if (next < 0 && errno == ENOENT) {
            /* cur is prefix's parent as resolved: the new dir goes there */
            if (mkdirat(cur, leaf, 0755) == 0)
                (void)fchownat(cur, leaf, base, base, AT_SYMLINK_NOFOLLOW);
            next = (int)syscall(SYS_openat2, rootfd, prefix, &how, sizeof how);
        }
        if (next < 0) {
            int e = errno;
            return fb_error_set(err,
                                e == ENOTDIR || e == ENOENT || e == EXDEV || e == ELOOP ? FB_ERR_BAD_REQUEST
                                                                                        : FB_ERR_INTERNAL,
                                e, "volume path %s: /%s %s", target, prefix,
                                e == ENOTDIR ? "is not a directory in the sandbox"
                                : e == EXDEV ? "is on another mount"
                                             : strerror(e));
        }
        close(cur);
        cur = next;
    }
    return fb_steal_fd(&cur);
}

static int mount_volume(int rootfd, const struct fb_container_volume *v, int userns_fd, uid_t base,
                        fb_error_t *err)
{
    cleanup_close int tree = (int)open_tree(AT_FDCWD, v->source, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0)
        return fb_error_sys(err, "open_tree %s", v->source);
    struct mount_attr attr = {
        .attr_set =
            MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (v->read_only ? MOUNT_ATTR_RDONLY : 0),
        .userns_fd = (uint64_t)userns_fd,
        .propagation = MS_PRIVATE,
    };
    if (mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) {
        int e = errno;
        return fb_error_set(err, e == EINVAL || e == EOPNOTSUPP ? FB_ERR_UNSUPPORTED : FB_ERR_INTERNAL, e,
                            "idmapped mount of volume %s", v->source);
    }
    cleanup_close int target = volume_target(rootfd, v->target, base, err);
    if (target < 0)
        return -1;
    if (move_mount(tree, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
        return fb_error_sys(err, "mount volume at %s", v->target);
    return 0;
}

static void host_umount(const char *path)
{
    if (umount2(path, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
        fb_warn("umount %s: %s", path, strerror(errno));
}

int fb_container_prepare_dirs(const struct fb_container_config *c, fb_error_t *err)
{
    char path[PATH_MAX];
    static const char *const subdirs[] = {"", "/layer", "/lower", "/rootfs"};
    for (size_t i = 0; i < sizeof subdirs / sizeof subdirs[0]; i++) {
        if (fb_snprintf(path, sizeof path, "%s%s", c->sandbox_dir, subdirs[i]) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "sandbox dir path");
        int r = fb_mkdir_p(path, 0700);
        if (r < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, -r, "create %s", path);
    }
    /* the setup child runs as the sandbox's unprivileged host uid and gid
     * and must traverse to rootfs/; through the group it may, other host
     * users may not reach the writable layer at all */
    if (chown(c->sandbox_dir, 0, c->uid_base) < 0 || chmod(c->sandbox_dir, 0710) < 0)
        return fb_error_sys(err, "prepare %s", c->sandbox_dir);
    if (c->disk_bytes > 0) {
        char img[PATH_MAX], layer[PATH_MAX];
        if (fb_snprintf(img, sizeof img, "%s/layer.img", c->sandbox_dir) < 0 ||
            fb_snprintf(layer, sizeof layer, "%s/layer", c->sandbox_dir) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "sandbox dir path");
        if ((c->reuse_layer ? fb_disk_mount(img, layer, err)
                            : fb_disk_create(img, layer, c->disk_bytes, err)) < 0)
            return -1;
    }
    if (c->reuse_layer && !c->keep_records) {
        /* records of background processes came back with the files; those
         * processes do not run here */
        if (fb_snprintf(path, sizeof path, "%s/layer/procs", c->sandbox_dir) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "sandbox dir path");
        int r = fb_rm_rf(path);
        if (r < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, -r, "clear %s", path);
    }
    if (c->reuse_layer && c->layer_uid_from != 0 && c->layer_uid_from != c->uid_base) {
        if (fb_snprintf(path, sizeof path, "%s/layer", c->sandbox_dir) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "sandbox dir path");
        cleanup_close int lfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (lfd < 0)
            return fb_error_sys(err, "open %s", path);
        if (fb_tree_shift_owner(lfd, c->layer_uid_from, c->uid_base, FB_UID_COUNT, err) < 0)
            return fb_error_wrap(err, "move the restored layer's files to the sandbox's uids");
    }
    for (size_t i = 0; i < 2; i++) {
        if (fb_snprintf(path, sizeof path, "%s/layer/%s", c->sandbox_dir, i == 0 ? "upper" : "work") < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "sandbox dir path");
        if (mkdir(path, 0700) < 0 && errno != EEXIST)
            return fb_error_sys(err, "create %s", path);
    }
    /* the writable layer's root is the sandbox's "/": owned by its root */
    if (fb_snprintf(path, sizeof path, "%s/layer/upper", c->sandbox_dir) < 0 ||
        chown(path, c->uid_base, c->uid_base) < 0 || chmod(path, 0755) < 0)
        return fb_error_sys(err, "prepare %s", path);
    /* init binds its socket as the sandbox's root, so the dir is theirs */
    int r = fb_mkdir_p(c->run_dir, 0700);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "create %s", c->run_dir);
    if (chown(c->run_dir, c->uid_base, c->uid_base) < 0 || chmod(c->run_dir, 0700) < 0)
        return fb_error_sys(err, "prepare %s", c->run_dir);
    return 0;
}

static int plan_fill(const struct fb_container_config *c, struct child_plan *p, struct fb_container *out,
                     fb_error_t *err)
{
    memset(p, 0, sizeof *p);
    p->init_fd = c->init_fd;
    p->seccomp = c->seccomp;
    char *last = NULL;
    size_t last_len = 0;
    p->cap_last = 40;
    if (fb_read_file("/proc/sys/kernel/cap_last_cap", 16, &last, &last_len) == 0) {
        p->cap_last = atoi(last);
        free(last);
    }
    if (fb_snprintf(p->rootfs, sizeof p->rootfs, "%s/rootfs", c->sandbox_dir) < 0 ||
        fb_strlcpy(p->hostname, c->hostname, sizeof p->hostname) < 0 ||
        fb_snprintf(out->sock_path, sizeof out->sock_path, "%s/init.sock", c->run_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "sandbox paths too long");
    p->sock.sun_family = AF_UNIX;
    memcpy(p->sock.sun_path, out->sock_path, strlen(out->sock_path) + 1);
    for (size_t i = 0; i < N_DEV; i++) {
        snprintf(p->dev_paths[i], sizeof p->dev_paths[i], "/dev/%s", dev_nodes[i]);
        snprintf(p->dev_targets[i], sizeof p->dev_targets[i], "dev/%s", dev_nodes[i]);
    }
    return 0;
}

/* Limits set from outside, as the child could not raise its own: the hard
 * limits bind everything the sandbox starts (nothing in it keeps
 * CAP_SYS_RESOURCE).  Open files are bounded per process (the memory
 * cgroup bounds their sum); core dumps are off, so nothing a sandbox
 * crashes with is ever handed to the host's core_pattern. */
static int set_rlimits(pid_t pid, fb_error_t *err)
{
    /* raising a hard limit needs CAP_SYS_RESOURCE, which a daemon run in a
     * restricted container may lack: then the daemon's own limit binds */
    struct rlimit own;
    rlim_t nofile = FB_SANDBOX_NOFILE;
    if (getrlimit(RLIMIT_NOFILE, &own) == 0 && own.rlim_max < nofile)
        nofile = own.rlim_max;
    struct rlimit rl = {nofile, nofile};
    if (prlimit(pid, RLIMIT_NOFILE, &rl, NULL) < 0)
        return fb_error_sys(err, "set the sandbox's open-file limit");
    struct rlimit core = {0, 0};
    if (prlimit(pid, RLIMIT_CORE, &core, NULL) < 0)
        return fb_error_sys(err, "turn off core dumps");
    return 0;
}

/* Mounts template (idmapped) + writable layer on the host at rootfs, keyed
 * on the user namespace of pid. */
int fb_container_mount_root(const struct fb_container_config *c, pid_t pid, fb_error_t *err)
{
    char nspath[64], lower[PATH_MAX], upper[PATH_MAX], work[PATH_MAX], rootfs[PATH_MAX];
    snprintf(nspath, sizeof nspath, "/proc/%d/ns/user", (int)pid);
    cleanup_close int userns = open(nspath, O_RDONLY | O_CLOEXEC);
    if (userns < 0)
        return fb_error_sys(err, "open %s", nspath);
    if (fb_snprintf(lower, sizeof lower, "%s/lower", c->sandbox_dir) < 0 ||
        fb_snprintf(upper, sizeof upper, "%s/layer/upper", c->sandbox_dir) < 0 ||
        fb_snprintf(work, sizeof work, "%s/layer/work", c->sandbox_dir) < 0 ||
        fb_snprintf(rootfs, sizeof rootfs, "%s/rootfs", c->sandbox_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "sandbox paths too long");
    if (mount_idmapped(c->template_rootfs, lower, userns, err) < 0)
        return -1;
    char opts[3 * PATH_MAX + 64];
    if (fb_snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "overlay options too long");
    if (mount("overlay", rootfs, "overlay", MS_NOSUID | MS_NODEV, opts) < 0)
        return fb_error_sys(err, "mount overlay at %s", rootfs);
    if (mount(NULL, rootfs, NULL, MS_PRIVATE, NULL) < 0)
        return fb_error_sys(err, "make %s private", rootfs);
    if (c->n_volumes == 0)
        return 0;
    /* below the root before the child binds it: they go along into its
     * mount namespace, and leave the host's with the root */
    cleanup_close int rootfd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return fb_error_sys(err, "open %s", rootfs);
    for (size_t i = 0; i < c->n_volumes; i++)
        if (mount_volume(rootfd, &c->volumes[i], userns, c->uid_base, err) < 0)
            return -1;
    return 0;
}

void fb_container_unmount_root(const struct fb_container_config *c)
{
    char path[PATH_MAX];
    if (fb_snprintf(path, sizeof path, "%s/rootfs", c->sandbox_dir) == 0)
        host_umount(path);
    if (fb_snprintf(path, sizeof path, "%s/lower", c->sandbox_dir) == 0)
        host_umount(path);
}

int fb_container_start(const struct fb_container_config *c, struct fb_container *out, fb_error_t *err)
{
    memset(out, 0, sizeof *out);
    struct child_plan *plan = calloc(1, sizeof *plan);
    if (plan == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "allocate");
    cleanup_free struct child_plan *plan_owner = plan;
    if (fb_container_prepare_dirs(c, err) < 0 || plan_fill(c, plan, out, err) < 0)
        goto fail_nochild;
    if (fb_cgroup_create(c->cgroups, c->id, c->limits, err) < 0)
        goto fail_nochild;

    int sync[2], report[2];
    if (pipe2(sync, O_CLOEXEC) < 0)
        return fb_error_sys(err, "pipe");
    if (pipe2(report, O_CLOEXEC) < 0) {
        close(sync[0]);
        close(sync[1]);
        return fb_error_sys(err, "pipe");
    }
    plan->sync_rd = sync[0];
    plan->report_wr = report[1];

    pid_t pid = (pid_t)syscall(
        SYS_clone, CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC | SIGCHLD, NULL,
        NULL, NULL, NULL);
    if (pid == 0)
        _exit(child_main(plan));
    int clone_errno = errno;
    close(sync[0]);
    close(report[1]);
    if (pid < 0) {
        close(sync[1]);
        close(report[0]);
        fb_error_set(err, FB_ERR_INTERNAL, clone_errno, "clone sandbox");
        goto fail_nochild;
    }

    int ok = fb_container_write_maps(pid, c->uid_base, err) == 0 && set_rlimits(pid, err) == 0 &&
             fb_cgroup_add_pid(c->cgroups, c->id, pid, err) == 0 && fb_container_mount_root(c, pid, err) == 0;
    if (ok && write(sync[1], "g", 1) != 1)
        ok = fb_error_sys(err, "start sandbox child") == 0;
    /* A child that is not told to go is killed right away rather than left
     * to see EOF on its pipe: children cloned at the same moment by other
     * threads hold copies of these pipe ends until they execute init. */
    if (!ok)
        kill(pid, SIGKILL);
    close(sync[1]);
    struct child_report rep = {0, 0};
    ssize_t n = 0;
    while (ok) {
        n = read(report[0], &rep, sizeof rep);
        if (!(n < 0 && errno == EINTR))
            break;
    }
    close(report[0]);
    /* the child has pivoted (or died): the host needs these mounts no more */
    fb_container_unmount_root(c);
    if (ok && n == (ssize_t)sizeof rep) {
        const char *step =
            rep.step > 0 && rep.step <= STEP_EXEC && step_names[rep.step] ? step_names[rep.step] : "setup";
        fb_error_set(err, FB_ERR_INTERNAL, rep.errno_value, "sandbox setup failed at: %s", step);
        ok = 0;
    }
    if (!ok) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fb_container_destroy(c, 0, NULL);
        return -1;
    }
    out->init_pid = pid;
    return 0;

fail_nochild:
    fb_container_destroy(c, 0, NULL);
    return -1;
}

/* The parent pid of pid from /proc, or -1. */
static pid_t parent_of(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* "pid (comm) state ppid ...": comm may hold spaces and parentheses */
    const char *close_paren = strrchr(buf, ')');
    int ppid = -1;
    char state;
    if (close_paren == NULL || sscanf(close_paren + 1, " %c %d", &state, &ppid) != 2)
        return -1;
    return (pid_t)ppid;
}

void fb_container_signal(pid_t init_pid)
{
    if (init_pid > 0 && fb_container_alive(init_pid)) {
        int pidfd = (int)syscall(SYS_pidfd_open, init_pid, 0);
        if (pidfd >= 0) {
            /* SIGKILL to a pid namespace's init takes every process in it
             * down: none runs another instruction of its own */
            syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
            close(pidfd);
        }
    }
}

void fb_container_kill(pid_t init_pid)
{
    if (init_pid <= 0)
        return;
    int pidfd = (int)syscall(SYS_pidfd_open, init_pid, 0);
    if (pidfd < 0)
        return; /* gone and reaped */
    /* a running init is killed and waited for, and so is any child of
     * ours under that pid (an init that is already dying no longer shows
     * its exe); a process that merely reused the pid is left alone */
    bool running = fb_container_alive(init_pid);
    bool ours = running || parent_of(init_pid) == getpid();
    if (running)
        syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
    struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
    if (poll(&pfd, 1, ours ? 5000 : 0) <= 0 && ours)
        fb_warn("init %d did not exit after SIGKILL", (int)init_pid);
    siginfo_t si;
    waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED | WNOHANG);
    close(pidfd);
}

int fb_container_destroy(const struct fb_container_config *c, pid_t init_pid, fb_error_t *err)
{
    int rc = 0;
    int64_t t_start = fb_mono_us();
    fb_container_kill(init_pid);
    int64_t t_killed = fb_mono_us();
    fb_error_t cgerr = NULL;
    if (fb_cgroup_destroy(c->cgroups, c->id, &cgerr) < 0) {
        fb_warn("sandbox %s: %s", c->id, cgerr->msg);
        fb_error_release(&cgerr);
        rc = -1;
    }
    fb_container_unmount_root(c);
    char layer[PATH_MAX];
    if (fb_snprintf(layer, sizeof layer, "%s/layer", c->sandbox_dir) == 0)
        fb_disk_release(layer);
    int r = fb_rm_rf(c->sandbox_dir);
    if (r < 0) {
        fb_warn("sandbox %s: remove %s: %s", c->id, c->sandbox_dir, strerror(-r));
        rc = -1;
    }
    r = fb_rm_rf(c->run_dir);
    if (r < 0)
        rc = -1;
    fb_debug("sandbox %s destroyed: kill %lld us, cgroups+files %lld us", c->id,
             (long long)(t_killed - t_start), (long long)(fb_mono_us() - t_killed));
    if (rc < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "sandbox %s was not removed completely", c->id);
    return 0;
}

int fb_container_load_init(const char *path, fb_error_t *err)
{
    cleanup_close int src = open(path, O_RDONLY | O_CLOEXEC);
    if (src < 0)
        return fb_error_sys(err, "open %s", path);
    cleanup_close int mfd = memfd_create("forkbox-init", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (mfd < 0)
        return fb_error_sys(err, "memfd_create");
    char buf[65536];
    for (;;) {
        ssize_t n = read(src, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return fb_error_sys(err, "read %s", path);
        if (n == 0)
            break;
        if (write(mfd, buf, (size_t)n) != n)
            return fb_error_sys(err, "copy %s", path);
    }
    if (fchmod(mfd, 0555) < 0 ||
        fcntl(mfd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0)
        return fb_error_sys(err, "seal init binary");
    return fb_steal_fd(&mfd);
}

int fb_container_alive(pid_t pid)
{
    if (pid <= 0)
        return 0;
    /* a pid can be reused once its init is gone: only a process executing
     * the sealed init memfd is ours */
    char path[64], exe[128];
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(path, exe, sizeof exe - 1);
    if (n < 0)
        return 0;
    exe[n] = '\0';
    return strncmp(exe, "/memfd:forkbox-init", 19) == 0;
}
