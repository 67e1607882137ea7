#include "seccomp.h"

#include <errno.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h> /* libseccomp's: this directory is not on the <> path */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../common/cleanup.h"

/* The allowlist: what ordinary programs (shells, interpreters, compilers,
 * servers, databases) call, in the same class as Docker's default profile.
 * Anything not named here or below fails with ENOSYS, which libc treats as
 * "this kernel is too old" and falls back from; a syscall added to a future
 * kernel is therefore closed until it is reviewed and listed.  Names this
 * libseccomp cannot resolve are skipped (they stay closed). */
static const char *const allowed_names[] = {
    /* files and directories */
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
    "open", "openat", "openat2", "creat", "close", "close_range", "lseek", "_llseek", "dup", "dup2", "dup3",
    "pipe", "pipe2", "fcntl", "fcntl64", "flock", "fsync", "fdatasync", "sync", "syncfs", "sync_file_range",
    "truncate", "truncate64", "ftruncate", "ftruncate64", "fallocate", "fadvise64", "fadvise64_64",
    "readahead", "getdents", "getdents64", "chdir", "fchdir", "getcwd", "chroot", "mkdir", "mkdirat", "rmdir",
    "link", "linkat", "symlink", "symlinkat", "unlink", "unlinkat", "rename", "renameat", "renameat2",
    "mknod", "mknodat", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
    "chown32", "fchown32", "lchown32", "umask", "access", "faccessat", "faccessat2", "stat", "fstat", "lstat",
    "newfstatat", "stat64", "fstat64", "lstat64", "fstatat64", "statx", "statfs", "fstatfs", "statfs64",
    "fstatfs64", "readlink", "readlinkat", "utime", "utimes", "utimensat", "utimensat_time64", "futimesat",
    "getxattr", "lgetxattr", "fgetxattr", "setxattr", "lsetxattr", "fsetxattr", "listxattr", "llistxattr",
    "flistxattr", "removexattr", "lremovexattr", "fremovexattr", "copy_file_range", "sendfile", "sendfile64",
    "splice", "tee", "vmsplice", "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
    "fanotify_mark", "cachestat",
    /* memory */
    "brk", "mmap", "mmap2", "munmap", "mremap", "mprotect", "msync", "mincore", "madvise", "mlock", "mlock2",
    "munlock", "mlockall", "munlockall", "remap_file_pages", "membarrier", "memfd_create", "memfd_secret",
    "pkey_alloc", "pkey_free", "pkey_mprotect", "map_shadow_stack",
    /* processes, threads, signals */
    "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "waitpid", "kill",
    "tkill", "tgkill", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait",
    "rt_sigtimedwait_time64", "rt_sigsuspend", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack",
    "sigreturn", "sigprocmask", "pause", "pidfd_open", "pidfd_send_signal", "process_mrelease",
    "set_tid_address", "set_robust_list", "get_robust_list", "rseq", "restart_syscall", "futex",
    "futex_time64", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue", "arch_prctl",
    "set_thread_area", "get_thread_area", "prctl", "seccomp", "capget", "capset", "landlock_create_ruleset",
    "landlock_add_rule", "landlock_restrict_self",
    /* identity, limits, scheduling */
    "getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid",
    "getgroups", "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
    "setfsuid", "setfsgid", "getuid32", "geteuid32", "getgid32", "getegid32", "getresuid32", "getresgid32",
    "getgroups32", "setuid32", "setgid32", "setreuid32", "setregid32", "setresuid32", "setresgid32",
    "setgroups32", "setfsuid32", "setfsgid32", "setsid", "getsid", "setpgid", "getpgid", "getpgrp",
    "getpriority", "setpriority", "getrlimit", "ugetrlimit", "setrlimit", "prlimit64", "getrusage", "times",
    "sysinfo", "uname", "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getattr",
    "sched_setattr", "sched_getparam", "sched_setparam", "sched_getscheduler", "sched_setscheduler",
    "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval",
    "sched_rr_get_interval_time64", "ioprio_get", "ioprio_set", "getcpu", "getrandom",
    /* time (reading it; setting it is denied below) */
    "time", "gettimeofday", "clock_gettime", "clock_gettime64", "clock_getres", "clock_getres_time64",
    "clock_nanosleep", "clock_nanosleep_time64", "nanosleep", "alarm", "getitimer", "setitimer",
    "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime", "timer_gettime64", "timer_settime",
    "timer_settime64", "timerfd_create", "timerfd_gettime", "timerfd_gettime64", "timerfd_settime",
    "timerfd_settime64",
    /* waiting on file descriptors */
    "poll", "ppoll", "ppoll_time64", "select", "_newselect", "pselect6", "pselect6_time64", "epoll_create",
    "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
    "signalfd", "signalfd4",
    /* sockets (socket() itself is conditional, below) */
    "socketpair", "bind", "listen", "accept", "accept4", "connect", "getsockname", "getpeername", "sendto",
    "recvfrom", "send", "recv", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "recvmmsg_time64", "shutdown",
    "setsockopt", "getsockopt",
    /* System V and POSIX IPC: private to the sandbox's IPC namespace */
    "ipc", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semtimedop_time64",
    "semctl", "shmget", "shmat", "shmdt", "shmctl", "mq_open", "mq_unlink", "mq_timedsend",
    "mq_timedsend_time64", "mq_timedreceive", "mq_timedreceive_time64", "mq_notify", "mq_getsetattr",
    /* POSIX AIO (io_uring is denied below) */
    "io_setup", "io_destroy", "io_getevents", "io_pgetevents", "io_pgetevents_time64", "io_submit",
    "io_cancel", NULL};

