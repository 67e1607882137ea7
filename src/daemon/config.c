#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../runtime/storage.h"

static const char usage[] =
    "usage: forkboxd [options]            run the daemon\n"
    "       forkboxd [options] add-key TENANT   create an API key for TENANT and print it\n"
    "       forkboxd --version\n"
    "\n"
    "options (environment variable in brackets):\n"
    "  --socket PATH         unix socket to listen on [FORKBOX_SOCKET] (/run/forkbox/forkbox.sock)\n"
    "  --listen HOST:PORT    TCP address, or 'none' [FORKBOX_LISTEN] (127.0.0.1:7420)\n"
    "  --state-dir DIR       database, templates, sandboxes [FORKBOX_STATE_DIR] (/var/lib/forkbox)\n"
    "  --run-dir DIR         runtime sockets [FORKBOX_RUN_DIR] (/run/forkbox)\n"
    "  --cache-dir DIR       package cache for template builds [FORKBOX_CACHE_DIR] (/var/cache/forkbox)\n"
    "  --init PATH           forkbox-init binary [FORKBOX_INIT] (found beside forkboxd)\n"
    "  --criu PATH           criu binary for memory checkpoints [FORKBOX_CRIU]\n"
    "                        (/usr/local/lib/forkbox/criu/criu, else criu on PATH)\n"
    "  --uid-pool-start N    first host uid given to sandboxes [FORKBOX_UID_POOL_START] (2000000)\n"
    "  --uid-pool-slots N    number of 65536-id ranges [FORKBOX_UID_POOL_SLOTS] (1024)\n"
    "  --max-sandboxes N     per tenant [FORKBOX_MAX_SANDBOXES] (256)\n"
    "  --warm-pool N         default-template sandboxes kept started ahead [FORKBOX_WARM_POOL] (4)\n"
    "  --storage MODE        auto (btrfs reflinks: the state dir's btrfs, else a pool file) or plain\n"
    "                        [FORKBOX_STORAGE] (auto)\n"
    "  --storage-size SIZE   size of a new pool STATE_DIR/storage.btrfs, e.g. 64G [FORKBOX_STORAGE_SIZE]\n"
    "                        (the lesser of 64G and the free space; sparse)\n"
    "  --dns-upstream IP     resolver that sandboxes' DNS queries are relayed to [FORKBOX_DNS_UPSTREAM]\n"
    "                        (the first nameserver of /etc/resolv.conf)\n"
    "  --no-default-template do not build the default template on start\n"
    "  --no-host-tuning      leave cgroup2 mount options alone (docs/architecture.md)\n"
    "  --stop-sandboxes      on SIGTERM/SIGINT delete every sandbox before exiting "
    "[FORKBOX_STOP_SANDBOXES=1]\n"
    "                        (default: sandboxes keep running and are re-adopted on the next start)\n"
    "  --debug               verbose logs [FORKBOX_DEBUG=1]\n";

const char *fb_daemon_usage(void)
{
    return usage;
}

int fb_daemon_config_listen(struct fb_daemon_config *cfg, const char *value, fb_error_t *err)
{
    if (strcmp(value, "none") == 0 || value[0] == '\0') {
        cfg->tcp_enabled = false;
        return 0;
    }
    const char *colon = strrchr(value, ':');
    if (colon == NULL || colon == value || (size_t)(colon - value) >= sizeof cfg->listen_host)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "listen: expected HOST:PORT or none, got '%s'",
                            value);
    char *end = NULL;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || *end || colon[1] == '\0' || port < 1 || port > 65535)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "listen: port must be 1..65535 in '%s'", value);
    memcpy(cfg->listen_host, value, (size_t)(colon - value));
    cfg->listen_host[colon - value] = '\0';
    cfg->listen_port = (uint16_t)port;
    cfg->tcp_enabled = true;
    return 0;
}

static int set_u32(uint32_t *dst, const char *name, const char *v, uint32_t min, uint32_t max,
                   fb_error_t *err)
{
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || *end || v[0] == '\0' || v[0] == '-' || n < min || n > max)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: must be an integer in %u..%u, got '%s'", name,
                            min, max, v);
    *dst = (uint32_t)n;
    return 0;
}

