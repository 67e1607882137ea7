#include "dockerfile.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/text.h"
#include "../common/util.h"
#include "dockerfile_lex.h"
#include "path.h"

#define USER_MAX 256

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* ---- pass 2: evaluation ------------------------------------------------ */

struct st {
    json_t *envo;          /* name -> value, in the order names were first set */
    json_t *env, *run_env; /* arrays made from envo and args; NULL: out of date */
    json_t *labels, *cmd, *entrypoint, *args;
    bool cmd_from_base;
    char workdir[FB_PATH_MAX + 1];
    char user[USER_MAX + 1];
};

struct ev {
    const struct fb_df_opts *o;
    struct st st;
    json_t *global; /* ARGs before FROM: name -> string | null */
    bool in_stage;  /* before FROM only the global ARGs can be substituted */
    bool have_from;
    size_t budget;
    struct df_lex lx;
    struct fb_dockerfile *df;
    const struct df_instr *it;
    fb_error_t *err;
};

static void st_clear(struct st *s)
{
    json_t **all[] = {&s->envo, &s->env, &s->labels, &s->cmd, &s->entrypoint, &s->args, &s->run_env};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fb_json_decrefp(all[i]);
}

__attribute__((format(printf, 2, 3))) static int bad(struct ev *e, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fb_error_set(e->err, FB_ERR_BAD_REQUEST, 0, "Dockerfile line %u: %s", e->it ? e->it->line : 0,
                        msg);
}

static int oom(struct ev *e)
{
    return fb_error_set(e->err, FB_ERR_INTERNAL, ENOMEM, "Dockerfile");
}

/* lexer errors get the line and the instruction in front */
static int lexfail(struct ev *e)
{
    return fb_error_wrap(e->err, "Dockerfile line %u: %s", e->it->line, e->it->kw);
}

/* ENV wins over an ARG of the same name, as in Docker. */
static const char *lookup(void *ctx, const char *name)
{
    struct ev *e = ctx;
    if (!e->in_stage)
        return json_string_value(json_object_get(e->global, name));
    const char *v = json_string_value(json_object_get(e->st.envo, name));
    return v ? v : json_string_value(json_object_get(e->st.args, name));
}

static int expand_one(struct ev *e, const char *s, size_t n, bool quotes, char **out)
{
    return df_expand(&e->lx, s, n, quotes, NULL, out, e->err) < 0 ? lexfail(e) : 0;
}

static int split(struct ev *e, struct df_word *w, size_t *n)
{
    return df_split(e->it->rest, e->it->restlen, w, n, e->err) < 0 ? lexfail(e) : 0;
}

static int append_kv(struct ev *e, json_t *arr, const char *k, const char *v)
{
    size_t cost = strlen(k) + strlen(v) + 1;
    if (cost > e->budget)
        return bad(e, "variable values take more than %d bytes", FB_DF_EXPANDED_MAX);
    e->budget -= cost;
    char *kv = NULL;
    if (asprintf(&kv, "%s=%s", k, v) < 0)
        return oom(e);
    json_t *s = json_string(kv);
    free(kv);
    return s != NULL && json_array_append_new(arr, s) == 0 ? 0 : oom(e);
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "K=V" for every ENV, then (with args) the ARGs with a value that no ENV
 * shadows, sorted so the same Dockerfile gives the same array. */
static json_t *make_env(struct ev *e, const json_t *args)
{
    cleanup_json json_t *arr = json_array();
    const char *k;
    json_t *v;
    if (arr == NULL) {
        oom(e);
        return NULL;
    }
    json_object_foreach(e->st.envo, k, v) if (append_kv(e, arr, k, json_string_value(v)) < 0) return NULL;
    if (args == NULL || json_object_size(args) == 0)
        return fb_steal_ptr(arr);
    cleanup_free const char **names = calloc(json_object_size(args), sizeof *names);
    size_t n = 0;
    if (names == NULL) {
        oom(e);
        return NULL;
    }
    json_object_foreach((json_t *)args, k, v) if (json_is_string(v) && !json_object_get(e->st.envo, k))
        names[n++] = k;
    qsort(names, n, sizeof names[0], name_cmp);
    for (size_t i = 0; i < n; i++)
        if (append_kv(e, arr, names[i], json_string_value(json_object_get(args, names[i]))) < 0)
            return NULL;
    return fb_steal_ptr(arr);
}

static size_t map_bytes(const json_t *m)
{
    size_t total = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v) total += strlen(k) + json_string_length(v) + 2;
    return total;
}

