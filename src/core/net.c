/* Sandbox networks: a veth pair per networked sandbox, addressed from
 * FB_NET_PREFIX by the sandbox's uid slot, and a host-side nftables table
 * that decides what may leave.  Everything that enforces the policy is on
 * the host side of the pair: root inside the sandbox has no CAP_NET_ADMIN
 * and could only change its own end, which the host does not trust. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/util.h"
#include "allow.h"
#include "../runtime/container.h"
#include "../runtime/initconn.h"
#include "../runtime/netlink.h"
#include "../runtime/nft.h"
#include "core.h"
#include "internal.h"

/* 10.224.0.0/12, a /30 per 65536-id range (uid_base >> 16): .1 the host's
 * end, .2 the sandbox's.  Keyed on the absolute range, so daemons with
 * disjoint uid pools never pick the same link names or addresses. */
#define FB_NET_PREFIX 0x0ae00000U

/* DNS to the sandbox's gateway goes to forkbox's resolver (FB_DNS_PORT);
 * DNS to any other server, and DNS over TLS, is refused.
 * Refused packets are rejected (admin-prohibited), not dropped, so a
 * program inside fails at once instead of waiting for a timeout.
 * Destinations no mode reaches: this host's loopback, private and
 * link-local ranges (cloud metadata lives at 169.254.169.254), shared
 * address space, multicast, broadcast and reserved space.  Traffic to the
 * host itself never gets here: the input chain drops it.
 * Each daemon has a table of its own, forkbox_<first slot>, whose rules
 * match only its own sandboxes' addresses (its uid pool's slots), so
 * daemons with disjoint uid pools do not judge each other's sandboxes.
 * IPv6 from any sandbox link is refused by every such table alike. */
#define BASE_RULES_FMT                                                                                       \
    "table inet %s\n"                                                                                        \
    "delete table inet %s\n"                                                                                 \
    "table inet %s {\n"                                                                                      \
    "  set blocked4 {\n"                                                                                     \
    "    type ipv4_addr; flags interval\n"                                                                   \
    "    elements = { %s }\n"                                                                                \
    "  }\n"                                                                                                  \
    "  set proxied {\n"                                                                                      \
    "    type ifname\n"                                                                                      \
    "  }\n"                                                                                                  \
    "  map m_out { type ifname : counter; }\n"                                                               \
    "  map m_in { type ifname : counter; }\n"                                                                \
    "  map m_conn { type ifname : counter; }\n"                                                              \
    "  map m_dblk { type ifname : counter; }\n"                                                              \
    "  map m_dpro { type ifname : counter; }\n"                                                              \
    "  map m_ddns { type ifname : counter; }\n"                                                              \
    "  map m_dpol { type ifname : counter; }\n"                                                              \
    "  map m_dhst { type ifname : counter; }\n"                                                              \
    "  map sandboxes {\n"                                                                                    \
    "    type ifname : verdict\n"                                                                            \
    "  }\n"                                                                                                  \
    "  chain forward {\n"                                                                                    \
    "    type filter hook forward priority filter; policy accept\n"                                          \
    "    iifname \"fbv*\" meta nfproto ipv6 counter name iifname map @m_dpro\n"                              \
    "    iifname \"fbv*\" meta nfproto ipv6 counter reject with icmpx type admin-prohibited\n"               \
    "    iifname \"fbv*\" ip saddr %s counter name iifname map @m_out\n"                                     \
    "    iifname \"fbv*\" ip saddr %s ct state new counter name iifname map @m_conn\n"                       \
    "    iifname \"fbv*\" ip saddr %s jump egress\n"                                                         \
    "    oifname \"fbv*\" ip daddr %s counter name oifname map @m_in\n"                                      \
    "    oifname \"fbv*\" ip daddr %s ct state established,related accept\n"                                 \
    "    oifname \"fbv*\" ip daddr %s counter drop\n"                                                        \
    "  }\n"                                                                                                  \
    "  chain egress {\n"                                                                                     \
    "    ct state established,related accept\n"                                                              \
    "    ip daddr @blocked4 counter name iifname map @m_dblk\n"                                              \
    "    ip daddr @blocked4 counter reject with icmpx type admin-prohibited\n"                               \
    "    meta l4proto != tcp counter name iifname map @m_dpro\n"                                             \
    "    meta l4proto != tcp counter reject with icmpx type admin-prohibited\n"                              \
    "    tcp dport { 53, 853 } counter name iifname map @m_ddns\n"                                           \
    "    tcp dport { 53, 853 } counter reject with icmpx type admin-prohibited\n"                            \
    "    iifname vmap @sandboxes\n"                                                                          \
    "    counter name iifname map @m_dpol\n"                                                                 \
    "    counter reject with icmpx type admin-prohibited\n"                                                  \
    "  }\n"                                                                                                  \
    "  chain open {\n"                                                                                       \
    "    accept\n"                                                                                           \
    "  }\n"                                                                                                  \
    "  chain input {\n"                                                                                      \
    "    type filter hook input priority filter; policy accept\n"                                            \
    "    iifname \"fbv*\" meta nfproto ipv6 counter name iifname map @m_dpro\n"                              \
    "    iifname \"fbv*\" meta nfproto ipv6 counter reject with icmpx type admin-prohibited\n"               \
    "    iifname \"fbv*\" ip saddr %s counter name iifname map @m_out\n"                                     \
    "    iifname \"fbv*\" ip saddr %s ct state established,related accept\n"                                 \
    "    iifname \"fbv*\" ip saddr %s meta l4proto { tcp, udp } th dport 10053 accept\n"                     \
    "    iifname \"fbv*\" ip saddr %s tcp dport { 10080, 10443 } accept\n"                                   \
    "    iifname \"fbv*\" ip saddr %s counter name iifname map @m_dhst\n"                                    \
    "    iifname \"fbv*\" ip saddr %s counter reject with icmpx type admin-prohibited\n"                     \
    "  }\n"                                                                                                  \
    "  chain output {\n"                                                                                     \
    "    type filter hook output priority filter; policy accept\n"                                           \
    "    oifname \"fbv*\" counter name oifname map @m_in\n"                                                  \
    "  }\n"                                                                                                  \
    "  chain prerouting {\n"                                                                                 \
    "    type nat hook prerouting priority dstnat; policy accept\n"                                          \
    "    iifname \"fbv*\" ip saddr %s fib daddr type local meta l4proto { tcp, udp } th dport 53 redirect "  \
    "to :10053\n"                                                                                            \
    "    iifname @proxied tcp dport 80 redirect to :10080\n"                                                 \
    "    iifname @proxied tcp dport 443 redirect to :10443\n"                                                \
    "  }\n"                                                                                                  \
    "  chain postrouting {\n"                                                                                \
    "    type nat hook postrouting priority srcnat; policy accept\n"                                         \
    "    ip saddr %s oifname != \"fbv*\" masquerade\n"                                                       \
    "  }\n"                                                                                                  \
    "}\n"

