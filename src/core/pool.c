/* The warm pool: sandboxes of the default template, started ahead of time
 * so that a create only has to hand one over (rewrite its limits, labels
 * and owner) instead of building namespaces, mounts and cgroups while the
 * client waits.  Warm sandboxes are ordinary stored sandboxes owned by the
 * internal tenant FB_POOL_TENANT, so a restart re-adopts them like any
 * other; a background thread keeps the pool at its target size. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../common/wire.h"
#include "../runtime/container.h"
#include "core.h"
#include "exec.h"
#include "internal.h"

#define POOL_TEMPLATE "default"
#define POOL_RETRY_MS 1000
#define POOL_NICE 19

static void row_clearp(struct fb_sandbox_row *r)
{
    fb_sandbox_row_clear(r);
}
#define cleanup_row __attribute__((cleanup(row_clearp)))

/* A fresh overlay has cold lookup caches: one throwaway command (the
 * shell and the dynamic loader, as most commands use them) makes the
 * client's first command as fast as its later ones. */
static void warm_up(struct fb_core *core, const char *id)
{
    static char *const argv[] = {"/bin/sh", "-c", "true", NULL};
    struct fb_exec_spec spec = {.argv = (char **)argv, .argc = 3, .timeout_ms = 5000, .max_output = 4096};
    cleanup_error fb_error_t err = NULL;
    cleanup_close int fd = fb_exec_start(core, FB_POOL_TENANT, id, &spec, &err);
    if (fd < 0)
        return;
    for (;;) {
        struct fb_frame f;
        if (fb_wire_recv(fd, &f) < 0)
            return;
        uint16_t type = f.type;
        free(f.data);
        if (type == FB_MSG_RESULT)
            return;
    }
}

/* Starts one warm sandbox; returns 0 and its id, or -1. */
static int fill_one(struct fb_core *core, char *id_out)
{
    cleanup_error fb_error_t err = NULL;
    char rootfs[PATH_MAX];
    if (fb_template_rootfs(core, POOL_TEMPLATE, rootfs, sizeof rootfs, &err) < 0)
        return -1; /* not built yet, or deleted: try again later */
    cleanup_spec struct fb_create_spec spec = {0};
    if (fb_create_spec_parse(NULL, &spec, &err) < 0)
        return -1;
    cleanup_row struct fb_sandbox_row row = {0};
    if (fb_core_new_row(FB_POOL_TENANT, &spec, &row, &err) < 0 ||
        fb_core_reserve_row(core, &row, true, &err) < 0 ||
        fb_core_start_row(core, &row, rootfs, &spec, &err) < 0) {
        fb_warn("warm pool: %s", err->msg);
        return -1;
    }
    fb_strlcpy(id_out, row.id, FB_ID_MAX);
    warm_up(core, row.id);

    return 0;
}

static void *filler_main(void *arg)
{
    struct fb_core *core = arg;
    /* Refilling is background work: at the lowest priority it cannot slow
     * the command a client runs in the sandbox it just took.  The warm
     * sandboxes inherit the niceness; a claim gives it back (see below). */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), POOL_NICE) < 0)
        fb_debug("warm pool: cannot lower the filler's priority: %s", strerror(errno));
    pthread_mutex_lock(&core->lock);
    while (!core->stopping) {
        if (core->pool_ready >= core->cfg.warm_pool) {
            pthread_cond_wait(&core->pool_cond, &core->lock);
            continue;
        }
        pthread_mutex_unlock(&core->lock);
        char id[FB_ID_MAX];
        int r = fill_one(core, id);
        char rootfs[PATH_MAX];
        cleanup_error fb_error_t terr = NULL;
        if (r == 0 && fb_template_rootfs(core, POOL_TEMPLATE, rootfs, sizeof rootfs, &terr) < 0) {
            /* the template was deleted while this one started */
            fb_sandbox_delete(core, FB_POOL_TENANT, id, NULL);
            r = 1;
        }
        pthread_mutex_lock(&core->lock);
        if (r == 1) {
            /* dropped above */
        } else if (r == 0 && core->pool_ready < core->cfg.warm_pool) {
            fb_strlcpy(core->pool_ids[core->pool_ready++], id, FB_ID_MAX);
        } else if (r == 0) {
            pthread_mutex_unlock(&core->lock);
            fb_sandbox_delete(core, FB_POOL_TENANT, id, NULL);
            pthread_mutex_lock(&core->lock);
        } else if (!core->stopping) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += POOL_RETRY_MS / 1000;
            pthread_cond_timedwait(&core->pool_cond, &core->lock, &ts);
        }
    }
    pthread_mutex_unlock(&core->lock);
    return NULL;
}

int fb_pool_start(struct fb_core *core, fb_error_t *err)
{
    core->pool_ids = calloc(core->cfg.warm_pool + 1, sizeof *core->pool_ids);
    if (core->pool_ids == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "warm pool");
    if (core->cfg.warm_pool == 0)
        return 0;
    if (pthread_create(&core->pool_filler, NULL, filler_main, core) != 0)
        return fb_error_sys(err, "start warm pool");
    core->pool_started = true;
    return 0;
}

