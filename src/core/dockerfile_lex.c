#include "dockerfile_lex.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cleanup.h"
#include "dockerfile.h"

/* ${a:-${b:-${c}}}: each level rescans its word, so nesting is bounded to
 * keep the work linear in the text */
#define DEPTH_MAX 8

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

int df_split(const char *s, size_t len, struct df_word *w, size_t *n, fb_error_t *err)
{
    *n = 0;
    size_t i = 0;
    while (i < len) {
        while (i < len && is_blank(s[i]))
            i++;
        if (i == len)
            break;
        size_t start = i;
        char q = 0;
        int braces = 0; /* ${X:-a b} is one word */
        for (; i < len && (q != 0 || braces > 0 || !is_blank(s[i])); i++) {
            if (q == '\'') {
                if (s[i] == '\'')
                    q = 0;
            } else if (s[i] == '\\' && i + 1 < len) {
                i++;
            } else if (s[i] == '$' && i + 1 < len && s[i + 1] == '{') {
                braces++;
                i++;
            } else if (s[i] == '}' && braces > 0) {
                braces--;
            } else if (q == '"') {
                if (s[i] == '"')
                    q = 0;
            } else if (s[i] == '\'' || s[i] == '"') {
                q = s[i];
            }
        }
        if (q != 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "unterminated %s quote",
                                q == '"' ? "double" : "single");
        if (*n == FB_DF_WORDS_MAX)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "more than %d arguments", FB_DF_WORDS_MAX);
        w[(*n)++] = (struct df_word){s + start, i - start};
    }
    return 0;
}

long df_unquoted_eq(const char *s, size_t len)
{
    char q = 0;
    for (size_t i = 0; i < len; i++) {
        if (q == '\'') {
            if (s[i] == '\'')
                q = 0;
        } else if (s[i] == '\\' && i + 1 < len) {
            i++;
        } else if (q == '"') {
            if (s[i] == '"')
                q = 0;
        } else if (s[i] == '\'' || s[i] == '"') {
            q = s[i];
        } else if (s[i] == '=') {
            return (long)i;
        }
    }
    return -1;
}

struct ex {
    const struct df_lex *lx;
    bool quotes;
    json_t *words; /* NULL: one string */
    char *buf;
    size_t len;
    bool have; /* a word has started, even if empty ("" is a word) */
    int depth;
    fb_error_t *err;
};

static int put(struct ex *x, const char *s, size_t n)
{
    if (x->len + n > FB_DF_WORD_MAX)
        return fb_error_set(x->err, FB_ERR_BAD_REQUEST, 0, "an argument expands to more than %d bytes",
                            FB_DF_WORD_MAX);
    if (n > *x->lx->budget)
        return fb_error_set(x->err, FB_ERR_BAD_REQUEST, 0,
                            "variable substitution produces more than %d bytes", FB_DF_EXPANDED_MAX);
    *x->lx->budget -= n;
    if (x->buf == NULL && (x->buf = malloc(FB_DF_WORD_MAX + 1)) == NULL)
        return fb_error_set(x->err, FB_ERR_INTERNAL, ENOMEM, "substitution");
    memcpy(x->buf + x->len, s, n);
    x->len += n;
    x->have = true;
    return 0;
}

static int end_word(struct ex *x)
{
    if (!x->have)
        return 0;
    if (json_array_size(x->words) >= FB_DF_WORDS_MAX)
        return fb_error_set(x->err, FB_ERR_BAD_REQUEST, 0, "more than %d arguments", FB_DF_WORDS_MAX);
    json_t *w = json_stringn(x->buf ? x->buf : "", x->len);
    if (w == NULL || json_array_append_new(x->words, w) < 0)
        return fb_error_set(x->err, FB_ERR_INTERNAL, 0, "substitution: bad string");
    x->len = 0;
    x->have = false;
    return 0;
}

/* A substituted value outside double quotes: with words, its blanks split
 * it as the shell would. */
