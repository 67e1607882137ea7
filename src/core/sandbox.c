/* Sandbox lifecycle: create, inspect, list, delete, TTL, re-adoption. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../runtime/container.h"
#include "../runtime/disk.h"
#include "../runtime/initconn.h"
#include "core.h"
#include "internal.h"

static void row_clearp(struct fb_sandbox_row *r)
{
    fb_sandbox_row_clear(r);
}
#define cleanup_row __attribute__((cleanup(row_clearp)))

void fb_core_container_config(struct fb_core *core, const struct fb_sandbox_row *row, const char *rootfs,
                              struct fb_core_paths *paths, struct fb_container_config *c)
{
    /* lengths were bounded when the core opened: these cannot truncate */
    (void)fb_snprintf(paths->sandbox_dir, sizeof paths->sandbox_dir, "%s/sandboxes/%s", core->cfg.state_dir,
                      row->id);
    (void)fb_snprintf(paths->run_dir, sizeof paths->run_dir, "%s/sandboxes/%s", core->cfg.run_dir, row->id);
    (void)fb_snprintf(paths->hostname, sizeof paths->hostname, "sbx-%.12s", row->id + 4);
    (void)fb_snprintf(paths->sock_path, sizeof paths->sock_path, "%s/init.sock", paths->run_dir);
    memset(c, 0, sizeof *c);
    c->id = row->id;
    c->template_rootfs = rootfs;
    c->sandbox_dir = paths->sandbox_dir;
    c->run_dir = paths->run_dir;
    c->uid_base = (uid_t)row->uid_base;
    c->hostname = paths->hostname;
    c->init_fd = core->init_fd;
    c->seccomp = &core->seccomp;
    c->cgroups = &core->cgroups;
}

/* The client-visible object of a row. */
static json_t *row_to_json(const struct fb_sandbox_row *row)
{
    cleanup_json json_t *spec = row->spec_json ? json_loads(row->spec_json, 0, NULL) : NULL;
    json_t *o = json_object();
    char created[40], expires[40];
    fb_time_format(row->created_ms, created, sizeof created);
    json_object_set_new(o, "id", json_string(row->id));
    json_object_set_new(o, "state", json_string(row->state));
    if (row->state_reason[0] != '\0')
        json_object_set_new(o, "state_reason", json_string(row->state_reason));
    json_object_set_new(o, "template", json_string(row->template_name));
    json_object_set_new(o, "created_at", json_string(created));
    if (row->expires_ms >= 0) {
        fb_time_format(row->expires_ms, expires, sizeof expires);
        json_object_set_new(o, "expires_at", json_string(expires));
    } else {
        json_object_set_new(o, "expires_at", json_null());
    }
    if (json_is_object(spec)) {
        static const char *const keys[] = {"ttl",     "idle_timeout", "on_expire", "labels", "env",
                                           "workdir", "resources",    "network",   "user",   "volumes"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            json_t *v = json_object_get(spec, keys[i]);
            if (v != NULL)
                json_object_set(o, keys[i], v);
        }
    }
    return o;
}

/* Marks in busy[] the pool slots whose uids some live process on the host
 * runs as.  The store alone is not enough: a sandbox whose record was lost
 * (a wiped state dir, another daemon on the same pool) still runs, and
 * sharing its uids would let two sandboxes reach each other's files. */
static void mark_slots_in_use(const struct fb_core *core, bool *busy)
{
    cleanup_dir DIR *d = opendir("/proc");
    if (d == NULL)
        return;
    uint64_t start = core->cfg.uid_pool_start;
    uint64_t end = start + (uint64_t)core->cfg.uid_pool_slots * FB_UID_COUNT;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/%.20s/status", de->d_name);
        cleanup_fclose FILE *f = fopen(path, "re");
        char line[256];
        while (f != NULL && fgets(line, sizeof line, f) != NULL) {
            unsigned long long uid;
            if (sscanf(line, "Uid: %*u %llu", &uid) == 1) {
                if (uid >= start && uid < end)
                    busy[(uid - start) / FB_UID_COUNT] = true;
                break;
            }
        }
    }
}

