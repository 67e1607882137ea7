/* Volume rows: a tenant's persistent volumes (name and size; the image
 * itself lives under STATE_DIR/volumes). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cleanup.h"
#include "../common/util.h"
#include "internal.h"

#define VOL_COLS "tenant_id, name, size_bytes, created_ms"

static int vol_load(sqlite3 *db, sqlite3_stmt *st, struct fb_volume_row *out, fb_error_t *err)
{
    if (sq_col_copy(db, st, 0, out->tenant, sizeof out->tenant, err) < 0 ||
        sq_col_copy(db, st, 1, out->name, sizeof out->name, err) < 0)
        return -1;
    out->size_bytes = sqlite3_column_int64(st, 2);
    out->created_ms = sqlite3_column_int64(st, 3);
    return 0;
}

int fb_store_volume_insert(fb_store *s, const struct fb_volume_row *row, fb_error_t *err)
{
    if (!sq_fits(row->tenant, sizeof row->tenant) || row->tenant[0] == '\0' ||
        !sq_fits(row->name, sizeof row->name) || row->name[0] == '\0')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "volume: unterminated or empty field");

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st, "INSERT INTO volumes (" VOL_COLS ") VALUES (?1, ?2, ?3, ?4)", err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, row->tenant, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, row->name, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(st, 3, row->size_bytes) != SQLITE_OK ||
        sqlite3_bind_int64(st, 4, row->created_ms) != SQLITE_OK)
        return sq_fail(s->db, err, "bind volume");
    int rc = sqlite3_step(st);
    if (sq_is_constraint(rc))
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "volume %s already exists", row->name);
    if (rc != SQLITE_DONE)
        return sq_fail(s->db, err, "insert volume");
    return 0;
}

int fb_store_volume_get(fb_store *s, const char *tenant, const char *name, struct fb_volume_row *out,
                        fb_error_t *err)
{
    memset(out, 0, sizeof *out);
    if (!sq_fits(tenant, FB_ID_MAX) || !sq_fits(name, FB_NAME_MAX))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "volume not found");

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st, "SELECT " VOL_COLS " FROM volumes WHERE tenant_id = ?1 AND name = ?2", err) <
        0)
        return -1;
    if (sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC) != SQLITE_OK)
        return sq_fail(s->db, err, "bind volume");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "volume %s not found", name);
    if (rc != SQLITE_ROW)
        return sq_fail(s->db, err, "get volume");
    return vol_load(s->db, st, out, err);
}

int fb_store_volume_list(fb_store *s, const char *tenant, struct fb_volume_row **rows, size_t *n,
                         fb_error_t *err)
{
    *rows = NULL;
    *n = 0;
    if (tenant != NULL && !sq_fits(tenant, FB_ID_MAX))
        return 0;

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_free struct fb_volume_row *v = NULL;
    size_t len = 0, cap = 0;
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st,
                   "SELECT " VOL_COLS
                   " FROM volumes WHERE (?1 IS NULL OR tenant_id = ?1) ORDER BY tenant_id, name",
                   err) < 0)
        return -1;
    if ((tenant != NULL ? sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC) : sqlite3_bind_null(st, 1)) !=
        SQLITE_OK)
        return sq_fail(s->db, err, "bind volume list");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct fb_volume_row *nv = sq_grow(v, &cap, len, sizeof(*v));
        if (nv == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "store: list volumes");
        v = nv;
        memset(&v[len], 0, sizeof v[len]);
        if (vol_load(s->db, st, &v[len], err) < 0)
            return -1;
        len++;
    }
    if (rc != SQLITE_DONE)
        return sq_fail(s->db, err, "list volumes");
    *rows = fb_steal_ptr(v);
    *n = len;
    return 0;
}

int fb_store_volume_delete(fb_store *s, const char *tenant, const char *name, fb_error_t *err)
{
    if (!sq_fits(tenant, FB_ID_MAX) || !sq_fits(name, FB_NAME_MAX))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "volume not found");
    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st, "DELETE FROM volumes WHERE tenant_id = ?1 AND name = ?2", err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC) != SQLITE_OK)
        return sq_fail(s->db, err, "bind volume");
    if (sq_step_done(s->db, st, "delete volume", err) < 0)
        return -1;
    if (sqlite3_changes(s->db) == 0)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "volume %s not found", name);
    return 0;
}
