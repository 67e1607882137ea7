#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/json_util.h"
#include "core/spec.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

struct bad_case {
    const char *json; /* ' stands for " */
    const char *msg;  /* substring the error must contain */
};

/* Several bodies refused with the same message. */
struct bad_group {
    const char *msg;
    const char *json[10];
};

/* Test bodies are written with ' for " to keep them readable; a real
 * apostrophe would be \u0027. */
static json_t *load(const char *text)
{
    cleanup_free char *copy = strdup(text);
    assert_non_null(copy);
    for (char *p = copy; *p != '\0'; p++)
        if (*p == '\'')
            *p = '"';
    json_error_t jerr;
    json_t *j = json_loads(copy, JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
    if (j == NULL)
        fail_msg("test JSON does not parse: %s: %s", copy, jerr.text);
    return j;
}

/* load() of tmpl with its '@' replaced by a JSON string of n copies of c. */
static json_t *body_with(const char *tmpl, char c, size_t n)
{
    const char *at = strchr(tmpl, '@');
    assert_non_null(at);
    size_t pre = (size_t)(at - tmpl);
    cleanup_free char *text = malloc(strlen(tmpl) + n + 3);
    assert_non_null(text);
    memcpy(text, tmpl, pre);
    text[pre] = '"';
    memset(text + pre + 1, c, n);
    text[pre + 1 + n] = '"';
    strcpy(text + pre + 2 + n, at + 1);
    return load(text);
}

static char *dump(json_t *j)
{
    char *s = j != NULL ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    return s != NULL ? s : strdup("(null)");
}

/* Parses body (consumed) into *out, failing the test on an error. */
static void create_ok(json_t *body, struct fb_create_spec *out)
{
    cleanup_json json_t *b = body;
    cleanup_error fb_error_t err = NULL;
    if (fb_create_spec_parse(b, out, &err) != 0) {
        cleanup_free char *text = dump(b);
        fail_msg("create %.200s refused: %s", text, err->msg);
    }
}

static void create_bad(json_t *body, const char *msg)
{
    cleanup_json json_t *b = body;
    cleanup_free char *text = dump(b);
    cleanup_error fb_error_t err = NULL;
    struct fb_create_spec s;
    if (fb_create_spec_parse(b, &s, &err) != -1)
        fail_msg("create %.200s accepted", text);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    if (strstr(err->msg, msg) == NULL)
        fail_msg("create %.200s: message \"%s\" lacks \"%s\"", text, err->msg, msg);
    /* nothing is handed out on failure */
    assert_null(s.labels);
    assert_null(s.env);
}

static void exec_ok(json_t *body, struct fb_exec_spec *out)
{
    cleanup_json json_t *b = body;
    cleanup_error fb_error_t err = NULL;
    if (fb_exec_spec_parse(b, out, &err) != 0) {
        cleanup_free char *text = dump(b);
        fail_msg("exec %.200s refused: %s", text, err->msg);
    }
}

static void exec_bad(json_t *body, const char *msg)
{
    cleanup_json json_t *b = body;
    cleanup_free char *text = dump(b);
    cleanup_error fb_error_t err = NULL;
    struct fb_exec_spec s;
    if (fb_exec_spec_parse(b, &s, &err) != -1)
        fail_msg("exec %.200s accepted", text);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    if (strstr(err->msg, msg) == NULL)
        fail_msg("exec %.200s: message \"%s\" lacks \"%s\"", text, err->msg, msg);
    assert_null(s.argv);
    assert_null(s.env);
    assert_null(s.stdin_data);
}

static void assert_defaults(const struct fb_create_spec *s)
{
    assert_string_equal(s->template_name, "default");
    assert_int_equal(s->ttl_s, 0);
    assert_string_equal(s->on_expire, "delete");
    assert_true(json_is_object(s->labels) && json_object_size(s->labels) == 0);
    assert_true(json_is_object(s->env) && json_object_size(s->env) == 0);
    assert_string_equal(s->workdir, "/root");
    assert_true(s->res.cpus == 1.0);
    assert_int_equal(s->res.memory_mb, 512);
    assert_int_equal(s->res.pids, 512);
    assert_int_equal(s->res.disk_mb, 2048);
    assert_string_equal(s->network_mode, "none");
}

static void test_create_defaults(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "{}",
        "null",
        "{'template':null,'ttl':null,'on_expire':null,'labels':null,'env':null,'workdir':null,"
        "'resources':null,'network':null}",
        "{'resources':{'cpus':null,'memory_mb':null,'pids':null,'disk_mb':null},"
        "'network':{'mode':null,'allow':null}}",
        "{'resources':{},'network':{},'labels':{},'env':{}}",
    };
    struct fb_create_spec s;
    for (size_t i = 0; i < N(bodies); i++) {
        create_ok(load(bodies[i]), &s);
        assert_defaults(&s);
        fb_create_spec_clear(&s);
        assert_null(s.labels);
        fb_create_spec_clear(&s); /* clearing twice is harmless */
    }
    create_ok(NULL, &s);
    assert_defaults(&s);
    fb_create_spec_clear(&s);
}

static const char full_body[] =
    "{'template':'debian-12.1_x','ttl':600,'on_expire':'delete',"
    "'labels':{'user':'u42','team/a.b_c-d':'x=y','empty':''},"
    "'env':{'FOO':'bar','lower case':'v a l','E':''},'workdir':'/srv//app/./x/..',"
    "'resources':{'cpus':2.5,'memory_mb':1024,'pids':100,'disk_mb':4096},"
    "'network':{'mode':'none','allow':[]}}";