static int alloc_uid_base(struct fb_core *core, int64_t *out, fb_error_t *err)
{
    cleanup_free int64_t *bases = NULL;
    size_t n = 0;
    if (fb_store_sandbox_uid_bases(core->store, &bases, &n, err) < 0)
        return -1;
    cleanup_free bool *busy = calloc(core->cfg.uid_pool_slots, sizeof *busy);
    if (busy == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "uid slots");
    mark_slots_in_use(core, busy);
    for (uint32_t slot = 0; slot < core->cfg.uid_pool_slots; slot++) {
        int64_t base = (int64_t)core->cfg.uid_pool_start + (int64_t)slot * FB_UID_COUNT;
        bool used = busy[slot];
        for (size_t i = 0; i < n && !used; i++)
            used = bases[i] == base;
        if (!used) {
            *out = base;
            return 0;
        }
    }
    return fb_error_set(err, FB_ERR_QUOTA, 0, "no free uid range: the host runs its maximum of %u sandboxes",
                        core->cfg.uid_pool_slots);
}

static int count_tenant(struct fb_core *core, const char *tenant, size_t *count, fb_error_t *err)
{
    struct fb_sandbox_row *rows = NULL;
    size_t n = 0;
    if (fb_store_sandbox_list(core->store, tenant, &rows, &n, err) < 0)
        return -1;
    size_t live = 0;
    for (size_t i = 0; i < n; i++)
        live += strcmp(rows[i].state, "deleting") != 0;
    fb_sandbox_rows_free(rows, n);
    *count = live;
    return 0;
}

/* Asks init to create the workdir so the first exec can chdir there. */
int fb_core_make_workdir(const char *sock, const char *workdir, fb_error_t *err)
{
    cleanup_json json_t *req =
        json_pack("{s:s, s:s, s:i, s:b}", "op", "mkdir", "path", workdir, "mode", 0755, "parents", 1);
    for (int attempt = 0;; attempt++) {
        cleanup_error fb_error_t e = NULL;
        if (fb_initconn_call(sock, req, NULL, &e) == 0)
            return 0;
        /* init may still be starting: the socket accepts before it runs */
        if (e->kind != FB_ERR_UNAVAILABLE || attempt >= 200) {
            if (e->kind == FB_ERR_UNAVAILABLE || e->kind == FB_ERR_INTERNAL)
                return fb_error_set(err, e->kind, 0, "workdir %s: %s", workdir, e->msg);
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "workdir %s cannot be created: %s", workdir,
                                e->msg);
        }
        usleep(5000);
    }
}

/* Starts the container of a freshly inserted row and marks it running.
 * On failure the row and everything started for it are gone again. */
int fb_core_start_row(struct fb_core *core, struct fb_sandbox_row *row, const char *rootfs,
                      const struct fb_create_spec *spec, fb_error_t *err)
{
    struct fb_core_paths paths;
    struct fb_container_config cc;
    fb_core_container_config(core, row, rootfs, &paths, &cc);
    struct fb_cgroup_limits limits = {
        .cpus = spec->res.cpus,
        .memory_bytes = spec->res.memory_mb << 20,
        .pids = spec->res.pids,
    };
    cc.limits = &limits;
    cc.disk_bytes = core->disk_limits ? spec->res.disk_mb << 20 : 0;
    /* a checkpoint's copy is already in place (checkpoint.c) */
    cc.reuse_layer = spec->layer_uid_from != 0;
    cc.layer_uid_from = spec->layer_uid_from;
    struct fb_container ct = {0};
    cleanup_free struct fb_volume_plan *plan = calloc(1, sizeof *plan);
    if (plan == NULL)
        fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    if (plan == NULL || fb_volumes_prepare(core, row->tenant, spec, plan, &cc, err) < 0 ||
        fb_container_start(&cc, &ct, err) < 0 || fb_core_make_workdir(ct.sock_path, spec->workdir, err) < 0 ||
        fb_net_attach(core, row, ct.init_pid, spec->network_mode, err) < 0) {
        fb_container_destroy(&cc, ct.init_pid, NULL);
        fb_store_sandbox_delete(core->store, row->id, NULL);
        return fb_error_wrap(err, "create sandbox");
    }
    row->init_pid = ct.init_pid;
    fb_strlcpy(row->state, "running", sizeof row->state);
    if (fb_store_sandbox_update(core->store, row, err) < 0) {
        fb_container_destroy(&cc, ct.init_pid, NULL);
        fb_store_sandbox_delete(core->store, row->id, NULL);
        return -1;
    }
    return 0;
}

