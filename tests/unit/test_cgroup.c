/* Cgroup handling is checked on fake trees (ordinary directories standing in
 * for cgroupfs, described by a fake mountinfo) for both layouts, and once on
 * the real v1 hierarchy when the host has one and we are root. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <linux/magic.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "runtime/cgroup.h"

#define MIB (1024ULL * 1024)

struct fixture {
    char root[PATH_MAX]; /* mkdtemp dir; its name contains a space */
    char mountinfo[PATH_MAX];
};

static void path_join(char *out, const char *a, const char *b)
{
    assert_int_equal(fb_snprintf(out, PATH_MAX, "%s/%s", a, b), 0);
}

static void mkdirs(const char *base, const char *rel)
{
    char p[PATH_MAX];
    path_join(p, base, rel);
    assert_int_equal(fb_mkdir_p(p, 0755), 0);
}

static void put_file(const char *base, const char *rel, const char *content)
{
    char p[PATH_MAX];
    path_join(p, base, rel);
    assert_int_equal(fb_write_file(p, content, strlen(content), 0644), 0);
}

/* Contents of base/rel with trailing newlines cut; the caller frees. */
static char *get_file(const char *base, const char *rel)
{
    char p[PATH_MAX];
    path_join(p, base, rel);
    char *s = NULL;
    int r = fb_read_file(p, 65536, &s, NULL);
    if (r < 0)
        fail_msg("read %s: %s", p, strerror(-r));
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '\n')
        s[--n] = '\0';
    return s;
}

static void expect_file(const char *base, const char *rel, const char *want)
{
    cleanup_free char *got = get_file(base, rel);
    if (strcmp(got, want) != 0)
        fail_msg("%s/%s: got \"%s\", want \"%s\"", base, rel, got, want);
}

static int exists(const char *base, const char *rel)
{
    char p[PATH_MAX];
    path_join(p, base, rel);
    return access(p, F_OK) == 0;
}

/* Writes a path the way mountinfo does: space, tab, newline and backslash
 * as octal escapes. */
static void escape_into(FILE *f, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\\')
            fprintf(f, "\\%03o", (unsigned char)*s);
        else
            fputc(*s, f);
    }
}

static void mount_line(FILE *f, int id, const char *mnt, const char *optional, const char *fstype,
                       const char *superopts)
{
    fprintf(f, "%d 23 0:%d / ", id, id);
    escape_into(f, mnt);
    fprintf(f, " rw,nosuid,nodev,noexec,relatime%s%s - %s %s %s\n", optional[0] ? " " : "", optional, fstype,
            fstype, superopts);
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    strcpy(fx->root, "/tmp/fb cgtest-XXXXXX");
    assert_non_null(mkdtemp(fx->root));
    path_join(fx->mountinfo, fx->root, "mountinfo");
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    fb_rm_rf(fx->root);
    free(fx);
    return 0;
}

static pid_t spawn_sleeper(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (;;)
            pause();
    }
    return pid;
}

static void expect_killed(pid_t pid)
{
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGKILL);
}

/* ---- v2 ---- */

