/* Per-sandbox cgroups on pure cgroup v2 hosts and on the v1 (+ hybrid
 * unified) layout.  Every sandbox gets one cgroup named after its id, under
 * a "forkbox" parent, in each controller forkbox uses (memory, pids, cpu).
 */
#ifndef FB_RUNTIME_CGROUP_H
#define FB_RUNTIME_CGROUP_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/error.h"

enum fb_cgroup_mode {
    FB_CGROUP_V1 = 1, /* v1 controllers (a v2 "unified" mount may exist beside them) */
    FB_CGROUP_V2 = 2, /* one v2 hierarchy with memory, pids and cpu enabled */
};

struct fb_cgroup_host {
    enum fb_cgroup_mode mode;
    char v2_root[PATH_MAX];   /* v2: mount point of the unified hierarchy */
    char v1_memory[PATH_MAX]; /* v1: mount points of each controller */
    char v1_pids[PATH_MAX];
    char v1_cpu[PATH_MAX];
    char v1_cpuacct[PATH_MAX]; /* v1: CPU time lives here; "" if not mounted, may equal v1_cpu */
    char v1_freezer[PATH_MAX]; /* v1: pause and resume; "" if not mounted */
    char parent[64];           /* name of forkbox's parent cgroup, "forkbox" */
};

struct fb_cgroup_limits {
    double cpus;           /* 0: unlimited; else quota = cpus * period */
    uint64_t memory_bytes; /* 0: unlimited; swap is limited to the same (no extra swap) */
    uint64_t pids;         /* 0: unlimited */
};

struct fb_cgroup_usage {
    uint64_t memory_bytes;
    uint64_t cpu_usec;
    uint64_t pids;
    uint64_t oom_kills; /* OOM kills seen in this cgroup so far */
};

/* Reads mountinfo (NULL: /proc/self/mountinfo) and fills *h.  Prefers v2
 * when a v2 hierarchy has memory+pids+cpu available, else v1 when all three
 * v1 controllers are mounted.  FB_ERR_UNSUPPORTED with the reason otherwise.
 * Also creates the parent cgroup(s). */
int fb_cgroup_host_detect(struct fb_cgroup_host *h, const char *mountinfo_path, fb_error_t *err);

/* Moving a task between cgroups takes a global lock whose writer waits for
 * an RCU grace period (~10 ms) unless a cgroup2 hierarchy is mounted with
 * "favordynmods", which keeps that lock in its slow-reader mode for good:
 * the right trade for a host that starts sandboxes all the time.  Remounts
 * the first cgroup2 mount with it if needed; *changed says whether it did.
 * FB_ERR_UNSUPPORTED when there is no cgroup2 mount or the kernel refuses. */
int fb_cgroup_favor_dynmods(const char *mountinfo_path, bool *changed, fb_error_t *err);

/* Creates the sandbox's cgroup(s) named `name` and writes the limits. */
int fb_cgroup_create(const struct fb_cgroup_host *h, const char *name, const struct fb_cgroup_limits *l,
                     fb_error_t *err);

/* Moves pid into the sandbox's cgroup(s). */
int fb_cgroup_add_pid(const struct fb_cgroup_host *h, const char *name, pid_t pid, fb_error_t *err);

/* Kills every process still in the cgroup(s) (SIGKILL, waits until empty,
 * bounded) and removes them.  Absent cgroups are not an error.  A cgroup
 * directory that is not on cgroupfs (a test tree) gets its listed pids
 * killed once and its regular files removed before rmdir, without waiting. */
int fb_cgroup_destroy(const struct fb_cgroup_host *h, const char *name, fb_error_t *err);

/* Current usage counters. */
int fb_cgroup_usage_read(const struct fb_cgroup_host *h, const char *name, struct fb_cgroup_usage *u,
                         fb_error_t *err);

/* OOM kills counted so far in the sandbox's memory cgroup (one file read:
 * cheap enough to sample around every command).  0 when the kernel does
 * not count them. */
int fb_cgroup_oom_kills(const struct fb_cgroup_host *h, const char *name, uint64_t *n, fb_error_t *err);

/* Whether the cgroup exists (in any controller). */
int fb_cgroup_exists(const struct fb_cgroup_host *h, const char *name);

/* Whether sandboxes can be paused here (v2, or a v1 freezer hierarchy). */
bool fb_cgroup_can_freeze(const struct fb_cgroup_host *h);

/* Freezes (or thaws) every task of cgroup name and waits until it is done.
 * unsupported without a freezer; conflict when the cgroup is gone. */
int fb_cgroup_freeze(const struct fb_cgroup_host *h, const char *name, bool frozen, fb_error_t *err);

/* The directory whose freezer state CRIU's --freeze-cgroup takes (v1
 * freezer, or the v2 cgroup); `out` has PATH_MAX bytes. */
int fb_cgroup_freezer_dir(const struct fb_cgroup_host *h, const char *name, char *out, fb_error_t *err);

/* The pids of every process in the cgroup `name`; *pids is the caller's to free. */
int fb_cgroup_procs_read(const struct fb_cgroup_host *h, const char *name, pid_t **pids, size_t *n,
                         fb_error_t *err);

#endif
