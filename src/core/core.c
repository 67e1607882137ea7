/* Core start-up and shutdown, API keys and host information. */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../runtime/container.h"
#include "../runtime/disk.h"
#include "core.h"
#include "files.h"
#include "build.h"
#include "internal.h"
#include "layers.h"

#define DEFAULT_TENANT "default"

/* Whether hardware virtualisation can really be used: /dev/kvm can exist
 * on a host whose CPU does not expose it (a nested VM), so a VM is created. */
static const char *kvm_missing_reason(void)
{
    int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return "no /dev/kvm: hardware-virtualised tiers cannot run";
    int vm = ioctl(fd, KVM_CREATE_VM, 0);
    close(fd);
    if (vm < 0)
        return "/dev/kvm exists but cannot create a VM: hardware-virtualised tiers cannot run";
    close(vm);
    return NULL;
}

/* Compares the kernel's boot id with the one recorded at the last start, so
 * that sandboxes found dead can be said to have died with the host. */
static void note_boot(struct fb_core *core)
{
    char path[PATH_MAX];
    cleanup_free char *now = NULL, *before = NULL;
    size_t nlen = 0, blen = 0;
    if (fb_snprintf(path, sizeof path, "%s/boot_id", core->cfg.state_dir) < 0 ||
        fb_read_file("/proc/sys/kernel/random/boot_id", 64, &now, &nlen) < 0)
        return;
    if (fb_read_file(path, 64, &before, &blen) == 0)
        core->host_rebooted = blen != nlen || memcmp(before, now, nlen) != 0;
    if (fb_write_file(path, now, nlen, 0600) < 0)
        fb_warn("cannot record the boot id in %s", path);
}