static int put_value(struct ex *x, const char *v, bool dq)
{
    size_t n = strlen(v);
    if (x->words == NULL || dq)
        return n == 0 ? 0 : put(x, v, n);
    for (size_t i = 0; i < n;) {
        if (is_blank(v[i]) || v[i] == '\n') {
            if (end_word(x) < 0)
                return -1;
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && !is_blank(v[j]) && v[j] != '\n')
            j++;
        if (put(x, v + i, j - i) < 0)
            return -1;
        i = j;
    }
    return 0;
}

static int run(struct ex *x, const char *s, size_t len);

/* The word of ${NAME:-word}, substituted as one string. */
static int sub_word(struct ex *x, const char *s, size_t len, char **out)
{
    if (x->depth >= DEPTH_MAX)
        return fb_error_set(x->err, FB_ERR_BAD_REQUEST, 0, "substitutions nested more than %d deep",
                            DEPTH_MAX);
    struct ex y = {.lx = x->lx, .quotes = x->quotes, .depth = x->depth + 1, .err = x->err};
    if (run(&y, s, len) < 0) {
        free(y.buf);
        return -1;
    }
    if (y.buf == NULL && (y.buf = malloc(1)) == NULL)
        return fb_error_set(x->err, FB_ERR_INTERNAL, ENOMEM, "substitution");
    y.buf[y.len] = '\0';
    *out = y.buf;
    return 0;
}

/* s[*i] is '$': substitutes what follows and advances *i past it. */
static int dollar(struct ex *x, const char *s, size_t len, size_t *i, bool dq)
{
    size_t j = *i + 1;
    char name[FB_DF_NAME_MAX + 1];
    if (j < len && s[j] != '{') {
        /* like the shell, $1 is one digit; a '$' before anything else is literal */
        size_t k = j;
        if (s[k] >= '0' && s[k] <= '9')
            k++;
        else
            while (k < len && is_name_char(s[k]))
                k++;
        if (k == j) {
            *i = j;
            return put(x, "$", 1);
        }
        if (k - j > FB_DF_NAME_MAX)
            return fb_error_set(x->err, FB_ERR_BAD_REQUEST, 0, "variable name longer than %d bytes",
                                FB_DF_NAME_MAX);
        memcpy(name, s + j, k - j);
        name[k - j] = '\0';
        *i = k;
        const char *v = x->lx->look(x->lx->ctx, name);
        return v ? put_value(x, v, dq) : 0;
    }
    if (j >= len) {
        *i = j;
        return put(x, "$", 1);
    }
    size_t k = j + 1;
    while (k < len && is_name_char(s[k]))
        k++;
    size_t nlen = k - (j + 1);
    if (nlen == 0)
        return fb_error_set(x->err, FB_ERR_BAD_REQUEST, 0, "bad substitution: ${ needs a variable name");
    if (k >= len)
        return fb_error_set(x->err, FB_ERR_BAD_REQUEST, 0, "missing '}' in ${%.*s",
                            (int)(nlen > 40 ? 40 : nlen), s + j + 1);
    if (nlen > FB_DF_NAME_MAX)
        return fb_error_set(x->err, FB_ERR_BAD_REQUEST, 0, "variable name longer than %d bytes",
                            FB_DF_NAME_MAX);
    memcpy(name, s + j + 1, nlen);
    name[nlen] = '\0';
    const char *v = x->lx->look(x->lx->ctx, name);
    if (s[k] == '}') {
        *i = k + 1;
        return v ? put_value(x, v, dq) : 0;
    }
    bool colon = s[k] == ':';
    char op = colon ? (k + 1 < len ? s[k + 1] : 0) : s[k];
    if (op != '-' && op != '+' && op != '?')
        return fb_error_set(x->err, FB_ERR_BAD_REQUEST, 0,
                            "bad substitution ${%s%c...}: only :- :+ :? - + ? are supported", name, s[k]);
    size_t w0 = k + (colon ? 2 : 1), e = w0;
    int nest = 1;
    for (; e < len; e++) {
        if (s[e] == '\\' && e + 1 < len)
            e++;
        else if (s[e] == '$' && e + 1 < len && s[e + 1] == '{')
            nest++, e++;
        else if (s[e] == '}' && --nest == 0)
            break;
    }
    if (e >= len)
        return fb_error_set(x->err, FB_ERR_BAD_REQUEST, 0, "missing '}' in ${%s", name);
    *i = e + 1;
    bool set = v != NULL && (!colon || v[0] != '\0');
    bool use_word = (op == '-' && !set) || (op == '+' && set);
    if (op == '?' && !set) {
        cleanup_free char *msg = NULL;
        if (sub_word(x, s + w0, e - w0, &msg) < 0)
            return -1;
        return fb_error_set(x->err, FB_ERR_BAD_REQUEST, 0, "%s: %.200s", name,
                            msg[0] ? msg : "parameter not set or empty");
    }
    if (!use_word)
        return op == '+' || v == NULL ? 0 : put_value(x, v, dq);
    cleanup_free char *w = NULL;
    if (sub_word(x, s + w0, e - w0, &w) < 0)
        return -1;
    return put_value(x, w, dq);
}