static int check_config(struct ev *e)
{
    if (json_object_size(e->st.envo) > FB_DF_VARS_MAX || json_object_size(e->st.labels) > FB_DF_VARS_MAX ||
        json_object_size(e->st.args) > FB_DF_VARS_MAX)
        return bad(e, "more than %d ENV, LABEL or ARG names", FB_DF_VARS_MAX);
    if (map_bytes(e->st.envo) + map_bytes(e->st.labels) + map_bytes(e->st.args) > FB_DF_CONFIG_MAX)
        return bad(e, "env, labels and ARG values take more than %d bytes", FB_DF_CONFIG_MAX);
    return 0;
}

static struct fb_df_step *new_step(struct ev *e, enum fb_df_op op)
{
    struct fb_df_step *s = &e->df->steps[e->df->nsteps++];
    s->op = op;
    s->line = e->it ? e->it->line : 0;
    if (e->it != NULL)
        s->text = strdup(e->it->text);
    else if (asprintf(&s->text, "FROM %s", e->o->default_from) < 0)
        s->text = NULL;
    return s;
}

static int snapshot(struct ev *e, struct fb_df_step *s)
{
    if (e->st.env == NULL && (e->st.env = make_env(e, NULL)) == NULL)
        return -1;
    if (e->st.run_env == NULL && (e->st.run_env = make_env(e, e->st.args)) == NULL)
        return -1;
    s->st.env = json_incref(e->st.env);
    s->st.run_env = json_incref(e->st.run_env);
    s->st.cmd = json_incref(e->st.cmd);
    s->st.entrypoint = json_incref(e->st.entrypoint);
    s->st.labels = json_incref(e->st.labels);
    s->st.workdir = strdup(e->st.workdir);
    s->st.user = strdup(e->st.user);
    return s->text && s->st.workdir && s->st.user ? 0 : oom(e);
}

static bool string_array(const json_t *a)
{
    size_t i;
    json_t *v;
    if (!json_is_array(a))
        return false;
    json_array_foreach(a, i, v) if (!json_is_string(v)) return false;
    return true;
}

static int seed(struct ev *e, const char *name, json_t *cfg)
{
    json_t *env = json_object_get(cfg, "env"), *v;
    size_t i;
    if (env != NULL) {
        if (!string_array(env))
            return fb_error_set(e->err, FB_ERR_INTERNAL, 0, "template %s: env is not an array of strings",
                                name);
        json_array_foreach(env, i, v)
        {
            const char *kv = json_string_value(v), *eq = strchr(kv, '=');
            if (eq == NULL || eq == kv || (size_t)(eq - kv) > FB_DF_NAME_MAX)
                return fb_error_set(e->err, FB_ERR_INTERNAL, 0, "template %s: bad env entry", name);
            char k[FB_DF_NAME_MAX + 1];
            memcpy(k, kv, (size_t)(eq - kv));
            k[eq - kv] = '\0';
            if (json_object_set_new(e->st.envo, k, json_string(eq + 1)) < 0)
                return oom(e);
        }
    }
    const char *wd = json_string_value(json_object_get(cfg, "workdir"));
    if (wd != NULL && wd[0] != '\0') {
        cleanup_error fb_error_t perr = NULL;
        char tmp[FB_PATH_MAX + 2];
        if (fb_snprintf(tmp, sizeof tmp, "/%s", wd) < 0 ||
            fb_path_normalize(tmp, e->st.workdir, sizeof e->st.workdir, &perr) < 0)
            return fb_error_set(e->err, FB_ERR_INTERNAL, 0, "template %s: bad workdir", name);
    }
    const char *user = json_string_value(json_object_get(cfg, "user"));
    if (user != NULL && user[0] != '\0' && fb_strlcpy(e->st.user, user, sizeof e->st.user) < 0)
        return fb_error_set(e->err, FB_ERR_INTERNAL, 0, "template %s: user too long", name);
    json_t *cmd = json_object_get(cfg, "cmd"), *ep = json_object_get(cfg, "entrypoint");
    if (string_array(cmd)) {
        json_decref(e->st.cmd);
        e->st.cmd = json_copy(cmd);
        e->st.cmd_from_base = true;
    }
    if (string_array(ep)) {
        json_decref(e->st.entrypoint);
        e->st.entrypoint = json_copy(ep);
    }
    json_t *labels = json_object_get(cfg, "labels");
    const char *k;
    if (json_is_object(labels))
        json_object_foreach(labels, k, v) if (json_is_string(v)) json_object_set(e->st.labels, k, v);
    return e->st.cmd && e->st.entrypoint ? 0 : check_config(e);
}

