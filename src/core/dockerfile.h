/* Dockerfiles for template builds: parsed and evaluated statically, so the
 * build executor gets, for every instruction, its resolved payload and the
 * image state (env, workdir, user, cmd, labels) after it, without running
 * anything.  Single-stage only; the instructions that need a daemon-side
 * feature forkbox lacks (VOLUME, HEALTHCHECK, ONBUILD, SHELL, heredocs,
 * COPY --from, ...) are refused with the line they are on.  Every error
 * about the text is FB_ERR_BAD_REQUEST and starts "Dockerfile line N: ". */
#ifndef FB_CORE_DOCKERFILE_H
#define FB_CORE_DOCKERFILE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "../common/error.h"

#define FB_DF_TEXT_MAX (1 << 20)      /* bytes of Dockerfile text */
#define FB_DF_INSTR_MAX 1000          /* instructions, ARGs before FROM included */
#define FB_DF_LINE_MAX 65536          /* one instruction, continuation lines joined */
#define FB_DF_WORDS_MAX 256           /* arguments of one instruction */
#define FB_DF_WORD_MAX 65536          /* one argument after variable substitution */
#define FB_DF_CONFIG_MAX (1 << 20)    /* env + labels + ARG values of the image state */
#define FB_DF_EXPANDED_MAX (32 << 20) /* everything substitution produces in one parse */
#define FB_DF_NAME_MAX 255            /* FROM name, AS name, ENV/ARG/LABEL names */
#define FB_DF_VARS_MAX 4096           /* ENV names, LABEL names, ARG names, each */

enum fb_df_op {
    FB_DF_FROM = 1,
    FB_DF_RUN,
    FB_DF_COPY,
    FB_DF_ADD,
    FB_DF_ENV,
    FB_DF_WORKDIR,
    FB_DF_USER,
    FB_DF_ARG,
    FB_DF_CMD,
    FB_DF_ENTRYPOINT,
    FB_DF_LABEL,
    FB_DF_EXPOSE,     /* recorded only: a sandbox has no port publishing to declare */
    FB_DF_STOPSIGNAL, /* recorded only */
};

/* Image state after a step.  The json values are shared between steps
 * (a step that does not change env holds the same array as the one before):
 * treat them as read-only. */
struct fb_df_state {
    json_t *env;        /* array of "K=V", the image config's Env */
    json_t *run_env;    /* what a RUN sees: env plus the ARG values in effect */
    json_t *cmd;        /* array, or json null when unset */
    json_t *entrypoint; /* array, or json null when unset */
    json_t *labels;     /* object name -> string */
    char *workdir;      /* absolute, normalised; "/" unless the base sets one */
    char *user;         /* "root" unless the base or a USER sets one; names unresolved */
};

struct fb_df_step {
    enum fb_df_op op;
    unsigned line; /* 1-based line the instruction starts on; 0 for the implicit FROM */
    char *text;    /* the instruction as written, continuation lines joined */
    /* payload, by op (unused fields NULL / false) */
    json_t *argv;    /* RUN, CMD, ENTRYPOINT: the command; shell form is ["/bin/sh","-c",text] */
    bool shell_form; /* RUN, CMD, ENTRYPOINT: written in shell form */
    json_t *srcs;    /* COPY, ADD: array of source patterns, substituted, relative to the context */
    char *dest;      /* COPY, ADD: absolute; ends in '/' when it can only be a directory */
    char *chown;     /* COPY, ADD: the --chown= value as written after substitution, or NULL */
    char *name;      /* FROM: the template ("scratch" for an empty base) */
    char *alias;     /* FROM: the AS name, or NULL */
    json_t *vars;    /* ENV, LABEL, ARG: object of what this instruction set (ARG: null = no value) */
    json_t *words;   /* EXPOSE, STOPSIGNAL: the arguments, substituted */
    struct fb_df_state st;
};

struct fb_dockerfile {
    char *base;               /* the FROM template, "scratch" for none */
    struct fb_df_step *steps; /* steps[0] is always the FROM */
    size_t nsteps;
};

/* The base template's image config for a FROM name: a new reference to
 * {"env": [..], "workdir": "/x", "user": "u", "cmd": [..]|null,
 * "entrypoint": [..]|null, "labels": {..}} (every member optional), or NULL
 * with *err set (its kind is kept, e.g. FB_ERR_NOT_FOUND).  Not called for
 * "scratch". */
typedef json_t *(*fb_df_base_config_fn)(void *ctx, const char *name, fb_error_t *err);

struct fb_df_opts {
    const json_t *build_args;         /* object name -> string, or NULL */
    const char *default_from;         /* the base when the text has no FROM, or NULL to require one */
    fb_df_base_config_fn base_config; /* NULL: every base has an empty config */
    void *ctx;                        /* handed to base_config */
};

/* Parses and evaluates text[0..len) into *out (caller-owned, cleared first,
 * release with fb_dockerfile_clear).  0, or -1 with *err set and *out empty:
 * FB_ERR_BAD_REQUEST "Dockerfile line N: ..." for the text, or base_config's
 * error wrapped with the FROM line. */
int fb_dockerfile_parse(const char *text, size_t len, const struct fb_df_opts *o, struct fb_dockerfile *out,
                        fb_error_t *err);

/* Frees everything df owns and zeroes it; safe on a zeroed struct. */
void fb_dockerfile_clear(struct fb_dockerfile *df);

/* The canonical text of a step for a build cache key (heap string, caller
 * frees; NULL on allocation failure): compact JSON with sorted keys of the op,
 * its resolved payload and the state after it, so comments, whitespace,
 * keyword case and line numbers do not matter.  The executor chains it with
 * the parent's key; for FROM it must add the base template's identity. */
char *fb_dockerfile_step_key_text(const struct fb_df_step *s);

/* "RUN", "COPY", ... for an op; "?" for anything else. */
const char *fb_df_op_name(enum fb_df_op op);

#endif
