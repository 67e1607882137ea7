#include "cli/client.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/output.h"
#include "common/cleanup.h"
#include "common/json_util.h"
#include "common/util.h"

#ifndef FB_VERSION
#define FB_VERSION "unknown"
#endif

static void slist_freep(struct curl_slist **l)
{
    curl_slist_free_all(*l);
    *l = NULL;
}
#define cleanup_slist __attribute__((cleanup(slist_freep)))

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return (v != NULL && v[0] != '\0') ? v : NULL;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* The key ends up in a header line: anything but visible ASCII could split it. */
static bool key_printable(const char *k)
{
    for (; *k; k++)
        if (*k < 0x21 || *k > 0x7e)
            return false;
    return true;
}

static int set_key(struct fb_client *c, const char *key, const char *source, fb_error_t *err)
{
    if (!key_printable(key))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "the API key from %s contains invalid characters",
                            source);
    if (asprintf(&c->auth_header, "Authorization: Bearer %s", key) < 0) {
        c->auth_header = NULL;
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "API key");
    }
    return 0;
}

static int load_key(struct fb_client *c, const char *explicit_key, fb_error_t *err)
{
    if (explicit_key != NULL)
        return set_key(c, explicit_key, "--key", err);
    const char *env = env_nonempty("FORKBOX_API_KEY");
    if (env != NULL)
        return set_key(c, env, "FORKBOX_API_KEY", err);

    const char *dir = env_nonempty("FORKBOX_STATE_DIR");
    cleanup_free char *path = NULL;
    if (asprintf(&path, "%s/api-key", dir != NULL ? dir : FB_DEFAULT_STATE_DIR) < 0) {
        path = NULL;
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "API key path");
    }
    cleanup_free char *raw = NULL;
    int r = fb_read_file(path, FB_CLIENT_MAX_KEY, &raw, NULL);
    /* A missing key is only worth mentioning if the daemon asks for one. */
    if (r < 0) {
        if (asprintf(&c->key_problem, "no API key: use --key or FORKBOX_API_KEY, or make %s readable (%s)",
                     path, strerror(-r)) < 0)
            c->key_problem = NULL;
        return 0;
    }
    char *key = trim(raw);
    if (key[0] == '\0') {
        if (asprintf(&c->key_problem, "no API key: %s is empty", path) < 0)
            c->key_problem = NULL;
        return 0;
    }
    return set_key(c, key, path, err);
}

int fb_client_open(struct fb_client *c, const struct fb_client_opts *opts, fb_error_t *err)
{
    memset(c, 0, sizeof(*c));
    const char *url = env_nonempty("FORKBOX_URL");
    /* An explicit --socket beats the environment. */
    if (opts->socket_path != NULL)
        url = NULL;
    if (url != NULL) {
        if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "FORKBOX_URL must start with http:// or https://");
        c->base_url = strdup(url);
        c->where = strdup(url);
        if (c->base_url != NULL) {
            size_t n = strlen(c->base_url);
            while (n > 0 && c->base_url[n - 1] == '/')
                c->base_url[--n] = '\0';
        }
    } else {
        const char *sock = opts->socket_path;
        if (sock == NULL)
            sock = env_nonempty("FORKBOX_SOCKET");
        if (sock == NULL)
            sock = FB_DEFAULT_SOCKET;
        c->socket_path = strdup(sock);
        c->where = strdup(sock);
        c->base_url = strdup("http://localhost");
    }
    if (c->base_url == NULL || c->where == NULL || (url == NULL && c->socket_path == NULL)) {
        fb_client_close(c);
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "client");
    }
    if (load_key(c, opts->key, err) < 0) {
        fb_client_close(c);
        return -1;
    }
    c->curl = curl_easy_init();
    if (c->curl == NULL) {
        fb_client_close(c);
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "cannot initialise libcurl");
    }
    return 0;
}

void fb_client_close(struct fb_client *c)
{
    if (c->curl != NULL)
        curl_easy_cleanup(c->curl);
    free(c->base_url);
    free(c->socket_path);
    free(c->where);
    /* the key is a secret: do not leave it in freed heap */
    if (c->auth_header != NULL)
        explicit_bzero(c->auth_header, strlen(c->auth_header));
    free(c->auth_header);
    free(c->key_problem);
    memset(c, 0, sizeof(*c));
}

