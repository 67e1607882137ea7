#include "buildcopy_match.h"

#include <fnmatch.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "path.h"

int bc_clean(const char *in, char *out, size_t outlen)
{
    size_t len = 0;
    out[0] = '\0';
    for (const char *p = in; *p != '\0';) {
        while (*p == '/')
            p++;
        const char *c = p;
        while (*p != '\0' && *p != '/')
            p++;
        size_t n = (size_t)(p - c);
        if (n == 0 || (n == 1 && c[0] == '.'))
            continue;
        if (n == 2 && c[0] == '.' && c[1] == '.') {
            if (len == 0)
                return BC_CLEAN_ESCAPE;
            while (len > 0 && out[len - 1] != '/')
                len--;
            len = len > 0 ? len - 1 : 0;
            out[len] = '\0';
            continue;
        }
        if (n > NAME_MAX || len + (len ? 1 : 0) + n + 1 > outlen)
            return BC_CLEAN_TOO_LONG;
        if (len > 0)
            out[len++] = '/';
        memcpy(out + len, c, n);
        len += n;
        out[len] = '\0';
    }
    return BC_CLEAN_OK;
}

bool bc_has_glob(const char *s)
{
    return strpbrk(s, "*?[\\") != NULL;
}

struct comp {
    const char *s;
    size_t n;
};

/* "" has no components */
static size_t split(const char *s, struct comp *c, size_t max)
{
    size_t n = 0;
    while (*s != '\0' && n < max) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        c[n++] = (struct comp){s, len};
        s += len + (e ? 1 : 0);
    }
    return n;
}

static bool comp_match(const struct comp *p, const struct comp *n)
{
    char pat[FB_PATH_MAX + 1], name[NAME_MAX + 1];
    if (p->n > FB_PATH_MAX || n->n > NAME_MAX)
        return false;
    memcpy(pat, p->s, p->n);
    pat[p->n] = '\0';
    memcpy(name, n->s, n->n);
    name[n->n] = '\0';
    return fnmatch(pat, name, 0) == 0;
}

#define COMPS_MAX (FB_PATH_MAX / 2 + 1)

bool bc_glob_match(const char *pattern, const char *name)
{
    struct comp *pc = malloc(2 * COMPS_MAX * sizeof *pc);
    if (pc == NULL)
        return false;
    struct comp *nc = pc + COMPS_MAX;
    size_t np = split(pattern, pc, COMPS_MAX), nn = split(name, nc, COMPS_MAX);
    bool ok = np == nn;
    for (size_t i = 0; ok && i < np; i++)
        ok = comp_match(&pc[i], &nc[i]);
    free(pc);
    return ok;
}

/* Pattern components against name components; running out of pattern with
 * name left over is a match too, because a rule for a directory covers
 * everything below it. */
static bool rule_match(const struct comp *p, size_t np, const struct comp *n, size_t nn)
{
    if (np == 0)
        return true;
    if (p[0].n == 2 && memcmp(p[0].s, "**", 2) == 0) {
        for (size_t k = 0; k <= nn; k++)
            if (rule_match(p + 1, np - 1, n + k, nn - k))
                return true;
        return false;
    }
    return nn > 0 && comp_match(&p[0], &n[0]) && rule_match(p + 1, np - 1, n + 1, nn - 1);
}

int bc_ignore_parse(const char *text, size_t len, struct bc_ignore *ig)
{
    ig->rules = NULL;
    ig->n = 0;
    const char *end = text + len;
    while (text < end) {
        const char *nl = memchr(text, '\n', (size_t)(end - text));
        const char *e = nl ? nl : end;
        const char *s = text;
        text = nl ? nl + 1 : end;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
            e--;
        if (s == e || *s == '#')
            continue;
        bool keep = *s == '!';
        if (keep)
            s++;
        char raw[FB_PATH_MAX + 1], pat[FB_PATH_MAX + 1];
        size_t n = (size_t)(e - s);
        if (n > FB_PATH_MAX)
            continue;
        memcpy(raw, s, n);
        raw[n] = '\0';
        /* a rule climbing out of the context can match nothing in it */
        if (bc_clean(raw, pat, sizeof pat) != BC_CLEAN_OK || pat[0] == '\0')
            continue;
        int dstars = 0;
        for (const char *q = pat; (q = strstr(q, "**")) != NULL; q += 2)
            dstars++;
        if (dstars > BC_DSTAR_MAX || ig->n == BC_IGNORE_PATTERNS_MAX)
            return -1;
        struct bc_rule *r = realloc(ig->rules, (ig->n + 1) * sizeof *r);
        if (r == NULL)
            return -1;
        ig->rules = r;
        if ((r[ig->n].pat = strdup(pat)) == NULL)
            return -1;
        r[ig->n++].keep = keep;
    }
    return 0;
}

bool bc_ignored(const struct bc_ignore *ig, const char *name)
{
    if (ig->n == 0)
        return false;
    struct comp *pc = malloc(2 * COMPS_MAX * sizeof *pc);
    if (pc == NULL)
        return false;
    struct comp *nc = pc + COMPS_MAX;
    size_t nn = split(name, nc, COMPS_MAX);
    bool out = false;
    for (size_t i = 0; i < ig->n; i++) {
        size_t np = split(ig->rules[i].pat, pc, COMPS_MAX);
        if (rule_match(pc, np, nc, nn))
            out = !ig->rules[i].keep;
    }
    free(pc);
    return out;
}

void bc_ignore_free(struct bc_ignore *ig)
{
    for (size_t i = 0; i < ig->n; i++)
        free(ig->rules[i].pat);
    free(ig->rules);
    ig->rules = NULL;
    ig->n = 0;
}
