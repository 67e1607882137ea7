#include "spec.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/util.h"
#include "allow.h"
#include "path.h"

#define cleanup_create_spec __attribute__((cleanup(fb_create_spec_clear)))
#define cleanup_exec_spec __attribute__((cleanup(fb_exec_spec_clear)))

/* Unknown keys are echoed back so the client can spot the typo, but a key can
 * be long or hold NUL; show a short, printable prefix. */
#define SHOW_MAX 64

/* Generous, so that any plausible mode name gets the "not supported" answer
 * rather than a length complaint. */
#define ENUM_STRING_MAX 1024

static const char *show_key(const char *key, size_t len, char *buf, size_t buflen)
{
    size_t j = 0, i = 0;
    for (; i < len && i < SHOW_MAX && j + 4 < buflen; i++)
        buf[j++] = (key[i] >= 0x20 && key[i] < 0x7f && key[i] != '"') ? key[i] : '?';
    if (i < len) {
        memcpy(buf + j, "...", 3);
        j += 3;
    }
    buf[j] = '\0';
    return buf;
}

static bool is_null_or_absent(const json_t *v)
{
    return v == NULL || json_is_null(v);
}

/* Refuses any key of obj not in names (NULL-terminated); compares with the
 * stored key length so "ttl\0x" is not taken for "ttl". */
static int check_fields(json_t *obj, const char *const *names, const char *where, fb_error_t *err)
{
    const char *key;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach(obj, key, klen, v)
    {
        bool known = false;
        for (size_t i = 0; names[i] != NULL && !known; i++)
            known = strlen(names[i]) == klen && memcmp(names[i], key, klen) == 0;
        if (!known) {
            char shown[SHOW_MAX + 8];
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s%sunknown field \"%s\"", where,
                                where[0] != '\0' ? ": " : "", show_key(key, klen, shown, sizeof shown));
        }
    }
    return 0;
}

/* A JSON string of at most max bytes with no NUL (jansson keeps embedded NULs
 * that strlen would silently cut at). */
static int get_string(json_t *v, const char *field, size_t max, bool allow_empty, const char **out,
                      fb_error_t *err)
{
    if (!json_is_string(v))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: must be a string", field);
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    if (strlen(s) != len)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: must not contain NUL bytes", field);
    if (len == 0 && !allow_empty)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: must not be empty", field);
    if (len > max)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: longer than %zu bytes", field, max);
    *out = s;
    return 0;
}

/* JSON reals are refused even when integral: 512.0 usually means a client
 * computed the value, and being strict keeps the rule simple to state. */
static int get_int(json_t *v, const char *field, long long min, long long max, long long *out,
                   fb_error_t *err)
{
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: must be an integer between %lld and %lld", field,
                            min, max);
    *out = json_integer_value(v);
    return 0;
}

static int get_path(json_t *v, const char *field, char *out, size_t outlen, fb_error_t *err)
{
    if (!json_is_string(v))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: must be a string", field);
    if (fb_path_normalize_len(json_string_value(v), json_string_length(v), out, outlen, err) < 0)
        return fb_error_wrap(err, "%s", field);
    return 0;
}

static bool label_key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '/' || c == '-';
}

static bool label_key_ok(const char *key, size_t len)
{
    if (len == 0 || len > FB_LABEL_KEY_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!label_key_char(key[i]))
            return false;
    return true;
}

static int parse_labels(json_t *v, json_t **out, fb_error_t *err)
{
    if (!json_is_object(v))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "labels: must be an object of strings");
    if (json_object_size(v) > FB_LABELS_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "labels: more than %d labels", FB_LABELS_MAX);
    cleanup_json json_t *labels = json_object();
    if (labels == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "out of memory");
    const char *key;
    size_t klen;
    json_t *val;
    json_object_keylen_foreach(v, key, klen, val)
    {
        if (!label_key_ok(key, klen))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "labels: keys must be 1 to %d bytes of [A-Za-z0-9._/-]", FB_LABEL_KEY_MAX);
        char field[FB_LABEL_KEY_MAX + 16];
        snprintf(field, sizeof field, "labels.%s", key);
        const char *s;
        if (get_string(val, field, FB_LABEL_VALUE_MAX, true, &s, err) < 0)
            return -1;
        if (json_object_set_new(labels, key, json_stringn(s, json_string_length(val))) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "out of memory");
    }
    *out = fb_steal_ptr(labels);
    return 0;
}

