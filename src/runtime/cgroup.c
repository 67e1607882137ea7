#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/log.h"
#include "../common/util.h"

#define CG_PARENT "forkbox"
#define CG_NAME_MAX 63
#define CG_CPU_PERIOD_US 100000
#define CG_CPU_MIN_QUOTA_US 1000 /* the kernel refuses quotas under 1 ms */
#define CG_CPUS_MAX 4096.0
#define CG_PIDS_MAX 4194304ULL /* PID_MAX_LIMIT: pids.max accepts nothing larger */
#define CG_DESTROY_WAIT_MS 2000
#define CG_POLL_NS 500000L /* 0.5 ms: an exiting task leaves its cgroup within a few */
#define CG_SMALL_FILE_MAX (64 * 1024)
#define CG_PROCS_FILE_MAX (4 * 1024 * 1024)
#define CG_CONTROLLERS "+memory +pids +cpu"

enum cg_ctl { CG_MEM, CG_PIDS, CG_CPU, CG_CPUACCT, CG_FREEZER, CG_NCTL };

/* ---- small file helpers (-errno, no error object) ---- */

/* cgroupfs takes one value per write(); a short write is a failure. */
static int cg_write(const char *dir, const char *file, const char *val)
{
    char path[PATH_MAX];
    int r = fb_snprintf(path, sizeof path, "%s/%s", dir, file);
    if (r < 0)
        return r;
    cleanup_close int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    size_t len = strlen(val);
    ssize_t n = write(fd, val, len);
    if (n < 0)
        return -errno;
    return (size_t)n == len ? 0 : -EIO;
}

static int cg_read(const char *dir, const char *file, size_t max, char **out)
{
    char path[PATH_MAX];
    int r = fb_snprintf(path, sizeof path, "%s/%s", dir, file);
    if (r < 0)
        return r;
    return fb_read_file(path, max, out, NULL);
}

/* A decimal counter or "max"; trailing text after a space is ignored. */
static int parse_u64(const char *s, uint64_t *v)
{
    s += strspn(s, " \t");
    if (strncmp(s, "max", 3) == 0) {
        *v = UINT64_MAX;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    if (*s < '0' || *s > '9' || errno != 0 || (*end != '\0' && *end != '\n' && *end != ' '))
        return -EINVAL;
    *v = n;
    return 0;
}

static int cg_read_u64(const char *dir, const char *file, uint64_t *v)
{
    cleanup_free char *buf = NULL;
    int r = cg_read(dir, file, CG_SMALL_FILE_MAX, &buf);
    return r < 0 ? r : parse_u64(buf, v);
}

/* Reads the value of a "key N" line of a flat-keyed file; -ENOENT if the key
 * is absent (older kernels lack some counters). */
static int cg_read_key(const char *dir, const char *file, const char *key, uint64_t *v)
{
    cleanup_free char *buf = NULL;
    int r = cg_read(dir, file, CG_SMALL_FILE_MAX, &buf);
    if (r < 0)
        return r;
    size_t klen = strlen(key);
    for (char *line = buf; line != NULL && *line != '\0';) {
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            *nl = '\0';
        if (strncmp(line, key, klen) == 0 && line[klen] == ' ')
            return parse_u64(line + klen + 1, v);
        line = nl != NULL ? nl + 1 : NULL;
    }
    return -ENOENT;
}

/* Whether `word` is one of the items of a list separated by any of `seps`. */
static bool list_has(const char *list, const char *word, const char *seps)
{
    size_t wlen = strlen(word);
    for (const char *p = list; *p != '\0';) {
        size_t n = strcspn(p, seps);
        if (n == wlen && strncmp(p, word, wlen) == 0)
            return true;
        p += n;
        if (*p != '\0')
            p++;
    }
    return false;
}

/* ---- paths ---- */

static const char *parent_of(const struct fb_cgroup_host *h)
{
    return h->parent[0] != '\0' ? h->parent : CG_PARENT;
}

/* Mount point of a controller; "" when it is not mounted (v1 cpuacct,
 * freezer). */
static const char *mount_of(const struct fb_cgroup_host *h, enum cg_ctl c)
{
    const char *v1[CG_NCTL] = {h->v1_memory, h->v1_pids, h->v1_cpu, h->v1_cpuacct, h->v1_freezer};
    return h->mode == FB_CGROUP_V2 ? h->v2_root : v1[c];
}

static int path_error(fb_error_t *err, const char *name)
{
    return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "cgroup path for %s",
                        name != NULL ? name : "parent");
}

