/* Dockerfile parsing and static evaluation: every instruction in both
 * forms, substitution, ARG/ENV scoping, the base config seeding the state,
 * the refusals with their line numbers, and cache key stability. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/json_util.h"
#include "core/dockerfile.h"

static json_t *base_cfg(void *ctx, const char *name, fb_error_t *err)
{
    int *calls = ctx;
    if (calls != NULL)
        (*calls)++;
    if (strcmp(name, "python") == 0)
        return json_pack("{s:[ss], s:s, s:s, s:[s], s:n, s:{s:s}}", "env", "PATH=/usr/local/bin:/usr/bin",
                         "LANG=C.UTF-8", "workdir", "/srv", "user", "app", "cmd", "python3", "entrypoint",
                         "labels", "org.base", "py");
    if (strcmp(name, "default") == 0 || strcmp(name, "python-3.12") == 0)
        return json_pack("{s:[s]}", "env", "PATH=/bin");
    fb_error_set(err, FB_ERR_NOT_FOUND, 0, "template %s not found", name);
    return NULL;
}

static int parse_with(const char *text, json_t *args, const char *def, struct fb_dockerfile *df,
                      fb_error_t *err)
{
    struct fb_df_opts o = {.build_args = args, .default_from = def, .base_config = base_cfg};
    return fb_dockerfile_parse(text, strlen(text), &o, df, err);
}

static void parse_ok(const char *text, json_t *args, const char *def, struct fb_dockerfile *df)
{
    cleanup_error fb_error_t err = NULL;
    if (parse_with(text, args, def, df, &err) != 0)
        fail_msg("refused: %s\n---\n%s", err->msg, text);
    assert_null(err);
    assert_true(df->nsteps >= 1);
    assert_int_equal(df->steps[0].op, FB_DF_FROM);
}

static void expect_error_kind(const char *text, const char *def, enum fb_error_kind kind, const char *part)
{
    struct fb_dockerfile df;
    cleanup_error fb_error_t err = NULL;
    if (parse_with(text, NULL, def, &df, &err) != -1)
        fail_msg("accepted:\n%s", text);
    assert_non_null(err);
    if (strstr(err->msg, part) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", err->msg, part);
    assert_int_equal(err->kind, kind);
    assert_int_equal(df.nsteps, 0);
    assert_null(df.steps);
}

static void expect_error(const char *text, const char *part)
{
    expect_error_kind(text, NULL, FB_ERR_BAD_REQUEST, part);
}

/* value of K in a "K=V" array, or NULL */
static const char *kv(const json_t *arr, const char *k)
{
    size_t i, n = strlen(k);
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        const char *s = json_string_value(v);
        if (strncmp(s, k, n) == 0 && s[n] == '=')
            return s + n + 1;
    }
    return NULL;
}

static const char *at(const json_t *arr, size_t i)
{
    return json_string_value(json_array_get(arr, i));
}

static const char *var(const struct fb_df_step *s, const char *k)
{
    return json_string_value(json_object_get(s->vars, k));
}

