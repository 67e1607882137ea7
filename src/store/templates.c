/* Template, layer and build-cache rows. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cleanup.h"
#include "../common/util.h"
#include "internal.h"

#define TEMPLATE_COLS "name, source, created_ms, size_bytes, base, layers, config"

void fb_template_row_clear(struct fb_template_row *row)
{
    if (row == NULL)
        return;
    free(row->layers_json);
    free(row->config_json);
    memset(row, 0, sizeof(*row));
}

void fb_template_rows_free(struct fb_template_row *rows, size_t n)
{
    if (rows == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        fb_template_row_clear(&rows[i]);
    free(rows);
}

static int template_load(sqlite3 *db, sqlite3_stmt *st, struct fb_template_row *out, fb_error_t *err)
{
    if (sq_col_copy(db, st, 0, out->name, sizeof out->name, err) < 0 ||
        sq_col_copy(db, st, 1, out->source, sizeof out->source, err) < 0 ||
        sq_col_copy(db, st, 4, out->base, sizeof out->base, err) < 0 ||
        sq_col_dup(db, st, 5, &out->layers_json, err) < 0 ||
        sq_col_dup(db, st, 6, &out->config_json, err) < 0)
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
    if (!sq_fits(row->source, sizeof row->source) || !sq_fits(row->base, sizeof row->base))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "template %s: unterminated source or base",
                            row->name);

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st,
                   "INSERT INTO templates (" TEMPLATE_COLS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                   " ON CONFLICT (name) DO UPDATE SET source = excluded.source,"
                   " created_ms = excluded.created_ms, size_bytes = excluded.size_bytes,"
                   " base = excluded.base, layers = excluded.layers, config = excluded.config",
                   err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, row->name, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, row->source, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(st, 3, row->created_ms) != SQLITE_OK ||
        sqlite3_bind_int64(st, 4, row->size_bytes) != SQLITE_OK ||
        sqlite3_bind_text(st, 5, row->base, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 6, row->layers_json ? row->layers_json : "[]", -1, SQLITE_STATIC) !=
            SQLITE_OK ||
        sqlite3_bind_text(st, 7, row->config_json ? row->config_json : "{}", -1, SQLITE_STATIC) != SQLITE_OK)
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
    if (sq_prepare(s->db, &st, "SELECT " TEMPLATE_COLS " FROM templates WHERE name = ?1", err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC) != SQLITE_OK)
        return sq_fail(s->db, err, "bind template");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "template %s not found", name);
    if (rc != SQLITE_ROW)
        return sq_fail(s->db, err, "get template");
    if (template_load(s->db, st, out, err) < 0) {
        fb_template_row_clear(out);
        return -1;
    }
    return 0;
}

int fb_store_template_list(fb_store *s, struct fb_template_row **rows, size_t *n, fb_error_t *err)
{
    *rows = NULL;
    *n = 0;

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    struct fb_template_row *v = NULL;
    size_t len = 0, cap = 0;
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st, "SELECT " TEMPLATE_COLS " FROM templates ORDER BY name", err) < 0)
        return -1;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct fb_template_row *nv = sq_grow(v, &cap, len, sizeof(*v));
        if (nv == NULL) {
            fb_template_rows_free(v, len);
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "store: list templates");
        }
        v = nv;
        memset(&v[len], 0, sizeof(v[len]));
        if (template_load(s->db, st, &v[len], err) < 0) {
            fb_template_rows_free(v, len + 1);
            return -1;
        }
        len++;
    }
    if (rc != SQLITE_DONE) {
        fb_template_rows_free(v, len);
        return sq_fail(s->db, err, "list templates");
    }
    *rows = v;
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

/* ---- layers --------------------------------------------------------------- */