/* Wrong types, out-of-range values and unknown names, field by field. */
static const struct bad_group create_refusals[] = {
    {"request body must be a JSON object", {"[]", "'x'", "1", "true"}},
    {"unknown field \"templat\"", {"{'templat':'x'}"}},
    {"unknown field \"memory_mb\"", {"{'memory_mb':512}"}},
    {"unknown field \"id\"", {"{'ttl':1,'id':'sbx_1'}"}},
    {"unknown field \"\"", {"{'':1}"}},
    {"unknown field \"a?b?\"", {"{'a\\'b\\n':1}"}},
    {"resources: unknown field \"gpus\"", {"{'resources':{'gpus':1}}"}},
    {"network: unknown field \"modes\"", {"{'network':{'modes':'none'}}"}},
    {"template: must be a string", {"{'template':1}", "{'template':true}", "{'template':['default']}"}},
    {"template: must not be empty", {"{'template':''}"}},
    {"template: must match [a-z0-9][a-z0-9._-]{0,62}",
     {"{'template':'Default'}", "{'template':'-x'}", "{'template':'.x'}", "{'template':'a/b'}",
      "{'template':'../x'}", "{'template':'caf\\u00e9'}"}},
    {"template: must not contain NUL", {"{'template':'ab\\u0000c'}"}},
    {"ttl: must be an integer between 0 and 315360000",
     {"{'ttl':-1}", "{'ttl':315360001}", "{'ttl':9223372036854775807}", "{'ttl':-9223372036854775808}",
      "{'ttl':1.5}", "{'ttl':600.0}", "{'ttl':1e3}", "{'ttl':'600'}", "{'ttl':true}", "{'ttl':[600]}"}},
    {"on_expire: only \"delete\" is supported in this version",
     {"{'on_expire':'pause'}", "{'on_expire':'hibernate'}", "{'on_expire':'Delete'}"}},
    {"on_expire: must not contain NUL", {"{'on_expire':'delete\\u0000x'}"}},
    {"on_expire: must not be empty", {"{'on_expire':''}"}},
    {"on_expire: must be a string", {"{'on_expire':1}"}},
    {"labels: must be an object", {"{'labels':[]}", "{'labels':'a=b'}", "{'labels':true}"}},
    {"labels: keys must be 1 to 63 bytes of [A-Za-z0-9._/-]",
     {"{'labels':{'':'v'}}", "{'labels':{'a b':'v'}}", "{'labels':{'a=b':'v'}}",
      "{'labels':{'caf\\u00e9':'v'}}"}},
    {"labels.k: must be a string", {"{'labels':{'k':1}}", "{'labels':{'k':null}}", "{'labels':{'k':['v']}}"}},
    {"labels.k: must not contain NUL", {"{'labels':{'k':'a\\u0000b'}}"}},
    {"workdir: path must be absolute", {"{'workdir':'root'}", "{'workdir':'./x'}"}},
    {"workdir: path must not be empty", {"{'workdir':''}"}},
    {"workdir: path must not contain NUL", {"{'workdir':'/root\\u0000/x'}"}},
    {"workdir: must be a string", {"{'workdir':1}", "{'workdir':['/root']}"}},
    {"resources: must be an object", {"{'resources':[]}", "{'resources':1}"}},
    {"resources.cpus: must be a number between 0.01 and 64",
     {"{'resources':{'cpus':0.009}}", "{'resources':{'cpus':0}}", "{'resources':{'cpus':-1}}",
      "{'resources':{'cpus':64.0001}}", "{'resources':{'cpus':1e308}}", "{'resources':{'cpus':true}}",
      "{'resources':{'cpus':'1'}}"}},
    {"resources.memory_mb: must be an integer between 16 and 65536",
     {"{'resources':{'memory_mb':15}}", "{'resources':{'memory_mb':65537}}",
      "{'resources':{'memory_mb':512.0}}", "{'resources':{'memory_mb':-512}}",
      "{'resources':{'memory_mb':true}}", "{'resources':{'memory_mb':'512'}}",
      "{'resources':{'memory_mb':9223372036854775807}}"}},
    {"resources.pids: must be an integer between 16 and 32768",
     {"{'resources':{'pids':15}}", "{'resources':{'pids':32769}}", "{'resources':{'pids':false}}",
      "{'resources':{'pids':100.5}}"}},
    {"resources.disk_mb: must be an integer between 16 and 1048576",
     {"{'resources':{'disk_mb':15}}", "{'resources':{'disk_mb':1048577}}", "{'resources':{'disk_mb':{}}}"}},
    {"network: must be an object", {"{'network':'none'}", "{'network':[]}"}},
    {"network.mode: must be \"none\", \"open\" or \"allowlist\"",
     {"{'network':{'mode':'host'}}", "{'network':{'mode':'None'}}"}},
    {"network.allow: must be empty when network.mode is \"open\"",
     {"{'network':{'mode':'open','allow':['pypi.org']}}"}},
    {"network.mode: must not be empty", {"{'network':{'mode':''}}"}},
    {"network.mode: must be a string", {"{'network':{'mode':1}}"}},
    {"network.mode: must not contain NUL", {"{'network':{'mode':'none\\u0000'}}"}},
    {"network.allow: must be empty when network.mode is \"none\"",
     {"{'network':{'allow':['10.0.0.1']}}", "{'network':{'mode':'none','allow':['*']}}"}},
    {"network.allow: must be an array", {"{'network':{'allow':'10.0.0.1'}}", "{'network':{'allow':{}}}"}},
};