static void test_every_instruction(void **state)
{
    (void)state;
    struct fb_dockerfile df;
    parse_ok("FROM python AS build\n"
             "RUN pip install flask\n"
             "RUN [\"python3\", \"-c\", \"print(1)\"]\n"
             "COPY app.py /app/\n"
             "ADD data.tar.gz /data\n"
             "ENV MODE=prod\n"
             "WORKDIR /app\n"
             "USER 1000:1000\n"
             "ARG VERSION=1.0\n"
             "CMD [\"python3\", \"app.py\"]\n"
             "ENTRYPOINT /entry.sh\n"
             "LABEL org.version=$VERSION\n"
             "EXPOSE 8080/tcp 9090\n"
             "STOPSIGNAL SIGTERM\n",
             NULL, NULL, &df);
    assert_int_equal(df.nsteps, 14);
    assert_string_equal(df.base, "python");
    enum fb_df_op want[] = {FB_DF_FROM,       FB_DF_RUN,     FB_DF_RUN,    FB_DF_COPY,      FB_DF_ADD,
                            FB_DF_ENV,        FB_DF_WORKDIR, FB_DF_USER,   FB_DF_ARG,       FB_DF_CMD,
                            FB_DF_ENTRYPOINT, FB_DF_LABEL,   FB_DF_EXPOSE, FB_DF_STOPSIGNAL};
    for (size_t i = 0; i < df.nsteps; i++) {
        assert_int_equal(df.steps[i].op, want[i]);
        assert_int_equal(df.steps[i].line, i + 1);
        assert_non_null(df.steps[i].text);
        assert_non_null(df.steps[i].st.env);
        assert_non_null(df.steps[i].st.run_env);
    }
    struct fb_df_step *s = df.steps;
    assert_string_equal(s[0].name, "python");
    assert_string_equal(s[0].alias, "build");
    assert_string_equal(s[0].text, "FROM python AS build");
    assert_true(s[1].shell_form);
    assert_int_equal(json_array_size(s[1].argv), 3);
    assert_string_equal(at(s[1].argv, 0), "/bin/sh");
    assert_string_equal(at(s[1].argv, 1), "-c");
    assert_string_equal(at(s[1].argv, 2), "pip install flask");
    assert_false(s[2].shell_form);
    assert_int_equal(json_array_size(s[2].argv), 3);
    assert_string_equal(at(s[2].argv, 2), "print(1)");
    assert_int_equal(json_array_size(s[3].srcs), 1);
    assert_string_equal(at(s[3].srcs, 0), "app.py");
    assert_string_equal(s[3].dest, "/app/");
    assert_null(s[3].chown);
    assert_string_equal(s[4].dest, "/data");
    assert_string_equal(var(&s[5], "MODE"), "prod");
    assert_string_equal(kv(s[5].st.env, "MODE"), "prod");
    assert_string_equal(s[6].st.workdir, "/app");
    assert_string_equal(s[5].st.workdir, "/srv");
    assert_string_equal(s[7].st.user, "1000:1000");
    assert_string_equal(s[6].st.user, "app");
    assert_string_equal(var(&s[8], "VERSION"), "1.0");
    assert_string_equal(at(s[9].st.cmd, 1), "app.py");
    assert_string_equal(at(s[10].st.entrypoint, 2), "/entry.sh");
    assert_string_equal(at(s[10].st.cmd, 0), "python3"); /* CMD from this file survives ENTRYPOINT */
    assert_string_equal(json_string_value(json_object_get(s[11].st.labels, "org.version")), "1.0");
    assert_string_equal(json_string_value(json_object_get(s[11].st.labels, "org.base")), "py");
    assert_int_equal(json_array_size(s[12].words), 2);
    assert_string_equal(at(s[12].words, 0), "8080/tcp");
    assert_string_equal(at(s[13].words, 0), "SIGTERM");
    /* state carried along: the last step still has all of it */
    assert_string_equal(s[13].st.workdir, "/app");
    assert_string_equal(kv(s[13].st.env, "MODE"), "prod");
    assert_null(kv(s[13].st.env, "VERSION"));
    assert_string_equal(kv(s[13].st.run_env, "VERSION"), "1.0");
    fb_dockerfile_clear(&df);
    assert_int_equal(df.nsteps, 0);
    fb_dockerfile_clear(&df);
}

static void test_continuations_and_comments(void **state)
{
    (void)state;
    struct fb_dockerfile df;
    parse_ok("# syntax=docker/dockerfile:1\n"
             "# escape=\\\n"
             "\n"
             "  # an indented comment\n"
             "from python\r\n"
             "run apt-get update && \\\n"
             "    apt-get install -y \\\n"
             "# a comment inside the continuation\n"
             "\n"
             "    curl\n"
             "Env A=1 \\\n"
             "  B=2\n"
             "RUN echo trailing \\",
             NULL, NULL, &df);
    assert_int_equal(df.nsteps, 4);
    assert_int_equal(df.steps[0].line, 5);
    assert_string_equal(df.steps[0].name, "python");
    assert_int_equal(df.steps[1].line, 6);
    assert_string_equal(df.steps[1].text, "run apt-get update &&     apt-get install -y     curl");
    assert_string_equal(at(df.steps[1].argv, 2), "apt-get update &&     apt-get install -y     curl");
    assert_int_equal(df.steps[2].line, 11);
    assert_string_equal(var(&df.steps[2], "B"), "2");
    assert_int_equal(df.steps[3].line, 13);
    assert_string_equal(at(df.steps[3].argv, 2), "echo trailing");
    fb_dockerfile_clear(&df);

    expect_error("# escape=`\nFROM python\n",
                 "Dockerfile line 1: the escape parser directive is not supported");
    /* below the first instruction it is just a comment */
    parse_ok("FROM python\n# escape=`\nRUN x\n", NULL, NULL, &df);
    fb_dockerfile_clear(&df);
}

