/* The memory side of sandboxes: dumping a sandbox's processes with CRIU
 * and bringing them back (hibernate and resume; memory checkpoints and
 * rollback to them, in checkpoint.c; fork, in fork.c).
 *
 * Images of a dump sit in a directory `criu/`, with forkbox-externals.json
 * among them: the host resources CRIU was told were outside the sandbox
 * (runtime/memstate.h), which a restore recreates for the new sandbox.
 * It travels with the images (an exported checkpoint carries criu/
 * verbatim) and CRIU ignores it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../runtime/cgroup.h"
#include "../runtime/container.h"
#include "../runtime/copy.h"
#include "../runtime/disk.h"
#include "../runtime/memstate.h"
#include "core.h"
#include "internal.h"

#define DUMP_TIMEOUT_MS 120000
#define RESTORE_TIMEOUT_MS 120000
#define EXT_FILE_MAX (256 * 1024)

int fb_memory_ext_write(const char *dir, const struct fb_memstate_ext *ext, size_t n, fb_error_t *err)
{
    cleanup_json json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:i, s:I}", "kind",
                                             ext[i].kind == FB_EXT_FILE ? "file" : "listen", "key",
                                             ext[i].key, "path", ext[i].rel, "flags", ext[i].flags, "pos",
                                             (json_int_t)ext[i].pos));
    cleanup_json json_t *o = json_pack("{s:i, s:O}", "version", 1, "externals", arr);
    char path[PATH_MAX];
    if (fb_snprintf(path, sizeof path, "%s/criu/" FB_EXTERNALS_FILE, dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "externals path");
    cleanup_free char *text = json_dumps(o, JSON_INDENT(1));
    if (text == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "serialise externals");
    int r = fb_write_file(path, text, strlen(text), 0600);
    if (r < 0)
        return fb_error_set(err, r == -ENOSPC ? FB_ERR_TOO_LARGE : FB_ERR_INTERNAL, -r, "write %s", path);
    return 0;
}

int fb_memory_ext_read(const char *dir, struct fb_memstate_ext *ext, size_t *n, fb_error_t *err)
{
    *n = 0;
    char path[PATH_MAX];
    if (fb_snprintf(path, sizeof path, "%s/criu/" FB_EXTERNALS_FILE, dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "externals path");
    cleanup_free char *text = NULL;
    size_t len = 0;
    int r = fb_read_file(path, EXT_FILE_MAX, &text, &len);
    if (r == -ENOENT)
        return fb_error_set(err, FB_ERR_CONFLICT, ENOENT,
                            "the checkpoint's memory images hold no " FB_EXTERNALS_FILE
                            " (not made by forkbox?): it cannot be restored with its processes");
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "read %s", path);
    cleanup_json json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    json_t *arr = json_object_get(o, "externals");
    if (!json_is_object(o) || json_integer_value(json_object_get(o, "version")) != 1 || !json_is_array(arr) ||
        json_array_size(arr) > FB_MEMSTATE_EXT_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: not a version 1 externals list", path);
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        struct fb_memstate_ext *x = &ext[i];
        memset(x, 0, sizeof *x);
        const char *kind = json_string_value(json_object_get(v, "kind"));
        const char *key = json_string_value(json_object_get(v, "key"));
        const char *rel = json_string_value(json_object_get(v, "path"));
        x->kind = kind && strcmp(kind, "file") == 0     ? FB_EXT_FILE
                  : kind && strcmp(kind, "listen") == 0 ? FB_EXT_LISTEN
                                                        : 0;
        x->flags = (int)json_integer_value(json_object_get(v, "flags"));
        x->pos = json_integer_value(json_object_get(v, "pos"));
        if (x->kind == 0 || key == NULL || rel == NULL || fb_strlcpy(x->key, key, sizeof x->key) < 0 ||
            fb_strlcpy(x->rel, rel, sizeof x->rel) < 0 || !fb_memstate_rel_valid(x->kind, x->rel) ||
            x->pos < 0 || (x->flags & ~(O_ACCMODE | O_APPEND)) != 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: entry %zu is invalid", path, i);
        /* keys are what CRIU matches: file[hex:hex] or socket[digits] */
        const char *open_b = strchr(x->key, '[');
        if (open_b == NULL || x->key[strlen(x->key) - 1] != ']' ||
            strspn(open_b + 1, "0123456789abcdef:") != strlen(open_b + 1) - 1 ||
            (strncmp(x->key, "file[", 5) != 0 && strncmp(x->key, "socket:[", 8) != 0))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: entry %zu has an invalid key", path, i);
    }
    *n = json_array_size(arr);
    return 0;
}