/* Denied with EPERM, each for a reason given in docs/security.md.  They
 * reach into kernel state shared with the host (modules, keys, mounts,
 * clocks, swap, NUMA placement, other namespaces) or are attack surface a
 * sandbox does not need.  ptrace and process_vm_* are denied as well, so
 * debuggers and strace do not work inside a sandbox: on older kernels a
 * tracer can rewrite a tracee's syscalls after seccomp has checked them,
 * and both are a frequent route for kernel bugs. */
#define DENY_PLAIN                                                                                           \
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "create_module",        \
        "query_module", "get_kernel_syms", "bpf", "perf_event_open", "keyctl", "add_key", "request_key",     \
        "mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsmount",          \
        "fsconfig", "fspick", "mount_setattr", "setns", "open_by_handle_at", "name_to_handle_at", "swapon",  \
        "swapoff", "reboot", "settimeofday", "stime", "clock_settime", "clock_settime64", "clock_adjtime",   \
        "clock_adjtime64", "adjtimex", "syslog", "iopl", "ioperm", "modify_ldt", "acct", "quotactl",         \
        "quotactl_fd", "lookup_dcookie", "userfaultfd", "vm86", "vm86old", "uselib", "ustat", "sysfs",       \
        "_sysctl", "nfsservctl", "kcmp", "process_vm_readv", "process_vm_writev", "ptrace", "mbind",         \
        "set_mempolicy", "get_mempolicy", "set_mempolicy_home_node", "migrate_pages", "move_pages",          \
        "pidfd_getfd", "process_madvise", "io_uring_setup", "io_uring_enter", "io_uring_register",           \
        "fanotify_init", "sethostname", "setdomainname", "vhangup", "socketcall"

/* Allowed only for some arguments (see add_conditional). */
#define DENY_CONDITIONAL "clone", "clone3", "unshare", "personality", "ioctl", "socket"

static const char *const plain_names[] = {DENY_PLAIN};
static const char *const denied_names[] = {DENY_PLAIN, DENY_CONDITIONAL, NULL};

const char *const *fb_seccomp_denied_names(void)
{
    return denied_names;
}

const char *const *fb_seccomp_allowed_names(void)
{
    return allowed_names;
}

static void ctx_releasep(scmp_filter_ctx *ctx)
{
    if (*ctx != NULL)
        seccomp_release(*ctx);
    *ctx = NULL;
}
#define cleanup_scmp __attribute__((cleanup(ctx_releasep)))

/* Adds one rule for `name` on every architecture of the filter.  Names this
 * libseccomp does not know are skipped: such a call then meets the default
 * action, which is closed. */
static int add_rule(scmp_filter_ctx ctx, const char *name, uint32_t action, unsigned n,
                    const struct scmp_arg_cmp *cmp, fb_error_t *err)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return 0;
    int r = seccomp_rule_add_array(ctx, action, nr, n, cmp);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "seccomp: rule for %s", name);
    return 0;
}

/* One 32-bit argument of `name` (the kernel truncates these, so only the
 * low half is ever compared: junk in the upper half changes nothing).
 * libseccomp takes one comparison per argument per rule and an
 * unconditional rule would swallow conditional ones, so "every value but
 * these" is written as a cover of masked patterns: walk the bits from the
 * top, and wherever a prefix matches none of the listed values, one rule
 * takes the whole subtree.  At most 32 rules per listed value. */
