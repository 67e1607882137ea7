/* Forking a running sandbox: its files and processes are captured once,
 * at one frozen instant (a copy of the layer, a CRIU dump left running),
 * and restored as each child, a new sandbox with its own id, uid range,
 * hostname, network namespace and cgroups.  The parent is frozen only for
 * the capture. */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../runtime/cgroup.h"
#include "../runtime/container.h"
#include "../runtime/copy.h"
#include "core.h"
#include "internal.h"

#define FORK_MAX 64

static int parse_count(json_t *body, int *count, fb_error_t *err)
{
    *count = 1;
    if (body == NULL || json_is_null(body))
        return 0;
    if (!json_is_object(body))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "request body must be a JSON object");
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        if (strcmp(k, "count") != 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "unknown field \"%s\" (known: count)", k);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > FORK_MAX)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "count: must be an integer from 1 to %d",
                                FORK_MAX);
        *count = (int)json_integer_value(v);
    }
    return 0;
}

/* Makes, fills and starts one child of parent from the staged capture. */
static int fork_one(struct fb_core *core, const char *tenant, const struct fb_sandbox_row *parent,
                    const struct fb_create_spec *pspec, const char *rootfs, const char *stage,
                    struct fb_sandbox_row *child, fb_error_t *err)
{
    struct fb_create_spec s = *pspec;
    s.checkpoint[0] = '\0';
    if (fb_core_new_row(tenant, &s, child, err) < 0 || fb_core_reserve_row(core, child, true, err) < 0)
        return -1;
    struct fb_core_paths paths;
    struct fb_container_config cc;
    fb_core_container_config(core, child, rootfs, &paths, &cc);
    bool image = core->disk_limits;
    int rc = fb_mkdir_p(paths.sandbox_dir, 0700) < 0 ? fb_error_sys(err, "create %s", paths.sandbox_dir) : 0;
    /* a tree is moved to the child's uids as it is copied, an image once
     * it is mounted (layer_uid_from) */
    if (rc == 0)
        rc = fb_checkpoint_copy_layer(core, stage, paths.sandbox_dir, (uid_t)parent->uid_base,
                                      (uid_t)child->uid_base, err);
    s.layer_uid_from = image ? (uint32_t)parent->uid_base : (uint32_t)child->uid_base;
    if (rc == 0)
        rc = fb_memory_restore(core, child, rootfs, &s, stage, err);
    if (rc == 0) {
        fb_strlcpy(child->state, "running", sizeof child->state);
        rc = fb_store_sandbox_update(core->store, child, err);
        if (rc < 0)
            fb_container_kill((pid_t)child->init_pid);
    }
    if (rc < 0) {
        fb_container_destroy(&cc, 0, NULL);
        fb_store_sandbox_delete(core->store, child->id, NULL);
    }
    return rc;
}

/* Children are restored by a few threads at once: a restore waits on
 * CRIU's own process start-up and on the disk as much as on a CPU. */
#define FORK_THREADS 3

struct fork_job {
    struct fb_core *core;
    const char *tenant;
    const struct fb_sandbox_row *parent;
    const struct fb_create_spec *spec;
    const char *rootfs, *stage;
    struct fb_sandbox_row *kids;
    bool *made;
    int count;
    pthread_mutex_t lock;
    int next;       /* guarded by lock */
    fb_error_t err; /* the first failure, guarded by lock */
};

static void *fork_worker(void *arg)
{
    struct fork_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        int i = j->err == NULL && j->next < j->count ? j->next++ : -1;
        pthread_mutex_unlock(&j->lock);
        if (i < 0)
            return NULL;
        fb_error_t e = NULL;
        if (fork_one(j->core, j->tenant, j->parent, j->spec, j->rootfs, j->stage, &j->kids[i], &e) == 0) {
            j->made[i] = true;
            continue;
        }
        pthread_mutex_lock(&j->lock);
        if (j->err == NULL)
            j->err = e;
        else
            fb_error_release(&e);
        pthread_mutex_unlock(&j->lock);
    }
}

/* Restores count children, FORK_THREADS at a time; all or nothing. */
static int fork_children(struct fork_job *j, fb_error_t *err)
{
    pthread_mutex_init(&j->lock, NULL);
    pthread_t t[FORK_THREADS];
    int n = 0;
    for (; n < FORK_THREADS && n < j->count; n++)
        if (pthread_create(&t[n], NULL, fork_worker, j) != 0)
            break;
    if (n == 0)
        fork_worker(j);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    pthread_mutex_destroy(&j->lock);
    if (j->err != NULL) {
        if (err != NULL)
            *err = j->err;
        else
            fb_error_release(&j->err);
        return -1;
    }
    return 0;
}

