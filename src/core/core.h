/* The daemon's core: owns the store, the runtime handles and the sandbox
 * lifecycle.  API handlers call into it with a tenant id and validated
 * specs; it never sees HTTP.  All functions are thread-safe. */
#ifndef FB_CORE_CORE_H
#define FB_CORE_CORE_H

#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "../common/error.h"
#include "../runtime/cgroup.h"
#include "../runtime/nft.h"
#include "../runtime/seccomp.h"
#include "../runtime/storage.h"
#include "../store/store.h"
#include "share.h"
#include "spec.h"

struct fb_core_config {
    char state_dir[PATH_MAX]; /* sqlite db, templates, writable layers */
    char run_dir[PATH_MAX];   /* control sockets */
    char init_path[PATH_MAX]; /* forkbox-init binary */
    char cache_dir[PATH_MAX]; /* debootstrap package cache */
    uint32_t uid_pool_start;  /* first host uid handed to sandboxes */
    uint32_t uid_pool_slots;  /* ranges of FB_UID_COUNT ids in the pool */
    uint32_t max_sandboxes;   /* per tenant */
    bool build_default;       /* build the default template if missing */
    bool host_tuning;         /* may tune host settings (cgroup2 favordynmods) */
    uint32_t warm_pool;       /* warm sandboxes of the default template kept ready */
    char dns_upstream[64];    /* IPv4 resolver for sandboxes' queries; "": the host's */
    char criu_path[PATH_MAX]; /* criu binary; "": the install path, else PATH (runtime/criu.h) */
    bool storage_plain;       /* no btrfs pool, no reflinks (runtime/storage.h) */
    uint64_t storage_bytes;   /* size of a new pool; 0: the default */
};

/* forkbox's DNS resolver (dns.c); its port is where sandboxes' queries to
 * their gateway are redirected */
#define FB_DNS_PORT 10053
#define FB_EGRESS_HTTP_PORT 10080
#define FB_EGRESS_TLS_PORT 10443
struct fb_core;
/* Two sockets served by one thread (listeners.c). */
struct fb_listeners {
    int fd[2]; /* owned */
    int wake[2];
    pthread_t thread;
    bool started;
    struct fb_core *core;
    void (*ready)(struct fb_core *core, int which); /* fd[which] is readable */
};
struct fb_dns_server {
    struct fb_listeners l; /* fd[0] UDP, fd[1] TCP */
    struct sockaddr_in upstream;
};

enum fb_template_state { FB_TPL_MISSING, FB_TPL_BUILDING, FB_TPL_READY, FB_TPL_FAILED };

struct fb_core {
    struct fb_core_config cfg;
    fb_store *store;
    struct fb_cgroup_host cgroups;
    struct fb_seccomp_prog seccomp;
    int init_fd;
    int lock_fd;          /* flock on state_dir/lock: one daemon per state dir */
    pthread_mutex_t lock; /* uid allocation, template builds, reaper */
    /* imports and builds hold it for reading while they add and use
     * layers; layer collection takes it for writing */
    pthread_rwlock_t layers_lock;
    enum fb_template_state default_state;
    char default_error[512];
    pthread_t builder, reaper, pool_filler;
    bool builder_started, reaper_started, pool_started;
    /* warm pool: ids of ready sandboxes, guarded by lock */
    char (*pool_ids)[FB_ID_MAX];
    size_t pool_ready;
    pthread_cond_t pool_cond;
    pthread_cond_t reaper_cond; /* wakes the reaper: a delete left work */
    bool cleanup_wanted;
    const char *kvm_missing;    /* why hardware virtualisation is unusable, or NULL */
    bool favordynmods;          /* host tuning in effect */
    bool disk_limits;           /* each writable layer is a filesystem of its own size */
    bool net_ready;             /* the host-side nftables table is in place */
    bool host_rebooted;         /* the kernel's boot id changed since the last start */
    struct fb_idle *idle;       /* when each sandbox was last asked for something (pause.c) */
    struct fb_gate *gate;       /* requests vs memory captures, per sandbox (gate.c) */
    pthread_mutex_t pause_lock; /* pause, resume and idle pauses, one at a time */
    char net_table[32];         /* its name, forkbox_<first uid slot> */
    char net_missing[320];      /* why sandbox networks are unavailable */
    struct fb_nft nft;          /* guarded by net_lock: libnftables contexts are not thread-safe */
    pthread_mutex_t net_lock;
    /* volume images: create, delete, host mounts (taken before lock) */
    pthread_mutex_t volume_lock;
    pthread_mutex_t net_change;       /* one network mode change at a time */
    struct fb_net_entry *net_entries; /* networked sandboxes by slot, guarded by net_lock */
    size_t n_net_entries, cap_net_entries;
    struct fb_dns_server dns;
    struct fb_listeners egress;                /* fd[0] HTTP, fd[1] TLS */
    char disk_missing[192];                    /* why not, when !disk_limits */
    unsigned char share_key[FB_SHARE_KEY_LEN]; /* signs share URLs (ports.c); read-only once open */
    struct fb_core_criu *criu;                 /* CRIU self-test and its verdict (criu_status.c) */
    struct fb_storage storage;                 /* where layers live; read-only once open */
    volatile bool stopping;
};