int fb_core_new_row(const char *tenant, const struct fb_create_spec *spec, struct fb_sandbox_row *row,
                    fb_error_t *err)
{
    char hex[17];
    if (fb_random_hex(hex, 8) < 0)
        return fb_error_sys(err, "random id");
    snprintf(row->id, sizeof row->id, "sbx_%s", hex);
    fb_strlcpy(row->tenant, tenant, sizeof row->tenant);
    fb_strlcpy(row->state, "starting", sizeof row->state);
    fb_strlcpy(row->template_name, spec->template_name, sizeof row->template_name);
    row->created_ms = fb_now_ms();
    row->expires_ms = spec->ttl_s > 0 ? row->created_ms + spec->ttl_s * 1000 : -1;
    cleanup_json json_t *spec_json = fb_create_spec_to_json(spec);
    row->spec_json = json_dumps(spec_json, JSON_COMPACT);
    if (row->spec_json == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "serialise spec");
    return 0;
}

size_t fb_core_quota_left(struct fb_core *core, const char *tenant)
{
    size_t count = 0;
    cleanup_error fb_error_t err = NULL;
    pthread_mutex_lock(&core->lock);
    int r = count_tenant(core, tenant, &count, &err);
    pthread_mutex_unlock(&core->lock);
    if (r < 0 || count >= core->cfg.max_sandboxes)
        return 0;
    return core->cfg.max_sandboxes - count;
}

int fb_core_reserve_row(struct fb_core *core, struct fb_sandbox_row *row, bool insert, fb_error_t *err)
{
    /* quota, uid range and row are decided atomically w.r.t. other creates */
    pthread_mutex_lock(&core->lock);
    size_t count = 0;
    int r = 0;
    if (strcmp(row->tenant, FB_POOL_TENANT) != 0) {
        r = count_tenant(core, row->tenant, &count, err);
        if (r == 0 && count >= core->cfg.max_sandboxes)
            r = fb_error_set(err, FB_ERR_QUOTA, 0, "tenant has %zu sandboxes, the maximum is %u", count,
                             core->cfg.max_sandboxes);
    }
    if (r == 0)
        r = fb_volumes_check_locked(core, row->tenant, row->spec_json, err);
    if (r == 0 && insert)
        r = alloc_uid_base(core, &row->uid_base, err);
    if (r == 0 && insert)
        r = fb_store_sandbox_insert(core->store, row, err);
    pthread_mutex_unlock(&core->lock);
    return r;
}

int fb_sandbox_create(struct fb_core *core, const char *tenant, const struct fb_create_spec *spec,
                      json_t **out, fb_error_t *err)
{
    char rootfs[PATH_MAX];
    cleanup_row struct fb_sandbox_row row = {0};
    if (spec->checkpoint[0] != '\0') { /* never from the warm pool */
        if (fb_checkpoint_new_sandbox(core, tenant, spec, &row, err) < 0)
            return -1;
        *out = row_to_json(&row);
        return 0;
    }
    if (fb_template_rootfs(core, spec->template_name, rootfs, sizeof rootfs, err) < 0)
        return -1;
    if (fb_core_new_row(tenant, spec, &row, err) < 0 || fb_core_reserve_row(core, &row, false, err) < 0)
        return -1;
    /* a warm sandbox, when one fits, skips the whole start-up */
    if (fb_pool_claim(core, spec, &row) == 0) {
        fb_info("sandbox %s created from the warm pool (tenant %s)", row.id, tenant);
        *out = row_to_json(&row);
        return 0;
    }
    if (fb_core_reserve_row(core, &row, true, err) < 0 ||
        fb_core_start_row(core, &row, rootfs, spec, err) < 0)
        return -1;
    fb_info("sandbox %s created (tenant %s, template %s, init pid %lld, uid base %lld)", row.id, tenant,
            row.template_name, (long long)row.init_pid, (long long)row.uid_base);
    *out = row_to_json(&row);
    return 0;
}

int fb_sandbox_create_on(struct fb_core *core, const char *tenant, const struct fb_create_spec *spec,
                         const char *rootfs, json_t **out, fb_error_t *err)
{
    cleanup_row struct fb_sandbox_row row = {0};
    if (fb_core_new_row(tenant, spec, &row, err) < 0 || fb_core_reserve_row(core, &row, true, err) < 0 ||
        fb_core_start_row(core, &row, rootfs, spec, err) < 0)
        return -1;
    *out = row_to_json(&row);
    return 0;
}