_Static_assert(FB_DNS_PORT == 10053, "base_rules names the resolver's port");
_Static_assert(FB_EGRESS_HTTP_PORT == 10080 && FB_EGRESS_TLS_PORT == 10443,
               "base_rules names the proxy's ports");

static int nft_apply(struct fb_core *core, const char *cmds, fb_error_t *err)
{
    pthread_mutex_lock(&core->net_lock);
    int r = fb_nft_run(&core->nft, cmds, err);
    pthread_mutex_unlock(&core->net_lock);
    return r;
}

int fb_net_open(struct fb_core *core)
{
    cleanup_error fb_error_t err = NULL;
    uint32_t first = core->cfg.uid_pool_start / FB_UID_COUNT;
    snprintf(core->net_table, sizeof core->net_table, "forkbox_%u", first);
    struct in_addr lo = {htonl(FB_NET_PREFIX + first * 4)};
    struct in_addr hi = {htonl(FB_NET_PREFIX + (first + core->cfg.uid_pool_slots) * 4 - 1)};
    char lo_s[INET_ADDRSTRLEN], hi_s[INET_ADDRSTRLEN], range[2 * INET_ADDRSTRLEN + 2];
    inet_ntop(AF_INET, &lo, lo_s, sizeof lo_s);
    inet_ntop(AF_INET, &hi, hi_s, sizeof hi_s);
    snprintf(range, sizeof range, "%s-%s", lo_s, hi_s);
    const char *t = core->net_table;
    char rules[sizeof BASE_RULES_FMT + 16 * sizeof range + 256];
    snprintf(rules, sizeof rules, BASE_RULES_FMT, t, t, t, fb_allow_blocked_elements(), range, range, range,
             range, range, range, range, range, range, range, range, range, range, range);
    if (fb_nft_open(&core->nft, &err) < 0 || fb_nft_run(&core->nft, rules, &err) < 0) {
        snprintf(core->net_missing, sizeof core->net_missing, "sandbox networks unavailable: %s", err->msg);
        fb_warn("%s", core->net_missing);
        return -1;
    }
    core->net_ready = true;
    return 0;
}

