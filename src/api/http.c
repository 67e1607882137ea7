/* libmicrohttpd glue: listeners, per-request state, body intake, auth. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/log.h"
#include "../common/text.h"
#include "../common/util.h"
#include "../common/wire.h"
#include "../core/files.h"
#include "api.h"

struct MHD_Response *fb_resp_json(json_t *body)
{
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (s == NULL)
        s = strdup("{}");
    size_t n = strlen(s);
    char *line = realloc(s, n + 2);
    if (line != NULL) {
        line[n] = '\n';
        line[n + 1] = '\0';
        s = line;
        n++;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, s, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    return resp;
}

/* Messages may quote client paths, which need not be UTF-8. */
static json_t *error_body(enum fb_error_kind kind, const char *msg)
{
    size_t n = 0;
    char *text = fb_utf8_lossy(msg, strlen(msg), &n);
    json_t *body = json_pack("{s:{s:s, s:s%}}", "error", "code", fb_error_code(kind), "message",
                             text ? text : "error", text ? n : (size_t)5);
    free(text);
    return body;
}

struct MHD_Response *fb_resp_error(const fb_error_t e, unsigned *status)
{
    *status = (unsigned)fb_error_http_status(e->kind);
    if (e->kind == FB_ERR_INTERNAL)
        fb_warn("internal error: %s", e->msg);
    return fb_resp_json(error_body(e->kind, e->msg));
}

struct MHD_Response *fb_resp_error_new(enum fb_error_kind kind, unsigned *status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    *status = (unsigned)fb_error_http_status(kind);
    return fb_resp_json(error_body(kind, msg));
}

struct MHD_Response *fb_resp_empty(void)
{
    return MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
}

const char *fb_req_query(struct fb_req *r, const char *key)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *fb_req_header(struct fb_req *r, const char *key)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, key);
}

int fb_req_json(struct fb_req *r, json_t **out, fb_error_t *err)
{
    *out = NULL;
    if (r->body_len == 0)
        return 0;
    json_error_t je;
    /* NUL is allowed by the loader so stdin may carry it; every other
     * string field refuses it in the spec parser */
    json_t *j = json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (j == NULL)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "malformed JSON body: %s (line %d, column %d)",
                            je.text, je.line, je.column);
    if (!json_is_object(j)) {
        json_decref(j);
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "the JSON body must be an object");
    }
    *out = j;
    return 0;
}

static struct MHD_Response *authenticate(struct fb_req *r, unsigned *status)
{
    const char *auth = fb_req_header(r, "Authorization");
    if (auth == NULL || strncmp(auth, "Bearer ", 7) != 0)
        return fb_resp_error_new(FB_ERR_UNAUTHORIZED, status,
                                 "missing API key (Authorization: Bearer <key>)");
    cleanup_error fb_error_t err = NULL;
    if (fb_store_key_lookup(r->api->core->store, auth + 7, r->tenant, &err) < 0) {
        if (err->kind != FB_ERR_UNAUTHORIZED)
            return fb_resp_error(err, status);
        return fb_resp_error_new(FB_ERR_UNAUTHORIZED, status, "invalid API key");
    }
    return NULL;
}