/* A stored row that clients may still see: one being deleted is gone. */
/* A sandbox recorded as running whose init is gone (killed from the host,
 * or the host restarted under a daemon that was not there to see it) is
 * never reported as running: it is marked stopped, with the reason. */
static void check_alive(struct fb_core *core, struct fb_sandbox_row *row, const char *reason)
{
    if (strcmp(row->state, "running") != 0 || fb_container_alive((pid_t)row->init_pid))
        return;
    fb_warn("sandbox %s: init (pid %lld) is gone, marking it stopped (files kept)", row->id,
            (long long)row->init_pid);
    fb_container_kill((pid_t)row->init_pid); /* reaps it, if it was our child */
    fb_net_detach(core, row);
    fb_cgroup_destroy(&core->cgroups, row->id, NULL);
    fb_strlcpy(row->state, "stopped", sizeof row->state);
    fb_strlcpy(row->state_reason, reason, sizeof row->state_reason);
    row->init_pid = 0;
    cleanup_error fb_error_t err = NULL;
    if (fb_store_sandbox_update(core->store, row, &err) < 0)
        fb_warn("sandbox %s: record the stop: %s", row->id, err->msg);
}

#define GONE_WHILE_RUNNING                                                                                   \
    "its processes were killed from outside forkbox while the daemon ran; its files are kept, delete it "    \
    "when done"

int fb_core_live_row(struct fb_core *core, const char *tenant, const char *id, struct fb_sandbox_row *row,
                     fb_error_t *err)
{
    if (fb_store_sandbox_get(core->store, tenant, id, row, err) < 0)
        return -1;
    if (strcmp(row->state, "deleting") == 0)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "sandbox %s not found", id);
    check_alive(core, row, GONE_WHILE_RUNNING);
    return fb_core_wake(core, row, err);
}

int fb_sandbox_get(struct fb_core *core, const char *tenant, const char *id, json_t **out, fb_error_t *err)
{
    cleanup_row struct fb_sandbox_row row = {0};
    if (fb_core_live_row(core, tenant, id, &row, err) < 0)
        return -1;
    json_t *o = row_to_json(&row);
    struct fb_cgroup_usage u = {0};
    cleanup_error fb_error_t uerr = NULL;
    if (strcmp(row.state, "running") == 0 && fb_cgroup_usage_read(&core->cgroups, row.id, &u, &uerr) == 0) {
        json_t *usage = json_pack("{s:I, s:I, s:I}", "memory_bytes", (json_int_t)u.memory_bytes, "cpu_usec",
                                  (json_int_t)u.cpu_usec, "pids", (json_int_t)u.pids);
        struct fb_core_paths paths;
        struct fb_container_config cc;
        fb_core_container_config(core, &row, "", &paths, &cc);
        char layer[PATH_MAX];
        struct fb_disk_usage du;
        if (core->disk_limits && fb_snprintf(layer, sizeof layer, "%s/layer", paths.sandbox_dir) == 0 &&
            fb_disk_usage_read(layer, &du) == 0)
            json_object_update_new(usage,
                                   json_pack("{s:I, s:I, s:I, s:I}", "disk_bytes", (json_int_t)du.bytes_used,
                                             "disk_bytes_limit", (json_int_t)du.bytes_total, "disk_inodes",
                                             (json_int_t)du.inodes_used, "disk_inodes_limit",
                                             (json_int_t)du.inodes_total));
        struct fb_checkpoint_row *ck = NULL;
        size_t nck = 0;
        cleanup_error fb_error_t ckerr = NULL;
        if (fb_store_checkpoint_list(core->store, tenant, row.id, &ck, &nck, &ckerr) == 0) {
            json_int_t total = 0;
            for (size_t i = 0; i < nck; i++)
                total += (json_int_t)ck[i].size_bytes;
            free(ck);
            json_object_set_new(usage, "checkpoints_bytes", json_integer(total));
        }
        json_t *net = fb_net_counters(core, &row);
        if (net != NULL)
            json_object_set_new(usage, "network", net);
        json_object_set_new(o, "usage", usage);
    }
    *out = o;
    return 0;
}