void fb_response_release(struct fb_response *r)
{
    free(r->content_type);
    free(r->body);
    r->content_type = NULL;
    r->body = NULL;
    r->body_len = 0;
}

char *fb_client_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = malloc(3 * n + 1);
    if (out == NULL)
        return NULL;
    char *o = out;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~') {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    return out;
}

struct transfer {
    struct fb_client *client;
    const struct fb_request *req;
    struct fb_response *resp;
    bool decided;
    bool ok_status;
    bool overflow;
    size_t cap;
    fb_error_t sink_err;
    /* progress line */
    bool progress_tty;
    bool progress_shown;
    int64_t progress_last_ms;
};

static void decide(struct transfer *t)
{
    if (t->decided)
        return;
    t->decided = true;
    curl_easy_getinfo(t->client->curl, CURLINFO_RESPONSE_CODE, &t->resp->status);
    t->ok_status = t->resp->status >= 200 && t->resp->status < 300;
}

static const char *content_type_now(CURL *curl)
{
    char *ct = NULL;
    if (curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &ct) != CURLE_OK || ct == NULL)
        return "";
    return ct;
}

static int buffer_append(struct transfer *t, const char *data, size_t len, size_t limit)
{
    struct fb_response *r = t->resp;
    if (len > limit - r->body_len)
        return -1;
    if (r->body_len + len + 1 > t->cap) {
        size_t ncap = t->cap ? t->cap : 16384;
        while (ncap < r->body_len + len + 1)
            ncap *= 2;
        char *nb = realloc(r->body, ncap);
        if (nb == NULL)
            return -1;
        r->body = nb;
        t->cap = ncap;
    }
    memcpy(r->body + r->body_len, data, len);
    r->body_len += len;
    r->body[r->body_len] = '\0';
    return 0;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *userdata)
{
    struct transfer *t = userdata;
    size_t len = size * nmemb;
    decide(t);
    if (t->ok_status && t->req->sink != NULL) {
        if (t->req->sink(t->req->sink_ctx, content_type_now(t->client->curl), data, len, &t->sink_err) < 0)
            return 0;
        return len;
    }
    if (!t->ok_status) {
        /* only the message matters: keep the head of an oversized error body */
        size_t room = FB_CLIENT_MAX_ERROR_BODY - t->resp->body_len;
        if (len > room)
            len = room;
        if (len > 0 && buffer_append(t, data, len, FB_CLIENT_MAX_ERROR_BODY) < 0)
            return 0;
        return size * nmemb;
    }
    size_t limit = t->req->max_body ? t->req->max_body : FB_CLIENT_MAX_JSON;
    if (buffer_append(t, data, len, limit) < 0) {
        t->overflow = true;
        return 0;
    }
    return len;
}

static void show_progress(struct transfer *t, curl_off_t total, curl_off_t now, bool final)
{
    int64_t ms = fb_mono_ms();
    if (!final && ms - t->progress_last_ms < 200)
        return;
    t->progress_last_ms = ms;
    char done[32], all[32];
    fb_format_bytes((uint64_t)now, done, sizeof done);
    if (total > 0) {
        fb_format_bytes((uint64_t)total, all, sizeof all);
        fprintf(stderr, "\r\033[K%s: %3d%% (%s / %s)", t->req->progress_label, (int)(now * 100 / total), done,
                all);
    } else {
        fprintf(stderr, "\r\033[K%s: %s", t->req->progress_label, done);
    }
    t->progress_shown = true;
}

static int on_xferinfo(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal;
    (void)dlnow;
    struct transfer *t = userdata;
    struct fb_client *c = t->client;
    if (t->req->cancellable && c->cancel != NULL && *c->cancel) {
        c->cancelled = true;
        return 1;
    }
    if (t->progress_tty && ulnow > 0)
        show_progress(t, ultotal, ulnow, false);
    return 0;
}

static size_t on_read(char *buf, size_t size, size_t nmemb, void *userdata)
{
    FILE *f = userdata;
    size_t n = fread(buf, 1, size * nmemb, f);
    if (n == 0 && ferror(f))
        return CURL_READFUNC_ABORT;
    return n;
}

static bool is_connect_error(CURLcode rc)
{
    return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
           rc == CURLE_COULDNT_RESOLVE_PROXY || rc == CURLE_OPERATION_TIMEDOUT ||
           rc == CURLE_SSL_CONNECT_ERROR;
}