static void test_substitution(void **state)
{
    (void)state;
    struct fb_dockerfile df;
    parse_ok("FROM scratch\n"
             "ENV A=1 SP=\"x y\"\n"
             "ENV B=$A C=${A}c D=${NOPE:-def} E=${A:+alt} F=${NOPE:+alt} G=\\$A H='$A' I=\"$A b\" "
             "J=${A-x} K=${NOPE-x} L=${NOPE:-${A}z} M=a$ N=$ O=\"\\$A\\\\\"\n"
             "ENV A=2 P=$A\n"
             "ENV EMPTY=\n"
             "ENV Q=${EMPTY:-e} R=${EMPTY-e} S=${EMPTY:+p} T=${EMPTY+p}\n"
             "ENV legacy value with  spaces $A\n"
             "RUN echo $A ${A}\n"
             "COPY $SP ${A}.txt /d/\n",
             NULL, NULL, &df);
    assert_string_equal(df.base, "scratch");
    const struct fb_df_step *s = &df.steps[2];
    assert_string_equal(var(s, "B"), "1");
    assert_string_equal(var(s, "C"), "1c");
    assert_string_equal(var(s, "D"), "def");
    assert_string_equal(var(s, "E"), "alt");
    assert_string_equal(var(s, "F"), "");
    assert_string_equal(var(s, "G"), "$A");
    assert_string_equal(var(s, "H"), "$A");
    assert_string_equal(var(s, "I"), "1 b");
    assert_string_equal(var(s, "J"), "1");
    assert_string_equal(var(s, "K"), "x");
    assert_string_equal(var(s, "L"), "1z");
    assert_string_equal(var(s, "M"), "a$");
    assert_string_equal(var(s, "N"), "$");
    assert_string_equal(var(s, "O"), "$A\\");
    /* substitution sees the env from before the instruction */
    assert_string_equal(var(&df.steps[3], "P"), "1");
    assert_string_equal(kv(df.steps[3].st.env, "A"), "2");
    s = &df.steps[5];
    assert_string_equal(var(s, "Q"), "e");
    assert_string_equal(var(s, "R"), "");
    assert_string_equal(var(s, "S"), "");
    assert_string_equal(var(s, "T"), "p");
    assert_string_equal(var(&df.steps[6], "legacy"), "value with  spaces 2");
    /* RUN is left to the shell */
    assert_string_equal(at(df.steps[7].argv, 2), "echo $A ${A}");
    /* an unquoted value splits into sources, as in the shell */
    assert_int_equal(json_array_size(df.steps[8].srcs), 3);
    assert_string_equal(at(df.steps[8].srcs, 0), "x");
    assert_string_equal(at(df.steps[8].srcs, 1), "y");
    assert_string_equal(at(df.steps[8].srcs, 2), "2.txt");
    /* env keeps first-definition order, replaced values in place */
    assert_string_equal(at(df.steps[8].st.env, 0), "A=2");
    fb_dockerfile_clear(&df);

    expect_error("FROM scratch\nENV A=${NOPE:?must be set}\n", "Dockerfile line 2: ENV: NOPE: must be set");
    expect_error("FROM scratch\nENV A=${NOPE\n", "line 2: ENV: missing '}'");
    expect_error("FROM scratch\nENV A=${}\n", "line 2: ENV: bad substitution");
    expect_error("FROM scratch\nENV A=${X/a/b}\n", "bad substitution");
    expect_error("FROM scratch\nWORKDIR ${A:-${B:-${C:-${D:-${E:-${F:-${G:-${H:-${I:-${J}}}}}}}}}}\n",
                 "nested more than");
}