/* network modes and allowlist entries, normalised */
static void test_network_modes(void **state)
{
    (void)state;
    cleanup_json json_t *open = load("{'network':{'mode':'open','allow':[]}}");
    struct fb_create_spec s;
    cleanup_error fb_error_t err = NULL;
    assert_int_equal(fb_create_spec_parse(open, &s, &err), 0);
    assert_string_equal(s.network_mode, "open");
    fb_create_spec_clear(&s);
    cleanup_json json_t *al = load("{'network':{'mode':'allowlist','allow':['PyPI.org','*.GitHub.com:443','"
                                   "203.0.113.9/24','198.51.100.7:22']}}");
    struct fb_create_spec s2;
    assert_int_equal(fb_create_spec_parse(al, &s2, &err), 0);
    assert_string_equal(s2.network_mode, "allowlist");
    cleanup_free char *canon = json_dumps(s2.allow, JSON_COMPACT);
    assert_string_equal(canon, "[\"pypi.org\",\"*.github.com:443\",\"203.0.113.0/24\",\"198.51.100.7:22\"]");
    fb_create_spec_clear(&s2);
    static const char *const bad_entries[] = {
        "{'mode':'allowlist','allow':['-bad.com']}",
        "{'mode':'allowlist','allow':['com']}",
        "{'mode':'allowlist','allow':['a b.com']}",
        "{'mode':'allowlist','allow':['x.com:0']}",
        "{'mode':'allowlist','allow':['x.com:70000']}",
        "{'mode':'allowlist','allow':['10.1.2.3']}",
        "{'mode':'allowlist','allow':['169.254.169.254']}",
        "{'mode':'allowlist','allow':['0.0.0.0/0']}",
        "{'mode':'allowlist','allow':['2001:db8::/32']}",
        "{'mode':'allowlist','allow':['1.2.3.4/33']}",
        "{'mode':'allowlist','allow':['*.*.x.com']}",
        "{'mode':'allowlist','allow':[5]}",
        "{'mode':'allowlist','allow':['']}",
        "{'mode':'allowlist','allow':['x.com:']}",
    };
    char mode[FB_NET_MODE_MAX];
    for (size_t i = 0; i < sizeof bad_entries / sizeof bad_entries[0]; i++) {
        cleanup_json json_t *b = load(bad_entries[i]);
        json_t *allow = NULL;
        if (fb_network_spec_parse(b, mode, &allow, &err) != -1)
            fail_msg("accepted %s", bad_entries[i]);
        assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
        assert_null(allow);
        fb_error_release(&err);
    }
    cleanup_json json_t *none = load("{'mode':'none'}");
    cleanup_json json_t *allow = NULL;
    assert_int_equal(fb_network_spec_parse(none, mode, &allow, &err), 0);
    assert_string_equal(mode, "none");
    assert_int_equal(json_array_size(allow), 0);
    cleanup_json json_t *bad = load("{'mode':'open','extra':1}");
    json_t *allow2 = NULL;
    assert_int_equal(fb_network_spec_parse(bad, mode, &allow2, &err), -1);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
}

static void test_create_refusals(void **state)
{
    (void)state;
    for (size_t i = 0; i < N(create_refusals); i++)
        for (size_t k = 0; k < N(create_refusals[i].json) && create_refusals[i].json[k] != NULL; k++)
            create_bad(load(create_refusals[i].json[k]), create_refusals[i].msg);

    /* the message format the API documents, checked whole once */
    cleanup_json json_t *b = load("{'resources':{'memory_mb':1.5}}");
    cleanup_error fb_error_t err = NULL;
    struct fb_create_spec s;
    assert_int_equal(fb_create_spec_parse(b, &s, &err), -1);
    assert_string_equal(err->msg, "resources.memory_mb: must be an integer between 16 and 65536");
    fb_error_release(&err);

    /* long unknown keys are shown cut short */
    cleanup_json json_t *lk = body_with("{@:1}", 'k', 5000);
    assert_int_equal(fb_create_spec_parse(lk, &s, &err), -1);
    assert_true(strlen(err->msg) < 120);
    assert_non_null(strstr(err->msg, "...\""));
}

/* Keys holding NUL can only be built, not parsed; none may pass for a
 * known name it starts with. */
static void test_create_nul_keys(void **state)
{
    (void)state;
    static const struct {
        const char *field, *key; /* field NULL: the key is top-level */
        size_t klen;
        const char *msg;
    } c[] = {
        {NULL, "ttl\0x", 5, "unknown field \"ttl?x\""},
        {"labels", "a\0b", 3, "labels: keys must be"},
        {"env", "A\0B", 3, "env: names must be"},
        {"resources", "pids\0", 5, "resources: unknown field \"pids?\""},
    };
    for (size_t i = 0; i < N(c); i++) {
        json_t *b = json_object();
        json_t *obj = c[i].field != NULL ? json_object() : b;
        json_object_setn_new(obj, c[i].key, c[i].klen, json_string("v"));
        if (c[i].field != NULL)
            json_object_set_new(b, c[i].field, obj);
        create_bad(b, c[i].msg);
    }
}

/* {"<field>": {"k0":"v", ..., "k<n-1>":"v"}} */
static json_t *object_with(const char *field, size_t n)
{
    json_t *inner = json_object();
    for (size_t i = 0; i < n; i++) {
        char k[32];
        snprintf(k, sizeof k, "k%zu", i);
        json_object_set_new(inner, k, json_string("v"));
    }
    return json_pack("{s:o}", field, inner);
}