static bool labels_match(json_t *obj, const char *const *labels, size_t nlabels)
{
    json_t *have = json_object_get(obj, "labels");
    for (size_t i = 0; i < nlabels; i++) {
        char key[FB_LABEL_KEY_MAX + 1], val[FB_LABEL_VALUE_MAX + 1];
        if (fb_label_selector_parse(labels[i], key, sizeof key, val, sizeof val, NULL) < 0)
            return false;
        const char *v = json_string_value(json_object_get(have, key));
        if (v == NULL || strcmp(v, val) != 0)
            return false;
    }
    return true;
}

int fb_sandbox_list(struct fb_core *core, const char *tenant, const char *const *labels, size_t nlabels,
                    const char *state, json_t **out, fb_error_t *err)
{
    struct fb_sandbox_row *rows = NULL;
    size_t n = 0;
    if (fb_store_sandbox_list(core->store, tenant, &rows, &n, err) < 0)
        return -1;
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        if (strcmp(rows[i].tenant, FB_POOL_TENANT) != 0)
            check_alive(core, &rows[i], GONE_WHILE_RUNNING);
        if ((state != NULL && strcmp(rows[i].state, state) != 0) || strcmp(rows[i].state, "deleting") == 0)
            continue;
        json_t *o = row_to_json(&rows[i]);
        if (labels_match(o, labels, nlabels))
            json_array_append_new(arr, o);
        else
            json_decref(o);
    }
    fb_sandbox_rows_free(rows, n);
    *out = json_pack("{s:o}", "sandboxes", arr);
    return 0;
}

/* Tears down whatever exists of a sandbox, then forgets it. */
static int destroy_row(struct fb_core *core, const struct fb_sandbox_row *row, fb_error_t *err)
{
    struct fb_core_paths paths;
    struct fb_container_config cc;
    fb_core_container_config(core, row, "", &paths, &cc);
    fb_net_detach(core, row);
    /* frozen tasks cannot die: a paused sandbox is thawed to be killed */
    if (fb_cgroup_can_freeze(&core->cgroups)) {
        cleanup_error fb_error_t terr = NULL;
        fb_cgroup_freeze(&core->cgroups, row->id, false, &terr);
    }
    if (fb_container_destroy(&cc, (pid_t)row->init_pid, err) < 0)
        return -1;
    if (fb_store_sandbox_delete(core->store, row->id, err) < 0)
        return -1;
    fb_info("sandbox %s deleted", row->id);
    return 0;
}

/* A delete answers once every process of the sandbox has been sent SIGKILL
 * (none runs user code again) and the sandbox is gone from the API; waiting
 * for the pid namespace to wind down and removing cgroups and the writable
 * layer (the slow parts) is left to the reaper, which finds the row in
 * state "deleting" - also after a restart. */
int fb_sandbox_delete(struct fb_core *core, const char *tenant, const char *id, fb_error_t *err)
{
    cleanup_row struct fb_sandbox_row row = {0};
    if (fb_core_live_row(core, tenant, id, &row, err) < 0)
        return -1;
    /* not in the middle of a checkpoint or rollback (they hold pause_lock):
     * the row is read again once they are done */
    pthread_mutex_lock(&core->pause_lock);
    fb_sandbox_row_clear(&row);
    int rc = fb_store_sandbox_get(core->store, tenant, id, &row, err);
    if (rc == 0 && strcmp(row.state, "deleting") == 0)
        rc = fb_error_set(err, FB_ERR_NOT_FOUND, 0, "sandbox %s not found", id);
    if (rc == 0) {
        fb_container_signal((pid_t)row.init_pid);
        fb_strlcpy(row.state, "deleting", sizeof row.state);
        rc = fb_store_sandbox_update(core->store, &row, err);
    }
    pthread_mutex_unlock(&core->pause_lock);
    if (rc < 0)
        return -1;
    pthread_mutex_lock(&core->lock);
    core->cleanup_wanted = true;
    pthread_cond_broadcast(&core->reaper_cond);
    pthread_mutex_unlock(&core->lock);
    return 0;
}