/* A sandbox's allowlist, parsed once and shared read-only by the resolver's
 * workers: each lookup takes a reference. */
struct fb_allowset {
    atomic_int refs;
    size_t n;
    struct fb_allow items[];
};

static struct fb_allowset *allowset_new(json_t *allow)
{
    size_t n = json_array_size(allow);
    struct fb_allowset *a = calloc(1, sizeof *a + n * sizeof a->items[0]);
    if (a == NULL)
        return NULL;
    atomic_init(&a->refs, 1);
    size_t i;
    json_t *e;
    json_array_foreach(allow, i, e)
    {
        /* stored entries were validated and made canonical at parse time */
        if (json_is_string(e) && fb_allow_parse(json_string_value(e), &a->items[a->n], NULL) == 0)
            a->n++;
    }
    return a;
}

void fb_net_entry_release(struct fb_net_entry *e)
{
    if (e->allow != NULL && atomic_fetch_sub(&e->allow->refs, 1) == 1)
        free(e->allow);
    e->allow = NULL;
}

/* The resolver finds a query's sandbox by its link address.  Takes over
 * the caller's reference to allow (may be NULL). */
static void table_put(struct fb_core *core, const struct fb_sandbox_row *row, const char *mode,
                      struct fb_allowset *allow)
{
    struct fb_net_entry e = {.slot = (uint32_t)(row->uid_base / FB_UID_COUNT), .allow = allow};
    fb_strlcpy(e.id, row->id, sizeof e.id);
    fb_strlcpy(e.tenant, row->tenant, sizeof e.tenant);
    fb_strlcpy(e.mode, mode, sizeof e.mode);
    pthread_mutex_lock(&core->net_lock);
    size_t i = 0;
    while (i < core->n_net_entries && core->net_entries[i].slot != e.slot)
        i++;
    if (i == core->n_net_entries) {
        if (core->n_net_entries == core->cap_net_entries) {
            size_t cap = core->cap_net_entries ? core->cap_net_entries * 2 : 16;
            struct fb_net_entry *n = realloc(core->net_entries, cap * sizeof *n);
            if (n == NULL) {
                pthread_mutex_unlock(&core->net_lock);
                fb_warn("sandbox %s: no memory for its DNS entry", row->id);
                fb_net_entry_release(&e);
                return;
            }
            core->net_entries = n;
            core->cap_net_entries = cap;
        }
        core->n_net_entries++;
    } else {
        fb_net_entry_release(&core->net_entries[i]);
    }
    core->net_entries[i] = e;
    pthread_mutex_unlock(&core->net_lock);
}

static void table_drop(struct fb_core *core, uint32_t slot)
{
    pthread_mutex_lock(&core->net_lock);
    for (size_t i = 0; i < core->n_net_entries; i++)
        if (core->net_entries[i].slot == slot) {
            fb_net_entry_release(&core->net_entries[i]);
            core->net_entries[i] = core->net_entries[--core->n_net_entries];
            break;
        }
    pthread_mutex_unlock(&core->net_lock);
}

bool fb_net_lookup(struct fb_core *core, struct in_addr addr, struct fb_net_entry *out)
{
    uint32_t a = ntohl(addr.s_addr);
    if ((a & 0xfff00000U) != FB_NET_PREFIX || (a & 3) != 2)
        return false;
    uint32_t slot = (a - FB_NET_PREFIX) / 4;
    bool found = false;
    pthread_mutex_lock(&core->net_lock);
    for (size_t i = 0; i < core->n_net_entries && !found; i++)
        if (core->net_entries[i].slot == slot) {
            *out = core->net_entries[i];
            if (out->allow != NULL)
                atomic_fetch_add(&out->allow->refs, 1);
            found = true;
        }
    pthread_mutex_unlock(&core->net_lock);
    return found;
}

void fb_net_close(struct fb_core *core)
{
    for (size_t i = 0; i < core->n_net_entries; i++)
        fb_net_entry_release(&core->net_entries[i]);
    free(core->net_entries);
    core->net_entries = NULL;
    core->n_net_entries = core->cap_net_entries = 0;
    /* the table stays: sandboxes keep their policy while no daemon runs */
    fb_nft_close(&core->nft);
    core->net_ready = false;
}