static int parse_env(json_t *v, json_t **out, fb_error_t *err)
{
    if (!json_is_object(v))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "env: must be an object of strings");
    if (json_object_size(v) > FB_ENV_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "env: more than %d entries", FB_ENV_MAX);
    cleanup_json json_t *env = json_object();
    if (env == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "out of memory");
    const char *key;
    size_t klen;
    json_t *val;
    json_object_keylen_foreach(v, key, klen, val)
    {
        if (klen == 0 || klen > FB_ENV_NAME_MAX || strlen(key) != klen || strchr(key, '=') != NULL)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "env: names must be 1 to %d bytes without '=' or NUL", FB_ENV_NAME_MAX);
        char field[FB_ENV_NAME_MAX + 8];
        snprintf(field, sizeof field, "env.%s", key);
        const char *s;
        if (get_string(val, field, FB_ENV_VALUE_MAX, true, &s, err) < 0)
            return -1;
        if (json_object_set_new(env, key, json_stringn(s, json_string_length(val))) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "out of memory");
    }
    *out = fb_steal_ptr(env);
    return 0;
}

static int parse_resources(json_t *v, struct fb_resources *r, fb_error_t *err)
{
    static const char *const fields[] = {"cpus", "memory_mb", "pids", "disk_mb", NULL};
    if (!json_is_object(v))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "resources: must be an object");
    if (check_fields(v, fields, "resources", err) < 0)
        return -1;

    json_t *cpus = json_object_get(v, "cpus");
    if (!is_null_or_absent(cpus)) {
        /* written as !(in range) so that a NaN could never pass */
        double c = json_number_value(cpus);
        if (!json_is_number(cpus) || !(c >= 0.01 && c <= 64.0))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "resources.cpus: must be a number between 0.01 and 64");
        r->cpus = c;
    }
    const struct {
        const char *name;
        const char *field;
        long long min, max;
        uint64_t *dst;
    } ints[] = {
        {"memory_mb", "resources.memory_mb", 16, 65536, &r->memory_mb},
        {"pids", "resources.pids", 16, 32768, &r->pids},
        {"disk_mb", "resources.disk_mb", 16, 1048576, &r->disk_mb},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        json_t *f = json_object_get(v, ints[i].name);
        if (is_null_or_absent(f))
            continue;
        long long n;
        if (get_int(f, ints[i].field, ints[i].min, ints[i].max, &n, err) < 0)
            return -1;
        *ints[i].dst = (uint64_t)n;
    }
    return 0;
}

static int parse_network(json_t *v, struct fb_create_spec *s, fb_error_t *err)
{
    static const char *const fields[] = {"mode", "allow", NULL};
    if (!json_is_object(v))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "network: must be an object");
    if (check_fields(v, fields, "network", err) < 0)
        return -1;
    json_t *mode = json_object_get(v, "mode");
    if (!is_null_or_absent(mode)) {
        const char *m;
        if (get_string(mode, "network.mode", ENUM_STRING_MAX, false, &m, err) < 0)
            return -1;
        if (strcmp(m, "none") != 0 && strcmp(m, "open") != 0 && strcmp(m, "allowlist") != 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "network.mode: must be \"none\", \"open\" or \"allowlist\"");
        fb_strlcpy(s->network_mode, m, sizeof s->network_mode);
    }
    json_t *allow = json_object_get(v, "allow");
    if (!is_null_or_absent(allow)) {
        if (!json_is_array(allow))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "network.allow: must be an array");
        if (json_array_size(allow) != 0 && strcmp(s->network_mode, "allowlist") != 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "network.allow: must be empty when network.mode is \"%s\"", s->network_mode);
        if (json_array_size(allow) > FB_ALLOW_MAX)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "network.allow: at most %d entries",
                                FB_ALLOW_MAX);
        json_t *norm = json_array();
        if (norm == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
        fb_json_decrefp(&s->allow);
        s->allow = norm;
        size_t i;
        json_t *e;
        json_array_foreach(allow, i, e)
        {
            const char *text;
            struct fb_allow a;
            char canon[FB_ALLOW_TEXT_MAX];
            if (get_string(e, "network.allow[]", FB_ALLOW_TEXT_MAX - 1, false, &text, err) < 0 ||
                fb_allow_parse(text, &a, err) < 0)
                return -1;
            if (a.kind == FB_ALLOW_CIDR && fb_allow_blocked(&a))
                return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                    "network.allow: \"%s\" is in a range that is always blocked (private, "
                                    "link-local, loopback, multicast)",
                                    text);
            fb_allow_format(&a, canon, sizeof canon);
            json_array_append_new(norm, json_string(canon));
        }
    }
    return 0;
}

