/* The CRIU probe against fake "criu" scripts: version parsing, the reasons
 * it reports, and that a criu that never ends is killed (with everything it
 * started) at its deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "runtime/criu.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/fb-test-criu.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    fb_rm_rf(dir);
    return 0;
}

/* Writes an executable shell script NAME in dir; returns its path. */
static const char *fake(const char *name, const char *body)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char text[2048];
    snprintf(text, sizeof text, "#!/bin/sh\n%s\n", body);
    assert_int_equal(fb_write_file(path, text, strlen(text), 0755), 0);
    return path;
}

static void test_parse_version(void **state)
{
    (void)state;
    char v[32];
    int major = 0;
    assert_int_equal(fb_criu_parse_version("Version: 4.1.1\nGitID: v4.1.1\n", v, sizeof v, &major), 0);
    assert_string_equal(v, "4.1.1");
    assert_int_equal(major, 4);
    assert_int_equal(fb_criu_parse_version("Warning: x\nVersion: 3.17.1\n", v, sizeof v, &major), 0);
    assert_string_equal(v, "3.17.1");
    assert_int_equal(major, 3);
    assert_int_equal(fb_criu_parse_version("Version: 10.0", v, sizeof v, &major), 0);
    assert_int_equal(major, 10);
    assert_int_equal(fb_criu_parse_version("", v, sizeof v, &major), -1);
    assert_int_equal(fb_criu_parse_version("Version: \n", v, sizeof v, &major), -1);
    assert_int_equal(fb_criu_parse_version("Version: .4\n", v, sizeof v, &major), -1);
    assert_int_equal(fb_criu_parse_version("criu 4.1\n", v, sizeof v, &major), -1);
    char small[3];
    assert_int_equal(fb_criu_parse_version("Version: 4.1.1\n", small, sizeof small, &major), -1);
}

static void test_locate(void **state)
{
    (void)state;
    char out[PATH_MAX];
    cleanup_error fb_error_t err = NULL;
    assert_int_equal(fb_criu_locate("/nonexistent/criu", out, sizeof out, &err), -1);
    assert_int_equal(err->kind, FB_ERR_UNSUPPORTED);
    assert_non_null(strstr(err->msg, "/nonexistent/criu"));
    const char *p = fake("criu-ok", "exit 0");
    assert_int_equal(fb_criu_locate(p, out, sizeof out, NULL), 0);
    assert_string_equal(out, p);
}