static void test_create_bounds(void **state)
{
    (void)state;
    struct fb_create_spec s;
    create_ok(body_with("{'template':@}", 'a', FB_TEMPLATE_NAME_MAX), &s);
    assert_int_equal(strlen(s.template_name), FB_TEMPLATE_NAME_MAX);
    fb_create_spec_clear(&s);
    create_bad(body_with("{'template':@}", 'a', FB_TEMPLATE_NAME_MAX + 1), "template: longer than 63");
    create_ok(load("{'template':'0'}"), &s);
    fb_create_spec_clear(&s);

    create_ok(load("{'ttl':0}"), &s);
    assert_int_equal(s.ttl_s, 0);
    fb_create_spec_clear(&s);
    create_ok(load("{'ttl':315360000}"), &s);
    assert_int_equal(s.ttl_s, FB_TTL_MAX);
    fb_create_spec_clear(&s);

    create_ok(object_with("labels", FB_LABELS_MAX), &s);
    assert_int_equal(json_object_size(s.labels), FB_LABELS_MAX);
    fb_create_spec_clear(&s);
    create_bad(object_with("labels", FB_LABELS_MAX + 1), "labels: more than 64 labels");
    create_ok(body_with("{'labels':{@:'v'}}", 'k', FB_LABEL_KEY_MAX), &s);
    fb_create_spec_clear(&s);
    create_bad(body_with("{'labels':{@:'v'}}", 'k', FB_LABEL_KEY_MAX + 1), "labels: keys must be 1 to 63");
    create_ok(body_with("{'labels':{'k':@}}", 'v', FB_LABEL_VALUE_MAX), &s);
    fb_create_spec_clear(&s);
    create_bad(body_with("{'labels':{'k':@}}", 'v', FB_LABEL_VALUE_MAX + 1),
               "labels.k: longer than 255 bytes");

    static const struct fb_resources lo = {0.01, 16, 16, 16}, hi = {64, 65536, 32768, 1048576},
                                     half = {0.5, 512, 512, 2048};
    create_ok(load("{'resources':{'cpus':0.01,'memory_mb':16,'pids':16,'disk_mb':16}}"), &s);
    assert_memory_equal(&s.res, &lo, sizeof lo);
    fb_create_spec_clear(&s);
    create_ok(load("{'resources':{'cpus':64,'memory_mb':65536,'pids':32768,'disk_mb':1048576}}"), &s);
    assert_memory_equal(&s.res, &hi, sizeof hi);
    fb_create_spec_clear(&s);
    create_ok(load("{'resources':{'cpus':0.5}}"), &s);
    assert_memory_equal(&s.res, &half, sizeof half);
    fb_create_spec_clear(&s);

    create_ok(load("{'workdir':'/../../etc/'}"), &s);
    assert_string_equal(s.workdir, "/etc");
    fb_create_spec_clear(&s);
    create_ok(load("{'workdir':'/'}"), &s);
    assert_string_equal(s.workdir, "/");
    fb_create_spec_clear(&s);
    create_bad(body_with("{'workdir':@}", '/', 4097), "workdir: path longer than 4096");
}

/* The env rules are shared by create and exec; both are checked. */
static const struct bad_case env_refusals[] = {
    {"'env':[]}", "env: must be an object"},
    {"'env':'A=B'}", "env: must be an object"},
    {"'env':{'':'v'}}", "env: names must be 1 to 255 bytes without '=' or NUL"},
    {"'env':{'A=B':'v'}}", "env: names must be"},
    {"'env':{'A':1}}", "env.A: must be a string"},
    {"'env':{'A':null}}", "env.A: must be a string"},
    {"'env':{'A':'x\\u0000y'}}", "env.A: must not contain NUL"},
};

static void test_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < N(env_refusals); i++) {
        char text[256];
        snprintf(text, sizeof text, "{%s", env_refusals[i].json);
        create_bad(load(text), env_refusals[i].msg);
        snprintf(text, sizeof text, "{'cmd':'true',%s", env_refusals[i].json);
        exec_bad(load(text), env_refusals[i].msg);
    }
    struct fb_create_spec s;
    create_ok(object_with("env", FB_ENV_MAX), &s);
    fb_create_spec_clear(&s);
    create_bad(object_with("env", FB_ENV_MAX + 1), "env: more than 256 entries");
    create_ok(body_with("{'env':{@:'v'}}", 'N', FB_ENV_NAME_MAX), &s);
    fb_create_spec_clear(&s);
    create_bad(body_with("{'env':{@:'v'}}", 'N', FB_ENV_NAME_MAX + 1), "env: names must be");
    create_ok(body_with("{'env':{'A':@}}", 'v', FB_ENV_VALUE_MAX), &s);
    assert_int_equal(json_string_length(json_object_get(s.env, "A")), FB_ENV_VALUE_MAX);
    fb_create_spec_clear(&s);
    create_bad(body_with("{'env':{'A':@}}", 'v', FB_ENV_VALUE_MAX + 1), "env.A: longer than 32768 bytes");

    struct fb_exec_spec e;
    exec_ok(load("{'cmd':'env','env':{'X':'1','PATH':'/bin'}}"), &e);
    assert_int_equal(json_object_size(e.env), 2);
    assert_string_equal(json_string_value(json_object_get(e.env, "PATH")), "/bin");
    fb_exec_spec_clear(&e);
}

static void test_template_name_check(void **state)
{
    (void)state;
    static const char *const good[] = {"a", "0", "default", "a.b_c-d", "9-x.", "z--"};
    static const char *const bad[] = {"", "A", "-a", ".a", "_a", "a b", "a/b", "a:b", "a\n", "\xc3\xa9"};
    for (size_t i = 0; i < N(good); i++)
        assert_int_equal(fb_template_name_check(good[i], NULL), 0);
    for (size_t i = 0; i < N(bad); i++) {
        cleanup_error fb_error_t err = NULL;
        assert_int_equal(fb_template_name_check(bad[i], &err), -1);
        assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    }
    assert_int_equal(fb_template_name_check(NULL, NULL), -1);
}

