/* Files-only checkpoints of a sandbox's writable layer, rollback to one,
 * and new sandboxes made from one.
 *
 * A checkpoint is a full, sparse copy of the layer taken at one point in
 * time: the sandbox's cgroup is frozen, its layer filesystem synced, the
 * ext4 image (or, without loop devices, the layer's directory tree) copied
 * and the cgroup thawed.  Copies are independent of each other: deleting a
 * parent never breaks a child or a sandbox made from it, at the cost of
 * each checkpoint holding all the data the layer held.  Checkpoints live in
 * STATE_DIR/checkpoints/<id>/ and outlive their sandbox. */
#include <dirent.h>
#include <errno.h>
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
#include "../runtime/disk.h"
#include "../runtime/reflink.h"
#include "core.h"
#include "internal.h"

/* kept free on the state filesystem beyond a copy's own size */
#define SPACE_MARGIN (16ll << 20)

static void row_clearp(struct fb_sandbox_row *r)
{
    fb_sandbox_row_clear(r);
}
#define cleanup_row __attribute__((cleanup(row_clearp)))

static json_t *ckpt_to_json(const struct fb_checkpoint_row *c)
{
    char created[40];
    fb_time_format(c->created_ms, created, sizeof created);
    return json_pack("{s:s, s:s, s:o, s:b, s:o, s:s, s:I, s:s}", "id", c->id, "sandbox", c->sandbox, "name",
                     c->name[0] ? json_string(c->name) : json_null(), "memory", c->memory, "parent",
                     c->parent[0] ? json_string(c->parent) : json_null(), "template", c->template_name,
                     "size_bytes", (json_int_t)c->size_bytes, "created_at", created);
}

static int ckpt_path(struct fb_core *core, const char *leaf, char *out, size_t len, fb_error_t *err)
{
    if (fb_snprintf(out, len, "%s/checkpoints%s%s", core->cfg.state_dir, leaf[0] ? "/" : "", leaf) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "checkpoint path");
    return 0;
}

/* The layer of a sandbox dir: its image when there is one, else its dir. */
static bool layer_is_image(const char *sandbox_dir)
{
    char img[PATH_MAX];
    struct stat st;
    return fb_snprintf(img, sizeof img, "%s/layer.img", sandbox_dir) == 0 && lstat(img, &st) == 0 &&
           S_ISREG(st.st_mode);
}

/* Refuses a copy of `need` bytes the state filesystem has no room for. */
static int check_space(const char *dir, int64_t need, fb_error_t *err)
{
    struct statvfs vfs;
    if (statvfs(dir, &vfs) < 0)
        return fb_error_sys(err, "statvfs %s", dir);
    long long avail = (long long)vfs.f_bavail * (long long)vfs.f_frsize;
    if ((long long)need + SPACE_MARGIN > avail) {
        /* btrfs hands back deleted blocks at its next commit: force it once */
        cleanup_close int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0 && syncfs(fd) == 0 && fstatvfs(fd, &vfs) == 0)
            avail = (long long)vfs.f_bavail * (long long)vfs.f_frsize;
    }
    if ((long long)need + SPACE_MARGIN > avail)
        return fb_error_set(err, FB_ERR_TOO_LARGE, ENOSPC,
                            "not enough space on the host's state filesystem: the copy needs %lld bytes "
                            "(plus %lld kept free), %lld are available",
                            (long long)need, SPACE_MARGIN, avail);
    return 0;
}

/* Copies the layer found at src_dir (layer.img or layer/) to dst_dir,
 * which exists and is empty; the image as dst_dir/<img_name> (a reflink
 * where storage allows), the tree as dst_dir/<dir_name>/. */
