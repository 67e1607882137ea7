/* Names and patterns for buildcopy.c: build context member names cleaned
 * to "a/b" form, COPY source globs matched one component at a time, and
 * .dockerignore rules.  Internal to buildcopy. */
#ifndef FB_CORE_BUILDCOPY_MATCH_H
#define FB_CORE_BUILDCOPY_MATCH_H

#include <stdbool.h>
#include <stddef.h>

#define BC_IGNORE_MAX 65536 /* bytes of .dockerignore */
#define BC_IGNORE_PATTERNS_MAX 1024
#define BC_DSTAR_MAX 4 /* "**" per pattern: each one multiplies the matching work */

enum {
    BC_CLEAN_OK = 0,
    BC_CLEAN_ESCAPE = -1,   /* ".." above the root */
    BC_CLEAN_TOO_LONG = -2, /* over outlen, or a component over NAME_MAX */
};

/* Writes in as a relative name without "", "." or ".." components and
 * without leading or trailing '/' ("" for the root) into out. */
int bc_clean(const char *in, char *out, size_t outlen);

/* Whether s has glob syntax (* ? [ or a backslash escape). */
bool bc_has_glob(const char *s);

/* Whether the cleaned name matches the cleaned pattern: the same number
 * of components, each matched with fnmatch (no FNM_PERIOD, as Docker). */
bool bc_glob_match(const char *pattern, const char *name);

struct bc_rule {
    char *pat; /* cleaned */
    bool keep; /* a "!" exception */
};

struct bc_ignore {
    struct bc_rule *rules;
    size_t n;
};

/* Parses .dockerignore text: one pattern a line, '#' comments, "!"
 * exceptions, "**" for any number of directories.  0, or -1 on
 * allocation failure / too many patterns. */
int bc_ignore_parse(const char *text, size_t len, struct bc_ignore *ig);

/* Whether name is left out: the last rule matching it or one of its
 * parent directories decides. */
bool bc_ignored(const struct bc_ignore *ig, const char *name);

void bc_ignore_free(struct bc_ignore *ig);

#endif