static void assert_same_spec(const struct fb_create_spec *a, const struct fb_create_spec *b)
{
    assert_string_equal(a->template_name, b->template_name);
    assert_int_equal(a->ttl_s, b->ttl_s);
    assert_string_equal(a->on_expire, b->on_expire);
    assert_true(json_equal(a->labels, b->labels));
    assert_true(json_equal(a->env, b->env));
    assert_string_equal(a->workdir, b->workdir);
    assert_true(a->res.cpus == b->res.cpus);
    assert_int_equal(a->res.memory_mb, b->res.memory_mb);
    assert_int_equal(a->res.pids, b->res.pids);
    assert_int_equal(a->res.disk_mb, b->res.disk_mb);
    assert_string_equal(a->network_mode, b->network_mode);
    assert_int_equal(a->n_volumes, b->n_volumes);
    for (size_t i = 0; i < a->n_volumes; i++) {
        assert_string_equal(a->volumes[i].name, b->volumes[i].name);
        assert_string_equal(a->volumes[i].path, b->volumes[i].path);
        assert_int_equal(a->volumes[i].read_only, b->volumes[i].read_only);
    }
}

static void round_trip(const char *body)
{
    struct fb_create_spec a, b;
    create_ok(load(body), &a);
    cleanup_json json_t *j = fb_create_spec_to_json(&a);
    assert_non_null(j);
    /* through text, as the store keeps it */
    cleanup_free char *text = json_dumps(j, JSON_COMPACT);
    assert_non_null(text);
    cleanup_json json_t *back = json_loads(text, 0, NULL);
    assert_non_null(back);
    cleanup_error fb_error_t err = NULL;
    if (fb_create_spec_from_json(back, &b, &err) != 0)
        fail_msg("from_json(%s): %s", text, err->msg);
    assert_same_spec(&a, &b);
    /* the output holds copies, not the spec's own objects */
    assert_ptr_not_equal(json_object_get(j, "labels"), a.labels);
    assert_ptr_not_equal(json_object_get(j, "env"), a.env);
    fb_create_spec_clear(&a);
    fb_create_spec_clear(&b);
}

static void test_create_round_trip(void **state)
{
    (void)state;
    round_trip("{}");
    round_trip(full_body);
    round_trip("{'resources':{'cpus':0.3},'ttl':315360000,'labels':{'x':'\\u00e9\\ud83d\\ude00'}}");
    round_trip("{'resources':{'cpus':0.01}}");
    round_trip("{'idle_timeout':30}");
    round_trip("{'resources':{'cpus':63.99999999999999}}");

    struct fb_create_spec s;
    create_ok(load(full_body), &s);
    cleanup_json json_t *j = fb_create_spec_to_json(&s);
    fb_create_spec_clear(&s);
    cleanup_json json_t *want =
        load("{'template':'debian-12.1_x','ttl':600,'idle_timeout':0,'on_expire':'delete',"
             "'labels':{'user':'u42','team/a.b_c-d':'x=y','empty':''},"
             "'env':{'FOO':'bar','lower case':'v a l','E':''},'workdir':'/srv/app',"
             "'resources':{'cpus':2.5,'memory_mb':1024,'pids':100,'disk_mb':4096},"
             "'network':{'mode':'none','allow':[]},'volumes':[]}");
    assert_true(json_equal(j, want));
    assert_true(json_is_real(json_object_get(json_object_get(j, "resources"), "cpus")));

    /* a zeroed spec (labels and env NULL) still serialises */
    struct fb_create_spec z;
    memset(&z, 0, sizeof z);
    cleanup_json json_t *jz = fb_create_spec_to_json(&z);
    assert_true(json_is_object(json_object_get(jz, "labels")));
    assert_true(json_is_object(json_object_get(jz, "env")));
}

static void test_create_from_json_corrupt(void **state)
{
    (void)state;
    struct fb_create_spec s;
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *bad = load("{'resources':{'memory_mb':'lots'}}");
    assert_int_equal(fb_create_spec_from_json(bad, &s, &err), -1);
    /* stored state that does not parse is a fault of forkbox, not of a client */
    assert_int_equal(err->kind, FB_ERR_INTERNAL);
    assert_non_null(strstr(err->msg, "stored sandbox spec: resources.memory_mb"));
    assert_null(s.labels);
    fb_error_release(&err);
    assert_int_equal(fb_create_spec_from_json(NULL, &s, &err), -1);
    assert_int_equal(err->kind, FB_ERR_INTERNAL);
    assert_int_equal(fb_create_spec_from_json(bad, &s, NULL), -1);
}

static void test_exec_defaults_and_argv(void **state)
{
    (void)state;
    struct fb_exec_spec s;
    exec_ok(load("{'cmd':'echo $((6*7))'}"), &s);
    assert_int_equal(s.argc, 3);
    assert_string_equal(s.argv[0], "/bin/sh");
    assert_string_equal(s.argv[1], "-c");
    assert_string_equal(s.argv[2], "echo $((6*7))");
    assert_null(s.argv[3]);
    assert_int_equal(s.timeout_ms, 60000);
    assert_int_equal(s.max_output, FB_OUTPUT_DEFAULT);
    assert_string_equal(s.user, ""); /* the sandbox's default user */
    assert_string_equal(s.cwd, "");
    assert_true(json_is_object(s.env) && json_object_size(s.env) == 0);
    assert_null(s.stdin_data);
    fb_exec_spec_clear(&s);
    fb_exec_spec_clear(&s);

    exec_ok(load("{'cmd':['ls','','-la','/'],'env':null,'cwd':null,'user':null,'timeout':null,"
                 "'stdin':null,'max_output_bytes':null}"),
            &s);
    assert_int_equal(s.argc, 4);
    assert_string_equal(s.argv[1], "");
    assert_string_equal(s.argv[3], "/");
    assert_null(s.argv[4]);
    assert_int_equal(s.timeout_ms, 60000);
    assert_string_equal(s.user, "");
    fb_exec_spec_clear(&s);
    assert_null(s.argv);
    assert_int_equal(s.argc, 0);

    exec_ok(load("{'cmd':'pwd','cwd':'/tmp/../root//x/'}"), &s);
    assert_string_equal(s.cwd, "/root/x");
    fb_exec_spec_clear(&s);

    static const char *const users[] = {"root",  "nobody", "www-data", "svc$",
                                        "a.b_c", "0",      "65535",    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t i = 0; i < N(users); i++) {
        exec_ok(json_pack("{s:s, s:s}", "cmd", "id", "user", users[i]), &s);
        assert_string_equal(s.user, users[i]);
        fb_exec_spec_clear(&s);
    }
}

