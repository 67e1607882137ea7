/* Persistent volumes: lifecycle, who uses one, and tar transfers without a
 * sandbox.  A volume is STATE_DIR/volumes/TENANT/NAME.img (ext4, its own
 * size), mounted at NAME.mnt on the host while the daemon uses it; which
 * sandboxes mount it is read from their stored specs, so a restart or a
 * stopped or hibernated sandbox counts as well as a running one. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../common/wire.h"
#include "../runtime/disk.h"
#include "../runtime/volume.h"
#include "core.h"
#include "files.h"
#include "internal.h"
#include "path.h"

struct vol_paths {
    char dir[PATH_MAX]; /* volumes/TENANT */
    char img[PATH_MAX];
    char mnt[PATH_MAX];
};

/* Tenants and names become path components: both are checked here again,
 * whatever their callers did. */
static int vol_paths(struct fb_core *core, const char *tenant, const char *name, struct vol_paths *p,
                     fb_error_t *err)
{
    size_t tlen = strlen(tenant);
    if (tlen == 0 ||
        tlen != strspn(tenant, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"))
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "tenant %s cannot own volumes (unusual name)", tenant);
    if (fb_volume_name_check(name, err) < 0)
        return -1;
    if (fb_snprintf(p->dir, sizeof p->dir, "%s/volumes/%s", core->cfg.state_dir, tenant) < 0 ||
        fb_snprintf(p->img, sizeof p->img, "%s/%s.img", p->dir, name) < 0 ||
        fb_snprintf(p->mnt, sizeof p->mnt, "%s/%s.mnt", p->dir, name) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "volume paths too long");
    return 0;
}

/* Whether the stored spec mounts volume name (NULL: any volume). */
static bool spec_mounts(const char *spec_json, const char *name)
{
    cleanup_json json_t *spec = json_loads(spec_json != NULL ? spec_json : "{}", 0, NULL);
    json_t *vols = json_object_get(spec, "volumes");
    size_t i;
    json_t *v;
    json_array_foreach(vols, i, v)
    {
        const char *n = json_string_value(json_object_get(v, "name"));
        if (n != NULL && (name == NULL || strcmp(n, name) == 0))
            return true;
    }
    return false;
}

/* [{"id", "state"}] of tenant's sandboxes whose spec mounts name; rows
 * being deleted are past running anything and do not count. */
static int users_of(struct fb_core *core, const char *tenant, const char *name, json_t **out, fb_error_t *err)
{
    struct fb_sandbox_row *rows = NULL;
    size_t n = 0;
    if (fb_store_sandbox_list(core->store, tenant, &rows, &n, err) < 0)
        return -1;
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].state, "deleting") != 0 && spec_mounts(rows[i].spec_json, name))
            json_array_append_new(arr, json_pack("{s:s, s:s}", "id", rows[i].id, "state", rows[i].state));
    fb_sandbox_rows_free(rows, n);
    *out = arr;
    return 0;
}

static json_t *vol_to_json(const struct fb_volume_row *row, const struct vol_paths *p, json_t *users)
{
    char created[40];
    fb_time_format(row->created_ms, created, sizeof created);
    json_t *o =
        json_pack("{s:s, s:I, s:I, s:s}", "name", row->name, "size_mb", (json_int_t)(row->size_bytes >> 20),
                  "size_bytes", (json_int_t)row->size_bytes, "created_at", created);
    struct fb_disk_usage u;
    /* usage is known while the host has it mounted (after its first use) */
    if (p != NULL && fb_volume_image_mounted(p->mnt) && fb_disk_usage_read(p->mnt, &u) == 0) {
        json_object_set_new(o, "used_bytes", json_integer((json_int_t)u.bytes_used));
        json_object_set_new(o, "used_inodes", json_integer((json_int_t)u.inodes_used));
    } else {
        json_object_set_new(o, "used_bytes", json_null());
    }
    if (users != NULL)
        json_object_set(o, "sandboxes", users);
    return o;
}