static int copy_layer(const char *src_dir, bool image, const char *dst_dir, const char *img_name,
                      const char *dir_name, uid_t from, uid_t to, bool reflink, fb_error_t *err)
{
    char src[PATH_MAX], dst[PATH_MAX];
    if (fb_snprintf(src, sizeof src, "%s/%s", src_dir, image ? "layer.img" : "layer") < 0 ||
        fb_snprintf(dst, sizeof dst, "%s/%s", dst_dir, image ? img_name : dir_name) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "layer path");
    if (image) {
        cleanup_close int in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0)
            return fb_error_sys(err, "open %s", src);
        cleanup_close int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (out < 0)
            return fb_error_sys(err, "create %s", dst);
        if (fb_layer_clone(in, out, reflink, SPACE_MARGIN, NULL, err) < 0)
            return -1;
        if (fsync(out) < 0)
            return fb_error_sys(err, "sync %s", dst);
        return 0;
    }
    cleanup_close int in = open(src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0)
        return fb_error_sys(err, "open %s", src);
    if (mkdir(dst, 0700) < 0)
        return fb_error_sys(err, "create %s", dst);
    cleanup_close int out = open(dst, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (out < 0)
        return fb_error_sys(err, "open %s", dst);
    return fb_copy_tree(in, out, from, to, FB_UID_COUNT, err);
}

/* Bytes a layer copy will take (what the source uses on disk; a reflink
 * of an image takes next to none). */
static int64_t layer_used(struct fb_core *core, const char *dir, bool image)
{
    if (image && core->storage.reflink)
        return 0;
    char p[PATH_MAX];
    if (fb_snprintf(p, sizeof p, "%s/%s", dir, image ? "layer.img" : "layer") < 0)
        return -1;
    if (!image)
        return fb_du(p);
    struct stat st;
    return lstat(p, &st) == 0 ? (int64_t)st.st_blocks * 512 : -1;
}

/* Sets the checkpoint a sandbox's next checkpoint descends from. */
static int set_head(struct fb_core *core, struct fb_sandbox_row *row, const char *cid, fb_error_t *err)
{
    cleanup_json json_t *spec = json_loads(row->spec_json ? row->spec_json : "{}", 0, NULL);
    if (!json_is_object(spec))
        return fb_error_set(err, FB_ERR_INTERNAL, EINVAL, "sandbox %s: stored spec unreadable", row->id);
    json_object_set_new(spec, "checkpoint", json_string(cid));
    char *s = json_dumps(spec, JSON_COMPACT);
    if (s == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "serialise spec");
    free(row->spec_json);
    row->spec_json = s;
    return fb_store_sandbox_update(core->store, row, err);
}

static void head_of(const struct fb_sandbox_row *row, char *out, size_t len)
{
    cleanup_json json_t *spec = json_loads(row->spec_json ? row->spec_json : "{}", 0, NULL);
    const char *h = json_string_value(json_object_get(spec, "checkpoint"));
    fb_strlcpy(out, h && fb_checkpoint_id_valid(h) ? h : "", len);
}

static int parse_body(json_t *body, const char **name, bool *memory, fb_error_t *err)
{
    *name = NULL;
    *memory = false;
    if (body == NULL || json_is_null(body))
        return 0;
    if (!json_is_object(body))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "request body must be a JSON object");
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        if (strcmp(k, "name") == 0) {
            if (json_is_null(v))
                continue;
            *name = json_string_value(v);
            if (*name == NULL || json_string_length(v) != strlen(*name) || strlen(*name) >= FB_NAME_MAX)
                return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "name: must be a string of at most %d bytes",
                                    FB_NAME_MAX - 1);
            for (const unsigned char *p = (const unsigned char *)*name; *p; p++)
                if (*p < 0x20 || *p == 0x7f)
                    return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "name: must not hold control characters");
        } else if (strcmp(k, "memory") == 0) {
            if (!json_is_boolean(v))
                return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "memory: must be a boolean");
            *memory = json_is_true(v);
        } else {
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "unknown field \"%s\" (known: name, memory)", k);
        }
    }
    return 0;
}

static int capture_locked(struct fb_core *core, const struct fb_sandbox_row *row, const char *sandbox_dir,
                          bool image, bool memory, bool records, const char *tmp, fb_error_t *err);

/* Freezes (running) / syncs / copies / (dumps) / thaws; under pause_lock;
 * a memory capture first waits for requests being served to end. */