static const struct bad_group exec_refusals[] = {
    {"cmd: required", {"{}", "{'cmd':null}"}},
    {"cmd: must not be empty", {"{'cmd':''}", "{'cmd':[]}"}},
    {"cmd[0]: must not be empty", {"{'cmd':['']}", "{'cmd':['','x']}"}},
    {"cmd: must be a string or an array of strings", {"{'cmd':1}", "{'cmd':true}", "{'cmd':{'0':'ls'}}"}},
    {"cmd[0]: must be a string", {"{'cmd':[1]}"}},
    {"cmd[1]: must be a string", {"{'cmd':['ls',null]}", "{'cmd':['ls',['-l']]}"}},
    {"cmd: must not contain NUL", {"{'cmd':'id\\u0000; rm -rf /'}"}},
    {"cmd[1]: must not contain NUL", {"{'cmd':['ls','a\\u0000b']}"}},
    {"request body must be a JSON object", {"['ls']", "null", "'ls'"}},
    {"unknown field \"command\"", {"{'cmd':'ls','command':'ls'}"}},
    {"unknown field \"timeout_ms\"", {"{'cmd':'ls','timeout_ms':1}"}},
    {"cwd: path must be absolute", {"{'cmd':'pwd','cwd':'tmp'}"}},
    {"cwd: path must not be empty", {"{'cmd':'pwd','cwd':''}"}},
    {"cwd: must be a string", {"{'cmd':'pwd','cwd':1}"}},
    {"cwd: path must not contain NUL", {"{'cmd':'pwd','cwd':'/a\\u0000b'}"}},
    {"user: must not be empty", {"{'cmd':'id','user':''}"}},
    {"user: must be a string", {"{'cmd':'id','user':0}", "{'cmd':'id','user':true}"}},
    {"user: must be a user name or a decimal uid",
     {"{'cmd':'id','user':'a b'}", "{'cmd':'id','user':'-r'}", "{'cmd':'id','user':'$'}",
      "{'cmd':'id','user':'a$b'}", "{'cmd':'id','user':'../x'}", "{'cmd':'id','user':'root:x'}"}},
    {"user: must not contain NUL", {"{'cmd':'id','user':'ro\\u0000ot'}"}},
    {"user: uid must be between 0 and 65535",
     {"{'cmd':'id','user':'65536'}", "{'cmd':'id','user':'99999999999999999999'}"}},
    {"user: longer than 32 bytes", {"{'cmd':'id','user':'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'}"}},
    {"timeout: must be a number of seconds between 0.001 and 86400",
     {"{'cmd':'true','timeout':0}", "{'cmd':'true','timeout':0.0009}", "{'cmd':'true','timeout':-1}",
      "{'cmd':'true','timeout':86400.001}", "{'cmd':'true','timeout':9223372036854775807}",
      "{'cmd':'true','timeout':1e300}", "{'cmd':'true','timeout':'60'}", "{'cmd':'true','timeout':true}"}},
    {"stdin: must be a string", {"{'cmd':'cat','stdin':1}", "{'cmd':'cat','stdin':['a']}"}},
    {"max_output_bytes: must be an integer between 0 and 67108864",
     {"{'cmd':'cat','max_output_bytes':-1}", "{'cmd':'cat','max_output_bytes':67108865}",
      "{'cmd':'cat','max_output_bytes':1.5}", "{'cmd':'cat','max_output_bytes':'1'}",
      "{'cmd':'cat','max_output_bytes':true}"}},
};

static void test_exec_refusals(void **state)
{
    (void)state;
    for (size_t i = 0; i < N(exec_refusals); i++)
        for (size_t k = 0; k < N(exec_refusals[i].json) && exec_refusals[i].json[k] != NULL; k++)
            exec_bad(load(exec_refusals[i].json[k]), exec_refusals[i].msg);
    exec_bad(NULL, "cmd: required");
}

static void test_exec_cmd_bounds(void **state)
{
    (void)state;
    struct fb_exec_spec s;
    json_t *arr = json_array();
    for (size_t i = 0; i < FB_ARGV_MAX; i++)
        json_array_append_new(arr, json_string("a"));
    exec_ok(json_pack("{s:O}", "cmd", arr), &s);
    assert_int_equal(s.argc, FB_ARGV_MAX);
    assert_null(s.argv[FB_ARGV_MAX]);
    fb_exec_spec_clear(&s);
    json_array_append_new(arr, json_string("a"));
    exec_bad(json_pack("{s:o}", "cmd", arr), "cmd: more than 4096 arguments");

    exec_ok(body_with("{'cmd':@}", 'x', FB_ARG_MAX), &s);
    assert_int_equal(strlen(s.argv[2]), FB_ARG_MAX);
    fb_exec_spec_clear(&s);
    exec_ok(body_with("{'cmd':['echo',@]}", 'x', FB_ARG_MAX), &s);
    fb_exec_spec_clear(&s);
    exec_bad(body_with("{'cmd':@}", 'x', FB_ARG_MAX + 1), "cmd: longer than 131071 bytes");
    exec_bad(body_with("{'cmd':['echo',@]}", 'x', FB_ARG_MAX + 1), "cmd[1]: longer than 131071 bytes");
}

