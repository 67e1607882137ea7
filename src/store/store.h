/* Persistent state in one SQLite database (WAL mode).
 *
 * The store is the source of truth for what exists; the daemon keeps only
 * caches of it.  One fb_store is shared by all request threads: every call
 * takes the store's internal mutex, so callers need no locking.  Rows are
 * plain caller-owned structs; strings that do not fit a fixed buffer are
 * heap-allocated and freed by the matching *_clear() function.
 */
#ifndef FB_STORE_STORE_H
#define FB_STORE_STORE_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "../common/error.h"

typedef struct fb_store fb_store;

#define FB_ID_MAX 64
#define FB_NAME_MAX 128

/* Opens (creating if needed, mode 0600) and migrates the database at path.
 * On success *out is owned by the caller: fb_store_close() it. */
int fb_store_open(const char *path, fb_store **out, fb_error_t *err);
void fb_store_close(fb_store *s);

/* ---- tenants and API keys ---------------------------------------------- */

/* Longest API key accepted, in bytes.  Longer keys are refused by
 * fb_store_key_add (FB_ERR_BAD_REQUEST) and never match in lookups. */
#define FB_KEY_MAX 256

/* Creates the tenant if it does not exist. */
int fb_store_tenant_ensure(fb_store *s, const char *tenant_id, const char *name, fb_error_t *err);

/* Stores a key (only its SHA-256 is kept) for a tenant. */
int fb_store_key_add(fb_store *s, const char *tenant_id, const char *key, fb_error_t *err);

/* Finds the tenant owning key; FB_ERR_UNAUTHORIZED when there is none.
 * tenant_out must hold FB_ID_MAX bytes. */
int fb_store_key_lookup(fb_store *s, const char *key, char *tenant_out, fb_error_t *err);

/* Number of keys stored (0 on a fresh database). */
int fb_store_key_count(fb_store *s, int64_t *count, fb_error_t *err);

/* ---- sandboxes --------------------------------------------------------- */

struct fb_sandbox_row {
    char id[FB_ID_MAX];
    char tenant[FB_ID_MAX];
    char state[16]; /* starting|running|paused|hibernated|stopped */
    char template_name[FB_NAME_MAX];
    int64_t created_ms;     /* unix epoch milliseconds */
    int64_t expires_ms;     /* -1: never */
    int64_t init_pid;       /* host pid of forkbox-init, 0 if none */
    int64_t uid_base;       /* first host uid of the sandbox's range */
    char *spec_json;        /* owned: the validated create request */
    char state_reason[256]; /* why it is in its state ("" when nothing to say) */
};

void fb_sandbox_row_clear(struct fb_sandbox_row *row);

/* Inserts a new row; FB_ERR_CONFLICT if the id exists. */
int fb_store_sandbox_insert(fb_store *s, const struct fb_sandbox_row *row, fb_error_t *err);

/* Rewrites state, state_reason, expires_ms, init_pid, spec_json, tenant and created_ms
 * of an existing row (a warm sandbox changes hands this way). */
int fb_store_sandbox_update(fb_store *s, const struct fb_sandbox_row *row, fb_error_t *err);

/* Loads a row.  tenant may be NULL (any tenant).  FB_ERR_NOT_FOUND when the
 * id does not exist or belongs to another tenant.  Caller clears *out. */
int fb_store_sandbox_get(fb_store *s, const char *tenant, const char *id, struct fb_sandbox_row *out,
                         fb_error_t *err);

/* All rows of a tenant (NULL: all tenants), oldest first.  *rows is an
 * array of *n rows owned by the caller: fb_sandbox_rows_free(). */
int fb_store_sandbox_list(fb_store *s, const char *tenant, struct fb_sandbox_row **rows, size_t *n,
                          fb_error_t *err);
void fb_sandbox_rows_free(struct fb_sandbox_row *rows, size_t n);

/* Ids of sandboxes whose expires_ms is set and <= now_ms, oldest first.
 * Caller frees each id and the array. */
int fb_store_sandbox_expired(fb_store *s, int64_t now_ms, char ***ids, size_t *n, fb_error_t *err);

/* Deletes a row; FB_ERR_NOT_FOUND when absent. */
int fb_store_sandbox_delete(fb_store *s, const char *id, fb_error_t *err);

/* uid_base values in use, for allocating a free range. Caller frees. */
int fb_store_sandbox_uid_bases(fb_store *s, int64_t **bases, size_t *n, fb_error_t *err);

/* ---- checkpoints --------------------------------------------------------- */

