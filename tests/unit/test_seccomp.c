/* The baseline filter is checked from inside a forked child that installs
 * it: the child runs each probe and exits with the number of the first one
 * that misbehaved, so the parent can name it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/keyctl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "runtime/seccomp.h"

#define NO_SUCH_PATH "/nonexistent-forkbox-seccomp-test"

/* A probe is true when the call behaved as the baseline promises; probes
 * are chosen so that without the filter they fail differently (or succeed
 * harmlessly), never so that they would change the host. */
static bool fails_with(long r, int want)
{
    return r == -1 && errno == want;
}

static bool p_getpid(void)
{
    return syscall(SYS_getpid) == getpid() && getpid() > 0;
}

static bool p_write(void)
{
    int fds[2];
    if (pipe(fds) < 0)
        return false;
    char c = 'x', back = 0;
    bool ok = write(fds[1], &c, 1) == 1 && read(fds[0], &back, 1) == 1 && back == 'x';
    int avail = -1;
    ok = ok && ioctl(fds[0], FIONREAD, &avail) == 0 && avail == 0;
    close(fds[0]);
    close(fds[1]);
    return ok;
}

static bool p_fork(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(7);
    int st = 0;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 7;
}

static void *thread_fn(void *arg)
{
    return arg;
}

/* glibc tries clone3 first for threads; this only works if ENOSYS makes it
 * fall back to clone. */
static bool p_thread(void)
{
    pthread_t t;
    void *ret = NULL;
    int marker = 0;
    return pthread_create(&t, NULL, thread_fn, &marker) == 0 && pthread_join(t, &ret) == 0 && ret == &marker;
}

static bool p_keyctl(void)
{
    return fails_with(syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0), EPERM);
}

static bool p_unshare_user(void)
{
    return fails_with(unshare(CLONE_NEWUSER), EPERM) &&
           fails_with(unshare(CLONE_NEWUSER | CLONE_NEWNS), EPERM);
}

static bool p_unshare_other(void)
{
    return unshare(0) == 0;
}

static bool clone_fails(unsigned long flags)
{
    long r = syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
    if (r == 0)
        _exit(99);
    if (r > 0)
        waitpid((pid_t)r, NULL, 0);
    return fails_with(r, EPERM);
}

/* CLONE_FS alongside makes the unfiltered kernel answer EINVAL */
static bool p_clone_user(void)
{
    return clone_fails(CLONE_NEWUSER | CLONE_FS) && clone_fails(CLONE_NEWUSER);
}

static bool p_clone3(void)
{
    return fails_with(syscall(SYS_clone3, NULL, 0), ENOSYS);
}

static bool p_mount(void)
{
    return fails_with(mount("none", NO_SUCH_PATH, "tmpfs", 0, NULL), EPERM) &&
           fails_with(umount2(NO_SUCH_PATH, 0), EPERM);
}

static bool p_ioctl_tty(void)
{
    cleanup_close int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    char c = 'x';
    if (fd < 0)
        return false;
    /* the upper half of the request is junk to the kernel, so it must not
     * change the verdict either */
    unsigned long sti_high = (1UL << 32) | TIOCSTI;
    return fails_with(ioctl(fd, TIOCSTI, &c), EPERM) && fails_with(ioctl(fd, TIOCLINUX, &c), EPERM) &&
           fails_with(syscall(SYS_ioctl, fd, sti_high, &c), EPERM) &&
           fails_with(ioctl(fd, FIONREAD, &c), ENOTTY);
}

static bool p_personality(void)
{
    int cur = personality(0xffffffff);
    bool ok = cur >= 0 && personality(UNAME26) >= 0 && personality(PER_LINUX32 | UNAME26) >= 0 &&
              personality(PER_LINUX) >= 0;
    static const unsigned long bad[] = {READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, 0x20009,    0x10,
                                        0xfffffffe,        0xfffdffff,        0x7fffffff, 0x100400000UL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0] && ok; i++)
        ok = fails_with(syscall(SYS_personality, bad[i]), EPERM);
    return ok && personality(0xffffffff) == PER_LINUX;
}

static bool p_debug(void)
{
    char buf[8];
    struct iovec local = {buf, sizeof buf}, remote = {buf, sizeof buf};
    return fails_with(syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0), EPERM) &&
           fails_with(syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0), EPERM) &&
           fails_with(syscall(SYS_kcmp, getpid(), getpid(), 0, 0, 0), EPERM);
}

static bool p_kernel(void)
{
    return fails_with(syscall(SYS_bpf, 0, NULL, 0), EPERM) &&
           fails_with(syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0), EPERM) &&
           fails_with(syscall(SYS_setns, -1, 0), EPERM) &&
           fails_with(syscall(SYS_finit_module, -1, "", 0), EPERM) &&
           fails_with(syscall(SYS_userfaultfd, 0), EPERM) &&
           fails_with(syscall(SYS_open_by_handle_at, -1, NULL, 0), EPERM) &&
           fails_with(syscall(SYS_syslog, 10 /* SIZE_BUFFER */, NULL, 0), EPERM);
}

