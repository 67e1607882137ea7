/* Running a Dockerfile: a stage root filesystem is assembled by hard links
 * (the FROM template), each step's layer is stacked onto it, and the stage
 * becomes the template at the end.  Nothing from the context or from a
 * RUN is ever interpreted by the host beyond the layer rules. */
#include "build.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <linux/openat2.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/text.h"
#include "../common/util.h"
#include "../common/wire.h"
#include "buildcopy.h"
#include "core.h"
#include "exec.h"
#include "export.h"
#include "internal.h"
#include "layers.h"
#include "layertar.h"

#define OUTPUT_TAIL 4096
#define PASSWD_MAX (1 << 20)
#define STAGE_PREFIX ".build-"

/* names being built: a second build of one waits for nothing, it is refused */
static pthread_mutex_t building_lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *building;

static bool name_reserve(const char *name)
{
    pthread_mutex_lock(&building_lock);
    if (building == NULL)
        building = json_object();
    bool ok = building != NULL && json_object_get(building, name) == NULL &&
              json_object_set_new(building, name, json_true()) == 0;
    pthread_mutex_unlock(&building_lock);
    return ok;
}

static void name_release(const char *name)
{
    pthread_mutex_lock(&building_lock);
    json_object_del(building, name);
    if (json_object_size(building) == 0) {
        json_decref(building);
        building = NULL;
    }
    pthread_mutex_unlock(&building_lock);
}

void fb_build_clear(struct fb_build *b)
{
    if (b->reserved)
        name_release(b->name);
    if (b->context_fd >= 0)
        close(b->context_fd);
    if (b->context_path[0])
        unlink(b->context_path);
    json_decref(b->build_args);
    json_decref(b->allow);
    json_decref(b->base_layers);
    fb_dockerfile_clear(&b->df);
    memset(b, 0, sizeof *b);
    b->context_fd = -1;
}

/* ---- the context -------------------------------------------------------- */

static void rd_freep(struct archive **a)
{
    if (*a)
        archive_read_free(*a);
}

static const char *strip_dot(const char *p)
{
    while (p[0] == '.' && p[1] == '/')
        p += 2;
    while (p[0] == '/')
        p++;
    return p;
}

int fb_build_context_file(int context_fd, const char *path, char **text, size_t *len, fb_error_t *err)
{
    *text = NULL;
    *len = 0;
    if (lseek(context_fd, 0, SEEK_SET) < 0)
        return fb_error_sys(err, "rewind the context");
    __attribute__((cleanup(rd_freep))) struct archive *a = archive_read_new();
    if (a == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "libarchive");
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    if (archive_read_open_fd(a, context_fd, 1 << 16) != ARCHIVE_OK)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "the build context is not a tar archive: %s",
                            archive_error_string(a));
    const char *want = strip_dot(path);
    for (;;) {
        struct archive_entry *ae;
        int r = archive_read_next_header(a, &ae);
        if (r == ARCHIVE_EOF)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "the build context has no %.200s", path);
        if (r < ARCHIVE_WARN)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "corrupt build context: %s",
                                archive_error_string(a));
        const char *name = archive_entry_pathname(ae);
        if (name == NULL || strcmp(strip_dot(name), want) != 0)
            continue;
        if (archive_entry_filetype(ae) != AE_IFREG)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%.200s in the context is not a regular file",
                                path);
        int64_t size = archive_entry_size(ae);
        if (size < 0 || size > FB_BUILD_DOCKERFILE_MAX)
            return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "%.200s is larger than %d bytes", path,
                                FB_BUILD_DOCKERFILE_MAX);
        char *buf = malloc((size_t)size + 1);
        if (buf == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "dockerfile");
        la_ssize_t n = archive_read_data(a, buf, (size_t)size);
        if (n != (la_ssize_t)size) {
            free(buf);
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "truncated build context at %.200s", path);
        }
        buf[size] = '\0';
        *text = buf;
        *len = (size_t)size;
        return 0;
    }
}

/* ---- preparing ---------------------------------------------------------- */

