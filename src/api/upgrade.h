/* WebSocket upgrades, shared by "ports in" (ports.c, proxy.c) and process
 * attach (attach.c): what a request asks for, and the relay threads that
 * serve upgraded connections.  Relays are counted in api->relays so that a
 * stopping daemon waits for them (they watch api->stopping).  Private to
 * src/api. */
#ifndef FB_API_UPGRADE_H
#define FB_API_UPGRADE_H

#include <stdbool.h>

#include "api.h"

/* Whether the comma-separated header list has token (case-insensitively). */
bool fb_http_list_has(const char *list, const char *token);

/* A GET with Upgrade: websocket and Connection: upgrade. */
bool fb_req_wants_websocket(struct fb_req *r);

/* Runs fn(arg) on a detached thread counted in api->relays; fn must call
 * fb_relay_thread_done() last.  On failure nothing runs and arg stays the
 * caller's. */
int fb_relay_thread_start(struct fb_api *api, void *(*fn)(void *), void *arg, fb_error_t *err);
void fb_relay_thread_done(struct fb_api *api);

#endif
