/* The egress proxy of allowlist sandboxes.  Their TCP connections to ports
 * 80 and 443 are redirected here by the host-side table (net.c); the proxy
 * reads the name the client asks for (TLS server name, HTTP Host) before
 * anything goes upstream, and lets the connection through only when that
 * name is on the sandbox's allowlist and the address the client dialled is
 * one that name (or a listed CIDR) gave it.  A connection to an allowed
 * address that names another host (domain fronting) is refused.  Every
 * decision is audited. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <poll.h>
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
#include "allow.h"
#include "core.h"
#include "internal.h"
#include "sniff.h"

#define EGRESS_MAX_CONNS 256
#define EGRESS_SNIFF_MS 10000
#define EGRESS_IDLE_MS (15 * 60 * 1000)
#define EGRESS_PEEK 16384

static atomic_int conns;

static int listen_on(uint16_t port, fb_error_t *err)
{
    cleanup_close int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return fb_error_sys(err, "egress socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 128) < 0)
        return fb_error_sys(err, "egress proxy on port %u", port);
    return fb_steal_fd(&fd);
}

struct conn {
    struct fb_core *core;
    struct fb_net_entry entry;
    int fd;
    bool tls;
    struct sockaddr_in dst; /* what the client dialled */
};

/* Waits until the client has sent enough to name its destination. */
static int sniff(int fd, bool tls, char *name, size_t cap)
{
    unsigned char buf[EGRESS_PEEK];
    int64_t deadline = fb_mono_ms() + EGRESS_SNIFF_MS;
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0)
            return FB_SNIFF_INVALID;
        if (n > 0) {
            int r = tls ? fb_sniff_tls_sni(buf, (size_t)n, name, cap)
                        : fb_sniff_http_host(buf, (size_t)n, name, cap);
            if (r != FB_SNIFF_MORE || (size_t)n == sizeof buf)
                return r == FB_SNIFF_MORE ? FB_SNIFF_INVALID : r;
        } else if (errno != EAGAIN && errno != EINTR) {
            return FB_SNIFF_INVALID;
        }
        int64_t left = deadline - fb_mono_ms();
        if (left <= 0)
            return FB_SNIFF_INVALID;
        /* more bytes may be on their way: wait for them, not for the peek */
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)(left > 200 ? 200 : left)) < 0 && errno != EINTR)
            return FB_SNIFF_INVALID;
    }
}

/* Copies both ways until both sides are done or the link idles out. */
static void relay(int a, int b)
{
    char buf[16384];
    bool a_open = true, b_open = true;
    while (a_open || b_open) {
        struct pollfd p[2] = {{a, a_open ? POLLIN : 0, 0}, {b, b_open ? POLLIN : 0, 0}};
        int r = poll(p, 2, EGRESS_IDLE_MS);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return;
        for (int i = 0; i < 2; i++) {
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int from = i == 0 ? a : b, to = i == 0 ? b : a;
            ssize_t n = recv(from, buf, sizeof buf, 0);
            if (n <= 0) {
                shutdown(to, SHUT_WR);
                if (i == 0)
                    a_open = false;
                else
                    b_open = false;
                continue;
            }
            if (fb_write_all(to, buf, (size_t)n) < 0)
                return;
        }
    }
}

