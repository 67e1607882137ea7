/* Declarations shared by the core's own files only. */
#ifndef FB_CORE_INTERNAL_H
#define FB_CORE_INTERNAL_H

#include "../runtime/container.h"
#include "core.h"

struct fb_core_paths {
    char sandbox_dir[PATH_MAX];
    char run_dir[PATH_MAX];
    char sock_path[108];
    char hostname[64];
};

/* ---- volumes of a sandbox (volumes.c) ---- */
#define FB_VOLUMES_PER_TENANT 256
/* Host mounts of a spec's volumes, for fb_container_config.volumes. */
struct fb_volume_plan {
    char sources[FB_VOLUMES_MAX][PATH_MAX];
    struct fb_container_volume v[FB_VOLUMES_MAX];
    size_t n;
};
/* Mounts (on the host) every volume spec names and points c at them
 * through *plan (caller-owned, outliving the start).  not_found when one
 * does not exist (any more). */
int fb_volumes_prepare(struct fb_core *core, const char *tenant, const struct fb_create_spec *spec,
                       struct fb_volume_plan *plan, struct fb_container_config *c, fb_error_t *err);
/* Under core->lock: not_found unless every volume a stored spec names
 * exists for tenant.  The create's row insert and a volume's delete are
 * decided under that lock, so a delete never misses a new user. */
int fb_volumes_check_locked(struct fb_core *core, const char *tenant, const char *spec_json, fb_error_t *err);
/* conflict when row's spec mounts volumes: CRIU is not told about them, so
 * memory state (what) is refused for such sandboxes. */
int fb_volumes_refuse_memory(const struct fb_sandbox_row *row, const char *what, fb_error_t *err);
/* Detaches the host's mounts of all volumes (sandboxes keep theirs). */
void fb_volumes_release_all(struct fb_core *core);

/* Fills the container config (pointing into *paths) for a stored row. */
void fb_core_container_config(struct fb_core *core, const struct fb_sandbox_row *row, const char *rootfs,
                              struct fb_core_paths *paths, struct fb_container_config *c);

/* Removes sandbox dirs (and their layer filesystems) that no stored row
 * knows of.  Runs before anything new is started.  Logs; never fails. */
void fb_core_remove_orphans(struct fb_core *core);

int fb_core_readopt(struct fb_core *core, fb_error_t *err);

/* The network namespace of the sandbox id whose init is init_pid, checked
 * to still be that init (its host uid is uid_base); conflict if it is not
 * running.  Returns the fd (caller-owned). */
int fb_core_netns_open(const char *id, int64_t init_pid, int64_t uid_base, fb_error_t *err);

/* The stored row of a sandbox clients may still see (not being deleted),
 * marked stopped first if its init died, resumed first if an idle pause
 * holds it.  not_found; fills *row (caller clears it). */
int fb_core_live_row(struct fb_core *core, const char *tenant, const char *id, struct fb_sandbox_row *row,
                     fb_error_t *err);

/* ---- pauses (pause.c) ---- */
/* Records a request for row's sandbox and, if an idle pause holds it,
 * resumes it (row is updated).  -1 when the thaw failed. */
int fb_core_wake(struct fb_core *core, struct fb_sandbox_row *row, fb_error_t *err);
/* Pauses running sandboxes whose idle_timeout has passed with only init
 * left in them.  Reaper thread. */
void fb_sandbox_pause_idle(struct fb_core *core);
void fb_idle_free(struct fb_core *core);

/* ---- sandbox networks (net.c) ----
 * Opens the host-side nftables table (replacing any earlier one); on
 * failure networked modes answer 501 and net_missing says why. */
int fb_net_open(struct fb_core *core);
void fb_net_close(struct fb_core *core);
/* Gives a running sandbox a veth pair and the policy of mode ("none": no
 * link).  On failure nothing of it is left. */
int fb_net_attach(struct fb_core *core, const struct fb_sandbox_row *row, pid_t init_pid, const char *mode,
                  fb_error_t *err);
