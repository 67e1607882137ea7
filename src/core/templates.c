/* Templates: the default one (built once with debootstrap, in the
 * background so the daemon answers meanwhile), imported root filesystem
 * tars and images, and what lists, inspects and deletes them. */
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
#include "../runtime/template.h"
#include "core.h"
#include "image.h"
#include "internal.h"
#include "layers.h"

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

/* A template as clients see it; counts (may be NULL) tells which of its
 * layers other templates share. */
static json_t *template_json(struct fb_core *core, const struct fb_template_row *row, json_t *counts)
{
    char created[40];
    fb_time_format(row->created_ms, created, sizeof created);
    json_t *o = json_pack("{s:s, s:s, s:s, s:I}", "name", row->name, "source", row->source, "created_at",
                          created, "size_bytes", (json_int_t)row->size_bytes);
    if (o == NULL)
        return NULL;
    if (row->base[0])
        json_object_set_new(o, "base", json_string(row->base));
    cleanup_json json_t *arr = json_loads(row->layers_json ? row->layers_json : "[]", 0, NULL);
    json_t *layers = json_array();
    int64_t shared = 0, own = 0;
    size_t k;
    json_t *v;
    json_array_foreach(arr, k, v)
    {
        const char *d = json_string_value(v);
        if (d == NULL)
            continue;
        int64_t size = fb_layer_size(core, d);
        json_int_t users = counts ? json_integer_value(json_object_get(counts, d)) : 1;
        *(users > 1 ? &shared : &own) += size;
        json_array_append_new(layers, json_pack("{s:s, s:I, s:I}", "digest", d, "size_bytes",
                                                (json_int_t)size, "templates", users));
    }
    json_object_set_new(o, "layers", layers);
    if (json_array_size(layers) > 0) {
        json_object_set_new(o, "shared_bytes", json_integer(shared));
        json_object_set_new(o, "unique_bytes", json_integer(own));
    }
    json_t *cfg = json_loads(row->config_json ? row->config_json : "{}", 0, NULL);
    json_object_set_new(o, "config", cfg ? cfg : json_object());
    return o;
}

/* Names starting with '.' are a build's intermediate images: never shown. */
static bool template_hidden(const char *name)
{
    return name[0] == '.';
}

int fb_templates_list(struct fb_core *core, json_t **out, fb_error_t *err)
{
    struct fb_template_row *rows = NULL;
    size_t n = 0;
    if (fb_store_template_list(core->store, &rows, &n, err) < 0)
        return -1;
    cleanup_json json_t *counts = fb_layer_counts(rows, n);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        if (!template_hidden(rows[i].name))
            json_array_append_new(arr, template_json(core, &rows[i], counts));
    fb_template_rows_free(rows, n);
    pthread_mutex_lock(&core->lock);
    if (core->default_state == FB_TPL_BUILDING)
        json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "name", DEFAULT_TEMPLATE, "source",
                                             "debootstrap", "state", "building"));
    pthread_mutex_unlock(&core->lock);
    *out = json_pack("{s:o}", "templates", arr);
    return 0;
}

/* Who still uses template name: sandboxes (any state but deleting) and
 * checkpoints, as {"sandboxes": [...], "checkpoints": [...]}. */
static json_t *template_users(struct fb_core *core, const char *name, fb_error_t *err)
{
    struct fb_sandbox_row *rows = NULL;
    size_t n = 0;
    if (fb_store_sandbox_list(core->store, NULL, &rows, &n, err) < 0)
        return NULL;
    json_t *sbx = json_array();
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].template_name, name) == 0 && strcmp(rows[i].tenant, FB_POOL_TENANT) != 0 &&
            strcmp(rows[i].state, "deleting") != 0)
            json_array_append_new(sbx, json_string(rows[i].id));
    fb_sandbox_rows_free(rows, n);
    struct fb_checkpoint_row *cps = NULL;
    size_t m = 0;
    if (fb_store_checkpoint_list(core->store, NULL, NULL, &cps, &m, err) < 0) {
        json_decref(sbx);
        return NULL;
    }
    json_t *ck = json_array();
    for (size_t i = 0; i < m; i++)
        if (strcmp(cps[i].template_name, name) == 0)
            json_array_append_new(ck, json_string(cps[i].id));
    free(cps);
    return json_pack("{s:o, s:o}", "sandboxes", sbx, "checkpoints", ck);
}