int fb_checkpoint_capture(struct fb_core *core, const struct fb_sandbox_row *row, const char *sandbox_dir,
                          bool memory, bool records, const char *dst, fb_error_t *err)
{
    if (memory && fb_memory_quiesce(core, row, err) < 0)
        return -1;
    int rc = capture_locked(core, row, sandbox_dir, layer_is_image(sandbox_dir), memory, records, dst, err);
    if (memory)
        fb_gate_open(core, row->id);
    return rc;
}

static int capture_locked(struct fb_core *core, const struct fb_sandbox_row *row, const char *sandbox_dir,
                          bool image, bool memory, bool records, const char *tmp, fb_error_t *err)
{
    bool froze = false;
    if (strcmp(row->state, "running") == 0 && fb_cgroup_can_freeze(&core->cgroups)) {
        if (fb_cgroup_freeze(&core->cgroups, row->id, true, err) < 0)
            return fb_error_wrap(err, "freeze sandbox %s", row->id);
        froze = true;
    }
    int rc = 0;
    if (image) {
        /* what the sandbox wrote reaches the image before it is read */
        char layer[PATH_MAX];
        cleanup_close int lfd = -1;
        if (fb_snprintf(layer, sizeof layer, "%s/layer", sandbox_dir) < 0 ||
            (lfd = open(layer, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 || syncfs(lfd) < 0)
            rc = fb_error_sys(err, "sync the layer of %s", row->id);
    }
    if (rc == 0)
        rc = copy_layer(sandbox_dir, image, tmp, "layer.img", "layer", 0, 0, core->storage.reflink, err);
    /* the processes are dumped at the same frozen instant as the files; a
     * failed dump leaves the sandbox running as it was */
    if (rc == 0 && memory)
        rc = fb_memory_dump(core, row, tmp, true, records, err);
    if (froze) {
        cleanup_error fb_error_t terr = NULL;
        if (fb_cgroup_freeze(&core->cgroups, row->id, false, &terr) < 0)
            fb_warn("sandbox %s: thaw after checkpoint: %s", row->id, terr->msg);
    }
    return rc;
}

int fb_checkpoint_create(struct fb_core *core, const char *tenant, const char *id, json_t *body, json_t **out,
                         fb_error_t *err)
{
    const char *name;
    bool memory;
    if (parse_body(body, &name, &memory, err) < 0)
        return -1;
    if (memory && fb_core_criu_require(core, err) < 0)
        return fb_error_wrap(err, "memory checkpoints need CRIU");
    cleanup_row struct fb_sandbox_row row = {0};
    if (fb_core_live_row(core, tenant, id, &row, err) < 0)
        return -1;
    fb_sandbox_row_clear(&row);

    struct fb_checkpoint_row ck = {0};
    char hex[17];
    if (fb_random_hex(hex, 8) < 0)
        return fb_error_sys(err, "random id");
    snprintf(ck.id, sizeof ck.id, "ckpt_%s", hex);

    char base[PATH_MAX], tmp[PATH_MAX], final[PATH_MAX];
    if (ckpt_path(core, "", base, sizeof base, err) < 0 ||
        ckpt_path(core, ck.id, final, sizeof final, err) < 0 ||
        fb_snprintf(tmp, sizeof tmp, "%s/tmp.XXXXXX", base) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "checkpoint path");
    int r = fb_mkdir_p(base, 0700);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "create %s", base);

    /* one at a time with pauses and rollbacks: the freeze is ours alone */
    pthread_mutex_lock(&core->pause_lock);
    int rc = fb_store_sandbox_get(core->store, tenant, id, &row, err);
    if (rc == 0 && strcmp(row.state, "running") != 0 && strcmp(row.state, "paused") != 0)
        rc = fb_error_set(err, strcmp(row.state, "deleting") == 0 ? FB_ERR_NOT_FOUND : FB_ERR_CONFLICT, 0,
                          "sandbox %s is %s", id, row.state);
    if (rc == 0 && memory)
        rc = fb_volumes_refuse_memory(&row, "a memory checkpoint", err);
    struct fb_core_paths paths;
    struct fb_container_config cc;
    bool image = false, made = false;
    if (rc == 0) {
        fb_core_container_config(core, &row, "", &paths, &cc);
        image = layer_is_image(paths.sandbox_dir);
        int64_t need = layer_used(core, paths.sandbox_dir, image);
        /* the images take about what the processes hold in memory */
        struct fb_cgroup_usage u = {0};
        cleanup_error fb_error_t uerr = NULL;
        if (memory && fb_cgroup_usage_read(&core->cgroups, row.id, &u, &uerr) == 0 && need >= 0)
            need += (int64_t)u.memory_bytes;
        if (need < 0)
            rc = fb_error_sys(err, "measure the layer of %s", id);
        else
            rc = check_space(base, need, err);
    }
    if (rc == 0) {
        if (mkdtemp(tmp) == NULL)
            rc = fb_error_set(err, errno == ENOSPC ? FB_ERR_TOO_LARGE : FB_ERR_INTERNAL, errno, "create %s",
                              tmp);
        else
            made = true;
    }
    if (rc == 0 && memory && strcmp(row.state, "running") != 0)
        rc = fb_error_set(err, FB_ERR_CONFLICT, 0, "sandbox %s is %s: a memory checkpoint needs it running",
                          id, row.state);
    if (rc == 0)
        rc = fb_checkpoint_capture(core, &row, paths.sandbox_dir, memory, true, tmp, err);
    if (rc == 0) {
        int64_t used = fb_du(tmp);
        ck.size_bytes = used > 0 ? used : 0;
        fb_strlcpy(ck.tenant, row.tenant, sizeof ck.tenant);
        fb_strlcpy(ck.sandbox, row.id, sizeof ck.sandbox);
        fb_strlcpy(ck.name, name ? name : "", sizeof ck.name);
        fb_strlcpy(ck.template_name, row.template_name, sizeof ck.template_name);
        fb_strlcpy(ck.layer_kind, image ? "image" : "dir", sizeof ck.layer_kind);
        head_of(&row, ck.parent, sizeof ck.parent);
        ck.uid_base = row.uid_base;
        ck.created_ms = fb_now_ms();
        ck.memory = memory;
        if (rename(tmp, final) < 0)
            rc = fb_error_sys(err, "rename %s", tmp);
        else
            made = false;
    }
    if (rc == 0 && fb_store_checkpoint_insert(core->store, &ck, err) < 0) {
        fb_rm_rf(final);
        rc = -1;
    }
    if (rc == 0) {
        cleanup_error fb_error_t herr = NULL;
        if (set_head(core, &row, ck.id, &herr) < 0)
            fb_warn("sandbox %s: record checkpoint %s as its head: %s", id, ck.id, herr->msg);
    }
    if (made)
        fb_rm_rf(tmp);
    pthread_mutex_unlock(&core->pause_lock);
    if (rc < 0)
        return fb_error_wrap(err, "checkpoint sandbox %s", id);
    fb_info("sandbox %s: checkpoint %s (%s, %lld bytes)", id, ck.id, ck.layer_kind, (long long)ck.size_bytes);
    *out = ckpt_to_json(&ck);
    fb_checkpoint_usage_add(core, &ck, *out);
    return 0;
}

int fb_checkpoint_list(struct fb_core *core, const char *tenant, const char *id, json_t **out,
                       fb_error_t *err)
{
    struct fb_checkpoint_row *rows = NULL;
    size_t n = 0;
    if (fb_store_checkpoint_list(core->store, tenant, id, &rows, &n, err) < 0)
        return -1;
    if (n == 0) {
        /* a sandbox that is gone keeps its checkpoints; one never seen has none */
        cleanup_row struct fb_sandbox_row row = {0};
        if (fb_store_sandbox_get(core->store, tenant, id, &row, err) < 0) {
            free(rows);
            return -1;
        }
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *o = ckpt_to_json(&rows[i]);
        fb_checkpoint_usage_add(core, &rows[i], o);
        json_array_append_new(arr, o);
    }
    int64_t total = fb_checkpoint_usage_total(core, rows, n);
    free(rows);
    *out = json_pack("{s:o, s:o}", "checkpoints", arr, "total_bytes",
                     total >= 0 ? json_integer((json_int_t)total) : json_null());
    return 0;
}

int fb_checkpoint_get(struct fb_core *core, const char *tenant, const char *cid, json_t **out,
                      fb_error_t *err)
{
    struct fb_checkpoint_row ck;
    if (!fb_checkpoint_id_valid(cid))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "checkpoint not found");
    if (fb_store_checkpoint_get(core->store, tenant, cid, &ck, err) < 0)
        return -1;
    *out = ckpt_to_json(&ck);
    fb_checkpoint_usage_add(core, &ck, *out);
    return 0;
}

