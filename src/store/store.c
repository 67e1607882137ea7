#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/cleanup.h"
#include "../common/util.h"

struct fb_store {
    /* FULLMUTEX only serialises single sqlite calls; this one makes each
     * store call (prepare, bind, step, read, errmsg) one atomic unit. */
    pthread_mutex_t mu;
    sqlite3 *db;
};

/* ---- scope cleanup for sqlite objects and the store lock ----------------- */

static void stmt_finalizep(sqlite3_stmt **st)
{
    if (*st != NULL)
        sqlite3_finalize(*st);
    *st = NULL;
}
#define cleanup_stmt __attribute__((cleanup(stmt_finalizep)))

static void db_closep(sqlite3 **db)
{
    if (*db != NULL)
        sqlite3_close(*db);
    *db = NULL;
}
#define cleanup_db __attribute__((cleanup(db_closep)))

static pthread_mutex_t *store_lock(fb_store *s)
{
    /* Only fails for a corrupted or uninitialised mutex; carrying on
     * unlocked would silently break every caller's assumptions. */
    if (pthread_mutex_lock(&s->mu) != 0)
        abort();
    return &s->mu;
}

static void unlockp(pthread_mutex_t **mu)
{
    if (*mu != NULL)
        pthread_mutex_unlock(*mu);
    *mu = NULL;
}
/* Declare before any cleanup_stmt local so statements die under the lock.
 * The guard is never read, which clang would otherwise report. */
#define cleanup_unlock __attribute__((cleanup(unlockp), unused))

/* ---- error mapping ------------------------------------------------------- */

static int sql_fail(sqlite3 *db, fb_error_t *err, const char *what)
{
    return fb_error_set(err, FB_ERR_INTERNAL, 0, "store: %s: %s", what, sqlite3_errmsg(db));
}

static bool is_constraint(int rc)
{
    return (rc & 0xff) == SQLITE_CONSTRAINT;
}

static int prepare(sqlite3 *db, sqlite3_stmt **st, const char *sql, fb_error_t *err)
{
    if (sqlite3_prepare_v2(db, sql, -1, st, NULL) != SQLITE_OK)
        return sql_fail(db, err, "prepare");
    return 0;
}

/* Steps a statement that returns no rows (or whose rows do not matter). */
static int step_done(sqlite3 *db, sqlite3_stmt *st, const char *what, fb_error_t *err)
{
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        ;
    if (rc != SQLITE_DONE)
        return sql_fail(db, err, what);
    return 0;
}

/* Runs constant SQL, possibly several statements.  Only for text compiled
 * into this file: nothing here is ever built from input. */
static int exec_const(sqlite3 *db, const char *sql, fb_error_t *err)
{
    while (*sql != '\0') {
        cleanup_stmt sqlite3_stmt *st = NULL;
        const char *tail = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &st, &tail) != SQLITE_OK)
            return sql_fail(db, err, "prepare");
        if (st == NULL) /* only whitespace or comments were left */
            break;
        if (step_done(db, st, "exec", err) < 0)
            return -1;
        sql = tail;
    }
    return 0;
}

/* ---- small helpers --------------------------------------------------------- */

static bool fits(const char *s, size_t max)
{
    return s != NULL && strnlen(s, max) < max;
}

static int col_unreadable(sqlite3 *db, sqlite3_stmt *st, int col, fb_error_t *err)
{
    /* errmsg only means something when sqlite itself failed (out of memory). */
    if (sqlite3_errcode(db) == SQLITE_NOMEM)
        return sql_fail(db, err, "read column");
    return fb_error_set(err, FB_ERR_INTERNAL, 0, "store: column %s is NULL", sqlite3_column_name(st, col));
}

/* Copies a text column into a fixed buffer.  A NULL or overlong value can
 * only come from a damaged database or an allocation failure inside sqlite. */
static int col_copy(sqlite3 *db, sqlite3_stmt *st, int col, char *dst, size_t len, fb_error_t *err)
{
    const unsigned char *v = sqlite3_column_text(st, col);
    if (v == NULL)
        return col_unreadable(db, st, col, err);
    if (fb_strlcpy(dst, (const char *)v, len) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "store: column %s longer than %zu bytes",
                            sqlite3_column_name(st, col), len - 1);
    return 0;
}