static int set_str(char *dst, size_t len, const char *name, const char *v, fb_error_t *err)
{
    if (fb_strlcpy(dst, v, len) < 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: value too long", name);
    return 0;
}

/* A size in bytes with an optional binary suffix (K, M, G, T). */
static int set_size(uint64_t *dst, const char *name, const char *v, uint64_t min, uint64_t max,
                    fb_error_t *err)
{
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    unsigned shift = 0;
    if (end != NULL && *end != '\0' && end[1] == '\0') {
        const char *units = "KMGT";
        const char *u = strchr(units, *end == 'k' ? 'K' : *end);
        if (u != NULL && *u != '\0') {
            shift = 10u * (unsigned)(u - units + 1);
            end++;
        }
    }
    if (errno || end == NULL || *end || v[0] == '\0' || v[0] == '-' || n > (max >> shift) ||
        (n << shift) < min)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                            "%s: must be a size from %lluM to %lluT (bytes, or with K, M, G or T), got '%s'",
                            name, (unsigned long long)(min >> 20), (unsigned long long)(max >> 40), v);
    *dst = (uint64_t)n << shift;
    return 0;
}

/* One setting by its long name, from a flag or an environment variable. */
static int apply(struct fb_daemon_config *cfg, const char *name, const char *v, fb_error_t *err)
{
    if (strcmp(name, "socket") == 0)
        return set_str(cfg->socket_path, sizeof cfg->socket_path, name, v, err);
    if (strcmp(name, "listen") == 0)
        return fb_daemon_config_listen(cfg, v, err);
    if (strcmp(name, "state-dir") == 0)
        return set_str(cfg->state_dir, sizeof cfg->state_dir, name, v, err);
    if (strcmp(name, "run-dir") == 0)
        return set_str(cfg->run_dir, sizeof cfg->run_dir, name, v, err);
    if (strcmp(name, "cache-dir") == 0)
        return set_str(cfg->cache_dir, sizeof cfg->cache_dir, name, v, err);
    if (strcmp(name, "init") == 0)
        return set_str(cfg->init_path, sizeof cfg->init_path, name, v, err);
    if (strcmp(name, "criu") == 0)
        return set_str(cfg->criu_path, sizeof cfg->criu_path, name, v, err);
    if (strcmp(name, "uid-pool-start") == 0)
        return set_u32(&cfg->uid_pool_start, name, v, 65536, 0xfffffffeU - 65536U * 4096U, err);
    if (strcmp(name, "uid-pool-slots") == 0)
        return set_u32(&cfg->uid_pool_slots, name, v, 1, 4096, err);
    if (strcmp(name, "max-sandboxes") == 0)
        return set_u32(&cfg->max_sandboxes, name, v, 1, 100000, err);
    if (strcmp(name, "warm-pool") == 0)
        return set_u32(&cfg->warm_pool, name, v, 0, 256, err);
    if (strcmp(name, "storage") == 0) {
        if (strcmp(v, "plain") != 0 && strcmp(v, "auto") != 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "storage: must be auto or plain, got '%s'", v);
        cfg->storage_plain = strcmp(v, "plain") == 0;
        return 0;
    }
    if (strcmp(name, "storage-size") == 0)
        return set_size(&cfg->storage_bytes, name, v, FB_STORAGE_MIN_BYTES, FB_STORAGE_MAX_BYTES, err);
    if (strcmp(name, "dns-upstream") == 0)
        return set_str(cfg->dns_upstream, sizeof cfg->dns_upstream, name, v, err);
    return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "unknown option --%s", name);
}

static const struct {
    const char *env, *name;
} env_map[] = {
    {"FORKBOX_SOCKET", "socket"},
    {"FORKBOX_LISTEN", "listen"},
    {"FORKBOX_STATE_DIR", "state-dir"},
    {"FORKBOX_RUN_DIR", "run-dir"},
    {"FORKBOX_CACHE_DIR", "cache-dir"},
    {"FORKBOX_INIT", "init"},
    {"FORKBOX_CRIU", "criu"},
    {"FORKBOX_UID_POOL_START", "uid-pool-start"},
    {"FORKBOX_UID_POOL_SLOTS", "uid-pool-slots"},
    {"FORKBOX_MAX_SANDBOXES", "max-sandboxes"},
    {"FORKBOX_WARM_POOL", "warm-pool"},
    {"FORKBOX_DNS_UPSTREAM", "dns-upstream"},
    {"FORKBOX_STORAGE", "storage"},
    {"FORKBOX_STORAGE_SIZE", "storage-size"},
};