int fb_network_spec_parse(json_t *v, char mode[FB_NET_MODE_MAX], json_t **allow, fb_error_t *err)
{
    *allow = NULL;
    cleanup_create_spec struct fb_create_spec s;
    memset(&s, 0, sizeof s);
    strcpy(s.network_mode, "none");
    if (parse_network(v, &s, err) < 0)
        return -1;
    fb_strlcpy(mode, s.network_mode, FB_NET_MODE_MAX);
    *allow = s.allow != NULL ? fb_steal_ptr(s.allow) : json_array();
    return 0;
}

/* /proc, /sys and /dev are the sandbox's own kernel views, mounted after
 * the volumes: a volume there would be hidden or would hide them. */
static bool reserved_mount_path(const char *p)
{
    static const char *const reserved[] = {"/proc", "/sys", "/dev"};
    if (strcmp(p, "/") == 0)
        return true;
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
        size_t n = strlen(reserved[i]);
        if (strncmp(p, reserved[i], n) == 0 && (p[n] == '\0' || p[n] == '/'))
            return true;
    }
    return false;
}

/* Whether inner is outer or below it. */
static bool path_within(const char *inner, const char *outer)
{
    size_t n = strlen(outer);
    return strncmp(inner, outer, n) == 0 && (inner[n] == '\0' || inner[n] == '/');
}

static int parse_volume(json_t *v, size_t i, struct fb_volume_mount *m, fb_error_t *err)
{
    static const char *const fields[] = {"name", "path", "read_only", NULL};
    char where[32];
    snprintf(where, sizeof where, "volumes[%zu]", i);
    if (!json_is_object(v))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: must be an object", where);
    if (check_fields(v, fields, where, err) < 0)
        return -1;
    char field[48];
    const char *name;
    snprintf(field, sizeof field, "%s.name", where);
    json_t *f = json_object_get(v, "name");
    if (is_null_or_absent(f))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: required", field);
    if (get_string(f, field, FB_VOLUME_NAME_MAX, false, &name, err) < 0 ||
        fb_volume_name_check(name, err) < 0)
        return fb_error_wrap(err, "%s", where);
    strcpy(m->name, name);
    snprintf(field, sizeof field, "%s.path", where);
    f = json_object_get(v, "path");
    if (is_null_or_absent(f))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: required", field);
    if (json_is_string(f) && json_string_length(f) > FB_VOLUME_PATH_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: longer than %d bytes", field,
                            FB_VOLUME_PATH_MAX);
    if (get_path(f, field, m->path, sizeof m->path, err) < 0)
        return -1;
    if (reserved_mount_path(m->path))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                            "%s: a volume cannot be mounted at %s (not /, nor under "
                            "/proc, /sys or /dev)",
                            field, m->path);
    f = json_object_get(v, "read_only");
    if (!is_null_or_absent(f)) {
        if (!json_is_boolean(f))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s.read_only: must be a boolean", where);
        m->read_only = json_is_true(f);
    }
    return 0;
}

static int parse_volumes(json_t *v, struct fb_create_spec *s, fb_error_t *err)
{
    if (!json_is_array(v))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "volumes: must be an array");
    if (json_array_size(v) > FB_VOLUMES_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "volumes: at most %d", FB_VOLUMES_MAX);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        struct fb_volume_mount *m = &s->volumes[i];
        memset(m, 0, sizeof *m);
        if (parse_volume(e, i, m, err) < 0)
            return -1;
        /* one mount per path; nested ones would write into each other */
        for (size_t j = 0; j < i; j++) {
            if (path_within(m->path, s->volumes[j].path) || path_within(s->volumes[j].path, m->path))
                return fb_error_set(
                    err, FB_ERR_BAD_REQUEST, 0, "volumes[%zu].path: %s %s volumes[%zu]'s %s", i, m->path,
                    strcmp(m->path, s->volumes[j].path) == 0 ? "is also" : "overlaps", j, s->volumes[j].path);
        }
        s->n_volumes = i + 1;
    }
    return 0;
}