static int start_stage(struct ev *e, char *name, char *alias)
{
    e->in_stage = true;
    e->have_from = true;
    e->st.envo = json_object();
    e->st.labels = json_object();
    e->st.cmd = json_null();
    e->st.entrypoint = json_null();
    e->st.args = json_object();
    strcpy(e->st.workdir, "/");
    strcpy(e->st.user, "root");
    struct fb_df_step *s = new_step(e, FB_DF_FROM);
    s->name = name;
    s->alias = alias;
    if (e->st.envo == NULL || e->st.labels == NULL || e->st.args == NULL ||
        (e->df->base = strdup(name)) == NULL)
        return oom(e);
    if (strcmp(name, "scratch") != 0 && e->o->base_config != NULL) {
        cleanup_json json_t *cfg = e->o->base_config(e->o->ctx, name, e->err);
        if (cfg == NULL) {
            if (e->err && *e->err == NULL)
                fb_error_set(e->err, FB_ERR_INTERNAL, 0, "no image config");
            return e->it ? fb_error_wrap(e->err, "Dockerfile line %u: FROM %s", e->it->line, name)
                         : fb_error_wrap(e->err, "base template %s", name);
        }
        if (seed(e, name, cfg) < 0)
            return -1;
    }
    return snapshot(e, s);
}

static bool is_flag(const struct df_word *w)
{
    return w->len >= 2 && w->s[0] == '-' && w->s[1] == '-';
}

static size_t flag_len(const struct df_word *w)
{
    const char *eq = memchr(w->s, '=', w->len);
    return eq ? (size_t)(eq - w->s) : w->len;
}

static int do_from(struct ev *e)
{
    if (e->have_from)
        return bad(e, e->df->steps[0].line == 0 ? "FROM must come before any other instruction"
                                                : "multi-stage builds are not supported");
    struct df_word w[FB_DF_WORDS_MAX];
    size_t n, i = 0;
    if (split(e, w, &n) < 0)
        return -1;
    if (n > 0 && is_flag(&w[0]))
        return bad(e, "FROM %.*s is not supported", (int)(flag_len(&w[0]) > 40 ? 40 : flag_len(&w[0])),
                   w[0].s);
    if (!(n - i == 1 || (n - i == 3 && df_ci_eq(w[i + 1].s, w[i + 1].len, "AS"))))
        return bad(e, "FROM needs a template name, optionally followed by AS <name>");
    cleanup_free char *name = NULL, *alias = NULL;
    if (expand_one(e, w[i].s, w[i].len, true, &name) < 0)
        return -1;
    if (name[0] == '\0' || strlen(name) > FB_DF_NAME_MAX)
        return bad(e, "FROM: the template name is empty or longer than %d bytes", FB_DF_NAME_MAX);
    if (n - i == 3) {
        if (w[i + 2].len > FB_DF_NAME_MAX)
            return bad(e, "FROM: the AS name is longer than %d bytes", FB_DF_NAME_MAX);
        if ((alias = strndup(w[i + 2].s, w[i + 2].len)) == NULL)
            return oom(e);
    }
    char *nm = fb_steal_ptr(name), *al = fb_steal_ptr(alias);
    return start_stage(e, nm, al);
}

