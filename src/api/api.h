/* The HTTP API: one request state per HTTP request, handlers per route.
 * libmicrohttpd stays behind this header: handlers see fb_req and return
 * an MHD response built with the helpers below. */
#ifndef FB_API_API_H
#define FB_API_API_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "../common/error.h"
#include "../core/core.h"

#define FB_JSON_BODY_MAX (1u << 20)
/* exec bodies carry stdin (up to 16 MiB, more once JSON-escaped) */
#define FB_EXEC_BODY_MAX (40u << 20)
/* longest URL accepted */
#define FB_URL_MAX 4096
/* ports in: proxied request bodies (spooled on the host) */
#define FB_PROXY_BODY_MAX (64ll << 20)
/* per listener: each connection is a thread */
#define FB_CONNECTIONS_MAX 512

enum fb_body_mode {
    FB_BODY_NONE,  /* no body expected (any body is refused with 400) */
    FB_BODY_JSON,  /* buffered, at most FB_JSON_BODY_MAX */
    FB_BODY_FILE,  /* streamed into a file in the sandbox as it arrives */
    FB_BODY_SPOOL, /* written to a private temp file on the host */
};

struct fb_api {
    struct fb_core *core;
    struct MHD_Daemon *unix_daemon, *tcp_daemon;
    /* bytes of uploads and archives spooled on the host's disk right now,
     * bounded by FB_SPOOL_BUDGET so that concurrent uploads cannot fill it */
    _Atomic long long spool_bytes;
    atomic_bool stopping; /* ports in: streams and WebSocket relays end */
    atomic_int relays;    /* WebSocket relay threads running */
};

struct fb_req;
typedef struct MHD_Response *(*fb_handler_fn)(struct fb_req *r, unsigned *status);

struct fb_route {
    const char *method;
    /* "/v1/sandboxes/{}/exec": {} matches one segment; a final {*}
     * matches the rest of the path, even nothing */
    const char *pattern;
    enum fb_body_mode body;
    bool auth;
    fb_handler_fn handler;
    size_t body_max; /* FB_BODY_JSON or FB_BODY_SPOOL limit; 0: the mode's default */
    bool share_auth; /* without Authorization, a share token may authenticate */
};

struct fb_req {
    struct fb_api *api;
    struct MHD_Connection *conn;
    const struct fb_route *route;
    char params[2][160]; /* path segments matched by {} */
    char tenant[64];
    char *raw_uri; /* the request target as sent (not unescaped); NULL when too long */
    bool begun, started;
    /* body */
    char *body;
    size_t body_len, body_cap;
    long long received;
    long long declared; /* Content-Length, parsed once; < 0: none or invalid */
    int spool_fd;
    char spool_path[PATH_MAX];
    long long spool_reserved;     /* this request's share of api->spool_bytes */
    int file_fd;                  /* init connection of a streaming file upload */
    bool file_refused;            /* init stopped reading the upload: its result says why */
    fb_error_t body_err;          /* first error met while receiving the body */
    struct MHD_Response *pending; /* an early answer, sent once the body is drained */
    unsigned pending_status;
    /* ports in: a share token authenticated the request */
    char share_token[FB_SHARE_TOKEN_MAX];
    int64_t share_expires;
    bool share_set_cookie; /* it came in the query: answer with the cookie */
    void *proxy;           /* upgrade state not yet handed to its relay */
    void (*proxy_free)(void *);
};

/* Reserves n more bytes of the host's spool budget for r (released when
 * the request ends).  0, or -1 with *err (unavailable) when the budget
 * would be exceeded. */
int fb_spool_reserve(struct fb_req *r, long long n, fb_error_t *err);

/* Matches method and path (no query) to a route; fills r->params. */
const struct fb_route *fb_route_match(const char *method, const char *path, struct fb_req *r,
                                      bool *path_known);

/* A growing byte buffer (caller frees data). */
struct fb_outbuf {
    char *data;
    size_t len, cap;
};
/* Appends n bytes; 0 or -ENOMEM (the buffer is unchanged then). */
int fb_outbuf_add(struct fb_outbuf *b, const char *d, size_t n);
/* Sets obj[key] from raw bytes; when they are not UTF-8, obj[key] holds
 * them with U+FFFD for bad bytes and obj[key_b64] the exact bytes. */