int fb_store_layer_put(fb_store *s, const struct fb_layer_row *row, fb_error_t *err)
{
    if (!sq_fits(row->digest, sizeof row->digest) || row->digest[0] == '\0')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "layer digest too long");
    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st,
                   "INSERT INTO layers (digest, size_bytes, created_ms) VALUES (?1, ?2, ?3)"
                   " ON CONFLICT (digest) DO NOTHING",
                   err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, row->digest, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(st, 2, row->size_bytes) != SQLITE_OK ||
        sqlite3_bind_int64(st, 3, row->created_ms) != SQLITE_OK)
        return sq_fail(s->db, err, "bind layer");
    return sq_step_done(s->db, st, "put layer", err);
}

static int layer_load(sqlite3 *db, sqlite3_stmt *st, struct fb_layer_row *out, fb_error_t *err)
{
    if (sq_col_copy(db, st, 0, out->digest, sizeof out->digest, err) < 0)
        return -1;
    out->size_bytes = sqlite3_column_int64(st, 1);
    out->created_ms = sqlite3_column_int64(st, 2);
    return 0;
}

int fb_store_layer_get(fb_store *s, const char *digest, struct fb_layer_row *out, fb_error_t *err)
{
    memset(out, 0, sizeof(*out));
    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st, "SELECT digest, size_bytes, created_ms FROM layers WHERE digest = ?1", err) <
        0)
        return -1;
    if (sqlite3_bind_text(st, 1, digest, -1, SQLITE_STATIC) != SQLITE_OK)
        return sq_fail(s->db, err, "bind layer");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "layer %s not found", digest);
    if (rc != SQLITE_ROW)
        return sq_fail(s->db, err, "get layer");
    return layer_load(s->db, st, out, err);
}

int fb_store_layer_list(fb_store *s, struct fb_layer_row **rows, size_t *n, fb_error_t *err)
{
    *rows = NULL;
    *n = 0;
    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_free struct fb_layer_row *v = NULL;
    size_t len = 0, cap = 0;
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st, "SELECT digest, size_bytes, created_ms FROM layers ORDER BY digest", err) < 0)
        return -1;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct fb_layer_row *nv = sq_grow(v, &cap, len, sizeof(*v));
        if (nv == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "store: list layers");
        v = nv;
        memset(&v[len], 0, sizeof(v[len]));
        if (layer_load(s->db, st, &v[len], err) < 0)
            return -1;
        len++;
    }
    if (rc != SQLITE_DONE)
        return sq_fail(s->db, err, "list layers");
    *rows = fb_steal_ptr(v);
    *n = len;
    return 0;
}

int fb_store_layer_delete(fb_store *s, const char *digest, fb_error_t *err)
{
    bool gone = false;
    if (sq_delete_where(s, "DELETE FROM build_cache WHERE layer = ?1", digest, &gone, err) < 0 ||
        sq_delete_where(s, "DELETE FROM layers WHERE digest = ?1", digest, &gone, err) < 0)
        return fb_error_wrap(err, "layer %s", digest);
    return 0;
}

/* ---- build cache ---------------------------------------------------------- */

int fb_store_build_cache_put(fb_store *s, const char *key, const char *layer, fb_error_t *err)
{
    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(
            s->db, &st,
            "INSERT INTO build_cache (key, layer, created_ms) VALUES (?1, ?2, ?3)"
            " ON CONFLICT (key) DO UPDATE SET layer = excluded.layer, created_ms = excluded.created_ms",
            err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, layer, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(st, 3, fb_now_ms()) != SQLITE_OK)
        return sq_fail(s->db, err, "bind build cache");
    return sq_step_done(s->db, st, "put build cache", err);
}

int fb_store_build_cache_get(fb_store *s, const char *key, char *layer, size_t len, fb_error_t *err)
{
    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st, "SELECT layer FROM build_cache WHERE key = ?1", err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC) != SQLITE_OK)
        return sq_fail(s->db, err, "bind build cache");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "no cached step");
    if (rc != SQLITE_ROW)
        return sq_fail(s->db, err, "get build cache");
    return sq_col_copy(s->db, st, 0, layer, len, err);
}