static void test_exec_timeout(void **state)
{
    (void)state;
    static const struct {
        const char *value;
        int64_t ms;
    } good[] = {
        {"0.001", 1},  {"0.0011", 2},    {"0.0015", 2}, {"0.01", 10},        {"0.1", 100},
        {"0.29", 290}, {"1", 1000},      {"1.1", 1100}, {"2.007", 2007},     {"1.001", 1001},
        {"1.5", 1500}, {"2.0005", 2001}, {"60", 60000}, {"86400", 86400000}, {"86400.0", 86400000},
    };
    for (size_t i = 0; i < N(good); i++) {
        char text[128];
        struct fb_exec_spec s;
        snprintf(text, sizeof text, "{'cmd':'true','timeout':%s}", good[i].value);
        exec_ok(load(text), &s);
        if (s.timeout_ms != good[i].ms)
            fail_msg("timeout %s: %lld ms, want %lld", good[i].value, (long long)s.timeout_ms,
                     (long long)good[i].ms);
        fb_exec_spec_clear(&s);
    }
}

static void test_exec_stdin_output(void **state)
{
    (void)state;
    struct fb_exec_spec s;
    /* stdin is data: NUL bytes pass through, the length says where it ends */
    exec_ok(load("{'cmd':'cat','stdin':'a\\u0000b\\n'}"), &s);
    assert_int_equal(s.stdin_len, 4);
    assert_memory_equal(s.stdin_data, "a\0b\n", 4);
    fb_exec_spec_clear(&s);
    assert_null(s.stdin_data);
    exec_ok(load("{'cmd':'cat','stdin':''}"), &s);
    assert_non_null(s.stdin_data);
    assert_int_equal(s.stdin_len, 0);
    fb_exec_spec_clear(&s);
    exec_ok(body_with("{'cmd':'cat','stdin':@}", 's', FB_STDIN_MAX), &s);
    assert_int_equal(s.stdin_len, FB_STDIN_MAX);
    fb_exec_spec_clear(&s);
    exec_bad(body_with("{'cmd':'cat','stdin':@}", 's', FB_STDIN_MAX + 1),
             "stdin: longer than 16777216 bytes");

    exec_ok(load("{'cmd':'cat','max_output_bytes':0}"), &s);
    assert_int_equal(s.max_output, 0);
    fb_exec_spec_clear(&s);
    exec_ok(load("{'cmd':'cat','max_output_bytes':67108864}"), &s);
    assert_int_equal(s.max_output, FB_OUTPUT_MAX);
    fb_exec_spec_clear(&s);
}

static void test_label_selector(void **state)
{
    (void)state;
    char k[FB_LABEL_KEY_MAX + 1], v[FB_LABEL_VALUE_MAX + 1];
    cleanup_error fb_error_t err = NULL;
    static const char *const good[][3] = {
        {"user=u42", "user", "u42"}, {"k=v=w", "k", "v=w"}, {"team/a.b_c-D9=", "team/a.b_c-D9", ""}};
    for (size_t i = 0; i < N(good); i++) {
        assert_int_equal(fb_label_selector_parse(good[i][0], k, sizeof k, v, sizeof v, &err), 0);
        assert_string_equal(k, good[i][1]);
        assert_string_equal(v, good[i][2]);
    }

    static const char *const bad[] = {"=v", "novalue", "", "a b=c", "a:b=c", "\xc3\xa9=x", "k\n=v"};
    for (size_t i = 0; i < N(bad); i++) {
        assert_int_equal(fb_label_selector_parse(bad[i], k, sizeof k, v, sizeof v, &err), -1);
        assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
        assert_non_null(strstr(err->msg, "label:"));
        assert_string_equal(k, "");
        fb_error_release(&err);
    }
    assert_int_equal(fb_label_selector_parse(NULL, k, sizeof k, v, sizeof v, &err), -1);
    fb_error_release(&err);

    char sel[400];
    memset(sel, 'k', 63);
    snprintf(sel + 63, sizeof sel - 63, "=%255s", "v");
    assert_int_equal(fb_label_selector_parse(sel, k, sizeof k, v, sizeof v, &err), 0);
    assert_int_equal(strlen(k), 63);
    assert_int_equal(strlen(v), 255);
    snprintf(sel + 63, sizeof sel - 63, "=%256s", "v");
    assert_int_equal(fb_label_selector_parse(sel, k, sizeof k, v, sizeof v, &err), -1);
    assert_non_null(strstr(err->msg, "label: value longer than 255"));
    fb_error_release(&err);
    memset(sel, 'k', 64);
    strcpy(sel + 64, "=v");
    assert_int_equal(fb_label_selector_parse(sel, k, sizeof k, v, sizeof v, &err), -1);
    assert_non_null(strstr(err->msg, "label: key must be 1 to 63"));
    fb_error_release(&err);

    /* a caller's buffer too small is a fault of forkbox, not of the client */
    char small[4];
    assert_int_equal(fb_label_selector_parse("user=u42", small, sizeof small, v, sizeof v, &err), -1);
    assert_int_equal(err->kind, FB_ERR_INTERNAL);
    fb_error_release(&err);
    assert_int_equal(fb_label_selector_parse("k=u4242", k, sizeof k, small, sizeof small, &err), -1);
    assert_int_equal(err->kind, FB_ERR_INTERNAL);
}