static enum MHD_Result send_response(struct MHD_Connection *conn, unsigned status, struct MHD_Response *resp)
{
    if (resp == NULL) {
        status = 500;
        resp =
            fb_resp_json(json_pack("{s:{s:s, s:s}}", "error", "code", "internal", "message", "no response"));
    }
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* MHD hands out values as C strings: a %00 in a query would silently cut
 * a path short.  Values whose length disagrees with their string length
 * are refused before anything looks at them. */
/* fb_req.declared when there is no Content-Length, or a malformed one */
#define DECLARED_NONE (-1LL)
#define DECLARED_INVALID (-2LL)

static size_t json_limit(const struct fb_req *r)
{
    return r->route->body_max ? r->route->body_max : FB_JSON_BODY_MAX;
}

static long long upload_limit(const struct fb_req *r)
{
    return r->route->body_max ? (long long)r->route->body_max : FB_UPLOAD_MAX;
}

static enum MHD_Result find_nul(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                const char *value, size_t value_size)
{
    (void)kind;
    bool *bad = cls;
    if ((key != NULL && strlen(key) != key_size) || (value != NULL && strlen(value) != value_size)) {
        *bad = true;
        return MHD_NO;
    }
    return MHD_YES;
}

/* First call of a request: route, authenticate, check declared sizes.
 * Returns a response to send at once, or NULL to go on. */
static struct MHD_Response *begin(struct fb_req *r, const char *method, const char *url, unsigned *status)
{
    const char *cl = fb_req_header(r, "Content-Length");
    r->declared = DECLARED_NONE;
    if (cl != NULL) {
        char *end = NULL;
        errno = 0;
        long long n = strtoll(cl, &end, 10);
        r->declared = (errno || *end || n < 0) ? DECLARED_INVALID : n;
    }
    bool known = false, nul = false;
    MHD_get_connection_values_n(r->conn, MHD_GET_ARGUMENT_KIND | MHD_HEADER_KIND, find_nul, &nul);
    if (nul || strlen(url) > FB_URL_MAX)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status,
                                 "NUL byte in the URL or a header, or URL too long");
    r->route = fb_route_match(method, url, r, &known);
    if (r->route == NULL) {
        if (known)
            return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "method %s not allowed on %s", method, url);
        return fb_resp_error_new(FB_ERR_NOT_FOUND, status, "no such endpoint: %s %s", method, url);
    }
    if (r->route->auth) {
        /* a share URL's visitor has no key; one who sends a key uses it */
        struct MHD_Response *resp = r->route->share_auth && fb_req_header(r, "Authorization") == NULL
                                        ? fb_ports_authenticate(r, status)
                                        : authenticate(r, status);
        if (resp != NULL)
            return resp;
    }
    long long limit = r->route->body == FB_BODY_JSON   ? (long long)json_limit(r)
                      : r->route->body == FB_BODY_NONE ? 0
                                                       : upload_limit(r);
    if (r->declared == DECLARED_INVALID)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "invalid Content-Length");
    if (r->declared > limit && r->route->body != FB_BODY_NONE)
        return fb_resp_error_new(FB_ERR_TOO_LARGE, status, "body of %lld bytes exceeds the limit of %lld",
                                 r->declared, limit);
    if (r->route->body == FB_BODY_SPOOL) {
        /* refused up front when the declared size cannot fit */
        cleanup_error fb_error_t serr = NULL;
        if (r->declared > 0 && fb_spool_reserve(r, r->declared, &serr) < 0)
            return fb_resp_error(serr, status);
        atomic_fetch_sub(&r->api->spool_bytes, r->spool_reserved);
        r->spool_reserved = 0;
        if (fb_snprintf(r->spool_path, sizeof r->spool_path, "%s/tmp/upload.XXXXXX",
                        r->api->core->cfg.state_dir) < 0)
            return fb_resp_error_new(FB_ERR_INTERNAL, status, "spool path too long");
        r->spool_fd = mkostemp(r->spool_path, O_CLOEXEC);
        if (r->spool_fd < 0)
            return fb_resp_error_new(FB_ERR_INTERNAL, status, "create spool file: %s", strerror(errno));
    }
    return NULL;
}

/* Takes one chunk of the body according to the route's body mode.  Errors
 * are remembered and answered once the body has been drained. */
int fb_spool_reserve(struct fb_req *r, long long n, fb_error_t *err)
{
    long long now = atomic_fetch_add(&r->api->spool_bytes, n) + n;
    if (now > FB_SPOOL_BUDGET) {
        atomic_fetch_sub(&r->api->spool_bytes, n);
        return fb_error_set(err, FB_ERR_UNAVAILABLE, ENOSPC,
                            "uploads and archives in flight would exceed the host's spool budget of %lld "
                            "bytes; retry later",
                            (long long)FB_SPOOL_BUDGET);
    }
    r->spool_reserved += n;
    return 0;
}