int fb_sandbox_fork(struct fb_core *core, const char *tenant, const char *id, json_t *body, json_t **out,
                    fb_error_t *err)
{
    int count;
    if (parse_count(body, &count, err) < 0)
        return -1;
    if (fb_core_criu_require(core, err) < 0)
        return fb_error_wrap(err, "fork needs CRIU");
    struct fb_sandbox_row row = {0};
    if (fb_core_live_row(core, tenant, id, &row, err) < 0)
        return -1;
    if (fb_volumes_refuse_memory(&row, "fork", err) < 0) {
        fb_sandbox_row_clear(&row);
        return -1;
    }
    cleanup_spec struct fb_create_spec spec = {0};
    cleanup_json json_t *sj = json_loads(row.spec_json ? row.spec_json : "{}", 0, NULL);
    char rootfs[PATH_MAX];
    int rc = fb_create_spec_from_json(sj, &spec, err);
    if (rc == 0)
        rc = fb_template_rootfs(core, row.template_name, rootfs, sizeof rootfs, err);
    /* refused whole, before anything is made: the tenant's quota */
    if (rc == 0 && fb_core_quota_left(core, tenant) < (size_t)count)
        rc = fb_error_set(err, FB_ERR_QUOTA, 0,
                          "forking %d children would pass the tenant's limit of %u sandboxes (%zu left)",
                          count, core->cfg.max_sandboxes, fb_core_quota_left(core, tenant));
    fb_sandbox_row_clear(&row);
    if (rc < 0)
        return -1;

    /* the capture: the layer copy and the dump at one frozen instant */
    char stage[PATH_MAX];
    if (fb_snprintf(stage, sizeof stage, "%s/sandboxes/.fork.XXXXXX", core->cfg.state_dir) < 0 ||
        mkdtemp(stage) == NULL)
        return fb_error_sys(err, "create a fork staging dir");
    struct fb_core_paths paths;
    struct fb_container_config cc;
    int64_t t0 = fb_mono_us();
    pthread_mutex_lock(&core->pause_lock);
    rc = fb_store_sandbox_get(core->store, tenant, id, &row, err);
    if (rc == 0 && strcmp(row.state, "running") != 0)
        rc = fb_error_set(err, FB_ERR_CONFLICT, 0, "sandbox %s is %s: only a running sandbox forks", id,
                          row.state);
    if (rc == 0) {
        fb_core_container_config(core, &row, "", &paths, &cc);
        {
            /* the dump takes about what the processes hold in memory */
            struct fb_cgroup_usage u = {0};
            cleanup_error fb_error_t uerr = NULL;
            fb_cgroup_usage_read(&core->cgroups, row.id, &u, &uerr);
            rc = fb_checkpoint_check_space(core, paths.sandbox_dir, count + 1, (int64_t)u.memory_bytes, err);
        }
    }
    /* the children restore from the layer copy's own records */
    if (rc == 0)
        rc = fb_checkpoint_capture(core, &row, paths.sandbox_dir, true, false, stage, err);
    pthread_mutex_unlock(&core->pause_lock);
    int64_t t_capture = fb_mono_us() - t0;

    json_t *arr = json_array();
    struct fb_sandbox_row *kids = rc == 0 ? calloc((size_t)count, sizeof *kids) : NULL;
    bool *made = rc == 0 ? calloc((size_t)count, sizeof *made) : NULL;
    if (rc == 0 && (kids == NULL || made == NULL))
        rc = fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    if (rc == 0) {
        struct fork_job job = {.core = core,
                               .tenant = tenant,
                               .parent = &row,
                               .spec = &spec,
                               .rootfs = rootfs,
                               .stage = stage,
                               .kids = kids,
                               .made = made,
                               .count = count};
        rc = fork_children(&job, err);
    }
    if (rc < 0) {
        /* all or nothing: children already made go again */
        for (int i = 0; made != NULL && i < count; i++) {
            cleanup_error fb_error_t derr = NULL;
            if (made[i])
                fb_sandbox_delete(core, tenant, kids[i].id, &derr);
        }
        json_decref(arr);
        arr = NULL;
    } else {
        for (int i = 0; i < count; i++) {
            json_t *o = NULL;
            cleanup_error fb_error_t gerr = NULL;
            if (fb_sandbox_get(core, tenant, kids[i].id, &o, &gerr) == 0)
                json_array_append_new(arr, o);
        }
    }
    for (int i = 0; kids != NULL && i < count; i++)
        fb_sandbox_row_clear(&kids[i]);
    free(kids);
    free(made);
    fb_rm_rf(stage);
    fb_sandbox_row_clear(&row);
    if (rc < 0)
        return fb_error_wrap(err, "fork sandbox %s", id);
    fb_info("sandbox %s forked %d times (capture %lld us, total %lld us)", id, count, (long long)t_capture,
            (long long)(fb_mono_us() - t0));
    *out = json_pack("{s:o}", "sandboxes", arr);
    return 0;
}