struct arg_match {
    const char *name;
    unsigned arg;
    const uint32_t *vals;
    size_t n;
    uint32_t action;
};

static int add_except(const struct arg_match *m, scmp_filter_ctx ctx, uint32_t mask, uint32_t value, int bit,
                      fb_error_t *err)
{
    bool hit = false;
    for (size_t i = 0; i < m->n && !hit; i++)
        hit = (m->vals[i] & mask) == value;
    if (!hit) {
        struct scmp_arg_cmp cmp = {
            .arg = m->arg, .op = SCMP_CMP_MASKED_EQ, .datum_a = mask, .datum_b = value};
        return add_rule(ctx, m->name, m->action, 1, &cmp, err);
    }
    if (bit < 0)
        return 0; /* exactly a listed value */
    uint32_t b = 1U << bit;
    if (add_except(m, ctx, mask | b, value, bit - 1, err) < 0)
        return -1;
    return add_except(m, ctx, mask | b, value | b, bit - 1, err);
}

/* Rules taking `action` for every low-32-bit value of the argument except
 * the listed ones. */
static int add_all_but(scmp_filter_ctx ctx, const char *name, unsigned arg, const uint32_t *vals, size_t n,
                       uint32_t action, fb_error_t *err)
{
    struct arg_match m = {.name = name, .arg = arg, .vals = vals, .n = n, .action = action};
    return add_except(&m, ctx, 0, 0, 31, err);
}

/* Rules taking `action` for exactly the listed low-32-bit values. */
static int add_only(scmp_filter_ctx ctx, const char *name, unsigned arg, const uint32_t *vals, size_t n,
                    uint32_t action, fb_error_t *err)
{
    for (size_t i = 0; i < n; i++) {
        struct scmp_arg_cmp cmp = {
            .arg = arg, .op = SCMP_CMP_MASKED_EQ, .datum_a = 0xffffffffULL, .datum_b = vals[i]};
        if (add_rule(ctx, name, action, 1, &cmp, err) < 0)
            return -1;
    }
    return 0;
}

#define NS_FLAGS                                                                                             \
    (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |               \
     CLONE_NEWCGROUP | CLONE_NEWTIME)

/* clone and unshare without namespace flags.  A new user namespace would
 * hand the sandbox a fresh set of full capabilities to probe the kernel
 * with; the others need CAP_SYS_ADMIN, which is not kept, and are refused
 * here as well so the answer does not depend on it. */
static int add_ns_flag_rules(scmp_filter_ctx ctx, const char *name, fb_error_t *err)
{
    struct scmp_arg_cmp none = SCMP_A0(SCMP_CMP_MASKED_EQ, NS_FLAGS, 0);
    if (add_rule(ctx, name, SCMP_ACT_ALLOW, 1, &none, err) < 0)
        return -1;
    for (unsigned b = 0; b < 32; b++) {
        uint64_t bit = 1ULL << b;
        if (!(NS_FLAGS & bit))
            continue;
        struct scmp_arg_cmp one = SCMP_A0(SCMP_CMP_MASKED_EQ, bit, bit);
        if (add_rule(ctx, name, SCMP_ACT_ERRNO(EPERM), 1, &one, err) < 0)
            return -1;
    }
    return 0;
}

static int add_conditional(scmp_filter_ctx ctx, fb_error_t *err)
{
    if (add_ns_flag_rules(ctx, "clone", err) < 0 || add_ns_flag_rules(ctx, "unshare", err) < 0)
        return -1;
    /* clone3 passes its flags in memory seccomp cannot read, so it is left
     * to the default ENOSYS (libseccomp refuses a rule that repeats the
     * default), and libc falls back to clone, checked above. */
    /* TIOCSTI types into a terminal shared with the host; TIOCLINUX can
     * do the same through the console selection buffer. */
    static const uint32_t tty_inject[] = {TIOCSTI, TIOCLINUX};
    if (add_all_but(ctx, "ioctl", 1, tty_inject, 2, SCMP_ACT_ALLOW, err) < 0 ||
        add_only(ctx, "ioctl", 1, tty_inject, 2, SCMP_ACT_ERRNO(EPERM), err) < 0)
        return -1;
    /* vsock is not network-namespaced: on a VM host it reaches the
     * hypervisor side whatever the sandbox's network policy says */
    static const uint32_t vsock[] = {AF_VSOCK};
    if (add_all_but(ctx, "socket", 0, vsock, 1, SCMP_ACT_ALLOW, err) < 0 ||
        add_only(ctx, "socket", 0, vsock, 1, SCMP_ACT_ERRNO(EAFNOSUPPORT), err) < 0)
        return -1;
    /* personality: the values Docker allows (PER_LINUX, PER_LINUX32,
     * UNAME26, their union, and the 0xffffffff query).  Others can turn
     * on READ_IMPLIES_EXEC or ADDR_NO_RANDOMIZE for later exploits. */
    static const uint32_t pers[] = {PER_LINUX, PER_LINUX32, UNAME26, PER_LINUX32 | UNAME26, 0xffffffffU};
    if (add_only(ctx, "personality", 0, pers, 5, SCMP_ACT_ALLOW, err) < 0 ||
        add_all_but(ctx, "personality", 0, pers, 5, SCMP_ACT_ERRNO(EPERM), err) < 0)
        return -1;
    return 0;
}