static void test_expansion_bounded(void **state)
{
    (void)state;
    /* doubling a value each line would reach 2^40 bytes */
    char text[4096] = "FROM scratch\nENV A=0123456789abcdef\n";
    for (int i = 0; i < 40; i++)
        strcat(text, "ENV A=$A$A\n");
    expect_error(text, "expands to more than 65536 bytes");

    /* many big values: the image config bound, then the total */
    char *big = malloc(FB_DF_TEXT_MAX);
    assert_non_null(big);
    strcpy(big, "FROM scratch\nENV A=");
    size_t n = strlen(big);
    memset(big + n, 'x', 60000);
    n += 60000;
    memcpy(big + n, "\n", 2);
    for (int i = 0; i < 40; i++) {
        char line[64];
        snprintf(line, sizeof line, "ENV B%d=$A\n", i);
        strcat(big + n, line);
    }
    expect_error(big, "take more than 1048576 bytes");
    free(big);
}

static void test_arg_and_env(void **state)
{
    (void)state;
    struct fb_dockerfile df;
    cleanup_json json_t *args = json_pack("{s:s, s:s, s:s}", "TAG", "3.12", "GREETING", "hi", "UNUSED", "x");
    parse_ok("ARG TAG=3.11\n"
             "ARG GLOBAL=g\n"
             "FROM python-${TAG}\n"
             "ARG TAG\n"
             "ARG GREETING=hello\n"
             "ARG PLAIN=p NOVALUE\n"
             "ARG GLOBAL\n"
             "ENV PLAIN=env-wins\n"
             "ENV G2=$GLOBAL P2=$PLAIN N=${NOVALUE:-unset}\n",
             args, NULL, &df);
    assert_string_equal(df.base, "python-3.12");
    assert_int_equal(df.steps[0].line, 3);
    assert_int_equal(df.nsteps, 7); /* ARGs before FROM are not steps */
    const struct fb_df_step *s = &df.steps[1];
    assert_int_equal(s->op, FB_DF_ARG);
    assert_string_equal(var(s, "TAG"), "3.12");
    assert_string_equal(var(&df.steps[2], "GREETING"), "hi");
    assert_true(json_is_null(json_object_get(df.steps[3].vars, "NOVALUE")));
    assert_string_equal(var(&df.steps[4], "GLOBAL"), "g");
    /* ARG values reach RUN but not the image */
    assert_string_equal(kv(df.steps[4].st.run_env, "GREETING"), "hi");
    assert_string_equal(kv(df.steps[4].st.run_env, "PATH"), "/bin");
    assert_null(kv(df.steps[4].st.env, "GREETING"));
    assert_null(kv(df.steps[4].st.run_env, "NOVALUE"));
    assert_null(kv(df.steps[4].st.run_env, "UNUSED"));
    assert_string_equal(kv(df.steps[4].st.run_env, "PLAIN"), "p");
    assert_string_equal(kv(df.steps[5].st.run_env, "PLAIN"), "env-wins");
    s = &df.steps[6];
    assert_string_equal(var(s, "G2"), "g");
    assert_string_equal(var(s, "P2"), "env-wins");
    assert_string_equal(var(s, "N"), "unset");
    fb_dockerfile_clear(&df);

    /* a global ARG is not visible in the stage until declared again */
    parse_ok("ARG V=1\nFROM scratch\nENV X=${V:-none}\n", NULL, NULL, &df);
    assert_string_equal(var(&df.steps[1], "X"), "none");
    fb_dockerfile_clear(&df);

    cleanup_json json_t *bad = json_pack("{s:i}", "N", 1);
    struct fb_df_opts o = {.build_args = bad};
    cleanup_error fb_error_t err = NULL;
    assert_int_equal(fb_dockerfile_parse("FROM scratch\n", 13, &o, &df, &err), -1);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    assert_non_null(strstr(err->msg, "build arg N"));
    expect_error("FROM scratch\nARG bad-name=1\n", "line 2: ARG: \"bad-name\" is not a valid name");
    expect_error("FROM scratch\nARG\n", "line 2: ARG needs a name");
}