static int col_dup(sqlite3 *db, sqlite3_stmt *st, int col, char **out, fb_error_t *err)
{
    const unsigned char *v = sqlite3_column_text(st, col);
    if (v == NULL)
        return col_unreadable(db, st, col, err);
    size_t n = (size_t)sqlite3_column_bytes(st, col);
    char *copy = malloc(n + 1);
    if (copy == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "store: copy column");
    memcpy(copy, v, n);
    copy[n] = '\0';
    *out = copy;
    return 0;
}

/* Grows a caller-held array so that index n is valid; the old array stays
 * valid (and owned by the caller) when this fails. */
static void *grow(void *arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return arr;
    size_t ncap = *cap == 0 ? 16 : *cap * 2;
    void *na = reallocarray(arr, ncap, elem);
    if (na != NULL)
        *cap = ncap;
    return na;
}

static int key_hash(const char *key, char hex[65], fb_error_t *err)
{
    unsigned char digest[32];
    int r = gnutls_hash_fast(GNUTLS_DIG_SHA256, key, strlen(key), digest);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "store: hash key: %s", gnutls_strerror(r));
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof digest; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 0x0f];
    }
    hex[64] = '\0';
    return 0;
}

/* ---- schema -------------------------------------------------------------- */

/* migrations[i] moves the schema from version i to i+1 and must end by
 * setting user_version to i+1 (checked after it runs).  Never edit an entry
 * that has shipped: append a new one. */
static const char *const migrations[] = {
    /* 1: initial schema.  sandboxes.tenant_id has no foreign key on purpose:
     * a row must stay loadable (and reapable) whatever happens to tenants. */
    "CREATE TABLE tenants (id TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL, created_ms INTEGER NOT NULL);"
    "CREATE TABLE api_keys (key_sha256 TEXT PRIMARY KEY NOT NULL,"
    "  tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE, created_ms INTEGER NOT NULL);"
    "CREATE INDEX api_keys_tenant ON api_keys(tenant_id);"
    "CREATE TABLE sandboxes (id TEXT PRIMARY KEY NOT NULL, tenant_id TEXT NOT NULL, state TEXT NOT NULL,"
    "  template TEXT NOT NULL, created_ms INTEGER NOT NULL, expires_ms INTEGER,"
    "  init_pid INTEGER NOT NULL DEFAULT 0, uid_base INTEGER NOT NULL, spec_json TEXT NOT NULL);"
    "CREATE INDEX sandboxes_tenant ON sandboxes(tenant_id);"
    "CREATE INDEX sandboxes_expires ON sandboxes(expires_ms);"
    "CREATE TABLE templates (name TEXT PRIMARY KEY NOT NULL, source TEXT NOT NULL,"
    "  created_ms INTEGER NOT NULL, size_bytes INTEGER NOT NULL);"
    "PRAGMA user_version = 1;",
};
#define SCHEMA_VERSION ((int64_t)(sizeof migrations / sizeof migrations[0]))

/* Runs constant SQL whose answer is one integer. */
static int query_int(sqlite3 *db, const char *sql, int64_t *out, fb_error_t *err)
{
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (prepare(db, &st, sql, err) < 0)
        return -1;
    if (sqlite3_step(st) != SQLITE_ROW)
        return sql_fail(db, err, sql);
    *out = sqlite3_column_int64(st, 0);
    return step_done(db, st, sql, err);
}

struct txn {
    sqlite3 *db;
    bool open;
};

static void txn_abortp(struct txn *t)
{
    if (t->open)
        exec_const(t->db, "ROLLBACK", NULL);
    t->open = false;
}
#define cleanup_txn __attribute__((cleanup(txn_abortp)))

static int migrate(sqlite3 *db, fb_error_t *err)
{
    /* IMMEDIATE: two processes opening a fresh file must not both run the
     * same migration; the loser waits (busy_timeout) and then sees it done. */
    if (exec_const(db, "BEGIN IMMEDIATE", err) < 0)
        return fb_error_wrap(err, "begin migration");
    cleanup_txn struct txn tx = {.db = db, .open = true};

    int64_t v;
    if (query_int(db, "PRAGMA user_version", &v, err) < 0)
        return -1;
    if (v < 0 || v > SCHEMA_VERSION)
        return fb_error_set(err, FB_ERR_INTERNAL, 0,
                            "store: schema version %lld is not one this forkbox knows (latest %lld)",
                            (long long)v, (long long)SCHEMA_VERSION);
    for (; v < SCHEMA_VERSION; v++) {
        if (exec_const(db, migrations[v], err) < 0)
            return fb_error_wrap(err, "migrate to version %lld", (long long)v + 1);
        int64_t now;
        if (query_int(db, "PRAGMA user_version", &now, err) < 0)
            return -1;
        if (now != v + 1)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "store: migration %lld left user_version at %lld",
                                (long long)v + 1, (long long)now);
    }
    if (exec_const(db, "COMMIT", err) < 0)
        return fb_error_wrap(err, "commit migration");
    tx.open = false;
    return 0;
}