int fb_daemon_config_parse(struct fb_daemon_config *cfg, int argc, char **argv, char **envp, fb_error_t *err)
{
    memset(cfg, 0, sizeof *cfg);
    strcpy(cfg->socket_path, "/run/forkbox/forkbox.sock");
    strcpy(cfg->listen_host, "127.0.0.1");
    cfg->listen_port = 7420;
    cfg->tcp_enabled = true;
    strcpy(cfg->state_dir, "/var/lib/forkbox");
    strcpy(cfg->run_dir, "/run/forkbox");
    strcpy(cfg->cache_dir, "/var/cache/forkbox");
    cfg->uid_pool_start = 2000000;
    cfg->uid_pool_slots = 1024;
    cfg->max_sandboxes = 256;
    cfg->warm_pool = 4;
    cfg->build_default = true;
    cfg->host_tuning = true;
    strcpy(cfg->command, "serve");

    for (char **e = envp; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (eq == NULL)
            continue;
        size_t klen = (size_t)(eq - *e);
        if (klen == 13 && strncmp(*e, "FORKBOX_DEBUG", 13) == 0) {
            cfg->debug = strcmp(eq + 1, "1") == 0 || strcmp(eq + 1, "true") == 0;
            continue;
        }
        if (klen == 22 && strncmp(*e, "FORKBOX_STOP_SANDBOXES", 22) == 0) {
            cfg->stop_sandboxes = strcmp(eq + 1, "1") == 0 || strcmp(eq + 1, "true") == 0;
            continue;
        }
        for (size_t i = 0; i < sizeof env_map / sizeof env_map[0]; i++) {
            if (strlen(env_map[i].env) == klen && strncmp(*e, env_map[i].env, klen) == 0 &&
                apply(cfg, env_map[i].name, eq + 1, err) < 0)
                return fb_error_wrap(err, "%s", env_map[i].env);
        }
    }

    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strncmp(a, "--", 2) != 0)
            break;
        const char *name = a + 2;
        if (strcmp(name, "help") == 0) {
            strcpy(cfg->command, "help");
            return 0;
        }
        if (strcmp(name, "version") == 0) {
            strcpy(cfg->command, "version");
            return 0;
        }
        if (strcmp(name, "debug") == 0) {
            cfg->debug = true;
            continue;
        }
        if (strcmp(name, "no-default-template") == 0) {
            cfg->build_default = false;
            continue;
        }
        if (strcmp(name, "no-host-tuning") == 0) {
            cfg->host_tuning = false;
            continue;
        }
        if (strcmp(name, "stop-sandboxes") == 0) {
            cfg->stop_sandboxes = true;
            continue;
        }
        char key[32];
        const char *value;
        const char *eq = strchr(name, '=');
        if (eq != NULL) {
            if ((size_t)(eq - name) >= sizeof key)
                return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "unknown option %s", a);
            memcpy(key, name, (size_t)(eq - name));
            key[eq - name] = '\0';
            value = eq + 1;
        } else {
            if (fb_strlcpy(key, name, sizeof key) < 0)
                return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "unknown option %s", a);
            if (i + 1 >= argc)
                return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "option %s needs a value", a);
            value = argv[++i];
        }
        if (apply(cfg, key, value, err) < 0)
            return -1;
    }
    if (i < argc) {
        if (strcmp(argv[i], "add-key") == 0) {
            if (i + 2 != argc)
                return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "usage: forkboxd add-key TENANT");
            strcpy(cfg->command, "add-key");
            if (set_str(cfg->command_arg, sizeof cfg->command_arg, "tenant", argv[i + 1], err) < 0)
                return -1;
            const char *t = cfg->command_arg;
            /* names starting with '_' are forkbox's own (the warm pool) */
            if (!((*t >= 'a' && *t <= 'z') || (*t >= '0' && *t <= '9')))
                return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "tenant: must start with [a-z0-9]");
            for (; *t; t++)
                if (!((*t >= 'a' && *t <= 'z') || (*t >= '0' && *t <= '9') || *t == '-' || *t == '_'))
                    return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "tenant: use [a-z0-9_-]");
            return 0;
        }
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "unknown command '%s'", argv[i]);
    }
    return 0;
}