static void create_defaults(struct fb_create_spec *s)
{
    memset(s, 0, sizeof *s);
    strcpy(s->template_name, "default");
    strcpy(s->on_expire, "delete");
    strcpy(s->workdir, "/root");
    strcpy(s->network_mode, "none");
    s->res.cpus = 1.0;
    s->res.memory_mb = 512;
    s->res.pids = 512;
    s->res.disk_mb = FB_SPEC_DEFAULT_DISK_MB;
}

static int parse_create_fields(json_t *body, struct fb_create_spec *s, fb_error_t *err)
{
    static const char *const fields[] = {"template", "ttl",       "on_expire", "labels",       "env",
                                         "workdir",  "resources", "network",   "idle_timeout", "checkpoint",
                                         "volumes",  "user",      NULL};
    if (!json_is_object(body))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "request body must be a JSON object");
    if (check_fields(body, fields, "", err) < 0)
        return -1;

    json_t *v = json_object_get(body, "template");
    if (!is_null_or_absent(v)) {
        const char *name;
        if (get_string(v, "template", FB_TEMPLATE_NAME_MAX, false, &name, err) < 0 ||
            fb_template_name_check(name, err) < 0)
            return -1;
        strcpy(s->template_name, name);
    }
    v = json_object_get(body, "checkpoint");
    if (!is_null_or_absent(v)) {
        const char *id;
        if (get_string(v, "checkpoint", FB_CHECKPOINT_ID_LEN, false, &id, err) < 0)
            return -1;
        if (!fb_checkpoint_id_valid(id))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "checkpoint: must be a checkpoint id (ckpt_...)");
        strcpy(s->checkpoint, id);
    }
    v = json_object_get(body, "ttl");
    if (!is_null_or_absent(v)) {
        long long ttl;
        if (get_int(v, "ttl", 0, FB_TTL_MAX, &ttl, err) < 0)
            return -1;
        s->ttl_s = ttl;
    }
    v = json_object_get(body, "idle_timeout");
    if (!is_null_or_absent(v)) {
        long long idle;
        if (get_int(v, "idle_timeout", 0, FB_TTL_MAX, &idle, err) < 0)
            return -1;
        s->idle_timeout_s = idle;
    }
    v = json_object_get(body, "on_expire");
    if (!is_null_or_absent(v)) {
        const char *oe;
        if (get_string(v, "on_expire", ENUM_STRING_MAX, false, &oe, err) < 0)
            return -1;
        if (strcmp(oe, "delete") != 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "on_expire: only \"delete\" is supported in this version");
    }
    v = json_object_get(body, "labels");
    if (!is_null_or_absent(v) && parse_labels(v, &s->labels, err) < 0)
        return -1;
    v = json_object_get(body, "env");
    if (!is_null_or_absent(v) && parse_env(v, &s->env, err) < 0)
        return -1;
    v = json_object_get(body, "workdir");
    if (!is_null_or_absent(v)) {
        if (get_path(v, "workdir", s->workdir, sizeof s->workdir, err) < 0)
            return -1;
        s->workdir_set = true;
    }
    v = json_object_get(body, "user");
    if (!is_null_or_absent(v)) {
        const char *u;
        if (get_string(v, "user", FB_USER_MAX, false, &u, err) < 0 || fb_user_check(u, err) < 0)
            return -1;
        strcpy(s->user, u);
    }
    v = json_object_get(body, "resources");
    if (!is_null_or_absent(v) && parse_resources(v, &s->res, err) < 0)
        return -1;
    v = json_object_get(body, "network");
    if (!is_null_or_absent(v) && parse_network(v, s, err) < 0)
        return -1;
    v = json_object_get(body, "volumes");
    if (!is_null_or_absent(v) && parse_volumes(v, s, err) < 0)
        return -1;
    return 0;
}

int fb_create_spec_parse(json_t *body, struct fb_create_spec *out, fb_error_t *err)
{
    cleanup_create_spec struct fb_create_spec s;
    create_defaults(&s);
    memset(out, 0, sizeof *out);
    if (body != NULL && !json_is_null(body) && parse_create_fields(body, &s, err) < 0)
        return -1;
    /* Empty objects rather than NULL so consumers need no special case. */
    if (s.labels == NULL && (s.labels = json_object()) == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "out of memory");
    if (s.env == NULL && (s.env = json_object()) == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "out of memory");
    if (s.allow == NULL && (s.allow = json_array()) == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "out of memory");
    *out = s;
    s.labels = NULL;
    s.env = NULL;
    s.allow = NULL;
    return 0;
}

