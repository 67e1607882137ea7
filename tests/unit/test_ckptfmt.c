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
#include "core/ckptfmt.h"

#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SHA_B "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void manifest_clearp(struct fb_ckpt_manifest *m)
{
    fb_ckpt_manifest_clear(m);
}
#define cleanup_manifest __attribute__((cleanup(manifest_clearp)))

static void sample(struct fb_ckpt_manifest *m, bool memory)
{
    memset(m, 0, sizeof *m);
    m->version = FB_CKPT_FORMAT_VERSION;
    strcpy(m->forkbox_version, "0.1.0");
    strcpy(m->id, "ckpt_0123456789abcdef");
    strcpy(m->name, "before");
    strcpy(m->created_at, "2026-01-02T03:04:05.000Z");
    strcpy(m->template_name, "default");
    strcpy(m->template_digest, "sha256:" SHA_B);
    strcpy(m->layer_kind, "image");
    m->disk_bytes = 2048ll << 20;
    m->uid_base = 100000000;
    m->memory = memory;
    assert_int_equal(fb_ckpt_manifest_add(m, FB_CKPT_LAYER_NAME, 10240, SHA_A, NULL), 0);
    if (memory)
        assert_int_equal(fb_ckpt_manifest_add(m, "criu/pstree.img", 20, SHA_B, NULL), 0);
}

/* Serialises sample(), lets edit change the JSON, parses it back. */
static int parse_edited(bool memory, void (*edit)(json_t *), struct fb_ckpt_manifest *out, fb_error_t *err)
{
    cleanup_manifest struct fb_ckpt_manifest m;
    sample(&m, memory);
    cleanup_json json_t *j = fb_ckpt_manifest_to_json(&m);
    assert_non_null(j);
    if (edit)
        edit(j);
    cleanup_free char *text = json_dumps(j, JSON_COMPACT);
    return fb_ckpt_manifest_parse(text, strlen(text), out, err);
}

static void expect_refused(bool memory, void (*edit)(json_t *), const char *part)
{
    cleanup_manifest struct fb_ckpt_manifest m;
    cleanup_error fb_error_t err = NULL;
    assert_int_equal(parse_edited(memory, edit, &m, &err), -1);
    assert_non_null(err);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    if (strstr(err->msg, part) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", err->msg, part);
}

static void test_round_trip(void **state)
{
    (void)state;
    for (int mem = 0; mem < 2; mem++) {
        cleanup_manifest struct fb_ckpt_manifest m;
        cleanup_error fb_error_t err = NULL;
        if (parse_edited(mem, NULL, &m, &err) != 0)
            fail_msg("refused: %s", err->msg);
        assert_int_equal(m.version, 1);
        assert_string_equal(m.id, "ckpt_0123456789abcdef");
        assert_string_equal(m.name, "before");
        assert_string_equal(m.parent, "");
        assert_string_equal(m.template_digest, "sha256:" SHA_B);
        assert_int_equal(m.disk_bytes, 2048ll << 20);
        assert_int_equal(m.memory, mem);
        assert_int_equal(m.n_members, mem ? 2 : 1);
        const struct fb_ckpt_member *l = fb_ckpt_manifest_find(&m, FB_CKPT_LAYER_NAME);
        assert_non_null(l);
        assert_int_equal(l->size, 10240);
        assert_string_equal(l->sha256, SHA_A);
    }
}

static void set_version(json_t *j)
{
    json_object_set_new(j, "version", json_integer(2));
}
static void set_format(json_t *j)
{
    json_object_set_new(j, "format", json_string("other"));
}
static void add_unknown(json_t *j)
{
    json_object_set_new(j, "surprise", json_true());
}
static void bad_digest(json_t *j)
{
    json_object_set_new(json_object_get(j, "template"), "digest", json_string("sha256:ABC"));
}
static void bad_member_sha(json_t *j)
{
    json_object_set_new(json_array_get(json_object_get(j, "members"), 0), "sha256", json_string("zz"));
}
static void dup_member(json_t *j)
{
    json_t *arr = json_object_get(j, "members");
    json_array_append(arr, json_array_get(arr, 0));
}
static void no_layer(json_t *j)
{
    json_array_clear(json_object_get(j, "members"));
}
static void escaping_member(json_t *j)
{
    json_object_set_new(json_array_get(json_object_get(j, "members"), 1), "name",
                        json_string("criu/../../etc/passwd"));
}
static void memory_false(json_t *j)
{
    json_object_set_new(j, "memory", json_false());
}
static void negative_size(json_t *j)
{
    json_object_set_new(json_array_get(json_object_get(j, "members"), 0), "size", json_integer(-1));
}
static void tiny_disk(json_t *j)
{
    json_object_set_new(j, "disk_bytes", json_integer(4096));
}
static void bad_kind(json_t *j)
{
    json_object_set_new(j, "layer_kind", json_string("btrfs"));
}
static void control_name(json_t *j)
{
    json_object_set_new(j, "name", json_string("a\nb"));
}

static void test_refusals(void **state)
{
    (void)state;
    expect_refused(false, set_version, "version");
    expect_refused(false, set_format, "format");
    expect_refused(false, add_unknown, "unknown field");
    expect_refused(false, bad_digest, "digest");
    expect_refused(false, bad_member_sha, "sha256");
    expect_refused(false, dup_member, "twice");
    expect_refused(false, no_layer, "no member");
    expect_refused(true, escaping_member, "not allowed");
    expect_refused(true, memory_false, "memory");
    expect_refused(false, negative_size, "size");
    expect_refused(false, tiny_disk, "disk_bytes");
    expect_refused(false, bad_kind, "layer_kind");
    expect_refused(false, control_name, "control");
}

static void test_text_refusals(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "[]",
        "{\"format\": \"forkbox-checkpoint\"}",
        "not json",
        /* duplicate keys: the second could hide what the first said */
        "{\"format\": \"forkbox-checkpoint\", \"version\": 1, \"version\": 1}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cleanup_manifest struct fb_ckpt_manifest m;
        cleanup_error fb_error_t err = NULL;
        assert_int_equal(fb_ckpt_manifest_parse(bad[i], strlen(bad[i]), &m, &err), -1);
        assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    }
}