/* Opens the store, detects cgroups, builds the seccomp filter, loads init,
 * re-adopts sandboxes that survived a daemon restart and starts the
 * reaper and (if needed) the default template build.  *core is the
 * caller's; release with fb_core_close(). */
int fb_core_open(struct fb_core *core, const struct fb_core_config *cfg, fb_error_t *err);
void fb_core_close(struct fb_core *core);

/* Makes sure a tenant and at least one key exist; on first start creates
 * the key, writes it to state_dir/api-key (0600) and returns it in key_out
 * (FB_ID_MAX bytes; "" when a key already existed). */
int fb_core_bootstrap_key(struct fb_core *core, char *key_out, fb_error_t *err);

/* Creates a key for tenant (created if needed) in store, which need not
 * belong to an open core (forkboxd add-key); key_out FB_ID_MAX bytes. */
int fb_core_add_key(fb_store *store, const char *tenant, char *key_out, fb_error_t *err);

/* ---- sandboxes ---- (objects returned are new references) */
int fb_sandbox_create(struct fb_core *core, const char *tenant, const struct fb_create_spec *spec,
                      json_t **out, fb_error_t *err);
int fb_sandbox_get(struct fb_core *core, const char *tenant, const char *id, json_t **out, fb_error_t *err);
/* labels: array of "k=v" selectors (may be NULL); state may be NULL. */
int fb_sandbox_list(struct fb_core *core, const char *tenant, const char *const *labels, size_t nlabels,
                    const char *state, json_t **out, fb_error_t *err);
int fb_sandbox_delete(struct fb_core *core, const char *tenant, const char *id, fb_error_t *err);
int fb_sandbox_set_ttl(struct fb_core *core, const char *tenant, const char *id, int64_t ttl_s, json_t **out,
                       fb_error_t *err);
/* PUT .../network: changes the network mode of a running sandbox live (its
 * processes keep running).  400/501 for a bad or unsupported mode, 409 when
 * it is not running. */
int fb_sandbox_set_network(struct fb_core *core, const char *tenant, const char *id, json_t *network,
                           json_t **out, fb_error_t *err);

/* Files-only checkpoints (checkpoint.c).  body: {"name", "memory"} (may be
 * NULL).  memory: true is unsupported (501).  too_large (413) when the
 * state filesystem has no room for the copy; nothing is left on failure. */
int fb_checkpoint_create(struct fb_core *core, const char *tenant, const char *id, json_t *body, json_t **out,
                         fb_error_t *err);
/* {"checkpoints": [...]} of a sandbox, oldest first (also once it is gone). */
int fb_checkpoint_list(struct fb_core *core, const char *tenant, const char *id, json_t **out,
                       fb_error_t *err);
int fb_checkpoint_get(struct fb_core *core, const char *tenant, const char *cid, json_t **out,
                      fb_error_t *err);
int fb_checkpoint_delete(struct fb_core *core, const char *tenant, const char *cid, fb_error_t *err);
/* Ends every process of the sandbox, replaces its files with a copy of the
 * checkpoint and starts it again (same id, uids, limits, network).
 * conflict for another template; *out is the sandbox's object. */
int fb_sandbox_rollback(struct fb_core *core, const char *tenant, const char *id, const char *cid,
                        json_t **out, fb_error_t *err);