static json_t *base_config(void *ctx, const char *name, fb_error_t *err)
{
    struct fb_core *core = ctx;
    struct fb_template_row row;
    if (fb_store_template_get(core->store, name, &row, err) < 0 || name[0] == '.') {
        fb_template_row_clear(&row);
        return NULL;
    }
    json_t *cfg = json_loads(row.config_json ? row.config_json : "{}", 0, NULL);
    fb_template_row_clear(&row);
    if (cfg == NULL)
        fb_error_set(err, FB_ERR_INTERNAL, 0, "template %s has an unreadable config", name);
    return cfg;
}

int fb_build_prepare(struct fb_core *core, struct fb_build *b, const char *text, size_t len,
                     const char *default_from, fb_error_t *err)
{
    if (fb_template_name_check(b->name, err) < 0)
        return -1;
    struct fb_df_opts o = {
        .build_args = b->build_args, .default_from = default_from, .base_config = base_config, .ctx = core};
    if (fb_dockerfile_parse(text, len, &o, &b->df, err) < 0)
        return -1;
    const char *base = b->df.base;
    b->base_layers = json_array();
    if (strcmp(base, "scratch") != 0) {
        struct fb_template_row row;
        if (fb_template_rootfs(core, base, b->base_rootfs, sizeof b->base_rootfs, err) < 0 ||
            fb_store_template_get(core->store, base, &row, err) < 0)
            return fb_error_wrap(err, "FROM %s", base);
        json_decref(b->base_layers);
        b->base_layers = json_loads(row.layers_json ? row.layers_json : "[]", 0, NULL);
        /* a template rebuilt or re-imported under the same name is another base */
        snprintf(b->base_identity, sizeof b->base_identity, "%s@%lld", base, (long long)row.created_ms);
        b->base_bytes = json_array_size(b->base_layers) == 0 ? row.size_bytes : 0;
        fb_template_row_clear(&row);
        if (b->base_layers == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "template %s has unreadable layers", base);
    } else {
        snprintf(b->base_identity, sizeof b->base_identity, "scratch");
    }
    if (fb_template_unused(core, b->name, "it cannot be replaced", err) < 0)
        return -1;
    if (!name_reserve(b->name))
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "template %s is being built already", b->name);
    b->reserved = true;
    return 0;
}

/* ---- running ------------------------------------------------------------ */

#define BUILD_KEY_FILE "build.key"

struct run {
    struct fb_core *core;
    char build_key[65]; /* the whole build's inputs: an unchanged rebuild has nothing to do */
    struct fb_build *b;
    const struct fb_build_sink *sink;
    char stage[PATH_MAX]; /* STATE_DIR/templates/.build-RAND */
    char rootfs[PATH_MAX];
    int rootfs_fd;
    json_t *layers; /* the new ones, lowest first */
    char key[65];   /* chained cache key so far */
    char tail[OUTPUT_TAIL];
    size_t tail_len;
    int cached_steps;
};

static void emit(struct run *r, json_t *ev)
{
    if (ev != NULL)
        r->sink->event(r->sink->ctx, ev);
}

/* The step event of steps[i], counting it when the cache answered it. */
static void emit_step(struct run *r, size_t i, bool cached)
{
    const struct fb_df_step *s = &r->b->df.steps[i];
    r->cached_steps += cached;
    emit(r, json_pack("{s:s, s:i, s:i, s:i, s:s, s:b}", "type", "step", "step", (int)i + 1, "of",
                      (int)r->b->df.nsteps, "line", (int)s->line, "instruction",
                      s->text ? s->text : fb_df_op_name(s->op), "cached", cached));
}

static void key_chain(struct run *r, const char *text, const char *extra)
{
    unsigned char d[32];
    gnutls_hash_hd_t h;
    if (gnutls_hash_init(&h, GNUTLS_DIG_SHA256) < 0)
        return;
    gnutls_hash(h, r->key, strlen(r->key));
    gnutls_hash(h, "\n", 1);
    gnutls_hash(h, text, strlen(text));
    gnutls_hash(h, "\n", 1);
    if (extra)
        gnutls_hash(h, extra, strlen(extra));
    gnutls_hash_deinit(h, d);
    for (int i = 0; i < 32; i++)
        snprintf(r->key + 2 * i, 3, "%02x", d[i]);
}