/* The distinct cgroup directories of `name` (NULL: the parent), one per
 * hierarchy; v2 and co-mounted v1 controllers share one. */
struct cg_dirs {
    size_t n;
    char path[CG_NCTL][PATH_MAX];
};

static int dirs_get(const struct fb_cgroup_host *h, const char *name, struct cg_dirs *d)
{
    d->n = 0;
    for (int c = 0; c < CG_NCTL; c++) {
        const char *mnt = mount_of(h, (enum cg_ctl)c);
        if (mnt[0] == '\0')
            continue;
        char p[PATH_MAX];
        int r = name != NULL ? fb_snprintf(p, sizeof p, "%s/%s/%s", mnt, parent_of(h), name)
                             : fb_snprintf(p, sizeof p, "%s/%s", mnt, parent_of(h));
        if (r < 0)
            return r;
        bool seen = false;
        for (size_t i = 0; i < d->n && !seen; i++)
            seen = strcmp(d->path[i], p) == 0;
        if (!seen)
            memcpy(d->path[d->n++], p, sizeof p);
    }
    return 0;
}

static int dir_of(const struct fb_cgroup_host *h, enum cg_ctl c, const char *name, char *out)
{
    const char *mnt = mount_of(h, c);
    if (mnt[0] == '\0')
        return -ENOENT;
    return fb_snprintf(out, PATH_MAX, "%s/%s/%s", mnt, parent_of(h), name);
}

static int check_name(const char *name, fb_error_t *err)
{
    static const char allowed[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
    size_t n = name != NULL ? strlen(name) : 0;
    if (n == 0 || n > CG_NAME_MAX || name[0] == '.' || name[0] == '-' || strspn(name, allowed) != n)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                            "cgroup name must be 1-%d of [A-Za-z0-9._-], not starting with '.' or '-'",
                            CG_NAME_MAX);
    return 0;
}

/* ---- mountinfo ---- */

#define IS_OCT(c) ((c) >= '0' && (c) <= '7')