/* Anything not on the allowlist is closed with ENOSYS, including numbers
 * no kernel has yet. */
static bool p_unlisted(void)
{
    return fails_with(syscall(1000, 0, 0, 0), ENOSYS) && fails_with(syscall(SYS_vhangup), EPERM) &&
           fails_with(syscall(SYS_fanotify_init, 0, 0), EPERM);
}

static bool p_socket(void)
{
    cleanup_close int u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cleanup_close int i = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    /* the upper half of the int argument is ignored by the kernel */
    cleanup_close int h = (int)syscall(SYS_socket, (1UL << 32) | AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    return u >= 0 && i >= 0 && h >= 0 && fails_with(socket(AF_VSOCK, SOCK_STREAM, 0), EAFNOSUPPORT) &&
           fails_with(syscall(SYS_socket, (1UL << 32) | AF_VSOCK, SOCK_STREAM, 0), EAFNOSUPPORT);
}

static bool p_namespaces(void)
{
    return fails_with(unshare(CLONE_NEWNS), EPERM) && fails_with(unshare(CLONE_NEWNET), EPERM) &&
           fails_with(unshare(CLONE_NEWTIME), EPERM) && clone_fails(CLONE_NEWPID) &&
           unshare(CLONE_FILES) == 0;
}

static bool p_host_state(void)
{
    struct timespec ts = {0};
    return fails_with(syscall(SYS_sethostname, "x", 1), EPERM) &&
           fails_with(syscall(SYS_clock_settime, CLOCK_REALTIME, &ts), EPERM) &&
           fails_with(syscall(SYS_settimeofday, NULL, NULL), EPERM) &&
           fails_with(syscall(SYS_swapon, NO_SUCH_PATH, 0), EPERM) &&
           fails_with(syscall(SYS_reboot, 0, 0, 0, NULL), EPERM) && fails_with(syscall(SYS_iopl, 3), EPERM) &&
           fails_with(syscall(SYS_io_uring_setup, 1, NULL), EPERM) &&
           fails_with(syscall(SYS_pidfd_getfd, -1, 0, 0), EPERM) &&
           fails_with(syscall(SYS_quotactl_fd, -1, 0, 0, NULL), EPERM);
}

static const struct {
    const char *name;
    bool (*fn)(void);
} probes[] = {
    {"getpid allowed", p_getpid},
    {"pipe write/read/FIONREAD allowed", p_write},
    {"fork allowed", p_fork},
    {"pthread_create allowed (clone3 fallback)", p_thread},
    {"keyctl EPERM", p_keyctl},
    {"unshare(CLONE_NEWUSER) EPERM", p_unshare_user},
    {"unshare(0) allowed", p_unshare_other},
    {"clone(CLONE_NEWUSER) EPERM", p_clone_user},
    {"clone3 ENOSYS", p_clone3},
    {"mount/umount2 EPERM", p_mount},
    {"ioctl TIOCSTI/TIOCLINUX EPERM", p_ioctl_tty},
    {"personality allow-list", p_personality},
    {"ptrace/process_vm_readv/kcmp EPERM", p_debug},
    {"bpf/perf/setns/modules/userfaultfd/handles/syslog EPERM", p_kernel},
    {"unlisted syscalls ENOSYS", p_unlisted},
    {"socket: AF_VSOCK refused, others allowed", p_socket},
    {"no namespace flags on clone/unshare", p_namespaces},
    {"host time, hostname, swap, reboot, io ports, io_uring EPERM", p_host_state},
};
#define N_PROBES (sizeof probes / sizeof probes[0])
#define EXIT_SETUP_FAILED 100

static int confine(const struct fb_seccomp_prog *prog)
{
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || fb_seccomp_install(prog) < 0)
        return -1;
    return 0;
}

static int run_probes(const struct fb_seccomp_prog *prog)
{
    if (confine(prog) < 0)
        return EXIT_SETUP_FAILED;
    for (size_t i = 0; i < N_PROBES; i++)
        if (!probes[i].fn())
            return (int)i + 1;
    return 0;
}

static int wait_status(pid_t pid)
{
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return st;
}

static void test_filter_in_child(void **state)
{
    (void)state;
    cleanup_error fb_error_t err = NULL;
    struct fb_seccomp_prog prog;
    assert_int_equal(fb_seccomp_build(&prog, &err), 0);
    assert_non_null(prog.filter);
    assert_true(prog.len > 0);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(run_probes(&prog));
    int st = wait_status(pid);
    fb_seccomp_prog_free(&prog);
    if (WIFSIGNALED(st))
        fail_msg("confined child killed by signal %d", WTERMSIG(st));
    int code = WEXITSTATUS(st);
    if (code == EXIT_SETUP_FAILED)
        fail_msg("child could not install the filter");
    if (code != 0)
        fail_msg("probe failed: %s", code <= (int)N_PROBES ? probes[code - 1].name : "?");
}