/* Adds the layer tar at path to the store and stacks it on the stage. */
static int take_layer(struct run *r, const char *path, bool keep_dirs, char digest[FB_LAYER_DIGEST_MAX],
                      fb_error_t *err)
{
    bool fresh;
    if (fb_layer_add(r->core, path, NULL, digest, &fresh, err) < 0 ||
        fb_layer_apply(r->core, digest, r->rootfs_fd, keep_dirs, err) < 0)
        return -1;
    unlink(path);
    return json_array_append_new(r->layers, json_string(digest));
}

static int stack_cached(struct run *r, const char *digest, fb_error_t *err)
{
    if (fb_layer_apply(r->core, digest, r->rootfs_fd, false, err) < 0)
        return -1;
    return json_array_append_new(r->layers, json_string(digest));
}

/* Reads name's entry of the stage's etc/passwd or etc/group (resolved
 * inside the stage, never through its links onto the host): id, or -1. */
static long long id_lookup(struct run *r, const char *file, const char *name)
{
    struct open_how how = {.flags = O_RDONLY | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    cleanup_close int fd = (int)syscall(SYS_openat2, r->rootfs_fd, file, &how, sizeof how);
    if (fd < 0)
        return -1;
    cleanup_free char *buf = malloc(PASSWD_MAX + 1);
    if (buf == NULL)
        return -1;
    size_t n = 0;
    ssize_t k;
    while (n < PASSWD_MAX && (k = read(fd, buf + n, PASSWD_MAX - n)) > 0)
        n += (size_t)k;
    buf[n] = '\0';
    size_t nl = strlen(name);
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, name, nl) != 0 || line[nl] != ':')
            continue;
        char *f = strchr(line + nl + 1, ':'); /* past the password field */
        return f ? strtoll(f + 1, NULL, 10) : -1;
    }
    return -1;
}

static int resolve_owner(struct run *r, const char *chown, uid_t *uid, gid_t *gid, fb_error_t *err)
{
    *uid = 0;
    *gid = 0;
    if (chown == NULL || chown[0] == '\0')
        return 0;
    char u[256], g[256] = "";
    fb_strlcpy(u, chown, sizeof u);
    char *colon = strchr(u, ':');
    if (colon) {
        fb_strlcpy(g, colon + 1, sizeof g);
        *colon = '\0';
    }
    char *end;
    long long uv = strtoll(u, &end, 10);
    if (u[0] == '\0' || *end != '\0')
        uv = id_lookup(r, "etc/passwd", u);
    long long gv = uv;
    if (g[0]) {
        gv = strtoll(g, &end, 10);
        if (*end != '\0')
            gv = id_lookup(r, "etc/group", g);
    } else if (*end != '\0' || u[0] == '\0') {
        gv = id_lookup(r, "etc/group", u); /* a name alone: its own group, when there is one */
        if (gv < 0)
            gv = 0;
    }
    if (uv < 0 || uv > 65535 || gv < 0 || gv > 65535)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "--chown=%s: no such user or group in the image",
                            chown);
    *uid = (uid_t)uv;
    *gid = (gid_t)gv;
    return 0;
}