static void test_run_captures_output_and_env(void **state)
{
    (void)state;
    const char *p =
        fake("criu-echo", "echo \"args=$* fault=$CRIU_FAULT\"; echo 'Error (x.c:1): boom' >&2; exit 1");
    static const char *const args[] = {"check", "--all", NULL};
    cleanup_free char *out = NULL;
    int st = 0;
    assert_int_equal(fb_criu_run(p, args, 5000, 4096, NULL, &out, &st, NULL), 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
    assert_non_null(strstr(out, "args=check --all fault=130"));
    assert_non_null(strstr(out, "Error (x.c:1): boom"));
}

static void test_run_output_cap(void **state)
{
    (void)state;
    const char *p = fake("criu-loud", "head -c 100000 /dev/zero | tr '\\0' x");
    static const char *const args[] = {NULL};
    cleanup_free char *out = NULL;
    int st = 0;
    assert_int_equal(fb_criu_run(p, args, 5000, 100, NULL, &out, &st, NULL), 0);
    assert_int_equal(strlen(out), 100);
}

/* A criu that hangs, with a child of its own, is killed at the deadline;
 * neither process survives. */
static void test_run_timeout_kills_group(void **state)
{
    (void)state;
    char body[256];
    snprintf(body, sizeof body, "sleep 1000 & echo $! > %s/bg.pid; sleep 1000", dir);
    const char *p = fake("criu-hang", body);
    static const char *const args[] = {"dump", NULL};
    cleanup_free char *out = NULL;
    cleanup_error fb_error_t err = NULL;
    int st = 0;
    int64_t t0 = fb_mono_ms();
    assert_int_equal(fb_criu_run(p, args, 300, 4096, NULL, &out, &st, &err), -1);
    int64_t took = fb_mono_ms() - t0;
    assert_true(took >= 300 && took < 1500);
    assert_non_null(strstr(err->msg, "timed out after 300 ms"));
    char pidfile[128];
    snprintf(pidfile, sizeof pidfile, "%s/bg.pid", dir);
    cleanup_free char *text = NULL;
    size_t len = 0;
    assert_int_equal(fb_read_file(pidfile, 64, &text, &len), 0);
    pid_t bg = (pid_t)atoi(text);
    assert_true(bg > 0);
    /* the orphan is reaped by init; give it a moment */
    bool gone = false;
    for (int i = 0; i < 200 && !gone; i++) {
        char stat_path[64];
        snprintf(stat_path, sizeof stat_path, "/proc/%d/stat", (int)bg);
        cleanup_free char *s = NULL;
        size_t slen = 0;
        gone = fb_read_file(stat_path, 4096, &s, &slen) < 0 || strstr(s, ") Z ") != NULL;
        if (!gone) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    assert_true(gone);
}

static void test_run_cancel(void **state)
{
    (void)state;
    const char *p = fake("criu-hang2", "sleep 1000");
    static const char *const args[] = {NULL};
    atomic_bool cancel;
    atomic_init(&cancel, true);
    cleanup_free char *out = NULL;
    cleanup_error fb_error_t err = NULL;
    int st = 0;
    int64_t t0 = fb_mono_ms();
    assert_int_equal(fb_criu_run(p, args, 60000, 4096, &cancel, &out, &st, &err), -1);
    assert_true(fb_mono_ms() - t0 < 1000);
    assert_string_equal(err->msg, "cancelled");
}

static void probe(const char *path, int timeout_ms, struct fb_criu_result *r)
{
    struct fb_criu_probe pr = {.configured = path, .work_dir = dir, .step_timeout_ms = timeout_ms};
    fb_criu_selftest(&pr, r);
}

static void test_selftest_missing_binary(void **state)
{
    (void)state;
    struct fb_criu_result r;
    probe("/nonexistent/criu", 1000, &r);
    assert_int_equal(r.state, FB_CRIU_UNAVAILABLE);
    assert_non_null(strstr(r.reason, "missing or not executable"));
}

static void test_selftest_exit_1(void **state)
{
    (void)state;
    struct fb_criu_result r;
    probe(fake("criu-fail", "echo 'Error (criu/crtools.c:1): cannot work here' >&2; exit 1"), 5000, &r);
    assert_int_equal(r.state, FB_CRIU_UNAVAILABLE);
    assert_non_null(strstr(r.reason, "criu --version exited 1"));
    assert_non_null(strstr(r.reason, "cannot work here"));
}

static void test_selftest_too_old(void **state)
{
    (void)state;
    struct fb_criu_result r;
    probe(fake("criu-old", "echo 'Version: 3.17.1'"), 5000, &r);
    assert_int_equal(r.state, FB_CRIU_UNAVAILABLE);
    assert_string_equal(r.version, "3.17.1");
    assert_non_null(strstr(r.reason, "older than 4.0"));
}

static void test_selftest_check_fails(void **state)
{
    (void)state;
    struct fb_criu_result r;
    probe(fake("criu-nocheck", "[ \"$1\" = --version ] && { echo 'Version: 4.1.1'; exit 0; }\n"
                               "echo 'Warn: noise'; echo 'Error (criu/cr-check.c:9): no vdso' >&2; exit 1"),
          5000, &r);
    assert_int_equal(r.state, FB_CRIU_UNAVAILABLE);
    assert_string_equal(r.version, "4.1.1");
    assert_non_null(strstr(r.reason, "criu check exited 1: Error (criu/cr-check.c:9): no vdso"));
    assert_null(strstr(r.reason, "noise")); /* error lines are preferred */
}

/* "check" passes, the dump fails: the reason quotes criu's log. */
static void test_selftest_dump_fails(void **state)
{
    (void)state;
    struct fb_criu_result r;
    probe(fake("criu-nodump",
               "case \"$1\" in --version) echo 'Version: 4.1.1';; check) echo 'Looks good.';;\n"
               "dump) while [ $# -gt 0 ]; do [ \"$1\" = -D ] && d=$2; shift; done\n"
               "  echo 'Error (criu/cr-dump.c:2): hw breakpoints' > \"$d/dump.log\"; exit 1;;\n"
               "*) exit 1;; esac"),
          5000, &r);
    assert_int_equal(r.state, FB_CRIU_UNAVAILABLE);
    assert_non_null(
        strstr(r.reason, "dump test: criu dump exited 1: Error (criu/cr-dump.c:2): hw breakpoints"));
}

/* A criu that hangs is reported as timed out within the bound. */
static void test_selftest_hang(void **state)
{
    (void)state;
    struct fb_criu_result r;
    probe(fake("criu-sleep", "sleep 1000"), 300, &r);
    assert_int_equal(r.state, FB_CRIU_UNAVAILABLE);
    assert_non_null(strstr(r.reason, "timed out after 300 ms"));
    assert_true(r.took_ms < 1500);
}

/* A fake that claims success without restoring anything is caught. */
static void test_selftest_restore_not_running(void **state)
{
    (void)state;
    struct fb_criu_result r;
    probe(fake("criu-liar", "case \"$1\" in --version) echo 'Version: 4.1.1';;\n"
                            "dump) kill -9 \"$3\";; esac; exit 0"),
          5000, &r);
    assert_int_equal(r.state, FB_CRIU_UNAVAILABLE);
    assert_non_null(strstr(r.reason, "not running afterwards"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_version),
        cmocka_unit_test(test_locate),
        cmocka_unit_test(test_run_captures_output_and_env),
        cmocka_unit_test(test_run_output_cap),
        cmocka_unit_test(test_run_timeout_kills_group),
        cmocka_unit_test(test_run_cancel),
        cmocka_unit_test(test_selftest_missing_binary),
        cmocka_unit_test(test_selftest_exit_1),
        cmocka_unit_test(test_selftest_too_old),
        cmocka_unit_test(test_selftest_check_fails),
        cmocka_unit_test(test_selftest_dump_fails),
        cmocka_unit_test(test_selftest_hang),
        cmocka_unit_test(test_selftest_restore_not_running),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