/* What exec and file calls need to reach a running sandbox. */
struct fb_sandbox_handle {
    struct fb_core *core; /* set while the handle holds the sandbox's gate */
    char id[FB_ID_MAX];
    char sock_path[108];
    int64_t init_pid; /* host pid of its init */
    int64_t uid_base;
    char workdir[4096];
    char user[FB_USER_MAX + 1]; /* commands' default user */
    json_t *env;                /* owned: the sandbox's env */
};
void fb_sandbox_handle_clear(struct fb_sandbox_handle *h);

/* Freezes a running sandbox's processes (memory kept) / lets them go on.
 * *out is the sandbox's object.  unsupported without a cgroup freezer;
 * conflict in another state.  Pausing a paused one is not an error. */
int fb_sandbox_pause(struct fb_core *core, const char *tenant, const char *id, json_t **out, fb_error_t *err);
int fb_sandbox_resume(struct fb_core *core, const char *tenant, const char *id, json_t **out,
                      fb_error_t *err);
/* Writes a running or paused sandbox's memory and processes to disk with
 * CRIU and frees its RAM (state "hibernated"); resume restores them.
 * unsupported without a working CRIU; conflict in another state. */
int fb_sandbox_hibernate(struct fb_core *core, const char *tenant, const char *id, json_t **out,
                         fb_error_t *err);
/* Forks a running sandbox count (1..64) times: each child is a new
 * sandbox with a copy of its files, memory and processes.  *out is
 * {"sandboxes": [...]}.  The parent goes on undisturbed. */
int fb_sandbox_fork(struct fb_core *core, const char *tenant, const char *id, json_t *body, json_t **out,
                    fb_error_t *err);

/* Finds a running sandbox of tenant.  not_found / conflict (not running). */
int fb_sandbox_open(struct fb_core *core, const char *tenant, const char *id, struct fb_sandbox_handle *h,
                    fb_error_t *err);

/* Removes what deleted sandboxes left (cgroups, writable layers) and their
 * rows; returns how many could not be finished yet.  Reaper thread. */
int fb_sandbox_finish_deletes(struct fb_core *core);

/* Deletes expired sandboxes; called by the reaper thread, exposed for tests. */
void fb_sandbox_reap_expired(struct fb_core *core);

/* Tells every background thread of the core, and every build, to finish
 * (they are joined by their own stop functions).  Idempotent. */
void fb_core_signal_stop(struct fb_core *core);

/* ---- templates ---- */
/* Every template with its size, layers and how many templates share each
 * layer.  *out is the caller's. */
int fb_templates_list(struct fb_core *core, json_t **out, fb_error_t *err);
/* One template, plus the sandboxes and checkpoints that use it. */
int fb_template_inspect(struct fb_core *core, const char *name, json_t **out, fb_error_t *err);
/* Imports the archive at tar_path as template name: an OCI layout or
 * docker-archive (ref picks one image of several; NULL: the only one), or
 * a root filesystem tar.  409 when the name is taken, 400 for anything
 * malformed (nothing is left behind).  *out: the template. */
int fb_template_import(struct fb_core *core, const char *name, const char *tar_path, const char *ref,
                       json_t **out, fb_error_t *err);
/* 0 when no sandbox (but one being deleted) and no checkpoint uses template
 * name; else 409 naming the first of them, the message ending in then. */
int fb_template_unused(struct fb_core *core, const char *name, const char *then, fb_error_t *err);
/* Refused (409, naming them) while sandboxes or checkpoints use it; the
 * layers stay until fb_layers_gc. */
int fb_template_delete(struct fb_core *core, const char *name, fb_error_t *err);
/* Builds STATE_DIR/templates/NAME/rootfs from base_rootfs (hard-linked;
 * NULL: empty) and layers (stored digests, lowest first), then records the
 * template row.  The caller holds layers_lock for reading; on failure the
 * template dir is removed. */
int fb_template_register(struct fb_core *core, const char *name, const char *source, const char *base,
                         const char *base_rootfs, json_t *layers, json_t *config, fb_error_t *err);
/* Assembles dir/rootfs the same way without recording anything. */
int fb_template_assemble(struct fb_core *core, const char *dir, const char *base_rootfs, json_t *layers,
                         fb_error_t *err);
/* Fills what spec leaves unset from the template's image defaults: env
 * (the request's values win), workdir, user. */
int fb_template_defaults(struct fb_core *core, struct fb_create_spec *spec, fb_error_t *err);
/* Host path of a ready template's rootfs; not_found / unavailable. */
int fb_template_rootfs(struct fb_core *core, const char *name, char *out, size_t outlen, fb_error_t *err);