/* Link names and addresses of a sandbox, from its uid slot. */
struct net_names {
    char host[IFNAMSIZ], peer[IFNAMSIZ];
    struct in_addr gw, addr;
};

static int net_names(struct fb_core *core, const struct fb_sandbox_row *row, struct net_names *n,
                     fb_error_t *err)
{
    (void)core;
    int64_t slot = row->uid_base / FB_UID_COUNT;
    if (slot <= 0 || slot > 65535)
        return fb_error_set(err, FB_ERR_INTERNAL, ERANGE, "sandbox %s: uid range out of the network's range",
                            row->id);
    snprintf(n->host, sizeof n->host, "fbv%lld", (long long)slot);
    snprintf(n->peer, sizeof n->peer, "fbp%lld", (long long)slot);
    n->gw.s_addr = htonl(FB_NET_PREFIX + (uint32_t)slot * 4 + 1);
    n->addr.s_addr = htonl(FB_NET_PREFIX + (uint32_t)slot * 4 + 2);
    return 0;
}

/* The sandbox's end is configured from a thread that has joined the
 * sandbox's network namespace (setns affects only the calling thread). */
struct inside_job {
    int netns_fd;
    const struct net_names *n;
    fb_error_t err;
    int rc;
};

static void *configure_inside(void *arg)
{
    struct inside_job *j = arg;
    j->rc = -1;
    if (setns(j->netns_fd, CLONE_NEWNET) < 0) {
        fb_error_sys(&j->err, "join the sandbox's network namespace");
        return NULL;
    }
    struct fb_nl nl;
    if (fb_nl_open(&nl, &j->err) < 0)
        return NULL;
    struct in_addr any = {0};
    j->rc = fb_nl_addr_add4(&nl, "eth0", j->n->addr, 30, &j->err) == 0 &&
                    fb_nl_link_set_up(&nl, "eth0", true, &j->err) == 0 &&
                    fb_nl_route_add4(&nl, "eth0", any, 0, j->n->gw, &j->err) == 0
                ? 0
                : -1;
    fb_nl_close(&nl);
    return NULL;
}

/* Points the sandbox's resolv.conf at its gateway, where forkbox's
 * resolver answers.  Root inside may change it back; queries to any other
 * server are refused anyway. */
static int write_resolv_conf(const char *sock_path, struct in_addr gw, fb_error_t *err)
{
    char text[64], ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &gw, ip, sizeof ip);
    int len = snprintf(text, sizeof text, "nameserver %s\n", ip);
    cleanup_json json_t *req = fb_initconn_path_req("write", "/etc/resolv.conf");
    if (req == NULL || json_object_set_new(req, "mode", json_integer(0644)) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "build request");
    cleanup_close int fd = fb_initconn_open(sock_path, err);
    if (fd < 0 || fb_initconn_send(fd, req, err) < 0 ||
        fb_initconn_send_data(fd, FB_MSG_DATA, text, (size_t)len, err) < 0 ||
        fb_initconn_send_data(fd, FB_MSG_END, NULL, 0, err) < 0)
        return -1;
    return fb_initconn_recv_result(fd, NULL, err);
}

static int enable_forwarding(fb_error_t *err)
{
    char *v = NULL;
    size_t len = 0;
    if (fb_read_file("/proc/sys/net/ipv4/ip_forward", 16, &v, &len) == 0 && v[0] == '1') {
        free(v);
        return 0;
    }
    free(v);
    int r = fb_write_file("/proc/sys/net/ipv4/ip_forward", "1\n", 2, 0644);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "enable IPv4 forwarding");
    fb_info("enabled IPv4 forwarding for sandbox networks (forwarding of other traffic is left to the host's "
            "own firewall)");
    return 0;
}

/* An allowlist sandbox has a chain s<slot> of its own and four sets: n<slot>
 * (addresses its allowed names resolved to, any port) and np<slot> (the
 * same, for entries with a port), both filled by the resolver with
 * timeouts, and c<slot>/cp<slot> for its CIDR entries. */