#if defined(__x86_64__)
/* i386 numbers for int 0x80 */
#define I386_GETPID 20
#define I386_UMOUNT2 52
#define I386_KEYCTL 288
#define X32_SYSCALL_BIT 0x40000000L

static long int80(long nr, long a, long b)
{
    long ret;
    __asm__ volatile("int $0x80"
                     : "=a"(ret)
                     : "a"(nr), "b"(a), "c"(b), "d"(0L)
                     : "memory", "cc", "r8", "r9", "r10", "r11");
    return ret;
}

/* The compat ABIs are probed in children of their own: a kernel without
 * ia32 emulation answers int 0x80 with SIGSEGV, while SIGSYS would mean the
 * filter does not know the arch. */
static void test_compat_abis(void **state)
{
    (void)state;
    cleanup_error fb_error_t err = NULL;
    struct fb_seccomp_prog prog;
    assert_int_equal(fb_seccomp_build(&prog, &err), 0);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (confine(&prog) < 0)
            _exit(EXIT_SETUP_FAILED);
        if (int80(I386_GETPID, 0, 0) != getpid())
            _exit(1);
        if (int80(I386_UMOUNT2, (long)(uintptr_t)NO_SUCH_PATH, 0) != -EPERM)
            _exit(2);
        _exit(int80(I386_KEYCTL, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING) == -EPERM ? 0 : 3);
    }
    int st = wait_status(pid);
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV) {
        print_message("i386 emulation not available, int 0x80 not checked\n");
    } else {
        assert_false(WIFSIGNALED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }

    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (confine(&prog) < 0)
            _exit(EXIT_SETUP_FAILED);
        /* a kernel without the x32 ABI would say ENOSYS */
        long r = syscall(X32_SYSCALL_BIT | SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0);
        _exit(fails_with(r, EPERM) ? 0 : 1);
    }
    st = wait_status(pid);
    fb_seccomp_prog_free(&prog);
    assert_false(WIFSIGNALED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}
#endif

static void test_denied_names(void **state)
{
    (void)state;
    const char *const *names = fb_seccomp_denied_names();
    static const char *const must[] = {"ptrace",      "keyctl",     "mount",  "clone3",
                                       "personality", "unshare",    "ioctl",  "bpf",
                                       "kexec_load",  "move_pages", "_sysctl"};
    size_t n = 0;
    while (names[n] != NULL)
        n++;
    assert_true(n > 50);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (strcmp(names[i], names[j]) == 0)
                fail_msg("listed twice: %s", names[i]);
    for (size_t m = 0; m < sizeof must / sizeof must[0]; m++) {
        bool found = false;
        for (size_t i = 0; i < n && !found; i++)
            found = strcmp(names[i], must[m]) == 0;
        if (!found)
            fail_msg("missing from denied names: %s", must[m]);
    }
}

/* The two lists must not overlap: an unconditional allow would swallow the
 * deny rules of the same call. */
static void test_allowed_and_denied_disjoint(void **state)
{
    (void)state;
    size_t n_allowed = 0;
    for (const char *const *a = fb_seccomp_allowed_names(); *a != NULL; a++, n_allowed++) {
        for (const char *const *d = fb_seccomp_denied_names(); *d != NULL; d++)
            if (strcmp(*a, *d) == 0)
                fail_msg("both allowed and denied: %s", *a);
        for (const char *const *b = a + 1; *b != NULL; b++)
            if (strcmp(*a, *b) == 0)
                fail_msg("allowed twice: %s", *a);
    }
    assert_true(n_allowed > 250);
}

static void test_build_is_stable_and_free_is_idempotent(void **state)
{
    (void)state;
    cleanup_error fb_error_t err = NULL;
    struct fb_seccomp_prog a, b;
    assert_int_equal(fb_seccomp_build(&a, &err), 0);
    assert_int_equal(fb_seccomp_build(&b, &err), 0);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.filter, b.filter, a.len * sizeof(struct sock_filter));
    assert_true(a.len <= BPF_MAXINSNS);
    fb_seccomp_prog_free(&a);
    fb_seccomp_prog_free(&a);
    assert_null(a.filter);
    assert_int_equal(a.len, 0);
    assert_int_equal(fb_seccomp_install(&a), -EINVAL);
    assert_int_equal(fb_seccomp_install(NULL), -EINVAL);
    fb_seccomp_prog_free(&b);
    fb_seccomp_prog_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filter_in_child),
#if defined(__x86_64__)
        cmocka_unit_test(test_compat_abis),
#endif
        cmocka_unit_test(test_denied_names),
        cmocka_unit_test(test_allowed_and_denied_disjoint),
        cmocka_unit_test(test_build_is_stable_and_free_is_idempotent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
