/* forkboxd: the forkbox daemon. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../api/api.h"
#include "../common/cleanup.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../core/core.h"
#include "config.h"

#ifndef FORKBOX_LIBEXECDIR
#define FORKBOX_LIBEXECDIR "/usr/local/libexec/forkbox"
#endif

extern char **environ;

static volatile sig_atomic_t stop_requested;
/* the signal may land on any of the daemon's threads, not the one asleep
 * in the main loop: the handler wakes it through this pipe */
static int stop_pipe[2] = {-1, -1};

static void on_stop(int sig)
{
    (void)sig;
    stop_requested = 1;
    int e = errno;
    if (stop_pipe[1] >= 0)
        (void)!write(stop_pipe[1], "s", 1);
    errno = e;
}

/* forkbox-init ships beside forkboxd: in the build tree, or installed. */
static int find_init(char *out, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        const char *dir = dirname(exe);
        static const char *const rel[] = {"forkbox-init", "../init/forkbox-init",
                                          "../libexec/forkbox/forkbox-init"};
        for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
            if (fb_snprintf(out, len, "%s/%s", dir, rel[i]) == 0 && access(out, X_OK) == 0)
                return 0;
        }
    }
    if (fb_snprintf(out, len, "%s/forkbox-init", FORKBOX_LIBEXECDIR) == 0 && access(out, X_OK) == 0)
        return 0;
    return -1;
}

static int add_key(const struct fb_daemon_config *cfg)
{
    char path[PATH_MAX];
    cleanup_error fb_error_t err = NULL;
    fb_store *store = NULL;
    if (fb_snprintf(path, sizeof path, "%s/forkbox.db", cfg->state_dir) < 0 ||
        fb_mkdir_p(cfg->state_dir, 0711) < 0 || fb_store_open(path, &store, &err) < 0) {
        fprintf(stderr, "forkboxd: %s\n", err ? err->msg : "state dir");
        return 1;
    }
    char key[FB_ID_MAX];
    int rc = 1;
    if (fb_core_add_key(store, cfg->command_arg, key, &err) == 0) {
        printf("%s\n", key);
        rc = 0;
    } else {
        fprintf(stderr, "forkboxd: %s\n", err->msg);
    }
    fb_store_close(store);
    return rc;
}

/* --stop-sandboxes: deletes the sandboxes of every tenant, as DELETE
 * /v1/sandboxes/{id} would (every process gets SIGKILL now; the reaper's
 * final pass in fb_core_close() removes cgroups, networks and writable
 * layers).  The warm pool (internal tenants, names starting with '_') is
 * drained by fb_core_close() on every stop anyway.  Returns the number of
 * sandboxes that could not be deleted. */
static size_t stop_sandboxes(struct fb_core *core)
{
    struct fb_sandbox_row *rows = NULL;
    size_t n = 0, deleted = 0, failed = 0;
    cleanup_error fb_error_t err = NULL;
    if (fb_store_sandbox_list(core->store, NULL, &rows, &n, &err) < 0) {
        fb_errorf("--stop-sandboxes: cannot list sandboxes: %s", err->msg);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (rows[i].tenant[0] == '_' || strcmp(rows[i].state, "deleting") == 0)
            continue;
        cleanup_error fb_error_t e = NULL;
        if (fb_sandbox_delete(core, rows[i].tenant, rows[i].id, &e) < 0) {
            fb_warn("--stop-sandboxes: cannot delete %s: %s", rows[i].id, e->msg);
            failed++;
        } else {
            deleted++;
        }
    }
    fb_sandbox_rows_free(rows, n);
    fb_info("--stop-sandboxes: deleting %zu sandbox(es)%s", deleted,
            failed ? "; some could not be deleted" : "");
    return failed;
}