/* Removes the sandbox's link and policy, if any.  Never fails. */
void fb_net_detach(struct fb_core *core, const struct fb_sandbox_row *row);
/* After a daemon restart: re-enters the policy of a sandbox whose link
 * survived.  -1 if it has none. */
int fb_net_restore(struct fb_core *core, const struct fb_sandbox_row *row, const char *mode);
/* A networked sandbox as the resolver sees it. */
struct fb_allowset;
struct fb_net_entry {
    uint32_t slot;             /* uid_base >> 16 */
    struct fb_allowset *allow; /* allowlist mode: shared, counted; NULL otherwise */
    char id[FB_ID_MAX];
    char tenant[64];
    char mode[FB_NET_MODE_MAX];
};
/* The sandbox whose link address is addr; false if none.  *out holds a
 * reference: release it with fb_net_entry_release(). */
bool fb_net_lookup(struct fb_core *core, struct in_addr addr, struct fb_net_entry *out);
void fb_net_entry_release(struct fb_net_entry *e);
/* Whether an allowlist sandbox may resolve name; *port receives the port its
 * matching entry names (0: any; the lowest if several). */
bool fb_net_name_allowed(const struct fb_net_entry *e, const char *name, uint16_t *port);
/* Lets the sandbox of slot reach ip (on port, or any when 0) for ttl
 * seconds: the resolver calls it for each address an allowed name gave. */
void fb_net_learn(struct fb_core *core, uint32_t slot, uint32_t ip, uint16_t port, uint32_t ttl);
/* Whether the sandbox of slot may reach ip:port because an allowed name
 * resolved to it (learnt), or because a CIDR entry lists it (listed). */
bool fb_net_dst_learnt(struct fb_core *core, uint32_t slot, uint32_t ip, uint16_t port);
bool fb_net_dst_listed(struct fb_core *core, uint32_t slot, uint32_t ip, uint16_t port);

/* Network counters of a networked sandbox: {bytes_out, bytes_in,
 * connections, denied: {blocked_destination, protocol, dns, policy, host}}
 * (new reference), or NULL for none. */
json_t *fb_net_counters(struct fb_core *core, const struct fb_sandbox_row *row);

/* GET /metrics: the Prometheus text of tenant's sandboxes (caller frees). */
int fb_core_metrics(struct fb_core *core, const char *tenant, char **out, fb_error_t *err);

/* ---- listeners.c ----
 * Marks l as holding nothing, so stop/close are safe before any start. */
void fb_listeners_init(struct fb_listeners *l);
/* Serves fd0 and fd1 (taken over: closed on failure and by close) from a
 * thread calling ready(core, which) when fd[which] is readable. */
int fb_listeners_start(struct fb_listeners *l, struct fb_core *core, int fd0, int fd1,
                       void (*ready)(struct fb_core *core, int which), fb_error_t *err);
/* Stops the thread (the sockets stay open); idempotent. */
void fb_listeners_stop(struct fb_listeners *l);
/* Stops the thread and closes the sockets; idempotent. */
void fb_listeners_close(struct fb_listeners *l);
/* Runs fn(arg) on a detached thread; false if none could be started. */
bool fb_spawn_detached(void *(*fn)(void *), void *arg);

/* ---- egress proxy (egress.c) for allowlist sandboxes' ports 80 and 443 ---- */
int fb_egress_start(struct fb_core *core, fb_error_t *err);
void fb_egress_stop(struct fb_core *core);

/* ---- DNS resolver (dns.c) and audit trail (audit.c) ---- */
int fb_dns_start(struct fb_core *core, fb_error_t *err);
void fb_dns_stop(struct fb_core *core);
void fb_audit_add(struct fb_core *core, const char *tenant, const char *sandbox, const char *kind,
                  const char *name, unsigned qtype, const char *verdict);