static bool valid_arg_name(const char *s, size_t n)
{
    if (n == 0 || n > FB_DF_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_'))
            return false;
    return true;
}

/* ARG values are all substituted against the state before the
 * instruction, then set: build args beat defaults, and a bare ARG NAME in
 * the stage takes the value of a global ARG NAME. */
static int do_arg(struct ev *e)
{
    struct df_word w[FB_DF_WORDS_MAX];
    size_t n;
    if (split(e, w, &n) < 0)
        return -1;
    if (n == 0)
        return bad(e, "ARG needs a name");
    cleanup_json json_t *vars = json_object();
    if (vars == NULL)
        return oom(e);
    for (size_t i = 0; i < n; i++) {
        const char *eq = memchr(w[i].s, '=', w[i].len);
        size_t nl = eq ? (size_t)(eq - w[i].s) : w[i].len;
        if (!valid_arg_name(w[i].s, nl))
            return bad(e, "ARG: \"%.*s\" is not a valid name (letters, digits and _)",
                       (int)(nl > 60 ? 60 : nl), w[i].s);
        char name[FB_DF_NAME_MAX + 1];
        memcpy(name, w[i].s, nl);
        name[nl] = '\0';
        cleanup_free char *def = NULL;
        if (eq && expand_one(e, eq + 1, w[i].len - nl - 1, true, &def) < 0)
            return -1;
        const char *val = json_string_value(json_object_get(e->o->build_args, name));
        if (val == NULL)
            val = def;
        if (val == NULL && e->in_stage)
            val = json_string_value(json_object_get(e->global, name));
        if (json_object_set_new(vars, name, val ? json_string(val) : json_null()) < 0)
            return oom(e);
    }
    if (!e->in_stage)
        return json_object_update(e->global, vars) < 0 ? oom(e) : 0;
    json_t *args = json_copy(e->st.args);
    if (args == NULL || json_object_update(args, vars) < 0) {
        json_decref(args);
        return oom(e);
    }
    json_decref(e->st.args);
    e->st.args = args;
    fb_json_decrefp(&e->st.run_env);
    if (check_config(e) < 0)
        return -1;
    struct fb_df_step *s = new_step(e, FB_DF_ARG);
    s->vars = fb_steal_ptr(vars);
    return snapshot(e, s);
}

static int check_key(struct ev *e, const char *k)
{
    if (k[0] == '\0' || strlen(k) > FB_DF_NAME_MAX)
        return bad(e, "%s: a name is empty or longer than %d bytes", e->it->kw, FB_DF_NAME_MAX);
    for (const char *p = k; *p; p++)
        if ((unsigned char)*p < 0x21 || *p == '=')
            return bad(e, "%s: bad name \"%.60s\"", e->it->kw, k);
    return 0;
}

/* ENV and LABEL: NAME=VALUE pairs, or the legacy "NAME value with blanks". */
static int pairs(struct ev *e, json_t *vars)
{
    struct df_word w[FB_DF_WORDS_MAX];
    size_t n;
    if (split(e, w, &n) < 0)
        return -1;
    if (n == 0)
        return bad(e, "%s needs NAME=VALUE", e->it->kw);
    bool legacy = df_unquoted_eq(w[0].s, w[0].len) < 0;
    if (legacy && n < 2)
        return bad(e, "%s needs a value: write %s NAME=VALUE", e->it->kw, e->it->kw);
    for (size_t i = 0; i < (legacy ? 1 : n); i++) {
        long eq = legacy ? (long)w[0].len : df_unquoted_eq(w[i].s, w[i].len);
        if (eq < 0)
            return bad(e, "%s: \"%.60s\" is not NAME=VALUE", e->it->kw, w[i].s);
        cleanup_free char *k = NULL, *v = NULL;
        if (expand_one(e, w[i].s, (size_t)eq, true, &k) < 0 || check_key(e, k) < 0)
            return -1;
        const char *vs = legacy ? w[1].s : w[i].s + eq + 1;
        size_t vn = legacy ? (size_t)(e->it->rest + e->it->restlen - w[1].s) : w[i].len - (size_t)eq - 1;
        if (expand_one(e, vs, vn, true, &v) < 0)
            return -1;
        if (json_object_set_new(vars, k, json_string(v)) < 0)
            return oom(e);
    }
    return 0;
}

static int do_env_label(struct ev *e, enum fb_df_op op)
{
    cleanup_json json_t *vars = json_object();
    if (vars == NULL)
        return oom(e);
    if (pairs(e, vars) < 0)
        return -1;
    if (op == FB_DF_ENV) {
        json_t *envo = json_copy(e->st.envo);
        if (envo == NULL || json_object_update(envo, vars) < 0) {
            json_decref(envo);
            return oom(e);
        }
        json_decref(e->st.envo);
        e->st.envo = envo;
        fb_json_decrefp(&e->st.env);
        fb_json_decrefp(&e->st.run_env);
    } else {
        json_t *labels = json_copy(e->st.labels);
        if (labels == NULL || json_object_update(labels, vars) < 0) {
            json_decref(labels);
            return oom(e);
        }
        json_decref(e->st.labels);
        e->st.labels = labels;
    }
    if (check_config(e) < 0)
        return -1;
    struct fb_df_step *s = new_step(e, op);
    s->vars = fb_steal_ptr(vars);
    return snapshot(e, s);
}

/* <<EOF, <<-EOF, <<'EOF' at a word start: BuildKit would read the next
 * lines as the document, so going on would misparse them as instructions. */
static int check_heredoc(struct ev *e, const char *s, size_t n)
{
    for (size_t i = 0; i + 2 < n; i++) {
        if (s[i] != '<' || s[i + 1] != '<' || (i > 0 && !is_blank(s[i - 1])))
            continue;
        size_t j = i + 2;
        if (j < n && s[j] == '-')
            j++;
        if (j < n && (s[j] == '\'' || s[j] == '"'))
            j++;
        if (j < n && ((s[j] >= 'A' && s[j] <= 'Z') || (s[j] >= 'a' && s[j] <= 'z') || s[j] == '_'))
            return bad(e, "heredocs (<<%.20s) are not supported", s + i + 2);
    }
    return 0;
}

/* Exec form when the arguments are a JSON array of strings, else shell
 * form: Docker falls back the same way, and the shell then reports the
 * mistake in terms the author knows. */
static int command(struct ev *e, struct fb_df_step *s, bool allow_empty)
{
    const char *r = e->it->rest;
    size_t n = e->it->restlen;
    if (n == 0)
        return bad(e, "%s needs a command", e->it->kw);
    if (r[0] == '[') {
        json_t *j = json_loadb(r, n, 0, NULL);
        if (string_array(j) && (allow_empty || json_array_size(j) > 0)) {
            s->argv = j;
            return 0;
        }
        bool empty = string_array(j);
        json_decref(j);
        if (empty)
            return bad(e, "%s needs a command", e->it->kw);
    }
    s->shell_form = true;
    s->argv = json_pack("[sss%]", "/bin/sh", "-c", r, n);
    return s->argv ? 0 : oom(e);
}

static int do_run(struct ev *e)
{
    if (e->it->restlen >= 2 && e->it->rest[0] == '-' && e->it->rest[1] == '-') {
        size_t k = 0;
        while (k < e->it->restlen && !is_blank(e->it->rest[k]) && e->it->rest[k] != '=')
            k++;
        return bad(e, "RUN %.*s is not supported", (int)(k > 40 ? 40 : k), e->it->rest);
    }
    if (check_heredoc(e, e->it->rest, e->it->restlen) < 0)
        return -1;
    struct fb_df_step *s = new_step(e, FB_DF_RUN);
    return command(e, s, false) < 0 ? -1 : snapshot(e, s);
}

static int do_cmd(struct ev *e, enum fb_df_op op)
{
    struct fb_df_step *s = new_step(e, op);
    if (command(e, s, true) < 0)
        return -1;
    json_t **slot = op == FB_DF_CMD ? &e->st.cmd : &e->st.entrypoint;
    json_decref(*slot);
    *slot = json_incref(s->argv);
    /* a new ENTRYPOINT drops a CMD inherited from the base, which was
     * written as arguments for the base's entrypoint */
    if (op == FB_DF_ENTRYPOINT && e->st.cmd_from_base) {
        json_decref(e->st.cmd);
        e->st.cmd = json_null();
    }
    e->st.cmd_from_base = false;
    return snapshot(e, s);
}

static bool is_url(const char *s)
{
    return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0 || strncmp(s, "git@", 4) == 0 ||
           strncmp(s, "git://", 6) == 0;
}

/* An absolute destination; a trailing '/' (or a final "." / "..") says it
 * can only be a directory, which fb_buildcopy_layer needs to know. */
static int resolve_dest(struct ev *e, const char *d, char **out)
{
    size_t n = strlen(d);
    bool dir = (n > 0 && d[n - 1] == '/') || strcmp(d, ".") == 0 || strcmp(d, "..") == 0 ||
               (n >= 2 && strcmp(d + n - 2, "/.") == 0) || (n >= 3 && strcmp(d + n - 3, "/..") == 0);
    if (n == 0)
        return bad(e, "%s: the destination is empty", e->it->kw);
    cleanup_free char *joined = NULL;
    if (asprintf(&joined, "%s/%s", d[0] == '/' ? "" : e->st.workdir, d) < 0)
        return oom(e);
    char norm[FB_PATH_MAX + 2];
    if (fb_path_normalize(joined, norm, sizeof norm - 1, e->err) < 0)
        return fb_error_wrap(e->err, "Dockerfile line %u: %s destination", e->it->line, e->it->kw);
    if (dir && strcmp(norm, "/") != 0)
        strcat(norm, "/");
    return (*out = strdup(norm)) ? 0 : oom(e);
}

static int do_copy(struct ev *e, enum fb_df_op op)
{
    const char *kw = e->it->kw;
    struct df_word w[FB_DF_WORDS_MAX];
    size_t n, i = 0;
    if (split(e, w, &n) < 0)
        return -1;
    struct fb_df_step *s = new_step(e, op);
    for (; i < n && is_flag(&w[i]); i++) {
        size_t fl = flag_len(&w[i]);
        if (df_ci_eq(w[i].s, fl, "--CHOWN")) {
            if (fl == w[i].len || fl + 1 == w[i].len)
                return bad(e, "%s --chown needs a value", kw);
            free(s->chown);
            s->chown = NULL;
            if (expand_one(e, w[i].s + fl + 1, w[i].len - fl - 1, true, &s->chown) < 0)
                return -1;
        } else if (df_ci_eq(w[i].s, fl, "--FROM")) {
            return bad(e, "%s --from is not supported (multi-stage builds are not supported)", kw);
        } else if (!df_ci_eq(w[i].s, fl, "--LINK")) {
            /* --link only changes how BuildKit caches the layer */
            return bad(e, "%s %.*s is not supported", kw, (int)(fl > 40 ? 40 : fl), w[i].s);
        }
    }
    if (i == n)
        return bad(e, "%s needs a source and a destination", kw);
    const char *body = w[i].s;
    size_t blen = (size_t)(e->it->rest + e->it->restlen - body);
    if (check_heredoc(e, body, blen) < 0)
        return -1;
    if ((s->srcs = json_array()) == NULL)
        return oom(e);
    if (body[0] == '[') {
        /* unlike RUN, a shell-form fallback would only turn a typo into
         * sources named "[a," */
        cleanup_json json_t *j = json_loadb(body, blen, 0, NULL);
        size_t k;
        json_t *v;
        if (!string_array(j))
            return bad(e, "%s: invalid JSON array (write [\"src\", ..., \"dest\"])", kw);
        json_array_foreach(j, k, v)
        {
            char *x = NULL;
            if (expand_one(e, json_string_value(v), json_string_length(v), false, &x) < 0)
                return -1;
            int r = json_array_append_new(s->srcs, json_string(x));
            free(x);
            if (r < 0)
                return oom(e);
        }
    } else if (df_expand(&e->lx, body, blen, true, s->srcs, NULL, e->err) < 0) {
        return lexfail(e);
    }
    size_t cnt = json_array_size(s->srcs);
    if (cnt < 2)
        return bad(e, "%s needs a source and a destination", kw);
    cleanup_free char *dest = strdup(json_string_value(json_array_get(s->srcs, cnt - 1)));
    if (dest == NULL)
        return oom(e);
    json_array_remove(s->srcs, cnt - 1);
    size_t k;
    json_t *v;
    json_array_foreach(s->srcs, k, v)
    {
        const char *src = json_string_value(v);
        if (src == NULL || src[0] == '\0')
            return bad(e, "%s: a source is empty", kw);
        if (is_url(src))
            return bad(e, op == FB_DF_ADD ? "ADD from a URL is not supported (no network during builds); "
                                            "download it into the context"
                                          : "COPY cannot fetch a URL (and ADD from a URL is not supported)");
    }
    if (resolve_dest(e, dest, &s->dest) < 0)
        return -1;
    return snapshot(e, s);
}

static int do_simple(struct ev *e, enum fb_df_op op)
{
    cleanup_json json_t *words = json_array();
    if (words == NULL)
        return oom(e);
    if (df_expand(&e->lx, e->it->rest, e->it->restlen, true, words, NULL, e->err) < 0)
        return lexfail(e);
    size_t n = json_array_size(words);
    if (op == FB_DF_WORKDIR || op == FB_DF_USER || op == FB_DF_STOPSIGNAL ? n != 1 : n == 0)
        return bad(e, "%s takes %s", e->it->kw,
                   op == FB_DF_EXPOSE ? "at least one argument" : "one argument");
    const char *w = json_string_value(json_array_get(words, 0));
    if (op == FB_DF_WORKDIR) {
        cleanup_free char *joined = NULL;
        if (w[0] == '\0')
            return bad(e, "WORKDIR needs a path");
        if (asprintf(&joined, "%s/%s", w[0] == '/' ? "" : e->st.workdir, w) < 0)
            return oom(e);
        if (fb_path_normalize(joined, e->st.workdir, sizeof e->st.workdir, e->err) < 0)
            return fb_error_wrap(e->err, "Dockerfile line %u: WORKDIR", e->it->line);
    } else if (op == FB_DF_USER) {
        if (w[0] == '\0' || fb_strlcpy(e->st.user, w, sizeof e->st.user) < 0)
            return bad(e, "USER is empty or longer than %d bytes", USER_MAX);
    }
    struct fb_df_step *s = new_step(e, op);
    if (op == FB_DF_EXPOSE || op == FB_DF_STOPSIGNAL)
        s->words = fb_steal_ptr(words);
    return snapshot(e, s);
}

static const struct {
    const char *kw;
    enum fb_df_op op; /* 0: known but not supported */
} ops[] = {
    {"FROM", FB_DF_FROM},
    {"RUN", FB_DF_RUN},
    {"COPY", FB_DF_COPY},
    {"ADD", FB_DF_ADD},
    {"ENV", FB_DF_ENV},
    {"WORKDIR", FB_DF_WORKDIR},
    {"USER", FB_DF_USER},
    {"ARG", FB_DF_ARG},
    {"CMD", FB_DF_CMD},
    {"ENTRYPOINT", FB_DF_ENTRYPOINT},
    {"LABEL", FB_DF_LABEL},
    {"EXPOSE", FB_DF_EXPOSE},
    {"STOPSIGNAL", FB_DF_STOPSIGNAL},
    {"VOLUME", 0},
    {"HEALTHCHECK", 0},
    {"ONBUILD", 0},
    {"SHELL", 0},
    {"MAINTAINER", 0},
};

const char *fb_df_op_name(enum fb_df_op op)
{
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (ops[i].op == op && op != 0)
            return ops[i].kw;
    return "?";
}

/* -1: not an instruction at all */
static int op_of(const struct df_instr *it)
{
    size_t k = 0;
    while (k < it->len && !is_blank(it->text[k]))
        k++;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (df_ci_eq(it->text, k, ops[i].kw))
            return (int)ops[i].op;
    return -1;
}

static int eval(struct ev *e, int op)
{
    if (op < 0)
        return bad(e, "unknown instruction %s", e->it->kw);
    if (op == 0)
        return bad(e, "%s is not supported", e->it->kw);
    switch ((enum fb_df_op)op) {
    case FB_DF_FROM:
        return do_from(e);
    case FB_DF_ARG:
        return do_arg(e);
    case FB_DF_ENV:
    case FB_DF_LABEL:
        return do_env_label(e, (enum fb_df_op)op);
    case FB_DF_RUN:
        return do_run(e);
    case FB_DF_CMD:
    case FB_DF_ENTRYPOINT:
        return do_cmd(e, (enum fb_df_op)op);
    case FB_DF_COPY:
    case FB_DF_ADD:
        return do_copy(e, (enum fb_df_op)op);
    default:
        return do_simple(e, (enum fb_df_op)op);
    }
}

static int check_build_args(const json_t *ba, fb_error_t *err)
{
    const char *k;
    json_t *v;
    if (ba == NULL)
        return 0;
    if (!json_is_object(ba))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "build args must be an object");
    json_object_foreach((json_t *)ba, k, v)
    {
        if (!valid_arg_name(k, strlen(k)))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "build arg \"%.60s\": not a valid name", k);
        if (!json_is_string(v) || json_string_length(v) > FB_DF_WORD_MAX ||
            strlen(json_string_value(v)) != json_string_length(v))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "build arg %s: must be a string of at most %d bytes", k, FB_DF_WORD_MAX);
    }
    return 0;
}