/* Connects to where the client meant to go and relays. */
static void relay_upstream(int fd, const struct sockaddr_in *dst)
{
    cleanup_close int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {.tv_sec = 10};
    if (up < 0 || setsockopt(up, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0 ||
        connect(up, (const struct sockaddr *)dst, sizeof *dst) < 0)
        return;
    relay(fd, up);
}

static void *conn_main(void *arg)
{
    cleanup_free struct conn *c = arg;
    cleanup_close int fd = c->fd;
    uint32_t ip = ntohl(c->dst.sin_addr.s_addr);
    uint16_t port = ntohs(c->dst.sin_port);
    char name[256] = "", dst[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &c->dst.sin_addr, dst, sizeof dst);
    int found = sniff(fd, c->tls, name, sizeof name);
    struct fb_allow as_cidr = {.kind = FB_ALLOW_CIDR, .net = ip, .prefix = 32};
    bool ok = false;
    if (!fb_allow_blocked(&as_cidr)) {
        uint16_t allowed_port;
        if (found == FB_SNIFF_FOUND && fb_net_name_allowed(&c->entry, name, &allowed_port) &&
            (allowed_port == 0 || allowed_port == port))
            ok = fb_net_dst_learnt(c->core, c->entry.slot, ip, port);
        /* a listed address or CIDR needs no name */
        ok = ok || fb_net_dst_listed(c->core, c->entry.slot, ip, port);
    }
    char what[320];
    snprintf(what, sizeof what, "%s -> %s:%u", found == FB_SNIFF_FOUND ? name : "(no name)", dst, port);
    fb_audit_add(c->core, c->entry.tenant, c->entry.id, c->tls ? "tls" : "http", what, 0,
                 ok ? "allowed" : "denied");
    if (!ok) {
        if (!c->tls) {
            static const char msg[] =
                "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                "Content-Length: 44\r\n\r\nforkbox: this host is not on the allowlist\r\n";
            (void)!send(fd, msg, sizeof msg - 1, MSG_NOSIGNAL);
            /* closing with the request still unread would send a reset
             * that can overtake the answer: read it away first */
            shutdown(fd, SHUT_WR);
            struct timeval tv = {.tv_sec = 1};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            char sink[4096];
            while (recv(fd, sink, sizeof sink, 0) > 0)
                ;
        }
        goto done;
    }
    relay_upstream(fd, &c->dst);
done:
    fb_net_entry_release(&c->entry);
    atomic_fetch_sub(&conns, 1);
    return NULL;
}

static void on_accept(struct fb_core *core, int lfd, bool tls)
{
    struct sockaddr_in from;
    socklen_t sl = sizeof from;
    cleanup_close int fd = accept4(lfd, (struct sockaddr *)&from, &sl, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    struct conn *c = calloc(1, sizeof *c);
    if (c == NULL)
        return;
    socklen_t dl = sizeof c->dst;
    if (!fb_net_lookup(core, from.sin_addr, &c->entry) || strcmp(c->entry.mode, "allowlist") != 0 ||
        getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &c->dst, &dl) < 0) {
        fb_net_entry_release(&c->entry);
        free(c);
        return;
    }
    if (atomic_fetch_add(&conns, 1) >= EGRESS_MAX_CONNS) { /* too busy: the client retries */
        atomic_fetch_sub(&conns, 1);
        fb_net_entry_release(&c->entry);
        free(c);
        return;
    }
    c->core = core;
    c->tls = tls;
    c->fd = fd;
    if (!fb_spawn_detached(conn_main, c)) {
        atomic_fetch_sub(&conns, 1);
        fb_net_entry_release(&c->entry);
        free(c);
    } else {
        fd = -1; /* the worker's now */
    }
}

static void egress_ready(struct fb_core *core, int which)
{
    on_accept(core, core->egress.fd[which], which == 1);
}

int fb_egress_start(struct fb_core *core, fb_error_t *err)
{
    int http = listen_on(FB_EGRESS_HTTP_PORT, err);
    if (http < 0)
        return -1;
    int tls = listen_on(FB_EGRESS_TLS_PORT, err);
    if (tls < 0) {
        close(http);
        return -1;
    }
    if (fb_listeners_start(&core->egress, core, http, tls, egress_ready, err) < 0)
        return fb_error_wrap(err, "start the egress proxy");
    return 0;
}

void fb_egress_stop(struct fb_core *core)
{
    /* connections being relayed keep their own sockets and end on their own */
    fb_listeners_close(&core->egress);
}