/* {"events": [...]} of tenant, optionally of one sandbox, since since_ms. */
json_t *fb_audit_list(struct fb_core *core, const char *tenant, const char *sandbox, int64_t since_ms);

/* The network mode stored in a row's spec ("none" when absent). */
void fb_net_row_mode(const struct fb_sandbox_row *row, char mode[FB_NET_MODE_MAX]);

/* The host's security posture for /v1/info: {mitigations, missing,
 * host_settings}.  New reference. */
json_t *fb_core_posture(struct fb_core *core);

/* Tenant name the warm pool's sandboxes belong to; client tenants cannot
 * start with '_'. */
#define FB_POOL_TENANT "_pool"

/* Fills a new row (fresh id, times, serialised spec); no side effects. */
int fb_core_new_row(const char *tenant, const struct fb_create_spec *spec, struct fb_sandbox_row *row,
                    fb_error_t *err);
/* Checks the tenant's quota (not for the pool) and, with insert, takes a
 * uid range and stores the row, all under the core lock. */
int fb_core_reserve_row(struct fb_core *core, struct fb_sandbox_row *row, bool insert, fb_error_t *err);
int fb_core_start_row(struct fb_core *core, struct fb_sandbox_row *row, const char *rootfs,
                      const struct fb_create_spec *spec, fb_error_t *err);
int fb_core_make_workdir(const char *sock, const char *workdir, fb_error_t *err);
/* A sandbox on rootfs (a build's stage, not a registered template): no
 * warm pool, no template lookup; spec->template_name is only recorded. */
int fb_sandbox_create_on(struct fb_core *core, const char *tenant, const struct fb_create_spec *spec,
                         const char *rootfs, json_t **out, fb_error_t *err);
/* Tenant of template builds' step sandboxes (see FB_POOL_TENANT). */
#define FB_BUILD_TENANT "_build"

/* ---- the capture gate (gate.c) ---- */
#define FB_GATE_WAIT_MS 30000
/* A request that talks to the sandbox's init passes the gate (waiting while
 * a memory capture holds it closed: 503 after FB_GATE_WAIT_MS) and leaves
 * when done. */
int fb_gate_enter(struct fb_core *core, const char *id, fb_error_t *err);
void fb_gate_leave(struct fb_core *core, const char *id);
/* Closes the gate and waits until the requests inside have left (409
 * after FB_GATE_WAIT_MS, the gate open again); fb_gate_open reopens it. */
int fb_gate_close(struct fb_core *core, const char *id, fb_error_t *err);
void fb_gate_open(struct fb_core *core, const char *id);
void fb_gate_free(struct fb_core *core);

/* ---- memory (memory.c) ---- */
#define FB_EXTERNALS_FILE "forkbox-externals.json"
/* criu/forkbox-record.PID.NAME: a keeper's record file (NAME: meta.json,
 * out, idx, status) as it was at the dump, for exports */
#define FB_RECORD_PREFIX "forkbox-record."
struct fb_memstate_ext;
/* Closes row's gate and waits until no request is being served inside
 * (409 after FB_GATE_WAIT_MS); the caller reopens it with fb_gate_open. */
int fb_memory_quiesce(struct fb_core *core, const struct fb_sandbox_row *row, fb_error_t *err);
/* Dumps row's processes into dir/criu (made here) and writes
 * dir/criu/forkbox-externals.json (and with records, the keepers' record
 * files beside the images, for exports); with leave_running the sandbox
 * goes on unchanged, else its processes end.  The caller holds pause_lock. */
int fb_memory_dump(struct fb_core *core, const struct fb_sandbox_row *row, const char *dir,
                   bool leave_running, bool records, fb_error_t *err);
/* Restores dir's images as row's sandbox (its layer already in place) and
 * attaches its network; row->init_pid is set.  On failure nothing of the
 * new processes is left. */
int fb_memory_restore(struct fb_core *core, struct fb_sandbox_row *row, const char *rootfs,
                      const struct fb_create_spec *spec, const char *dir, fb_error_t *err);