static void test_volumes(void **state)
{
    (void)state;
    struct fb_create_spec s;
    create_ok(load("{}"), &s);
    assert_int_equal(s.n_volumes, 0);
    fb_create_spec_clear(&s);

    create_ok(load("{'volumes':[{'name':'cache','path':'/cache'},"
                   "{'name':'data.v2','path':'/srv//data/./x/..','read_only':true},"
                   "{'name':'cache','path':'/cache2','read_only':false}]}"),
              &s);
    assert_int_equal(s.n_volumes, 3);
    assert_string_equal(s.volumes[0].name, "cache");
    assert_string_equal(s.volumes[0].path, "/cache");
    assert_false(s.volumes[0].read_only);
    assert_string_equal(s.volumes[1].path, "/srv/data");
    assert_true(s.volumes[1].read_only);
    /* the same volume may be mounted twice, at two paths */
    assert_string_equal(s.volumes[2].name, "cache");
    cleanup_json json_t *j = fb_create_spec_to_json(&s);
    cleanup_json json_t *want = load("[{'name':'cache','path':'/cache','read_only':false},"
                                     "{'name':'data.v2','path':'/srv/data','read_only':true},"
                                     "{'name':'cache','path':'/cache2','read_only':false}]");
    assert_true(json_equal(json_object_get(j, "volumes"), want));
    fb_create_spec_clear(&s);
    round_trip("{'volumes':[{'name':'a','path':'/a','read_only':true},{'name':'b','path':'/b/c'}]}");

    /* sixteen are fine, seventeen are not */
    char body[4096] = "{'volumes':[";
    for (int i = 0; i < 17; i++) {
        char one[64];
        snprintf(one, sizeof one, "%s{'name':'v%d','path':'/m%d'}", i ? "," : "", i, i);
        strcat(body, one);
        if (i == 15) {
            char ok[4096];
            snprintf(ok, sizeof ok, "%s]}", body);
            create_ok(load(ok), &s);
            assert_int_equal(s.n_volumes, 16);
            fb_create_spec_clear(&s);
        }
    }
    strcat(body, "]}");
    create_bad(load(body), "volumes: at most 16");

    static const struct bad_case bad[] = {
        {"{'volumes':{}}", "volumes: must be an array"},
        {"{'volumes':['cache']}", "volumes[0]: must be an object"},
        {"{'volumes':[{'path':'/c'}]}", "volumes[0].name: required"},
        {"{'volumes':[{'name':'c'}]}", "volumes[0].path: required"},
        {"{'volumes':[{'name':'c','path':'/c','ro':true}]}", "unknown field \"ro\""},
        {"{'volumes':[{'name':'C','path':'/c'}]}", "volume: name must match"},
        {"{'volumes':[{'name':'../x','path':'/c'}]}", "volume: name must match"},
        {"{'volumes':[{'name':'-x','path':'/c'}]}", "volume: name must match"},
        {"{'volumes':[{'name':'a/b','path':'/c'}]}", "volume: name must match"},
        {"{'volumes':[{'name':'a\\u0000b','path':'/c'}]}", "NUL"},
        {"{'volumes':[{'name':7,'path':'/c'}]}", "volumes[0].name: must be a string"},
        {"{'volumes':[{'name':'c','path':'c'}]}", "volumes[0].path"},
        {"{'volumes':[{'name':'c','path':''}]}", "volumes[0].path"},
        {"{'volumes':[{'name':'c','path':'/'}]}", "cannot be mounted at /"},
        {"{'volumes':[{'name':'c','path':'/x/..'}]}", "cannot be mounted at /"},
        {"{'volumes':[{'name':'c','path':'/proc'}]}", "cannot be mounted at /proc"},
        {"{'volumes':[{'name':'c','path':'/sys/fs'}]}", "cannot be mounted at /sys/fs"},
        {"{'volumes':[{'name':'c','path':'/dev/shm'}]}", "cannot be mounted at /dev/shm"},
        {"{'volumes':[{'name':'c','path':'/a/../dev'}]}", "cannot be mounted at /dev"},
        {"{'volumes':[{'name':'c','path':'/c\\u0000x'}]}", "volumes[0].path"},
        {"{'volumes':[{'name':'c','path':'/c','read_only':'yes'}]}", "read_only: must be a boolean"},
        {"{'volumes':[{'name':'a','path':'/c'},{'name':'b','path':'/c/'}]}", "/c is also volumes[0]'s /c"},
        {"{'volumes':[{'name':'a','path':'/c'},{'name':'b','path':'/c/d'}]}", "overlaps"},
        {"{'volumes':[{'name':'a','path':'/c/d'},{'name':'b','path':'/c'}]}", "overlaps"},
    };
    for (size_t i = 0; i < N(bad); i++)
        create_bad(load(bad[i].json), bad[i].msg);
    /* /devices and /process are ordinary paths */
    create_ok(load("{'volumes':[{'name':'a','path':'/devices'},{'name':'b','path':'/process'},"
                   "{'name':'c','path':'/cd'},{'name':'d','path':'/c'}]}"),
              &s);
    assert_int_equal(s.n_volumes, 4);
    fb_create_spec_clear(&s);
    /* names: 63 bytes at most */
    create_bad(body_with("{'volumes':[{'name':@,'path':'/c'}]}", 'a', 64), "longer than 63");
    create_ok(body_with("{'volumes':[{'name':@,'path':'/c'}]}", 'a', 63), &s);
    fb_create_spec_clear(&s);
    create_bad(body_with("{'volumes':[{'name':'a','path':@}]}", '/', 1025), "longer than 1024");

    cleanup_error fb_error_t err = NULL;
    assert_int_equal(fb_volume_name_check("ok-1.x_y", &err), 0);
    assert_int_equal(fb_volume_name_check("", &err), -1);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_defaults),
        cmocka_unit_test(test_create_refusals),
        cmocka_unit_test(test_network_modes),
        cmocka_unit_test(test_create_nul_keys),
        cmocka_unit_test(test_create_bounds),
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_template_name_check),
        cmocka_unit_test(test_create_round_trip),
        cmocka_unit_test(test_create_from_json_corrupt),
        cmocka_unit_test(test_exec_defaults_and_argv),
        cmocka_unit_test(test_exec_refusals),
        cmocka_unit_test(test_exec_cmd_bounds),
        cmocka_unit_test(test_exec_timeout),
        cmocka_unit_test(test_exec_stdin_output),
        cmocka_unit_test(test_label_selector),
        cmocka_unit_test(test_volumes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