/* The kernel escapes space, tab, newline and backslash in paths as \ooo. */
static void unescape_octal(char *s)
{
    char *w = s;
    for (const char *r = s; *r != '\0';) {
        if (r[0] == '\\' && IS_OCT(r[1]) && IS_OCT(r[2]) && IS_OCT(r[3])) {
            *w++ = (char)(((r[1] - '0') << 6) | ((r[2] - '0') << 3) | (r[3] - '0'));
            r += 4;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
}

/* "36 35 98:0 /root /mnt opts [optional...] - fstype source superopts":
 * the optional fields vary in number, so the fs type is found after the
 * lone "-" rather than at a fixed index. */
static int parse_mount_line(char *line, char **mnt, char **fstype, char **superopts)
{
    char *save = NULL;
    char *tok = strtok_r(line, " \n", &save);
    int i = 0;
    for (; tok != NULL && i < 6; i++, tok = strtok_r(NULL, " \n", &save))
        if (i == 4)
            *mnt = tok;
    if (i < 6)
        return -EINVAL;
    while (tok != NULL && strcmp(tok, "-") != 0)
        tok = strtok_r(NULL, " \n", &save);
    if (tok == NULL)
        return -EINVAL;
    *fstype = strtok_r(NULL, " \n", &save);
    char *source = strtok_r(NULL, " \n", &save);
    *superopts = strtok_r(NULL, " \n", &save);
    if (*fstype == NULL || source == NULL || *superopts == NULL)
        return -EINVAL;
    unescape_octal(*mnt);
    return 0;
}

static bool v2_has_controllers(const char *root)
{
    cleanup_free char *ctl = NULL;
    if (cg_read(root, "cgroup.controllers", CG_SMALL_FILE_MAX, &ctl) < 0)
        return false;
    return list_has(ctl, "memory", " \n") && list_has(ctl, "pids", " \n") && list_has(ctl, "cpu", " \n");
}

static void take_mount(char *dst, const char *mnt)
{
    if (dst[0] == '\0' && fb_strlcpy(dst, mnt, PATH_MAX) < 0)
        fb_warn("cgroup: mount point too long, ignored: %.64s...", mnt);
}

/* Calls fn for each mount in the mountinfo file at path until fn returns
 * non-zero (which is then returned).  0 when all were seen. */
typedef int (*mount_fn)(void *ctx, const char *mnt, const char *fstype, const char *opts, fb_error_t *err);

static int each_mount(const char *path, mount_fn fn, void *ctx, fb_error_t *err)
{
    cleanup_fclose FILE *f = fopen(path, "re");
    if (f == NULL)
        return fb_error_sys(err, "open %s", path);
    cleanup_free char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) >= 0) {
        char *mnt = NULL, *fstype = NULL, *opts = NULL;
        if (parse_mount_line(line, &mnt, &fstype, &opts) < 0)
            continue;
        int r = fn(ctx, mnt, fstype, opts, err);
        if (r != 0)
            return r;
    }
    if (ferror(f))
        return fb_error_sys(err, "read %s", path);
    return 0;
}

static int take_cgroup_mount(void *ctx, const char *mnt, const char *fstype, const char *opts,
                             fb_error_t *err)
{
    (void)err;
    struct fb_cgroup_host *h = ctx;
    if (strcmp(fstype, "cgroup2") == 0) {
        if (h->v2_root[0] == '\0' && v2_has_controllers(mnt))
            take_mount(h->v2_root, mnt);
    } else if (strcmp(fstype, "cgroup") == 0) {
        if (list_has(opts, "memory", ","))
            take_mount(h->v1_memory, mnt);
        if (list_has(opts, "pids", ","))
            take_mount(h->v1_pids, mnt);
        if (list_has(opts, "cpu", ","))
            take_mount(h->v1_cpu, mnt);
        if (list_has(opts, "cpuacct", ","))
            take_mount(h->v1_cpuacct, mnt);
        if (list_has(opts, "freezer", ","))
            take_mount(h->v1_freezer, mnt);
    }
    return 0;
}

static int scan_mounts(struct fb_cgroup_host *h, const char *path, fb_error_t *err)
{
    return each_mount(path, take_cgroup_mount, h, err) < 0 ? -1 : 0;
}

/* Returns 1 once the first cgroup2 mount has favordynmods (remounting it
 * if needed; *changed then says so), -1 on failure, 0 to keep looking. */
static int favor_dynmods_on(void *ctx, const char *mnt, const char *fstype, const char *opts, fb_error_t *err)
{
    bool *changed = ctx;
    if (strcmp(fstype, "cgroup2") != 0)
        return 0;
    if (list_has(opts, "favordynmods", ","))
        return 1;
    /* the option is global in effect: one cgroup2 mount is enough */
    if (mount(NULL, mnt, NULL, MS_REMOUNT, "favordynmods") < 0)
        return fb_error_set(err, FB_ERR_UNSUPPORTED, errno, "remount %s with favordynmods", mnt);
    *changed = true;
    return 1;
}

int fb_cgroup_favor_dynmods(const char *mountinfo_path, bool *changed, fb_error_t *err)
{
    *changed = false;
    int r =
        each_mount(mountinfo_path ? mountinfo_path : "/proc/self/mountinfo", favor_dynmods_on, changed, err);
    if (r < 0)
        return -1;
    if (r == 0)
        return fb_error_set(err, FB_ERR_UNSUPPORTED, 0, "no cgroup2 mount to set favordynmods on");
    return 0;
}