/* ---- open / close -------------------------------------------------------- */

/* sqlite creates missing files with 0644 (less umask); create it first so
 * key hashes and specs are never readable by others, even briefly.  The
 * -wal and -shm files inherit the database file's mode. */
static int create_private(const char *path, fb_error_t *err)
{
    cleanup_close int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return fb_error_sys(err, "store: open %s", path);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return fb_error_sys(err, "store: stat %s", path);
    if (!S_ISREG(st.st_mode))
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "store: %s is not a regular file", path);
    if ((st.st_mode & 07777) != 0600 && fchmod(fd, 0600) < 0)
        return fb_error_sys(err, "store: chmod %s", path);
    return 0;
}

static int configure(sqlite3 *db, fb_error_t *err)
{
    if (sqlite3_extended_result_codes(db, 1) != SQLITE_OK || sqlite3_busy_timeout(db, 5000) != SQLITE_OK)
        return sql_fail(db, err, "configure");
    /* journal_mode answers with the mode it ended up in rather than failing. */
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (prepare(db, &st, "PRAGMA journal_mode = WAL", err) < 0)
        return -1;
    if (sqlite3_step(st) != SQLITE_ROW)
        return sql_fail(db, err, "set journal_mode");
    const unsigned char *mode = sqlite3_column_text(st, 0);
    if (mode == NULL || strcmp((const char *)mode, "wal") != 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "store: journal_mode is %s, not wal",
                            mode != NULL ? (const char *)mode : "unknown");
    if (step_done(db, st, "set journal_mode", err) < 0)
        return -1;
    if (exec_const(db, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;", err) < 0)
        return -1;
    /* foreign_keys is silently ignored by builds without FK support. */
    int64_t fk = 0;
    if (query_int(db, "PRAGMA foreign_keys", &fk, err) < 0)
        return -1;
    if (fk != 1)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "store: foreign keys cannot be enabled");
    return 0;
}

int fb_store_open(const char *path, fb_store **out, fb_error_t *err)
{
    if (create_private(path, err) < 0)
        return -1;

    cleanup_db sqlite3 *db = NULL;
    int rc =
        sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "store: open %s: %s", path,
                            db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    if (configure(db, err) < 0 || migrate(db, err) < 0)
        return fb_error_wrap(err, "store %s", path);

    cleanup_free fb_store *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "store: allocate");
    int r = pthread_mutex_init(&s->mu, NULL);
    if (r != 0)
        return fb_error_set(err, FB_ERR_INTERNAL, r, "store: mutex");
    s->db = fb_steal_ptr(db);
    *out = fb_steal_ptr(s);
    return 0;
}

void fb_store_close(fb_store *s)
{
    if (s == NULL)
        return;
    /* Every statement is finalised before its call returns, so close cannot
     * be left pending; the last close also checkpoints the WAL. */
    sqlite3_close(s->db);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Deletes the rows matching one bound key; *gone says whether any did. */
static int delete_where(fb_store *s, const char *sql, const char *key, bool *gone, fb_error_t *err)
{
    cleanup_unlock pthread_mutex_t *lock = store_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (prepare(s->db, &st, sql, err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC) != SQLITE_OK)
        return sql_fail(s->db, err, "bind key");
    if (step_done(s->db, st, "delete", err) < 0)
        return -1;
    *gone = sqlite3_changes(s->db) > 0;
    return 0;
}

/* ---- tenants and API keys -------------------------------------------------- */

int fb_store_tenant_ensure(fb_store *s, const char *tenant_id, const char *name, fb_error_t *err)
{
    if (!fits(tenant_id, FB_ID_MAX) || tenant_id[0] == '\0')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "tenant id must be 1..%d bytes", FB_ID_MAX - 1);
    if (!fits(name, FB_NAME_MAX))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "tenant name must be at most %d bytes",
                            FB_NAME_MAX - 1);

    cleanup_unlock pthread_mutex_t *lock = store_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (prepare(s->db, &st,
                "INSERT INTO tenants (id, name, created_ms) VALUES (?1, ?2, ?3)"
                " ON CONFLICT (id) DO NOTHING",
                err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, tenant_id, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(st, 3, fb_now_ms()) != SQLITE_OK)
        return sql_fail(s->db, err, "bind tenant");
    return step_done(s->db, st, "insert tenant", err);
}

