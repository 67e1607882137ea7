#include "ckptfmt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/util.h"

#define WH_PREFIX ".wh."
#define WH_OPAQUE ".wh..wh..opq"
#define CRIU_NAME_MAX 128

void fb_ckpt_manifest_clear(struct fb_ckpt_manifest *m)
{
    free(m->members);
    memset(m, 0, sizeof *m);
}

int fb_ckpt_manifest_add(struct fb_ckpt_manifest *m, const char *name, int64_t size, const char *sha256,
                         fb_error_t *err)
{
    if (m->n_members >= FB_CKPT_MEMBERS_MAX)
        return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "more than %d members", FB_CKPT_MEMBERS_MAX);
    if (m->n_members % 64 == 0) {
        struct fb_ckpt_member *n = realloc(m->members, (m->n_members + 64) * sizeof *n);
        if (n == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "manifest members");
        m->members = n;
    }
    struct fb_ckpt_member *e = &m->members[m->n_members];
    memset(e, 0, sizeof *e);
    if (fb_strlcpy(e->name, name, sizeof e->name) < 0 || fb_strlcpy(e->sha256, sha256, sizeof e->sha256) < 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "member name or digest too long");
    e->size = size;
    m->n_members++;
    return 0;
}

static json_t *str_or_null(const char *s)
{
    return s[0] ? json_string(s) : json_null();
}

json_t *fb_ckpt_manifest_to_json(const struct fb_ckpt_manifest *m)
{
    json_t *members = json_array();
    for (size_t i = 0; members != NULL && i < m->n_members; i++)
        json_array_append_new(members,
                              json_pack("{s:s, s:I, s:s}", "name", m->members[i].name, "size",
                                        (json_int_t)m->members[i].size, "sha256", m->members[i].sha256));
    return json_pack("{s:s, s:i, s:s, s:s, s:o, s:o, s:s, s:{s:s, s:s}, s:b, s:s, s:I, s:I, s:o}", "format",
                     FB_CKPT_FORMAT, "version", m->version, "forkbox_version", m->forkbox_version, "id",
                     m->id, "name", str_or_null(m->name), "parent", str_or_null(m->parent), "created_at",
                     m->created_at, "template", "name", m->template_name, "digest", m->template_digest,
                     "memory", m->memory, "layer_kind", m->layer_kind, "disk_bytes",
                     (json_int_t)m->disk_bytes, "uid_base", (json_int_t)m->uid_base, "members", members);
}

bool fb_sha256_hex_valid(const char *s, bool with_prefix)
{
    if (with_prefix) {
        if (strncmp(s, "sha256:", 7) != 0)
            return false;
        s += 7;
    }
    size_t n = 0;
    for (; s[n] != '\0'; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
            return false;
    return n == 64;
}

bool fb_ckpt_member_name_valid(const char *name)
{
    if (strcmp(name, FB_CKPT_LAYER_NAME) == 0)
        return true;
    size_t plen = strlen(FB_CKPT_CRIU_PREFIX);
    if (strncmp(name, FB_CKPT_CRIU_PREFIX, plen) != 0)
        return false;
    const char *p = name + plen;
    size_t n = strlen(p);
    if (n == 0 || n > CRIU_NAME_MAX || p[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

const struct fb_ckpt_member *fb_ckpt_manifest_find(const struct fb_ckpt_manifest *m, const char *name)
{
    for (size_t i = 0; i < m->n_members; i++)
        if (strcmp(m->members[i].name, name) == 0)
            return &m->members[i];
    return NULL;
}

/* A string field of at most len-1 bytes without control characters (NULL
 * allowed when nullable: ""). */
static int get_str(json_t *obj, const char *key, bool nullable, char *out, size_t len, fb_error_t *err)
{
    json_t *v = json_object_get(obj, key);
    out[0] = '\0';
    if (v == NULL)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: \"%s\" missing", key);
    if (nullable && json_is_null(v))
        return 0;
    const char *s = json_string_value(v);
    if (s == NULL || json_string_length(v) != strlen(s) || fb_strlcpy(out, s, len) < 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                            "manifest: \"%s\" must be a string of at most %zu bytes", key, len - 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: \"%s\" holds control characters", key);
    return 0;
}

static int get_int(json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out, fb_error_t *err)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: \"%s\" must be an integer in %lld..%lld",
                            key, (long long)min, (long long)max);
    *out = json_integer_value(v);
    return 0;
}

static int only_keys(json_t *obj, const char *const *known, const char *where, fb_error_t *err)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        (void)v;
        bool ok = false;
        for (size_t i = 0; known[i] != NULL && !ok; i++)
            ok = strcmp(k, known[i]) == 0;
        if (!ok)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: unknown field \"%.64s\" in %s", k,
                                where);
    }
    return 0;
}