static char *allowlist_rules(struct fb_core *core, uint32_t slot, const struct fb_allowset *a)
{
    const char *t = core->net_table;
    size_t cap = 2048 + a->n * 64;
    char *buf = malloc(cap);
    if (buf == NULL)
        return NULL;
    int len = snprintf(buf, cap,
                       "add set inet %s n%u { type ipv4_addr; flags timeout; }\n"
                       "add set inet %s np%u { type ipv4_addr . inet_service; flags timeout; }\n"
                       "add set inet %s c%u { type ipv4_addr; flags interval; }\n"
                       "add set inet %s cp%u { type ipv4_addr . inet_service; flags interval; }\n"
                       "flush set inet %s n%u\nflush set inet %s np%u\n"
                       "flush set inet %s c%u\nflush set inet %s cp%u\n"
                       "add chain inet %s s%u\nflush chain inet %s s%u\n"
                       "add rule inet %s s%u ip daddr @n%u accept\n"
                       "add rule inet %s s%u ip daddr . tcp dport @np%u accept\n"
                       "add rule inet %s s%u ip daddr @c%u accept\n"
                       "add rule inet %s s%u ip daddr . tcp dport @cp%u accept\n"
                       "add rule inet %s s%u counter name iifname map @m_dpol\n"
                       "add rule inet %s s%u counter reject with icmpx type admin-prohibited\n",
                       t, slot, t, slot, t, slot, t, slot, t, slot, t, slot, t, slot, t, slot, t, slot, t,
                       slot, t, slot, slot, t, slot, slot, t, slot, slot, t, slot, slot, t, slot, t, slot);
    for (size_t i = 0; i < a->n && len > 0 && (size_t)len < cap; i++) {
        const struct fb_allow *e = &a->items[i];
        if (e->kind != FB_ALLOW_CIDR)
            continue;
        struct fb_allow cidr = *e;
        cidr.port = 0;
        char net[FB_ALLOW_TEXT_MAX];
        fb_allow_format(&cidr, net, sizeof net);
        if (e->port == 0)
            len += snprintf(buf + len, cap - (size_t)len, "add element inet %s c%u { %s }\n", t, slot, net);
        else
            len += snprintf(buf + len, cap - (size_t)len, "add element inet %s cp%u { %s . %u }\n", t, slot,
                            net, e->port);
    }
    if (len < 0 || (size_t)len >= cap) {
        free(buf);
        return NULL;
    }
    return buf;
}

static void allowlist_drop(struct fb_core *core, uint32_t slot)
{
    static const char *const kinds[] = {"chain", "set", "set", "set", "set"};
    static const char *const names[] = {"s", "n", "np", "c", "cp"};
    for (size_t i = 0; i < 5; i++) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "delete %s inet %s %s%u\n", kinds[i], core->net_table, names[i], slot);
        fb_error_t e = NULL;
        if (nft_apply(core, cmd, &e) < 0)
            fb_error_release(&e); /* not an allowlist sandbox */
    }
}

/* Per-sandbox counters, one named counter per kind, reached from the
 * table's rules through the m_<kind> maps keyed by link name. */
static const char *const counter_kinds[] = {"out", "in", "conn", "dblk", "dpro", "ddns", "dpol", "dhst"};
#define N_COUNTERS (sizeof counter_kinds / sizeof counter_kinds[0])

/* Writes the commands adding the counters of slot into buf; returns their
 * length (>= cap: truncated). */
static size_t counters_cmds(struct fb_core *core, uint32_t slot, const char *link, char *buf, size_t cap)
{
    size_t len = 0;
    for (size_t i = 0; i < N_COUNTERS && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len,
                                "add counter inet %s %s%u\nadd element inet %s m_%s { \"%s\" : \"%s%u\" }\n",
                                core->net_table, counter_kinds[i], slot, core->net_table, counter_kinds[i],
                                link, counter_kinds[i], slot);
    return len;
}

static void counters_drop(struct fb_core *core, uint32_t slot, const char *link)
{
    for (size_t i = 0; i < N_COUNTERS; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "delete element inet %s m_%s { \"%s\" }\n", core->net_table,
                 counter_kinds[i], link);
        fb_error_t e = NULL;
        if (nft_apply(core, cmd, &e) < 0)
            fb_error_release(&e);
        snprintf(cmd, sizeof cmd, "delete counter inet %s %s%u\n", core->net_table, counter_kinds[i], slot);
        if (nft_apply(core, cmd, &e) < 0)
            fb_error_release(&e);
    }
}

/* The policy of mode for the sandbox: its verdict map entry, counters and,
 * for an allowlist, its chain and sets, in one nft transaction (each round
 * trip costs about a millisecond).  *allow receives the parsed allowlist. */