int fb_store_key_add(fb_store *s, const char *tenant_id, const char *key, fb_error_t *err)
{
    if (key == NULL || key[0] == '\0' || !fits(key, FB_KEY_MAX + 1))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "api key must be 1..%d bytes", FB_KEY_MAX);
    if (!fits(tenant_id, FB_ID_MAX))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "tenant not found");
    char hash[65];
    if (key_hash(key, hash, err) < 0)
        return -1;

    cleanup_unlock pthread_mutex_t *lock = store_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (prepare(s->db, &st, "INSERT INTO api_keys (key_sha256, tenant_id, created_ms) VALUES (?1, ?2, ?3)",
                err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, tenant_id, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(st, 3, fb_now_ms()) != SQLITE_OK)
        return sql_fail(s->db, err, "bind api key");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_CONSTRAINT_FOREIGNKEY)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "tenant %s not found", tenant_id);
    if (is_constraint(rc))
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "api key already exists");
    if (rc != SQLITE_DONE)
        return sql_fail(s->db, err, "insert api key");
    return 0;
}

int fb_store_key_lookup(fb_store *s, const char *key, char *tenant_out, fb_error_t *err)
{
    /* The message is the same for every miss so it says nothing about why. */
    if (key == NULL || key[0] == '\0' || !fits(key, FB_KEY_MAX + 1))
        return fb_error_set(err, FB_ERR_UNAUTHORIZED, 0, "missing or wrong api key");
    char hash[65];
    if (key_hash(key, hash, err) < 0)
        return -1;

    cleanup_unlock pthread_mutex_t *lock = store_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (prepare(s->db, &st, "SELECT tenant_id FROM api_keys WHERE key_sha256 = ?1", err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC) != SQLITE_OK)
        return sql_fail(s->db, err, "bind api key");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return fb_error_set(err, FB_ERR_UNAUTHORIZED, 0, "missing or wrong api key");
    if (rc != SQLITE_ROW)
        return sql_fail(s->db, err, "look up api key");
    return col_copy(s->db, st, 0, tenant_out, FB_ID_MAX, err);
}

int fb_store_key_count(fb_store *s, int64_t *count, fb_error_t *err)
{
    cleanup_unlock pthread_mutex_t *lock = store_lock(s);
    return query_int(s->db, "SELECT count(*) FROM api_keys", count, err);
}

/* ---- sandboxes --------------------------------------------------------- */

#define SANDBOX_COLS "id, tenant_id, state, template, created_ms, expires_ms, init_pid, uid_base, spec_json"

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
    if (!fits(row->id, sizeof row->id) || row->id[0] == '\0')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "sandbox id must be 1..%zu bytes",
                            sizeof row->id - 1);
    if (!fits(row->tenant, sizeof row->tenant) || !fits(row->state, sizeof row->state) ||
        !fits(row->template_name, sizeof row->template_name))
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
    if (col_copy(db, st, 0, out->id, sizeof out->id, err) < 0 ||
        col_copy(db, st, 1, out->tenant, sizeof out->tenant, err) < 0 ||
        col_copy(db, st, 2, out->state, sizeof out->state, err) < 0 ||
        col_copy(db, st, 3, out->template_name, sizeof out->template_name, err) < 0)
        return -1;
    out->created_ms = sqlite3_column_int64(st, 4);
    out->expires_ms = sqlite3_column_type(st, 5) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 5);
    out->init_pid = sqlite3_column_int64(st, 6);
    out->uid_base = sqlite3_column_int64(st, 7);
    return col_dup(db, st, 8, &out->spec_json, err);
}

int fb_store_sandbox_insert(fb_store *s, const struct fb_sandbox_row *row, fb_error_t *err)
{
    if (sandbox_row_check(row, err) < 0)
        return -1;

    cleanup_unlock pthread_mutex_t *lock = store_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (prepare(s->db, &st,
                "INSERT INTO sandboxes (" SANDBOX_COLS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
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
        sqlite3_bind_text(st, 9, row->spec_json, -1, SQLITE_STATIC) != SQLITE_OK)
        return sql_fail(s->db, err, "bind sandbox");
    int rc = sqlite3_step(st);
    if (is_constraint(rc))
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "sandbox %s already exists", row->id);
    if (rc != SQLITE_DONE)
        return sql_fail(s->db, err, "insert sandbox");
    return 0;
}