/* Mounts the volume on the host if it is not; under volume_lock. */
static int ensure_mounted_locked(const struct vol_paths *p, fb_error_t *err)
{
    if (mkdir(p->mnt, 0700) < 0 && errno != EEXIST)
        return fb_error_sys(err, "create %s", p->mnt);
    return fb_volume_image_mount(p->img, p->mnt, err);
}

/* The tenant's volume row and paths, mounted on the host. */
static int open_volume(struct fb_core *core, const char *tenant, const char *name, struct fb_volume_row *row,
                       struct vol_paths *p, fb_error_t *err)
{
    if (fb_volume_name_check(name, err) < 0)
        return -1;
    pthread_mutex_lock(&core->volume_lock);
    int rc = fb_store_volume_get(core->store, tenant, name, row, err);
    if (rc == 0)
        rc = vol_paths(core, tenant, name, p, err);
    if (rc == 0)
        rc = ensure_mounted_locked(p, err);
    pthread_mutex_unlock(&core->volume_lock);
    if (rc < 0)
        return fb_error_wrap(err, "volume %s", name);
    return 0;
}

/* What a crash between the row and the files left: no row names them. */
static void remove_files(const struct vol_paths *p)
{
    fb_volume_image_release(p->mnt);
    if (rmdir(p->mnt) < 0 && errno != ENOENT)
        fb_warn("volume: remove %s: %s", p->mnt, strerror(errno));
    if (unlink(p->img) < 0 && errno != ENOENT)
        fb_warn("volume: remove %s: %s", p->img, strerror(errno));
}

int fb_volume_create(struct fb_core *core, const char *tenant, json_t *body, json_t **out, fb_error_t *err)
{
    char name[FB_VOLUME_NAME_MAX + 1];
    uint64_t size_mb;
    if (fb_volume_spec_parse(body, name, &size_mb, err) < 0)
        return -1;
    if (!core->disk_limits)
        return fb_error_set(err, FB_ERR_UNSUPPORTED, 0, "volumes need filesystem images: %s",
                            core->disk_missing);
    struct vol_paths p;
    if (vol_paths(core, tenant, name, &p, err) < 0)
        return -1;
    struct fb_volume_row row = {.size_bytes = (int64_t)(size_mb << 20), .created_ms = fb_now_ms()};
    fb_strlcpy(row.tenant, tenant, sizeof row.tenant);
    fb_strlcpy(row.name, name, sizeof row.name);

    pthread_mutex_lock(&core->volume_lock);
    struct fb_volume_row *rows = NULL;
    size_t n = 0;
    int rc = fb_store_volume_list(core->store, tenant, &rows, &n, err);
    free(rows);
    if (rc == 0 && n >= FB_VOLUMES_PER_TENANT)
        rc = fb_error_set(err, FB_ERR_QUOTA, 0, "tenant has %zu volumes, the maximum is %d", n,
                          FB_VOLUMES_PER_TENANT);
    if (rc == 0)
        rc = fb_store_volume_insert(core->store, &row, err);
    if (rc == 0) {
        int r = fb_mkdir_p(p.dir, 0700);
        if (r < 0)
            rc = fb_error_set(err, FB_ERR_INTERNAL, -r, "create %s", p.dir);
        if (rc == 0) {
            remove_files(&p);
            if (mkdir(p.mnt, 0700) < 0)
                rc = fb_error_sys(err, "create %s", p.mnt);
        }
        if (rc == 0)
            rc = fb_volume_image_create(p.img, p.mnt, size_mb << 20, err);
        if (rc < 0) {
            remove_files(&p);
            fb_store_volume_delete(core->store, tenant, name, NULL);
        }
    }
    pthread_mutex_unlock(&core->volume_lock);
    if (rc < 0)
        return fb_error_wrap(err, "create volume %s", name);
    fb_info("volume %s created (tenant %s, %llu MiB)", name, tenant, (unsigned long long)size_mb);
    cleanup_json json_t *users = json_array();
    *out = vol_to_json(&row, &p, users);
    return 0;
}