static int evaluate(struct ev *e, struct df_instr *in, size_t count)
{
    size_t first = 0;
    while (first < count && op_of(&in[first]) == FB_DF_ARG)
        first++;
    bool explicit_from = first < count && op_of(&in[first]) == FB_DF_FROM;
    size_t i = 0;
    if (!explicit_from) {
        if (e->o->default_from == NULL) {
            e->it = &in[first < count ? first : count - 1];
            return bad(e, "the first instruction must be FROM");
        }
        char *name = strdup(e->o->default_from);
        if (name == NULL)
            return oom(e);
        if (start_stage(e, name, NULL) < 0)
            return -1;
    }
    for (; i < count; i++) {
        e->it = &in[i];
        if (eval(e, op_of(&in[i])) < 0)
            return -1;
    }
    return 0;
}

int fb_dockerfile_parse(const char *text, size_t len, const struct fb_df_opts *o, struct fb_dockerfile *out,
                        fb_error_t *err)
{
    static const struct fb_df_opts none = {0};
    memset(out, 0, sizeof *out);
    if (o == NULL)
        o = &none;
    if (len > FB_DF_TEXT_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "Dockerfile is larger than %d bytes", FB_DF_TEXT_MAX);
    if (text == NULL)
        len = 0;
    const char *nul = len ? memchr(text, '\0', len) : NULL;
    if (nul != NULL) {
        unsigned line = 1;
        for (const char *p = text; p < nul; p++)
            line += *p == '\n';
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "Dockerfile line %u: NUL byte", line);
    }
    if (!fb_utf8_valid(text, len))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "Dockerfile is not valid UTF-8");
    if (check_build_args(o->build_args, err) < 0 || df_check_directives(text, len, err) < 0)
        return -1;
    struct df_instr *in = calloc(FB_DF_INSTR_MAX, sizeof *in);
    if (in == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "Dockerfile");
    size_t count = 0;
    int rc = df_read_instrs(text, len, in, &count, err);
    if (rc == 0 && count == 0)
        rc = fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "Dockerfile has no instructions");
    struct ev e = {.o = o, .budget = FB_DF_EXPANDED_MAX, .df = out, .err = err};
    e.lx = (struct df_lex){.look = lookup, .ctx = &e, .budget = &e.budget};
    if (rc == 0 &&
        ((e.global = json_object()) == NULL || (out->steps = calloc(count + 1, sizeof *out->steps)) == NULL))
        rc = fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "Dockerfile");
    if (rc == 0)
        rc = evaluate(&e, in, count);
    for (size_t i = 0; i < count; i++)
        free(in[i].text);
    free(in);
    st_clear(&e.st);
    fb_json_decrefp(&e.global);
    if (rc < 0)
        fb_dockerfile_clear(out);
    return rc;
}