int fb_checkpoint_delete(struct fb_core *core, const char *tenant, const char *cid, fb_error_t *err)
{
    struct fb_checkpoint_row ck;
    if (!fb_checkpoint_id_valid(cid))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "checkpoint not found");
    char dir[PATH_MAX];
    if (ckpt_path(core, cid, dir, sizeof dir, err) < 0)
        return -1;
    /* not while a rollback or create copies from it */
    pthread_mutex_lock(&core->pause_lock);
    int rc = fb_store_checkpoint_get(core->store, tenant, cid, &ck, err);
    if (rc == 0)
        rc = fb_store_checkpoint_delete(core->store, cid, err);
    pthread_mutex_unlock(&core->pause_lock);
    if (rc < 0)
        return -1;
    int r = fb_rm_rf(dir);
    if (r < 0)
        fb_warn("checkpoint %s: remove %s: %s", cid, dir, strerror(-r));
    fb_info("checkpoint %s deleted", cid);
    return 0;
}

/* The checkpoint cid of tenant, fit for a sandbox of template on this host. */
static int usable_checkpoint(struct fb_core *core, const char *tenant, const char *cid,
                             const char *template_name, struct fb_checkpoint_row *ck, char *dir,
                             size_t dirlen, fb_error_t *err)
{
    if (!fb_checkpoint_id_valid(cid))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "checkpoint not found");
    if (fb_store_checkpoint_get(core->store, tenant, cid, ck, err) < 0)
        return -1;
    if (template_name != NULL && strcmp(template_name, ck->template_name) != 0)
        return fb_error_set(err, FB_ERR_CONFLICT, 0,
                            "checkpoint %s is of template %s, the sandbox's template is %s", cid,
                            ck->template_name, template_name);
    bool image = strcmp(ck->layer_kind, "image") == 0;
    if (image != core->disk_limits)
        return fb_error_set(err, FB_ERR_CONFLICT, 0,
                            "checkpoint %s holds a layer %s, but this host's sandboxes have %s", cid,
                            image ? "image" : "directory", core->disk_limits ? "images" : "directories");
    if (ckpt_path(core, cid, dir, dirlen, err) < 0)
        return -1;
    return check_space(dir, layer_used(core, dir, image), err);
}

