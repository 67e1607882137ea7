/* port: the URL at which forkboxd relays HTTP to a port inside a sandbox,
 * or a share URL for it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/output.h"
#include "common/cleanup.h"
#include "common/json_util.h"

enum {
    OPT_SHARE = 0x2100,
    OPT_EXPIRES,
};

/* the daemon's limits, checked here too so that mistakes are usage errors */
#define SHARE_MAX_SECONDS (7 * 24 * 3600)

static const struct option port_longopts[] = {
    {"share", no_argument, NULL, OPT_SHARE},
    {"expires", required_argument, NULL, OPT_EXPIRES},
    {NULL, 0, NULL, 0},
};

static const struct fb_command port_cmd = {
    .name = "port",
    .usage = "Usage: forkbox port ID PORT [--share [--expires SECONDS]]\n"
             "Prints the URL at which forkboxd relays HTTP and WebSockets to a server\n"
             "listening on PORT inside sandbox ID (requests there need the API key).\n\n"
             "      --share        print a share URL instead: it works without the key, for\n"
             "                     this sandbox and port only, until it expires\n"
             "      --expires S    the share URL's lifetime in seconds, 1..604800 (default 3600)\n",
    .longopts = port_longopts,
};

int fb_cmd_port(struct fb_cli *cli, int argc, char **argv)
{
    bool want_share = false;
    long long expires = -1, port = 0;
    struct fb_args a;
    fb_args_init(&a, cli, &port_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        if (c == OPT_SHARE)
            want_share = true;
        else if (c == OPT_EXPIRES && fb_parse_i64(optarg, 1, SHARE_MAX_SECONDS, &expires) < 0)
            return fb_usage_error(&port_cmd, "--expires: '%s' is not a number of seconds in 1..%d", optarg,
                                  SHARE_MAX_SECONDS);
    }
    if (argc - optind != 2)
        return fb_usage_error(&port_cmd, "expected a sandbox id and a port");
    const char *id = argv[optind];
    if (!fb_valid_name(id))
        return fb_usage_error(&port_cmd, "invalid sandbox id '%s'", id);
    if (fb_parse_i64(argv[optind + 1], 1, 65535, &port) < 0)
        return fb_usage_error(&port_cmd, "'%s' is not a port (1..65535)", argv[optind + 1]);
    if (expires >= 0 && !want_share)
        return fb_usage_error(&port_cmd, "--expires needs --share");

    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    if (fb_cli_client(cli, &client, &err) < 0)
        return fb_fail(&err);
    char suffix[32];
    snprintf(suffix, sizeof suffix, "/ports/%lld/", port);
    cleanup_free char *sbx_path = fb_sandbox_path(id, "");
    cleanup_free char *path = fb_sandbox_path(id, suffix);
    cleanup_free char *shares = fb_sandbox_path(id, "/shares");
    if (sbx_path == NULL || path == NULL || shares == NULL)
        return FB_EXIT_FAIL;
    cleanup_json json_t *out = NULL;
    if (want_share) {
        cleanup_json json_t *body = json_pack("{s:I}", "port", (json_int_t)port);
        if (body == NULL ||
            (expires > 0 && json_object_set_new(body, "expires_in", json_integer(expires)) < 0))
            return FB_EXIT_FAIL;
        if (fb_client_json(client, "POST", shares, body, &out, &err) < 0)
            return fb_fail(&err);
        const char *rel = json_string_value(json_object_get(out, "url"));
        if (rel == NULL || rel[0] != '/') {
            fb_error_set(&err, FB_ERR_INTERNAL, 0, "forkboxd answered without a share URL");
            return fb_fail(&err);
        }
        cleanup_free char *full = NULL;
        if (asprintf(&full, "%s%s", client->base_url, rel) < 0)
            return FB_EXIT_FAIL;
        json_object_set_new(out, "url", json_string(full));
    } else {
        /* the URL is only worth printing for a sandbox that exists */
        if (fb_client_json(client, "GET", sbx_path, NULL, NULL, &err) < 0)
            return fb_fail(&err);
        cleanup_free char *full = NULL;
        if (asprintf(&full, "%s%s", client->base_url, path) < 0)
            return FB_EXIT_FAIL;
        out = json_pack("{s:s, s:I}", "url", full, "port", (json_int_t)port);
        if (out == NULL)
            return FB_EXIT_FAIL;
    }
    if (cli->json)
        fb_print_json(out);
    else
        printf("%s\n", json_string_value(json_object_get(out, "url")));
    return FB_EXIT_OK;
}
