/* The security posture of this host as /v1/info reports it: which
 * mitigations are in force for every sandbox, which the host cannot give,
 * and host settings an operator may want to harden.  Everything here is
 * probed on the running kernel, not assumed from the build. */
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../common/util.h"
#include "../runtime/container.h"
#include "../runtime/seccomp.h"
#include "core.h"
#include "internal.h"

/* mount_setattr with MOUNT_ATTR_IDMAP is what keeps templates shared; a
 * kernel without it answers ENOSYS before looking at the fd. */
static bool have_idmapped_mounts(void)
{
    struct mount_attr attr = {0};
    long r = syscall(SYS_mount_setattr, -1, "", AT_EMPTY_PATH, &attr, sizeof attr);
    return !(r < 0 && errno == ENOSYS);
}

static bool have_time_namespace(void)
{
    return access("/proc/self/ns/time", F_OK) == 0;
}

static size_t count_names(const char *const *names)
{
    size_t n = 0;
    while (names[n] != NULL)
        n++;
    return n;
}

static void add(json_t *list, const char *name, bool active, const char *detail)
{
    json_array_append_new(list,
                          json_pack("{s:s, s:b, s:s}", "name", name, "active", active, "detail", detail));
}

static json_t *mitigations(struct fb_core *core)
{
    json_t *m = json_array();
    char buf[256];
    add(m, "user_namespace", true,
        "root inside is an unprivileged host uid: each sandbox gets its own 65536-id range from the pool");
    add(m, "namespaces", true, "pid, mount, net (loopback only), uts, ipc and cgroup namespaces per sandbox");
    add(m, "idmapped_template", have_idmapped_mounts(),
        "templates are shared read-only and appear root-owned through an idmapped mount; no copy or chown");
    add(m, "no_new_privs", true, "setuid files and file capabilities grant nothing");
    add(m, "capabilities", true,
        "bounding set of 12 (Docker's default less NET_RAW and MKNOD), valid only in the sandbox's "
        "namespace");
    snprintf(
        buf, sizeof buf,
        "allowlist of %zu syscalls; %zu dangerous ones fail with EPERM, everything unlisted with ENOSYS; "
        "x86_64, i386 and x32 ABIs",
        count_names(fb_seccomp_allowed_names()), count_names(fb_seccomp_denied_names()));
    add(m, "seccomp", true, buf);
    add(m, "proc_sys_masks", true,
        "kcore, kallsyms, keys, kmsg, timer_list, sched_debug, sysrq-trigger, acpi, scsi, /sys/firmware and "
        "others masked; /proc/sys, /proc/bus, /proc/fs, /proc/irq and /sys read-only");
    add(m, "minimal_dev", true,
        "null, zero, full, random, urandom, tty, pts/ptmx and shm only; /dev is nodev");
    add(m, "init_sealed_memfd", true,
        "PID 1 runs from a sealed memfd and is not dumpable: it cannot be rewritten or traced from inside");
    add(m, "init_channel_outside", true,
        "init's control socket is a host path outside the sandbox's root; the daemon connects to it");
    bool cg_ok = core->cgroups.mode == FB_CGROUP_V2 ||
                 (core->cgroups.v1_memory[0] && core->cgroups.v1_pids[0] && core->cgroups.v1_cpu[0]);
    add(m, "cgroup_limits", cg_ok, "memory (swap included), pids and cpu limits per sandbox");
    if (core->disk_limits)
        add(m, "disk_limits", true,
            "each writable layer is an ext4 filesystem of disk_mb on a loop device: ENOSPC inside, inodes "
            "bounded, the host's disk grows by at most disk_mb");
    else {
        snprintf(buf, sizeof buf, "not enforced: %s", core->disk_missing);
        add(m, "disk_limits", false, buf);
    }
    struct rlimit own;
    long long nofile = FB_SANDBOX_NOFILE;
    if (getrlimit(RLIMIT_NOFILE, &own) == 0 && own.rlim_max < (rlim_t)nofile)
        nofile = (long long)own.rlim_max;
    snprintf(buf, sizeof buf,
             "RLIMIT_NOFILE %lld, RLIMIT_CORE 0 (no core dumps reach the host's core_pattern)", nofile);
    add(m, "rlimits", true, buf);
    return m;
}

/* Host features whose absence weakens or limits what forkbox can do. */
static json_t *missing(struct fb_core *core)
{
    json_t *m = json_array();
    if (core->kvm_missing != NULL)
        json_array_append_new(m, json_string(core->kvm_missing));
    if (core->cgroups.mode == FB_CGROUP_V1)
        json_array_append_new(
            m,
            json_string("cgroup v2 controllers (running on the v1 layout): no I/O limits, no memory.high"));
    if (!have_idmapped_mounts())
        json_array_append_new(m, json_string("idmapped mounts (kernel < 5.12): sandboxes cannot start"));
    if (!core->disk_limits)
        json_array_append_new(m, json_string(core->disk_missing));
    if (!have_time_namespace())
        json_array_append_new(m, json_string("time namespaces (clock changes are denied instead)"));
    char criu[1024];
    if (fb_core_criu_missing(core, criu, sizeof criu))
        json_array_append_new(m, json_string(criu));
    json_array_append_new(m, json_string("checkpoint/restore (not implemented yet)"));
    return m;
}

/* Reads a small integer sysctl; -1 if absent. */
static long read_sysctl(const char *path)
{
    char *text = NULL;
    size_t len = 0;
    if (fb_read_file(path, 64, &text, &len) < 0)
        return -1;
    long v = strtol(text, NULL, 10);
    free(text);
    return v;
}

/* Host-wide settings that matter if a kernel bug is reached anyway.  Not
 * forkbox's to change; reported so an operator can. */
static json_t *host_settings(void)
{
    static const struct {
        const char *path;
        long want; /* at least */
        const char *why;
    } checks[] = {
        {"/proc/sys/kernel/unprivileged_bpf_disabled", 1, "unprivileged eBPF off"},
        {"/proc/sys/kernel/kptr_restrict", 1, "kernel pointers hidden"},
        {"/proc/sys/kernel/dmesg_restrict", 1, "kernel log restricted"},
        {"/proc/sys/kernel/perf_event_paranoid", 2, "perf restricted"},
        {"/proc/sys/kernel/yama/ptrace_scope", 1, "ptrace restricted to descendants"},
    };
    json_t *out = json_array();
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        long v = read_sysctl(checks[i].path);
        if (v < 0)
            continue;
        json_array_append_new(out,
                              json_pack("{s:s, s:I, s:I, s:b, s:s}", "sysctl", checks[i].path + 10, "value",
                                        (json_int_t)v, "recommended", (json_int_t)checks[i].want, "ok",
                                        v >= checks[i].want, "why", checks[i].why));
    }
    /* 0 means TIOCSTI is gone for everyone (seccomp denies it anyway) */
    long tiocsti = read_sysctl("/proc/sys/dev/tty/legacy_tiocsti");
    if (tiocsti >= 0)
        json_array_append_new(out, json_pack("{s:s, s:I, s:I, s:b, s:s}", "sysctl", "dev/tty/legacy_tiocsti",
                                             "value", (json_int_t)tiocsti, "recommended", (json_int_t)0, "ok",
                                             tiocsti == 0, "why", "terminal injection off host-wide"));
    return out;
}

json_t *fb_core_posture(struct fb_core *core)
{
    return json_pack("{s:o, s:o, s:o}", "mitigations", mitigations(core), "missing", missing(core),
                     "host_settings", host_settings());
}