int fb_core_open(struct fb_core *core, const struct fb_core_config *cfg, fb_error_t *err)
{
    memset(core, 0, sizeof *core);
    core->cfg = *cfg;
    core->init_fd = -1;
    core->lock_fd = -1;
    pthread_mutex_init(&core->lock, NULL);
    pthread_mutex_init(&core->pause_lock, NULL);
    pthread_mutex_init(&core->volume_lock, NULL);
    pthread_mutex_init(&core->net_lock, NULL);
    pthread_mutex_init(&core->net_change, NULL);
    pthread_rwlock_init(&core->layers_lock, NULL);
    fb_listeners_init(&core->dns.l);
    fb_listeners_init(&core->egress);
    pthread_cond_init(&core->pool_cond, NULL);
    pthread_cond_init(&core->reaper_cond, NULL);
    /* sandbox paths are built from these; socket paths must fit sun_path */
    if (strlen(cfg->state_dir) > 2048 || strlen(cfg->run_dir) > 40)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, ENAMETOOLONG,
                            "state dir (max 2048 bytes) or run dir (max 40 bytes) path too long");
    char path[PATH_MAX];
    static const char *const state_subdirs[] = {"", "/sandboxes", "/templates", "/tmp"};
    for (size_t i = 0; i < sizeof state_subdirs / sizeof state_subdirs[0]; i++) {
        if (fb_snprintf(path, sizeof path, "%s%s", cfg->state_dir, state_subdirs[i]) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "state dir path");
        int r = fb_mkdir_p(path, 0711);
        if (r < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, -r, "create %s", path);
    }
    /* sandboxes' roots sit below these dirs: their (unprivileged) owners
     * must be able to traverse, never to list */
    if (fb_snprintf(path, sizeof path, "%s/sandboxes", cfg->run_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "run dir path");
    int r = fb_mkdir_p(path, 0711);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "create %s", path);
    chmod(cfg->run_dir, 0711);

    /* one daemon per state dir: two would build the same template into the
     * same place and hand out the same uid ranges */
    if (fb_snprintf(path, sizeof path, "%s/lock", cfg->state_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "lock path");
    core->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (core->lock_fd < 0)
        return fb_error_sys(err, "open %s", path);
    /* a daemon killed a moment ago may still have a child between clone
     * and closing its inherited fds (it dies with its parent, within
     * milliseconds): wait a little before calling the dir taken */
    int locked = -1;
    for (int i = 0; i < 30 && (locked = flock(core->lock_fd, LOCK_EX | LOCK_NB)) < 0 && errno == EWOULDBLOCK;
         i++) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (locked < 0)
        return fb_error_set(err, FB_ERR_CONFLICT, errno, "another forkboxd uses the state dir %s",
                            cfg->state_dir);

    /* before anything looks into sandboxes/ or checkpoints/: the pool may
     * have to be mounted over them */
    if (fb_storage_open(cfg->state_dir, cfg->storage_plain, cfg->storage_bytes, &core->storage, err) < 0)
        return -1;
    if (core->storage.why[0])
        fb_warn("storage: %s", core->storage.why);
    else
        fb_info("storage: %s at %s, copies are reflinks", fb_storage_kind_name(core->storage.kind),
                core->storage.path);

    if (fb_snprintf(path, sizeof path, "%s/forkbox.db", cfg->state_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "db path");
    if (fb_store_open(path, &core->store, err) < 0)
        return -1;
    if (fb_share_key_load(core, err) < 0)
        return -1;
    if (fb_cgroup_host_detect(&core->cgroups, NULL, err) < 0)
        return -1;
    core->kvm_missing = kvm_missing_reason();
    if (cfg->host_tuning) {
        bool changed = false;
        cleanup_error fb_error_t terr = NULL;
        if (fb_cgroup_favor_dynmods(NULL, &changed, &terr) < 0)
            fb_warn("host tuning: %s (sandbox starts will be ~10 ms slower)", terr->msg);
        else if (changed)
            fb_info("host tuning: cgroup2 remounted with favordynmods (faster cgroup moves)");
        core->favordynmods = terr == NULL;
    }
    core->disk_limits = fb_disk_supported(core->disk_missing, sizeof core->disk_missing);
    if (!core->disk_limits)
        fb_warn("disk limits unavailable: %s; writable layers share the state dir's filesystem",
                core->disk_missing);
    if (fb_seccomp_build(&core->seccomp, err) < 0)
        return -1;
    core->init_fd = fb_container_load_init(cfg->init_path, err);
    if (core->init_fd < 0)
        return -1;
    note_boot(core);
    if (fb_core_criu_start(core, err) < 0) /* in the background: never delays the start */
        return -1;
    fb_core_remove_orphans(core);
    fb_layers_remove_partial(core);
    if (fb_net_open(core) == 0) { /* without it, networked modes answer 501 */
        cleanup_error fb_error_t derr = NULL;
        if (fb_dns_start(core, &derr) < 0)
            fb_warn("sandboxes will have no DNS: %s", derr->msg);
        cleanup_error fb_error_t eerr = NULL;
        if (fb_egress_start(core, &eerr) < 0)
            fb_warn("allowlist sandboxes will reach no web port: %s", eerr->msg);
    }
    if (fb_pool_start(core, err) < 0 || fb_core_readopt(core, err) < 0)
        return -1;
    fb_build_remove_orphans(core);
    if (fb_core_templates_init(core, err) < 0)
        return -1;
    return fb_core_reaper_start(core, err);
}

void fb_core_signal_stop(struct fb_core *core)
{
    pthread_mutex_lock(&core->lock);
    core->stopping = true;
    pthread_cond_broadcast(&core->pool_cond);
    pthread_cond_broadcast(&core->reaper_cond);
    pthread_mutex_unlock(&core->lock);
}

void fb_core_close(struct fb_core *core)
{
    fb_core_criu_stop(core);
    fb_pool_stop(core);
    fb_core_reaper_stop(core);
    fb_core_templates_stop(core);
    fb_egress_stop(core);
    fb_dns_stop(core);
    fb_net_close(core);
    /* sandboxes keep their binds; a later start mounts the same devices */
    if (core->store)
        fb_volumes_release_all(core);
    if (core->store)
        fb_store_close(core->store);
    core->store = NULL;
    fb_seccomp_prog_free(&core->seccomp);
    if (core->init_fd >= 0)
        close(core->init_fd);
    core->init_fd = -1;
    if (core->lock_fd >= 0)
        close(core->lock_fd);
    core->lock_fd = -1;
    pthread_cond_destroy(&core->pool_cond);
    pthread_cond_destroy(&core->reaper_cond);
    fb_idle_free(core);
    fb_gate_free(core);
    pthread_mutex_destroy(&core->pause_lock);
    pthread_rwlock_destroy(&core->layers_lock);
    pthread_mutex_destroy(&core->volume_lock);
    pthread_mutex_destroy(&core->lock);
}

int fb_core_add_key(fb_store *store, const char *tenant, char *key_out, fb_error_t *err)
{
    char hex[49];
    if (fb_random_hex(hex, 24) < 0)
        return fb_error_sys(err, "random key");
    if (fb_snprintf(key_out, FB_ID_MAX, "fbk_%s", hex) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "key");
    if (fb_store_tenant_ensure(store, tenant, tenant, err) < 0 ||
        fb_store_key_add(store, tenant, key_out, err) < 0)
        return -1;
    return 0;
}

int fb_core_bootstrap_key(struct fb_core *core, char *key_out, fb_error_t *err)
{
    key_out[0] = '\0';
    int64_t count = 0;
    if (fb_store_key_count(core->store, &count, err) < 0)
        return -1;
    char path[PATH_MAX];
    if (fb_snprintf(path, sizeof path, "%s/api-key", core->cfg.state_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "key path");
    if (count > 0 && access(path, F_OK) == 0)
        return 0;
    if (fb_core_add_key(core->store, DEFAULT_TENANT, key_out, err) < 0)
        return -1;
    char line[FB_ID_MAX + 2];
    snprintf(line, sizeof line, "%s\n", key_out);
    unlink(path);
    int r = fb_write_file(path, line, strlen(line), 0600);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "write %s", path);
    return 0;
}

json_t *fb_core_info(struct fb_core *core)
{
    json_t *cg = json_pack("{s:i, s:s}", "version", core->cgroups.mode == FB_CGROUP_V2 ? 2 : 1, "controllers",
                           "memory,pids,cpu");
    if (core->cgroups.mode == FB_CGROUP_V1)
        json_object_set_new(cg, "note", json_string("cgroup v1 layout (hybrid); v2 is used where available"));
    json_t *denied = json_array();
    for (const char *const *n = fb_seccomp_denied_names(); n && *n; n++)
        json_array_append_new(denied, json_string(*n));
    json_t *iso = json_pack("{s:[s,s,s,s,s,s,s], s:b, s:b, s:b, s:s, s:o, s:b}", "namespaces", "user", "pid",
                            "mount", "net", "uts", "ipc", "cgroup", "no_new_privs", 1, "idmapped_template", 1,
                            "private_writable_layer", 1, "capabilities", "reduced bounding set",
                            "seccomp_denied", denied, "init_sealed_memfd", 1);
    pthread_mutex_lock(&core->lock);
    static const char *const states[] = {"missing", "building", "ready", "failed"};
    json_t *tpl = json_pack("{s:s}", "default", states[core->default_state]);
    if (core->default_state == FB_TPL_FAILED)
        json_object_set_new(tpl, "default_error", json_string(core->default_error));
    json_t *pool =
        json_pack("{s:i, s:i}", "target", (int)core->cfg.warm_pool, "ready", (int)core->pool_ready);
    pthread_mutex_unlock(&core->lock);
    /* deleted sandboxes whose cgroups and files are still being removed */
    int cleanup_pending = 0;
    struct fb_sandbox_row *rows = NULL;
    size_t n = 0;
    if (fb_store_sandbox_list(core->store, NULL, &rows, &n, NULL) == 0) {
        for (size_t i = 0; i < n; i++)
            cleanup_pending += strcmp(rows[i].state, "deleting") == 0;
        fb_sandbox_rows_free(rows, n);
    }
    json_object_set_new(pool, "cleanup_pending", json_integer(cleanup_pending));
    json_object_set_new(cg, "favordynmods", json_boolean(core->favordynmods));
    json_t *tiers = json_pack("[{s:s, s:b}, {s:s, s:b, s:s}]", "name", "container", "available", 1, "name",
                              "microvm", "available", 0, "reason", "not implemented yet");
    json_t *security = fb_core_posture(core);
    json_t *storage = json_pack("{s:s, s:s, s:b}", "kind", fb_storage_kind_name(core->storage.kind), "path",
                                core->storage.path, "reflink", core->storage.reflink);
    uint64_t size = 0, free_bytes = 0, host_bytes = 0;
    if (fb_storage_space(&core->storage, core->cfg.state_dir, &size, &free_bytes, &host_bytes) == 0) {
        json_object_set_new(storage, "size_bytes", json_integer((json_int_t)size));
        json_object_set_new(storage, "free_bytes", json_integer((json_int_t)free_bytes));
        if (core->storage.kind == FB_STORAGE_BTRFS_POOL)
            json_object_set_new(storage, "host_bytes", json_integer((json_int_t)host_bytes));
    }
    if (core->storage.why[0])
        json_object_set_new(storage, "note", json_string(core->storage.why));
    json_t *missing = json_incref(json_object_get(security, "missing"));
    return json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:{s:I, s:I, s:I, s:i, s:i}}",
                     "name", "forkbox", "version", FORKBOX_VERSION, "cgroup", cg, "isolation", iso,
                     "security", security, "storage", storage, "templates", tpl, "warm_pool", pool, "tiers",
                     tiers, "criu", fb_core_criu_info(core), "missing", missing, "limits", "json_body_bytes",
                     (json_int_t)(1 << 20), "upload_bytes", (json_int_t)FB_UPLOAD_MAX, "spool_budget_bytes",
                     (json_int_t)FB_SPOOL_BUDGET, "max_sandboxes_per_tenant", (int)core->cfg.max_sandboxes,
                     "uid_ranges", (int)core->cfg.uid_pool_slots);
}