static void take_body(struct fb_req *r, const char *data, size_t size)
{
    r->received += (long long)size;
    if (r->body_err != NULL)
        return;
    switch (r->route->body) {
    case FB_BODY_NONE:
        fb_error_set(&r->body_err, FB_ERR_BAD_REQUEST, 0, "this endpoint takes no body");
        return;
    case FB_BODY_JSON:
        if (r->body_len + size > json_limit(r)) {
            fb_error_set(&r->body_err, FB_ERR_TOO_LARGE, 0, "JSON body exceeds %zu bytes", json_limit(r));
            return;
        }
        if (r->body_len + size + 1 > r->body_cap) {
            size_t cap = r->body_cap ? r->body_cap : 4096;
            while (cap < r->body_len + size + 1)
                cap *= 2;
            char *nb = realloc(r->body, cap);
            if (nb == NULL) {
                fb_error_set(&r->body_err, FB_ERR_INTERNAL, ENOMEM, "body buffer");
                return;
            }
            r->body = nb;
            r->body_cap = cap;
        }
        memcpy(r->body + r->body_len, data, size);
        r->body_len += size;
        r->body[r->body_len] = '\0';
        return;
    case FB_BODY_FILE:
    case FB_BODY_SPOOL:
        if (r->received > upload_limit(r)) {
            fb_error_set(&r->body_err, FB_ERR_TOO_LARGE, 0, "upload exceeds %lld bytes", upload_limit(r));
            return;
        }
        if (r->route->body == FB_BODY_FILE) {
            if (r->file_fd < 0 && fb_files_put_begin(r, &r->body_err) < 0)
                return;
            for (size_t off = 0; off < size && !r->file_refused;) {
                size_t n = size - off > FB_WIRE_MAX_PAYLOAD ? FB_WIRE_MAX_PAYLOAD : size - off;
                /* init refused the write and hung up: its result, read at
                 * the end, says why; the rest of the body is dropped */
                if (fb_wire_send(r->file_fd, FB_MSG_DATA, data + off, n) < 0)
                    r->file_refused = true;
                off += n;
            }
            return;
        }
        if (fb_spool_reserve(r, (long long)size, &r->body_err) < 0)
            return;
        for (size_t off = 0; off < size;) {
            ssize_t n = write(r->spool_fd, data + off, size - off);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                fb_error_set(&r->body_err, errno == ENOSPC ? FB_ERR_TOO_LARGE : FB_ERR_INTERNAL, errno,
                             "spool upload");
                return;
            }
            off += (size_t)n;
        }
        return;
    }
}

static struct fb_req *req_new(struct fb_api *api, struct MHD_Connection *conn)
{
    struct fb_req *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->api = api;
    r->conn = conn;
    r->spool_fd = -1;
    r->file_fd = -1;
    return r;
}

