/* The client side of a WebSocket handshake with forkboxd (shell, attach):
 * a plain socket to the daemon's unix socket or TCP address, the HTTP/1.1
 * upgrade, and the checks of the answer.  Framing afterwards is libwslay's
 * (see commands_shell.c). */
#ifndef FB_CLI_WSCLIENT_H
#define FB_CLI_WSCLIENT_H

#include <stddef.h>

#include "cli/client.h"
#include "common/error.h"

struct fb_ws_conn {
    int fd;      /* connected, upgraded; -1 when not */
    char *extra; /* bytes that came after the 101 answer: the first frames */
    size_t extra_len;
};

/* Connects to the daemon c talks to and upgrades GET path (query
 * included).  An answer other than 101 becomes *err with the API's message
 * and kind.  Release with fb_ws_conn_release(). */
int fb_ws_connect(struct fb_client *c, const char *path, struct fb_ws_conn *out, fb_error_t *err);
void fb_ws_conn_release(struct fb_ws_conn *ws);

#endif