static int policy_apply(struct fb_core *core, const struct fb_sandbox_row *row, const struct net_names *n,
                        const char *mode, struct fb_allowset **allow, fb_error_t *err)
{
    *allow = NULL;
    uint32_t slot = (uint32_t)(row->uid_base / FB_UID_COUNT);
    const char *t = core->net_table;
    cleanup_free char *rules = NULL;
    char target[32];
    snprintf(target, sizeof target, "%s", "open");
    if (strcmp(mode, "allowlist") == 0) {
        cleanup_json json_t *spec = json_loads(row->spec_json ? row->spec_json : "{}", 0, NULL);
        *allow = allowset_new(json_object_get(json_object_get(spec, "network"), "allow"));
        rules = *allow ? allowlist_rules(core, slot, *allow) : NULL;
        if (rules == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "allowlist rules");
        snprintf(target, sizeof target, "s%u", slot);
    }
    char tail[N_COUNTERS * 160 + 512];
    size_t len = counters_cmds(core, slot, n->host, tail, sizeof tail);
    /* an allowlist sandbox's web traffic goes through the egress proxy */
    if (rules != NULL)
        len += (size_t)snprintf(tail + len, sizeof tail - len, "add element inet %s proxied { \"%s\" }\n", t,
                                n->host);
    len += (size_t)snprintf(tail + len, sizeof tail - len,
                            "add element inet %s sandboxes { \"%s\" : goto %s }\n", t, n->host, target);
    if (len >= sizeof tail)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "network policy commands");
    size_t rlen = rules ? strlen(rules) : 0;
    cleanup_free char *all = malloc(rlen + len + 1);
    if (all == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "network policy commands");
    memcpy(all, rules ? rules : "", rlen);
    memcpy(all + rlen, tail, len + 1);
    return nft_apply(core, all, err);
}

void fb_net_learn(struct fb_core *core, uint32_t slot, uint32_t ip, uint16_t port, uint32_t ttl)
{
    /* long enough to connect after the lookup, short enough to follow
     * changes; re-added (so the timeout restarts) on every answer */
    uint32_t t = ttl < 60 ? 60 : ttl > 3600 ? 3600 : ttl;
    struct in_addr a = {htonl(ip)};
    char s[INET_ADDRSTRLEN], elem[64], cmd[256];
    inet_ntop(AF_INET, &a, s, sizeof s);
    if (port == 0)
        snprintf(elem, sizeof elem, "%s", s);
    else
        snprintf(elem, sizeof elem, "%s . %u", s, port);
    const char *set = port == 0 ? "n" : "np";
    fb_error_t e = NULL;
    snprintf(cmd, sizeof cmd, "delete element inet %s %s%u { %s }\n", core->net_table, set, slot, elem);
    if (nft_apply(core, cmd, &e) < 0)
        fb_error_release(&e); /* not there yet */
    snprintf(cmd, sizeof cmd, "add element inet %s %s%u { %s timeout %us }\n", core->net_table, set, slot,
             elem, t);
    if (nft_apply(core, cmd, &e) < 0) {
        fb_warn("allowlist slot %u: learn %s: %s", slot, elem, e->msg);
        fb_error_release(&e);
    }
}