int main(int argc, char **argv)
{
    struct fb_daemon_config cfg;
    cleanup_error fb_error_t err = NULL;
    if (fb_daemon_config_parse(&cfg, argc, argv, environ, &err) < 0) {
        fprintf(stderr, "forkboxd: %s\n\n%s", err->msg, fb_daemon_usage());
        return 2;
    }
    if (strcmp(cfg.command, "help") == 0) {
        fputs(fb_daemon_usage(), stdout);
        return 0;
    }
    if (strcmp(cfg.command, "version") == 0) {
        printf("forkboxd %s\n", FORKBOX_VERSION);
        return 0;
    }
    if (geteuid() != 0) {
        fprintf(stderr, "forkboxd: must run as root (it creates namespaces, mounts and cgroups)\n");
        return 1;
    }
    if (strcmp(cfg.command, "add-key") == 0)
        return add_key(&cfg);
    fb_log_set_level(cfg.debug ? FB_LOG_DEBUG : FB_LOG_INFO);
    if (cfg.init_path[0] == '\0' && find_init(cfg.init_path, sizeof cfg.init_path) < 0) {
        fprintf(stderr, "forkboxd: cannot find forkbox-init beside forkboxd; pass --init PATH\n");
        return 1;
    }

    signal(SIGPIPE, SIG_IGN);
    if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
        fprintf(stderr, "forkboxd: pipe: %s\n", strerror(errno));
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_stop};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    umask(022);

    struct fb_core_config ccfg = {
        .uid_pool_start = cfg.uid_pool_start,
        .uid_pool_slots = cfg.uid_pool_slots,
        .max_sandboxes = cfg.max_sandboxes,
        .build_default = cfg.build_default,
        .host_tuning = cfg.host_tuning,
        .warm_pool = cfg.warm_pool,
        .storage_plain = cfg.storage_plain,
        .storage_bytes = cfg.storage_bytes,
    };
    fb_strlcpy(ccfg.state_dir, cfg.state_dir, sizeof ccfg.state_dir);
    fb_strlcpy(ccfg.run_dir, cfg.run_dir, sizeof ccfg.run_dir);
    fb_strlcpy(ccfg.init_path, cfg.init_path, sizeof ccfg.init_path);
    fb_strlcpy(ccfg.cache_dir, cfg.cache_dir, sizeof ccfg.cache_dir);
    fb_strlcpy(ccfg.dns_upstream, cfg.dns_upstream, sizeof ccfg.dns_upstream);
    fb_strlcpy(ccfg.criu_path, cfg.criu_path, sizeof ccfg.criu_path);

    static struct fb_core core;
    if (fb_core_open(&core, &ccfg, &err) < 0) {
        fb_errorf("cannot start: %s", err->msg);
        fb_core_close(&core);
        return 1;
    }
    char key[FB_ID_MAX];
    if (fb_core_bootstrap_key(&core, key, &err) < 0) {
        fb_errorf("cannot create the API key: %s", err->msg);
        fb_core_close(&core);
        return 1;
    }
    if (key[0] != '\0')
        fb_info("created API key in %s/api-key", cfg.state_dir);

    static struct fb_api api;
    if (fb_api_start(&api, &core, cfg.socket_path[0] ? cfg.socket_path : NULL,
                     cfg.tcp_enabled ? cfg.listen_host : NULL, cfg.listen_port, &err) < 0) {
        fb_errorf("cannot listen: %s", err->msg);
        fb_core_close(&core);
        return 1;
    }
    fb_info("forkboxd %s listening on %s%s%s:%u (state %s)", FORKBOX_VERSION, cfg.socket_path,
            cfg.tcp_enabled ? " and http://" : "", cfg.tcp_enabled ? cfg.listen_host : "",
            cfg.tcp_enabled ? cfg.listen_port : 0, cfg.state_dir);
    while (!stop_requested) {
        struct pollfd p = {.fd = stop_pipe[0], .events = POLLIN};
        poll(&p, 1, 1000);
    }
    fb_api_stop(&api);
    int rc = 0;
    if (cfg.stop_sandboxes) {
        fb_info("stopping; --stop-sandboxes: deleting every sandbox first");
        rc = stop_sandboxes(&core) == 0 ? 0 : 1;
    } else {
        fb_info("stopping; sandboxes keep running and are re-adopted on the next start");
    }
    fb_core_close(&core);
    return rc;
}