static int step_copy(struct run *r, const struct fb_df_step *s, int idx, fb_error_t *err)
{
    if (r->b->context_path[0] == '\0')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s needs a build context: upload one",
                            fb_df_op_name(s->op));
    uid_t uid;
    gid_t gid;
    if (resolve_owner(r, s->chown, &uid, &gid, err) < 0)
        return -1;
    size_t n = json_array_size(s->srcs);
    const char **srcs = calloc(n ? n : 1, sizeof *srcs);
    if (srcs == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "sources");
    for (size_t i = 0; i < n; i++)
        srcs[i] = json_string_value(json_array_get(s->srcs, i));
    /* COPY f /app where the image has a dir /app puts f inside it */
    char dest[PATH_MAX + 2];
    fb_strlcpy(dest, s->dest, sizeof dest);
    size_t dl = strlen(dest);
    struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    struct stat dst_st;
    if (dl > 1 && dest[dl - 1] != '/') {
        cleanup_close int dfd = (int)syscall(SYS_openat2, r->rootfs_fd, dest + 1, &how, sizeof how);
        if (dfd >= 0 && fstat(dfd, &dst_st) == 0 && S_ISDIR(dst_st.st_mode) && dl + 1 < sizeof dest)
            strcat(dest, "/");
    }
    char out[PATH_MAX];
    const char *ctx = r->b->context_path;
    int rc = fb_snprintf(out, sizeof out, "%s/step%d.tar", r->stage, idx);
    struct fb_buildcopy_stats stats = {0};
    if (rc == 0)
        rc = fb_buildcopy_layer(ctx, srcs, n, dest, uid, gid, s->op == FB_DF_ADD, out, &stats, err);
    free(srcs);
    char digest[FB_LAYER_DIGEST_MAX];
    if (rc < 0 || take_layer(r, out, true, digest, err) < 0) {
        unlink(out);
        return -1;
    }
    key_chain(r, "layer", digest); /* what was copied, not just its patterns */
    return 0;
}

static void keep_tail(struct run *r, const char *data, size_t len)
{
    if (len >= OUTPUT_TAIL) {
        memcpy(r->tail, data + len - OUTPUT_TAIL, OUTPUT_TAIL);
        r->tail_len = OUTPUT_TAIL;
        return;
    }
    if (r->tail_len + len > OUTPUT_TAIL) {
        size_t drop = r->tail_len + len - OUTPUT_TAIL;
        memmove(r->tail, r->tail + drop, r->tail_len - drop);
        r->tail_len -= drop;
    }
    memcpy(r->tail + r->tail_len, data, len);
    r->tail_len += len;
}

/* The spec of a RUN's sandbox: the stage's state, the caller's network. */
static int run_spec(struct run *r, const struct fb_df_step *s, struct fb_create_spec *spec, fb_error_t *err)
{
    cleanup_json json_t *env = fb_env_from_list(s->st.run_env, NULL);
    char user[FB_USER_MAX + 1];
    fb_strlcpy(user, s->st.user ? s->st.user : "root", sizeof user);
    char *colon = strchr(user, ':');
    if (colon)
        *colon = '\0';
    const char *tpl = strcmp(r->b->df.base, "scratch") == 0 ? "default" : r->b->df.base;
    cleanup_json json_t *noallow = json_array();
    cleanup_json json_t *body =
        json_pack("{s:s, s:O, s:s, s:s, s:{s:f, s:I, s:I, s:I}, s:{s:s, s:O}}", "template", tpl, "env", env,
                  "workdir", s->st.workdir ? s->st.workdir : "/", "user", user[0] ? user : "root",
                  "resources", "cpus", 2.0, "memory_mb", (json_int_t)2048, "pids", (json_int_t)4096,
                  "disk_mb", (json_int_t)FB_BUILD_DISK_MB_DEFAULT, "network", "mode", r->b->network_mode,
                  "allow", r->b->allow ? r->b->allow : noallow);
    if (body == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "step spec");
    if (strcmp(r->b->network_mode, "allowlist") != 0)
        json_object_del(json_object_get(body, "network"), "allow");
    return fb_create_spec_parse(body, spec, err);
}

/* Runs argv in sandbox id, streaming its output; *code gets the exit code
 * (128+N for a signal). */