int fb_sandbox_finish_deletes(struct fb_core *core)
{
    struct fb_sandbox_row *rows = NULL;
    size_t n = 0, pending = 0;
    cleanup_error fb_error_t err = NULL;
    if (fb_store_sandbox_list(core->store, NULL, &rows, &n, &err) < 0) {
        fb_warn("cleanup: %s", err->msg);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(rows[i].state, "deleting") != 0)
            continue;
        cleanup_error fb_error_t e = NULL;
        if (destroy_row(core, &rows[i], &e) < 0) {
            fb_warn("cleanup: %s", e->msg);
            pending++;
        }
    }
    fb_sandbox_rows_free(rows, n);
    return (int)pending;
}

int fb_sandbox_set_ttl(struct fb_core *core, const char *tenant, const char *id, int64_t ttl_s, json_t **out,
                       fb_error_t *err)
{
    if (ttl_s < 0 || ttl_s > FB_TTL_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "ttl: must be an integer between 0 and %lld",
                            (long long)FB_TTL_MAX);
    cleanup_row struct fb_sandbox_row row = {0};
    if (fb_core_live_row(core, tenant, id, &row, err) < 0)
        return -1;
    row.expires_ms = ttl_s > 0 ? fb_now_ms() + ttl_s * 1000 : -1;
    cleanup_json json_t *spec = json_loads(row.spec_json ? row.spec_json : "{}", 0, NULL);
    if (json_is_object(spec)) {
        json_object_set_new(spec, "ttl", json_integer(ttl_s));
        char *s = json_dumps(spec, JSON_COMPACT);
        if (s != NULL) {
            free(row.spec_json);
            row.spec_json = s;
        }
    }
    if (fb_store_sandbox_update(core->store, &row, err) < 0)
        return -1;
    *out = row_to_json(&row);
    return 0;
}

/* The row's stored spec with its network object replaced (new string, or
 * NULL when out of memory). */
static char *spec_with_network(const char *spec_json, const char *mode, json_t *allow)
{
    cleanup_json json_t *spec = json_loads(spec_json ? spec_json : "{}", 0, NULL);
    if (!json_is_object(spec))
        return NULL;
    json_object_set_new(spec, "network", json_pack("{s:s, s:O}", "mode", mode, "allow", allow));
    return json_dumps(spec, JSON_COMPACT);
}

int fb_sandbox_set_network(struct fb_core *core, const char *tenant, const char *id, json_t *network,
                           json_t **out, fb_error_t *err)
{
    char mode[FB_NET_MODE_MAX];
    cleanup_json json_t *allow = NULL;
    if (fb_network_spec_parse(network, mode, &allow, err) < 0)
        return -1;
    /* one change at a time: two racing changes would fight over the link */
    pthread_mutex_lock(&core->net_change);
    cleanup_row struct fb_sandbox_row row = {0};
    int rc = fb_core_live_row(core, tenant, id, &row, err);
    if (rc == 0 && strcmp(row.state, "running") != 0)
        rc = fb_error_set(err, FB_ERR_CONFLICT, 0, "sandbox %s is %s", id, row.state);
    char cur[FB_NET_MODE_MAX];
    char *old_spec = NULL;
    if (rc == 0) {
        fb_net_row_mode(&row, cur);
        /* the policy is built from the row's spec: the new one, from now */
        char *next = spec_with_network(row.spec_json, mode, allow);
        if (next == NULL)
            rc = fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
        else {
            old_spec = row.spec_json;
            row.spec_json = next;
        }
    }
    if (rc == 0) {
        /* the sandbox's processes keep running: only its link changes */
        fb_net_detach(core, &row);
        if (fb_net_attach(core, &row, (pid_t)row.init_pid, mode, err) < 0) {
            free(row.spec_json);
            row.spec_json = old_spec;
            old_spec = NULL;
            cleanup_error fb_error_t back = NULL;
            if (fb_net_attach(core, &row, (pid_t)row.init_pid, cur, &back) < 0)
                fb_warn("sandbox %s: could not restore network mode %s: %s", id, cur, back->msg);
            rc = -1;
        }
    }
    free(old_spec);
    if (rc == 0)
        rc = fb_store_sandbox_update(core->store, &row, err);
    pthread_mutex_unlock(&core->net_change);
    if (rc < 0)
        return -1;
    fb_info("sandbox %s: network mode %s", id, mode);
    *out = row_to_json(&row);
    return 0;
}

/* Opens the network namespace of a sandbox's init, making sure the pid
 * still names that init: /proc/PID opened once pins one process, and its
 * real uid must be the sandbox's root (uid_base) on the host. */