static void test_workdir(void **state)
{
    (void)state;
    struct fb_dockerfile df;
    parse_ok("FROM scratch\nWORKDIR app\nWORKDIR sub/../lib/\nWORKDIR /opt//x/.\nENV D=data\n"
             "WORKDIR $D\nWORKDIR ../../../..\nWORKDIR \"/with space\"\n",
             NULL, NULL, &df);
    assert_string_equal(df.steps[0].st.workdir, "/");
    assert_string_equal(df.steps[0].st.user, "root");
    assert_string_equal(df.steps[1].st.workdir, "/app");
    assert_string_equal(df.steps[2].st.workdir, "/app/lib");
    assert_string_equal(df.steps[3].st.workdir, "/opt/x");
    assert_string_equal(df.steps[5].st.workdir, "/opt/x/data");
    assert_string_equal(df.steps[6].st.workdir, "/");
    assert_string_equal(df.steps[7].st.workdir, "/with space");
    fb_dockerfile_clear(&df);
    expect_error("FROM scratch\nWORKDIR\n", "line 2: WORKDIR takes one argument");
    expect_error("FROM scratch\nWORKDIR a b\n", "line 2: WORKDIR takes one argument");
    expect_error("FROM scratch\nUSER\n", "line 2: USER takes one argument");
}

static void test_base_config(void **state)
{
    (void)state;
    struct fb_dockerfile df;
    int calls = 0;
    struct fb_df_opts o = {.base_config = base_cfg, .ctx = &calls};
    cleanup_error fb_error_t err = NULL;
    const char *t = "FROM python\nENV PATH=/x:$PATH\nENTRYPOINT [\"tini\"]\n";
    assert_int_equal(fb_dockerfile_parse(t, strlen(t), &o, &df, &err), 0);
    assert_int_equal(calls, 1);
    const struct fb_df_step *s = df.steps;
    assert_string_equal(kv(s[0].st.env, "LANG"), "C.UTF-8");
    assert_string_equal(s[0].st.workdir, "/srv");
    assert_string_equal(s[0].st.user, "app");
    assert_string_equal(at(s[0].st.cmd, 0), "python3");
    assert_true(json_is_null(s[0].st.entrypoint));
    assert_string_equal(kv(s[1].st.env, "PATH"), "/x:/usr/local/bin:/usr/bin");
    assert_string_equal(at(s[1].st.env, 0), "PATH=/x:/usr/local/bin:/usr/bin");
    /* an ENTRYPOINT drops the base's CMD */
    assert_true(json_is_null(s[2].st.cmd));
    assert_string_equal(at(s[2].st.entrypoint, 0), "tini");
    fb_dockerfile_clear(&df);

    /* scratch never asks */
    calls = 0;
    assert_int_equal(fb_dockerfile_parse("FROM scratch\n", 13, &o, &df, &err), 0);
    assert_int_equal(calls, 0);
    assert_int_equal(json_array_size(df.steps[0].st.env), 0);
    assert_true(json_is_null(df.steps[0].st.cmd));
    fb_dockerfile_clear(&df);

    expect_error_kind("# hi\nFROM nosuch\n", NULL, FB_ERR_NOT_FOUND,
                      "Dockerfile line 2: FROM nosuch: template nosuch not found");
}

static void test_default_from(void **state)
{
    (void)state;
    struct fb_dockerfile df;
    parse_ok("RUN pip install x\n", NULL, "default", &df);
    assert_int_equal(df.nsteps, 2);
    assert_string_equal(df.base, "default");
    assert_int_equal(df.steps[0].line, 0);
    assert_string_equal(df.steps[0].name, "default");
    assert_string_equal(df.steps[0].text, "FROM default");
    assert_string_equal(kv(df.steps[1].st.env, "PATH"), "/bin");
    assert_int_equal(df.steps[1].line, 1);
    fb_dockerfile_clear(&df);

    /* ARGs at the top are stage ARGs when there is no FROM */
    parse_ok("ARG X=1\nRUN echo\n", NULL, "default", &df);
    assert_int_equal(df.nsteps, 3);
    assert_string_equal(kv(df.steps[2].st.run_env, "X"), "1");
    fb_dockerfile_clear(&df);

    /* a FROM in the text wins */
    parse_ok("FROM python\nRUN x\n", NULL, "default", &df);
    assert_string_equal(df.base, "python");
    fb_dockerfile_clear(&df);

    expect_error_kind("RUN x\nFROM python\n", "default", FB_ERR_BAD_REQUEST,
                      "Dockerfile line 2: FROM must come before any other instruction");
    expect_error("RUN x\n", "Dockerfile line 1: the first instruction must be FROM");
    expect_error("ARG A\n", "Dockerfile line 1: the first instruction must be FROM");
    expect_error_kind("RUN x\n", "nosuch", FB_ERR_NOT_FOUND,
                      "base template nosuch: template nosuch not found");
}

