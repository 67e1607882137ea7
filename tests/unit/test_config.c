/* forkboxd configuration: defaults, environment, flags and bad values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/error.h"
#include "daemon/config.h"

static int parse(struct fb_daemon_config *cfg, int argc, char **argv, char **envp, fb_error_t *err)
{
    return fb_daemon_config_parse(cfg, argc, argv, envp, err);
}

static void test_defaults(void **state)
{
    (void)state;
    struct fb_daemon_config cfg;
    fb_error_t err = NULL;
    char *argv[] = {"forkboxd", NULL};
    assert_int_equal(parse(&cfg, 1, argv, NULL, &err), 0);
    assert_string_equal(cfg.socket_path, "/run/forkbox/forkbox.sock");
    assert_string_equal(cfg.listen_host, "127.0.0.1");
    assert_int_equal(cfg.listen_port, 7420);
    assert_true(cfg.tcp_enabled);
    assert_string_equal(cfg.state_dir, "/var/lib/forkbox");
    assert_string_equal(cfg.command, "serve");
    assert_true(cfg.build_default);
}

static void test_env_then_flags(void **state)
{
    (void)state;
    struct fb_daemon_config cfg;
    fb_error_t err = NULL;
    char *envp[] = {"FORKBOX_STATE_DIR=/srv/fb",
                    "FORKBOX_LISTEN=0.0.0.0:9000",
                    "FORKBOX_SOCKET=/tmp/a.sock",
                    "UNRELATED=1",
                    "FORKBOX_DEBUG=1",
                    NULL};
    char *argv[] = {"forkboxd", "--socket", "/tmp/b.sock", "--max-sandboxes=7", NULL};
    assert_int_equal(parse(&cfg, 4, argv, envp, &err), 0);
    assert_string_equal(cfg.state_dir, "/srv/fb");
    assert_string_equal(cfg.listen_host, "0.0.0.0");
    assert_int_equal(cfg.listen_port, 9000);
    assert_string_equal(cfg.socket_path, "/tmp/b.sock"); /* the flag wins over the environment */
    assert_int_equal(cfg.max_sandboxes, 7);
    assert_true(cfg.debug);
}

static void test_listen_none(void **state)
{
    (void)state;
    struct fb_daemon_config cfg;
    fb_error_t err = NULL;
    char *argv[] = {"forkboxd", "--listen", "none", "--no-default-template", NULL};
    assert_int_equal(parse(&cfg, 4, argv, NULL, &err), 0);
    assert_false(cfg.tcp_enabled);
    assert_false(cfg.build_default);
}