static int run_command(struct run *r, const char *id, json_t *argv, int *code, fb_error_t *err)
{
    struct fb_exec_spec es = {.timeout_ms = r->b->timeout_s * 1000, .max_output = FB_OUTPUT_MAX};
    size_t n = json_array_size(argv);
    es.argv = calloc(n + 1, sizeof *es.argv);
    es.env = json_object();
    int rc = es.argv && es.env ? 0 : fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "argv");
    for (size_t i = 0; rc == 0 && i < n; i++)
        if ((es.argv[i] = strdup(json_string_value(json_array_get(argv, i)))) == NULL)
            rc = fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "argv");
    es.argc = n;
    cleanup_close int fd = rc == 0 ? fb_exec_start(r->core, FB_BUILD_TENANT, id, &es, err) : -1;
    fb_exec_spec_clear(&es);
    if (fd < 0)
        return -1;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, 500);
        if (r->sink->cancelled(r->sink->ctx))
            return fb_error_set(err, FB_ERR_UNAVAILABLE, 0, "the client went away: build cancelled");
        if (pr == 0 || (pr < 0 && errno == EINTR))
            continue;
        struct fb_frame f;
        if (fb_wire_recv(fd, &f) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "the step's sandbox went away");
        if (f.type == FB_MSG_STDOUT || f.type == FB_MSG_STDERR) {
            keep_tail(r, f.data, f.len);
            r->sink->output(r->sink->ctx, f.type == FB_MSG_STDOUT ? 0 : 1, f.data, f.len);
            free(f.data);
            continue;
        }
        cleanup_json json_t *res = f.type == FB_MSG_RESULT ? fb_wire_frame_json(&f) : NULL;
        free(f.data);
        if (res == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, EPROTO, "malformed answer from the step's sandbox");
        if (!json_is_true(json_object_get(res, "ok"))) {
            const char *m = json_string_value(json_object_get(res, "error"));
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "the command could not start: %s", m ? m : "?");
        }
        json_t *sig = json_object_get(res, "signal");
        *code = json_is_integer(sig) ? 128 + (int)json_integer_value(sig)
                                     : (int)json_integer_value(json_object_get(res, "exit_code"));
        if (json_is_true(json_object_get(res, "timed_out")))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "the step ran longer than %lld s",
                                (long long)r->b->timeout_s);
        return 0;
    }
}

static int step_run(struct run *r, const struct fb_df_step *s, int idx, int *code, fb_error_t *err)
{
    cleanup_spec struct fb_create_spec spec = {0};
    cleanup_json json_t *sb = NULL;
    if (run_spec(r, s, &spec, err) < 0 ||
        fb_sandbox_create_on(r->core, FB_BUILD_TENANT, &spec, r->rootfs, &sb, err) < 0)
        return fb_error_wrap(err, "start the step's sandbox");
    char id[FB_ID_MAX];
    fb_strlcpy(id, json_string_value(json_object_get(sb, "id")), sizeof id);
    r->tail_len = 0;
    int rc = run_command(r, id, s->argv, code, err);
    char out[PATH_MAX];
    if (rc == 0 && *code == 0 && fb_snprintf(out, sizeof out, "%s/step%d.tar", r->stage, idx) < 0)
        rc = fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "step path");
    bool have_tar = false;
    if (rc == 0 && *code == 0) {
        cleanup_close int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        struct fb_sandbox_row row = {0};
        int64_t size;
        char sha[65];
        rc = fd < 0 ? fb_error_sys(err, "create %s", out)
                    : fb_sandbox_layer_tar(r->core, FB_BUILD_TENANT, id, &row, fd, &size, sha, err);
        fb_sandbox_row_clear(&row);
        have_tar = rc == 0;
    }
    cleanup_error fb_error_t derr = NULL;
    if (fb_sandbox_delete(r->core, FB_BUILD_TENANT, id, &derr) < 0)
        fb_warn("build %s: remove the step's sandbox %s: %s", r->b->name, id, derr->msg);
    if (rc < 0 || *code != 0) {
        if (have_tar)
            unlink(out);
        return rc;
    }
    char digest[FB_LAYER_DIGEST_MAX];
    if (take_layer(r, out, false, digest, err) < 0) {
        unlink(out);
        return -1;
    }
    cleanup_error fb_error_t cerr = NULL;
    if (fb_store_build_cache_put(r->core->store, r->key, digest, &cerr) < 0)
        fb_warn("build %s: cache step %d: %s", r->b->name, idx, cerr->msg);
    return 0;
}

