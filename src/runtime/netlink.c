#include "netlink.h"

#include <errno.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/util.h"

/* Requests are built in a fixed buffer: the largest one (a veth pair with
 * two names) needs a few hundred bytes. */
#define NL_BUF 1024

struct nl_req {
    struct nlmsghdr *h;
    char buf[NL_BUF];
    bool overflow;
};

static void *req_init(struct nl_req *r, uint16_t type, uint16_t flags, size_t body)
{
    memset(r, 0, sizeof *r);
    r->h = (struct nlmsghdr *)r->buf;
    r->h->nlmsg_len = (uint32_t)NLMSG_LENGTH(body);
    r->h->nlmsg_type = type;
    r->h->nlmsg_flags = (uint16_t)(NLM_F_REQUEST | NLM_F_ACK | flags);
    return NLMSG_DATA(r->h);
}

static struct rtattr *attr_put(struct nl_req *r, unsigned short type, const void *data, size_t len)
{
    size_t at = NLMSG_ALIGN(r->h->nlmsg_len);
    size_t need = RTA_LENGTH(len);
    if (at + RTA_ALIGN(need) > sizeof r->buf) {
        r->overflow = true;
        return NULL;
    }
    struct rtattr *a = (struct rtattr *)(r->buf + at);
    a->rta_type = type;
    a->rta_len = (unsigned short)need;
    if (len > 0)
        memcpy(RTA_DATA(a), data, len);
    r->h->nlmsg_len = (uint32_t)(at + RTA_ALIGN(need));
    return a;
}

static struct rtattr *nest_begin(struct nl_req *r, unsigned short type)
{
    return attr_put(r, type, NULL, 0);
}

static void nest_end(struct nl_req *r, struct rtattr *a)
{
    if (a != NULL)
        a->rta_len = (unsigned short)((char *)r->buf + r->h->nlmsg_len - (char *)a);
}

