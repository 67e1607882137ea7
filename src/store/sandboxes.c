/* Sandbox rows. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cleanup.h"
#include "../common/util.h"
#include "internal.h"

#define SANDBOX_COLS                                                                                         \
    "id, tenant_id, state, template, created_ms, expires_ms, init_pid, uid_base, spec_json, state_reason"

void fb_sandbox_row_clear(struct fb_sandbox_row *row)
{
    if (row == NULL)
        return;
    free(row->spec_json);
    memset(row, 0, sizeof(*row));
}

void fb_sandbox_rows_free(struct fb_sandbox_row *rows, size_t n)
{
    if (rows == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        fb_sandbox_row_clear(&rows[i]);
    free(rows);
}

/* Row fields are fixed arrays, so a missing terminator (not length) is the
 * only way they can be out of bounds. */
static int sandbox_row_check(const struct fb_sandbox_row *row, fb_error_t *err)
{
    if (!sq_fits(row->id, sizeof row->id) || row->id[0] == '\0')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "sandbox id must be 1..%zu bytes",
                            sizeof row->id - 1);
    if (!sq_fits(row->tenant, sizeof row->tenant) || !sq_fits(row->state, sizeof row->state) ||
        !sq_fits(row->template_name, sizeof row->template_name))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "sandbox %s: unterminated field", row->id);
    if (row->spec_json == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, EINVAL, "sandbox %s: no spec", row->id);
    return 0;
}

/* NULL binds SQL NULL, which the queries read as "any tenant". */
static int bind_opt_text(sqlite3_stmt *st, int idx, const char *v)
{
    return v != NULL ? sqlite3_bind_text(st, idx, v, -1, SQLITE_STATIC) : sqlite3_bind_null(st, idx);
}

static int bind_expires(sqlite3_stmt *st, int idx, int64_t expires_ms)
{
    return expires_ms < 0 ? sqlite3_bind_null(st, idx) : sqlite3_bind_int64(st, idx, expires_ms);
}

/* Reads one row selected with SANDBOX_COLS.  On failure out may hold a
 * partial row; the caller clears it either way. */
static int sandbox_load(sqlite3 *db, sqlite3_stmt *st, struct fb_sandbox_row *out, fb_error_t *err)
{
    if (sq_col_copy(db, st, 0, out->id, sizeof out->id, err) < 0 ||
        sq_col_copy(db, st, 1, out->tenant, sizeof out->tenant, err) < 0 ||
        sq_col_copy(db, st, 2, out->state, sizeof out->state, err) < 0 ||
        sq_col_copy(db, st, 3, out->template_name, sizeof out->template_name, err) < 0)
        return -1;
    out->created_ms = sqlite3_column_int64(st, 4);
    out->expires_ms = sqlite3_column_type(st, 5) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 5);
    out->init_pid = sqlite3_column_int64(st, 6);
    out->uid_base = sqlite3_column_int64(st, 7);
    if (sqlite3_column_type(st, 9) != SQLITE_NULL &&
        sq_col_copy(db, st, 9, out->state_reason, sizeof out->state_reason, err) < 0)
        return -1;
    return sq_col_dup(db, st, 8, &out->spec_json, err);
}

int fb_store_sandbox_insert(fb_store *s, const struct fb_sandbox_row *row, fb_error_t *err)
{
    if (sandbox_row_check(row, err) < 0)
        return -1;

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st,
                   "INSERT INTO sandboxes (" SANDBOX_COLS
                   ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                   err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, row->id, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, row->tenant, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 3, row->state, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 4, row->template_name, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(st, 5, row->created_ms) != SQLITE_OK ||
        bind_expires(st, 6, row->expires_ms) != SQLITE_OK ||
        sqlite3_bind_int64(st, 7, row->init_pid) != SQLITE_OK ||
        sqlite3_bind_int64(st, 8, row->uid_base) != SQLITE_OK ||
        sqlite3_bind_text(st, 9, row->spec_json, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 10, row->state_reason, -1, SQLITE_STATIC) != SQLITE_OK)
        return sq_fail(s->db, err, "bind sandbox");
    int rc = sqlite3_step(st);
    if (sq_is_constraint(rc))
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "sandbox %s already exists", row->id);
    if (rc != SQLITE_DONE)
        return sq_fail(s->db, err, "insert sandbox");
    return 0;
}

int fb_store_sandbox_update(fb_store *s, const struct fb_sandbox_row *row, fb_error_t *err)
{
    if (sandbox_row_check(row, err) < 0)
        return -1;

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st,
                   "UPDATE sandboxes SET state = ?2, expires_ms = ?3, init_pid = ?4, spec_json = ?5,"
                   " tenant_id = ?6, created_ms = ?7, state_reason = ?8 WHERE id = ?1",
                   err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, row->id, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, row->state, -1, SQLITE_STATIC) != SQLITE_OK ||
        bind_expires(st, 3, row->expires_ms) != SQLITE_OK ||
        sqlite3_bind_int64(st, 4, row->init_pid) != SQLITE_OK ||
        sqlite3_bind_text(st, 5, row->spec_json, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 6, row->tenant, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(st, 7, row->created_ms) != SQLITE_OK ||
        sqlite3_bind_text(st, 8, row->state_reason, -1, SQLITE_STATIC) != SQLITE_OK)
        return sq_fail(s->db, err, "bind sandbox");
    if (sq_step_done(s->db, st, "update sandbox", err) < 0)
        return -1;
    if (sqlite3_changes(s->db) == 0)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "sandbox %s not found", row->id);
    return 0;
}

