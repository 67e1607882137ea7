/* WebSocket upgrade plumbing shared by the ports proxy and process attach. */
#include "upgrade.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>

bool fb_http_list_has(const char *list, const char *token)
{
    size_t tl = strlen(token);
    for (const char *p = list; p != NULL && *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        size_t n = strcspn(p, ", \t");
        if (n == tl && strncasecmp(p, token, n) == 0)
            return true;
        p += n;
    }
    return false;
}

bool fb_req_wants_websocket(struct fb_req *r)
{
    const char *up = fb_req_header(r, "Upgrade"), *conn = fb_req_header(r, "Connection");
    return strcmp(r->route->method, "GET") == 0 && up != NULL && conn != NULL &&
           fb_http_list_has(up, "websocket") && fb_http_list_has(conn, "upgrade");
}

int fb_relay_thread_start(struct fb_api *api, void *(*fn)(void *), void *arg, fb_error_t *err)
{
    atomic_fetch_add(&api->relays, 1);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        atomic_fetch_sub(&api->relays, 1);
        return fb_error_set(err, FB_ERR_UNAVAILABLE, rc, "cannot start a WebSocket relay thread");
    }
    return 0;
}

void fb_relay_thread_done(struct fb_api *api)
{
    atomic_fetch_sub(&api->relays, 1);
}