static void test_commands(void **state)
{
    (void)state;
    struct fb_dockerfile df;
    parse_ok("FROM scratch\n"
             "RUN [\"echo\", \"unterminated\"\n"
             "RUN [\"a\", 1]\n"
             "CMD []\n"
             "CMD echo \"$HOME\"\n"
             "ENTRYPOINT [\"/bin/tini\", \"--\"]\n"
             "RUN [ -f /x ] && echo\n",
             NULL, NULL, &df);
    assert_true(df.steps[1].shell_form);
    assert_string_equal(at(df.steps[1].argv, 2), "[\"echo\", \"unterminated\"");
    assert_true(df.steps[2].shell_form);
    assert_int_equal(json_array_size(df.steps[3].st.cmd), 0);
    assert_false(df.steps[3].shell_form);
    assert_string_equal(at(df.steps[4].st.cmd, 2), "echo \"$HOME\"");
    assert_string_equal(at(df.steps[5].st.cmd, 0), "/bin/sh"); /* not from the base: kept */
    assert_string_equal(at(df.steps[5].st.entrypoint, 1), "--");
    assert_true(df.steps[6].shell_form);
    fb_dockerfile_clear(&df);
    expect_error("FROM scratch\nRUN []\n", "line 2: RUN needs a command");
    expect_error("FROM scratch\nRUN\n", "line 2: RUN needs a command");
    expect_error("FROM scratch\nCMD\n", "line 2: CMD needs a command");
    expect_error("FROM scratch\nRUN --mount=type=cache,target=/x pip\n",
                 "line 2: RUN --mount is not supported");
}

static void test_copy_add(void **state)
{
    (void)state;
    struct fb_dockerfile df;
    parse_ok("FROM python\n"
             "COPY [\"a b.txt\", \"it's\", \"dst/\"]\n"
             "COPY --chown=app:app --link src/*.py lib ./\n"
             "WORKDIR /w\n"
             "COPY x ..\n"
             "ADD --chown=${U:-1000} archive.tar.xz rel/dir/.\n"
             "COPY . .\n"
             "COPY \"quoted name\" /abs\n",
             NULL, NULL, &df);
    const struct fb_df_step *s = df.steps;
    assert_int_equal(json_array_size(s[1].srcs), 2);
    assert_string_equal(at(s[1].srcs, 0), "a b.txt");
    assert_string_equal(at(s[1].srcs, 1), "it's");
    assert_string_equal(s[1].dest, "/srv/dst/");
    assert_string_equal(s[2].chown, "app:app");
    assert_int_equal(json_array_size(s[2].srcs), 2);
    assert_string_equal(at(s[2].srcs, 0), "src/*.py");
    assert_string_equal(s[2].dest, "/srv/");
    assert_string_equal(s[4].dest, "/");
    assert_int_equal(s[5].op, FB_DF_ADD);
    assert_string_equal(s[5].chown, "1000");
    assert_string_equal(s[5].dest, "/w/rel/dir/");
    assert_string_equal(at(s[6].srcs, 0), ".");
    assert_string_equal(s[6].dest, "/w/");
    assert_string_equal(at(s[7].srcs, 0), "quoted name");
    assert_string_equal(s[7].dest, "/abs");
    fb_dockerfile_clear(&df);

    expect_error("FROM scratch\nCOPY --from=build /x /y\n",
                 "Dockerfile line 2: COPY --from is not supported (multi-stage builds are not supported)");
    expect_error("FROM scratch\nCOPY --chmod=755 x /y\n", "line 2: COPY --chmod is not supported");
    expect_error("FROM scratch\nCOPY --chown x /y\n", "line 2: COPY --chown needs a value");
    expect_error(
        "FROM scratch\nADD https://example.com/x.tgz /y\n",
        "line 2: ADD from a URL is not supported (no network during builds); download it into the context");
    expect_error("FROM scratch\nCOPY http://example.com/x /y\n", "line 2: COPY cannot fetch a URL");
    expect_error("FROM scratch\nCOPY [\"a\", \"b\"\n", "line 2: COPY: invalid JSON array");
    expect_error("FROM scratch\nCOPY onlyone\n", "line 2: COPY needs a source and a destination");
    expect_error("FROM scratch\nCOPY --link\n", "line 2: COPY needs a source and a destination");
    expect_error("FROM scratch\nCOPY \"x /y\n", "line 2: COPY: unterminated double quote");
    expect_error("FROM scratch\nCOPY <<EOF /x\nhello\nEOF\n", "line 2: heredocs (<<EOF");
}