static int add_rules(scmp_filter_ctx ctx, fb_error_t *err)
{
    for (const char *const *n = allowed_names; *n != NULL; n++)
        if (add_rule(ctx, *n, SCMP_ACT_ALLOW, 0, NULL, err) < 0)
            return -1;
    for (size_t i = 0; i < sizeof plain_names / sizeof plain_names[0]; i++)
        if (add_rule(ctx, plain_names[i], SCMP_ACT_ERRNO(EPERM), 0, NULL, err) < 0)
            return -1;
    return add_conditional(ctx, err);
}

/* libseccomp 2.5.4 can only export to a file descriptor. */
static int export_prog(scmp_filter_ctx ctx, struct fb_seccomp_prog *out, fb_error_t *err)
{
    cleanup_close int fd = memfd_create("fb-seccomp", MFD_CLOEXEC);
    if (fd < 0)
        return fb_error_sys(err, "seccomp: memfd");
    int r = seccomp_export_bpf(ctx, fd);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "seccomp: export");
    struct stat st;
    if (fstat(fd, &st) < 0)
        return fb_error_sys(err, "seccomp: stat exported filter");
    size_t size = (size_t)st.st_size;
    if (size == 0 || size % sizeof(struct sock_filter) != 0 ||
        size / sizeof(struct sock_filter) > BPF_MAXINSNS)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "seccomp: exported filter has bad size %zu", size);
    cleanup_free struct sock_filter *buf = malloc(size);
    if (buf == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "seccomp: filter buffer");
    for (size_t got = 0; got < size;) {
        ssize_t n = pread(fd, (char *)buf + got, size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return fb_error_sys(err, "seccomp: read exported filter");
        if (n == 0)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "seccomp: exported filter shrank");
        got += (size_t)n;
    }
    out->len = (unsigned short)(size / sizeof(struct sock_filter));
    out->filter = fb_steal_ptr(buf);
    return 0;
}

int fb_seccomp_build(struct fb_seccomp_prog *out, fb_error_t *err)
{
    out->filter = NULL;
    out->len = 0;
    cleanup_scmp scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(ENOSYS));
    if (ctx == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "seccomp: init");
    /* a binary search over syscall numbers instead of a linear scan of
     * some 400 of them on every call */
    int r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "seccomp: optimize");
#if defined(__x86_64__)
    /* Without these, int 0x80 and x32 calls would be killed as a foreign
     * arch; with them they are filtered like native ones. */
    static const uint32_t extra_arches[] = {SCMP_ARCH_X86, SCMP_ARCH_X32};
    for (size_t i = 0; i < sizeof extra_arches / sizeof extra_arches[0]; i++) {
        r = seccomp_arch_add(ctx, extra_arches[i]);
        if (r < 0 && r != -EEXIST)
            return fb_error_set(err, FB_ERR_INTERNAL, -r, "seccomp: add arch %#x", extra_arches[i]);
    }
#endif
    if (add_rules(ctx, err) < 0)
        return -1;
    return export_prog(ctx, out, err);
}

int fb_seccomp_install(const struct fb_seccomp_prog *prog)
{
    if (prog == NULL || prog->filter == NULL || prog->len == 0)
        return -EINVAL;
    struct sock_fprog fprog = {.len = prog->len, .filter = prog->filter};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) < 0)
        return -errno;
    return 0;
}

void fb_seccomp_prog_free(struct fb_seccomp_prog *p)
{
    if (p == NULL)
        return;
    free(p->filter);
    p->filter = NULL;
    p->len = 0;
}
