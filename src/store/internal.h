/* Shared by the store's own files: the handle and SQLite helpers. */
#ifndef FB_STORE_INTERNAL_H
#define FB_STORE_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>

#include "store.h"

struct fb_store {
    /* FULLMUTEX only serialises single sqlite calls; this one makes each
     * store call (sq_prepare, bind, step, read, errmsg) one atomic unit. */
    pthread_mutex_t mu;
    sqlite3 *db;
};

/* Helpers: each returns 0 or -1 with *err set (or the value named). The
 * store's mutex guards every use of the connection (see sq_lock). */
void sq_stmt_finalizep(sqlite3_stmt **st);
pthread_mutex_t *sq_lock(fb_store *s);
void sq_unlockp(pthread_mutex_t **mu);
int sq_fail(sqlite3 *db, fb_error_t *err, const char *what);
bool sq_is_constraint(int rc);
int sq_prepare(sqlite3 *db, sqlite3_stmt **st, const char *sql, fb_error_t *err);
int sq_step_done(sqlite3 *db, sqlite3_stmt *st, const char *what, fb_error_t *err);
bool sq_fits(const char *s, size_t max);
int sq_col_unreadable(sqlite3 *db, sqlite3_stmt *st, int col, fb_error_t *err);
int sq_col_copy(sqlite3 *db, sqlite3_stmt *st, int col, char *dst, size_t len, fb_error_t *err);
int sq_col_dup(sqlite3 *db, sqlite3_stmt *st, int col, char **out, fb_error_t *err);
void *sq_grow(void *arr, size_t *cap, size_t n, size_t elem);
int sq_delete_where(fb_store *s, const char *sql, const char *key, bool *gone, fb_error_t *err);

#define cleanup_stmt __attribute__((cleanup(sq_stmt_finalizep)))
#define cleanup_unlock __attribute__((cleanup(sq_unlockp), unused))

#endif