/* One record file of a keeper, copied beside the images as
 * forkbox-record.PID.NAME.  The layer copy holds them too; these travel
 * with an exported checkpoint, whose layer carries only the sandbox's own
 * files (import puts them back into the new layer). */
static int copy_record(int from_dir, const char *pid, const char *name, int to_dir, fb_error_t *err)
{
    char leaf[96];
    snprintf(leaf, sizeof leaf, FB_RECORD_PREFIX "%s.%s", pid, name);
    cleanup_close int in = openat(from_dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0)
        return errno == ENOENT ? 0 : fb_error_sys(err, "open record %s/%s", pid, name);
    cleanup_close int out = openat(to_dir, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0)
        return fb_error_set(err, errno == ENOSPC ? FB_ERR_TOO_LARGE : FB_ERR_INTERNAL, errno, "create %s",
                            leaf);
    return fb_copy_sparse(in, out, err);
}

static int copy_records(const char *sandbox_dir, const char *images, const struct fb_memstate_ext *ext,
                        size_t n, fb_error_t *err)
{
    cleanup_close int to = open(images, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (to < 0)
        return fb_error_sys(err, "open %s", images);
    for (size_t i = 0; i < n; i++) {
        /* one pass per record dir, at its "out" */
        const char *rel = ext[i].rel;
        size_t len = strlen(rel);
        if (ext[i].kind != FB_EXT_FILE || len < 4 || strcmp(rel + len - 4, "/out") != 0)
            continue;
        char dir[PATH_MAX], pid[16];
        const char *p = rel + strlen("layer/procs/");
        size_t plen = strcspn(p, "/");
        if (plen == 0 || plen >= sizeof pid ||
            fb_snprintf(dir, sizeof dir, "%s/%.*s", sandbox_dir, (int)(len - 4), rel) < 0)
            continue;
        memcpy(pid, p, plen);
        pid[plen] = '\0';
        cleanup_close int from = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (from < 0)
            return fb_error_sys(err, "open %s", dir);
        static const char *const names[] = {"meta.json", "out", "idx", "status"};
        for (size_t k = 0; k < 4; k++)
            if (copy_record(from, pid, names[k], to, err) < 0)
                return -1;
    }
    return 0;
}

int fb_memory_quiesce(struct fb_core *core, const struct fb_sandbox_row *row, fb_error_t *err)
{
    if (fb_gate_close(core, row->id, err) < 0)
        return -1;
    struct fb_core_paths paths;
    struct fb_container_config cc;
    fb_core_container_config(core, row, "", &paths, &cc);
    int64_t deadline = fb_mono_ms() + FB_GATE_WAIT_MS;
    int clean = 0;
    for (;;) {
        int busy = fb_memstate_busy(&cc, (pid_t)row->init_pid, err);
        /* twice clean, 20 ms apart: a connection made just before the
         * gate closed and not yet accepted by init shows by then */
        if (busy == 0 && ++clean == 2)
            return 0;
        if (busy == 0) {
            struct timespec gap = {0, 20 * 1000 * 1000};
            nanosleep(&gap, NULL);
            continue;
        }
        clean = 0;
        if (busy < 0 || fb_mono_ms() > deadline) {
            fb_gate_open(core, row->id);
            if (busy < 0)
                return -1;
            return fb_error_set(err, FB_ERR_CONFLICT, EBUSY,
                                "a command is still running in sandbox %s after %d s: memory captures wait "
                                "for commands and file transfers to end (background processes are fine)",
                                row->id, FB_GATE_WAIT_MS / 1000);
        }
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int fb_memory_dump(struct fb_core *core, const struct fb_sandbox_row *row, const char *dir,
                   bool leave_running, bool records, fb_error_t *err)
{
    char criu[PATH_MAX], images[PATH_MAX];
    if (fb_core_criu_path(core, criu, sizeof criu, err) < 0)
        return -1;
    if (fb_snprintf(images, sizeof images, "%s/criu", dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "images path");
    if (mkdir(images, 0700) < 0)
        return fb_error_set(err, errno == ENOSPC ? FB_ERR_TOO_LARGE : FB_ERR_INTERNAL, errno, "create %s",
                            images);
    struct fb_core_paths paths;
    struct fb_container_config cc;
    fb_core_container_config(core, row, "", &paths, &cc);
    struct fb_memstate_ext *ext = calloc(FB_MEMSTATE_EXT_MAX, sizeof *ext);
    if (ext == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    cleanup_free struct fb_memstate_ext *ext_owner = ext;
    size_t n = 0;
    struct fb_memstate_dump d = {
        .criu = criu,
        .images = images,
        .c = &cc,
        .init_pid = (pid_t)row->init_pid,
        .leave_running = leave_running,
        .timeout_ms = DUMP_TIMEOUT_MS,
    };
    int64_t t0 = fb_mono_us();
    if (fb_memstate_dump(&d, ext, &n, err) < 0) {
        /* kept for a post-mortem: the first lines are in *err */
        char log[PATH_MAX + 16], keep[PATH_MAX + 16];
        if (fb_snprintf(log, sizeof log, "%s/dump.log", images) == 0 &&
            fb_snprintf(keep, sizeof keep, "%s/dump-failed.log", paths.sandbox_dir) == 0)
            rename(log, keep);
        return fb_error_wrap(err, "dump the processes of %s", row->id);
    }
    fb_debug("sandbox %s: criu dump took %lld us (%zu externals)", row->id, (long long)(fb_mono_us() - t0),
             n);
    if (fb_memory_ext_write(dir, ext, n, err) < 0 ||
        (records && copy_records(paths.sandbox_dir, images, ext, n, err) < 0))
        return -1;
    return 0;
}

int fb_memory_restore(struct fb_core *core, struct fb_sandbox_row *row, const char *rootfs,
                      const struct fb_create_spec *spec, const char *dir, fb_error_t *err)
{
    char criu[PATH_MAX], images[PATH_MAX];
    if (fb_core_criu_path(core, criu, sizeof criu, err) < 0)
        return -1;
    if (fb_snprintf(images, sizeof images, "%s/criu", dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "images path");
    struct fb_memstate_ext *ext = calloc(FB_MEMSTATE_EXT_MAX, sizeof *ext);
    if (ext == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    cleanup_free struct fb_memstate_ext *ext_owner = ext;
    size_t n = 0;
    if (fb_memory_ext_read(dir, ext, &n, err) < 0)
        return -1;
    struct fb_core_paths paths;
    struct fb_container_config cc;
    fb_core_container_config(core, row, rootfs, &paths, &cc);
    struct fb_cgroup_limits limits = {
        .cpus = spec->res.cpus, .memory_bytes = spec->res.memory_mb << 20, .pids = spec->res.pids};
    cc.limits = &limits;
    cc.disk_bytes = core->disk_limits ? spec->res.disk_mb << 20 : 0;
    cc.reuse_layer = true;
    cc.keep_records = true;
    cc.layer_uid_from = spec->layer_uid_from;
    struct fb_memstate_restore r = {
        .criu = criu,
        .images = images,
        .c = &cc,
        .ext = ext,
        .n_ext = n,
        .timeout_ms = RESTORE_TIMEOUT_MS,
    };
    struct fb_container ct = {0};
    int64_t t0 = fb_mono_us();
    if (fb_memstate_restore(&r, &ct, err) < 0)
        return fb_error_wrap(err, "restore the processes of %s", row->id);
    fb_debug("sandbox %s: criu restore took %lld us", row->id, (long long)(fb_mono_us() - t0));
    if (fb_net_attach(core, row, ct.init_pid, spec->network_mode, err) < 0) {
        fb_container_kill(ct.init_pid);
        fb_cgroup_destroy(&core->cgroups, row->id, NULL);
        return -1;
    }
    row->init_pid = ct.init_pid;
    return 0;
}

/* The dir a hibernated sandbox's images live in. */
static int hibernate_dir(const struct fb_core_paths *paths, char *out, size_t len, fb_error_t *err)
{
    if (fb_snprintf(out, len, "%s/hibernated", paths->sandbox_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "hibernate path");
    return 0;
}

#define HIBERNATED_REASON "hibernated: memory and processes are on disk; POST .../resume brings them back"

int fb_sandbox_hibernate(struct fb_core *core, const char *tenant, const char *id, json_t **out,
                         fb_error_t *err)
{
    if (fb_core_criu_require(core, err) < 0)
        return fb_error_wrap(err, "hibernate needs CRIU");
    pthread_mutex_lock(&core->pause_lock);
    struct fb_sandbox_row row = {0};
    int rc = fb_store_sandbox_get(core->store, tenant, id, &row, err);
    if (rc == 0 && strcmp(row.state, "deleting") == 0)
        rc = fb_error_set(err, FB_ERR_NOT_FOUND, 0, "sandbox %s not found", id);
    bool already = rc == 0 && strcmp(row.state, "hibernated") == 0;
    if (rc == 0 && !already && strcmp(row.state, "running") != 0 && strcmp(row.state, "paused") != 0)
        rc = fb_error_set(err, FB_ERR_CONFLICT, 0, "sandbox %s is %s", id, row.state);
    if (rc == 0 && !already)
        rc = fb_volumes_refuse_memory(&row, "hibernation", err);
    struct fb_core_paths paths;
    struct fb_container_config cc;
    char dir[PATH_MAX];
    if (rc == 0 && !already) {
        fb_core_container_config(core, &row, "", &paths, &cc);
        rc = hibernate_dir(&paths, dir, sizeof dir, err);
        if (rc == 0) {
            fb_rm_rf(dir);
            if (mkdir(dir, 0700) < 0)
                rc = fb_error_sys(err, "create %s", dir);
        }
        /* a paused sandbox's cgroup stays frozen: CRIU dumps it as it is;
         * a command still running is waited for */
        bool gated = rc == 0 && fb_memory_quiesce(core, &row, err) == 0;
        if (rc == 0 && !gated)
            rc = -1;
        if (rc == 0 && fb_memory_dump(core, &row, dir, false, false, err) < 0) {
            fb_rm_rf(dir);
            rc = -1;
        }
        if (gated)
            fb_gate_open(core, row.id);
        if (rc == 0) {
            /* the dump ended every process: what is left is theirs to let go */
            fb_container_kill((pid_t)row.init_pid);
            fb_net_detach(core, &row);
            fb_cgroup_destroy(&core->cgroups, row.id, NULL);
            char layer[PATH_MAX];
            if (core->disk_limits && fb_snprintf(layer, sizeof layer, "%s/layer", paths.sandbox_dir) == 0)
                fb_disk_release(layer);
            fb_rm_rf(paths.run_dir);
            fb_strlcpy(row.state, "hibernated", sizeof row.state);
            fb_strlcpy(row.state_reason, HIBERNATED_REASON, sizeof row.state_reason);
            row.init_pid = 0;
            rc = fb_store_sandbox_update(core->store, &row, err);
        }
    }
    pthread_mutex_unlock(&core->pause_lock);
    fb_sandbox_row_clear(&row);
    if (rc < 0)
        return fb_error_wrap(err, "hibernate sandbox %s", id);
    if (!already)
        fb_info("sandbox %s hibernated", id);
    return fb_sandbox_get(core, tenant, id, out, err);
}

int fb_memory_resume_locked(struct fb_core *core, struct fb_sandbox_row *row, fb_error_t *err)
{
    cleanup_spec struct fb_create_spec spec = {0};
    cleanup_json json_t *sj = json_loads(row->spec_json ? row->spec_json : "{}", 0, NULL);
    char rootfs[PATH_MAX], dir[PATH_MAX];
    struct fb_core_paths paths;
    struct fb_container_config cc;
    fb_core_container_config(core, row, "", &paths, &cc);
    if (fb_create_spec_from_json(sj, &spec, err) < 0 ||
        fb_template_rootfs(core, row->template_name, rootfs, sizeof rootfs, err) < 0 ||
        hibernate_dir(&paths, dir, sizeof dir, err) < 0)
        return -1;
    if (fb_memory_restore(core, row, rootfs, &spec, dir, err) < 0) {
        char layer[PATH_MAX];
        if (core->disk_limits && fb_snprintf(layer, sizeof layer, "%s/layer", paths.sandbox_dir) == 0)
            fb_disk_release(layer);
        return -1;
    }
    fb_rm_rf(dir);
    fb_strlcpy(row->state, "running", sizeof row->state);
    row->state_reason[0] = '\0';
    if (fb_store_sandbox_update(core->store, row, err) < 0)
        return -1;
    fb_info("sandbox %s resumed from hibernation (init pid %lld)", row->id, (long long)row->init_pid);
    return 0;
}