/* Called with the request target before MHD unescapes it: the proxy
 * passes it on as the client wrote it.  The request state starts here. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    struct fb_req *r = req_new(cls, conn);
    if (r != NULL && strlen(uri) <= FB_URL_MAX)
        r->raw_uri = strdup(uri);
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    struct fb_api *api = cls;
    struct fb_req *r = *con_cls;
    if (r == NULL) {
        r = req_new(api, conn);
        if (r == NULL)
            return MHD_NO;
        *con_cls = r;
    }
    if (!r->begun) {
        r->begun = true;
        unsigned status = 200;
        struct MHD_Response *resp = begin(r, method, url, &status);
        if (resp == NULL)
            return MHD_YES;
        /* answering before a small body has been read makes clients that
         * are still sending it fail with EPIPE instead of reading the
         * answer: drain up to FB_JSON_BODY_MAX first, refuse beyond */
        if (status != 413 && r->declared > 0 && r->declared <= FB_JSON_BODY_MAX) {
            r->pending = resp;
            r->pending_status = status;
            return MHD_YES;
        }
        r->started = true;
        return send_response(conn, status, resp);
    }
    if (r->started) {
        *upload_data_size = 0; /* an answer is queued: drop the rest */
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        if (r->pending == NULL)
            take_body(r, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    r->started = true;
    if (r->pending != NULL) {
        struct MHD_Response *resp = r->pending;
        r->pending = NULL;
        return send_response(conn, r->pending_status, resp);
    }
    unsigned status = 200;
    struct MHD_Response *resp;
    if (r->body_err != NULL)
        resp = fb_resp_error(r->body_err, &status);
    else
        resp = r->route->handler(r, &status);
    return send_response(conn, status, resp);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    struct fb_req *r = *con_cls;
    if (r == NULL)
        return;
    free(r->body);
    atomic_fetch_sub(&r->api->spool_bytes, r->spool_reserved);
    if (r->spool_fd >= 0) {
        close(r->spool_fd);
        unlink(r->spool_path);
    }
    if (r->file_fd >= 0)
        close(r->file_fd); /* an unfinished upload: init discards its temp file */
    fb_error_release(&r->body_err);
    if (r->pending != NULL)
        MHD_destroy_response(r->pending);
    if (r->proxy != NULL)
        r->proxy_free(r->proxy); /* an upgrade that never happened */
    free(r->raw_uri);
    free(r);
    *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n')
        msg[--n] = '\0';
    fb_debug("http: %s", msg);
}

static int listen_unix(const char *path, fb_error_t *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (fb_strlcpy(sa.sun_path, path, sizeof sa.sun_path) < 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, ENAMETOOLONG, "socket path %s", path);
    char dir[PATH_MAX];
    fb_strlcpy(dir, path, sizeof dir);
    char *slash = strrchr(dir, '/');
    if (slash != NULL && slash != dir) {
        *slash = '\0';
        fb_mkdir_p(dir, 0755);
    }
    cleanup_close int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fb_error_sys(err, "socket");
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(path);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
        return fb_error_sys(err, "bind %s", path);
    /* the key is the access control; the socket is root-only on top */
    chmod(path, 0600);
    if (listen(fd, 128) < 0)
        return fb_error_sys(err, "listen %s", path);
    return fb_steal_fd(&fd);
}

static struct MHD_Daemon *start_daemon(struct fb_api *api, int listen_fd, const char *host, uint16_t port,
                                       fb_error_t *err)
{
    /* upgrades: WebSockets of ports in */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
                     MHD_ALLOW_UPGRADE;
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct MHD_Daemon *d;
    if (listen_fd >= 0) {
        d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, api, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log,
                             api, MHD_OPTION_LISTEN_SOCKET, listen_fd, MHD_OPTION_NOTIFY_COMPLETED,
                             on_completed, api, MHD_OPTION_URI_LOG_CALLBACK, on_uri, api,
                             MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024),
                             MHD_OPTION_CONNECTION_LIMIT, (unsigned)FB_CONNECTIONS_MAX, MHD_OPTION_END);
    } else {
        if (inet_pton(AF_INET, host, &sin.sin_addr) != 1) {
            fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "listen address %s is not an IPv4 address", host);
            return NULL;
        }
        d = MHD_start_daemon(flags, port, NULL, NULL, on_request, api, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log,
                             api, MHD_OPTION_SOCK_ADDR, &sin, MHD_OPTION_NOTIFY_COMPLETED, on_completed, api,
                             MHD_OPTION_URI_LOG_CALLBACK, on_uri, api, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                             (size_t)(256 * 1024), MHD_OPTION_CONNECTION_LIMIT, (unsigned)FB_CONNECTIONS_MAX,
                             MHD_OPTION_END);
    }
    if (d == NULL)
        fb_error_set(err, FB_ERR_INTERNAL, errno, "start HTTP listener on %s",
                     listen_fd >= 0 ? "unix socket" : host);
    return d;
}

int fb_api_start(struct fb_api *api, struct fb_core *core, const char *unix_path, const char *tcp_host,
                 uint16_t tcp_port, fb_error_t *err)
{
    memset(api, 0, sizeof *api);
    api->core = core;
    if (unix_path != NULL) {
        int fd = listen_unix(unix_path, err);
        if (fd < 0)
            return -1;
        api->unix_daemon = start_daemon(api, fd, NULL, 0, err);
        if (api->unix_daemon == NULL) {
            close(fd);
            return -1;
        }
    }
    if (tcp_host != NULL) {
        api->tcp_daemon = start_daemon(api, -1, tcp_host, tcp_port, err);
        if (api->tcp_daemon == NULL) {
            fb_api_stop(api);
            return -1;
        }
    }
    return 0;
}

void fb_api_stop(struct fb_api *api)
{
    /* MHD waits for upgraded connections to be closed by their relays;
     * streams and relays notice this within half a second */
    atomic_store(&api->stopping, true);
    if (api->core != NULL)
        fb_core_signal_stop(api->core); /* builds and their streams stop too */
    for (int i = 0; i < 100 && atomic_load(&api->relays) > 0; i++)
        usleep(50 * 1000);
    if (api->unix_daemon)
        MHD_stop_daemon(api->unix_daemon);
    if (api->tcp_daemon)
        MHD_stop_daemon(api->tcp_daemon);
    api->unix_daemon = api->tcp_daemon = NULL;
    fb_api_builds_wait();
}