/* A RUN whose key is cached, with its layer still stored: stacked. */
static bool run_cached(struct run *r, fb_error_t *err)
{
    char digest[FB_LAYER_DIGEST_MAX];
    cleanup_error fb_error_t e = NULL;
    if (r->b->no_cache || fb_store_build_cache_get(r->core->store, r->key, digest, sizeof digest, &e) < 0 ||
        !fb_layer_digest_valid(digest) || fb_layer_size(r->core, digest) <= 0)
        return false;
    if (stack_cached(r, digest, err) < 0)
        return false;
    return true;
}

static json_t *final_config(const struct fb_df_state *st)
{
    cleanup_json json_t *none = json_array(), *nolabels = json_object();
    return json_pack("{s:O, s:s, s:s, s:O, s:O, s:O}", "env", st->env ? st->env : none, "workdir",
                     st->workdir ? st->workdir : "", "user", st->user ? st->user : "", "cmd",
                     st->cmd ? st->cmd : json_null(), "entrypoint",
                     st->entrypoint ? st->entrypoint : json_null(), "labels",
                     st->labels ? st->labels : nolabels);
}

static int run_steps(struct run *r, fb_error_t *err, int *failed_step, int *exit_code)
{
    const struct fb_dockerfile *df = &r->b->df;
    char *text = fb_dockerfile_step_key_text(&df->steps[0]);
    key_chain(r, text ? text : "", r->b->base_identity);
    free(text);
    for (size_t i = 0; i < df->nsteps; i++) {
        const struct fb_df_step *s = &df->steps[i];
        *failed_step = (int)i + 1;
        if (r->sink->cancelled(r->sink->ctx))
            return fb_error_set(err, FB_ERR_UNAVAILABLE, 0, "the client went away: build cancelled");
        if (i > 0) {
            char *kt = fb_dockerfile_step_key_text(s);
            if (kt == NULL)
                return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "step key");
            key_chain(r, kt, NULL);
            free(kt);
        }
        bool cached = false;
        if (s->op == FB_DF_RUN)
            cached = run_cached(r, err);
        if (err != NULL && *err != NULL)
            return -1;
        emit_step(r, i, cached);
        int rc = 0;
        if (s->op == FB_DF_RUN && !cached)
            rc = step_run(r, s, (int)i, exit_code, err);
        else if (s->op == FB_DF_COPY || s->op == FB_DF_ADD)
            rc = step_copy(r, s, (int)i, err);
        if (rc < 0)
            return -1;
        if (*exit_code != 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "Dockerfile line %u: RUN failed with exit code %d", s->line, *exit_code);
    }
    return 0;
}

/* The stage becomes templates/NAME (an old one of that name is replaced). */
static int install(struct run *r, fb_error_t *err)
{
    struct fb_core *core = r->core;
    struct fb_build *b = r->b;
    if (fb_template_unused(core, b->name, "it cannot be replaced", err) < 0)
        return -1;
    cleanup_json json_t *layers = json_deep_copy(b->base_layers);
    json_array_extend(layers, r->layers);
    cleanup_json json_t *config = final_config(&b->df.steps[b->df.nsteps - 1].st);
    char dir[PATH_MAX], old[PATH_MAX], rnd[17];
    if (fb_random_hex(rnd, 8) < 0 ||
        fb_snprintf(dir, sizeof dir, "%s/templates/%s", core->cfg.state_dir, b->name) < 0 ||
        fb_snprintf(old, sizeof old, "%s/templates/" STAGE_PREFIX "old-%s", core->cfg.state_dir, rnd) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "template path");
    /* rootfs stays where sandboxes of the old one would have found it */
    struct stat st;
    bool had = lstat(dir, &st) == 0;
    if (had && rename(dir, old) < 0)
        return fb_error_sys(err, "move the old template aside");
    char keyfile[PATH_MAX];
    if (r->build_key[0] && fb_snprintf(keyfile, sizeof keyfile, "%s/" BUILD_KEY_FILE, r->stage) == 0)
        (void)fb_write_file(keyfile, r->build_key, strlen(r->build_key), 0600);
    if (rename(r->stage, dir) < 0) {
        int e = errno;
        if (had)
            rename(old, dir);
        return fb_error_set(err, FB_ERR_INTERNAL, e, "install template %s", b->name);
    }
    r->stage[0] = '\0'; /* moved: not to be removed */
    /* step tars left in the stage are gone by now; the rest is the rootfs */
    struct fb_template_row row = {.created_ms = fb_now_ms()};
    fb_strlcpy(row.name, b->name, sizeof row.name);
    fb_strlcpy(row.source, "build", sizeof row.source);
    fb_strlcpy(row.base, strcmp(b->df.base, "scratch") == 0 ? "" : b->df.base, sizeof row.base);
    size_t i;
    json_t *v;
    json_array_foreach(layers, i, v) row.size_bytes += fb_layer_size(core, json_string_value(v));
    row.size_bytes += b->base_bytes; /* its files are in the rootfs too, by hard link */
    cleanup_free char *lj = json_dumps(layers, JSON_COMPACT);
    cleanup_free char *cj = json_dumps(config, JSON_COMPACT | JSON_SORT_KEYS);
    row.layers_json = lj;
    row.config_json = cj;
    int rc = lj && cj ? fb_store_template_put(core->store, &row, err)
                      : fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "template row");
    if (had)
        fb_rm_rf(old);
    return rc;
}

