#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "store/store.h"

struct fixture {
    char dir[64];
    char path[128];
    fb_store *s;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    const char *tmp = getenv("TMPDIR");
    if (fb_snprintf(f->dir, sizeof f->dir, "%s/fbstore.XXXXXX", tmp != NULL && tmp[0] ? tmp : "/tmp") < 0 ||
        mkdtemp(f->dir) == NULL || fb_snprintf(f->path, sizeof f->path, "%s/store.db", f->dir) < 0) {
        free(f);
        return -1;
    }
    cleanup_error fb_error_t err = NULL;
    if (fb_store_open(f->path, &f->s, &err) < 0) {
        print_error("open: %s\n", err->msg);
        fb_rm_rf(f->dir);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    fb_store_close(f->s);
    fb_rm_rf(f->dir);
    free(f);
    return 0;
}

static void reopen(struct fixture *f)
{
    cleanup_error fb_error_t err = NULL;
    fb_store_close(f->s);
    f->s = NULL;
    assert_int_equal(fb_store_open(f->path, &f->s, &err), 0);
}

/* Runs a one-column query on a separate raw connection, the way an outside
 * reader of the file would see it. */
static char *raw_text(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    char *out = NULL;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_text(st, 0) != NULL)
        out = strdup((const char *)sqlite3_column_text(st, 0));
    else
        assert_true(rc == SQLITE_ROW || rc == SQLITE_DONE);
    sqlite3_finalize(st);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    return out;
}

static struct fb_sandbox_row sbx(const char *id, const char *tenant, int64_t created, int64_t expires,
                                 int64_t uid_base, const char *spec)
{
    struct fb_sandbox_row r = {.created_ms = created, .expires_ms = expires, .uid_base = uid_base};
    assert_int_equal(fb_strlcpy(r.id, id, sizeof r.id), 0);
    assert_int_equal(fb_strlcpy(r.tenant, tenant, sizeof r.tenant), 0);
    assert_int_equal(fb_strlcpy(r.state, "running", sizeof r.state), 0);
    assert_int_equal(fb_strlcpy(r.template_name, "default", sizeof r.template_name), 0);
    r.spec_json = (char *)spec; /* lent, not owned: never cleared */
    return r;
}

static void insert(fb_store *s, const char *id, const char *tenant, int64_t created, int64_t expires,
                   int64_t uid_base)
{
    cleanup_error fb_error_t err = NULL;
    struct fb_sandbox_row r = sbx(id, tenant, created, expires, uid_base, "{}");
    assert_int_equal(fb_store_sandbox_insert(s, &r, &err), 0);
}

static void expect_kind(int rc, fb_error_t *err, enum fb_error_kind kind)
{
    assert_int_equal(rc, -1);
    assert_non_null(*err);
    assert_int_equal((*err)->kind, kind);
    assert_non_null((*err)->msg);
    fb_error_release(err);
}