void fb_create_spec_clear(struct fb_create_spec *s)
{
    if (s == NULL)
        return;
    fb_json_decrefp(&s->labels);
    fb_json_decrefp(&s->env);
    fb_json_decrefp(&s->allow);
}

bool fb_checkpoint_id_valid(const char *s)
{
    if (strncmp(s, "ckpt_", 5) != 0 || strlen(s) != FB_CHECKPOINT_ID_LEN)
        return false;
    for (const char *p = s + 5; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

json_t *fb_create_spec_to_json(const struct fb_create_spec *s)
{
    json_t *labels = s->labels != NULL ? json_deep_copy(s->labels) : json_object();
    json_t *env = s->env != NULL ? json_deep_copy(s->env) : json_object();
    json_t *allow = s->allow != NULL ? json_deep_copy(s->allow) : json_array();
    /* json_pack releases the "o" references it was given even when it fails */
    json_t *o = json_pack("{s:s, s:I, s:I, s:s, s:o, s:o, s:s, s:{s:f, s:I, s:I, s:I}, s:{s:s, s:o}}",
                          "template", s->template_name, "ttl", (json_int_t)s->ttl_s, "idle_timeout",
                          (json_int_t)s->idle_timeout_s, "on_expire", s->on_expire, "labels", labels, "env",
                          env, "workdir", s->workdir, "resources", "cpus", s->res.cpus, "memory_mb",
                          (json_int_t)s->res.memory_mb, "pids", (json_int_t)s->res.pids, "disk_mb",
                          (json_int_t)s->res.disk_mb, "network", "mode", s->network_mode, "allow", allow);
    if (o != NULL && s->checkpoint[0] != '\0')
        json_object_set_new(o, "checkpoint", json_string(s->checkpoint));
    if (o != NULL && s->user[0] != '\0')
        json_object_set_new(o, "user", json_string(s->user));
    json_t *vols = o != NULL ? json_array() : NULL;
    for (size_t i = 0; vols != NULL && i < s->n_volumes; i++)
        json_array_append_new(vols, json_pack("{s:s, s:s, s:b}", "name", s->volumes[i].name, "path",
                                              s->volumes[i].path, "read_only", s->volumes[i].read_only));
    if (vols != NULL)
        json_object_set_new(o, "volumes", vols);
    return o;
}

int fb_create_spec_from_json(json_t *j, struct fb_create_spec *out, fb_error_t *err)
{
    if (j == NULL) {
        memset(out, 0, sizeof *out);
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "stored sandbox spec is missing");
    }
    /* The stored form uses the request's field names, so the request rules
     * apply; a failure here is corrupt state, not a client mistake. */
    bool had_error = err != NULL && *err != NULL;
    if (fb_create_spec_parse(j, out, err) < 0) {
        if (!had_error && err != NULL && *err != NULL)
            (*err)->kind = FB_ERR_INTERNAL;
        return fb_error_wrap(err, "stored sandbox spec");
    }
    return 0;
}

static int parse_argv(json_t *cmd, struct fb_exec_spec *s, fb_error_t *err)
{
    const char *str;
    if (json_is_string(cmd)) {
        if (get_string(cmd, "cmd", FB_ARG_MAX, false, &str, err) < 0)
            return -1;
        s->argv = calloc(4, sizeof *s->argv);
        if (s->argv == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "out of memory");
        const char *parts[] = {"/bin/sh", "-c", str};
        for (size_t i = 0; i < 3; i++)
            if ((s->argv[i] = strdup(parts[i])) == NULL)
                return fb_error_set(err, FB_ERR_INTERNAL, 0, "out of memory");
        s->argc = 3;
        return 0;
    }
    if (!json_is_array(cmd))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "cmd: must be a string or an array of strings");
    size_t n = json_array_size(cmd);
    if (n == 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "cmd: must not be empty");
    if (n > FB_ARGV_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "cmd: more than %d arguments", FB_ARGV_MAX);
    s->argv = calloc(n + 1, sizeof *s->argv);
    if (s->argv == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char field[32];
        snprintf(field, sizeof field, "cmd[%zu]", i);
        /* only the program may not be empty: "" is a legitimate argument */
        if (get_string(json_array_get(cmd, i), field, FB_ARG_MAX, i > 0, &str, err) < 0)
            return -1;
        if ((s->argv[i] = strdup(str)) == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "out of memory");
        s->argc = i + 1;
    }
    return 0;
}

