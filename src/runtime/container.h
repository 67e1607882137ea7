/* Starting and stopping one sandbox's kernel objects: namespaces, the
 * overlay root (an idmapped, read-only template under a private writable
 * layer), cgroups, capabilities, seccomp, and forkbox-init as PID 1.
 *
 * Nothing started here depends on the daemon afterwards: the host keeps
 * only the writable layer's own filesystem mounted (at sandbox_dir/layer,
 * for usage and later copies); the root's mounts live in the sandbox's
 * mount namespace alone, and init's
 * control socket is a path under the run directory that any later daemon
 * can connect to. */
#ifndef FB_RUNTIME_CONTAINER_H
#define FB_RUNTIME_CONTAINER_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/error.h"
#include "cgroup.h"
#include "seccomp.h"

#define FB_UID_COUNT 65536
/* RLIMIT_NOFILE (soft = hard) of every sandbox process, or the daemon's own
 * hard limit when that is lower and cannot be raised */
#define FB_SANDBOX_NOFILE 65536

/* A volume bound into the sandbox: an idmapped clone of source (the
 * volume's host mount) keyed on the sandbox's user namespace, so owners
 * 0..65535 on the volume are 0..65535 inside. */
struct fb_container_volume {
    const char *source; /* host dir where the volume's filesystem is mounted */
    const char *target; /* absolute path inside the sandbox (made if missing) */
    bool read_only;
};

struct fb_container_config {
    const char *id;              /* sandbox id; names the cgroup and dirs */
    const char *template_rootfs; /* host path of the template's root filesystem */
    const char *sandbox_dir;     /* host dir for the writable layer (created) */
    const char *run_dir;         /* host dir for the control socket (created) */
    uid_t uid_base;              /* host uid/gid of root inside; FB_UID_COUNT ids mapped */
    uint64_t disk_bytes;         /* size of the layer's own filesystem; 0: a plain dir */
    const char *hostname;
    int init_fd; /* sealed memfd holding forkbox-init */
    const struct fb_seccomp_prog *seccomp;
    const struct fb_cgroup_host *cgroups;
    const struct fb_cgroup_limits *limits;
    /* the writable layer is already there (a restored checkpoint): the
     * image sandbox_dir/layer.img is mounted, or the dir sandbox_dir/layer
     * used, rather than a new one made; owners from layer_uid_from's range
     * move to uid_base's (0: none) */
    bool reuse_layer;
    uid_t layer_uid_from;
    /* with reuse_layer: keep the records of background processes (a memory
     * restore brings their keepers back) */
    bool keep_records;
    /* mounted in order under the root before init runs (none for a memory
     * restore: CRIU is not told about them) */
    const struct fb_container_volume *volumes;
    size_t n_volumes;
};

struct fb_container {
    pid_t init_pid;      /* host pid of forkbox-init */
    char sock_path[108]; /* its control socket */
};

/* Creates the sandbox and returns once init is executing.  On failure
 * everything created so far is torn down again.  *out is caller-owned. */
int fb_container_start(const struct fb_container_config *c, struct fb_container *out, fb_error_t *err);

/* Kills every process of the sandbox whose init is init_pid and returns once
 * they are gone (bounded wait).  Only a pid still running forkbox-init is
 * signalled. */
void fb_container_kill(pid_t init_pid);

/* Sends SIGKILL to the sandbox whose init is init_pid and returns at once;
 * fb_container_kill() (or destroy) later waits for it and reaps it. */
void fb_container_signal(pid_t init_pid);

/* Kills every process of the sandbox, removes its cgroups, writable layer
 * and run directory.  Idempotent: parts already gone are skipped. */
int fb_container_destroy(const struct fb_container_config *c, pid_t init_pid, fb_error_t *err);

/* Loads the init binary at path into a sealed, executable memfd, so that
 * nothing inside a sandbox can modify the binary every sandbox runs.
 * Returns the fd (owned by the caller) or -1 with *err set. */
int fb_container_load_init(const char *path, fb_error_t *err);

/* Whether pid is alive and still a forkbox-init started for this sandbox
 * (checked through its control socket path). */
int fb_container_alive(pid_t pid);

#endif