int fb_core_netns_open(const char *id, int64_t init_pid, int64_t uid_base, fb_error_t *err)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%lld", (long long)init_pid);
    cleanup_close int dir = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    cleanup_close int ns = dir < 0 ? -1 : openat(dir, "ns/net", O_RDONLY | O_CLOEXEC);
    cleanup_close int st = dir < 0 ? -1 : openat(dir, "status", O_RDONLY | O_CLOEXEC);
    char buf[2048];
    ssize_t n = st < 0 ? -1 : read(st, buf, sizeof buf - 1);
    bool ok = ns >= 0 && n > 0;
    if (ok) {
        buf[n] = '\0';
        const char *uid = strstr(buf, "\nUid:");
        ok = uid != NULL && strtoll(uid + 5, NULL, 10) == uid_base;
    }
    if (!ok)
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "sandbox %s is not running", id);
    return fb_steal_fd(&ns);
}

void fb_sandbox_handle_clear(struct fb_sandbox_handle *h)
{
    if (h->env)
        json_decref(h->env);
    h->env = NULL;
    if (h->core != NULL)
        fb_gate_leave(h->core, h->id);
    h->core = NULL;
}

int fb_sandbox_open(struct fb_core *core, const char *tenant, const char *id, struct fb_sandbox_handle *h,
                    fb_error_t *err)
{
    memset(h, 0, sizeof *h);
    cleanup_row struct fb_sandbox_row row = {0};
    if (fb_core_live_row(core, tenant, id, &row, err) < 0)
        return -1;
    if (strcmp(row.state, "running") != 0)
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "sandbox %s is %s%s%s", id, row.state,
                            row.state_reason[0] ? ": " : "", row.state_reason);
    struct fb_core_paths paths;
    struct fb_container_config cc;
    fb_core_container_config(core, &row, "", &paths, &cc);
    if (fb_gate_enter(core, row.id, err) < 0)
        return -1;
    h->core = core;
    fb_strlcpy(h->id, row.id, sizeof h->id);
    fb_strlcpy(h->sock_path, paths.sock_path, sizeof h->sock_path);
    h->init_pid = row.init_pid;
    h->uid_base = row.uid_base;
    cleanup_json json_t *spec = json_loads(row.spec_json ? row.spec_json : "{}", 0, NULL);
    const char *wd = json_string_value(json_object_get(spec, "workdir"));
    fb_strlcpy(h->workdir, wd ? wd : "/", sizeof h->workdir);
    const char *user = json_string_value(json_object_get(spec, "user"));
    fb_strlcpy(h->user, user ? user : "root", sizeof h->user);
    json_t *env = json_object_get(spec, "env");
    h->env = json_is_object(env) ? json_incref(env) : json_object();
    return 0;
}

void fb_sandbox_reap_expired(struct fb_core *core)
{
    char **ids = NULL;
    size_t n = 0;
    cleanup_error fb_error_t err = NULL;
    if (fb_store_sandbox_expired(core->store, fb_now_ms(), &ids, &n, &err) < 0) {
        fb_warn("reaper: %s", err->msg);
        return;
    }
    /* an expiry is a delete like any other; rows already being deleted
     * answer not_found and are left to the teardown in progress */
    for (size_t i = 0; i < n; i++) {
        cleanup_error fb_error_t e = NULL;
        if (fb_sandbox_delete(core, NULL, ids[i], &e) == 0)
            fb_info("sandbox %s expired", ids[i]);
        else if (e->kind != FB_ERR_NOT_FOUND)
            fb_warn("reaper: %s", e->msg);
        free(ids[i]);
    }
    free(ids);
}

/* After a restart: sandboxes whose init still answers are running again;
 * the rest (host reboot, killed init) are marked stopped with their files
 * kept, and their kernel leftovers are cleaned. */
/* Sandbox dirs no row knows of (a lost or replaced database) can never be
 * adopted: their layer filesystems are detached and the files removed, so
 * the host does not keep mounts and images nobody can reach. */