static int parse_members(json_t *arr, struct fb_ckpt_manifest *m, fb_error_t *err)
{
    if (!json_is_array(arr))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: \"members\" must be an array");
    if (json_array_size(arr) > FB_CKPT_MEMBERS_MAX + 1)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: more than %d members",
                            FB_CKPT_MEMBERS_MAX);
    static const char *const keys[] = {"name", "size", "sha256", NULL};
    size_t i;
    json_t *e;
    int64_t total = 0;
    bool criu = false;
    json_array_foreach(arr, i, e)
    {
        if (!json_is_object(e) || only_keys(e, keys, "a member", err) < 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "manifest: member %zu must be {name, size, sha256}", i);
        char name[FB_CKPT_MEMBER_NAME_MAX], sha[65];
        int64_t size;
        if (get_str(e, "name", false, name, sizeof name, err) < 0 ||
            get_int(e, "size", 0, FB_CKPT_TAR_MAX, &size, err) < 0 ||
            get_str(e, "sha256", false, sha, sizeof sha, err) < 0)
            return -1;
        if (!fb_ckpt_member_name_valid(name))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: member name \"%.64s\" is not allowed",
                                name);
        if (!fb_sha256_hex_valid(sha, false))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "manifest: member %s: sha256 must be 64 hex digits", name);
        if (fb_ckpt_manifest_find(m, name) != NULL)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: member %s listed twice", name);
        total += size;
        if (total > FB_CKPT_TAR_MAX)
            return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "manifest: members exceed %lld bytes",
                                (long long)FB_CKPT_TAR_MAX);
        criu = criu || strcmp(name, FB_CKPT_LAYER_NAME) != 0;
        if (fb_ckpt_manifest_add(m, name, size, sha, err) < 0)
            return -1;
    }
    if (fb_ckpt_manifest_find(m, FB_CKPT_LAYER_NAME) == NULL)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: no member %s", FB_CKPT_LAYER_NAME);
    if (criu != m->memory)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: \"memory\" is %s but criu/ members are %s",
                            m->memory ? "true" : "false", criu ? "listed" : "absent");
    return 0;
}

