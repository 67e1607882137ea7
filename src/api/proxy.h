/* The upstream half of "ports in" (proxy.c): reads a sandbox server's
 * answer with http_parser and turns it into an MHD response, streaming
 * the body or, after a 101, relaying WebSocket bytes both ways.  Private
 * to src/api. */
#ifndef FB_API_PROXY_H
#define FB_API_PROXY_H

#include <stdbool.h>

#include "api.h"

struct fb_upstream;

/* Reads the head of the answer on fd (taken over: closed on failure and
 * by fb_upstream_free).  head_request: the request was HEAD (no body
 * follows).  Gives up when the client leaves (client_fd hangs up) or the
 * daemon stops.  *out is the caller's: hand it to fb_upstream_response()
 * or fb_upstream_free().  bad_gateway for a malformed, oversized or
 * missing answer. */
int fb_upstream_read_head(struct fb_api *api, int fd, int client_fd, bool head_request, unsigned port,
                          struct fb_upstream **out, fb_error_t *err);

/* The upstream's status code. */
unsigned fb_upstream_status(const struct fb_upstream *u);

/* Builds the client's response from the head read (hop-by-hop headers
 * dropped) and takes u over in every case.  upgrade: the client asked for
 * a WebSocket; a 101 then becomes an upgrade response whose relay runs on
 * a thread of its own.  r->proxy holds u until the upgrade happens, so a
 * client that leaves first frees it in on_completed.  NULL when out of
 * memory. */
struct MHD_Response *fb_upstream_response(struct fb_req *r, struct fb_upstream *u, bool upgrade,
                                          unsigned *status);

void fb_upstream_free(struct fb_upstream *u);

#endif
