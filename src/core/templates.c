/* Templates: the default one (built once with debootstrap, in the
 * background so the daemon answers meanwhile) and imported rootfs tars. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../runtime/template.h"
#include "core.h"
#include "internal.h"

#define DEFAULT_TEMPLATE "default"

static int template_dir(struct fb_core *core, const char *name, char *out, size_t len)
{
    return fb_snprintf(out, len, "%s/templates/%s", core->cfg.state_dir, name);
}

static int register_template(struct fb_core *core, const char *name, const char *source, const char *rootfs,
                             fb_error_t *err)
{
    struct fb_template_row row = {0};
    fb_strlcpy(row.name, name, sizeof row.name);
    fb_strlcpy(row.source, source, sizeof row.source);
    row.created_ms = fb_now_ms();
    row.size_bytes = fb_du(rootfs);
    return fb_store_template_put(core->store, &row, err);
}

static void *build_default(void *arg)
{
    struct fb_core *core = arg;
    char dir[PATH_MAX], rootfs[PATH_MAX], tmp[PATH_MAX];
    cleanup_error fb_error_t err = NULL;
    template_dir(core, DEFAULT_TEMPLATE, dir, sizeof dir);
    fb_snprintf(rootfs, sizeof rootfs, "%s/rootfs", dir);
    fb_snprintf(tmp, sizeof tmp, "%s/rootfs.building", dir);
    fb_rm_rf(tmp);
    int r = fb_mkdir_p(dir, 0755);
    int64_t t0 = fb_mono_ms();
    if (r < 0)
        fb_error_set(&err, FB_ERR_INTERNAL, -r, "create %s", dir);
    else if (fb_template_debootstrap(tmp, core->cfg.cache_dir, &err) == 0 && rename(tmp, rootfs) < 0)
        fb_error_sys(&err, "rename %s", tmp);
    if (err == NULL)
        register_template(core, DEFAULT_TEMPLATE, "debootstrap", rootfs, &err);
    pthread_mutex_lock(&core->lock);
    if (err == NULL) {
        core->default_state = FB_TPL_READY;
        fb_info("default template ready after %.1f s", (double)(fb_mono_ms() - t0) / 1000.0);
    } else {
        core->default_state = FB_TPL_FAILED;
        fb_strlcpy(core->default_error, err->msg, sizeof core->default_error);
        fb_errorf("default template build failed: %s", err->msg);
    }
    pthread_mutex_unlock(&core->lock);
    return NULL;
}

int fb_core_templates_init(struct fb_core *core, fb_error_t *err)
{
    char dir[PATH_MAX], rootfs[PATH_MAX];
    template_dir(core, DEFAULT_TEMPLATE, dir, sizeof dir);
    fb_snprintf(rootfs, sizeof rootfs, "%s/rootfs", dir);
    struct stat st;
    if (stat(rootfs, &st) == 0 && S_ISDIR(st.st_mode)) {
        struct fb_template_row row;
        cleanup_error fb_error_t e = NULL;
        int got = fb_store_template_get(core->store, DEFAULT_TEMPLATE, &row, &e);
        fb_template_row_clear(&row);
        if (got < 0 && register_template(core, DEFAULT_TEMPLATE, "debootstrap", rootfs, err) < 0)
            return -1;
        core->default_state = FB_TPL_READY;
        return 0;
    }
    if (!core->cfg.build_default) {
        core->default_state = FB_TPL_MISSING;
        return 0;
    }
    core->default_state = FB_TPL_BUILDING;
    if (pthread_create(&core->builder, NULL, build_default, core) != 0)
        return fb_error_sys(err, "start template build");
    core->builder_started = true;
    return 0;
}

void fb_core_templates_stop(struct fb_core *core)
{
    if (core->builder_started)
        pthread_join(core->builder, NULL);
    core->builder_started = false;
}

int fb_template_rootfs(struct fb_core *core, const char *name, char *out, size_t outlen, fb_error_t *err)
{
    if (strcmp(name, DEFAULT_TEMPLATE) == 0) {
        pthread_mutex_lock(&core->lock);
        enum fb_template_state st = core->default_state;
        char msg[512];
        fb_strlcpy(msg, core->default_error, sizeof msg);
        pthread_mutex_unlock(&core->lock);
        if (st == FB_TPL_BUILDING)
            return fb_error_set(err, FB_ERR_UNAVAILABLE, 0,
                                "the default template is still being built (first start); retry shortly");
        if (st == FB_TPL_FAILED)
            return fb_error_set(err, FB_ERR_UNAVAILABLE, 0, "the default template could not be built: %s",
                                msg);
    }
    struct fb_template_row row;
    cleanup_error fb_error_t e = NULL;
    int got = fb_store_template_get(core->store, name, &row, &e);
    fb_template_row_clear(&row);
    if (got < 0)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "template %s not found", name);
    char dir[PATH_MAX];
    if (template_dir(core, name, dir, sizeof dir) < 0 || fb_snprintf(out, outlen, "%s/rootfs", dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "template path");
    return 0;
}

static json_t *template_json(const struct fb_template_row *row)
{
    char created[40];
    fb_time_format(row->created_ms, created, sizeof created);
    return json_pack("{s:s, s:s, s:s, s:I}", "name", row->name, "source", row->source, "created_at", created,
                     "size_bytes", (json_int_t)row->size_bytes);
}

int fb_templates_list(struct fb_core *core, json_t **out, fb_error_t *err)
{
    struct fb_template_row *rows = NULL;
    size_t n = 0;
    if (fb_store_template_list(core->store, &rows, &n, err) < 0)
        return -1;
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, template_json(&rows[i]));
    fb_template_rows_free(rows, n);
    pthread_mutex_lock(&core->lock);
    if (core->default_state == FB_TPL_BUILDING)
        json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "name", DEFAULT_TEMPLATE, "source",
                                             "debootstrap", "state", "building"));
    pthread_mutex_unlock(&core->lock);
    *out = json_pack("{s:o}", "templates", arr);
    return 0;
}

int fb_template_import(struct fb_core *core, const char *name, const char *tar_path, json_t **out,
                       fb_error_t *err)
{
    if (fb_template_name_check(name, err) < 0)
        return -1;
    struct fb_template_row row;
    cleanup_error fb_error_t e = NULL;
    int got = fb_store_template_get(core->store, name, &row, &e);
    fb_template_row_clear(&row);
    if (got == 0 || (strcmp(name, DEFAULT_TEMPLATE) == 0 && core->default_state == FB_TPL_BUILDING))
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "template %s already exists", name);
    char dir[PATH_MAX], rootfs[PATH_MAX], tmp[PATH_MAX];
    if (template_dir(core, name, dir, sizeof dir) < 0 ||
        fb_snprintf(rootfs, sizeof rootfs, "%s/rootfs", dir) < 0 ||
        fb_snprintf(tmp, sizeof tmp, "%s/rootfs.importing", dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "template path");
    fb_rm_rf(tmp);
    fb_rm_rf(rootfs);
    int r = fb_mkdir_p(dir, 0755);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "create %s", dir);
    if (fb_template_extract(tar_path, tmp, err) < 0) {
        fb_rm_rf(dir);
        return fb_error_wrap(err, "import template %s", name);
    }
    if (rename(tmp, rootfs) < 0) {
        fb_rm_rf(dir);
        return fb_error_sys(err, "rename %s", tmp);
    }
    if (register_template(core, name, "rootfs", rootfs, err) < 0) {
        fb_rm_rf(dir);
        return -1;
    }
    if (fb_store_template_get(core->store, name, &row, err) < 0)
        return -1;
    fb_info("template %s imported (%lld bytes)", name, (long long)row.size_bytes);
    *out = template_json(&row);
    fb_template_row_clear(&row);
    return 0;
}

int fb_template_delete(struct fb_core *core, const char *name, fb_error_t *err)
{
    if (fb_template_name_check(name, err) < 0)
        return -1;
    struct fb_template_row row;
    if (fb_store_template_get(core->store, name, &row, err) < 0)
        return -1;
    fb_template_row_clear(&row);
    struct fb_sandbox_row *rows = NULL;
    size_t n = 0;
    if (fb_store_sandbox_list(core->store, NULL, &rows, &n, err) < 0)
        return -1;
    size_t users = 0;
    for (size_t i = 0; i < n; i++)
        users += strcmp(rows[i].template_name, name) == 0 && strcmp(rows[i].tenant, FB_POOL_TENANT) != 0 &&
                 strcmp(rows[i].state, "deleting") != 0;
    fb_sandbox_rows_free(rows, n);
    if (users > 0)
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "template %s is used by %zu sandbox(es)", name, users);
    if (fb_store_template_delete(core->store, name, err) < 0)
        return -1;
    if (strcmp(name, DEFAULT_TEMPLATE) == 0) {
        /* warm sandboxes run on it: they go first, and none is refilled
         * once the template is gone from the store */
        pthread_mutex_lock(&core->lock);
        core->default_state = FB_TPL_MISSING;
        pthread_mutex_unlock(&core->lock);
        fb_pool_drain(core);
    }
    char dir[PATH_MAX];
    if (template_dir(core, name, dir, sizeof dir) == 0)
        fb_rm_rf(dir);
    return 0;
}