void fb_pool_stop(struct fb_core *core)
{
    fb_core_signal_stop(core);
    if (core->pool_started)
        pthread_join(core->pool_filler, NULL);
    core->pool_started = false;
    /* Users' sandboxes outlive the daemon; warm ones are the daemon's own
     * and cheap to rebuild, so a clean stop takes them down (after a crash
     * the next start re-adopts them instead). */
    fb_pool_drain(core);
    free(core->pool_ids);
    core->pool_ids = NULL;
}

void fb_pool_adopt(struct fb_core *core, const char *id)
{
    pthread_mutex_lock(&core->lock);
    bool keep = core->pool_ids != NULL && core->pool_ready < core->cfg.warm_pool;
    if (keep)
        fb_strlcpy(core->pool_ids[core->pool_ready++], id, FB_ID_MAX);
    pthread_mutex_unlock(&core->lock);
    if (!keep)
        fb_sandbox_delete(core, FB_POOL_TENANT, id, NULL);
}

void fb_pool_drain(struct fb_core *core)
{
    for (;;) {
        char id[FB_ID_MAX];
        pthread_mutex_lock(&core->lock);
        if (core->pool_ready == 0) {
            pthread_mutex_unlock(&core->lock);
            return;
        }
        fb_strlcpy(id, core->pool_ids[--core->pool_ready], sizeof id);
        pthread_mutex_unlock(&core->lock);
        fb_sandbox_delete(core, FB_POOL_TENANT, id, NULL);
    }
}

int fb_pool_claim(struct fb_core *core, const struct fb_create_spec *spec, struct fb_sandbox_row *row)
{
    /* a warm sandbox's disk was made at the default size */
    bool networked = strcmp(spec->network_mode, "none") != 0;
    /* volumes are mounted before init runs: a warm sandbox has none */
    if (strcmp(spec->template_name, POOL_TEMPLATE) != 0 || spec->res.disk_mb != FB_SPEC_DEFAULT_DISK_MB ||
        spec->n_volumes > 0 || (networked && !core->net_ready))
        return -1;
    char id[FB_ID_MAX];
    pthread_mutex_lock(&core->lock);
    if (core->pool_ready == 0) {
        pthread_mutex_unlock(&core->lock);
        return -1;
    }
    fb_strlcpy(id, core->pool_ids[--core->pool_ready], sizeof id);
    pthread_cond_signal(&core->pool_cond);
    pthread_mutex_unlock(&core->lock);

    cleanup_error fb_error_t err = NULL;
    cleanup_row struct fb_sandbox_row warm = {0};
    if (fb_store_sandbox_get(core->store, FB_POOL_TENANT, id, &warm, &err) < 0)
        return -1;
    struct fb_core_paths paths;
    struct fb_container_config cc;
    fb_core_container_config(core, &warm, "", &paths, &cc);
    struct fb_cgroup_limits limits = {
        .cpus = spec->res.cpus,
        .memory_bytes = spec->res.memory_mb << 20,
        .pids = spec->res.pids,
    };
    /* the limits, the workdir and the owner are all that differ from a
     * sandbox started for this request */
    if (fb_cgroup_create(&core->cgroups, warm.id, &limits, &err) < 0 ||
        (strcmp(spec->workdir, "/root") != 0 &&
         fb_core_make_workdir(paths.sock_path, spec->workdir, &err) < 0)) {
        fb_warn("warm pool: sandbox %s unusable (%s), discarding it", warm.id, err->msg);
        fb_sandbox_delete(core, FB_POOL_TENANT, warm.id, NULL);
        return -1;
    }
    /* the sandbox was started by the low-priority filler: its init (and
     * so everything it will start) runs at normal priority from now on */
    if (setpriority(PRIO_PROCESS, (id_t)warm.init_pid, 0) < 0)
        fb_warn("warm pool: renice sandbox %s: %s", warm.id, strerror(errno));
    fb_strlcpy(warm.tenant, row->tenant, sizeof warm.tenant);
    warm.created_ms = row->created_ms;
    warm.expires_ms = row->expires_ms;
    free(warm.spec_json);
    warm.spec_json = row->spec_json; /* borrowed: row keeps it either way */
    int r = fb_store_sandbox_update(core->store, &warm, &err);
    warm.spec_json = NULL;
    if (r < 0) {
        fb_sandbox_delete(core, FB_POOL_TENANT, warm.id, NULL);
        return -1;
    }
    /* row already says what the client asked for; it takes the warm
     * sandbox's identity */
    struct fb_sandbox_row fresh = *row;
    fb_strlcpy(row->id, warm.id, sizeof row->id);
    fb_strlcpy(row->state, warm.state, sizeof row->state);
    row->init_pid = warm.init_pid;
    row->uid_base = warm.uid_base;
    if (networked && fb_net_attach(core, row, (pid_t)row->init_pid, spec->network_mode, &err) < 0) {
        /* the cold path tries again and reports its own error */
        fb_warn("warm pool: sandbox %s: %s; discarding it", row->id, err->msg);
        fb_sandbox_delete(core, row->tenant, row->id, NULL);
        /* the row goes back to the cold path as it came */
        fb_strlcpy(row->id, fresh.id, sizeof row->id);
        fb_strlcpy(row->state, fresh.state, sizeof row->state);
        row->init_pid = fresh.init_pid;
        row->uid_base = fresh.uid_base;
        return -1;
    }
    return 0;
}