/* Rollback, once the new layer is at layer.new(.img): ends the sandbox's
 * processes, swaps the layer in and starts the sandbox again. */
static int restart(struct fb_core *core, struct fb_sandbox_row *row, bool image, uid_t layer_uid_from,
                   const char *memory_dir, fb_error_t *err)
{
    cleanup_spec struct fb_create_spec spec = {0};
    cleanup_json json_t *sj = json_loads(row->spec_json ? row->spec_json : "{}", 0, NULL);
    char rootfs[PATH_MAX];
    if (fb_create_spec_from_json(sj, &spec, err) < 0 ||
        fb_template_rootfs(core, row->template_name, rootfs, sizeof rootfs, err) < 0)
        return -1;
    struct fb_core_paths paths;
    struct fb_container_config cc;
    fb_core_container_config(core, row, rootfs, &paths, &cc);
    fb_net_detach(core, row);
    if (fb_cgroup_can_freeze(&core->cgroups)) {
        cleanup_error fb_error_t terr = NULL;
        fb_cgroup_freeze(&core->cgroups, row->id, false, &terr);
    }
    /* every process ends: keepers too, so followers see the end */
    fb_container_kill((pid_t)row->init_pid);
    fb_cgroup_destroy(&core->cgroups, row->id, NULL);
    char layer[PATH_MAX], next[PATH_MAX], old[PATH_MAX], img[PATH_MAX];
    if (fb_snprintf(layer, sizeof layer, "%s/layer", paths.sandbox_dir) < 0 ||
        fb_snprintf(next, sizeof next, "%s/layer.new", paths.sandbox_dir) < 0 ||
        fb_snprintf(old, sizeof old, "%s/layer.old", paths.sandbox_dir) < 0 ||
        fb_snprintf(img, sizeof img, "%s/layer.img", paths.sandbox_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "layer path");
    if (image) {
        fb_disk_release(layer);
        if (rename(next, img) < 0)
            return fb_error_sys(err, "replace %s", img);
    } else {
        if (rename(layer, old) < 0 || rename(next, layer) < 0)
            return fb_error_sys(err, "replace %s", layer);
        fb_rm_rf(old);
    }
    fb_rm_rf(paths.run_dir); /* init binds a fresh socket */
    if (memory_dir != NULL) {
        /* the processes come back from the checkpoint's images */
        spec.layer_uid_from = layer_uid_from != 0 ? layer_uid_from : (uint32_t)row->uid_base;
        return fb_memory_restore(core, row, rootfs, &spec, memory_dir, err);
    }
    struct fb_cgroup_limits limits = {
        .cpus = spec.res.cpus, .memory_bytes = spec.res.memory_mb << 20, .pids = spec.res.pids};
    cc.limits = &limits;
    cc.disk_bytes = image ? (uint64_t)spec.res.disk_mb << 20 : 0;
    cc.reuse_layer = true;
    cc.layer_uid_from = layer_uid_from;
    struct fb_container ct = {0};
    cleanup_free struct fb_volume_plan *plan = calloc(1, sizeof *plan);
    if (plan == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    if (fb_volumes_prepare(core, row->tenant, &spec, plan, &cc, err) < 0 ||
        fb_container_start(&cc, &ct, err) < 0)
        return -1;
    if (fb_core_make_workdir(ct.sock_path, spec.workdir, err) < 0 ||
        fb_net_attach(core, row, ct.init_pid, spec.network_mode, err) < 0) {
        fb_container_kill(ct.init_pid);
        fb_cgroup_destroy(&core->cgroups, row->id, NULL);
        return -1;
    }
    row->init_pid = ct.init_pid;
    return 0;
}

int fb_sandbox_rollback(struct fb_core *core, const char *tenant, const char *id, const char *cid,
                        json_t **out, fb_error_t *err)
{
    cleanup_row struct fb_sandbox_row row = {0};
    if (fb_core_live_row(core, tenant, id, &row, err) < 0)
        return -1;
    fb_sandbox_row_clear(&row);
    struct fb_checkpoint_row ck;
    char dir[PATH_MAX];
    pthread_mutex_lock(&core->pause_lock);
    int rc = fb_store_sandbox_get(core->store, tenant, id, &row, err);
    if (rc == 0 && strcmp(row.state, "running") != 0 && strcmp(row.state, "paused") != 0 &&
        strcmp(row.state, "stopped") != 0)
        rc = fb_error_set(err, strcmp(row.state, "deleting") == 0 ? FB_ERR_NOT_FOUND : FB_ERR_CONFLICT, 0,
                          "sandbox %s is %s", id, row.state);
    if (rc == 0)
        rc = usable_checkpoint(core, tenant, cid, row.template_name, &ck, dir, sizeof dir, err);
    if (rc == 0 && ck.memory)
        rc = fb_volumes_refuse_memory(&row, "a rollback to a memory checkpoint", err);
    bool image = strcmp(ck.layer_kind, "image") == 0;
    struct fb_core_paths paths;
    struct fb_container_config cc;
    char next[PATH_MAX] = "";
    if (rc == 0) {
        fb_core_container_config(core, &row, "", &paths, &cc);
        if (fb_snprintf(next, sizeof next, "%s/layer.new", paths.sandbox_dir) < 0)
            rc = fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "layer path");
    }
    /* the copy comes first: if it fails, the sandbox is untouched */
    if (rc == 0) {
        fb_rm_rf(next);
        rc = copy_layer(dir, image, paths.sandbox_dir, "layer.new", "layer.new", (uid_t)ck.uid_base,
                        (uid_t)row.uid_base, core->storage.reflink, err);
        if (rc < 0)
            fb_rm_rf(next);
    }
    if (rc == 0) {
        /* requests meanwhile get 409 with this reason.  Not "starting": a
         * daemon that dies here must find a stopped sandbox to roll back
         * again, not an unfinished create to throw away. */
        fb_strlcpy(row.state, "stopped", sizeof row.state);
        fb_snprintf(
            row.state_reason, sizeof row.state_reason,
            "rolling back to checkpoint %s (if this stays, the rollback was interrupted: roll back again)",
            cid);
        rc = fb_store_sandbox_update(core->store, &row, err);
        if (rc < 0)
            fb_rm_rf(next);
    }
    if (rc == 0) {
        if (restart(core, &row, image, image ? (uid_t)ck.uid_base : 0, ck.memory ? dir : NULL, err) < 0) {
            fb_strlcpy(row.state, "stopped", sizeof row.state);
            fb_snprintf(row.state_reason, sizeof row.state_reason,
                        "rollback to checkpoint %s failed: %s; delete the sandbox", cid,
                        err != NULL && *err != NULL ? (*err)->msg : "error");
            row.init_pid = 0;
            fb_store_sandbox_update(core->store, &row, NULL);
            rc = -1;
        } else {
            fb_strlcpy(row.state, "running", sizeof row.state);
            row.state_reason[0] = '\0';
            rc = set_head(core, &row, cid, err);
        }
    }
    pthread_mutex_unlock(&core->pause_lock);
    if (rc < 0)
        return fb_error_wrap(err, "roll sandbox %s back", id);
    fb_info("sandbox %s rolled back to checkpoint %s (init pid %lld)", id, cid, (long long)row.init_pid);
    return fb_sandbox_get(core, tenant, id, out, err);
}

int fb_checkpoint_new_sandbox(struct fb_core *core, const char *tenant, const struct fb_create_spec *spec,
                              struct fb_sandbox_row *row, fb_error_t *err)
{
    struct fb_checkpoint_row ck;
    char dir[PATH_MAX], rootfs[PATH_MAX];
    pthread_mutex_lock(&core->pause_lock);
    int rc = usable_checkpoint(core, tenant, spec->checkpoint, NULL, &ck, dir, sizeof dir, err);
    if (rc == 0 && ck.memory && spec->n_volumes > 0)
        rc = fb_error_set(err, FB_ERR_CONFLICT, 0,
                          "checkpoint %s holds memory state: a sandbox restored from it cannot mount volumes "
                          "(use a files-only checkpoint)",
                          ck.id);
    bool image = strcmp(ck.layer_kind, "image") == 0;
    /* the template and disk size are the checkpoint's */
    struct fb_create_spec s = *spec;
    fb_strlcpy(s.template_name, ck.template_name, sizeof s.template_name);
    if (rc == 0 && image) {
        char img[PATH_MAX];
        struct stat st;
        if (fb_snprintf(img, sizeof img, "%s/layer.img", dir) < 0 || lstat(img, &st) < 0)
            rc = fb_error_sys(err, "checkpoint %s: image", ck.id);
        else
            s.res.disk_mb = (int64_t)(st.st_size >> 20);
    }
    if (rc == 0)
        rc = fb_template_rootfs(core, s.template_name, rootfs, sizeof rootfs, err);
    if (rc == 0 &&
        (fb_core_new_row(tenant, &s, row, err) < 0 || fb_core_reserve_row(core, row, true, err) < 0))
        rc = -1;
    struct fb_core_paths paths;
    struct fb_container_config cc;
    if (rc == 0) {
        fb_core_container_config(core, row, rootfs, &paths, &cc);
        int r = fb_mkdir_p(paths.sandbox_dir, 0700);
        if (r < 0)
            rc = fb_error_set(err, FB_ERR_INTERNAL, -r, "create %s", paths.sandbox_dir);
        if (rc == 0)
            rc = copy_layer(dir, image, paths.sandbox_dir, "layer.img", "layer", (uid_t)ck.uid_base,
                            (uid_t)row->uid_base, core->storage.reflink, err);
        if (rc < 0) {
            fb_rm_rf(paths.sandbox_dir);
            fb_store_sandbox_delete(core->store, row->id, NULL);
        }
    }
    pthread_mutex_unlock(&core->pause_lock);
    if (rc < 0)
        return -1;
    /* images still hold the old uids (shifted once mounted); trees were
     * shifted while copied */
    s.layer_uid_from = image ? (uint32_t)ck.uid_base : (uint32_t)row->uid_base;
    if (ck.memory) {
        /* not under pause_lock: deleting the checkpoint meanwhile removes
         * the images under the restore, which then fails cleanly */
        if (fb_memory_restore(core, row, rootfs, &s, dir, err) < 0) {
            struct fb_core_paths p2;
            struct fb_container_config c2;
            fb_core_container_config(core, row, rootfs, &p2, &c2);
            fb_container_destroy(&c2, 0, NULL);
            fb_store_sandbox_delete(core->store, row->id, NULL);
            return fb_error_wrap(err, "create sandbox from checkpoint %s", ck.id);
        }
        fb_strlcpy(row->state, "running", sizeof row->state);
        if (fb_store_sandbox_update(core->store, row, err) < 0)
            return -1;
    } else if (fb_core_start_row(core, row, rootfs, &s, err) < 0) {
        return -1;
    }
    fb_info("sandbox %s created from checkpoint %s (tenant %s)", row->id, ck.id, tenant);
    return 0;
}

void fb_checkpoint_remove_orphans(struct fb_core *core)
{
    char base[PATH_MAX];
    if (ckpt_path(core, "", base, sizeof base, NULL) < 0)
        return;
    cleanup_dir DIR *d = opendir(base);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        bool tmp = strncmp(e->d_name, "tmp.", 4) == 0;
        if (!tmp && !fb_checkpoint_id_valid(e->d_name))
            continue;
        struct fb_checkpoint_row ck;
        cleanup_error fb_error_t gerr = NULL;
        if (!tmp && fb_store_checkpoint_get(core->store, NULL, e->d_name, &ck, &gerr) == 0)
            continue;
        if (!tmp && gerr->kind != FB_ERR_NOT_FOUND)
            continue;
        char p[PATH_MAX];
        if (fb_snprintf(p, sizeof p, "%s/%s", base, e->d_name) < 0)
            continue;
        fb_warn("checkpoint dir %s has no record (an interrupted checkpoint): removing it", p);
        fb_rm_rf(p);
    }
}

int fb_checkpoint_copy_layer(struct fb_core *core, const char *src_dir, const char *dst_dir, uid_t from,
                             uid_t to, fb_error_t *err)
{
    return copy_layer(src_dir, layer_is_image(src_dir), dst_dir, "layer.img", "layer", from, to,
                      core->storage.reflink, err);
}

int fb_checkpoint_check_space(struct fb_core *core, const char *sandbox_dir, int copies, int64_t extra,
                              fb_error_t *err)
{
    int64_t one = layer_used(core, sandbox_dir, layer_is_image(sandbox_dir));
    if (one < 0)
        return fb_error_sys(err, "measure the layer of %s", sandbox_dir);
    return check_space(sandbox_dir, one * copies + extra, err);
}