static void test_bad_values(void **state)
{
    (void)state;
    static const char *const bad[][3] = {
        {"--listen", "127.0.0.1", NULL},
        {"--listen", "127.0.0.1:0", NULL},
        {"--listen", "1.2.3.4:70000", NULL},
        {"--listen", ":80", NULL},
        {"--max-sandboxes", "-1", NULL},
        {"--max-sandboxes", "0", NULL},
        {"--uid-pool-slots", "99999", NULL},
        {"--uid-pool-start", "12x", NULL},
        {"--bogus", "1", NULL},
        {"--socket", NULL, NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct fb_daemon_config cfg;
        fb_error_t err = NULL;
        char *argv[4] = {"forkboxd", (char *)bad[i][0], (char *)bad[i][1], NULL};
        int argc = bad[i][1] ? 3 : 2;
        assert_int_equal(parse(&cfg, argc, argv, NULL, &err), -1);
        assert_non_null(err);
        assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
        fb_error_release(&err);
    }
    char long_path[300];
    memset(long_path, 'a', sizeof long_path - 1);
    long_path[0] = '/';
    long_path[sizeof long_path - 1] = '\0';
    struct fb_daemon_config cfg;
    fb_error_t err = NULL;
    char *argv[] = {"forkboxd", "--socket", long_path, NULL};
    assert_int_equal(parse(&cfg, 3, argv, NULL, &err), -1);
    fb_error_release(&err);
    char *envp[] = {"FORKBOX_LISTEN=nope", NULL};
    char *argv2[] = {"forkboxd", NULL};
    assert_int_equal(parse(&cfg, 1, argv2, envp, &err), -1);
    assert_non_null(strstr(err->msg, "FORKBOX_LISTEN"));
    fb_error_release(&err);
}

static void test_commands(void **state)
{
    (void)state;
    struct fb_daemon_config cfg;
    fb_error_t err = NULL;
    char *a1[] = {"forkboxd", "--state-dir", "/x", "add-key", "team-a", NULL};
    assert_int_equal(parse(&cfg, 5, a1, NULL, &err), 0);
    assert_string_equal(cfg.command, "add-key");
    assert_string_equal(cfg.command_arg, "team-a");
    char *a2[] = {"forkboxd", "add-key", "Bad Tenant", NULL};
    assert_int_equal(parse(&cfg, 3, a2, NULL, &err), -1);
    fb_error_release(&err);
    char *a3[] = {"forkboxd", "frobnicate", NULL};
    assert_int_equal(parse(&cfg, 2, a3, NULL, &err), -1);
    fb_error_release(&err);
    char *a4[] = {"forkboxd", "--version", NULL};
    assert_int_equal(parse(&cfg, 2, a4, NULL, &err), 0);
    assert_string_equal(cfg.command, "version");
}

static void test_stop_sandboxes(void **state)
{
    (void)state;
    struct fb_daemon_config cfg;
    fb_error_t err = NULL;
    char *argv[] = {"forkboxd", NULL};
    assert_int_equal(parse(&cfg, 1, argv, NULL, &err), 0);
    assert_false(cfg.stop_sandboxes); /* the default: sandboxes outlive the daemon */
    char *flag[] = {"forkboxd", "--stop-sandboxes", NULL};
    assert_int_equal(parse(&cfg, 2, flag, NULL, &err), 0);
    assert_true(cfg.stop_sandboxes);
    char *on[] = {"FORKBOX_STOP_SANDBOXES=1", NULL};
    assert_int_equal(parse(&cfg, 1, argv, on, &err), 0);
    assert_true(cfg.stop_sandboxes);
    char *off[] = {"FORKBOX_STOP_SANDBOXES=0", NULL};
    assert_int_equal(parse(&cfg, 1, argv, off, &err), 0);
    assert_false(cfg.stop_sandboxes);
}

static void test_storage(void **state)
{
    (void)state;
    struct fb_daemon_config cfg;
    fb_error_t err = NULL;
    char *argv[] = {"forkboxd", NULL};
    assert_int_equal(parse(&cfg, 1, argv, NULL, &err), 0);
    assert_false(cfg.storage_plain);
    assert_int_equal(cfg.storage_bytes, 0);
    char *flags[] = {"forkboxd", "--storage=plain", "--storage-size", "512M", NULL};
    assert_int_equal(parse(&cfg, 4, flags, NULL, &err), 0);
    assert_true(cfg.storage_plain);
    assert_int_equal(cfg.storage_bytes, 512ull << 20);
    char *env[] = {"FORKBOX_STORAGE=auto", "FORKBOX_STORAGE_SIZE=2G", NULL};
    assert_int_equal(parse(&cfg, 1, argv, env, &err), 0);
    assert_false(cfg.storage_plain);
    assert_int_equal(cfg.storage_bytes, 2ull << 30);
    char *bytes[] = {"forkboxd", "--storage-size=1073741824", NULL};
    assert_int_equal(parse(&cfg, 2, bytes, NULL, &err), 0);
    assert_int_equal(cfg.storage_bytes, 1ull << 30);
    static const char *const bad[] = {"btrfs",
                                      "--storage-size=1M",
                                      "--storage-size=12X",
                                      "--storage-size=-1G",
                                      "--storage-size=99999999999T",
                                      "--storage-size=G"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char arg[64];
        snprintf(arg, sizeof arg, "%s", bad[i][0] == '-' ? bad[i] : "--storage=btrfs");
        char *a[] = {"forkboxd", arg, NULL};
        assert_int_equal(parse(&cfg, 2, a, NULL, &err), -1);
        assert_int_equal(err->kind, FB_ERR_BAD_REQUEST);
        fb_error_release(&err);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),    cmocka_unit_test(test_env_then_flags),
        cmocka_unit_test(test_listen_none), cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_commands),    cmocka_unit_test(test_stop_sandboxes),
        cmocka_unit_test(test_storage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
