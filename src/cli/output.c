#include "cli/output.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

void fb_format_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (n < 1024) {
        snprintf(buf, len, "%llu B", (unsigned long long)n);
        return;
    }
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, "%.1f %s", v, units[u]);
}

static int digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

int fb_parse_time(const char *text, int64_t *ms)
{
    if (text == NULL || strlen(text) < 20)
        return -1;
    int y, mo, d, h, mi, s, frac = 0;
    if (digits(text, 4, &y) < 0 || text[4] != '-' || digits(text + 5, 2, &mo) < 0 || text[7] != '-' ||
        digits(text + 8, 2, &d) < 0 || (text[10] != 'T' && text[10] != ' ') || digits(text + 11, 2, &h) < 0 ||
        text[13] != ':' || digits(text + 14, 2, &mi) < 0 || text[16] != ':' || digits(text + 17, 2, &s) < 0)
        return -1;
    const char *p = text + 19;
    if (*p == '.') {
        p++;
        int scale = 100;
        while (*p >= '0' && *p <= '9') {
            frac += (*p - '0') * scale;
            scale /= 10;
            p++;
        }
    }
    if (strcmp(p, "Z") != 0 && strcmp(p, "+00:00") != 0)
        return -1;
    struct tm tm = {
        .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi, .tm_sec = s};
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return -1;
    *ms = (int64_t)t * 1000 + frac;
    return 0;
}

static void format_span(int64_t secs, char *buf, size_t len)
{
    if (secs < 60)
        snprintf(buf, len, "%llds", (long long)secs);
    else if (secs < 3600)
        snprintf(buf, len, "%lldm", (long long)(secs / 60));
    else if (secs < 86400)
        snprintf(buf, len, "%lldh", (long long)(secs / 3600));
    else
        snprintf(buf, len, "%lldd", (long long)(secs / 86400));
}

void fb_format_ago(const char *text, char *buf, size_t len)
{
    int64_t ms;
    if (text == NULL) {
        snprintf(buf, len, "-");
        return;
    }
    if (fb_parse_time(text, &ms) < 0) {
        snprintf(buf, len, "%s", text);
        return;
    }
    int64_t delta = (fb_now_ms() - ms) / 1000;
    if (delta < 0)
        delta = 0;
    char span[24];
    format_span(delta, span, sizeof span);
    snprintf(buf, len, "%s ago", span);
}

void fb_format_until(const char *text, char *buf, size_t len)
{
    int64_t ms;
    if (text == NULL) {
        snprintf(buf, len, "-");
        return;
    }
    if (fb_parse_time(text, &ms) < 0) {
        snprintf(buf, len, "%s", text);
        return;
    }
    int64_t delta = (ms - fb_now_ms()) / 1000;
    if (delta <= 0) {
        snprintf(buf, len, "expired");
        return;
    }
    char span[24];
    format_span(delta, span, sizeof span);
    snprintf(buf, len, "in %s", span);
}

int fb_print_json(const json_t *j)
{
    if (json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15)) < 0)
        return -1;
    return fputc('\n', stdout) == EOF ? -1 : 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

char *fb_format_map(const json_t *obj)
{
    size_t n = json_is_object(obj) ? json_object_size(obj) : 0;
    if (n == 0)
        return strdup("");
    cleanup_free const char **keys = calloc(n, sizeof(*keys));
    if (keys == NULL)
        return NULL;
    size_t i = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v)
    {
        if (i < n)
            keys[i++] = k;
    }
    qsort(keys, i, sizeof(*keys), cmp_str);
    size_t total = 1;
    for (size_t j = 0; j < i; j++) {
        const char *s = json_string_value(json_object_get(obj, keys[j]));
        total += strlen(keys[j]) + 2 + (s ? strlen(s) : 0);
    }
    char *out = malloc(total);
    if (out == NULL)
        return NULL;
    char *o = out;
    for (size_t j = 0; j < i; j++) {
        const char *s = json_string_value(json_object_get(obj, keys[j]));
        if (j > 0)
            *o++ = ',';
        size_t kl = strlen(keys[j]), sl = s ? strlen(s) : 0;
        memcpy(o, keys[j], kl);
        o += kl;
        *o++ = '=';
        if (s != NULL)
            memcpy(o, s, sl);
        o += sl;
    }
    *o = '\0';
    return out;
}

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int fb_base64_decode(const char *in, size_t len, unsigned char *out, size_t *outlen)
{
    while (len > 0 && in[len - 1] == '=')
        len--;
    if (len % 4 == 1)
        return -EINVAL;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64_value((unsigned char)in[i]);
        if (v < 0)
            return -EINVAL;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    *outlen = o;
    return 0;
}

char *fb_sanitize(const char *s)
{
    char *out = strdup(s != NULL ? s : "");
    if (out == NULL)
        return NULL;
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return out;
}

int fb_table_init(struct fb_table *t, size_t ncols, const char *const *headers)
{
    memset(t, 0, sizeof(*t));
    t->ncols = ncols;
    return fb_table_add(t, headers);
}

int fb_table_add(struct fb_table *t, const char *const *row)
{
    if (t->nrows == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 16;
        char **nc = realloc(t->cells, ncap * t->ncols * sizeof(*nc));
        if (nc == NULL)
            return -ENOMEM;
        t->cells = nc;
        t->cap = ncap;
    }
    char **dst = t->cells + t->nrows * t->ncols;
    for (size_t i = 0; i < t->ncols; i++) {
        dst[i] = fb_sanitize(row[i]);
        if (dst[i] == NULL) {
            for (size_t j = 0; j < i; j++)
                free(dst[j]);
            return -ENOMEM;
        }
    }
    t->nrows++;
    return 0;
}

/* Columns line up by code points, which is right for the ASCII and most
 * UTF-8 the API returns. */
static size_t display_width(const char *s)
{
    size_t w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xc0) != 0x80)
            w++;
    return w;
}

void fb_table_print(const struct fb_table *t, FILE *out)
{
    size_t widths[32] = {0};
    size_t ncols = t->ncols < 32 ? t->ncols : 32;
    for (size_t r = 0; r < t->nrows; r++)
        for (size_t c = 0; c < ncols; c++) {
            size_t w = display_width(t->cells[r * t->ncols + c]);
            if (w > widths[c])
                widths[c] = w;
        }
    for (size_t r = 0; r < t->nrows; r++) {
        size_t last = 0; /* no padding after the last non-empty cell */
        for (size_t c = 0; c < ncols; c++)
            if (t->cells[r * t->ncols + c][0] != '\0')
                last = c;
        for (size_t c = 0; c <= last; c++) {
            const char *cell = t->cells[r * t->ncols + c];
            fputs(cell, out);
            if (c < last)
                fprintf(out, "%*s", (int)(widths[c] - display_width(cell) + 3), "");
        }
        fputc('\n', out);
    }
}

void fb_table_release(struct fb_table *t)
{
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    memset(t, 0, sizeof(*t));
}
