/* forkbox's DNS resolver for networked sandboxes.  Sandboxes' queries to
 * their gateway (port 53, UDP and TCP) are redirected by the host-side
 * nftables table to this server; queries to any other server never leave
 * (see net.c).  Each query is tied to its sandbox by source address,
 * judged by the sandbox's mode, logged to the audit trail, and either
 * relayed to the upstream resolver or answered here.  The answer is the
 * upstream's, relayed byte for byte. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/log.h"
#include "../common/util.h"
#include "core.h"
#include "dnsmsg.h"
#include "internal.h"

#define DNS_MAX_INFLIGHT 64 /* queries being relayed at once, over all sandboxes */
#define DNS_UPSTREAM_TIMEOUT_MS 3000
#define DNS_TCP_IDLE_MS 5000
#define DNS_TCP_QUERIES 32 /* per connection */

static atomic_int inflight;

/* The first IPv4 nameserver of the host's resolv.conf, as a default
 * upstream. */
static int host_nameserver(struct in_addr *out)
{
    cleanup_fclose FILE *f = fopen("/etc/resolv.conf", "re");
    if (f == NULL)
        return -1;
    char line[256], addr[64];
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, " nameserver %63s", addr) == 1 && inet_pton(AF_INET, addr, out) == 1)
            return 0;
    return -1;
}

