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
#include "internal.h"

#define cleanup_db __attribute__((cleanup(sq_db_closep)))

/* ---- scope cleanup for sqlite objects and the store lock ----------------- */

void sq_stmt_finalizep(sqlite3_stmt **st)
{
    if (*st != NULL)
        sqlite3_finalize(*st);
    *st = NULL;
}

static void sq_db_closep(sqlite3 **db)
{
    if (*db != NULL)
        sqlite3_close(*db);
    *db = NULL;
}

pthread_mutex_t *sq_lock(fb_store *s)
{
    /* Only fails for a corrupted or uninitialised mutex; carrying on
     * unlocked would silently break every caller's assumptions. */
    if (pthread_mutex_lock(&s->mu) != 0)
        abort();
    return &s->mu;
}

void sq_unlockp(pthread_mutex_t **mu)
{
    if (*mu != NULL)
        pthread_mutex_unlock(*mu);
    *mu = NULL;
}
/* Declare before any cleanup_stmt local so statements die under the lock.
 * The guard is never read, which clang would otherwise report. */

/* ---- error mapping ------------------------------------------------------- */

int sq_fail(sqlite3 *db, fb_error_t *err, const char *what)
{
    return fb_error_set(err, FB_ERR_INTERNAL, 0, "store: %s: %s", what, sqlite3_errmsg(db));
}

bool sq_is_constraint(int rc)
{
    return (rc & 0xff) == SQLITE_CONSTRAINT;
}

int sq_prepare(sqlite3 *db, sqlite3_stmt **st, const char *sql, fb_error_t *err)
{
    if (sqlite3_prepare_v2(db, sql, -1, st, NULL) != SQLITE_OK)
        return sq_fail(db, err, "sq_prepare");
    return 0;
}

/* Steps a statement that returns no rows (or whose rows do not matter). */
int sq_step_done(sqlite3 *db, sqlite3_stmt *st, const char *what, fb_error_t *err)
{
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        ;
    if (rc != SQLITE_DONE)
        return sq_fail(db, err, what);
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
            return sq_fail(db, err, "sq_prepare");
        if (st == NULL) /* only whitespace or comments were left */
            break;
        if (sq_step_done(db, st, "exec", err) < 0)
            return -1;
        sql = tail;
    }
    return 0;
}

/* ---- small helpers --------------------------------------------------------- */

bool sq_fits(const char *s, size_t max)
{
    return s != NULL && strnlen(s, max) < max;
}

int sq_col_unreadable(sqlite3 *db, sqlite3_stmt *st, int col, fb_error_t *err)
{
    /* errmsg only means something when sqlite itself failed (out of memory). */
    if (sqlite3_errcode(db) == SQLITE_NOMEM)
        return sq_fail(db, err, "read column");
    return fb_error_set(err, FB_ERR_INTERNAL, 0, "store: column %s is NULL", sqlite3_column_name(st, col));
}

/* Copies a text column into a fixed buffer.  A NULL or overlong value can
 * only come from a damaged database or an allocation failure inside sqlite. */
int sq_col_copy(sqlite3 *db, sqlite3_stmt *st, int col, char *dst, size_t len, fb_error_t *err)
{
    const unsigned char *v = sqlite3_column_text(st, col);
    if (v == NULL)
        return sq_col_unreadable(db, st, col, err);
    if (fb_strlcpy(dst, (const char *)v, len) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "store: column %s longer than %zu bytes",
                            sqlite3_column_name(st, col), len - 1);
    return 0;
}

int sq_col_dup(sqlite3 *db, sqlite3_stmt *st, int col, char **out, fb_error_t *err)
{
    const unsigned char *v = sqlite3_column_text(st, col);
    if (v == NULL)
        return sq_col_unreadable(db, st, col, err);
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
void *sq_grow(void *arr, size_t *cap, size_t n, size_t elem)
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
    /* 2: why a sandbox is in its state (e.g. why it stopped) */
    "ALTER TABLE sandboxes ADD COLUMN state_reason TEXT NOT NULL DEFAULT '';"
    "PRAGMA user_version = 2;",
    /* 3: files-only checkpoints; sandbox_id has no foreign key: a
     * checkpoint outlives its sandbox */
    "CREATE TABLE checkpoints (id TEXT PRIMARY KEY NOT NULL, tenant_id TEXT NOT NULL,"
    "  sandbox_id TEXT NOT NULL, name TEXT NOT NULL, template TEXT NOT NULL, parent TEXT NOT NULL,"
    "  layer_kind TEXT NOT NULL, uid_base INTEGER NOT NULL, size_bytes INTEGER NOT NULL,"
    "  created_ms INTEGER NOT NULL);"
    "CREATE INDEX checkpoints_tenant ON checkpoints(tenant_id);"
    "CREATE INDEX checkpoints_sandbox ON checkpoints(sandbox_id);"
    "PRAGMA user_version = 3;",
    /* 4: memory checkpoints (CRIU images beside the layer copy) */
    "ALTER TABLE checkpoints ADD COLUMN memory INTEGER NOT NULL DEFAULT 0;"
    "PRAGMA user_version = 4;",
    /* 5: templates made of content-addressed layers (image imports and
     * builds): the template they start from, their layers' digests (a JSON
     * array, lowest first) and the image config defaults; the layers
     * unpacked once, and what each cached build step produced */
    "ALTER TABLE templates ADD COLUMN base TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE templates ADD COLUMN layers TEXT NOT NULL DEFAULT '[]';"
    "ALTER TABLE templates ADD COLUMN config TEXT NOT NULL DEFAULT '{}';"
    "CREATE TABLE layers (digest TEXT PRIMARY KEY NOT NULL, size_bytes INTEGER NOT NULL,"
    "  created_ms INTEGER NOT NULL);"
    "CREATE TABLE build_cache (key TEXT PRIMARY KEY NOT NULL, layer TEXT NOT NULL,"
    "  created_ms INTEGER NOT NULL);"
    "PRAGMA user_version = 5;",
    /* 6: persistent volumes, owned by a tenant; which sandboxes mount one
     * is in their spec_json, not here */
    "CREATE TABLE volumes (tenant_id TEXT NOT NULL, name TEXT NOT NULL, size_bytes INTEGER NOT NULL,"
    "  created_ms INTEGER NOT NULL, PRIMARY KEY (tenant_id, name));"
    "PRAGMA user_version = 6;",
};
#define SCHEMA_VERSION ((int64_t)(sizeof migrations / sizeof migrations[0]))