static void remove_orphans(struct fb_core *core, const struct fb_sandbox_row *rows, size_t n)
{
    char dir[PATH_MAX];
    if (fb_snprintf(dir, sizeof dir, "%s/sandboxes", core->cfg.state_dir) < 0)
        return;
    cleanup_dir DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "sbx_", 4) != 0 || strlen(e->d_name) >= FB_ID_MAX)
            continue;
        bool known = false;
        for (size_t i = 0; i < n && !known; i++)
            known = strcmp(rows[i].id, e->d_name) == 0;
        if (known)
            continue;
        struct fb_sandbox_row orphan = {0};
        fb_strlcpy(orphan.id, e->d_name, sizeof orphan.id);
        struct fb_core_paths paths;
        struct fb_container_config cc;
        fb_core_container_config(core, &orphan, "", &paths, &cc);
        fb_warn("sandbox dir %s has no record: removing it", paths.sandbox_dir);
        fb_container_destroy(&cc, 0, NULL);
    }
}

void fb_core_remove_orphans(struct fb_core *core)
{
    cleanup_error fb_error_t err = NULL;
    struct fb_sandbox_row *rows = NULL;
    size_t n = 0;
    if (fb_store_sandbox_list(core->store, NULL, &rows, &n, &err) < 0) {
        fb_warn("orphan check: %s", err->msg);
        return;
    }
    remove_orphans(core, rows, n);
    fb_sandbox_rows_free(rows, n);
    fb_checkpoint_remove_orphans(core);
}

int fb_core_readopt(struct fb_core *core, fb_error_t *err)
{
    struct fb_sandbox_row *rows = NULL;
    size_t n = 0;
    if (fb_store_sandbox_list(core->store, NULL, &rows, &n, err) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        struct fb_sandbox_row *row = &rows[i];
        struct fb_core_paths paths;
        struct fb_container_config cc;
        fb_core_container_config(core, row, "", &paths, &cc);
        bool alive = false;
        if (strcmp(row->state, "paused") == 0 && fb_container_alive((pid_t)row->init_pid)) {
            /* frozen: its init cannot answer a ping, and need not */
            char mode[FB_NET_MODE_MAX];
            fb_net_row_mode(row, mode);
            fb_net_restore(core, row, mode);
            fb_info("sandbox %s re-adopted, paused (init pid %lld)", row->id, (long long)row->init_pid);
            continue;
        }
        if (row->init_pid > 0 && fb_container_alive((pid_t)row->init_pid)) {
            cleanup_json json_t *req = json_pack("{s:s, s:s}", "op", "ping", "path", "/");
            cleanup_error fb_error_t e = NULL;
            alive = fb_initconn_call(paths.sock_path, req, NULL, &e) == 0;
        }
        if (strcmp(row->state, "deleting") == 0)
            continue; /* the reaper finishes these */
        if (alive && strcmp(row->tenant, FB_POOL_TENANT) == 0) {
            fb_pool_adopt(core, row->id);
            continue;
        }
        if (alive) {
            char mode[FB_NET_MODE_MAX];
            fb_net_row_mode(row, mode);
            fb_net_restore(core, row, mode);
            fb_info("sandbox %s re-adopted (init pid %lld)", row->id, (long long)row->init_pid);
            continue;
        }
        if (strcmp(row->state, "starting") == 0 || strcmp(row->tenant, FB_POOL_TENANT) == 0) {
            /* a create the previous daemon never finished: nothing to keep */
            fb_container_destroy(&cc, 0, NULL);
            fb_store_sandbox_delete(core->store, row->id, NULL);
            continue;
        }
        if (strcmp(row->state, "hibernated") == 0)
            continue; /* its memory is on disk: it survives restarts of the daemon and the host */
        if (strcmp(row->state, "stopped") != 0) {
            fb_warn("sandbox %s: init is gone, marking it stopped (files kept)", row->id);
            fb_cgroup_destroy(&core->cgroups, row->id, NULL);
            fb_strlcpy(row->state, "stopped", sizeof row->state);
            fb_strlcpy(
                row->state_reason,
                core->host_rebooted
                    ? "the host restarted since the sandbox was started: its processes and memory are "
                      "gone; its files are kept, delete it when done"
                    : "its processes were gone when forkboxd started (killed while no daemon ran); its "
                      "files are kept, delete it when done",
                sizeof row->state_reason);
            row->init_pid = 0;
            fb_store_sandbox_update(core->store, row, NULL);
        }
    }
    fb_sandbox_rows_free(rows, n);
    return 0;
}