int fb_template_unused(struct fb_core *core, const char *name, const char *then, fb_error_t *err)
{
    cleanup_json json_t *users = template_users(core, name, err);
    if (users == NULL)
        return -1;
    json_t *sbx = json_object_get(users, "sandboxes"), *ck = json_object_get(users, "checkpoints");
    size_t ns = json_array_size(sbx), nc = json_array_size(ck);
    if (ns + nc == 0)
        return 0;
    const char *first = json_string_value(json_array_get(ns ? sbx : ck, 0));
    return fb_error_set(err, FB_ERR_CONFLICT, 0,
                        "template %s is used by %zu sandbox(es) and %zu checkpoint(s) (%s%s); %s", name, ns,
                        nc, first, ns + nc > 1 ? ", ..." : "", then);
}

int fb_template_inspect(struct fb_core *core, const char *name, json_t **out, fb_error_t *err)
{
    if (fb_template_name_check(name, err) < 0)
        return -1;
    struct fb_template_row *rows = NULL;
    size_t n = 0;
    if (fb_store_template_list(core->store, &rows, &n, err) < 0)
        return -1;
    json_t *o = NULL;
    cleanup_json json_t *counts = fb_layer_counts(rows, n);
    for (size_t i = 0; i < n && o == NULL; i++)
        if (strcmp(rows[i].name, name) == 0)
            o = template_json(core, &rows[i], counts);
    fb_template_rows_free(rows, n);
    if (o == NULL)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "template %s not found", name);
    json_t *users = template_users(core, name, err);
    if (users == NULL) {
        json_decref(o);
        return -1;
    }
    json_object_set_new(o, "used_by", users);
    *out = o;
    return 0;
}