int fb_store_sandbox_update(fb_store *s, const struct fb_sandbox_row *row, fb_error_t *err)
{
    if (sandbox_row_check(row, err) < 0)
        return -1;

    cleanup_unlock pthread_mutex_t *lock = store_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (prepare(s->db, &st,
                "UPDATE sandboxes SET state = ?2, expires_ms = ?3, init_pid = ?4, spec_json = ?5,"
                " tenant_id = ?6, created_ms = ?7 WHERE id = ?1",
                err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, row->id, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, row->state, -1, SQLITE_STATIC) != SQLITE_OK ||
        bind_expires(st, 3, row->expires_ms) != SQLITE_OK ||
        sqlite3_bind_int64(st, 4, row->init_pid) != SQLITE_OK ||
        sqlite3_bind_text(st, 5, row->spec_json, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 6, row->tenant, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(st, 7, row->created_ms) != SQLITE_OK)
        return sql_fail(s->db, err, "bind sandbox");
    if (step_done(s->db, st, "update sandbox", err) < 0)
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
    if (!fits(id, FB_ID_MAX))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "sandbox not found");
    if (tenant != NULL && !fits(tenant, FB_ID_MAX))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "sandbox %s not found", id);

    cleanup_unlock pthread_mutex_t *lock = store_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    /* Another tenant's row reads exactly like a missing one, so ids of other
     * tenants cannot be probed. */
    if (prepare(s->db, &st,
                "SELECT " SANDBOX_COLS " FROM sandboxes WHERE id = ?1 AND (?2 IS NULL OR tenant_id = ?2)",
                err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC) != SQLITE_OK ||
        bind_opt_text(st, 2, tenant) != SQLITE_OK)
        return sql_fail(s->db, err, "bind sandbox");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "sandbox %s not found", id);
    if (rc != SQLITE_ROW)
        return sql_fail(s->db, err, "get sandbox");
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
    if (tenant != NULL && !fits(tenant, FB_ID_MAX))
        return 0;

    cleanup_unlock pthread_mutex_t *lock = store_lock(s);
    cleanup_sandbox_vec struct sandbox_vec vec = {0};
    cleanup_stmt sqlite3_stmt *st = NULL;
    /* rowid breaks ties between rows created in the same millisecond. */
    if (prepare(s->db, &st,
                "SELECT " SANDBOX_COLS " FROM sandboxes WHERE ?1 IS NULL OR tenant_id = ?1"
                " ORDER BY created_ms, rowid",
                err) < 0)
        return -1;
    if (bind_opt_text(st, 1, tenant) != SQLITE_OK)
        return sql_fail(s->db, err, "bind tenant");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct fb_sandbox_row *nv = grow(vec.v, &vec.cap, vec.n, sizeof(*vec.v));
        if (nv == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "store: list sandboxes");
        vec.v = nv;
        memset(&vec.v[vec.n], 0, sizeof(vec.v[vec.n]));
        vec.n++; /* counted before loading so a partial row is freed too */
        if (sandbox_load(s->db, st, &vec.v[vec.n - 1], err) < 0)
            return -1;
    }
    if (rc != SQLITE_DONE)
        return sql_fail(s->db, err, "list sandboxes");
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

    cleanup_unlock pthread_mutex_t *lock = store_lock(s);
    cleanup_id_vec struct id_vec vec = {0};
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (prepare(s->db, &st,
                "SELECT id FROM sandboxes WHERE expires_ms IS NOT NULL AND expires_ms <= ?1"
                " ORDER BY created_ms, rowid",
                err) < 0)
        return -1;
    if (sqlite3_bind_int64(st, 1, now_ms) != SQLITE_OK)
        return sql_fail(s->db, err, "bind time");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        char **nv = grow(vec.v, &vec.cap, vec.n, sizeof(*vec.v));
        if (nv == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "store: expired sandboxes");
        vec.v = nv;
        if (col_dup(s->db, st, 0, &vec.v[vec.n], err) < 0)
            return -1;
        vec.n++;
    }
    if (rc != SQLITE_DONE)
        return sql_fail(s->db, err, "expired sandboxes");
    *ids = vec.v;
    *n = vec.n;
    vec = (struct id_vec){0};
    return 0;
}

int fb_store_sandbox_delete(fb_store *s, const char *id, fb_error_t *err)
{
    if (!fits(id, FB_ID_MAX))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "sandbox not found");

    bool gone = false;
    if (delete_where(s, "DELETE FROM sandboxes WHERE id = ?1", id, &gone, err) < 0)
        return fb_error_wrap(err, "sandbox %s", id);
    if (!gone)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "sandbox %s not found", id);
    return 0;
}

