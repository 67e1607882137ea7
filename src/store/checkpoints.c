/* Checkpoint rows: files-only checkpoints of a sandbox's writable layer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cleanup.h"
#include "../common/util.h"
#include "internal.h"

#define CKPT_COLS                                                                                            \
    "id, tenant_id, sandbox_id, name, template, parent, layer_kind, uid_base, size_bytes, created_ms, "      \
    "memory"

static int ckpt_load(sqlite3 *db, sqlite3_stmt *st, struct fb_checkpoint_row *out, fb_error_t *err)
{
    if (sq_col_copy(db, st, 0, out->id, sizeof out->id, err) < 0 ||
        sq_col_copy(db, st, 1, out->tenant, sizeof out->tenant, err) < 0 ||
        sq_col_copy(db, st, 2, out->sandbox, sizeof out->sandbox, err) < 0 ||
        sq_col_copy(db, st, 3, out->name, sizeof out->name, err) < 0 ||
        sq_col_copy(db, st, 4, out->template_name, sizeof out->template_name, err) < 0 ||
        sq_col_copy(db, st, 5, out->parent, sizeof out->parent, err) < 0 ||
        sq_col_copy(db, st, 6, out->layer_kind, sizeof out->layer_kind, err) < 0)
        return -1;
    out->uid_base = sqlite3_column_int64(st, 7);
    out->size_bytes = sqlite3_column_int64(st, 8);
    out->created_ms = sqlite3_column_int64(st, 9);
    out->memory = sqlite3_column_int64(st, 10) != 0;
    return 0;
}

int fb_store_checkpoint_insert(fb_store *s, const struct fb_checkpoint_row *row, fb_error_t *err)
{
    if (!sq_fits(row->id, sizeof row->id) || row->id[0] == '\0' ||
        !sq_fits(row->tenant, sizeof row->tenant) || !sq_fits(row->sandbox, sizeof row->sandbox) ||
        !sq_fits(row->name, sizeof row->name) || !sq_fits(row->template_name, sizeof row->template_name) ||
        !sq_fits(row->parent, sizeof row->parent) || !sq_fits(row->layer_kind, sizeof row->layer_kind))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "checkpoint: unterminated field");

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st,
                   "INSERT INTO checkpoints (" CKPT_COLS
                   ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                   err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, row->id, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, row->tenant, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 3, row->sandbox, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 4, row->name, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 5, row->template_name, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 6, row->parent, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 7, row->layer_kind, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(st, 8, row->uid_base) != SQLITE_OK ||
        sqlite3_bind_int64(st, 9, row->size_bytes) != SQLITE_OK ||
        sqlite3_bind_int64(st, 10, row->created_ms) != SQLITE_OK ||
        sqlite3_bind_int64(st, 11, row->memory ? 1 : 0) != SQLITE_OK)
        return sq_fail(s->db, err, "bind checkpoint");
    int rc = sqlite3_step(st);
    if (sq_is_constraint(rc))
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "checkpoint %s already exists", row->id);
    if (rc != SQLITE_DONE)
        return sq_fail(s->db, err, "insert checkpoint");
    return 0;
}

int fb_store_checkpoint_get(fb_store *s, const char *tenant, const char *id, struct fb_checkpoint_row *out,
                            fb_error_t *err)
{
    memset(out, 0, sizeof *out);
    if (!sq_fits(id, FB_ID_MAX) || (tenant != NULL && !sq_fits(tenant, FB_ID_MAX)))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "checkpoint not found");

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    /* another tenant's checkpoint reads exactly like a missing one */
    if (sq_prepare(s->db, &st,
                   "SELECT " CKPT_COLS " FROM checkpoints WHERE id = ?1 AND (?2 IS NULL OR tenant_id = ?2)",
                   err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC) != SQLITE_OK ||
        (tenant != NULL ? sqlite3_bind_text(st, 2, tenant, -1, SQLITE_STATIC) : sqlite3_bind_null(st, 2)) !=
            SQLITE_OK)
        return sq_fail(s->db, err, "bind checkpoint");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "checkpoint %s not found", id);
    if (rc != SQLITE_ROW)
        return sq_fail(s->db, err, "get checkpoint");
    return ckpt_load(s->db, st, out, err);
}

int fb_store_checkpoint_list(fb_store *s, const char *tenant, const char *sandbox,
                             struct fb_checkpoint_row **rows, size_t *n, fb_error_t *err)
{
    *rows = NULL;
    *n = 0;
    if ((tenant != NULL && !sq_fits(tenant, FB_ID_MAX)) || (sandbox != NULL && !sq_fits(sandbox, FB_ID_MAX)))
        return 0;

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_free struct fb_checkpoint_row *v = NULL;
    size_t len = 0, cap = 0;
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st,
                   "SELECT " CKPT_COLS " FROM checkpoints WHERE (?1 IS NULL OR tenant_id = ?1)"
                   " AND (?2 IS NULL OR sandbox_id = ?2) ORDER BY created_ms, rowid",
                   err) < 0)
        return -1;
    if ((tenant != NULL ? sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC) : sqlite3_bind_null(st, 1)) !=
            SQLITE_OK ||
        (sandbox != NULL ? sqlite3_bind_text(st, 2, sandbox, -1, SQLITE_STATIC) : sqlite3_bind_null(st, 2)) !=
            SQLITE_OK)
        return sq_fail(s->db, err, "bind checkpoint list");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct fb_checkpoint_row *nv = sq_grow(v, &cap, len, sizeof(*v));
        if (nv == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "store: list checkpoints");
        v = nv;
        memset(&v[len], 0, sizeof v[len]);
        if (ckpt_load(s->db, st, &v[len], err) < 0)
            return -1;
        len++;
    }
    if (rc != SQLITE_DONE)
        return sq_fail(s->db, err, "list checkpoints");
    *rows = fb_steal_ptr(v);
    *n = len;
    return 0;
}

int fb_store_checkpoint_delete(fb_store *s, const char *id, fb_error_t *err)
{
    if (!sq_fits(id, FB_ID_MAX))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "checkpoint not found");
    bool gone = false;
    if (sq_delete_where(s, "DELETE FROM checkpoints WHERE id = ?1", id, &gone, err) < 0)
        return fb_error_wrap(err, "checkpoint %s", id);
    if (!gone)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "checkpoint %s not found", id);
    return 0;
}