static void test_member_names(void **state)
{
    (void)state;
    assert_true(fb_ckpt_member_name_valid("rootfs/layer.tar"));
    assert_true(fb_ckpt_member_name_valid("criu/pages-1.img"));
    assert_true(fb_ckpt_member_name_valid("criu/core-1_x.img"));
    assert_false(fb_ckpt_member_name_valid("criu/"));
    assert_false(fb_ckpt_member_name_valid("criu/.hidden"));
    assert_false(fb_ckpt_member_name_valid("criu/a/b.img"));
    assert_false(fb_ckpt_member_name_valid("criu/.."));
    assert_false(fb_ckpt_member_name_valid("rootfs/other.tar"));
    assert_false(fb_ckpt_member_name_valid("/rootfs/layer.tar"));
    assert_false(fb_ckpt_member_name_valid("manifest.json"));
}

static void expect_wh(const char *path, int kind, const char *target)
{
    char out[256];
    cleanup_error fb_error_t err = NULL;
    assert_int_equal(fb_whiteout_parse(path, out, sizeof out, &err), kind);
    assert_string_equal(out, target);
}

static void test_whiteouts(void **state)
{
    (void)state;
    expect_wh("etc/.wh.issue", FB_WH_FILE, "etc/issue");
    expect_wh(".wh.top", FB_WH_FILE, "top");
    expect_wh("etc/apt/.wh..wh..opq", FB_WH_OPAQUE, "etc/apt");
    expect_wh(".wh..wh..opq", FB_WH_OPAQUE, "");
    expect_wh("etc/issue", FB_WH_NONE, "etc/issue");
    expect_wh("etc/x.wh.y", FB_WH_NONE, "etc/x.wh.y");
    expect_wh(".whx/a", FB_WH_NONE, ".whx/a");
    static const char *const bad[] = {"etc/.wh.", "etc/.wh..", "etc/.wh...", "a/.wh..wh.other"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char out[256];
        cleanup_error fb_error_t err = NULL;
        if (fb_whiteout_parse(bad[i], out, sizeof out, &err) != -1)
            fail_msg("%s accepted", bad[i]);
        assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    }
    char small[4];
    assert_int_equal(fb_whiteout_parse("etc/.wh.issue", small, sizeof small, NULL), -1);

    char out[64];
    assert_int_equal(fb_whiteout_name("etc", "issue", false, out, sizeof out), 0);
    assert_string_equal(out, "etc/.wh.issue");
    assert_int_equal(fb_whiteout_name("", "top", false, out, sizeof out), 0);
    assert_string_equal(out, ".wh.top");
    assert_int_equal(fb_whiteout_name("etc/apt", "", true, out, sizeof out), 0);
    assert_string_equal(out, "etc/apt/.wh..wh..opq");
    assert_int_equal(fb_whiteout_name("etc", "a-very-long-name", false, small, sizeof small), -1);
    /* the two directions agree */
    char back[64];
    assert_int_equal(fb_whiteout_name("a/b", "c", false, out, sizeof out), 0);
    assert_int_equal(fb_whiteout_parse(out, back, sizeof back, NULL), FB_WH_FILE);
    assert_string_equal(back, "a/b/c");
}

static void test_sha_hex(void **state)
{
    (void)state;
    assert_true(fb_sha256_hex_valid(SHA_A, false));
    assert_true(fb_sha256_hex_valid("sha256:" SHA_B, true));
    assert_false(fb_sha256_hex_valid(SHA_A, true));
    assert_false(fb_sha256_hex_valid("sha256:" SHA_B, false));
    assert_false(fb_sha256_hex_valid("abc", false));
    assert_false(
        fb_sha256_hex_valid("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", false));
}

static void test_member_limit(void **state)
{
    (void)state;
    cleanup_manifest struct fb_ckpt_manifest m = {0};
    char name[32];
    for (int i = 0; i < FB_CKPT_MEMBERS_MAX; i++) {
        snprintf(name, sizeof name, "criu/%d.img", i);
        assert_int_equal(fb_ckpt_manifest_add(&m, name, 1, SHA_A, NULL), 0);
    }
    cleanup_error fb_error_t err = NULL;
    assert_int_equal(fb_ckpt_manifest_add(&m, "criu/x.img", 1, SHA_A, &err), -1);
    assert_int_equal(err->kind, FB_ERR_TOO_LARGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),    cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_text_refusals), cmocka_unit_test(test_member_names),
        cmocka_unit_test(test_whiteouts),     cmocka_unit_test(test_sha_hex),
        cmocka_unit_test(test_member_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