int fb_net_attach(struct fb_core *core, const struct fb_sandbox_row *row, pid_t init_pid, const char *mode,
                  fb_error_t *err)
{
    if (strcmp(mode, "none") == 0)
        return 0;
    if (!core->net_ready)
        return fb_error_set(err, FB_ERR_UNSUPPORTED, 0, "%s", core->net_missing);
    struct net_names n;
    if (net_names(core, row, &n, err) < 0 || enable_forwarding(err) < 0)
        return -1;
    char nspath[64];
    snprintf(nspath, sizeof nspath, "/proc/%d/ns/net", (int)init_pid);
    cleanup_close int netns = open(nspath, O_RDONLY | O_CLOEXEC);
    if (netns < 0)
        return fb_error_sys(err, "open %s", nspath);
    struct fb_nl nl;
    if (fb_nl_open(&nl, err) < 0)
        return -1;
    /* a link left by a crash before cleanup would make the create fail */
    fb_nl_link_delete(&nl, n.host, NULL);
    int rc = -1;
    /* the sandbox's end is made inside its namespace: moving a link there
     * afterwards waits for the kernel's RCU grace periods (17-28 ms here,
     * against about 1 ms for the whole pair) */
    if (fb_nl_veth_create(&nl, n.host, "eth0", netns, err) < 0 ||
        fb_nl_addr_add4(&nl, n.host, n.gw, 30, err) < 0 || fb_nl_link_set_up(&nl, n.host, true, err) < 0)
        goto out;
    struct inside_job job = {.netns_fd = netns, .n = &n};
    pthread_t t;
    if (pthread_create(&t, NULL, configure_inside, &job) != 0) {
        fb_error_set(err, FB_ERR_INTERNAL, EAGAIN, "start a network setup thread");
        goto out;
    }
    pthread_join(t, NULL);
    if (job.rc < 0) {
        *err = job.err;
        goto out;
    }
    struct fb_core_paths paths;
    struct fb_container_config cc;
    fb_core_container_config(core, row, "", &paths, &cc);
    struct fb_allowset *allow = NULL;
    rc = policy_apply(core, row, &n, mode, &allow, err) == 0 &&
                 write_resolv_conf(paths.sock_path, n.gw, err) == 0
             ? 0
             : -1;
    if (rc == 0) {
        table_put(core, row, mode, allow);
    } else {
        struct fb_net_entry tmp = {.allow = allow};
        fb_net_entry_release(&tmp);
    }
out:
    if (rc < 0) {
        fb_nl_link_delete(&nl, n.host, NULL);
        allowlist_drop(core, (uint32_t)(row->uid_base / FB_UID_COUNT));
    }
    fb_nl_close(&nl);
    if (rc < 0)
        return fb_error_wrap(err, "network for sandbox %s", row->id);
    return 0;
}

void fb_net_detach(struct fb_core *core, const struct fb_sandbox_row *row)
{
    if (!core->net_ready)
        return;
    struct net_names n;
    if (net_names(core, row, &n, NULL) < 0)
        return;
    /* most sandboxes never had a network: nothing of theirs is in the
     * table, and a dozen nft round trips per delete would slow every
     * teardown (and the reaper behind it) */
    uint32_t slot = (uint32_t)(row->uid_base / FB_UID_COUNT);
    bool known = false;
    pthread_mutex_lock(&core->net_lock);
    for (size_t i = 0; i < core->n_net_entries && !known; i++)
        known = core->net_entries[i].slot == slot;
    pthread_mutex_unlock(&core->net_lock);
    if (!known && if_nametoindex(n.host) == 0)
        return;

    char cmd[160];
    snprintf(cmd, sizeof cmd, "delete element inet %s sandboxes { \"%s\" }\n", core->net_table, n.host);
    fb_error_t e = NULL;
    if (nft_apply(core, cmd, &e) < 0)
        fb_error_release(&e); /* not there: it never had a network */
    snprintf(cmd, sizeof cmd, "delete element inet %s proxied { \"%s\" }\n", core->net_table, n.host);
    if (nft_apply(core, cmd, &e) < 0)
        fb_error_release(&e); /* not an allowlist sandbox */
    table_drop(core, (uint32_t)(row->uid_base / FB_UID_COUNT));
    allowlist_drop(core, (uint32_t)(row->uid_base / FB_UID_COUNT));
    counters_drop(core, (uint32_t)(row->uid_base / FB_UID_COUNT), n.host);
    struct fb_nl nl;
    if (fb_nl_open(&nl, NULL) == 0) {
        fb_nl_link_delete(&nl, n.host, NULL);
        fb_nl_close(&nl);
    }
}

int fb_net_restore(struct fb_core *core, const struct fb_sandbox_row *row, const char *mode)
{
    if (!core->net_ready || strcmp(mode, "none") == 0)
        return 0;
    struct net_names n;
    cleanup_error fb_error_t err = NULL;
    if (net_names(core, row, &n, &err) < 0 || if_nametoindex(n.host) == 0)
        return -1;
    struct fb_allowset *allow = NULL;
    if (policy_apply(core, row, &n, mode, &allow, &err) < 0) {
        fb_warn("sandbox %s: restore network policy: %s", row->id, err->msg);
        struct fb_net_entry tmp = {.allow = allow};
        fb_net_entry_release(&tmp);
        return -1;
    }
    table_put(core, row, mode, allow);
    return 0;
}

void fb_net_row_mode(const struct fb_sandbox_row *row, char mode[FB_NET_MODE_MAX])
{
    fb_strlcpy(mode, "none", FB_NET_MODE_MAX);
    cleanup_json json_t *spec = json_loads(row->spec_json ? row->spec_json : "{}", 0, NULL);
    const char *m = json_string_value(json_object_get(json_object_get(spec, "network"), "mode"));
    if (m != NULL && (strcmp(m, "open") == 0 || strcmp(m, "none") == 0 || strcmp(m, "allowlist") == 0))
        fb_strlcpy(mode, m, FB_NET_MODE_MAX);
}