/* The digest of everything the result depends on: the base's identity,
 * every step's resolved instruction and state, and the context's bytes. */
static int build_key(struct run *r, fb_error_t *err)
{
    char ctx[65] = "";
    int64_t size;
    if (r->b->context_fd >= 0 &&
        (lseek(r->b->context_fd, 0, SEEK_SET) < 0 || fb_sha256_fd(r->b->context_fd, ctx, &size, err) < 0))
        return -1;
    r->key[0] = '\0';
    key_chain(r, r->b->base_identity, ctx);
    for (size_t i = 0; i < r->b->df.nsteps; i++) {
        char *kt = fb_dockerfile_step_key_text(&r->b->df.steps[i]);
        if (kt == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "build key");
        key_chain(r, kt, NULL);
        free(kt);
    }
    memcpy(r->build_key, r->key, sizeof r->build_key);
    r->key[0] = '\0'; /* the step chain starts afresh */
    return 0;
}

/* Whether template NAME is what this very build made before: then each
 * step is reported from the cache and nothing is assembled again. */
static bool unchanged(struct run *r)
{
    char path[PATH_MAX];
    char *old = NULL;
    size_t len = 0;
    if (r->b->no_cache ||
        fb_snprintf(path, sizeof path, "%s/templates/%s/" BUILD_KEY_FILE, r->core->cfg.state_dir,
                    r->b->name) < 0 ||
        fb_read_file(path, 128, &old, &len) < 0)
        return false;
    bool same = len == strlen(r->build_key) && memcmp(old, r->build_key, len) == 0;
    free(old);
    struct fb_template_row row;
    cleanup_error fb_error_t e = NULL;
    if (!same || fb_store_template_get(r->core->store, r->b->name, &row, &e) < 0)
        return false;
    same = strcmp(row.source, "build") == 0;
    fb_template_row_clear(&row);
    if (!same)
        return false;
    for (size_t i = 0; i < r->b->df.nsteps; i++)
        emit_step(r, i, r->b->df.steps[i].op == FB_DF_RUN);
    return true;
}