int fb_volume_list(struct fb_core *core, const char *tenant, json_t **out, fb_error_t *err)
{
    struct fb_volume_row *rows = NULL;
    size_t n = 0;
    if (fb_store_volume_list(core->store, tenant, &rows, &n, err) < 0)
        return -1;
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        struct vol_paths p;
        cleanup_error fb_error_t perr = NULL;
        json_array_append_new(
            arr,
            vol_to_json(&rows[i], vol_paths(core, tenant, rows[i].name, &p, &perr) == 0 ? &p : NULL, NULL));
    }
    free(rows);
    *out = json_pack("{s:o}", "volumes", arr);
    return 0;
}

int fb_volume_get(struct fb_core *core, const char *tenant, const char *name, json_t **out, fb_error_t *err)
{
    struct fb_volume_row row;
    struct vol_paths p;
    if (open_volume(core, tenant, name, &row, &p, err) < 0)
        return -1;
    cleanup_json json_t *users = NULL;
    if (users_of(core, tenant, name, &users, err) < 0)
        return -1;
    *out = vol_to_json(&row, &p, users);
    return 0;
}

int fb_volume_delete(struct fb_core *core, const char *tenant, const char *name, fb_error_t *err)
{
    if (fb_volume_name_check(name, err) < 0)
        return -1;
    struct vol_paths p;
    struct fb_volume_row row;
    pthread_mutex_lock(&core->volume_lock);
    int rc = fb_store_volume_get(core->store, tenant, name, &row, err);
    if (rc == 0)
        rc = vol_paths(core, tenant, name, &p, err);
    if (rc == 0) {
        /* under core->lock: no create can insert a new user meanwhile */
        pthread_mutex_lock(&core->lock);
        cleanup_json json_t *users = NULL;
        rc = users_of(core, tenant, name, &users, err);
        if (rc == 0 && json_array_size(users) > 0) {
            char list[512] = "";
            size_t i;
            json_t *u;
            json_array_foreach(users, i, u)
            {
                size_t len = strlen(list);
                if (len + 64 >= sizeof list) {
                    snprintf(list + len, sizeof list - len, ", ...");
                    break;
                }
                snprintf(list + len, sizeof list - len, "%s%s (%s)", i > 0 ? ", " : "",
                         json_string_value(json_object_get(u, "id")),
                         json_string_value(json_object_get(u, "state")));
            }
            rc = fb_error_set(
                err, FB_ERR_CONFLICT, 0, "volume %s is mounted by sandbox%s %s: delete %s first", name,
                json_array_size(users) > 1 ? "es" : "", list, json_array_size(users) > 1 ? "them" : "it");
        }
        if (rc == 0)
            rc = fb_store_volume_delete(core->store, tenant, name, err);
        pthread_mutex_unlock(&core->lock);
    }
    /* a dying sandbox may still hold the filesystem: it goes with it */
    if (rc == 0)
        remove_files(&p);
    pthread_mutex_unlock(&core->volume_lock);
    if (rc < 0)
        return -1;
    fb_info("volume %s deleted (tenant %s)", name, tenant);
    return 0;
}

/* A client's ?path= as a path relative to the volume's root ("" for it). */
static int rel_path(const char *path, char *norm, size_t len, fb_error_t *err)
{
    if (fb_path_normalize(path != NULL ? path : "/", norm, len, err) < 0)
        return fb_error_wrap(err, "path");
    return 0;
}

int fb_volume_archive_get(struct fb_core *core, const char *tenant, const char *name, const char *path,
                          int out_fd, fb_error_t *err)
{
    char norm[FB_PATH_MAX + 1];
    struct fb_volume_row row;
    struct vol_paths p;
    if (rel_path(path, norm, sizeof norm, err) < 0 || open_volume(core, tenant, name, &row, &p, err) < 0)
        return -1;
    if (fb_volume_tar_create(p.mnt, norm + 1, out_fd, FB_ARCHIVE_MAX, err) < 0)
        return fb_error_wrap(err, "volume %s", name);
    return 0;
}