/* Files the kernel would create on mkdir, so the fake tree can stand in. */
static void v2_fake_cgroup(const char *dir, int with_swap)
{
    static const char *const files[] = {"memory.max",   "pids.max",    "cpu.max",
                                        "cgroup.procs", "cgroup.kill", "cgroup.subtree_control"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        put_file(dir, files[i], "");
    if (with_swap)
        put_file(dir, "memory.swap.max", "");
}

static void write_v2_mountinfo(const struct fixture *fx, const char *v2)
{
    cleanup_fclose FILE *f = fopen(fx->mountinfo, "w");
    assert_non_null(f);
    fputs("22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n", f);
    fputs("garbage line without separator\n", f);
    mount_line(f, 26, v2, "shared:4 master:1", "cgroup2", "rw,nsdelegate,memory_recursiveprot");
}

static void test_v2_fake_tree(void **state)
{
    struct fixture *fx = *state;
    cleanup_error fb_error_t err = NULL;
    char v2[PATH_MAX], parent[PATH_MAX], sb1[PATH_MAX], sb2[PATH_MAX];
    path_join(v2, fx->root, "unified");
    path_join(parent, v2, "forkbox");
    path_join(sb1, parent, "sb1");
    path_join(sb2, parent, "sb2");
    mkdirs(sb1, ".");
    mkdirs(sb2, ".");
    put_file(v2, "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
    put_file(v2, "cgroup.subtree_control", "");
    put_file(parent, "cgroup.subtree_control", "");
    v2_fake_cgroup(sb1, 1);
    v2_fake_cgroup(sb2, 0);
    write_v2_mountinfo(fx, v2);

    struct fb_cgroup_host h;
    if (fb_cgroup_host_detect(&h, fx->mountinfo, &err) < 0)
        fail_msg("detect: %s", err->msg);
    assert_int_equal(h.mode, FB_CGROUP_V2);
    assert_string_equal(h.v2_root, v2);
    assert_string_equal(h.parent, "forkbox");
    expect_file(v2, "cgroup.subtree_control", "+memory +pids +cpu");
    expect_file(parent, "cgroup.subtree_control", "+memory +pids +cpu");

    struct fb_cgroup_limits l = {.cpus = 0.5, .memory_bytes = 256 * MIB, .pids = 64};
    assert_int_equal(fb_cgroup_create(&h, "sb1", &l, &err), 0);
    expect_file(sb1, "cpu.max", "50000 100000");
    expect_file(sb1, "memory.max", "268435456");
    expect_file(sb1, "memory.swap.max", "0");
    expect_file(sb1, "pids.max", "64");

    struct fb_cgroup_limits unlimited = {0};
    assert_int_equal(fb_cgroup_create(&h, "sb2", &unlimited, &err), 0);
    expect_file(sb2, "cpu.max", "max 100000");
    expect_file(sb2, "memory.max", "max");
    expect_file(sb2, "pids.max", "max");
    assert_false(exists(sb2, "memory.swap.max"));

    /* a tiny share still gets the kernel's minimum quota */
    struct fb_cgroup_limits tiny = {.cpus = 0.001};
    assert_int_equal(fb_cgroup_create(&h, "sb2", &tiny, &err), 0);
    expect_file(sb2, "cpu.max", "1000 100000");

    put_file(sb1, "memory.current", "1048576\n");
    put_file(sb1, "cpu.stat", "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n");
    put_file(sb1, "pids.current", "3\n");
    put_file(sb1, "memory.events", "low 0\nhigh 0\nmax 4\noom 2\noom_kill 1\n");
    struct fb_cgroup_usage u;
    assert_int_equal(fb_cgroup_usage_read(&h, "sb1", &u, &err), 0);
    assert_int_equal(u.memory_bytes, 1048576);
    assert_int_equal(u.cpu_usec, 2500);
    assert_int_equal(u.pids, 3);
    assert_int_equal(u.oom_kills, 1);

    pid_t child = spawn_sleeper();
    assert_int_equal(fb_cgroup_add_pid(&h, "sb1", child, &err), 0);
    char want[32];
    snprintf(want, sizeof want, "%d", (int)child);
    expect_file(sb1, "cgroup.procs", want);

    assert_true(fb_cgroup_exists(&h, "sb1"));
    assert_int_equal(fb_cgroup_destroy(&h, "sb1", &err), 0);
    expect_killed(child);
    assert_false(fb_cgroup_exists(&h, "sb1"));
    assert_int_equal(fb_cgroup_destroy(&h, "sb1", &err), 0);
    assert_int_equal(fb_cgroup_destroy(&h, "sb2", &err), 0);
    assert_false(exists(parent, "sb2"));
    assert_true(exists(v2, "forkbox"));

    assert_int_equal(fb_cgroup_usage_read(&h, "sb1", &u, &err), -1);
    assert_int_equal(err->kind, FB_ERR_NOT_FOUND);
}

/* ---- v1 (laid out like a hybrid host: separate cpu and cpuacct, and a
 * unified mount that offers only hugetlb) ---- */

struct v1_tree {
    char mem[PATH_MAX], pids[PATH_MAX], cpu[PATH_MAX], acct[PATH_MAX], unified[PATH_MAX];
};

static void v1_fake_sandbox(const struct v1_tree *t, const char *name, int with_memsw)
{
    char d[PATH_MAX], rel[PATH_MAX];
    assert_int_equal(fb_snprintf(rel, sizeof rel, "forkbox/%s", name), 0);
    const char *mounts[] = {t->mem, t->pids, t->cpu, t->acct};
    for (size_t i = 0; i < 4; i++) {
        path_join(d, mounts[i], rel);
        mkdirs(d, ".");
        put_file(d, "cgroup.procs", "");
    }
    path_join(d, t->mem, rel);
    put_file(d, "memory.limit_in_bytes", "");
    put_file(d, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
    put_file(d, "memory.usage_in_bytes", "4096\n");
    if (with_memsw)
        put_file(d, "memory.memsw.limit_in_bytes", "");
    path_join(d, t->pids, rel);
    put_file(d, "pids.max", "");
    put_file(d, "pids.current", "2\n");
    path_join(d, t->cpu, rel);
    put_file(d, "cpu.cfs_period_us", "");
    put_file(d, "cpu.cfs_quota_us", "");
    path_join(d, t->acct, rel);
    put_file(d, "cpuacct.usage", "7000000\n");
}

static void v1_fake_host(const struct fixture *fx, struct v1_tree *t)
{
    char base[PATH_MAX], d[PATH_MAX];
    path_join(base, fx->root, "cgroup");
    path_join(t->mem, base, "memory ctl");
    path_join(t->pids, base, "pids");
    path_join(t->cpu, base, "cpu");
    path_join(t->acct, base, "cpuacct");
    path_join(t->unified, base, "unified");
    mkdirs(t->unified, ".");
    put_file(t->unified, "cgroup.controllers", "hugetlb\n");
    path_join(d, t->mem, "forkbox");
    mkdirs(d, ".");
    put_file(d, "memory.use_hierarchy", "0\n");
    v1_fake_sandbox(t, "sb1", 1);
    v1_fake_sandbox(t, "sb2", 0);

    cleanup_fclose FILE *f = fopen(fx->mountinfo, "w");
    assert_non_null(f);
    fputs("22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n", f);
    mount_line(f, 31, base, "", "tmpfs", "rw,mode=755");
    mount_line(f, 41, t->unified, "shared:9", "cgroup2", "rw");
    /* cpuset before cpu: "cpu" must match whole options only */
    mount_line(f, 34, t->acct, "", "cgroup", "rw,cpuset");
    mount_line(f, 32, t->cpu, "shared:10", "cgroup", "rw,cpu");
    mount_line(f, 33, t->acct, "", "cgroup", "rw,cpuacct");
    mount_line(f, 35, t->mem, "shared:12 master:3", "cgroup", "rw,memory");
    mount_line(f, 39, t->pids, "", "cgroup", "rw,pids");
    mount_line(f, 40, base, "", "cgroup", "rw,name=systemd");
}

static void test_v1_fake_tree(void **state)
{
    struct fixture *fx = *state;
    cleanup_error fb_error_t err = NULL;
    struct v1_tree t;
    v1_fake_host(fx, &t);

    struct fb_cgroup_host h;
    if (fb_cgroup_host_detect(&h, fx->mountinfo, &err) < 0)
        fail_msg("detect: %s", err->msg);
    assert_int_equal(h.mode, FB_CGROUP_V1);
    assert_string_equal(h.v1_memory, t.mem);
    assert_string_equal(h.v1_pids, t.pids);
    assert_string_equal(h.v1_cpu, t.cpu);
    assert_string_equal(h.v1_cpuacct, t.acct);
    assert_string_equal(h.v2_root, "");
    char mp[PATH_MAX], pp[PATH_MAX], cp[PATH_MAX], ap[PATH_MAX];
    path_join(mp, t.mem, "forkbox");
    expect_file(mp, "memory.use_hierarchy", "1");
    assert_true(exists(t.pids, "forkbox") && exists(t.cpu, "forkbox") && exists(t.acct, "forkbox"));

    struct fb_cgroup_limits l = {.cpus = 0.5, .memory_bytes = 128 * MIB, .pids = 5};
    assert_int_equal(fb_cgroup_create(&h, "sb1", &l, &err), 0);
    path_join(mp, t.mem, "forkbox/sb1");
    path_join(pp, t.pids, "forkbox/sb1");
    path_join(cp, t.cpu, "forkbox/sb1");
    path_join(ap, t.acct, "forkbox/sb1");
    expect_file(mp, "memory.limit_in_bytes", "134217728");
    expect_file(mp, "memory.memsw.limit_in_bytes", "134217728");
    expect_file(pp, "pids.max", "5");
    expect_file(cp, "cpu.cfs_period_us", "100000");
    expect_file(cp, "cpu.cfs_quota_us", "50000");

    struct fb_cgroup_limits l2 = {.cpus = 2, .memory_bytes = 0, .pids = 0};
    assert_int_equal(fb_cgroup_create(&h, "sb2", &l2, &err), 0);
    char m2[PATH_MAX], p2[PATH_MAX], c2[PATH_MAX];
    path_join(m2, t.mem, "forkbox/sb2");
    path_join(p2, t.pids, "forkbox/sb2");
    path_join(c2, t.cpu, "forkbox/sb2");
    expect_file(m2, "memory.limit_in_bytes", "-1");
    assert_false(exists(m2, "memory.memsw.limit_in_bytes"));
    expect_file(p2, "pids.max", "max");
    expect_file(c2, "cpu.cfs_quota_us", "200000");

    struct fb_cgroup_usage u;
    assert_int_equal(fb_cgroup_usage_read(&h, "sb1", &u, &err), 0);
    assert_int_equal(u.memory_bytes, 4096);
    assert_int_equal(u.pids, 2);
    assert_int_equal(u.cpu_usec, 7000);
    assert_int_equal(u.oom_kills, 2);

    pid_t child = spawn_sleeper();
    assert_int_equal(fb_cgroup_add_pid(&h, "sb1", child, &err), 0);
    char want[32];
    snprintf(want, sizeof want, "%d", (int)child);
    const char *dirs[] = {mp, pp, cp, ap};
    for (size_t i = 0; i < 4; i++)
        expect_file(dirs[i], "cgroup.procs", want);

    assert_int_equal(fb_cgroup_destroy(&h, "sb1", &err), 0);
    expect_killed(child);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(access(dirs[i], F_OK), -1);
    assert_false(fb_cgroup_exists(&h, "sb1"));
    assert_true(fb_cgroup_exists(&h, "sb2"));
    assert_int_equal(fb_cgroup_destroy(&h, "sb2", &err), 0);
    assert_false(fb_cgroup_exists(&h, "sb2"));
}

static void write_comounted(const struct fixture *fx, const struct v1_tree *t, const char *pids_fstype)
{
    cleanup_fclose FILE *f = fopen(fx->mountinfo, "w");
    assert_non_null(f);
    mount_line(f, 41, t->unified, "", "cgroup2", "rw");
    mount_line(f, 32, t->cpu, "", "cgroup", "rw,cpu,cpuacct");
    mount_line(f, 35, t->mem, "", "cgroup", "rw,memory");
    mount_line(f, 36, t->pids, "", pids_fstype, "rw,pids");
}

/* cpu and cpuacct in one hierarchy share a directory: it is written once */
static void test_v1_comounted_cpu(void **state)
{
    struct fixture *fx = *state;
    cleanup_error fb_error_t err = NULL;
    struct v1_tree t;
    v1_fake_host(fx, &t);
    write_comounted(fx, &t, "cgroup");
    char cp[PATH_MAX];
    path_join(cp, t.cpu, "forkbox/sb1");
    put_file(cp, "cpuacct.usage", "3000\n");

    struct fb_cgroup_host h;
    assert_int_equal(fb_cgroup_host_detect(&h, fx->mountinfo, &err), 0);
    assert_int_equal(h.mode, FB_CGROUP_V1);
    assert_string_equal(h.v1_cpu, h.v1_cpuacct);
    struct fb_cgroup_limits l = {.cpus = 1.5};
    assert_int_equal(fb_cgroup_create(&h, "sb1", &l, &err), 0);
    expect_file(cp, "cpu.cfs_quota_us", "150000");
    assert_int_equal(fb_cgroup_add_pid(&h, "sb1", getpid(), &err), 0);
    struct fb_cgroup_usage u;
    assert_int_equal(fb_cgroup_usage_read(&h, "sb1", &u, &err), 0);
    assert_int_equal(u.cpu_usec, 3);
    /* the fake procs list names this process, which destroy must spare */
    assert_int_equal(fb_cgroup_destroy(&h, "sb1", &err), 0);
    assert_int_equal(access(cp, F_OK), -1);
}

static void test_detect_unsupported(void **state)
{
    struct fixture *fx = *state;
    cleanup_error fb_error_t err = NULL;
    struct v1_tree t;
    v1_fake_host(fx, &t);
    write_comounted(fx, &t, "tmpfs"); /* no pids controller */

    struct fb_cgroup_host h;
    assert_int_equal(fb_cgroup_host_detect(&h, fx->mountinfo, &err), -1);
    assert_int_equal(err->kind, FB_ERR_UNSUPPORTED);
    assert_non_null(strstr(err->msg, "pids"));
    fb_error_release(&err);

    char missing[PATH_MAX];
    path_join(missing, fx->root, "no-mountinfo");
    assert_int_equal(fb_cgroup_host_detect(&h, missing, &err), -1);
    assert_int_equal(err->kind, FB_ERR_INTERNAL);
}

/* favordynmods: nothing to do when a cgroup2 mount has it, a clear
 * "unsupported" when there is no cgroup2 mount at all. */
static void test_favor_dynmods(void **state)
{
    struct fixture *fx = *state;
    cleanup_error fb_error_t err = NULL;
    bool changed = true;
    FILE *f = fopen(fx->mountinfo, "w");
    assert_non_null(f);
    fprintf(f,
            "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
            "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw,favordynmods\n");
    fclose(f);
    assert_int_equal(fb_cgroup_favor_dynmods(fx->mountinfo, &changed, &err), 0);
    assert_false(changed);

    f = fopen(fx->mountinfo, "w");
    assert_non_null(f);
    fprintf(f, "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
               "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n");
    fclose(f);
    assert_int_equal(fb_cgroup_favor_dynmods(fx->mountinfo, &changed, &err), -1);
    assert_int_equal(err->kind, FB_ERR_UNSUPPORTED);
    assert_false(changed);
}

static void test_bad_input(void **state)
{
    struct fixture *fx = *state;
    cleanup_error fb_error_t err = NULL;
    struct fb_cgroup_host h = {.mode = FB_CGROUP_V2};
    path_join(h.v2_root, fx->root, "v2");
    struct fb_cgroup_limits ok = {0};
    static const char *const names[] = {
        "",        "..",   "../x",   "a/b",
        ".hidden", "-opt", "sp ace", "0123456789012345678901234567890123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        assert_int_equal(fb_cgroup_create(&h, names[i], &ok, &err), -1);
        assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
        fb_error_release(&err);
        assert_false(fb_cgroup_exists(&h, names[i]));
    }
    const struct fb_cgroup_limits bad[] = {
        {.cpus = -1}, {.cpus = NAN}, {.cpus = INFINITY}, {.pids = 1ULL << 40}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(fb_cgroup_create(&h, "sb", &bad[i], &err), -1);
        assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
        fb_error_release(&err);
    }
    assert_int_equal(access(h.v2_root, F_OK), -1);
}

/* ---- real host ---- */

static int is_v1_cgroupfs(const char *path)
{
    struct statfs sf;
    return statfs(path, &sf) == 0 && sf.f_type == CGROUP_SUPER_MAGIC;
}

/* Forks until the pids limit stops it, reports how many forks worked on
 * `out`, then stays in the cgroup so destroy has something to kill. */
static void fork_until_refused(int go, int out)
{
    char c;
    if (read(go, &c, 1) != 1)
        _exit(1);
    int n = 0;
    for (; n < 20; n++) {
        pid_t p = fork();
        if (p < 0)
            break;
        if (p == 0) {
            for (;;)
                pause();
        }
    }
    int err = errno;
    int msg[2] = {n, err};
    if (write(out, msg, sizeof msg) != (ssize_t)sizeof msg)
        _exit(1);
    for (;;)
        pause();
}

static void test_real_v1_pids_limit(void **state)
{
    (void)state;
    if (geteuid() != 0 || !is_v1_cgroupfs("/sys/fs/cgroup/pids"))
        skip();
    cleanup_error fb_error_t err = NULL;
    struct fb_cgroup_host h;
    if (fb_cgroup_host_detect(&h, NULL, &err) < 0)
        fail_msg("detect: %s", err->msg);
    assert_int_equal(h.mode, FB_CGROUP_V1);

    char name[64];
    snprintf(name, sizeof name, "fbtest-%d", (int)getpid());
    struct fb_cgroup_limits l = {.cpus = 1, .memory_bytes = 256 * MIB, .pids = 5};
    if (fb_cgroup_create(&h, name, &l, &err) < 0)
        fail_msg("create: %s", err->msg);
    assert_true(fb_cgroup_exists(&h, name));

    /* the grandchildren are orphaned when destroy kills their parent:
     * adopt them so they are reaped here, not left to pid 1 */
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
    int go[2], res[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(res), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        close(go[1]);
        close(res[0]);
        fork_until_refused(go[0], res[1]);
    }
    close(go[0]);
    close(res[1]);
    if (fb_cgroup_add_pid(&h, name, child, &err) < 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        (void)fb_cgroup_destroy(&h, name, NULL);
        fail_msg("add_pid: %s", err->msg);
    }
    assert_int_equal(write(go[1], "x", 1), 1);
    int msg[2] = {-1, 0};
    ssize_t got = read(res[0], msg, sizeof msg);
    close(go[1]);
    close(res[0]);

    struct fb_cgroup_usage u = {0};
    int usage_rc = fb_cgroup_usage_read(&h, name, &u, NULL);
    cleanup_error fb_error_t derr = NULL;
    int destroyed = fb_cgroup_destroy(&h, name, &derr);
    int exists_after = fb_cgroup_exists(&h, name);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "/sys/fs/cgroup/pids/forkbox/%s", name);
    int dir_after = access(dir, F_OK);
    expect_killed(child);
    int64_t deadline = fb_mono_ms() + 2000;
    while (waitpid(-1, NULL, WNOHANG) >= 0 && fb_mono_ms() < deadline)
        usleep(1000);
    prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);

    assert_int_equal(got, (ssize_t)sizeof msg);
    /* the child itself is one of the five */
    assert_int_equal(msg[0], 4);
    assert_int_equal(msg[1], EAGAIN);
    assert_int_equal(usage_rc, 0);
    assert_int_equal(u.pids, 5);
    assert_true(u.memory_bytes > 0);
    if (destroyed < 0)
        fail_msg("destroy: %s", derr->msg);
    assert_false(exists_after);
    assert_int_equal(dir_after, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_v2_fake_tree, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v1_fake_tree, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v1_comounted_cpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_detect_unsupported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_favor_dynmods, setup, teardown),
        cmocka_unit_test(test_real_v1_pids_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
