/* Output helpers of the command-line client: tables, sizes, times, JSON,
 * base64 and full writes. */
#ifndef FB_CLI_OUTPUT_H
#define FB_CLI_OUTPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

/* "512 B", "1.5 KiB", "3.2 GiB" into buf (at least 16 bytes). */
void fb_format_bytes(uint64_t n, char *buf, size_t len);

/* Parses the API's RFC 3339 UTC times ("2026-11-29T10:00:00.123Z") into
 * epoch milliseconds.  Returns 0, or -1 when the text is not one. */
int fb_parse_time(const char *text, int64_t *ms);

/* Relative forms for tables: "3m ago", "in 9m", "expired"; a NULL or
 * unparsable time gives "-" or the text itself. */
void fb_format_ago(const char *text, char *buf, size_t len);
void fb_format_until(const char *text, char *buf, size_t len);

/* Pretty-prints j and a newline to stdout.  Returns 0 or -1. */
int fb_print_json(const json_t *j);

/* "k=v,k2=v2" of a string→string object, sorted by key; "" when empty.
 * Caller frees; NULL only when out of memory. */
char *fb_format_map(const json_t *obj);

/* Decodes standard base64 (padding optional) into out, which must hold
 * len / 4 * 3 + 3 bytes.  Returns 0 with *outlen set, or -EINVAL. */
int fb_base64_decode(const char *in, size_t len, unsigned char *out, size_t *outlen);

/* write(2) until done, retrying EINTR.  Returns 0 or -errno. */

/* A text table with a header row; cells are copied, and control characters
 * from the API are replaced so they cannot drive the terminal. */
struct fb_table {
    size_t ncols;
    size_t nrows; /* including the header */
    size_t cap;
    char **cells;
};

int fb_table_init(struct fb_table *t, size_t ncols, const char *const *headers);
int fb_table_add(struct fb_table *t, const char *const *row);
void fb_table_print(const struct fb_table *t, FILE *out);
void fb_table_release(struct fb_table *t);
#define cleanup_table __attribute__((cleanup(fb_table_release)))

/* Copy of s with control characters replaced by '?'; caller frees. */
char *fb_sanitize(const char *s);

#endif
