/* The lexical half of dockerfile.c: physical lines joined into
 * instructions, then word splitting and variable substitution the way
 * Docker's shell lexer does them: quotes and backslashes, $VAR, ${VAR},
 * ${VAR:-word}, ${VAR:+word} (and the forms without ':'), ${VAR:?msg}.
 * Internal to the Dockerfile parser; errors carry no line number, the
 * caller adds it. */
#ifndef FB_CORE_DOCKERFILE_LEX_H
#define FB_CORE_DOCKERFILE_LEX_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "../common/error.h"

#define DF_KW_MAX 32

/* One instruction: its physical lines joined the way Docker joins them. */
struct df_instr {
    unsigned line;
    char *text; /* keyword and arguments, continuation lines joined */
    size_t len;
    char kw[DF_KW_MAX + 1]; /* upper case, cut at DF_KW_MAX */
    const char *rest;       /* the arguments, into text */
    size_t restlen;
};

/* Checks the parser directives at the top of text: only "escape=\\" (the
 * default) is accepted for escape; others are comments, as in Docker. */
int df_check_directives(const char *text, size_t len, fb_error_t *err);

/* Splits text into at most FB_DF_INSTR_MAX instructions in in[] (each text
 * heap-owned by the caller even on failure, *count of them), dropping
 * comments and blank lines; errors name the line. */
int df_read_instrs(const char *text, size_t len, struct df_instr *in, size_t *count, fb_error_t *err);

/* Whether s[0..n) is lit (upper case) ignoring ASCII case. */
bool df_ci_eq(const char *s, size_t n, const char *lit);

/* A variable's value, or NULL when it is not set. */
typedef const char *(*df_lookup_fn)(void *ctx, const char *name);

struct df_lex {
    df_lookup_fn look;
    void *ctx;
    size_t *budget; /* bytes substitution may still produce in this parse */
};

struct df_word {
    const char *s;
    size_t len;
};

/* Splits s[0..len) at unquoted blanks into at most FB_DF_WORDS_MAX words
 * pointing into s, quotes and escapes left in place.  -1 with *err set for
 * an unterminated quote or too many words. */
int df_split(const char *s, size_t len, struct df_word *w, size_t *n, fb_error_t *err);

/* Substitutes variables in s[0..len) and, when quotes, removes quotes and
 * backslash escapes.  With words (a json array) unquoted blanks, literal or
 * from a value, separate words appended to it; otherwise the whole result
 * is one heap string in *one.  -1 with *err set on bad syntax or a result
 * over FB_DF_WORD_MAX / the budget. */
int df_expand(const struct df_lex *lx, const char *s, size_t len, bool quotes, json_t *words, char **one,
              fb_error_t *err);

/* Offset of the first '=' outside quotes in w, or -1. */
long df_unquoted_eq(const char *s, size_t len);

#endif