/* Runs constant SQL whose answer is one integer. */
static int query_int(sqlite3 *db, const char *sql, int64_t *out, fb_error_t *err)
{
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(db, &st, sql, err) < 0)
        return -1;
    if (sqlite3_step(st) != SQLITE_ROW)
        return sq_fail(db, err, sql);
    *out = sqlite3_column_int64(st, 0);
    return sq_step_done(db, st, sql, err);
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
        return sq_fail(db, err, "configure");
    /* journal_mode answers with the mode it ended up in rather than failing. */
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(db, &st, "PRAGMA journal_mode = WAL", err) < 0)
        return -1;
    if (sqlite3_step(st) != SQLITE_ROW)
        return sq_fail(db, err, "set journal_mode");
    const unsigned char *mode = sqlite3_column_text(st, 0);
    if (mode == NULL || strcmp((const char *)mode, "wal") != 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "store: journal_mode is %s, not wal",
                            mode != NULL ? (const char *)mode : "unknown");
    if (sq_step_done(db, st, "set journal_mode", err) < 0)
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
int sq_delete_where(fb_store *s, const char *sql, const char *key, bool *gone, fb_error_t *err)
{
    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st, sql, err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC) != SQLITE_OK)
        return sq_fail(s->db, err, "bind key");
    if (sq_step_done(s->db, st, "delete", err) < 0)
        return -1;
    *gone = sqlite3_changes(s->db) > 0;
    return 0;
}

/* ---- tenants and API keys -------------------------------------------------- */

int fb_store_tenant_ensure(fb_store *s, const char *tenant_id, const char *name, fb_error_t *err)
{
    if (!sq_fits(tenant_id, FB_ID_MAX) || tenant_id[0] == '\0')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "tenant id must be 1..%d bytes", FB_ID_MAX - 1);
    if (!sq_fits(name, FB_NAME_MAX))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "tenant name must be at most %d bytes",
                            FB_NAME_MAX - 1);

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st,
                   "INSERT INTO tenants (id, name, created_ms) VALUES (?1, ?2, ?3)"
                   " ON CONFLICT (id) DO NOTHING",
                   err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, tenant_id, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(st, 3, fb_now_ms()) != SQLITE_OK)
        return sq_fail(s->db, err, "bind tenant");
    return sq_step_done(s->db, st, "insert tenant", err);
}

int fb_store_key_add(fb_store *s, const char *tenant_id, const char *key, fb_error_t *err)
{
    if (key == NULL || key[0] == '\0' || !sq_fits(key, FB_KEY_MAX + 1))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "api key must be 1..%d bytes", FB_KEY_MAX);
    if (!sq_fits(tenant_id, FB_ID_MAX))
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "tenant not found");
    char hash[65];
    if (key_hash(key, hash, err) < 0)
        return -1;

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st, "INSERT INTO api_keys (key_sha256, tenant_id, created_ms) VALUES (?1, ?2, ?3)",
                   err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(st, 2, tenant_id, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(st, 3, fb_now_ms()) != SQLITE_OK)
        return sq_fail(s->db, err, "bind api key");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_CONSTRAINT_FOREIGNKEY)
        return fb_error_set(err, FB_ERR_NOT_FOUND, 0, "tenant %s not found", tenant_id);
    if (sq_is_constraint(rc))
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "api key already exists");
    if (rc != SQLITE_DONE)
        return sq_fail(s->db, err, "insert api key");
    return 0;
}

int fb_store_key_lookup(fb_store *s, const char *key, char *tenant_out, fb_error_t *err)
{
    /* The message is the same for every miss so it says nothing about why. */
    if (key == NULL || key[0] == '\0' || !sq_fits(key, FB_KEY_MAX + 1))
        return fb_error_set(err, FB_ERR_UNAUTHORIZED, 0, "missing or wrong api key");
    char hash[65];
    if (key_hash(key, hash, err) < 0)
        return -1;

    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    cleanup_stmt sqlite3_stmt *st = NULL;
    if (sq_prepare(s->db, &st, "SELECT tenant_id FROM api_keys WHERE key_sha256 = ?1", err) < 0)
        return -1;
    if (sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC) != SQLITE_OK)
        return sq_fail(s->db, err, "bind api key");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return fb_error_set(err, FB_ERR_UNAUTHORIZED, 0, "missing or wrong api key");
    if (rc != SQLITE_ROW)
        return sq_fail(s->db, err, "look up api key");
    return sq_col_copy(s->db, st, 0, tenant_out, FB_ID_MAX, err);
}

int fb_store_key_count(fb_store *s, int64_t *count, fb_error_t *err)
{
    cleanup_unlock pthread_mutex_t *lock = sq_lock(s);
    return query_int(s->db, "SELECT count(*) FROM api_keys", count, err);
}

/* ---- sandboxes --------------------------------------------------------- */