/* ---- parent cgroups ---- */

static int v2_enable(const char *dir, fb_error_t *err)
{
    cleanup_free char *cur = NULL;
    int r = cg_read(dir, "cgroup.subtree_control", CG_SMALL_FILE_MAX, &cur);
    if (r < 0)
        return fb_error_set(err, FB_ERR_UNSUPPORTED, -r, "read %s/cgroup.subtree_control", dir);
    /* Writing when already enabled can still fail (EBUSY in a non-root
     * cgroup that holds processes), so only write what is missing. */
    const char *sep = " +\n";
    if (list_has(cur, "memory", sep) && list_has(cur, "pids", sep) && list_has(cur, "cpu", sep))
        return 0;
    r = cg_write(dir, "cgroup.subtree_control", CG_CONTROLLERS);
    if (r < 0)
        return fb_error_set(err, FB_ERR_UNSUPPORTED, -r, "enable memory, pids and cpu in %s", dir);
    return 0;
}

static int make_dir(const char *dir, fb_error_t *err)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return fb_error_sys(err, "create cgroup %s", dir);
    return 0;
}

static int setup_parents(const struct fb_cgroup_host *h, fb_error_t *err)
{
    struct cg_dirs d;
    if (dirs_get(h, NULL, &d) < 0)
        return path_error(err, NULL);
    if (h->mode == FB_CGROUP_V2) {
        if (v2_enable(h->v2_root, err) < 0 || make_dir(d.path[0], err) < 0)
            return -1;
        return v2_enable(d.path[0], err);
    }
    for (size_t i = 0; i < d.n; i++)
        if (make_dir(d.path[i], err) < 0)
            return -1;
    /* Old v1 kernels default to flat accounting; the parent must be
     * hierarchical for its totals to include the sandboxes. */
    char mem[PATH_MAX];
    if (fb_snprintf(mem, sizeof mem, "%s/%s", h->v1_memory, parent_of(h)) < 0)
        return path_error(err, NULL);
    uint64_t hier = 1;
    if (cg_read_u64(mem, "memory.use_hierarchy", &hier) == 0 && hier == 0) {
        int r = cg_write(mem, "memory.use_hierarchy", "1");
        if (r < 0)
            fb_warn("cgroup: cannot enable memory.use_hierarchy in %s: %s", mem, strerror(-r));
    }
    return 0;
}

int fb_cgroup_host_detect(struct fb_cgroup_host *h, const char *mountinfo_path, fb_error_t *err)
{
    memset(h, 0, sizeof(*h));
    fb_strlcpy(h->parent, CG_PARENT, sizeof h->parent);
    const char *path = mountinfo_path != NULL ? mountinfo_path : "/proc/self/mountinfo";
    if (scan_mounts(h, path, err) < 0)
        return -1;
    if (h->v2_root[0] != '\0') {
        h->mode = FB_CGROUP_V2;
        h->v1_memory[0] = h->v1_pids[0] = h->v1_cpu[0] = h->v1_cpuacct[0] = h->v1_freezer[0] = '\0';
    } else if (h->v1_memory[0] != '\0' && h->v1_pids[0] != '\0' && h->v1_cpu[0] != '\0') {
        h->mode = FB_CGROUP_V1;
    } else {
        return fb_error_set(err, FB_ERR_UNSUPPORTED, 0,
                            "cgroups: no v2 hierarchy offers memory, pids and cpu, and v1 lacks%s%s%s",
                            h->v1_memory[0] ? "" : " memory", h->v1_pids[0] ? "" : " pids",
                            h->v1_cpu[0] ? "" : " cpu");
    }
    if (setup_parents(h, err) < 0)
        return fb_error_wrap(err, "cgroup v%d parent", h->mode == FB_CGROUP_V2 ? 2 : 1);
    return 0;
}