static enum fb_error_kind kind_of_code(const char *code, long status)
{
    for (int k = FB_ERR_INTERNAL; k <= FB_ERR_BAD_GATEWAY; k++)
        if (code != NULL && strcmp(code, fb_error_code((enum fb_error_kind)k)) == 0)
            return (enum fb_error_kind)k;
    for (int k = FB_ERR_INTERNAL; k <= FB_ERR_BAD_GATEWAY; k++)
        if (fb_error_http_status((enum fb_error_kind)k) == status)
            return (enum fb_error_kind)k;
    return FB_ERR_INTERNAL;
}

static int api_error(struct fb_client *c, struct fb_response *resp, fb_error_t *err)
{
    const char *code = NULL, *message = NULL;
    cleanup_json json_t *root = NULL;
    if (resp->body != NULL)
        root = json_loadb(resp->body, resp->body_len, 0, NULL);
    json_t *e = json_object_get(root, "error");
    code = json_string_value(json_object_get(e, "code"));
    message = json_string_value(json_object_get(e, "message"));
    enum fb_error_kind kind = kind_of_code(code, resp->status);
    const char *hint = resp->status == 401 ? c->key_problem : NULL;
    if (message == NULL)
        return fb_error_set(err, kind, 0, "forkboxd answered HTTP %ld%s%s%s%s%s", resp->status,
                            code ? ": " : "", code ? code : "", hint ? " (" : "", hint ? hint : "",
                            hint ? ")" : "");
    return fb_error_set(err, kind, 0, "%s%s%s%s", message, hint ? " (" : "", hint ? hint : "",
                        hint ? ")" : "");
}

static int transfer_error(struct fb_client *c, struct transfer *t, CURLcode rc, const char *errbuf,
                          fb_error_t *err)
{
    if (t->sink_err != NULL) {
        *err = fb_steal_ptr(t->sink_err);
        return -1;
    }
    if (c->cancelled)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "interrupted");
    if (t->overflow)
        return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "answer from forkboxd larger than %zu bytes",
                            t->req->max_body ? t->req->max_body : (size_t)FB_CLIENT_MAX_JSON);
    const char *why = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    if (is_connect_error(rc) && t->resp->status == 0) {
        long os_errno = 0;
        curl_easy_getinfo(c->curl, CURLINFO_OS_ERRNO, &os_errno);
        if (os_errno != 0)
            why = strerror((int)os_errno);
        return fb_error_set(err, FB_ERR_UNAVAILABLE, 0,
                            "cannot reach forkboxd at %s: %s (is it running? try `make run`)", c->where, why);
    }
    if (rc == CURLE_READ_ERROR || rc == CURLE_ABORTED_BY_CALLBACK)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "reading the upload failed");
    return fb_error_set(err, FB_ERR_INTERNAL, 0, "request to forkboxd at %s failed: %s", c->where, why);
}

static int setup(struct fb_client *c, const struct fb_request *req, struct transfer *t,
                 struct curl_slist **headers, char *errbuf, fb_error_t *err)
{
    CURL *h = c->curl;
    cleanup_free char *url = NULL;
    if (asprintf(&url, "%s%s", c->base_url, req->path) < 0) {
        url = NULL;
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "url");
    }
    char accept[128], ctype[128];
    if (fb_snprintf(accept, sizeof accept, "Accept: %s", req->accept ? req->accept : "application/json") <
            0 ||
        fb_snprintf(ctype, sizeof ctype, "Content-Type: %s",
                    req->content_type ? req->content_type : "application/json") < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "header too long");

    struct curl_slist *l = curl_slist_append(NULL, accept);
    *headers = l;
    if (l != NULL && (req->body != NULL || req->upload != NULL))
        l = curl_slist_append(l, ctype);
    if (l != NULL && c->auth_header != NULL)
        l = curl_slist_append(l, c->auth_header);
    if (l == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "headers");

    CURLcode rc = CURLE_OK;