static int bind_server(int type, fb_error_t *err)
{
    cleanup_close int fd = socket(AF_INET, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return fb_error_sys(err, "dns socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(FB_DNS_PORT)};
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
        return fb_error_sys(err, "bind the DNS resolver to port %d", FB_DNS_PORT);
    if (type == SOCK_STREAM && listen(fd, 64) < 0)
        return fb_error_sys(err, "listen on port %d", FB_DNS_PORT);
    return fb_steal_fd(&fd);
}

/* Decides and logs; true when the query may go upstream.  For an
 * allowlist, *port is the port the matching entry allows (0: any). */
static bool judge(struct fb_core *core, const struct fb_net_entry *e, const struct fb_dns_question *q,
                  uint16_t *port)
{
    *port = 0;
    bool allowed = strcmp(e->mode, "open") == 0 ||
                   (strcmp(e->mode, "allowlist") == 0 && fb_net_name_allowed(e, q->name, port));
    fb_audit_add(core, e->tenant, e->id, "dns", q->name, q->qtype, allowed ? "allowed" : "denied");
    return allowed;
}

/* An allowlist sandbox may connect to what its allowed names resolve to:
 * the addresses are let through before the answer reaches it. */
static void learn(struct fb_core *core, const struct fb_net_entry *e, uint16_t port,
                  const unsigned char *resp, size_t len)
{
    if (strcmp(e->mode, "allowlist") != 0)
        return;
    uint32_t ips[32], ttls[32];
    int n = fb_dns_answer_ipv4(resp, len, ips, ttls, 32);
    for (int i = 0; i < n; i++)
        fb_net_learn(core, e->slot, ips[i], port, ttls[i]);
}

/* Sends msg to the upstream over a fresh socket and waits for the answer. */
static ssize_t relay(const struct sockaddr_in *up, int type, const unsigned char *msg, size_t len,
                     const struct fb_dns_question *q, unsigned char *resp, size_t cap)
{
    cleanup_close int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (const struct sockaddr *)up, sizeof *up) < 0)
        return -1;
    struct timeval tv = {.tv_sec = DNS_UPSTREAM_TIMEOUT_MS / 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (type == SOCK_DGRAM) {
        if (send(fd, msg, len, 0) != (ssize_t)len)
            return -1;
        for (;;) { /* a stray datagram with another id is skipped */
            ssize_t n = recv(fd, resp, cap, 0);
            if (n < 0)
                return -1;
            if (fb_dns_answers(resp, (size_t)n, q))
                return n;
        }
    }
    unsigned char hdr[2] = {(unsigned char)(len >> 8), (unsigned char)len};
    if (fb_write_all(fd, hdr, 2) < 0 || fb_write_all(fd, msg, len) < 0)
        return -1;
    if (recv(fd, hdr, 2, MSG_WAITALL) != 2)
        return -1;
    size_t rlen = (size_t)hdr[0] << 8 | hdr[1];
    if (rlen > cap || recv(fd, resp, rlen, MSG_WAITALL) != (ssize_t)rlen || !fb_dns_answers(resp, rlen, q))
        return -1;
    return (ssize_t)rlen;
}

/* Answers one query: the upstream's answer, or a refusal made here. */
static ssize_t answer(struct fb_core *core, const struct fb_net_entry *e, int type, const unsigned char *msg,
                      size_t len, unsigned char *resp, size_t cap)
{
    struct fb_dns_question q;
    if (fb_dns_parse_query(msg, len, &q) < 0)
        return -1; /* not a query we answer: dropped */
    uint16_t port;
    if (!judge(core, e, &q, &port))
        return (ssize_t)fb_dns_refusal(msg, &q, FB_DNS_RCODE_NXDOMAIN, resp, cap);
    ssize_t n = relay(&core->dns.upstream, type, msg, len, &q, resp, cap);
    if (n < 0)
        return (ssize_t)fb_dns_refusal(msg, &q, FB_DNS_RCODE_SERVFAIL, resp, cap);
    learn(core, e, port, resp, (size_t)n);
    return n;
}

struct udp_job {
    struct fb_core *core;
    struct fb_net_entry entry;
    struct sockaddr_in from;
    size_t len;
    unsigned char msg[FB_DNS_MSG_MAX];
};

static void *udp_worker(void *arg)
{
    cleanup_free struct udp_job *j = arg;
    unsigned char resp[FB_DNS_MSG_MAX];
    ssize_t n = answer(j->core, &j->entry, SOCK_DGRAM, j->msg, j->len, resp, sizeof resp);
    if (n > 0)
        sendto(j->core->dns.l.fd[0], resp, (size_t)n, 0, (struct sockaddr *)&j->from, sizeof j->from);
    fb_net_entry_release(&j->entry);
    atomic_fetch_sub(&inflight, 1);
    return NULL;
}

struct tcp_job {
    struct fb_core *core;
    struct fb_net_entry entry;
    int fd;
};

static void *tcp_worker(void *arg)
{
    cleanup_free struct tcp_job *j = arg;
    cleanup_close int fd = j->fd;
    struct timeval tv = {.tv_sec = DNS_TCP_IDLE_MS / 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    unsigned char msg[FB_DNS_MSG_MAX], resp[FB_DNS_MSG_MAX];
    for (int i = 0; i < DNS_TCP_QUERIES; i++) {
        unsigned char hdr[2];
        if (recv(fd, hdr, 2, MSG_WAITALL) != 2)
            break;
        size_t len = (size_t)hdr[0] << 8 | hdr[1];
        if (len > sizeof msg || recv(fd, msg, len, MSG_WAITALL) != (ssize_t)len)
            break;
        ssize_t n = answer(j->core, &j->entry, SOCK_STREAM, msg, len, resp, sizeof resp);
        if (n <= 0)
            break;
        unsigned char out[2] = {(unsigned char)((size_t)n >> 8), (unsigned char)n};
        if (fb_write_all(fd, out, 2) < 0 || fb_write_all(fd, resp, (size_t)n) < 0)
            break;
    }
    fb_net_entry_release(&j->entry);
    atomic_fetch_sub(&inflight, 1);
    return NULL;
}

/* Room for one more query, or false when too many are in flight. */
static bool take_slot(void)
{
    if (atomic_fetch_add(&inflight, 1) >= DNS_MAX_INFLIGHT) {
        atomic_fetch_sub(&inflight, 1);
        return false;
    }
    return true;
}

static void on_udp(struct fb_core *core)
{
    struct udp_job *j = malloc(sizeof *j);
    if (j == NULL)
        return;
    socklen_t sl = sizeof j->from;
    ssize_t n = recvfrom(core->dns.l.fd[0], j->msg, sizeof j->msg, 0, (struct sockaddr *)&j->from, &sl);
    memset(&j->entry, 0, sizeof j->entry);
    if (n <= 0 || !fb_net_lookup(core, j->from.sin_addr, &j->entry) || !take_slot()) {
        fb_net_entry_release(&j->entry);
        free(j); /* not from a sandbox, or too busy: dropped, the client retries */
        return;
    }
    j->core = core;
    j->len = (size_t)n;
    if (!fb_spawn_detached(udp_worker, j)) {
        atomic_fetch_sub(&inflight, 1);
        fb_net_entry_release(&j->entry);
        free(j);
    }
}

static void on_tcp(struct fb_core *core)
{
    struct sockaddr_in from;
    socklen_t sl = sizeof from;
    cleanup_close int fd = accept4(core->dns.l.fd[1], (struct sockaddr *)&from, &sl, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    struct tcp_job *j = calloc(1, sizeof *j);
    if (j == NULL || !fb_net_lookup(core, from.sin_addr, &j->entry) || !take_slot()) {
        if (j != NULL)
            fb_net_entry_release(&j->entry);
        free(j);
        return;
    }
    j->core = core;
    j->fd = fd;
    if (!fb_spawn_detached(tcp_worker, j)) {
        atomic_fetch_sub(&inflight, 1);
        fb_net_entry_release(&j->entry);
        free(j);
        return;
    }
    fd = -1; /* the worker's now */
}

static void dns_ready(struct fb_core *core, int which)
{
    if (which == 0)
        on_udp(core);
    else
        on_tcp(core);
}

int fb_dns_start(struct fb_core *core, fb_error_t *err)
{
    struct fb_dns_server *d = &core->dns;
    d->upstream.sin_family = AF_INET;
    d->upstream.sin_port = htons(53);
    if (core->cfg.dns_upstream[0] != '\0') {
        if (inet_pton(AF_INET, core->cfg.dns_upstream, &d->upstream.sin_addr) != 1)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "--dns-upstream: not an IPv4 address: %s",
                                core->cfg.dns_upstream);
    } else if (host_nameserver(&d->upstream.sin_addr) < 0) {
        return fb_error_set(err, FB_ERR_UNSUPPORTED, 0,
                            "no IPv4 nameserver in /etc/resolv.conf (set --dns-upstream)");
    }
    int udp = bind_server(SOCK_DGRAM, err);
    if (udp < 0)
        return -1;
    int tcp = bind_server(SOCK_STREAM, err);
    if (tcp < 0) {
        close(udp);
        return -1;
    }
    if (fb_listeners_start(&d->l, core, udp, tcp, dns_ready, err) < 0)
        return fb_error_wrap(err, "start the DNS resolver");
    char up[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &d->upstream.sin_addr, up, sizeof up);
    fb_info("DNS resolver for sandboxes on port %d, upstream %s", FB_DNS_PORT, up);
    return 0;
}

void fb_dns_stop(struct fb_core *core)
{
    fb_listeners_stop(&core->dns.l);
    /* UDP workers answer through the UDP socket: let them finish first
     * (each is bounded by the upstream timeout) */
    for (int i = 0; i < 100 && atomic_load(&inflight) > 0; i++)
        usleep(50000);
    fb_listeners_close(&core->dns.l);
}