static void test_refusals(void **state)
{
    (void)state;
    expect_error("FROM python\nRUN a\nRUN b\n\n# c\nENV X=1\nHEALTHCHECK CMD curl -f http://x/\n",
                 "Dockerfile line 7: HEALTHCHECK is not supported");
    expect_error("FROM python\nvolume /data\n", "Dockerfile line 2: VOLUME is not supported");
    expect_error("FROM python\nONBUILD RUN x\n", "line 2: ONBUILD is not supported");
    expect_error("FROM python\nSHELL [\"/bin/bash\", \"-c\"]\n", "line 2: SHELL is not supported");
    expect_error("FROM python\nMAINTAINER me\n", "line 2: MAINTAINER is not supported");
    expect_error("FROM python\nFROBNICATE x\n", "Dockerfile line 2: unknown instruction FROBNICATE");
    expect_error("FROM python AS a\nRUN x\nFROM python\n",
                 "Dockerfile line 3: multi-stage builds are not supported");
    expect_error("FROM python\nRUN cat <<EOF > /x\nhi\nEOF\n", "Dockerfile line 2: heredocs (<<EOF");
    expect_error("FROM python\nRUN <<-'END'\nEND\n", "line 2: heredocs");
    expect_error("FROM --platform=linux/arm64 python\n",
                 "Dockerfile line 1: FROM --platform is not supported");
    expect_error("FROM python AS\n", "line 1: FROM needs a template name");
    expect_error("FROM python extra\n", "line 1: FROM needs a template name");
    expect_error("FROM python\nENV K\n", "Dockerfile line 2: ENV needs a value");
    expect_error("FROM python\nENV A=1 B\n", "Dockerfile line 2: ENV: \"B\" is not NAME=VALUE");
    expect_error("FROM python\nENV =1\n", "line 2: ENV: a name is empty");
    expect_error("FROM python\nENV\n", "line 2: ENV needs NAME=VALUE");
    expect_error("FROM python\nENV A=\"open\n", "line 2: ENV: unterminated double quote");
    expect_error("FROM python\nLABEL a='open\n", "line 2: LABEL: unterminated single quote");
    expect_error("", "Dockerfile has no instructions");
    expect_error("# only a comment\n\n   \n", "Dockerfile has no instructions");
    expect_error("FROM python\nSTOPSIGNAL\n", "line 2: STOPSIGNAL takes one argument");
    expect_error("FROM python\nEXPOSE\n", "line 2: EXPOSE takes at least one argument");

    struct fb_dockerfile df;
    cleanup_error fb_error_t err = NULL;
    const char bad_utf8[] = "FROM python\nRUN echo \xff\n";
    assert_int_equal(fb_dockerfile_parse(bad_utf8, sizeof bad_utf8 - 1, NULL, &df, &err), -1);
    assert_string_equal(err->msg, "Dockerfile is not valid UTF-8");
    fb_error_release(&err);
    assert_int_equal(fb_dockerfile_parse("FROM python\nRUN a\0b\n", 20, NULL, &df, &err), -1);
    assert_string_equal(err->msg, "Dockerfile line 2: NUL byte");
    fb_error_release(&err);

    char *big = malloc(FB_DF_TEXT_MAX + 2);
    assert_non_null(big);
    memset(big, '#', FB_DF_TEXT_MAX + 1);
    assert_int_equal(fb_dockerfile_parse(big, FB_DF_TEXT_MAX + 1, NULL, &df, &err), -1);
    assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
    assert_non_null(strstr(err->msg, "larger than 1048576 bytes"));
    fb_error_release(&err);

    /* one instruction over the line bound, built from continuations */
    strcpy(big, "FROM python\nRUN x");
    size_t n = strlen(big);
    for (int i = 0; i < 800; i++, n += 101) {
        memset(big + n, 'y', 98);
        memcpy(big + n + 98, "\\\n ", 3);
    }
    big[n] = '\0';
    expect_error(big, "Dockerfile line 2: instruction longer than 65536 bytes");

    strcpy(big, "FROM python\n");
    for (int i = 0; i < FB_DF_INSTR_MAX; i++)
        strcat(big, "RUN x\n");
    expect_error(big, "Dockerfile line 1001: more than 1000 instructions");
    free(big);

    /* the name in the message is shown safely */
    expect_error("FROM python\n\x7fweird x\n", "unknown instruction ?WEIRD");
}