#define SET(opt, val)                                                                                        \
    do {                                                                                                     \
        if (rc == CURLE_OK)                                                                                  \
            rc = curl_easy_setopt(h, opt, val);                                                              \
    } while (0)
    SET(CURLOPT_URL, url);
    if (c->socket_path != NULL)
        SET(CURLOPT_UNIX_SOCKET_PATH, c->socket_path);
    /* ids are escaped, but never let curl fold "/../" into another endpoint */
    SET(CURLOPT_PATH_AS_IS, 1L);
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_CONNECTTIMEOUT, 10L);
    SET(CURLOPT_USERAGENT, "forkbox/" FB_VERSION);
    SET(CURLOPT_ERRORBUFFER, errbuf);
    SET(CURLOPT_HTTPHEADER, *headers);
    SET(CURLOPT_WRITEFUNCTION, on_write);
    SET(CURLOPT_WRITEDATA, t);
    SET(CURLOPT_XFERINFOFUNCTION, on_xferinfo);
    SET(CURLOPT_XFERINFODATA, t);
    SET(CURLOPT_NOPROGRESS, 0L);
    if (req->timeout_secs > 0)
        SET(CURLOPT_TIMEOUT, req->timeout_secs);
    if (req->upload != NULL) {
        SET(CURLOPT_UPLOAD, 1L);
        SET(CURLOPT_READFUNCTION, on_read);
        SET(CURLOPT_READDATA, req->upload);
        if (req->upload_size >= 0)
            SET(CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->upload_size);
        if (strcmp(req->method, "PUT") != 0)
            SET(CURLOPT_CUSTOMREQUEST, req->method);
    } else if (strcmp(req->method, "GET") == 0) {
        SET(CURLOPT_HTTPGET, 1L);
    } else if (strcmp(req->method, "POST") == 0 || req->body != NULL) {
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(req->body ? req->body_len : 0));
        SET(CURLOPT_POSTFIELDS, req->body ? req->body : "");
        if (strcmp(req->method, "POST") != 0)
            SET(CURLOPT_CUSTOMREQUEST, req->method);
    } else {
        SET(CURLOPT_CUSTOMREQUEST, req->method);
    }
#undef SET
    if (rc != CURLE_OK)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "libcurl: %s", curl_easy_strerror(rc));
    return 0;
}

int fb_client_do(struct fb_client *c, const struct fb_request *req, struct fb_response *resp, fb_error_t *err)
{
    memset(resp, 0, sizeof(*resp));
    c->cancelled = false;
    curl_easy_reset(c->curl);
    struct transfer t = {.client = c, .req = req, .resp = resp};
    t.progress_tty = req->progress_label != NULL && isatty(STDERR_FILENO);
    char errbuf[CURL_ERROR_SIZE] = "";
    cleanup_slist struct curl_slist *headers = NULL;
    if (setup(c, req, &t, &headers, errbuf, err) < 0) {
        curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, NULL);
        return -1;
    }

    if (req->cancellable && c->cancel != NULL && *c->cancel) {
        c->cancelled = true;
        curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, NULL);
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "interrupted");
    }
    CURLcode rc = curl_easy_perform(c->curl);
    if (t.progress_shown) {
        curl_off_t up = 0, total = 0;
        curl_easy_getinfo(c->curl, CURLINFO_SIZE_UPLOAD_T, &up);
        total = req->upload_size > 0 ? (curl_off_t)req->upload_size : 0;
        show_progress(&t, total, up, true);
        fputc('\n', stderr);
    }
    decide(&t);
    resp->content_type = strdup(content_type_now(c->curl));
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, NULL);
    if (rc != CURLE_OK) {
        int r = transfer_error(c, &t, rc, errbuf, err);
        fb_error_release(&t.sink_err);
        return r;
    }
    if (resp->content_type == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "answer");
    if (!t.ok_status)
        return api_error(c, resp, err);
    return 0;
}

int fb_client_json(struct fb_client *c, const char *method, const char *path, json_t *body, json_t **out,
                   fb_error_t *err)
{
    cleanup_free char *text = NULL;
    if (body != NULL) {
        text = json_dumps(body, JSON_COMPACT);
        if (text == NULL)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "request body cannot be encoded as JSON");
    }
    struct fb_request req = {
        .method = method,
        .path = path,
        .body = text,
        .body_len = text ? strlen(text) : 0,
    };
    cleanup_response struct fb_response resp = {0};
    if (fb_client_do(c, &req, &resp, err) < 0)
        return -1;
    if (out == NULL)
        return 0;
    *out = NULL;
    if (resp.body_len == 0)
        return 0;
    json_error_t jerr;
    *out = json_loadb(resp.body, resp.body_len, 0, &jerr);
    if (*out == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "forkboxd sent invalid JSON: %s", jerr.text);
    return 0;
}