/* ---- volumes (volumes.c): a tenant's persistent directories ----
 * Objects are new references; another tenant's volume is not_found. */
/* body {"name", "size_mb"}: 201 object; conflict when the name is taken,
 * quota past FB_VOLUMES_PER_TENANT. */
int fb_volume_create(struct fb_core *core, const char *tenant, json_t *body, json_t **out, fb_error_t *err);
/* {"volumes": [...]} by name. */
int fb_volume_list(struct fb_core *core, const char *tenant, json_t **out, fb_error_t *err);
int fb_volume_get(struct fb_core *core, const char *tenant, const char *name, json_t **out, fb_error_t *err);
/* conflict, naming them, while any sandbox of any state has it in its spec. */
int fb_volume_delete(struct fb_core *core, const char *tenant, const char *name, fb_error_t *err);
/* A tar of the volume's directory path ("/" when NULL) into out_fd (a file),
 * built on the host by a chrooted child; at most FB_ARCHIVE_MAX bytes. */
int fb_volume_archive_get(struct fb_core *core, const char *tenant, const char *name, const char *path,
                          int out_fd, fb_error_t *err);
/* Checks the tar at tar_path whole (the sandbox archive rules, owners
 * 0..65535), then extracts it at path ("/" when NULL) in the volume.
 * *out is {"path", "entries"}. */
int fb_volume_archive_put(struct fb_core *core, const char *tenant, const char *name, const char *path,
                          const char *tar_path, json_t **out, fb_error_t *err);

/* ---- ports in (ports.c) ---- */
/* Longest life of a share token: 7 days. */
#define FB_SHARE_MAX_SECONDS (7 * 24 * 3600)
/* Reads state_dir/share.key into core->share_key, creating it (0600) on
 * first start; a short, foreign or unreadable key is an error. */
int fb_share_key_load(struct fb_core *core, fb_error_t *err);
/* Signs a share token for port of tenant's sandbox id valid for
 * expires_in seconds (1..FB_SHARE_MAX_SECONDS); token FB_SHARE_TOKEN_MAX
 * bytes.  bad_request for a bad port or lifetime, not_found. */
int fb_share_create(struct fb_core *core, const char *tenant, const char *id, int64_t port,
                    int64_t expires_in, char token[FB_SHARE_TOKEN_MAX], int64_t *expires_at, fb_error_t *err);
/* Checks a share token for sandbox id and port; on success tenant_out
 * (FB_ID_MAX bytes) receives the owner and *expires_at the expiry.  Every
 * failure, an unknown sandbox included, is unauthorized. */
int fb_share_verify(struct fb_core *core, const char *id, unsigned port, const char *token,
                    char tenant_out[FB_ID_MAX], int64_t *expires_at, fb_error_t *err);
/* Connects to 127.0.0.1:port (else [::1]:port) inside tenant's running
 * sandbox id, from its network namespace, within 5 s.  Returns a blocking
 * socket the caller owns, or -1: not_found, conflict (not running),
 * bad_gateway (nothing listening, timeout). */
int fb_port_connect(struct fb_core *core, const char *tenant, const char *id, unsigned port, fb_error_t *err);

/* ---- CRIU (criu_status.c) ----
 * Starts the CRIU self-test on a thread of its own (status "checking" until
 * it is done; a hanging criu is killed at its deadline); stop cancels and
 * joins it.  Start fails only for lack of memory. */
int fb_core_criu_start(struct fb_core *core, fb_error_t *err);
void fb_core_criu_stop(struct fb_core *core);
/* For memory features (hibernate, memory checkpoints, fork): 0 when CRIU
 * works; else FB_ERR_UNSUPPORTED (501) with the reason, or
 * FB_ERR_UNAVAILABLE (503) while the self-test is still running. */
int fb_core_criu_require(struct fb_core *core, fb_error_t *err);
/* fb_core_criu_require, then the binary that passed the self-test into out. */
int fb_core_criu_path(struct fb_core *core, char *out, size_t len, fb_error_t *err);
/* /v1/info's "criu" object: {status, available, version, path, reason,
 * selftest_ms}.  New reference. */
json_t *fb_core_criu_info(struct fb_core *core);
/* Fills buf with a "missing" line and returns true when CRIU is known not
 * to work. */
bool fb_core_criu_missing(struct fb_core *core, char *buf, size_t len);

/* /v1/info body. */
json_t *fb_core_info(struct fb_core *core);

#endif
