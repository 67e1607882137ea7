/* forkboxd configuration: built-in defaults, then FORKBOX_* environment
 * variables, then command-line flags; the last one wins. */
#ifndef FB_DAEMON_CONFIG_H
#define FB_DAEMON_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "../common/error.h"

struct fb_daemon_config {
    char socket_path[108]; /* --socket, FORKBOX_SOCKET; "" = no unix socket */
    char listen_host[64];  /* --listen HOST:PORT, FORKBOX_LISTEN; "none" disables TCP */
    uint16_t listen_port;
    bool tcp_enabled;
    char state_dir[PATH_MAX]; /* --state-dir, FORKBOX_STATE_DIR */
    char run_dir[PATH_MAX];   /* --run-dir, FORKBOX_RUN_DIR */
    char init_path[PATH_MAX]; /* --init, FORKBOX_INIT; "" = look beside forkboxd */
    char cache_dir[PATH_MAX]; /* --cache-dir, FORKBOX_CACHE_DIR */
    char dns_upstream[64];    /* --dns-upstream, FORKBOX_DNS_UPSTREAM; "": the host's resolv.conf */
    char criu_path[PATH_MAX]; /* --criu, FORKBOX_CRIU; "": the install path, else PATH */
    uint32_t uid_pool_start;  /* --uid-pool-start, FORKBOX_UID_POOL_START */
    uint32_t uid_pool_slots;  /* --uid-pool-slots, FORKBOX_UID_POOL_SLOTS */
    uint32_t max_sandboxes;   /* --max-sandboxes, FORKBOX_MAX_SANDBOXES */
    uint32_t warm_pool;       /* --warm-pool, FORKBOX_WARM_POOL */
    bool storage_plain;       /* --storage=plain, FORKBOX_STORAGE=plain: no btrfs pool, no reflinks */
    uint64_t storage_bytes;   /* --storage-size, FORKBOX_STORAGE_SIZE; 0: the default */
    bool build_default;       /* --no-default-template turns it off */
    bool host_tuning;         /* --no-host-tuning turns it off */
    bool debug;               /* --debug, FORKBOX_DEBUG=1 */
    bool stop_sandboxes;      /* --stop-sandboxes, FORKBOX_STOP_SANDBOXES=1: delete them on SIGTERM/SIGINT */
    /* the subcommand: "serve" (default), "add-key", "version", "help" */
    char command[16];
    char command_arg[64];
};

/* Fills cfg from defaults, envp (NULL-terminated "K=V" list; NULL = none)
 * and argv.  FB_ERR_BAD_REQUEST with a message fit for the terminal on a
 * bad flag or value. */
int fb_daemon_config_parse(struct fb_daemon_config *cfg, int argc, char **argv, char **envp, fb_error_t *err);

/* Parses "HOST:PORT" (or "none") into cfg. */
int fb_daemon_config_listen(struct fb_daemon_config *cfg, const char *value, fb_error_t *err);

/* The usage text. */
const char *fb_daemon_usage(void);

#endif
