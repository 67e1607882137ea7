/* HTTP client for the forkboxd REST API (libcurl, unix socket or TCP). */
#ifndef FB_CLI_CLIENT_H
#define FB_CLI_CLIENT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <curl/curl.h>
#include <jansson.h>

#include "common/error.h"

/* Largest JSON answer the client buffers; bigger ones are refused. */
#define FB_CLIENT_MAX_JSON (64u << 20)
/* Largest error body kept for its message. */
#define FB_CLIENT_MAX_ERROR_BODY (1u << 20)
/* Largest API key accepted from a file. */
#define FB_CLIENT_MAX_KEY 4096

#define FB_DEFAULT_SOCKET "/run/forkbox/forkbox.sock"
#define FB_DEFAULT_STATE_DIR "/var/lib/forkbox"

struct fb_client {
    CURL *curl;
    char *base_url;    /* "http://localhost" over a socket, else FORKBOX_URL */
    char *socket_path; /* NULL when talking TCP */
    char *where;       /* the address named in "cannot reach" messages */
    char *auth_header; /* "Authorization: Bearer ..." or NULL without a key */
    char *key_problem; /* why no key was found; appended to 401 messages */
    /* When non-NULL and set, cancellable transfers stop (Ctrl-C in `run`). */
    const volatile sig_atomic_t *cancel;
    bool cancelled; /* the last transfer stopped because of *cancel */
};

struct fb_client_opts {
    const char *socket_path; /* --socket; NULL: FORKBOX_SOCKET or the default */
    const char *key;         /* --key; NULL: FORKBOX_API_KEY or the key file */
};

/* Receives a 2xx body as it arrives.  content_type is the answer's
 * Content-Type (may be ""), valid for the call.  Returns 0, or -1 with *err
 * filled to stop the transfer. */
typedef int (*fb_sink_fn)(void *ctx, const char *content_type, const char *data, size_t len, fb_error_t *err);

struct fb_request {
    const char *method; /* GET, POST, PUT, DELETE */
    const char *path;   /* "/v1/...", query included and escaped */
    const char *accept; /* NULL: application/json */
    /* In-memory body (content_type applies), or ... */
    const char *content_type;
    const char *body;
    size_t body_len;
    /* ... a body streamed from a file; upload_size -1 sends it chunked. */
    FILE *upload;
    int64_t upload_size;
    const char *progress_label; /* non-NULL: progress line on a terminal */
    /* 2xx bodies go to sink when set, else are buffered up to max_body
     * (0 means FB_CLIENT_MAX_JSON). */
    fb_sink_fn sink;
    void *sink_ctx;
    size_t max_body;
    bool cancellable;  /* honour client->cancel */
    long timeout_secs; /* 0: no limit beyond the connect timeout */
};

struct fb_response {
    long status;
    char *content_type; /* owned, never NULL after a transfer */
    char *body;         /* owned, NUL-terminated; NULL when a sink took it */
    size_t body_len;
};

/* Frees what a response owns; the struct itself is the caller's. */
void fb_response_release(struct fb_response *r);
#define cleanup_response __attribute__((cleanup(fb_response_release)))

/* Resolves the address and key from opts and the environment and prepares
 * a curl handle.  Nothing is connected yet.  Release with fb_client_close(). */
int fb_client_open(struct fb_client *c, const struct fb_client_opts *opts, fb_error_t *err);
void fb_client_close(struct fb_client *c);

/* Performs one request.  A non-2xx answer becomes *err with the API's
 * message and the kind of its code (resp still holds status and body). An
 * unreachable daemon is reported with the address and a hint.  Returns 0
 * only for 2xx. */
int fb_client_do(struct fb_client *c, const struct fb_request *req, struct fb_response *resp,
                 fb_error_t *err);

/* JSON round trip: body may be NULL (no body); *out (may be NULL when the
 * caller does not want it) receives the parsed answer, or NULL for 204. */
int fb_client_json(struct fb_client *c, const char *method, const char *path, json_t *body, json_t **out,
                   fb_error_t *err);

/* URL-escapes s for a path segment or query value; caller frees with free(). */
char *fb_client_escape(const char *s);

#endif