void fb_dockerfile_clear(struct fb_dockerfile *df)
{
    for (size_t i = 0; df->steps != NULL && i < df->nsteps; i++) {
        struct fb_df_step *s = &df->steps[i];
        json_t **js[] = {&s->argv,   &s->srcs,          &s->vars,       &s->words,    &s->st.env,
                         &s->st.cmd, &s->st.entrypoint, &s->st.run_env, &s->st.labels};
        for (size_t j = 0; j < sizeof js / sizeof js[0]; j++)
            fb_json_decrefp(js[j]);
        char **ss[] = {&s->text, &s->dest, &s->chown, &s->name, &s->alias, &s->st.workdir, &s->st.user};
        for (size_t j = 0; j < sizeof ss / sizeof ss[0]; j++)
            fb_freep(ss[j]);
    }
    free(df->steps);
    free(df->base);
    memset(df, 0, sizeof *df);
}

char *fb_dockerfile_step_key_text(const struct fb_df_step *s)
{
    cleanup_json json_t *o = json_object();
    if (o == NULL)
        return NULL;
    struct {
        const char *k;
        json_t *v;
    } js[] = {
        {"argv", s->argv},        {"srcs", s->srcs},
        {"vars", s->vars},        {"words", s->words},
        {"env", s->st.env},       {"run_env", s->st.run_env},
        {"cmd", s->st.cmd},       {"entrypoint", s->st.entrypoint},
        {"labels", s->st.labels},
    };
    const struct {
        const char *k;
        const char *v;
    } ss[] = {
        {"op", fb_df_op_name(s->op)}, {"dest", s->dest},    {"chown", s->chown}, {"name", s->name},
        {"workdir", s->st.workdir},   {"user", s->st.user},
    };
    for (size_t i = 0; i < sizeof js / sizeof js[0]; i++)
        if (js[i].v != NULL && json_object_set(o, js[i].k, js[i].v) < 0)
            return NULL;
    for (size_t i = 0; i < sizeof ss / sizeof ss[0]; i++)
        if (ss[i].v != NULL && json_object_set_new(o, ss[i].k, json_string(ss[i].v)) < 0)
            return NULL;
    return json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
}