int fb_ckpt_manifest_parse(const char *text, size_t len, struct fb_ckpt_manifest *m, fb_error_t *err)
{
    memset(m, 0, sizeof *m);
    if (len > FB_CKPT_MANIFEST_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest larger than %d bytes",
                            FB_CKPT_MANIFEST_MAX);
    json_error_t jerr;
    cleanup_json json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(j))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest is not a JSON object: %s",
                            j == NULL ? jerr.text : "another type");
    /* format and version first: a newer export is told apart from a broken one */
    const char *fmt = json_string_value(json_object_get(j, "format"));
    if (fmt == NULL || strcmp(fmt, FB_CKPT_FORMAT) != 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: \"format\" must be \"%s\"",
                            FB_CKPT_FORMAT);
    json_t *ver = json_object_get(j, "version");
    if (!json_is_integer(ver) || json_integer_value(ver) != FB_CKPT_FORMAT_VERSION)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                            "manifest: unsupported format version (this forkbox reads version %d)",
                            FB_CKPT_FORMAT_VERSION);
    m->version = FB_CKPT_FORMAT_VERSION;
    static const char *const keys[] = {"format",     "version",    "forkbox_version", "id",     "name",
                                       "parent",     "created_at", "template",        "memory", "layer_kind",
                                       "disk_bytes", "uid_base",   "members",         NULL};
    static const char *const tkeys[] = {"name", "digest", NULL};
    if (only_keys(j, keys, "the manifest", err) < 0)
        return -1;
    json_t *tpl = json_object_get(j, "template");
    if (!json_is_object(tpl) || only_keys(tpl, tkeys, "\"template\"", err) < 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: \"template\" must be {name, digest}");
    json_t *mem = json_object_get(j, "memory");
    if (!json_is_boolean(mem))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: \"memory\" must be a boolean");
    m->memory = json_is_true(mem);
    if (get_str(j, "forkbox_version", false, m->forkbox_version, sizeof m->forkbox_version, err) < 0 ||
        get_str(j, "id", false, m->id, sizeof m->id, err) < 0 ||
        get_str(j, "name", true, m->name, sizeof m->name, err) < 0 ||
        get_str(j, "parent", true, m->parent, sizeof m->parent, err) < 0 ||
        get_str(j, "created_at", false, m->created_at, sizeof m->created_at, err) < 0 ||
        get_str(tpl, "name", false, m->template_name, sizeof m->template_name, err) < 0 ||
        get_str(tpl, "digest", false, m->template_digest, sizeof m->template_digest, err) < 0 ||
        get_str(j, "layer_kind", false, m->layer_kind, sizeof m->layer_kind, err) < 0 ||
        get_int(j, "disk_bytes", 0, FB_CKPT_DISK_MAX, &m->disk_bytes, err) < 0 ||
        get_int(j, "uid_base", 0, UINT32_MAX, &m->uid_base, err) < 0)
        return -1;
    if (!fb_sha256_hex_valid(m->template_digest, true))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: template digest must be sha256:<64 hex>");
    if (strcmp(m->layer_kind, "image") != 0 && strcmp(m->layer_kind, "dir") != 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                            "manifest: \"layer_kind\" must be \"image\" or \"dir\"");
    if (m->disk_bytes != 0 && m->disk_bytes < FB_CKPT_DISK_MIN)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "manifest: \"disk_bytes\" must be 0 or at least %lld",
                            (long long)FB_CKPT_DISK_MIN);
    return parse_members(json_object_get(j, "members"), m, err);
}

int fb_whiteout_parse(const char *path, char *target, size_t len, fb_error_t *err)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dirlen = slash ? (size_t)(slash - path) : 0;
    size_t plen = strlen(WH_PREFIX);
    if (strncmp(base, WH_PREFIX, plen) != 0) {
        if (fb_strlcpy(target, path, len) < 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "layer member name too long");
        return FB_WH_NONE;
    }
    const char *rest = base + plen;
    if (strcmp(base, WH_OPAQUE) == 0) {
        if (dirlen + 1 > len)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "layer member name too long");
        memcpy(target, path, dirlen);
        target[dirlen] = '\0';
        return FB_WH_OPAQUE;
    }
    if (rest[0] == '\0' || strcmp(rest, ".") == 0 || strcmp(rest, "..") == 0 ||
        strncmp(rest, WH_PREFIX, plen) == 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "layer member \"%.96s\": not a valid whiteout name",
                            path);
    if (dirlen + 1 + strlen(rest) + 1 > len)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "layer member name too long");
    memcpy(target, path, dirlen);
    target[dirlen] = '\0';
    if (dirlen > 0)
        strcat(target, "/");
    strcat(target, rest);
    return FB_WH_FILE;
}

int fb_whiteout_name(const char *dir, const char *name, bool opaque, char *out, size_t len)
{
    const char *sep = dir[0] ? "/" : "";
    int r = opaque ? fb_snprintf(out, len, "%s%s%s", dir, sep, WH_OPAQUE)
                   : fb_snprintf(out, len, "%s%s%s%s", dir, sep, WH_PREFIX, name);
    return r < 0 ? -1 : 0;
}