static int run(struct ex *x, const char *s, size_t len)
{
    bool dq = false;
    for (size_t i = 0; i < len;) {
        char c = s[i];
        if (x->quotes && c == '\'' && !dq) {
            const char *end = memchr(s + i + 1, '\'', len - i - 1);
            if (end == NULL)
                return fb_error_set(x->err, FB_ERR_BAD_REQUEST, 0, "unterminated single quote");
            size_t n = (size_t)(end - (s + i + 1));
            if (put(x, s + i + 1, n) < 0)
                return -1;
            x->have = true;
            i += n + 2;
        } else if (x->quotes && c == '"') {
            dq = !dq;
            x->have = true;
            i++;
        } else if (x->quotes && c == '\\') {
            if (i + 1 == len) {
                if (put(x, "\\", 1) < 0)
                    return -1;
                i++;
            } else if (dq && s[i + 1] != '"' && s[i + 1] != '\\' && s[i + 1] != '$') {
                if (put(x, "\\", 1) < 0)
                    return -1;
                i++;
            } else {
                if (put(x, s + i + 1, 1) < 0)
                    return -1;
                i += 2;
            }
        } else if (!x->quotes && c == '\\' && i + 1 < len && s[i + 1] == '$') {
            if (put(x, "$", 1) < 0)
                return -1;
            i += 2;
        } else if (c == '$') {
            if (dollar(x, s, len, &i, dq) < 0)
                return -1;
        } else if (x->words != NULL && !dq && is_blank(c)) {
            if (end_word(x) < 0)
                return -1;
            i++;
        } else {
            if (put(x, &c, 1) < 0)
                return -1;
            i++;
        }
    }
    if (dq)
        return fb_error_set(x->err, FB_ERR_BAD_REQUEST, 0, "unterminated double quote");
    return 0;
}

int df_expand(const struct df_lex *lx, const char *s, size_t len, bool quotes, json_t *words, char **one,
              fb_error_t *err)
{
    struct ex x = {.lx = lx, .quotes = quotes, .words = words, .err = err};
    int rc = run(&x, s, len);
    if (rc == 0 && words != NULL)
        rc = end_word(&x);
    if (rc == 0 && words == NULL) {
        if (x.buf == NULL && (x.buf = malloc(1)) == NULL)
            rc = fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "substitution");
        else {
            x.buf[x.len] = '\0';
            *one = fb_steal_ptr(x.buf);
        }
    }
    free(x.buf);
    return rc;
}

/* ---- logical lines ---------------------------------------------------- */

struct rd {
    const char *p, *end;
    unsigned lineno;
};

static bool next_phys(struct rd *r, const char **s, size_t *n)
{
    if (r->p >= r->end)
        return false;
    const char *nl = memchr(r->p, '\n', (size_t)(r->end - r->p));
    const char *e = nl ? nl : r->end;
    *s = r->p;
    *n = (size_t)(e - r->p);
    if (*n > 0 && (*s)[*n - 1] == '\r')
        (*n)--;
    r->p = nl ? nl + 1 : r->end;
    r->lineno++;
    return true;
}