/* ---- sandbox cgroups ---- */

static int check_limits(const struct fb_cgroup_limits *l, fb_error_t *err)
{
    if (!isfinite(l->cpus) || l->cpus < 0 || l->cpus > CG_CPUS_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "cpus must be between 0 and %.0f", CG_CPUS_MAX);
    if (l->memory_bytes > (uint64_t)INT64_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "memory limit out of range");
    if (l->pids > CG_PIDS_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "pids must be at most %llu", CG_PIDS_MAX);
    return 0;
}

static long long cpu_quota_us(double cpus)
{
    /* rounded by hand: the runtime library does not link libm */
    long long q = (long long)(cpus * CG_CPU_PERIOD_US + 0.5);
    return q < CG_CPU_MIN_QUOTA_US ? CG_CPU_MIN_QUOTA_US : q;
}

static int put(const char *dir, const char *file, const char *val, bool optional, fb_error_t *err)
{
    int r = cg_write(dir, file, val);
    if (r == -ENOENT && optional)
        return 0;
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "write %s to %s/%s", val, dir, file);
    return 0;
}

/* Formats n into buf (32 bytes), or gives `none` for 0 (unlimited). */
static const char *num_or(char *buf, uint64_t n, const char *none)
{
    if (n == 0)
        return none;
    snprintf(buf, 32, "%" PRIu64, n);
    return buf;
}

static int write_limits(const struct fb_cgroup_host *h, const char *name, const struct fb_cgroup_limits *l,
                        fb_error_t *err)
{
    char mem[PATH_MAX], pids[PATH_MAX], cpu[PATH_MAX], mbuf[32], pbuf[32], quota[32], cpumax[64];
    if (dir_of(h, CG_MEM, name, mem) < 0 || dir_of(h, CG_PIDS, name, pids) < 0 ||
        dir_of(h, CG_CPU, name, cpu) < 0)
        return path_error(err, name);
    bool v2 = h->mode == FB_CGROUP_V2;
    bool mem_limited = l->memory_bytes != 0;
    if (l->cpus > 0)
        snprintf(quota, sizeof quota, "%lld", cpu_quota_us(l->cpus));
    else
        snprintf(quota, sizeof quota, "%s", v2 ? "max" : "-1");
    if (put(pids, "pids.max", num_or(pbuf, l->pids, "max"), false, err) < 0)
        return -1;
    if (v2) {
        snprintf(cpumax, sizeof cpumax, "%s %d", quota, CG_CPU_PERIOD_US);
        /* memory.swap.max is absent without swap accounting */
        if (put(mem, "memory.max", num_or(mbuf, l->memory_bytes, "max"), false, err) < 0 ||
            (mem_limited && put(mem, "memory.swap.max", "0", true, err) < 0))
            return -1;
        return put(cpu, "cpu.max", cpumax, false, err);
    }
    /* memsw must never be below the memory limit: lift it first, then set
     * both to the same value so the sandbox gets no swap on top. */
    const char *m = num_or(mbuf, l->memory_bytes, "-1");
    snprintf(cpumax, sizeof cpumax, "%d", CG_CPU_PERIOD_US);
    if (put(mem, "memory.memsw.limit_in_bytes", "-1", true, err) < 0 ||
        put(mem, "memory.limit_in_bytes", m, false, err) < 0 ||
        (mem_limited && put(mem, "memory.memsw.limit_in_bytes", m, true, err) < 0))
        return -1;
    if (put(cpu, "cpu.cfs_period_us", cpumax, false, err) < 0)
        return -1;
    return put(cpu, "cpu.cfs_quota_us", quota, false, err);
}