static void test_open_private_wal(void **state)
{
    struct fixture *f = *state;
    struct stat st;
    assert_int_equal(stat(f->path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);

    /* The WAL side files hold recent rows too. */
    cleanup_error fb_error_t err = NULL;
    assert_int_equal(fb_store_tenant_ensure(f->s, "t1", "first", &err), 0);
    char side[160];
    assert_int_equal(fb_snprintf(side, sizeof side, "%s-wal", f->path), 0);
    assert_int_equal(stat(side, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(fb_snprintf(side, sizeof side, "%s-shm", f->path), 0);
    assert_int_equal(stat(side, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);

    cleanup_free char *mode = raw_text(f->path, "PRAGMA journal_mode");
    assert_string_equal(mode, "wal");
    cleanup_free char *version = raw_text(f->path, "PRAGMA user_version");
    assert_string_equal(version, "6");
    cleanup_free char *indexes = raw_text(f->path, "SELECT group_concat(name, ',') FROM (SELECT name FROM "
                                                   "sqlite_master WHERE type = 'index' AND tbl_name = "
                                                   "'sandboxes' AND sql IS NOT NULL ORDER BY name)");
    assert_string_equal(indexes, "sandboxes_expires,sandboxes_tenant");

    /* A file left readable by others is tightened on open. */
    fb_store_close(f->s);
    f->s = NULL;
    assert_int_equal(chmod(f->path, 0644), 0);
    reopen(f);
    assert_int_equal(stat(f->path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
}

static void test_newer_schema_refused(void **state)
{
    struct fixture *f = *state;
    fb_store_close(f->s);
    f->s = NULL;
    free(raw_text(f->path, "PRAGMA user_version = 99"));

    cleanup_error fb_error_t err = NULL;
    fb_store *s = NULL;
    expect_kind(fb_store_open(f->path, &s, &err), &err, FB_ERR_INTERNAL);
    assert_null(s);

    /* Put it back so teardown has a store to close. */
    free(raw_text(f->path, "PRAGMA user_version = 6"));
    reopen(f);
}

static void test_open_bad_path(void **state)
{
    struct fixture *f = *state;
    char path[160];
    assert_int_equal(fb_snprintf(path, sizeof path, "%s/missing/store.db", f->dir), 0);
    cleanup_error fb_error_t err = NULL;
    fb_store *s = NULL;
    expect_kind(fb_store_open(path, &s, &err), &err, FB_ERR_INTERNAL);
    assert_null(s);

    /* A directory is not a database. */
    expect_kind(fb_store_open(f->dir, &s, &err), &err, FB_ERR_INTERNAL);
    assert_null(s);
}

static void test_keys(void **state)
{
    struct fixture *f = *state;
    cleanup_error fb_error_t err = NULL;
    int64_t count = -1;
    char tenant[FB_ID_MAX];

    assert_int_equal(fb_store_key_count(f->s, &count, &err), 0);
    assert_int_equal(count, 0);

    assert_int_equal(fb_store_tenant_ensure(f->s, "t1", "first", &err), 0);
    assert_int_equal(fb_store_tenant_ensure(f->s, "t1", "first again", &err), 0);
    assert_int_equal(fb_store_tenant_ensure(f->s, "t2", "second", &err), 0);
    assert_int_equal(fb_store_key_add(f->s, "t1", "abc", &err), 0);
    assert_int_equal(fb_store_key_add(f->s, "t2", "key-of-t2", &err), 0);
    assert_int_equal(fb_store_key_count(f->s, &count, &err), 0);
    assert_int_equal(count, 2);

    assert_int_equal(fb_store_key_lookup(f->s, "abc", tenant, &err), 0);
    assert_string_equal(tenant, "t1");
    assert_int_equal(fb_store_key_lookup(f->s, "key-of-t2", tenant, &err), 0);
    assert_string_equal(tenant, "t2");

    expect_kind(fb_store_key_lookup(f->s, "abd", tenant, &err), &err, FB_ERR_UNAUTHORIZED);
    expect_kind(fb_store_key_lookup(f->s, "", tenant, &err), &err, FB_ERR_UNAUTHORIZED);
    expect_kind(fb_store_key_lookup(f->s, NULL, tenant, &err), &err, FB_ERR_UNAUTHORIZED);
    char huge[FB_KEY_MAX + 2];
    memset(huge, 'k', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    expect_kind(fb_store_key_lookup(f->s, huge, tenant, &err), &err, FB_ERR_UNAUTHORIZED);
    expect_kind(fb_store_key_add(f->s, "t1", huge, &err), &err, FB_ERR_BAD_REQUEST);
    expect_kind(fb_store_key_add(f->s, "t1", "", &err), &err, FB_ERR_BAD_REQUEST);

    expect_kind(fb_store_key_add(f->s, "t2", "abc", &err), &err, FB_ERR_CONFLICT);
    expect_kind(fb_store_key_add(f->s, "nobody", "fresh", &err), &err, FB_ERR_NOT_FOUND);
    expect_kind(fb_store_tenant_ensure(f->s, "", "empty", &err), &err, FB_ERR_BAD_REQUEST);

    /* Only the SHA-256 of the key reaches the file. */
    cleanup_free char *hash = raw_text(f->path, "SELECT key_sha256 FROM api_keys WHERE tenant_id = 't1'");
    assert_string_equal(hash, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    cleanup_free char *leak = raw_text(f->path, "SELECT count(*) FROM api_keys WHERE key_sha256 = 'abc' OR "
                                                "key_sha256 = 'key-of-t2'");
    assert_string_equal(leak, "0");
}

static void test_sandbox_crud(void **state)
{
    struct fixture *f = *state;
    cleanup_error fb_error_t err = NULL;
    struct fb_sandbox_row in = sbx("sbx_1", "t1", 1000, -1, 100000, "{\"ttl\":0}");
    in.init_pid = 4242;
    assert_int_equal(fb_store_sandbox_insert(f->s, &in, &err), 0);
    expect_kind(fb_store_sandbox_insert(f->s, &in, &err), &err, FB_ERR_CONFLICT);

    struct fb_sandbox_row out;
    assert_int_equal(fb_store_sandbox_get(f->s, NULL, "sbx_1", &out, &err), 0);
    assert_string_equal(out.id, "sbx_1");
    assert_string_equal(out.tenant, "t1");
    assert_string_equal(out.state, "running");
    assert_string_equal(out.template_name, "default");
    assert_int_equal(out.created_ms, 1000);
    assert_int_equal(out.expires_ms, -1);
    assert_int_equal(out.init_pid, 4242);
    assert_int_equal(out.uid_base, 100000);
    assert_string_equal(out.spec_json, "{\"ttl\":0}");
    fb_sandbox_row_clear(&out);
    assert_null(out.spec_json);

    assert_int_equal(fb_store_sandbox_get(f->s, "t1", "sbx_1", &out, &err), 0);
    assert_string_equal(out.tenant, "t1");
    fb_sandbox_row_clear(&out);

    /* Another tenant's sandbox is indistinguishable from a missing one. */
    expect_kind(fb_store_sandbox_get(f->s, "t2", "sbx_1", &out, &err), &err, FB_ERR_NOT_FOUND);
    assert_null(out.spec_json);
    fb_sandbox_row_clear(&out);
    expect_kind(fb_store_sandbox_get(f->s, NULL, "sbx_nope", &out, &err), &err, FB_ERR_NOT_FOUND);
    char long_id[FB_ID_MAX + 8];
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    expect_kind(fb_store_sandbox_get(f->s, NULL, long_id, &out, &err), &err, FB_ERR_NOT_FOUND);

    struct fb_sandbox_row up = sbx("sbx_1", "t1", 1000, 5000, 100000, "{\"ttl\":4}");
    assert_int_equal(fb_strlcpy(up.state, "stopped", sizeof up.state), 0);
    assert_int_equal(fb_strlcpy(up.state_reason, "init exited", sizeof up.state_reason), 0);
    up.init_pid = 0;
    assert_int_equal(fb_store_sandbox_update(f->s, &up, &err), 0);
    assert_int_equal(fb_store_sandbox_get(f->s, "t1", "sbx_1", &out, &err), 0);
    assert_string_equal(out.state, "stopped");
    assert_string_equal(out.state_reason, "init exited");
    assert_int_equal(out.expires_ms, 5000);
    assert_int_equal(out.init_pid, 0);
    assert_string_equal(out.spec_json, "{\"ttl\":4}");
    fb_sandbox_row_clear(&out);

    /* Back to "never". */
    up.expires_ms = -1;
    assert_int_equal(fb_store_sandbox_update(f->s, &up, &err), 0);
    assert_int_equal(fb_store_sandbox_get(f->s, NULL, "sbx_1", &out, &err), 0);
    assert_int_equal(out.expires_ms, -1);
    fb_sandbox_row_clear(&out);

    struct fb_sandbox_row ghost = sbx("sbx_ghost", "t1", 1, -1, 1, "{}");
    expect_kind(fb_store_sandbox_update(f->s, &ghost, &err), &err, FB_ERR_NOT_FOUND);

    struct fb_sandbox_row nospec = sbx("sbx_2", "t1", 1, -1, 1, NULL);
    expect_kind(fb_store_sandbox_insert(f->s, &nospec, &err), &err, FB_ERR_INTERNAL);
    struct fb_sandbox_row noid = sbx("", "t1", 1, -1, 1, "{}");
    expect_kind(fb_store_sandbox_insert(f->s, &noid, &err), &err, FB_ERR_BAD_REQUEST);

    assert_int_equal(fb_store_sandbox_delete(f->s, "sbx_1", &err), 0);
    expect_kind(fb_store_sandbox_delete(f->s, "sbx_1", &err), &err, FB_ERR_NOT_FOUND);
    expect_kind(fb_store_sandbox_get(f->s, NULL, "sbx_1", &out, &err), &err, FB_ERR_NOT_FOUND);
}

static void test_sandbox_list(void **state)
{
    struct fixture *f = *state;
    cleanup_error fb_error_t err = NULL;
    struct fb_sandbox_row *rows = NULL;
    size_t n = 99;

    assert_int_equal(fb_store_sandbox_list(f->s, NULL, &rows, &n, &err), 0);
    assert_int_equal(n, 0);
    fb_sandbox_rows_free(rows, n);

    /* Inserted out of order; same created_ms keeps insertion order. */
    insert(f->s, "c", "t1", 300, -1, 3);
    insert(f->s, "a", "t1", 100, -1, 1);
    insert(f->s, "b", "t2", 200, -1, 2);
    insert(f->s, "d", "t1", 300, -1, 4);

    assert_int_equal(fb_store_sandbox_list(f->s, NULL, &rows, &n, &err), 0);
    assert_int_equal(n, 4);
    assert_string_equal(rows[0].id, "a");
    assert_string_equal(rows[1].id, "b");
    assert_string_equal(rows[2].id, "c");
    assert_string_equal(rows[3].id, "d");
    assert_string_equal(rows[3].spec_json, "{}");
    fb_sandbox_rows_free(rows, n);

    assert_int_equal(fb_store_sandbox_list(f->s, "t1", &rows, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_string_equal(rows[0].id, "a");
    assert_string_equal(rows[1].id, "c");
    assert_string_equal(rows[2].id, "d");
    for (size_t i = 0; i < n; i++)
        assert_string_equal(rows[i].tenant, "t1");
    fb_sandbox_rows_free(rows, n);

    assert_int_equal(fb_store_sandbox_list(f->s, "t3", &rows, &n, &err), 0);
    assert_int_equal(n, 0);
    fb_sandbox_rows_free(rows, n);

    /* Enough rows to make the array grow several times. */
    char id[FB_ID_MAX];
    for (int i = 0; i < 100; i++) {
        assert_int_equal(fb_snprintf(id, sizeof id, "bulk_%03d", i), 0);
        insert(f->s, id, "t4", 1000 + i, -1, 10000 + i);
    }
    assert_int_equal(fb_store_sandbox_list(f->s, "t4", &rows, &n, &err), 0);
    assert_int_equal(n, 100);
    assert_string_equal(rows[0].id, "bulk_000");
    assert_string_equal(rows[99].id, "bulk_099");
    fb_sandbox_rows_free(rows, n);
}

static void test_sandbox_expired(void **state)
{
    struct fixture *f = *state;
    cleanup_error fb_error_t err = NULL;
    char **ids = NULL;
    size_t n = 99;

    assert_int_equal(fb_store_sandbox_expired(f->s, 1000, &ids, &n, &err), 0);
    assert_int_equal(n, 0);
    free(ids);

    insert(f->s, "never", "t1", 10, -1, 1);
    insert(f->s, "late", "t1", 20, 300, 2);
    insert(f->s, "now", "t1", 30, 200, 3);
    insert(f->s, "early", "t2", 40, 100, 4);

    assert_int_equal(fb_store_sandbox_expired(f->s, 200, &ids, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(ids[0], "now");
    assert_string_equal(ids[1], "early");
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);

    assert_int_equal(fb_store_sandbox_expired(f->s, INT64_MAX, &ids, &n, &err), 0);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
}

static void test_sandbox_uid_bases(void **state)
{
    struct fixture *f = *state;
    cleanup_error fb_error_t err = NULL;
    int64_t *bases = NULL;
    size_t n = 99;

    assert_int_equal(fb_store_sandbox_uid_bases(f->s, &bases, &n, &err), 0);
    assert_int_equal(n, 0);
    free(bases);

    insert(f->s, "x", "t1", 1, -1, 300000);
    insert(f->s, "y", "t2", 2, -1, 100000);
    insert(f->s, "z", "t1", 3, -1, 200000);
    assert_int_equal(fb_store_sandbox_uid_bases(f->s, &bases, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(bases[0], 100000);
    assert_int_equal(bases[1], 200000);
    assert_int_equal(bases[2], 300000);
    free(bases);

    assert_int_equal(fb_store_sandbox_delete(f->s, "z", &err), 0);
    assert_int_equal(fb_store_sandbox_uid_bases(f->s, &bases, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(bases[1], 300000);
    free(bases);
}

static struct fb_template_row tpl(const char *name, const char *source, int64_t created, int64_t size)
{
    struct fb_template_row r = {.created_ms = created, .size_bytes = size};
    assert_int_equal(fb_strlcpy(r.name, name, sizeof r.name), 0);
    assert_int_equal(fb_strlcpy(r.source, source, sizeof r.source), 0);
    return r;
}

static void test_templates_layers_cache(void **state)
{
    struct fixture *f = *state;
    cleanup_error fb_error_t err = NULL;
    struct fb_template_row in = {.created_ms = 5, .size_bytes = 77};
    strcpy(in.name, "py");
    strcpy(in.source, "build");
    strcpy(in.base, "default");
    in.layers_json = "[\"sha256:aa\"]";
    in.config_json = "{\"user\":\"app\"}";
    assert_int_equal(fb_store_template_put(f->s, &in, &err), 0);
    struct fb_template_row out;
    assert_int_equal(fb_store_template_get(f->s, "py", &out, &err), 0);
    assert_string_equal(out.base, "default");
    assert_string_equal(out.layers_json, "[\"sha256:aa\"]");
    assert_string_equal(out.config_json, "{\"user\":\"app\"}");
    fb_template_row_clear(&out);

    struct fb_layer_row l = {.size_bytes = 9, .created_ms = 1};
    strcpy(l.digest, "sha256:aa");
    assert_int_equal(fb_store_layer_put(f->s, &l, &err), 0);
    l.size_bytes = 10;
    assert_int_equal(fb_store_layer_put(f->s, &l, &err), 0); /* kept as it was */
    struct fb_layer_row got;
    assert_int_equal(fb_store_layer_get(f->s, "sha256:aa", &got, &err), 0);
    assert_int_equal(got.size_bytes, 9);

    char layer[80];
    assert_int_equal(fb_store_build_cache_put(f->s, "k1", "sha256:aa", &err), 0);
    assert_int_equal(fb_store_build_cache_get(f->s, "k1", layer, sizeof layer, &err), 0);
    assert_string_equal(layer, "sha256:aa");
    /* deleting the layer drops the cache entries that point at it */
    assert_int_equal(fb_store_layer_delete(f->s, "sha256:aa", &err), 0);
    expect_kind(fb_store_build_cache_get(f->s, "k1", layer, sizeof layer, &err), &err, FB_ERR_NOT_FOUND);
    expect_kind(fb_store_layer_get(f->s, "sha256:aa", &got, &err), &err, FB_ERR_NOT_FOUND);
}

static void test_checkpoints(void **state)
{
    struct fixture *f = *state;
    cleanup_error fb_error_t err = NULL;
    struct fb_checkpoint_row a = {.uid_base = 100000, .size_bytes = 4096, .created_ms = 10};
    strcpy(a.id, "ckpt_0000000000000001");
    strcpy(a.tenant, "t1");
    strcpy(a.sandbox, "sbx_1");
    strcpy(a.name, "first");
    strcpy(a.template_name, "default");
    strcpy(a.layer_kind, "image");
    assert_int_equal(fb_store_checkpoint_insert(f->s, &a, &err), 0);
    expect_kind(fb_store_checkpoint_insert(f->s, &a, &err), &err, FB_ERR_CONFLICT);

    struct fb_checkpoint_row b = a;
    strcpy(b.id, "ckpt_0000000000000002");
    strcpy(b.parent, a.id);
    b.created_ms = 20;
    assert_int_equal(fb_store_checkpoint_insert(f->s, &b, &err), 0);
    struct fb_checkpoint_row c = a;
    strcpy(c.id, "ckpt_0000000000000003");
    strcpy(c.tenant, "t2");
    strcpy(c.sandbox, "sbx_2");
    assert_int_equal(fb_store_checkpoint_insert(f->s, &c, &err), 0);

    struct fb_checkpoint_row got;
    assert_int_equal(fb_store_checkpoint_get(f->s, "t1", b.id, &got, &err), 0);
    assert_string_equal(got.parent, a.id);
    assert_string_equal(got.sandbox, "sbx_1");
    assert_string_equal(got.layer_kind, "image");
    assert_int_equal(got.uid_base, 100000);
    assert_int_equal(got.size_bytes, 4096);
    assert_int_equal(got.created_ms, 20);
    /* another tenant's row is not found */
    expect_kind(fb_store_checkpoint_get(f->s, "t2", b.id, &got, &err), &err, FB_ERR_NOT_FOUND);
    assert_int_equal(fb_store_checkpoint_get(f->s, NULL, c.id, &got, &err), 0);

    struct fb_checkpoint_row *rows = NULL;
    size_t n = 0;
    assert_int_equal(fb_store_checkpoint_list(f->s, "t1", "sbx_1", &rows, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(rows[0].id, a.id); /* oldest first */
    assert_string_equal(rows[1].id, b.id);
    free(rows);
    assert_int_equal(fb_store_checkpoint_list(f->s, NULL, NULL, &rows, &n, &err), 0);
    assert_int_equal(n, 3);
    free(rows);
    assert_int_equal(fb_store_checkpoint_list(f->s, "t2", "sbx_1", &rows, &n, &err), 0);
    assert_int_equal(n, 0);
    free(rows);

    assert_int_equal(fb_store_checkpoint_delete(f->s, a.id, &err), 0);
    expect_kind(fb_store_checkpoint_delete(f->s, a.id, &err), &err, FB_ERR_NOT_FOUND);
    /* the child keeps its parent's id */
    assert_int_equal(fb_store_checkpoint_get(f->s, NULL, b.id, &got, &err), 0);
    assert_string_equal(got.parent, a.id);
}

static void test_templates(void **state)
{
    struct fixture *f = *state;
    cleanup_error fb_error_t err = NULL;
    struct fb_template_row out;
    struct fb_template_row *rows = NULL;
    size_t n = 99;

    assert_int_equal(fb_store_template_list(f->s, &rows, &n, &err), 0);
    assert_int_equal(n, 0);
    free(rows);
    expect_kind(fb_store_template_get(f->s, "default", &out, &err), &err, FB_ERR_NOT_FOUND);

    struct fb_template_row a = tpl("python", "import", 10, 1234);
    struct fb_template_row b = tpl("default", "debootstrap", 20, 5678);
    assert_int_equal(fb_store_template_put(f->s, &a, &err), 0);
    assert_int_equal(fb_store_template_put(f->s, &b, &err), 0);

    assert_int_equal(fb_store_template_get(f->s, "python", &out, &err), 0);
    assert_string_equal(out.name, "python");
    assert_string_equal(out.source, "import");
    assert_int_equal(out.created_ms, 10);
    assert_int_equal(out.size_bytes, 1234);
    fb_template_row_clear(&out);

    /* put replaces. */
    a = tpl("python", "debootstrap", 30, 999);
    assert_int_equal(fb_store_template_put(f->s, &a, &err), 0);
    assert_int_equal(fb_store_template_get(f->s, "python", &out, &err), 0);
    assert_string_equal(out.source, "debootstrap");
    assert_int_equal(out.created_ms, 30);
    assert_int_equal(out.size_bytes, 999);
    fb_template_row_clear(&out);

    assert_int_equal(fb_store_template_list(f->s, &rows, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(rows[0].name, "default");
    assert_string_equal(rows[1].name, "python");
    fb_template_rows_free(rows, n);

    assert_int_equal(fb_store_template_delete(f->s, "python", &err), 0);
    expect_kind(fb_store_template_delete(f->s, "python", &err), &err, FB_ERR_NOT_FOUND);
    expect_kind(fb_store_template_get(f->s, "python", &out, &err), &err, FB_ERR_NOT_FOUND);
    assert_int_equal(fb_store_template_list(f->s, &rows, &n, &err), 0);
    assert_int_equal(n, 1);
    fb_template_rows_free(rows, n);

    struct fb_template_row unnamed = tpl("", "import", 1, 1);
    expect_kind(fb_store_template_put(f->s, &unnamed, &err), &err, FB_ERR_BAD_REQUEST);
}

static void test_reopen_persists(void **state)
{
    struct fixture *f = *state;
    cleanup_error fb_error_t err = NULL;
    assert_int_equal(fb_store_tenant_ensure(f->s, "t1", "first", &err), 0);
    assert_int_equal(fb_store_key_add(f->s, "t1", "secret-key", &err), 0);
    insert(f->s, "sbx_keep", "t1", 5, 77, 123);
    struct fb_template_row t = tpl("default", "debootstrap", 1, 2);
    assert_int_equal(fb_store_template_put(f->s, &t, &err), 0);

    reopen(f);
    reopen(f); /* migrating an up-to-date file must be a no-op */

    char tenant[FB_ID_MAX];
    assert_int_equal(fb_store_key_lookup(f->s, "secret-key", tenant, &err), 0);
    assert_string_equal(tenant, "t1");
    struct fb_sandbox_row row;
    assert_int_equal(fb_store_sandbox_get(f->s, "t1", "sbx_keep", &row, &err), 0);
    assert_int_equal(row.expires_ms, 77);
    assert_int_equal(row.uid_base, 123);
    fb_sandbox_row_clear(&row);
    struct fb_template_row out;
    assert_int_equal(fb_store_template_get(f->s, "default", &out, &err), 0);
    assert_int_equal(out.size_bytes, 2);
    fb_template_row_clear(&out);
}

static void test_spec_unicode(void **state)
{
    struct fixture *f = *state;
    cleanup_error fb_error_t err = NULL;
    static const char spec[] = "{\"env\":{\"GREETING\":\"h\xc3\xa9llo \xe2\x9c\x93 "
                               "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80\","
                               "\"Q\":\"it's \\\"quoted\\\"; DROP TABLE sandboxes; --\"}}";
    struct fb_sandbox_row in = sbx("sbx_u'\"; --", "t1", 1, -1, 1, spec);
    assert_int_equal(fb_store_sandbox_insert(f->s, &in, &err), 0);

    struct fb_sandbox_row out;
    assert_int_equal(fb_store_sandbox_get(f->s, "t1", "sbx_u'\"; --", &out, &err), 0);
    assert_int_equal(strlen(out.spec_json), strlen(spec));
    assert_memory_equal(out.spec_json, spec, sizeof spec);
    fb_sandbox_row_clear(&out);

    /* A body at the API's 1 MiB limit. */
    size_t big = 1 << 20;
    cleanup_free char *large = malloc(big + 1);
    assert_non_null(large);
    static const char pattern[] = "\xc3\xa9xyz";
    for (size_t i = 0; i < big; i++)
        large[i] = pattern[i % (sizeof pattern - 1)];
    large[big - 1] = 'a'; /* do not end on half of a two-byte character */
    large[big] = '\0';
    struct fb_sandbox_row up = sbx("sbx_u'\"; --", "t1", 1, -1, 1, large);
    assert_int_equal(fb_store_sandbox_update(f->s, &up, &err), 0);
    reopen(f);
    assert_int_equal(fb_store_sandbox_get(f->s, NULL, "sbx_u'\"; --", &out, &err), 0);
    assert_int_equal(strlen(out.spec_json), big);
    assert_memory_equal(out.spec_json, large, big + 1);
    fb_sandbox_row_clear(&out);
}

struct worker {
    fb_store *s;
    int index;
    int failures;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char id[FB_ID_MAX];
    for (int i = 0; i < 50; i++) {
        fb_error_t err = NULL;
        struct fb_sandbox_row r = {.created_ms = i, .expires_ms = -1, .uid_base = w->index * 1000 + i};
        if (fb_snprintf(id, sizeof id, "w%d_%d", w->index, i) < 0 || fb_strlcpy(r.id, id, sizeof r.id) < 0 ||
            fb_strlcpy(r.tenant, "t1", sizeof r.tenant) < 0 ||
            fb_strlcpy(r.state, "starting", sizeof r.state) < 0) {
            w->failures++;
            continue;
        }
        r.spec_json = "{}";
        if (fb_store_sandbox_insert(w->s, &r, &err) < 0)
            w->failures++;
        fb_error_release(&err);
        struct fb_sandbox_row got;
        if (fb_store_sandbox_get(w->s, "t1", id, &got, &err) < 0)
            w->failures++;
        fb_sandbox_row_clear(&got);
        fb_error_release(&err);
    }
    return NULL;
}

static void test_concurrent(void **state)
{
    struct fixture *f = *state;
    enum { NT = 4 };
    pthread_t th[NT];
    struct worker w[NT];
    for (int i = 0; i < NT; i++) {
        w[i] = (struct worker){.s = f->s, .index = i};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < NT; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(w[i].failures, 0);
    }
    cleanup_error fb_error_t err = NULL;
    int64_t *bases = NULL;
    size_t n = 0;
    assert_int_equal(fb_store_sandbox_uid_bases(f->s, &bases, &n, &err), 0);
    assert_int_equal(n, NT * 50);
    free(bases);
}

static struct fb_volume_row vol(const char *tenant, const char *name, int64_t size, int64_t created)
{
    struct fb_volume_row v;
    memset(&v, 0, sizeof v);
    snprintf(v.tenant, sizeof v.tenant, "%s", tenant);
    snprintf(v.name, sizeof v.name, "%s", name);
    v.size_bytes = size;
    v.created_ms = created;
    return v;
}

static void test_volumes(void **state)
{
    struct fixture *f = *state;
    cleanup_error fb_error_t err = NULL;
    struct fb_volume_row a = vol("t1", "cache", 1 << 30, 10), b = vol("t1", "data", 16 << 20, 20),
                         c = vol("t2", "cache", 32 << 20, 30);
    assert_int_equal(fb_store_volume_insert(f->s, &a, &err), 0);
    assert_int_equal(fb_store_volume_insert(f->s, &b, &err), 0);
    /* the same name under another tenant is another volume */
    assert_int_equal(fb_store_volume_insert(f->s, &c, &err), 0);
    expect_kind(fb_store_volume_insert(f->s, &a, &err), &err, FB_ERR_CONFLICT);
    struct fb_volume_row empty = vol("t1", "", 1, 1);
    expect_kind(fb_store_volume_insert(f->s, &empty, &err), &err, FB_ERR_BAD_REQUEST);

    struct fb_volume_row out;
    assert_int_equal(fb_store_volume_get(f->s, "t2", "cache", &out, &err), 0);
    assert_string_equal(out.tenant, "t2");
    assert_int_equal(out.size_bytes, 32 << 20);
    assert_int_equal(out.created_ms, 30);
    /* another tenant's volume reads like a missing one */
    expect_kind(fb_store_volume_get(f->s, "t2", "data", &out, &err), &err, FB_ERR_NOT_FOUND);
    expect_kind(fb_store_volume_get(f->s, "t3", "cache", &out, &err), &err, FB_ERR_NOT_FOUND);

    struct fb_volume_row *rows = NULL;
    size_t n = 0;
    assert_int_equal(fb_store_volume_list(f->s, "t1", &rows, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(rows[0].name, "cache");
    assert_string_equal(rows[1].name, "data");
    assert_int_equal(rows[1].size_bytes, 16 << 20);
    free(rows);
    assert_int_equal(fb_store_volume_list(f->s, NULL, &rows, &n, &err), 0);
    assert_int_equal(n, 3);
    free(rows);

    expect_kind(fb_store_volume_delete(f->s, "t2", "data", &err), &err, FB_ERR_NOT_FOUND);
    assert_int_equal(fb_store_volume_delete(f->s, "t1", "cache", &err), 0);
    expect_kind(fb_store_volume_delete(f->s, "t1", "cache", &err), &err, FB_ERR_NOT_FOUND);
    assert_int_equal(fb_store_volume_get(f->s, "t2", "cache", &out, &err), 0);

    /* rows survive a reopen */
    reopen(f);
    assert_int_equal(fb_store_volume_list(f->s, "t1", &rows, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_string_equal(rows[0].name, "data");
    free(rows);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_private_wal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer_schema_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_bad_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sandbox_crud, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sandbox_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sandbox_expired, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sandbox_uid_bases, setup, teardown),
        cmocka_unit_test_setup_teardown(test_templates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkpoints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_persists, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spec_unicode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_templates_layers_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_volumes, setup, teardown),
    };
    return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