/* A passwd name ([A-Za-z0-9._-], optionally ending in '$', not starting with
 * '-') or a decimal uid the sandbox maps (0..65535). */
int fb_user_check(const char *u, fb_error_t *err)
{
    size_t len = strlen(u);
    bool digits = true;
    for (size_t i = 0; i < len; i++) {
        char c = u[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                  c == '_' || (c == '-' && i > 0) || (c == '$' && i == len - 1 && i > 0);
        if (!ok)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "user: must be a user name or a decimal uid");
        digits = digits && c >= '0' && c <= '9';
    }
    /* a sandbox maps 65536 ids: any other uid cannot be switched to */
    if (digits && (len > 5 || strtoull(u, NULL, 10) > 65535))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "user: uid must be between 0 and 65535");
    return 0;
}

/* Seconds to whole milliseconds, rounding up, but without letting binary
 * noise (2.007 * 1000 = 2007.0000000000002) add a millisecond. */
static int64_t seconds_to_ms(double sec)
{
    double x = sec * 1000.0;
    int64_t ms = (int64_t)x;
    if (x - (double)ms > 1e-6)
        ms++;
    return ms < 1 ? 1 : ms;
}

static int parse_exec_fields(json_t *body, struct fb_exec_spec *s, fb_error_t *err)
{
    static const char *const fields[] = {"cmd", "env", "cwd", "user", "timeout", "stdin", "max_output_bytes",
                                         NULL};
    if (!json_is_object(body))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "request body must be a JSON object");
    if (check_fields(body, fields, "", err) < 0)
        return -1;

    json_t *v = json_object_get(body, "cmd");
    if (is_null_or_absent(v))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "cmd: required");
    if (parse_argv(v, s, err) < 0)
        return -1;
    v = json_object_get(body, "env");
    if (!is_null_or_absent(v) && parse_env(v, &s->env, err) < 0)
        return -1;
    v = json_object_get(body, "cwd");
    if (!is_null_or_absent(v) && get_path(v, "cwd", s->cwd, sizeof s->cwd, err) < 0)
        return -1;
    v = json_object_get(body, "user");
    if (!is_null_or_absent(v)) {
        const char *u;
        if (get_string(v, "user", FB_USER_MAX, false, &u, err) < 0 || fb_user_check(u, err) < 0)
            return -1;
        strcpy(s->user, u);
    }
    v = json_object_get(body, "timeout");
    if (!is_null_or_absent(v)) {
        double t = json_number_value(v);
        if (!json_is_number(v) || !(t >= 0.001 && t <= FB_TIMEOUT_MAX))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "timeout: must be a number of seconds between 0.001 and %d", FB_TIMEOUT_MAX);
        s->timeout_ms = seconds_to_ms(t);
    }
    v = json_object_get(body, "stdin");
    if (!is_null_or_absent(v)) {
        /* stdin is data, not a name: NUL bytes are passed through */
        if (!json_is_string(v))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "stdin: must be a string");
        size_t len = json_string_length(v);
        if (len > FB_STDIN_MAX)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "stdin: longer than %d bytes", FB_STDIN_MAX);
        if ((s->stdin_data = malloc(len + 1)) == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "out of memory");
        memcpy(s->stdin_data, json_string_value(v), len);
        s->stdin_data[len] = '\0';
        s->stdin_len = len;
    }
    v = json_object_get(body, "max_output_bytes");
    if (!is_null_or_absent(v)) {
        long long m;
        if (get_int(v, "max_output_bytes", 0, FB_OUTPUT_MAX, &m, err) < 0)
            return -1;
        s->max_output = m;
    }
    return 0;
}

int fb_exec_spec_parse(json_t *body, struct fb_exec_spec *out, fb_error_t *err)
{
    cleanup_exec_spec struct fb_exec_spec s = {
        .timeout_ms = (int64_t)FB_TIMEOUT_DEFAULT * 1000,
        .max_output = FB_OUTPUT_DEFAULT,
        .user = "", /* the sandbox's default user */
    };
    memset(out, 0, sizeof *out);
    if (body == NULL)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "cmd: required");
    if (parse_exec_fields(body, &s, err) < 0)
        return -1;
    if (s.env == NULL && (s.env = json_object()) == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "out of memory");
    *out = s;
    memset(&s, 0, sizeof s);
    return 0;
}