int fb_nl_open(struct fb_nl *nl, fb_error_t *err)
{
    nl->seq = 1;
    nl->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (nl->fd < 0)
        return fb_error_sys(err, "netlink socket");
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
    if (bind(nl->fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        fb_error_sys(err, "bind netlink socket");
        fb_nl_close(nl);
        return -1;
    }
    return 0;
}

void fb_nl_close(struct fb_nl *nl)
{
    if (nl->fd >= 0)
        close(nl->fd);
    nl->fd = -1;
}

/* Sends the request and waits for its acknowledgement. */
static int talk(struct fb_nl *nl, struct nl_req *r, const char *what, fb_error_t *err)
{
    if (r->overflow)
        return fb_error_set(err, FB_ERR_INTERNAL, EMSGSIZE, "%s: request too large", what);
    r->h->nlmsg_seq = ++nl->seq;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    ssize_t n;
    do {
        n = sendto(nl->fd, r->buf, r->h->nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof kernel);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return fb_error_sys(err, "%s: send", what);
    for (;;) {
        char buf[8192];
        do {
            n = recv(nl->fd, buf, sizeof buf, 0);
        } while (n < 0 && errno == EINTR);
        if (n < 0)
            return fb_error_sys(err, "%s: receive", what);
        size_t left = (size_t)n;
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
            if (h->nlmsg_seq != nl->seq)
                continue; /* a stale answer to an earlier request */
            if (h->nlmsg_type != NLMSG_ERROR)
                continue;
            const struct nlmsgerr *e = NLMSG_DATA(h);
            if (e->error == 0)
                return 0;
            return fb_error_set(err, FB_ERR_INTERNAL, -e->error, "%s: %s", what, strerror(-e->error));
        }
    }
}

static int link_index(const char *name, fb_error_t *err)
{
    unsigned idx = if_nametoindex(name);
    if (idx == 0)
        return fb_error_sys(err, "no link named %s", name);
    return (int)idx;
}

static int name_ok(const char *name, fb_error_t *err)
{
    if (name == NULL || name[0] == '\0' || strlen(name) >= IFNAMSIZ)
        return fb_error_set(err, FB_ERR_INTERNAL, EINVAL, "bad link name");
    return 0;
}

int fb_nl_veth_create(struct fb_nl *nl, const char *name, const char *peer, int peer_netns_fd,
                      fb_error_t *err)
{
    if (name_ok(name, err) < 0 || name_ok(peer, err) < 0)
        return -1;
    struct nl_req r;
    req_init(&r, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, sizeof(struct ifinfomsg));
    attr_put(&r, IFLA_IFNAME, name, strlen(name) + 1);
    struct rtattr *info = nest_begin(&r, IFLA_LINKINFO);
    attr_put(&r, IFLA_INFO_KIND, "veth", 5);
    struct rtattr *data = nest_begin(&r, IFLA_INFO_DATA);
    struct rtattr *p = nest_begin(&r, VETH_INFO_PEER);
    /* the peer's attributes follow its own ifinfomsg */
    struct ifinfomsg peer_hdr = {.ifi_family = AF_UNSPEC};
    size_t at = NLMSG_ALIGN(r.h->nlmsg_len);
    if (at + sizeof peer_hdr > sizeof r.buf)
        r.overflow = true;
    else {
        memcpy(r.buf + at, &peer_hdr, sizeof peer_hdr);
        r.h->nlmsg_len = (uint32_t)(at + NLMSG_ALIGN(sizeof peer_hdr));
    }
    attr_put(&r, IFLA_IFNAME, peer, strlen(peer) + 1);
    if (peer_netns_fd >= 0) {
        uint32_t fd = (uint32_t)peer_netns_fd;
        attr_put(&r, IFLA_NET_NS_FD, &fd, sizeof fd);
    }
    nest_end(&r, p);
    nest_end(&r, data);
    nest_end(&r, info);
    return talk(nl, &r, "create veth pair", err);
}

int fb_nl_link_set_up(struct fb_nl *nl, const char *name, bool up, fb_error_t *err)
{
    int idx = link_index(name, err);
    if (idx < 0)
        return -1;
    struct nl_req r;
    struct ifinfomsg *ifi = req_init(&r, RTM_NEWLINK, 0, sizeof(struct ifinfomsg));
    ifi->ifi_index = idx;
    ifi->ifi_change = IFF_UP;
    ifi->ifi_flags = up ? IFF_UP : 0;
    return talk(nl, &r, up ? "set link up" : "set link down", err);
}

int fb_nl_link_delete(struct fb_nl *nl, const char *name, fb_error_t *err)
{
    unsigned idx = if_nametoindex(name);
    if (idx == 0)
        return 0;
    struct nl_req r;
    struct ifinfomsg *ifi = req_init(&r, RTM_DELLINK, 0, sizeof(struct ifinfomsg));
    ifi->ifi_index = (int)idx;
    cleanup_error fb_error_t e = NULL;
    if (talk(nl, &r, "delete link", &e) < 0) {
        if (e->errno_value == ENODEV)
            return 0; /* gone meanwhile */
        if (err != NULL && *err == NULL) {
            *err = e;
            e = NULL;
        }
        return -1;
    }
    return 0;
}

/* The index of link name, for an IPv4 prefix length that must be valid. */
static int link_index4(const char *name, unsigned prefix, fb_error_t *err)
{
    if (prefix > 32)
        return fb_error_set(err, FB_ERR_INTERNAL, EINVAL, "bad prefix length %u", prefix);
    return link_index(name, err);
}

int fb_nl_addr_add4(struct fb_nl *nl, const char *name, struct in_addr addr, unsigned prefix, fb_error_t *err)
{
    int idx = link_index4(name, prefix, err);
    if (idx < 0)
        return -1;
    struct nl_req r;
    struct ifaddrmsg *ifa = req_init(&r, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, sizeof(struct ifaddrmsg));
    ifa->ifa_family = AF_INET;
    ifa->ifa_prefixlen = (unsigned char)prefix;
    ifa->ifa_scope = RT_SCOPE_UNIVERSE;
    ifa->ifa_index = (unsigned)idx;
    attr_put(&r, IFA_LOCAL, &addr, sizeof addr);
    attr_put(&r, IFA_ADDRESS, &addr, sizeof addr);
    return talk(nl, &r, "add address", err);
}

int fb_nl_route_add4(struct fb_nl *nl, const char *name, struct in_addr dst, unsigned prefix,
                     struct in_addr gateway, fb_error_t *err)
{
    int idx = link_index4(name, prefix, err);
    if (idx < 0)
        return -1;
    struct nl_req r;
    struct rtmsg *rt = req_init(&r, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, sizeof(struct rtmsg));
    rt->rtm_family = AF_INET;
    rt->rtm_dst_len = (unsigned char)prefix;
    rt->rtm_table = RT_TABLE_MAIN;
    rt->rtm_protocol = RTPROT_STATIC;
    rt->rtm_scope = gateway.s_addr == 0 ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE;
    rt->rtm_type = RTN_UNICAST;
    if (prefix > 0)
        attr_put(&r, RTA_DST, &dst, sizeof dst);
    if (gateway.s_addr != 0)
        attr_put(&r, RTA_GATEWAY, &gateway, sizeof gateway);
    uint32_t oif = (uint32_t)idx;
    attr_put(&r, RTA_OIF, &oif, sizeof oif);
    return talk(nl, &r, "add route", err);
}