int fb_store_sandbox_uid_bases(fb_store *s, int64_t **bases, size_t *n, fb_error_t *err)
{
    *bases = NULL;
    *n = 0;

    cleanup_unlock pthread_mutex_t *lock = store_lock(s);
    cleanup_free int64_t *v = NULL;
    size_t len = 0, cap = 0;
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (prepare(s->db, &st, "SELECT uid_base FROM sandboxes ORDER BY uid_base", err) < 0)
        return -1;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t *nv = grow(v, &cap, len, sizeof(*v));
        if (nv == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "store: uid bases");
        v = nv;
        v[len++] = sqlite3_column_int64(st, 0);
    }
    if (rc != SQLITE_DONE)
        return sql_fail(s->db, err, "uid bases");
    *bases = fb_steal_ptr(v);
    *n = len;
    return 0;
}

/* ---- templates --------------------------------------------------------- */

static int template_load(sqlite3 *db, sqlite3_stmt *st, struct fb_template_row *out, fb_error_t *err)
{
    if (col_copy(db, st, 0, out->name, sizeof out->name, err) < 0 ||
        col_copy(db, st, 1, out->source, sizeof out->source, err) < 0)
        return -1;
    out->created_ms = sqlite3_column_int64(st, 2);
    out->size_bytes = sqlite3_column_int64(st, 3);
    return 0;
}

int fb_store_template_put(fb_store *s, const struct fb_template_row *row, fb_error_t *err)
{
    if (!fits(row->name, sizeof row->name) || row->name[0] == '\0')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "template name must be 1..%zu bytes",
                            sizeof row->name - 1);
    if (!fits(row->source, sizeof row->source))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "template %s: unterminated source", row->name);

    cleanup_unlock pthread_mutex_t *lock = store_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (prepare(s->db, &st,
                "INSERT INTO templates (name, source, created_ms, size_bytes) VALUES (?1, ?2, ?3, ?4)"
                " ON CONFLICT (name) DO UPDATE SET source = excluded.source,"
                " created_ms = excluded.created_ms, size_bytes = excluded.size_bytes",
                err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, row->name, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, row->source, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(st, 3, row->created_ms) != SQLITE_OK ||
        sqlite3_bind_int64(st, 4, row->size_bytes) != SQLITE_OK)
        return sql_fail(s->db, err, "bind template");
    return step_done(s->db, st, "put template", err);
}

int fb_store_template_get(fb_store *s, const char *name, struct fb_template_row *out, fb_error_t *err)
{
    memset(out, 0, sizeof(*out));
    if (!fits(name, FB_NAME_MAX))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "template not found");

    cleanup_unlock pthread_mutex_t *lock = store_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (prepare(s->db, &st, "SELECT name, source, created_ms, size_bytes FROM templates WHERE name = ?1",
                err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC) != SQLITE_OK)
        return sql_fail(s->db, err, "bind template");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "template %s not found", name);
    if (rc != SQLITE_ROW)
        return sql_fail(s->db, err, "get template");
    return template_load(s->db, st, out, err);
}

int fb_store_template_list(fb_store *s, struct fb_template_row **rows, size_t *n, fb_error_t *err)
{
    *rows = NULL;
    *n = 0;

    cleanup_unlock pthread_mutex_t *lock = store_lock(s);
    cleanup_free struct fb_template_row *v = NULL;
    size_t len = 0, cap = 0;
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (prepare(s->db, &st, "SELECT name, source, created_ms, size_bytes FROM templates ORDER BY name", err) <
        0)
        return -1;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct fb_template_row *nv = grow(v, &cap, len, sizeof(*v));
        if (nv == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "store: list templates");
        v = nv;
        memset(&v[len], 0, sizeof(v[len]));
        if (template_load(s->db, st, &v[len], err) < 0)
            return -1;
        len++;
    }
    if (rc != SQLITE_DONE)
        return sql_fail(s->db, err, "list templates");
    *rows = fb_steal_ptr(v);
    *n = len;
    return 0;
}

int fb_store_template_delete(fb_store *s, const char *name, fb_error_t *err)
{
    if (!fits(name, FB_NAME_MAX))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "template not found");

    bool gone = false;
    if (delete_where(s, "DELETE FROM templates WHERE name = ?1", name, &gone, err) < 0)
        return fb_error_wrap(err, "template %s", name);
    if (!gone)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "template %s not found", name);
    return 0;
}