int fb_store_sandbox_get(fb_store *s, const char *tenant, const char *id, struct fb_sandbox_row *out,
                         fb_error_t *err)
{
    memset(out, 0, sizeof(*out));
    /* Overlong ids cannot exist; do not echo them into the message. */
    if (!sq_fits(id, FB_ID_MAX))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "sandbox not found");
    if (tenant != NULL && !sq_fits(tenant, FB_ID_MAX))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "sandbox %s not found", id);

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    /* Another tenant's row reads exactly like a missing one, so ids of other
     * tenants cannot be probed. */
    if (sq_prepare(s->db, &st,
                   "SELECT " SANDBOX_COLS " FROM sandboxes WHERE id = ?1 AND (?2 IS NULL OR tenant_id = ?2)",
                   err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC) != SQLITE_OK ||
        bind_opt_text(st, 2, tenant) != SQLITE_OK)
        return sq_fail(s->db, err, "bind sandbox");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "sandbox %s not found", id);
    if (rc != SQLITE_ROW)
        return sq_fail(s->db, err, "get sandbox");
    if (sandbox_load(s->db, st, out, err) < 0) {
        fb_sandbox_row_clear(out);
        return -1;
    }
    return 0;
}

struct sandbox_vec {
    struct fb_sandbox_row *v;
    size_t n, cap;
};

static void sandbox_vec_freep(struct sandbox_vec *vec)
{
    fb_sandbox_rows_free(vec->v, vec->n);
    *vec = (struct sandbox_vec){0};
}
#define cleanup_sandbox_vec __attribute__((cleanup(sandbox_vec_freep)))

int fb_store_sandbox_list(fb_store *s, const char *tenant, struct fb_sandbox_row **rows, size_t *n,
                          fb_error_t *err)
{
    *rows = NULL;
    *n = 0;
    if (tenant != NULL && !sq_fits(tenant, FB_ID_MAX))
        return 0;

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_sandbox_vec struct sandbox_vec vec = {0};
    cleanup_stmt sqlite3_stmt *st = NULL;
    /* rowid breaks ties between rows created in the same millisecond. */
    if (sq_prepare(s->db, &st,
                   "SELECT " SANDBOX_COLS " FROM sandboxes WHERE ?1 IS NULL OR tenant_id = ?1"
                   " ORDER BY created_ms, rowid",
                   err) < 0)
        return -1;
    if (bind_opt_text(st, 1, tenant) != SQLITE_OK)
        return sq_fail(s->db, err, "bind tenant");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct fb_sandbox_row *nv = sq_grow(vec.v, &vec.cap, vec.n, sizeof(*vec.v));
        if (nv == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "store: list sandboxes");
        vec.v = nv;
        memset(&vec.v[vec.n], 0, sizeof(vec.v[vec.n]));
        vec.n++; /* counted before loading so a partial row is freed too */
        if (sandbox_load(s->db, st, &vec.v[vec.n - 1], err) < 0)
            return -1;
    }
    if (rc != SQLITE_DONE)
        return sq_fail(s->db, err, "list sandboxes");
    *rows = vec.v;
    *n = vec.n;
    vec = (struct sandbox_vec){0};
    return 0;
}

struct id_vec {
    char **v;
    size_t n, cap;
};

static void id_vec_freep(struct id_vec *vec)
{
    for (size_t i = 0; i < vec->n; i++)
        free(vec->v[i]);
    free(vec->v);
    *vec = (struct id_vec){0};
}
#define cleanup_id_vec __attribute__((cleanup(id_vec_freep)))

int fb_store_sandbox_expired(fb_store *s, int64_t now_ms, char ***ids, size_t *n, fb_error_t *err)
{
    *ids = NULL;
    *n = 0;

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_id_vec struct id_vec vec = {0};
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st,
                   "SELECT id FROM sandboxes WHERE expires_ms IS NOT NULL AND expires_ms <= ?1"
                   " ORDER BY created_ms, rowid",
                   err) < 0)
        return -1;
    if (sqlite3_bind_int64(st, 1, now_ms) != SQLITE_OK)
        return sq_fail(s->db, err, "bind time");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        char **nv = sq_grow(vec.v, &vec.cap, vec.n, sizeof(*vec.v));
        if (nv == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "store: expired sandboxes");
        vec.v = nv;
        if (sq_col_dup(s->db, st, 0, &vec.v[vec.n], err) < 0)
            return -1;
        vec.n++;
    }
    if (rc != SQLITE_DONE)
        return sq_fail(s->db, err, "expired sandboxes");
    *ids = vec.v;
    *n = vec.n;
    vec = (struct id_vec){0};
    return 0;
}

int fb_store_sandbox_delete(fb_store *s, const char *id, fb_error_t *err)
{
    if (!sq_fits(id, FB_ID_MAX))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "sandbox not found");

    bool gone = false;
    if (sq_delete_where(s, "DELETE FROM sandboxes WHERE id = ?1", id, &gone, err) < 0)
        return fb_error_wrap(err, "sandbox %s", id);
    if (!gone)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "sandbox %s not found", id);
    return 0;
}

int fb_store_sandbox_uid_bases(fb_store *s, int64_t **bases, size_t *n, fb_error_t *err)
{
    *bases = NULL;
    *n = 0;

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_free int64_t *v = NULL;
    size_t len = 0, cap = 0;
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st, "SELECT uid_base FROM sandboxes ORDER BY uid_base", err) < 0)
        return -1;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t *nv = sq_grow(v, &cap, len, sizeof(*v));
        if (nv == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "store: uid bases");
        v = nv;
        v[len++] = sqlite3_column_int64(st, 0);
    }
    if (rc != SQLITE_DONE)
        return sq_fail(s->db, err, "uid bases");
    *bases = fb_steal_ptr(v);
    *n = len;
    return 0;
}

/* ---- templates --------------------------------------------------------- */