static int stage_open(struct run *r, fb_error_t *err)
{
    char rnd[17];
    if (fb_random_hex(rnd, 8) < 0 ||
        fb_snprintf(r->stage, sizeof r->stage, "%s/templates/" STAGE_PREFIX "%s", r->core->cfg.state_dir,
                    rnd) < 0 ||
        fb_snprintf(r->rootfs, sizeof r->rootfs, "%s/rootfs", r->stage) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "stage path");
    int e = fb_mkdir_p(r->rootfs, 0755);
    if (e < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -e, "create %s", r->rootfs);
    r->rootfs_fd = open(r->rootfs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (r->rootfs_fd < 0)
        return fb_error_sys(err, "open %s", r->rootfs);
    if (r->b->base_rootfs[0] == '\0')
        return 0;
    cleanup_close int src = open(r->b->base_rootfs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (src < 0)
        return fb_error_sys(err, "open %s", r->b->base_rootfs);
    return fb_tree_link(src, r->rootfs_fd, err);
}

void fb_build_run(struct fb_core *core, struct fb_build *b, const struct fb_build_sink *sink)
{
    struct run r = {.core = core, .b = b, .sink = sink, .rootfs_fd = -1, .layers = json_array()};
    cleanup_error fb_error_t err = NULL;
    int64_t t0 = fb_mono_ms();
    int failed_step = 0, exit_code = 0;
    fb_info("build %s: %zu steps from %s", b->name, b->df.nsteps, b->df.base);
    pthread_rwlock_rdlock(&core->layers_lock);
    int rc = build_key(&r, &err);
    bool same = rc == 0 && unchanged(&r);
    if (rc == 0 && !same)
        rc = stage_open(&r, &err);
    if (rc == 0 && !same)
        rc = run_steps(&r, &err, &failed_step, &exit_code);
    if (r.rootfs_fd >= 0)
        close(r.rootfs_fd);
    if (rc == 0 && !same) {
        failed_step = 0;
        rc = install(&r, &err);
    }
    pthread_rwlock_unlock(&core->layers_lock);
    if (r.stage[0])
        fb_rm_rf(r.stage);
    json_decref(r.layers);
    json_t *tpl = NULL;
    if (rc == 0 && fb_template_inspect(core, b->name, &tpl, &err) < 0)
        rc = -1;
    int64_t ms = fb_mono_ms() - t0;
    if (rc == 0) {
        fb_info("build %s: done in %.2f s (%d of %zu steps cached)", b->name, (double)ms / 1000.0,
                r.cached_steps, b->df.nsteps);
        emit(&r, json_pack("{s:s, s:o, s:I, s:i, s:b}", "type", "done", "template", tpl, "duration_ms",
                           (json_int_t)ms, "cached_steps", r.cached_steps, "unchanged", same));
        return;
    }
    json_decref(tpl);
    fb_info("build %s: failed: %s", b->name, err ? err->msg : "?");
    json_t *ev = json_pack("{s:s, s:s, s:s}", "type", "error", "code",
                           fb_error_code(err ? err->kind : FB_ERR_INTERNAL), "message",
                           err ? err->msg : "build failed");
    if (ev != NULL && failed_step > 0) {
        const struct fb_df_step *s = &b->df.steps[failed_step - 1];
        json_object_set_new(ev, "step", json_integer(failed_step));
        json_object_set_new(ev, "line", json_integer(s->line));
        json_object_set_new(ev, "instruction", json_string(s->text ? s->text : ""));
        if (exit_code != 0) {
            json_object_set_new(ev, "exit_code", json_integer(exit_code));
            size_t n = 0;
            cleanup_free char *tail = fb_utf8_lossy(r.tail, r.tail_len, &n);
            json_object_set_new(ev, "output_tail", json_stringn(tail ? tail : "", tail ? n : 0));
        }
    }
    emit(&r, ev);
}

void fb_build_remove_orphans(struct fb_core *core)
{
    struct fb_sandbox_row *rows = NULL;
    size_t n = 0;
    cleanup_error fb_error_t err = NULL;
    if (fb_store_sandbox_list(core->store, FB_BUILD_TENANT, &rows, &n, &err) == 0) {
        for (size_t i = 0; i < n; i++) {
            cleanup_error fb_error_t e = NULL;
            if (strcmp(rows[i].state, "deleting") != 0 &&
                fb_sandbox_delete(core, FB_BUILD_TENANT, rows[i].id, &e) < 0)
                fb_warn("build leftovers: sandbox %s: %s", rows[i].id, e->msg);
        }
        fb_sandbox_rows_free(rows, n);
    }
    char dir[PATH_MAX];
    if (fb_snprintf(dir, sizeof dir, "%s/templates", core->cfg.state_dir) == 0)
        fb_rm_prefixed(dir, STAGE_PREFIX);
}