void fb_json_set_text(json_t *obj, const char *key, const char *data, size_t len);
/* Output bytes of stream w (0 stdout, 1 stderr) as an event {"type",
 * "data"|"data_b64"}; a trailing partial UTF-8 sequence waits in c for the
 * next chunk unless flush.  NULL when nothing is left to send now. */
struct fb_utf8_carry {
    char bytes[2][4];
    size_t len[2];
};
json_t *fb_output_event(struct fb_utf8_carry *c, int w, const char *data, size_t len, bool flush);

/* An NDJSON response: next(ctx) gives each event (new reference), NULL at
 * the end; done(ctx) runs once the response is gone.  NULL without memory
 * (done has run then). */
struct MHD_Response *fb_resp_events(json_t *(*next)(void *ctx), void (*done)(void *ctx), void *ctx);

/* A byte offset from a query or header (NULL leaves *out alone): 0, or -1
 * when it is not a decimal number in 0..2^62. */
int fb_parse_offset(const char *v, uint64_t *out);

/* Responses.  Every error body has the contract's shape. */
struct MHD_Response *fb_resp_json(json_t *body); /* steals body */
struct MHD_Response *fb_resp_error(const fb_error_t e, unsigned *status);
struct MHD_Response *fb_resp_error_new(enum fb_error_kind kind, unsigned *status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
struct MHD_Response *fb_resp_empty(void);

/* Request helpers. */
const char *fb_req_query(struct fb_req *r, const char *key);
const char *fb_req_header(struct fb_req *r, const char *key);
/* Parses the buffered JSON body: NULL body -> NULL (and 0); malformed -> -1. */
int fb_req_json(struct fb_req *r, json_t **out, fb_error_t *err);

/* Starts the listeners.  unix_path may be NULL, tcp may be NULL (off). */
int fb_api_start(struct fb_api *api, struct fb_core *core, const char *unix_path, const char *tcp_host,
                 uint16_t tcp_port, fb_error_t *err);
void fb_api_stop(struct fb_api *api);

/* Handlers, by file. */
struct MHD_Response *fb_h_healthz(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_info(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_sandbox_create(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_sandbox_list(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_sandbox_get(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_sandbox_delete(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_sandbox_ttl(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_sandbox_network(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_audit(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_metrics(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_sandbox_pause(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_sandbox_resume(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_sandbox_hibernate(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_sandbox_fork(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_checkpoint_create(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_checkpoint_list(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_checkpoint_get(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_checkpoint_delete(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_sandbox_rollback(struct fb_req *r, unsigned *status);
/* export.c */
struct MHD_Response *fb_h_checkpoint_export(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_checkpoint_import(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_sandbox_export(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_exec(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_proc_start(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_proc_list(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_proc_get(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_proc_output(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_proc_stdin(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_proc_signal(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_proc_resize(struct fb_req *r, unsigned *status);
/* WebSocket attach to a process (attach.c) */
struct MHD_Response *fb_h_proc_attach(struct fb_req *r, unsigned *status);
/* "TERM", "SIGTERM" or 15 -> 15; 0 when it is none of those. */
int fb_proc_signal_parse(json_t *v);
struct MHD_Response *fb_h_code(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_files_get(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_files_put(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_files_delete(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_archive_get(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_archive_put(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_templates_list(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_template_import(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_template_delete(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_template_get(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_templates_gc(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_template_build(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_template_create(struct fb_req *r, unsigned *status);
/* Waits until every build thread has finished (after the server stopped,
 * they see the core stopping and wind down). */
void fb_api_builds_wait(void);

/* volumes.c */
struct MHD_Response *fb_h_volume_create(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_volume_list(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_volume_get(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_volume_delete(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_volume_archive_get(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_volume_archive_put(struct fb_req *r, unsigned *status);

struct MHD_Response *fb_h_port_proxy(struct fb_req *r, unsigned *status);
struct MHD_Response *fb_h_shares_create(struct fb_req *r, unsigned *status);
/* For share_auth routes without Authorization: accepts a valid share
 * token (query "share" or cookie fb_share) for the route's sandbox and
 * port, filling r->tenant; else a 401 response. */
struct MHD_Response *fb_ports_authenticate(struct fb_req *r, unsigned *status);

/* Opens the sandbox file for a streaming PUT on the first body chunk. */
int fb_files_put_begin(struct fb_req *r, fb_error_t *err);

#endif