int fb_cgroup_create(const struct fb_cgroup_host *h, const char *name, const struct fb_cgroup_limits *l,
                     fb_error_t *err)
{
    if (check_name(name, err) < 0 || check_limits(l, err) < 0)
        return -1;
    struct cg_dirs d;
    if (dirs_get(h, name, &d) < 0)
        return path_error(err, name);
    /* An existing cgroup of the same name is reused: names are sandbox ids,
     * so it can only be a leftover of this very sandbox. */
    int r = 0;
    for (size_t i = 0; i < d.n && r == 0; i++)
        r = make_dir(d.path[i], err);
    if (r == 0)
        r = write_limits(h, name, l, err);
    if (r < 0) {
        (void)fb_cgroup_destroy(h, name, NULL);
        return fb_error_wrap(err, "cgroup %s", name);
    }
    return 0;
}

int fb_cgroup_add_pid(const struct fb_cgroup_host *h, const char *name, pid_t pid, fb_error_t *err)
{
    if (check_name(name, err) < 0)
        return -1;
    if (pid <= 0)
        return fb_error_set(err, FB_ERR_INTERNAL, EINVAL, "cgroup %s: bad pid %d", name, (int)pid);
    struct cg_dirs d;
    if (dirs_get(h, name, &d) < 0)
        return path_error(err, name);
    char v[32];
    snprintf(v, sizeof v, "%d", (int)pid);
    for (size_t i = 0; i < d.n; i++) {
        int r = cg_write(d.path[i], "cgroup.procs", v);
        if (r < 0)
            return fb_error_set(err, r == -ESRCH ? FB_ERR_NOT_FOUND : FB_ERR_INTERNAL, -r,
                                "move pid %d into %s", (int)pid, d.path[i]);
    }
    return 0;
}

int fb_cgroup_oom_kills(const struct fb_cgroup_host *h, const char *name, uint64_t *n, fb_error_t *err)
{
    *n = 0;
    char mem[PATH_MAX];
    if (check_name(name, err) < 0)
        return -1;
    if (dir_of(h, CG_MEM, name, mem) < 0)
        return path_error(err, name);
    int r = cg_read_key(mem, h->mode == FB_CGROUP_V2 ? "memory.events" : "memory.oom_control", "oom_kill", n);
    if (r < 0 && r != -ENOENT)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "cgroup %s oom count", name);
    return 0;
}

int fb_cgroup_usage_read(const struct fb_cgroup_host *h, const char *name, struct fb_cgroup_usage *u,
                         fb_error_t *err)
{
    memset(u, 0, sizeof(*u));
    if (check_name(name, err) < 0)
        return -1;
    char mem[PATH_MAX], pids[PATH_MAX], cpu[PATH_MAX];
    if (dir_of(h, CG_MEM, name, mem) < 0 || dir_of(h, CG_PIDS, name, pids) < 0 ||
        dir_of(h, CG_CPU, name, cpu) < 0)
        return path_error(err, name);
    bool v2 = h->mode == FB_CGROUP_V2;
    int r = cg_read_u64(mem, v2 ? "memory.current" : "memory.usage_in_bytes", &u->memory_bytes);
    if (r == 0)
        r = cg_read_u64(pids, "pids.current", &u->pids);
    if (r == 0 && v2) {
        r = cg_read_key(cpu, "cpu.stat", "usage_usec", &u->cpu_usec);
    } else if (r == 0 && dir_of(h, CG_CPUACCT, name, cpu) == 0) {
        uint64_t ns = 0;
        r = cg_read_u64(cpu, "cpuacct.usage", &ns);
        u->cpu_usec = ns / 1000;
    }
    if (r < 0)
        return fb_error_set(err, r == -ENOENT ? FB_ERR_NOT_FOUND : FB_ERR_INTERNAL, -r, "cgroup %s usage",
                            name);
    /* Kernels before 4.13 do not count OOM kills: report none. */
    r = cg_read_key(mem, v2 ? "memory.events" : "memory.oom_control", "oom_kill", &u->oom_kills);
    if (r < 0 && r != -ENOENT)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "cgroup %s oom count", name);
    return 0;
}

