#include "seccomp.h"

#include <errno.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h> /* libseccomp's: this directory is not on the <> path */
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

/* Denied outright with EPERM.  They reach into kernel state shared with the
 * host (modules, keys, mounts, clocks, swap, NUMA placement, other
 * namespaces) or are old attack surface nobody needs in a sandbox.  ptrace
 * and process_vm_* are denied as well, so debuggers and strace do not work
 * inside a sandbox: on older kernels a tracer can rewrite a tracee's
 * syscalls after seccomp has checked them, and both are a frequent route
 * for kernel bugs. */
#define DENY_PLAIN                                                                                           \
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "bpf",                  \
        "perf_event_open", "keyctl", "add_key", "request_key", "mount", "umount2", "pivot_root",             \
        "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr", "setns",      \
        "open_by_handle_at", "name_to_handle_at", "swapon", "swapoff", "reboot", "settimeofday",             \
        "clock_settime", "clock_adjtime", "adjtimex", "syslog", "iopl", "ioperm", "acct", "quotactl",        \
        "lookup_dcookie", "userfaultfd", "vm86", "vm86old", "uselib", "ustat", "sysfs", "_sysctl",           \
        "nfsservctl", "get_kernel_syms", "query_module", "create_module", "kcmp", "process_vm_readv",        \
        "process_vm_writev", "ptrace", "mbind", "set_mempolicy", "migrate_pages", "move_pages",              \
        "pidfd_getfd", "process_madvise", "io_uring_setup", "io_uring_enter", "io_uring_register"

/* Denied only for some arguments (see add_rules). */
#define DENY_CONDITIONAL "clone", "clone3", "unshare", "personality", "ioctl", "socket"

static const char *const plain_names[] = {DENY_PLAIN};
static const char *const denied_names[] = {DENY_PLAIN, DENY_CONDITIONAL, NULL};

const char *const *fb_seccomp_denied_names(void)
{
    return denied_names;
}

static void ctx_releasep(scmp_filter_ctx *ctx)
{
    if (*ctx != NULL)
        seccomp_release(*ctx);
    *ctx = NULL;
}
#define cleanup_scmp __attribute__((cleanup(ctx_releasep)))

/* Adds one rule for `name` on every architecture of the filter.  Names this
 * libseccomp does not know are skipped: a call it cannot name is one the
 * kernels it targets do not have either. */
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

static int deny_flag(scmp_filter_ctx ctx, const char *name, uint64_t flag, fb_error_t *err)
{
    struct scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag);
    return add_rule(ctx, name, SCMP_ACT_ERRNO(EPERM), 1, &cmp, err);
}

/* The kernel reads the ioctl request as a 32-bit int, so only the low half
 * is compared: junk in the upper half must not get a request past. */
static int deny_ioctl(scmp_filter_ctx ctx, unsigned long request, fb_error_t *err)
{
    struct scmp_arg_cmp cmp = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, request);
    return add_rule(ctx, "ioctl", SCMP_ACT_ERRNO(EPERM), 1, &cmp, err);
}

/* personality() is allowed only for PER_LINUX, PER_LINUX32, UNAME26, their
 * union and the 0xffffffff query (the values Docker allows).  libseccomp
 * takes one comparison per argument per rule, so "none of these" is written
 * as a union of two-bit patterns: deny when a bit outside FREE is set and the
 * next bit (cyclically) is clear, and also, when that next bit is in FREE,
 * when the one after it is clear.  Any other 32-bit value has a set bit
 * outside FREE whose run of ones ends at such a pair; no allowed value
 * matches (0xffffffff has no clear bit, the rest no set bit outside FREE).
 * Values above 32 bits are denied whole: the kernel would truncate them. */
#define PERS_FREE ((uint32_t)(PER_LINUX32 | UNAME26))

static int deny_pers_pattern(scmp_filter_ctx ctx, unsigned set, unsigned clear, fb_error_t *err)
{
    uint64_t bit = 1ULL << set;
    struct scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, bit | (1ULL << clear), bit);
    return add_rule(ctx, "personality", SCMP_ACT_ERRNO(EPERM), 1, &cmp, err);
}

static int deny_personality(scmp_filter_ctx ctx, fb_error_t *err)
{
    struct scmp_arg_cmp high = SCMP_A0(SCMP_CMP_GT, 0xffffffffULL);
    if (add_rule(ctx, "personality", SCMP_ACT_ERRNO(EPERM), 1, &high, err) < 0)
        return -1;
    for (unsigned b = 0; b < 32; b++) {
        if (PERS_FREE & (1U << b))
            continue;
        unsigned next = (b + 1) % 32;
        if (deny_pers_pattern(ctx, b, next, err) < 0)
            return -1;
        if ((PERS_FREE & (1U << next)) && deny_pers_pattern(ctx, b, (next + 1) % 32, err) < 0)
            return -1;
    }
    return 0;
}

static int add_rules(scmp_filter_ctx ctx, fb_error_t *err)
{
    for (size_t i = 0; i < sizeof plain_names / sizeof plain_names[0]; i++)
        if (add_rule(ctx, plain_names[i], SCMP_ACT_ERRNO(EPERM), 0, NULL, err) < 0)
            return -1;
    /* A new user namespace would hand the sandbox a fresh set of full
     * capabilities to probe the kernel with.  clone's flags are arg 0 on
     * all three x86 ABIs; clone3 passes them in memory seccomp cannot
     * read, so it reports ENOSYS and libc falls back to clone. */
    if (deny_flag(ctx, "unshare", CLONE_NEWUSER, err) < 0 ||
        deny_flag(ctx, "clone", CLONE_NEWUSER, err) < 0 ||
        add_rule(ctx, "clone3", SCMP_ACT_ERRNO(ENOSYS), 0, NULL, err) < 0)
        return -1;
    /* TIOCSTI types into a terminal shared with the host; TIOCLINUX can
     * do the same through the console selection buffer. */
    if (deny_ioctl(ctx, TIOCSTI, err) < 0 || deny_ioctl(ctx, TIOCLINUX, err) < 0)
        return -1;
    /* vsock is not network-namespaced: on a VM host it reaches the
     * hypervisor side whatever the sandbox's network policy says */
    const struct scmp_arg_cmp vsock = SCMP_A0(SCMP_CMP_EQ, AF_VSOCK);
    if (add_rule(ctx, "socket", SCMP_ACT_ERRNO(EAFNOSUPPORT), 1, &vsock, err) < 0)
        return -1;
    return deny_personality(ctx, err);
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
    cleanup_scmp scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "seccomp: init");
#if defined(__x86_64__)
    /* Without these, int 0x80 and x32 calls would be killed as a foreign
     * arch; with them they are filtered like native ones. */
    static const uint32_t extra_arches[] = {SCMP_ARCH_X86, SCMP_ARCH_X32};
    for (size_t i = 0; i < sizeof extra_arches / sizeof extra_arches[0]; i++) {
        int r = seccomp_arch_add(ctx, extra_arches[i]);
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
