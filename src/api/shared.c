/* Small pieces the handlers share: output buffers, text fields and output
 * events that may not be UTF-8, NDJSON event streams, byte offsets. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cleanup.h"
#include "../common/text.h"
#include "api.h"

int fb_outbuf_add(struct fb_outbuf *b, const char *d, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *nb = realloc(b->data, cap);
        if (nb == NULL)
            return -ENOMEM;
        b->data = nb;
        b->cap = cap;
    }
    memcpy(b->data + b->len, d, n);
    b->len += n;
    return 0;
}

void fb_json_set_text(json_t *obj, const char *key, const char *data, size_t len)
{
    if (fb_utf8_valid(data, len)) {
        json_object_set_new(obj, key, json_stringn(data ? data : "", len));
        return;
    }
    size_t ll = 0;
    cleanup_free char *lossy = fb_utf8_lossy(data, len, &ll);
    cleanup_free char *b64 = fb_base64_encode(data, len);
    char k64[32];
    snprintf(k64, sizeof k64, "%s_b64", key);
    json_object_set_new(obj, key, lossy ? json_stringn(lossy, ll) : json_null());
    json_object_set_new(obj, k64, b64 ? json_string(b64) : json_null());
}

int fb_parse_offset(const char *v, uint64_t *out)
{
    if (v == NULL)
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || n > (1ULL << 62))
        return -1;
    *out = n;
    return 0;
}

json_t *fb_output_event(struct fb_utf8_carry *c, int w, const char *data, size_t len, bool flush)
{
    size_t total = c->len[w] + len;
    cleanup_free char *buf = malloc(total + 1);
    if (buf == NULL)
        return NULL;
    memcpy(buf, c->bytes[w], c->len[w]);
    if (len > 0)
        memcpy(buf + c->len[w], data, len);
    size_t keep = flush ? total : fb_utf8_complete_prefix(buf, total);
    c->len[w] = total - keep;
    memcpy(c->bytes[w], buf + keep, c->len[w]);
    if (keep == 0)
        return NULL;
    json_t *ev = json_pack("{s:s}", "type", w == 0 ? "stdout" : "stderr");
    if (ev == NULL)
        return NULL;
    if (fb_utf8_valid(buf, keep)) {
        json_object_set_new(ev, "data", json_stringn(buf, keep));
    } else {
        cleanup_free char *b64 = fb_base64_encode(buf, keep);
        json_object_set_new(ev, "data_b64", json_string(b64 ? b64 : ""));
    }
    return ev;
}

struct events {
    json_t *(*next)(void *ctx);
    void (*done)(void *ctx);
    void *ctx;
    char *line;
    size_t len, off;
};

static ssize_t events_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct events *e = cls;
    while (e->off == e->len) {
        free(e->line);
        e->line = NULL;
        e->len = e->off = 0;
        json_t *ev = e->next(e->ctx);
        if (ev == NULL)
            return MHD_CONTENT_READER_END_OF_STREAM;
        char *s = json_dumps(ev, JSON_COMPACT);
        json_decref(ev);
        if (s == NULL)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        size_t n = strlen(s);
        e->line = realloc(s, n + 1);
        if (e->line == NULL) {
            free(s);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        e->line[n] = '\n';
        e->len = n + 1;
    }
    size_t n = e->len - e->off < max ? e->len - e->off : max;
    memcpy(buf, e->line + e->off, n);
    e->off += n;
    return (ssize_t)n;
}

static void events_free(void *cls)
{
    struct events *e = cls;
    e->done(e->ctx);
    free(e->line);
    free(e);
}

struct MHD_Response *fb_resp_events(json_t *(*next)(void *ctx), void (*done)(void *ctx), void *ctx)
{
    struct events *e = calloc(1, sizeof *e);
    if (e == NULL) {
        done(ctx);
        return NULL;
    }
    *e = (struct events){.next = next, .done = done, .ctx = ctx};
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 65536, events_read, e, events_free);
    if (resp == NULL) {
        events_free(e);
        return NULL;
    }
    MHD_add_response_header(resp, "Content-Type", "application/x-ndjson");
    return resp;
}