/* Member names as the check pass mapped them, relative to the volume. */
static int map_member(void *ctx, const char *member, char *out, size_t outlen, char *msg, size_t msglen)
{
    char full[FB_PATH_MAX + 1];
    cleanup_error fb_error_t e = NULL;
    if (fb_path_join_member(ctx, member, full, sizeof full, &e) < 0) {
        snprintf(msg, msglen, "archive member %.200s: %s", member, e->msg);
        return -1;
    }
    if (fb_strlcpy(out, full + 1, outlen) < 0) {
        snprintf(msg, msglen, "archive member %.200s: name too long", member);
        return -1;
    }
    return 0;
}

int fb_volume_archive_put(struct fb_core *core, const char *tenant, const char *name, const char *path,
                          const char *tar_path, json_t **out, fb_error_t *err)
{
    char base[FB_PATH_MAX + 1];
    struct fb_volume_row row;
    struct vol_paths p;
    long count = 0;
    if (rel_path(path, base, sizeof base, err) < 0 || open_volume(core, tenant, name, &row, &p, err) < 0)
        return -1;
    /* checked whole first: a bad member anywhere changes nothing */
    if (fb_archive_check(tar_path, base, FB_UID_COUNT - 1, &count, err) < 0)
        return -1;
    if (fb_volume_tar_extract(p.mnt, base + 1, tar_path, map_member, base, err) < 0)
        return fb_error_wrap(err, "volume %s", name);
    fb_info("volume %s: %ld archive members extracted at %s (tenant %s)", name, count, base, tenant);
    *out = json_pack("{s:I}", "entries", (json_int_t)count);
    fb_wire_set_bytes(*out, "path", base);
    return 0;
}

int fb_volumes_prepare(struct fb_core *core, const char *tenant, const struct fb_create_spec *spec,
                       struct fb_volume_plan *plan, struct fb_container_config *c, fb_error_t *err)
{
    plan->n = 0;
    c->volumes = plan->v;
    c->n_volumes = 0;
    for (size_t i = 0; i < spec->n_volumes; i++) {
        struct fb_volume_row row;
        struct vol_paths p;
        if (open_volume(core, tenant, spec->volumes[i].name, &row, &p, err) < 0)
            return -1;
        memcpy(plan->sources[i], p.mnt, sizeof p.mnt);
        plan->v[i].source = plan->sources[i];
        plan->v[i].target = spec->volumes[i].path;
        plan->v[i].read_only = spec->volumes[i].read_only;
        plan->n = i + 1;
    }
    c->n_volumes = plan->n;
    return 0;
}

int fb_volumes_check_locked(struct fb_core *core, const char *tenant, const char *spec_json, fb_error_t *err)
{
    cleanup_json json_t *spec = json_loads(spec_json != NULL ? spec_json : "{}", 0, NULL);
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(spec, "volumes"), i, v)
    {
        const char *n = json_string_value(json_object_get(v, "name"));
        struct fb_volume_row row;
        if (n == NULL || fb_store_volume_get(core->store, tenant, n, &row, err) < 0)
            return fb_error_wrap(err, "volumes[%zu]", i);
    }
    return 0;
}

int fb_volumes_refuse_memory(const struct fb_sandbox_row *row, const char *what, fb_error_t *err)
{
    if (!spec_mounts(row->spec_json, NULL))
        return 0;
    return fb_error_set(err, FB_ERR_CONFLICT, 0,
                        "sandbox %s mounts volumes: %s is not supported for sandboxes with volumes (their "
                        "memory state would refer to mounts a restore cannot recreate); files-only "
                        "checkpoints work",
                        row->id, what);
}

void fb_volumes_release_all(struct fb_core *core)
{
    struct fb_volume_row *rows = NULL;
    size_t n = 0;
    cleanup_error fb_error_t err = NULL;
    if (fb_store_volume_list(core->store, NULL, &rows, &n, &err) < 0)
        return;
    pthread_mutex_lock(&core->volume_lock);
    for (size_t i = 0; i < n; i++) {
        struct vol_paths p;
        cleanup_error fb_error_t perr = NULL;
        if (vol_paths(core, rows[i].tenant, rows[i].name, &p, &perr) == 0)
            fb_volume_image_release(p.mnt);
    }
    pthread_mutex_unlock(&core->volume_lock);
    free(rows);
}