bool fb_net_name_allowed(const struct fb_net_entry *e, const char *name, uint16_t *port)
{
    bool any = false, found = false;
    uint16_t lowest = 0;
    for (size_t i = 0; e->allow != NULL && i < e->allow->n; i++) {
        const struct fb_allow *a = &e->allow->items[i];
        if (!fb_allow_matches(a, name))
            continue;
        found = true;
        if (a->port == 0)
            any = true;
        else if (lowest == 0 || a->port < lowest)
            lowest = a->port;
    }
    *port = any ? 0 : lowest;
    return found;
}

/* Whether ip (and port) is an element of set<slot>: nft answers a "get"
 * only for a member (or the interval holding it). */
static bool in_set(struct fb_core *core, const char *set, uint32_t slot, uint32_t ip, int port)
{
    struct in_addr a = {htonl(ip)};
    char s[INET_ADDRSTRLEN], cmd[192];
    inet_ntop(AF_INET, &a, s, sizeof s);
    if (port < 0)
        snprintf(cmd, sizeof cmd, "get element inet %s %s%u { %s }\n", core->net_table, set, slot, s);
    else
        snprintf(cmd, sizeof cmd, "get element inet %s %s%u { %s . %d }\n", core->net_table, set, slot, s,
                 port);
    pthread_mutex_lock(&core->net_lock);
    cleanup_free char *out = NULL;
    fb_error_t e = NULL;
    bool found = fb_nft_query(&core->nft, cmd, &out, &e) == 0;
    pthread_mutex_unlock(&core->net_lock);
    fb_error_release(&e);
    return found;
}

bool fb_net_dst_learnt(struct fb_core *core, uint32_t slot, uint32_t ip, uint16_t port)
{
    return in_set(core, "n", slot, ip, -1) || in_set(core, "np", slot, ip, port);
}

bool fb_net_dst_listed(struct fb_core *core, uint32_t slot, uint32_t ip, uint16_t port)
{
    return in_set(core, "c", slot, ip, -1) || in_set(core, "cp", slot, ip, port);
}

json_t *fb_net_counters(struct fb_core *core, const struct fb_sandbox_row *row)
{
    char mode[FB_NET_MODE_MAX];
    fb_net_row_mode(row, mode);
    if (!core->net_ready || strcmp(mode, "none") == 0)
        return NULL;
    uint32_t slot = (uint32_t)(row->uid_base / FB_UID_COUNT);
    char cmds[N_COUNTERS * 96];
    size_t len = 0;
    for (size_t i = 0; i < N_COUNTERS; i++)
        len += (size_t)snprintf(cmds + len, sizeof cmds - len, "list counter inet %s %s%u\n", core->net_table,
                                counter_kinds[i], slot);
    cleanup_free char *out = NULL;
    fb_error_t e = NULL;
    pthread_mutex_lock(&core->net_lock);
    int r = fb_nft_query(&core->nft, cmds, &out, &e);
    pthread_mutex_unlock(&core->net_lock);
    if (r < 0) {
        fb_error_release(&e);
        return NULL;
    }
    /* "counter <kind><slot> { packets P bytes B }", in the order asked */
    unsigned long long packets[N_COUNTERS] = {0}, bytes[N_COUNTERS] = {0};
    const char *at = out;
    for (size_t i = 0; i < N_COUNTERS; i++) {
        char want[48];
        snprintf(want, sizeof want, "counter %s%u {", counter_kinds[i], slot);
        const char *c = strstr(at, want);
        const char *p = c ? strstr(c, "packets ") : NULL;
        if (p == NULL || sscanf(p, "packets %llu bytes %llu", &packets[i], &bytes[i]) != 2)
            return NULL;
        at = p;
    }
    return json_pack("{s:I, s:I, s:I, s:{s:I, s:I, s:I, s:I, s:I}}", "bytes_out", (json_int_t)bytes[0],
                     "bytes_in", (json_int_t)bytes[1], "connections", (json_int_t)packets[2], "denied",
                     "blocked_destination", (json_int_t)packets[3], "protocol", (json_int_t)packets[4], "dns",
                     (json_int_t)packets[5], "policy", (json_int_t)packets[6], "host",
                     (json_int_t)packets[7]);
}