int fb_template_assemble(struct fb_core *core, const char *dir, const char *base_rootfs, json_t *layers,
                         fb_error_t *err)
{
    char tmp[PATH_MAX], rootfs[PATH_MAX];
    if (fb_snprintf(tmp, sizeof tmp, "%s/rootfs.assembling", dir) < 0 ||
        fb_snprintf(rootfs, sizeof rootfs, "%s/rootfs", dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "template path");
    fb_rm_rf(tmp);
    int r = fb_mkdir_p(tmp, 0755);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "create %s", tmp);
    cleanup_close int dst = open(tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dst < 0)
        return fb_error_sys(err, "open %s", tmp);
    int rc = 0;
    if (base_rootfs != NULL) {
        cleanup_close int src = open(base_rootfs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        rc = src < 0 ? fb_error_sys(err, "open %s", base_rootfs) : fb_tree_link(src, dst, err);
    }
    size_t i;
    json_t *v;
    json_array_foreach(layers, i, v)
    {
        if (rc == 0)
            rc = fb_layer_apply(core, json_string_value(v), dst, false, err);
    }
    if (rc == 0 && rename(tmp, rootfs) < 0)
        rc = fb_error_sys(err, "rename %s", tmp);
    if (rc < 0)
        fb_rm_rf(tmp);
    return rc;
}

/* Registers a template whose rootfs is in place under its dir. */
static int register_layered(struct fb_core *core, const char *name, const char *source, const char *base,
                            json_t *layers, json_t *config, fb_error_t *err)
{
    struct fb_template_row row = {.created_ms = fb_now_ms()};
    fb_strlcpy(row.name, name, sizeof row.name);
    fb_strlcpy(row.source, source, sizeof row.source);
    fb_strlcpy(row.base, base ? base : "", sizeof row.base);
    size_t i;
    json_t *v;
    json_array_foreach(layers, i, v) row.size_bytes += fb_layer_size(core, json_string_value(v));
    cleanup_free char *lj = json_dumps(layers, JSON_COMPACT);
    cleanup_free char *cj = json_dumps(config, JSON_COMPACT | JSON_SORT_KEYS);
    row.layers_json = lj;
    row.config_json = cj;
    if (lj == NULL || cj == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "template row");
    return fb_store_template_put(core->store, &row, err);
}

int fb_template_register(struct fb_core *core, const char *name, const char *source, const char *base,
                         const char *base_rootfs, json_t *layers, json_t *config, fb_error_t *err)
{
    char dir[PATH_MAX];
    if (template_dir(core, name, dir, sizeof dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "template path");
    int r = fb_mkdir_p(dir, 0755);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "create %s", dir);
    if (fb_template_assemble(core, dir, base_rootfs, layers, err) < 0 ||
        register_layered(core, name, source, base, layers, config, err) < 0) {
        fb_rm_rf(dir);
        return -1;
    }
    return 0;
}

static int template_exists(struct fb_core *core, const char *name)
{
    struct fb_template_row row;
    cleanup_error fb_error_t e = NULL;
    int got = fb_store_template_get(core->store, name, &row, &e);
    fb_template_row_clear(&row);
    return got == 0 || (strcmp(name, DEFAULT_TEMPLATE) == 0 && core->default_state == FB_TPL_BUILDING);
}

static int import_rootfs(struct fb_core *core, const char *name, const char *tar_path, fb_error_t *err)
{
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
    return 0;
}

static int import_image(struct fb_core *core, const char *name, const char *tar_path,
                        enum fb_image_format fmt, const char *ref, fb_error_t *err)
{
    struct fb_image img;
    pthread_rwlock_rdlock(&core->layers_lock);
    int rc = fb_image_load(core, tar_path, fmt, ref, &img, err);
    if (rc == 0 && template_exists(core, name))
        rc = fb_error_set(err, FB_ERR_CONFLICT, 0, "template %s already exists", name);
    if (rc == 0)
        rc = fb_template_register(core, name, fmt == FB_IMAGE_OCI ? "oci" : "docker-archive", NULL, NULL,
                                  img.layers, img.config, err);
    pthread_rwlock_unlock(&core->layers_lock);
    if (rc < 0)
        fb_layers_drop_unused(core, img.fresh);
    fb_image_clear(&img);
    return rc;
}

int fb_template_import(struct fb_core *core, const char *name, const char *tar_path, const char *ref,
                       json_t **out, fb_error_t *err)
{
    if (fb_template_name_check(name, err) < 0)
        return -1;
    if (template_exists(core, name))
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "template %s already exists", name);
    enum fb_image_format fmt;
    if (fb_image_detect(tar_path, &fmt, err) < 0)
        return fb_error_wrap(err, "import template %s", name);
    int64_t t0 = fb_mono_ms();
    int rc = fmt == FB_IMAGE_NONE ? import_rootfs(core, name, tar_path, err)
                                  : import_image(core, name, tar_path, fmt, ref, err);
    if (rc < 0)
        return fmt == FB_IMAGE_NONE ? -1 : fb_error_wrap(err, "import image as template %s", name);
    if (fb_template_inspect(core, name, out, err) < 0)
        return -1;
    fb_info("template %s imported (%s, %.2f s)", name, json_string_value(json_object_get(*out, "source")),
            (double)(fb_mono_ms() - t0) / 1000.0);
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
    if (fb_template_unused(core, name, "delete those first", err) < 0)
        return -1;
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

int fb_template_defaults(struct fb_core *core, struct fb_create_spec *spec, fb_error_t *err)
{
    struct fb_template_row row;
    cleanup_error fb_error_t e = NULL;
    if (fb_store_template_get(core->store, spec->template_name, &row, &e) < 0)
        return 0; /* a missing template is reported by the create itself */
    cleanup_json json_t *cfg = json_loads(row.config_json ? row.config_json : "{}", 0, NULL);
    fb_template_row_clear(&row);
    if (!json_is_object(cfg))
        return 0;
    json_t *env = json_object_get(cfg, "env");
    if (json_array_size(env) > 0) {
        json_t *merged = fb_env_from_list(env, spec->env);
        if (merged == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "env");
        json_decref(spec->env);
        spec->env = merged;
        if (json_object_size(merged) > FB_ENV_MAX)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "env: the template's and the request's together exceed %d variables",
                                FB_ENV_MAX);
    }
    const char *wd = json_string_value(json_object_get(cfg, "workdir"));
    if (!spec->workdir_set && wd != NULL && wd[0] == '/' && strlen(wd) < sizeof spec->workdir)
        fb_strlcpy(spec->workdir, wd, sizeof spec->workdir);
    const char *user = json_string_value(json_object_get(cfg, "user"));
    if (spec->user[0] == '\0' && user != NULL && user[0] != '\0') {
        char u[FB_USER_MAX + 1];
        fb_strlcpy(u, user, sizeof u);
        char *colon = strchr(u, ':'); /* "user:group": the group comes from passwd */
        if (colon)
            *colon = '\0';
        if (fb_user_check(u, err) < 0)
            return fb_error_wrap(err, "the template's user");
        fb_strlcpy(spec->user, u, sizeof spec->user);
    }
    return 0;
}