int fb_cgroup_exists(const struct fb_cgroup_host *h, const char *name)
{
    struct cg_dirs d;
    if (check_name(name, NULL) < 0 || dirs_get(h, name, &d) < 0)
        return 0;
    struct stat st;
    for (size_t i = 0; i < d.n; i++)
        if (stat(d.path[i], &st) == 0 && S_ISDIR(st.st_mode))
            return 1;
    return 0;
}

/* ---- freezer ---- */

bool fb_cgroup_can_freeze(const struct fb_cgroup_host *h)
{
    return h->mode == FB_CGROUP_V2 || h->v1_freezer[0] != '\0';
}

int fb_cgroup_freeze(const struct fb_cgroup_host *h, const char *name, bool frozen, fb_error_t *err)
{
    if (check_name(name, err) < 0)
        return -1;
    if (!fb_cgroup_can_freeze(h))
        return fb_error_set(err, FB_ERR_UNSUPPORTED, 0, "no cgroup freezer on this host");
    char dir[PATH_MAX];
    if (dir_of(h, h->mode == FB_CGROUP_V2 ? CG_MEM : CG_FREEZER, name, dir) < 0)
        return path_error(err, name);
    bool v2 = h->mode == FB_CGROUP_V2;
    int r = v2 ? cg_write(dir, "cgroup.freeze", frozen ? "1" : "0")
               : cg_write(dir, "freezer.state", frozen ? "FROZEN" : "THAWED");
    if (r < 0)
        return fb_error_set(err, r == -ENOENT ? FB_ERR_CONFLICT : FB_ERR_INTERNAL, -r, "%s the cgroup of %s",
                            frozen ? "freeze" : "thaw", name);
    /* freezing takes effect task by task: wait until every one is stopped
     * (a task in an uninterruptible sleep can hold it up a while) */
    for (int i = 0; i < 500; i++) {
        cleanup_free char *state = NULL;
        uint64_t v = 0;
        bool done = v2 ? cg_read_key(dir, "cgroup.events", "frozen", &v) == 0 && (v == 1) == frozen
                       : cg_read(dir, "freezer.state", CG_SMALL_FILE_MAX, &state) == 0 &&
                             strncmp(state, frozen ? "FROZEN" : "THAWED", frozen ? 6 : 6) == 0;
        if (done)
            return 0;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return fb_error_set(err, FB_ERR_UNAVAILABLE, ETIMEDOUT, "the cgroup of %s did not %s within 5 s", name,
                        frozen ? "freeze" : "thaw");
}

/* ---- destroy ---- */

/* SIGKILLs every pid listed in cgroup.procs; returns how many were listed
 * (our own pid is never signalled, but counts, so waiting for it fails). */
static int kill_listed(const char *dir)
{
    cleanup_free char *buf = NULL;
    int r = cg_read(dir, "cgroup.procs", CG_PROCS_FILE_MAX, &buf);
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return r;
    int n = 0;
    pid_t self = getpid();
    for (char *p = buf; *p != '\0';) {
        char *end = NULL;
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (pid > 0 && pid != self)
            kill((pid_t)pid, SIGKILL);
        n++;
        p = end;
        while (*p == '\n' || *p == ' ')
            p++;
    }
    return n;
}

static bool on_cgroupfs(const char *dir)
{
    struct statfs sf;
    if (statfs(dir, &sf) < 0)
        return true;
    return sf.f_type == CGROUP_SUPER_MAGIC || sf.f_type == CGROUP2_SUPER_MAGIC;
}

/* A directory that is not on cgroupfs is a plain copy of one (unit tests
 * build such trees): its interface files are ordinary files that rmdir
 * would trip over, and its cgroup.procs never drains. */
static int remove_plain(const char *dir, fb_error_t *err)
{
    (void)kill_listed(dir);
    cleanup_dir DIR *dh = opendir(dir);
    if (dh == NULL)
        return errno == ENOENT ? 0 : fb_error_sys(err, "open %s", dir);
    struct dirent *e;
    while ((e = readdir(dh)) != NULL) {
        struct stat st;
        if (fstatat(dirfd(dh), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            unlinkat(dirfd(dh), e->d_name, 0) < 0)
            return fb_error_sys(err, "remove %s/%s", dir, e->d_name);
    }
    if (rmdir(dir) < 0 && errno != ENOENT)
        return fb_error_sys(err, "remove %s", dir);
    return 0;
}

static int remove_one(const char *dir, bool v2, int64_t deadline, fb_error_t *err)
{
    struct stat st;
    if (lstat(dir, &st) < 0)
        return errno == ENOENT ? 0 : fb_error_sys(err, "stat %s", dir);
    if (!on_cgroupfs(dir))
        return remove_plain(dir, err);
    /* cgroup.kill (5.14+) kills atomically, racing neither forks nor pid
     * reuse; the listing loop below is the fallback and the confirmation. */
    if (v2)
        (void)cg_write(dir, "cgroup.kill", "1");
    for (;;) {
        int n = kill_listed(dir);
        if (n < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, -n, "read %s/cgroup.procs", dir);
        /* Exiting tasks keep the cgroup busy for a moment after they leave
         * cgroup.procs, so EBUSY is retried like a non-empty list. */
        if (n == 0) {
            if (rmdir(dir) == 0 || errno == ENOENT)
                return 0;
            if (errno != EBUSY)
                return fb_error_sys(err, "remove %s", dir);
        }
        if (fb_mono_ms() >= deadline)
            return fb_error_set(err, FB_ERR_INTERNAL, EBUSY, "cgroup %s not empty after %d ms", dir,
                                CG_DESTROY_WAIT_MS);
        struct timespec ts = {0, CG_POLL_NS};
        nanosleep(&ts, NULL);
    }
}

int fb_cgroup_destroy(const struct fb_cgroup_host *h, const char *name, fb_error_t *err)
{
    if (check_name(name, err) < 0)
        return -1;
    struct cg_dirs d;
    if (dirs_get(h, name, &d) < 0)
        return path_error(err, name);
    int64_t deadline = fb_mono_ms() + CG_DESTROY_WAIT_MS;
    int rc = 0;
    /* Keep going after a failure so one stuck hierarchy does not leave the
     * others behind; the first error is the one reported. */
    for (size_t i = 0; i < d.n; i++)
        if (remove_one(d.path[i], h->mode == FB_CGROUP_V2, deadline, err) < 0)
            rc = -1;
    return rc;
}

int fb_cgroup_freezer_dir(const struct fb_cgroup_host *h, const char *name, char *out, fb_error_t *err)
{
    if (check_name(name, err) < 0)
        return -1;
    if (!fb_cgroup_can_freeze(h))
        return fb_error_set(err, FB_ERR_UNSUPPORTED, 0, "no cgroup freezer on this host");
    if (dir_of(h, h->mode == FB_CGROUP_V2 ? CG_MEM : CG_FREEZER, name, out) < 0)
        return path_error(err, name);
    return 0;
}

int fb_cgroup_procs_read(const struct fb_cgroup_host *h, const char *name, pid_t **pids, size_t *n,
                         fb_error_t *err)
{
    *pids = NULL;
    *n = 0;
    char dir[PATH_MAX];
    if (check_name(name, err) < 0)
        return -1;
    if (dir_of(h, CG_PIDS, name, dir) < 0)
        return path_error(err, name);
    cleanup_free char *text = NULL;
    int r = cg_read(dir, "cgroup.procs", CG_PROCS_FILE_MAX, &text);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "read the processes of cgroup %s", name);
    size_t cap = 0;
    cleanup_free pid_t *v = NULL;
    for (char *p = text; *p;) {
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (*n == cap) {
            cap = cap ? cap * 2 : 64;
            pid_t *nv = realloc(v, cap * sizeof *nv);
            if (nv == NULL)
                return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
            v = nv;
        }
        v[(*n)++] = (pid_t)pid;
        p = end;
        while (*p == '\n')
            p++;
    }
    *pids = fb_steal_ptr(v);
    return 0;
}