static char *key_of(const struct fb_dockerfile *df, size_t i)
{
    assert_true(i < df->nsteps);
    char *k = fb_dockerfile_step_key_text(&df->steps[i]);
    assert_non_null(k);
    return k;
}

static void test_key_stability(void **state)
{
    (void)state;
    struct fb_dockerfile a, b, c;
    parse_ok("FROM python\nENV A=1\nRUN pip install x\nCOPY app /app/\nCMD [\"python3\"]\n", NULL, NULL, &a);
    parse_ok("# a comment\n\nfrom   python\n  env A=1\n# another\nrun pip install x\ncopy   app \\\n  /app/\n"
             "cmd [ \"python3\" ]\n",
             NULL, NULL, &b);
    parse_ok("FROM python\nENV A=2\nRUN pip install x\nCOPY app /app/\nCMD [\"python3\"]\n", NULL, NULL, &c);
    assert_int_equal(a.nsteps, b.nsteps);
    for (size_t i = 0; i < a.nsteps; i++) {
        cleanup_free char *ka = key_of(&a, i), *kb = key_of(&b, i), *ka2 = key_of(&a, i), *kc = key_of(&c, i);
        assert_string_equal(ka, kb);
        assert_string_equal(ka, ka2);
        if (i >= 1)
            assert_string_not_equal(ka, kc); /* A=2 is in every later step's env */
        else
            assert_string_equal(ka, kc);
    }
    cleanup_free char *run = key_of(&a, 2);
    assert_non_null(strstr(run, "\"op\":\"RUN\""));
    assert_non_null(strstr(run, "\"run_env\":[\"PATH=/usr/local/bin:/usr/bin\",\"LANG=C.UTF-8\",\"A=1\"]"));
    assert_non_null(strstr(run, "\"workdir\":\"/srv\""));
    assert_non_null(strstr(run, "\"user\":\"app\""));
    cleanup_free char *copy = key_of(&a, 3);
    assert_non_null(strstr(copy, "\"dest\":\"/app/\""));
    assert_null(strstr(copy, "\"line\""));
    fb_dockerfile_clear(&a);
    fb_dockerfile_clear(&b);
    fb_dockerfile_clear(&c);

    /* a build arg changes the key of the steps that see it */
    cleanup_json json_t *args = json_pack("{s:s}", "V", "2");
    parse_ok("FROM scratch\nARG V=1\nRUN make\n", NULL, NULL, &a);
    parse_ok("FROM scratch\nARG V=1\nRUN make\n", args, NULL, &b);
    cleanup_free char *k1 = key_of(&a, 2), *k2 = key_of(&b, 2);
    assert_string_not_equal(k1, k2);
    fb_dockerfile_clear(&a);
    fb_dockerfile_clear(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_instruction), cmocka_unit_test(test_continuations_and_comments),
        cmocka_unit_test(test_substitution),      cmocka_unit_test(test_expansion_bounded),
        cmocka_unit_test(test_arg_and_env),       cmocka_unit_test(test_workdir),
        cmocka_unit_test(test_base_config),       cmocka_unit_test(test_default_from),
        cmocka_unit_test(test_commands),          cmocka_unit_test(test_copy_add),
        cmocka_unit_test(test_refusals),          cmocka_unit_test(test_key_stability),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