/* Brings a hibernated row back and stores it running; under pause_lock. */
int fb_memory_resume_locked(struct fb_core *core, struct fb_sandbox_row *row, fb_error_t *err);
int fb_memory_ext_write(const char *dir, const struct fb_memstate_ext *ext, size_t n, fb_error_t *err);
/* Reads dir/criu/forkbox-externals.json (hostile input: every entry is
 * checked). */
int fb_memory_ext_read(const char *dir, struct fb_memstate_ext *ext, size_t *n, fb_error_t *err);

/* ---- checkpoints (checkpoint.c) ----
 * Creates and starts a sandbox whose files are a copy of spec->checkpoint
 * (template and disk size from the checkpoint); *row is the stored row. */
int fb_checkpoint_new_sandbox(struct fb_core *core, const char *tenant, const struct fb_create_spec *spec,
                              struct fb_sandbox_row *row, fb_error_t *err);
/* ---- checkpoint disk usage (checkpoint_usage.c) ----
 * Sets "exclusive_bytes" in obj, the JSON of c: the bytes of c's layer
 * shared with no other file (what deleting it frees); null when the
 * filesystem cannot tell.  Never fails. */
void fb_checkpoint_usage_add(struct fb_core *core, const struct fb_checkpoint_row *c, json_t *obj);
/* Bytes rows[0..n) take together, blocks they share counted once; -1 when
 * that cannot be counted (no FIEMAP, or past FB_EXTENTS_MAX extents). */
int64_t fb_checkpoint_usage_total(struct fb_core *core, const struct fb_checkpoint_row *rows, size_t n);
/* Copies the layer of src_dir (layer.img or layer/) into dst_dir under
 * the same name: a reflink where storage allows; a tree's owners move from
 * the range at `from` to the one at `to` (0, 0: unchanged). */
int fb_checkpoint_copy_layer(struct fb_core *core, const char *src_dir, const char *dst_dir, uid_t from,
                             uid_t to, fb_error_t *err);
/* 413 unless the state filesystem has room for `copies` copies of the
 * layer in sandbox_dir plus `extra` bytes (and a margin). */
int fb_checkpoint_check_space(struct fb_core *core, const char *sandbox_dir, int copies, int64_t extra,
                              fb_error_t *err);
/* The files (and with memory, the processes: CRIU dump left running, after
 * fb_memory_quiesce) of row at one frozen instant, into dst (layer.img or
 * layer/, criu/).  With records the keepers' record files go beside the
 * images.  Under pause_lock; a failed dump leaves the sandbox as it was. */
int fb_checkpoint_capture(struct fb_core *core, const struct fb_sandbox_row *row, const char *sandbox_dir,
                          bool memory, bool records, const char *dst, fb_error_t *err);
/* How many more sandboxes the tenant may have. */
size_t fb_core_quota_left(struct fb_core *core, const char *tenant);
/* Removes checkpoint dirs no row knows of (interrupted copies). */
void fb_checkpoint_remove_orphans(struct fb_core *core);

/* Hands a warm sandbox to row's tenant with row's spec: on success row
 * holds the sandbox (id, uid range, init pid), stored and running.
 * Returns -1 when no warm sandbox fits; the caller starts one cold. */
int fb_pool_claim(struct fb_core *core, const struct fb_create_spec *spec, struct fb_sandbox_row *row);
int fb_pool_start(struct fb_core *core, fb_error_t *err);
void fb_pool_stop(struct fb_core *core);
/* Re-adopted warm sandboxes go back into the pool. */
void fb_pool_adopt(struct fb_core *core, const char *id);
/* Destroys every warm sandbox (the template is going away). */
void fb_pool_drain(struct fb_core *core);
int fb_core_templates_init(struct fb_core *core, fb_error_t *err);
void fb_core_templates_stop(struct fb_core *core);
int fb_core_reaper_start(struct fb_core *core, fb_error_t *err);
void fb_core_reaper_stop(struct fb_core *core);

#endif