void fb_exec_spec_clear(struct fb_exec_spec *s)
{
    if (s == NULL)
        return;
    if (s->argv != NULL) {
        for (size_t i = 0; s->argv[i] != NULL; i++)
            free(s->argv[i]);
        fb_freep(&s->argv);
    }
    s->argc = 0;
    fb_json_decrefp(&s->env);
    fb_freep(&s->stdin_data);
    s->stdin_len = 0;
}

/* [a-z0-9][a-z0-9._-]{0,max-1}: safe as a file name and in a URL */
static bool simple_name_ok(const char *name, size_t max)
{
    size_t len = name != NULL ? strlen(name) : 0;
    bool ok = len >= 1 && len <= max;
    for (size_t i = 0; ok && i < len; i++) {
        char c = name[i];
        ok =
            (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (i > 0 && (c == '.' || c == '_' || c == '-'));
    }
    return ok;
}

int fb_volume_name_check(const char *name, fb_error_t *err)
{
    if (!simple_name_ok(name, FB_VOLUME_NAME_MAX))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "volume: name must match [a-z0-9][a-z0-9._-]{0,%d}",
                            FB_VOLUME_NAME_MAX - 1);
    return 0;
}

int fb_volume_spec_parse(json_t *body, char *name, uint64_t *size_mb, fb_error_t *err)
{
    static const char *const fields[] = {"name", "size_mb", NULL};
    name[0] = '\0';
    *size_mb = FB_VOLUME_DEFAULT_MB;
    if (!json_is_object(body))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "request body must be a JSON object");
    if (check_fields(body, fields, "", err) < 0)
        return -1;
    json_t *v = json_object_get(body, "name");
    const char *n;
    if (is_null_or_absent(v))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "name: required");
    if (get_string(v, "name", FB_VOLUME_NAME_MAX, false, &n, err) < 0 || fb_volume_name_check(n, err) < 0)
        return -1;
    v = json_object_get(body, "size_mb");
    long long mb;
    if (!is_null_or_absent(v)) {
        if (get_int(v, "size_mb", FB_VOLUME_MIN_MB, FB_VOLUME_MAX_MB, &mb, err) < 0)
            return -1;
        *size_mb = (uint64_t)mb;
    }
    strcpy(name, n);
    return 0;
}

int fb_template_name_check(const char *name, fb_error_t *err)
{
    bool ok = simple_name_ok(name, FB_TEMPLATE_NAME_MAX);
    if (!ok)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "template: must match [a-z0-9][a-z0-9._-]{0,%d}",
                            FB_TEMPLATE_NAME_MAX - 1);
    return 0;
}

int fb_label_selector_parse(const char *sel, char *key, size_t keylen, char *val, size_t vallen,
                            fb_error_t *err)
{
    if (keylen > 0)
        key[0] = '\0';
    if (vallen > 0)
        val[0] = '\0';
    const char *eq = sel != NULL ? strchr(sel, '=') : NULL;
    if (eq == NULL)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "label: selector must be key=value");
    size_t klen = (size_t)(eq - sel);
    if (!label_key_ok(sel, klen))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "label: key must be 1 to %d bytes of [A-Za-z0-9._/-]",
                            FB_LABEL_KEY_MAX);
    if (strlen(eq + 1) > FB_LABEL_VALUE_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "label: value longer than %d bytes",
                            FB_LABEL_VALUE_MAX);
    if (klen >= keylen || fb_strlcpy(val, eq + 1, vallen) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "label selector buffer too small");
    memcpy(key, sel, klen);
    key[klen] = '\0';
    return 0;
}

json_t *fb_env_from_list(json_t *list, json_t *over)
{
    json_t *env = json_object();
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        const char *kv = json_string_value(v);
        const char *eq = kv ? strchr(kv, '=') : NULL;
        if (env == NULL || eq == NULL || eq == kv || (size_t)(eq - kv) > FB_ENV_NAME_MAX)
            continue;
        char key[FB_ENV_NAME_MAX + 1];
        memcpy(key, kv, (size_t)(eq - kv));
        key[eq - kv] = '\0';
        json_object_set_new(env, key, json_string(eq + 1));
    }
    if (env != NULL && over != NULL)
        json_object_update(env, over);
    return env;
}
