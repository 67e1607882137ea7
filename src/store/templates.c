/* Template rows. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cleanup.h"
#include "../common/util.h"
#include "internal.h"

static int template_load(sqlite3 *db, sqlite3_stmt *st, struct fb_template_row *out, fb_error_t *err)
{
    if (sq_col_copy(db, st, 0, out->name, sizeof out->name, err) < 0 ||
        sq_col_copy(db, st, 1, out->source, sizeof out->source, err) < 0)
        return -1;
    out->created_ms = sqlite3_column_int64(st, 2);
    out->size_bytes = sqlite3_column_int64(st, 3);
    return 0;
}

int fb_store_template_put(fb_store *s, const struct fb_template_row *row, fb_error_t *err)
{
    if (!sq_fits(row->name, sizeof row->name) || row->name[0] == '\0')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "template name must be 1..%zu bytes",
                            sizeof row->name - 1);
    if (!sq_fits(row->source, sizeof row->source))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "template %s: unterminated source", row->name);

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st,
                   "INSERT INTO templates (name, source, created_ms, size_bytes) VALUES (?1, ?2, ?3, ?4)"
                   " ON CONFLICT (name) DO UPDATE SET source = excluded.source,"
                   " created_ms = excluded.created_ms, size_bytes = excluded.size_bytes",
                   err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, row->name, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, row->source, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(st, 3, row->created_ms) != SQLITE_OK ||
        sqlite3_bind_int64(st, 4, row->size_bytes) != SQLITE_OK)
        return sq_fail(s->db, err, "bind template");
    return sq_step_done(s->db, st, "put template", err);
}

int fb_store_template_get(fb_store *s, const char *name, struct fb_template_row *out, fb_error_t *err)
{
    memset(out, 0, sizeof(*out));
    if (!sq_fits(name, FB_NAME_MAX))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "template not found");

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st, "SELECT name, source, created_ms, size_bytes FROM templates WHERE name = ?1",
                   err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC) != SQLITE_OK)
        return sq_fail(s->db, err, "bind template");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "template %s not found", name);
    if (rc != SQLITE_ROW)
        return sq_fail(s->db, err, "get template");
    return template_load(s->db, st, out, err);
}

int fb_store_template_list(fb_store *s, struct fb_template_row **rows, size_t *n, fb_error_t *err)
{
    *rows = NULL;
    *n = 0;

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_free struct fb_template_row *v = NULL;
    size_t len = 0, cap = 0;
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st, "SELECT name, source, created_ms, size_bytes FROM templates ORDER BY name",
                   err) < 0)
        return -1;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct fb_template_row *nv = sq_grow(v, &cap, len, sizeof(*v));
        if (nv == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "store: list templates");
        v = nv;
        memset(&v[len], 0, sizeof(v[len]));
        if (template_load(s->db, st, &v[len], err) < 0)
            return -1;
        len++;
    }
    if (rc != SQLITE_DONE)
        return sq_fail(s->db, err, "list templates");
    *rows = fb_steal_ptr(v);
    *n = len;
    return 0;
}

int fb_store_template_delete(fb_store *s, const char *name, fb_error_t *err)
{
    if (!sq_fits(name, FB_NAME_MAX))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "template not found");

    bool gone = false;
    if (sq_delete_where(s, "DELETE FROM templates WHERE name = ?1", name, &gone, err) < 0)
        return fb_error_wrap(err, "template %s", name);
    if (!gone)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "template %s not found", name);
    return 0;
}