struct fb_checkpoint_row {
    char id[FB_ID_MAX]; /* ckpt_ + 16 hex */
    char tenant[FB_ID_MAX];
    char sandbox[FB_ID_MAX]; /* the sandbox it was taken of (may be gone since) */
    char name[FB_NAME_MAX];  /* "" when none was given */
    char template_name[FB_NAME_MAX];
    char parent[FB_ID_MAX]; /* "" when none */
    char layer_kind[8];     /* "image" (ext4 image) or "dir" (directory tree) */
    int64_t uid_base;       /* host uid of root inside when it was taken */
    int64_t size_bytes;     /* disk used by its copy */
    int64_t created_ms;
    bool memory; /* CRIU images of the process tree are kept beside the layer */
};

/* Inserts a row; FB_ERR_CONFLICT if the id exists. */
int fb_store_checkpoint_insert(fb_store *s, const struct fb_checkpoint_row *row, fb_error_t *err);
/* tenant NULL: any.  FB_ERR_NOT_FOUND when absent or another tenant's. */
int fb_store_checkpoint_get(fb_store *s, const char *tenant, const char *id, struct fb_checkpoint_row *out,
                            fb_error_t *err);
/* Rows of tenant and/or sandbox (NULL: any), oldest first; caller frees *rows. */
int fb_store_checkpoint_list(fb_store *s, const char *tenant, const char *sandbox,
                             struct fb_checkpoint_row **rows, size_t *n, fb_error_t *err);
int fb_store_checkpoint_delete(fb_store *s, const char *id, fb_error_t *err);

/* ---- templates --------------------------------------------------------- */

struct fb_template_row {
    char name[FB_NAME_MAX];
    char source[32];        /* "debootstrap", "rootfs", "oci", "docker-archive", "build" */
    char base[FB_NAME_MAX]; /* the template a build started from ("": none) */
    int64_t created_ms;
    int64_t size_bytes;
    char *layers_json; /* owned: JSON array of "sha256:HEX" diff ids, lowest first */
    char *config_json; /* owned: JSON object of image defaults (env, workdir, user, cmd) */
};

/* Frees a row's owned strings (the row itself is the caller's). */
void fb_template_row_clear(struct fb_template_row *row);
void fb_template_rows_free(struct fb_template_row *rows, size_t n);

/* Inserts or replaces a template row; NULL layers/config store [] and {}. */
int fb_store_template_put(fb_store *s, const struct fb_template_row *row, fb_error_t *err);
/* Fills *out (caller clears it); FB_ERR_NOT_FOUND when there is none. */
int fb_store_template_get(fb_store *s, const char *name, struct fb_template_row *out, fb_error_t *err);
int fb_store_template_list(fb_store *s, struct fb_template_row **rows, size_t *n, fb_error_t *err);
int fb_store_template_delete(fb_store *s, const char *name, fb_error_t *err);

/* Unpacked layers, keyed by "sha256:HEX" of their uncompressed tar. */
struct fb_layer_row {
    char digest[80];
    int64_t size_bytes;
    int64_t created_ms;
};
/* Inserts a layer row; one already there is left as it is. */
int fb_store_layer_put(fb_store *s, const struct fb_layer_row *row, fb_error_t *err);
/* FB_ERR_NOT_FOUND when the layer is not stored. */
int fb_store_layer_get(fb_store *s, const char *digest, struct fb_layer_row *out, fb_error_t *err);
/* All layer rows (caller frees *rows). */
int fb_store_layer_list(fb_store *s, struct fb_layer_row **rows, size_t *n, fb_error_t *err);
/* Removes a layer row and every build-cache entry that produced it. */
int fb_store_layer_delete(fb_store *s, const char *digest, fb_error_t *err);

/* Build cache: a step's input key (hex) -> the layer it produced ("" for a
 * step that left the files as they were). */
int fb_store_build_cache_put(fb_store *s, const char *key, const char *layer, fb_error_t *err);
/* Copies the layer into layer (len bytes); FB_ERR_NOT_FOUND on a miss. */
int fb_store_build_cache_get(fb_store *s, const char *key, char *layer, size_t len, fb_error_t *err);

/* ---- volumes ------------------------------------------------------------- */

struct fb_volume_row {
    char tenant[FB_ID_MAX];
    char name[FB_NAME_MAX];
    int64_t size_bytes; /* the filesystem's size, fixed at creation */
    int64_t created_ms;
};
/* Inserts a row; FB_ERR_CONFLICT if the tenant already has that name. */
int fb_store_volume_insert(fb_store *s, const struct fb_volume_row *row, fb_error_t *err);
/* FB_ERR_NOT_FOUND when absent (another tenant's volume is absent too). */
int fb_store_volume_get(fb_store *s, const char *tenant, const char *name, struct fb_volume_row *out,
                        fb_error_t *err);
/* The tenant's rows (NULL: every tenant's), by name; caller frees *rows. */
int fb_store_volume_list(fb_store *s, const char *tenant, struct fb_volume_row **rows, size_t *n,
                         fb_error_t *err);
/* FB_ERR_NOT_FOUND when absent. */
int fb_store_volume_delete(fb_store *s, const char *tenant, const char *name, fb_error_t *err);

#endif
