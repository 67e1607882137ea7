/* A small rtnetlink client for the links, addresses and routes a sandbox's
 * network needs: veth pairs, moving one end into the sandbox's network
 * namespace, addresses, a default route.  Every call acts on the network
 * namespace of the calling thread and waits for the kernel's
 * acknowledgement, so a failure is reported by the call that caused it.
 * All return 0 or -1 with *err set (errno kept). */
#ifndef FB_RUNTIME_NETLINK_H
#define FB_RUNTIME_NETLINK_H

#include <netinet/in.h>
#include <stdbool.h>

#include "../common/error.h"

struct fb_nl {
    int fd;
    unsigned seq;
};

/* Opens a NETLINK_ROUTE socket in the caller's network namespace. */
int fb_nl_open(struct fb_nl *nl, fb_error_t *err);
void fb_nl_close(struct fb_nl *nl);

/* Creates the pair name <-> peer, both down: name in this namespace, peer
 * in the one open at peer_netns_fd (-1: this one too). */
int fb_nl_veth_create(struct fb_nl *nl, const char *name, const char *peer, int peer_netns_fd,
                      fb_error_t *err);

/* Sets a link up or down. */
int fb_nl_link_set_up(struct fb_nl *nl, const char *name, bool up, fb_error_t *err);

/* Deletes a link (a veth takes its peer with it).  Missing is not an error.
 * err may be NULL when the caller only tidies up. */
int fb_nl_link_delete(struct fb_nl *nl, const char *name, fb_error_t *err);

/* Adds an IPv4 address addr/prefix to link name. */
int fb_nl_addr_add4(struct fb_nl *nl, const char *name, struct in_addr addr, unsigned prefix,
                    fb_error_t *err);

/* Adds a route to dst/prefix (0.0.0.0/0 for the default route) through
 * gateway via link name; a zero gateway makes it a direct (link) route. */
int fb_nl_route_add4(struct fb_nl *nl, const char *name, struct in_addr dst, unsigned prefix,
                     struct in_addr gateway, fb_error_t *err);

#endif