bool df_ci_eq(const char *s, size_t n, const char *lit)
{
    if (strlen(lit) != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i] >= 'a' && s[i] <= 'z' ? (char)(s[i] - 32) : s[i];
        if (c != lit[i])
            return false;
    }
    return true;
}

/* Parser directives sit in comments above everything else.  Only escape
 * changes parsing, and only the default backslash is supported: a
 * Dockerfile asking for backtick escapes would be misread. */
int df_check_directives(const char *text, size_t len, fb_error_t *err)
{
    struct rd r = {text, text + len, 0};
    const char *s;
    size_t n;
    while (next_phys(&r, &s, &n)) {
        size_t i = 0;
        if (n == 0 || s[0] != '#')
            return 0;
        for (i = 1; i < n && is_blank(s[i]); i++)
            ;
        size_t k0 = i;
        while (i < n && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')))
            i++;
        size_t k1 = i;
        while (i < n && is_blank(s[i]))
            i++;
        if (k1 == k0 || i == n || s[i] != '=')
            return 0;
        for (i++; i < n && is_blank(s[i]); i++)
            ;
        size_t v1 = n;
        while (v1 > i && is_blank(s[v1 - 1]))
            v1--;
        if (df_ci_eq(s + k0, k1 - k0, "ESCAPE") && !(v1 - i == 1 && s[i] == '\\'))
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "Dockerfile line %u: the escape parser directive is not supported "
                                "(only the default backslash)",
                                r.lineno);
    }
    return 0;
}

static int emit(struct df_instr *in, size_t *count, unsigned line, const char *buf, size_t len,
                fb_error_t *err)
{
    while (len > 0 && is_blank(buf[len - 1]))
        len--;
    if (*count == FB_DF_INSTR_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "Dockerfile line %u: more than %d instructions", line,
                            FB_DF_INSTR_MAX);
    struct df_instr *it = &in[*count];
    if ((it->text = strndup(buf, len)) == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "Dockerfile");
    (*count)++;
    it->line = line;
    it->len = len;
    size_t k = 0;
    while (k < len && !is_blank(it->text[k]))
        k++;
    for (size_t i = 0; i < k && i < DF_KW_MAX; i++) {
        unsigned char c = (unsigned char)it->text[i];
        it->kw[i] = c >= 'a' && c <= 'z' ? (char)(c - 32) : (c >= 0x21 && c < 0x7f ? (char)c : '?');
    }
    size_t r = k;
    while (r < len && is_blank(it->text[r]))
        r++;
    it->rest = it->text + r;
    it->restlen = len - r;
    return 0;
}

/* Comment and blank lines are dropped even inside a continuation, and a
 * continuation line keeps its leading blanks, as Docker joins them. */
int df_read_instrs(const char *text, size_t len, struct df_instr *in, size_t *count, fb_error_t *err)
{
    cleanup_free char *buf = malloc(FB_DF_LINE_MAX);
    if (buf == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "Dockerfile");
    struct rd r = {text, text + len, 0};
    const char *s;
    size_t n, blen = 0;
    bool open = false;
    unsigned start = 0;
    while (next_phys(&r, &s, &n)) {
        size_t lead = 0;
        while (lead < n && is_blank(s[lead]))
            lead++;
        if (lead == n || s[lead] == '#')
            continue;
        const char *piece = open ? s : s + lead;
        size_t pn = open ? n : n - lead;
        if (!open) {
            open = true;
            start = r.lineno;
            blen = 0;
        }
        while (pn > 0 && is_blank(piece[pn - 1]))
            pn--;
        bool cont = pn > 0 && piece[pn - 1] == '\\';
        if (cont)
            pn--;
        if (blen + pn > FB_DF_LINE_MAX)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "Dockerfile line %u: instruction longer than %d bytes", start,
                                FB_DF_LINE_MAX);
        memcpy(buf + blen, piece, pn);
        blen += pn;
        if (!cont) {
            open = false;
            if (emit(in, count, start, buf, blen, err) < 0)
                return -1;
        }
    }
    if (open && emit(in, count, start, buf, blen, err) < 0)
        return -1;
    return 0;
}
