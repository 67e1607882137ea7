/* create, ls, get, rm, ttl, info, version. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/output.h"
#include "common/cleanup.h"
#include "common/json_util.h"

#ifndef FB_VERSION
#define FB_VERSION "unknown"
#endif

enum {
    OPT_TTL = 0x2000,
    OPT_LABEL,
    OPT_ENV,
    OPT_WORKDIR,
    OPT_CPUS,
    OPT_MEMORY,
    OPT_PIDS,
    OPT_DISK,
    OPT_NETWORK,
    OPT_ALLOW,
    OPT_STATE,
    OPT_CHECKPOINT,
    OPT_VOLUME,
};

const struct option fb_create_longopts[] = {
    {"template", required_argument, NULL, 't'},
    {"ttl", required_argument, NULL, OPT_TTL},
    {"label", required_argument, NULL, OPT_LABEL},
    {"env", required_argument, NULL, OPT_ENV},
    {"workdir", required_argument, NULL, OPT_WORKDIR},
    {"cpus", required_argument, NULL, OPT_CPUS},
    {"memory", required_argument, NULL, OPT_MEMORY},
    {"pids", required_argument, NULL, OPT_PIDS},
    {"disk", required_argument, NULL, OPT_DISK},
    {"network", required_argument, NULL, OPT_NETWORK},
    {"allow", required_argument, NULL, OPT_ALLOW},
    {"checkpoint", required_argument, NULL, OPT_CHECKPOINT},
    {"volume", required_argument, NULL, OPT_VOLUME},
    {NULL, 0, NULL, 0},
};

char *fb_sandbox_path(const char *id, const char *suffix)
{
    cleanup_free char *esc = fb_client_escape(id);
    char *out = NULL;
    if (esc == NULL || asprintf(&out, "/v1/sandboxes/%s%s", esc, suffix) < 0)
        return NULL;
    return out;
}

/* Returns body[name], creating an empty object there first if needed. */
static json_t *sub_object(json_t *body, const char *name)
{
    json_t *o = json_object_get(body, name);
    if (o == NULL) {
        o = json_object();
        if (o == NULL || json_object_set_new(body, name, o) < 0)
            return NULL;
    }
    return o;
}

int fb_create_option(const struct fb_command *cmd, int c, const char *arg, json_t *body)
{
    long long n;
    double d;
    json_t *res;
    switch (c) {
    case 't':
        if (json_object_set_new(body, "template", json_string(arg)) < 0)
            return fb_usage_error(cmd, "--template: not valid UTF-8");
        return 1;
    case OPT_CHECKPOINT:
        if (json_object_set_new(body, "checkpoint", json_string(arg)) < 0)
            return fb_usage_error(cmd, "--checkpoint: not valid UTF-8");
        return 1;
    case OPT_VOLUME: {
        /* NAME:PATH[:ro]; the daemon judges name and path */
        const char *colon = strchr(arg, ':');
        if (colon == NULL || colon == arg || colon[1] == '\0')
            return fb_usage_error(cmd, "--volume: expected NAME:/PATH[:ro], got '%s'", arg);
        size_t plen = strlen(colon + 1);
        bool ro = plen > 3 && strcmp(colon + 1 + plen - 3, ":ro") == 0;
        bool rw = plen > 3 && strcmp(colon + 1 + plen - 3, ":rw") == 0;
        if (ro || rw)
            plen -= 3;
        json_t *vols = json_object_get(body, "volumes");
        if (vols == NULL && json_object_set_new(body, "volumes", vols = json_array()) < 0)
            return fb_usage_error(cmd, "out of memory");
        json_t *v = json_pack("{s:s%, s:s%, s:b}", "name", arg, (size_t)(colon - arg), "path", colon + 1,
                              plen, "read_only", ro);
        if (v == NULL || json_array_append_new(vols, v) < 0)
            return fb_usage_error(cmd, "--volume: not valid UTF-8");
        return 1;
    }
    case OPT_TTL:
        if (fb_parse_i64(arg, 0, INT64_MAX / 1000, &n) < 0)
            return fb_usage_error(cmd, "--ttl: '%s' is not a number of seconds", arg);
        json_object_set_new(body, "ttl", json_integer(n));
        return 1;
    case OPT_LABEL:
    case OPT_ENV: {
        json_t *obj = sub_object(body, c == OPT_LABEL ? "labels" : "env");
        if (obj == NULL || fb_parse_kv(arg, &obj) < 0)
            return fb_usage_error(cmd, "%s: expected KEY=VALUE, got '%s'",
                                  c == OPT_LABEL ? "--label" : "--env", arg);
        return 1;
    }
    case OPT_WORKDIR:
        if (json_object_set_new(body, "workdir", json_string(arg)) < 0)
            return fb_usage_error(cmd, "--workdir: not valid UTF-8");
        return 1;
    case OPT_CPUS:
        if (fb_parse_double(arg, &d) < 0 || (res = sub_object(body, "resources")) == NULL)
            return fb_usage_error(cmd, "--cpus: '%s' is not a number", arg);
        json_object_set_new(res, "cpus", json_real(d));
        return 1;
    case OPT_MEMORY:
    case OPT_PIDS:
    case OPT_DISK: {
        const char *flag = c == OPT_MEMORY ? "--memory" : c == OPT_PIDS ? "--pids" : "--disk";
        if (fb_parse_i64(arg, 0, INT64_MAX, &n) < 0 || (res = sub_object(body, "resources")) == NULL)
            return fb_usage_error(cmd, "%s: '%s' is not a number", flag, arg);
        json_object_set_new(res,
                            c == OPT_MEMORY ? "memory_mb"
                            : c == OPT_PIDS ? "pids"
                                            : "disk_mb",
                            json_integer(n));
        return 1;
    }
    case OPT_NETWORK:
    case OPT_ALLOW: {
        /* the daemon judges mode and entries; the CLI only carries them */
        json_t *net = sub_object(body, "network");
        if (net == NULL)
            return fb_usage_error(cmd, "out of memory");
        if (c == OPT_NETWORK) {
            if (json_object_set_new(net, "mode", json_string(arg)) < 0)
                return fb_usage_error(cmd, "--network: not valid UTF-8");
            return 1;
        }
        json_t *allow = json_object_get(net, "allow");
        if (allow == NULL && json_object_set_new(net, "allow", allow = json_array()) < 0)
            return fb_usage_error(cmd, "out of memory");
        if (json_object_get(net, "mode") == NULL)
            json_object_set_new(net, "mode", json_string("allowlist"));
        if (json_array_append_new(allow, json_string(arg)) < 0)
            return fb_usage_error(cmd, "--allow: not valid UTF-8");
        return 1;
    }
    default:
        return 0;
    }
}

int fb_sandbox_create(struct fb_client *c, json_t *body, json_t **out, fb_error_t *err)
{
    if (fb_client_json(c, "POST", "/v1/sandboxes", body, out, err) < 0)
        return -1;
    if (!json_is_string(json_object_get(*out, "id"))) {
        fb_json_decrefp(out);
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "forkboxd answered without a sandbox id");
    }
    return 0;
}

int fb_sandbox_delete(struct fb_client *c, const char *id, fb_error_t *err)
{
    cleanup_free char *path = fb_sandbox_path(id, "");
    if (path == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "path");
    return fb_client_json(c, "DELETE", path, NULL, NULL, err);
}

static const struct fb_command create_cmd = {
    .name = "create",
    .usage = "Usage: forkbox create [OPTIONS]\n"
             "Creates a sandbox and prints its id (the whole object with --json).\n\n" FB_CREATE_USAGE,
    .shortopts = FB_CREATE_SHORTOPTS,
    .longopts = fb_create_longopts,
};

int fb_cmd_create(struct fb_cli *cli, int argc, char **argv)
{
    cleanup_json json_t *body = json_object();
    if (body == NULL)
        return FB_EXIT_FAIL;
    struct fb_args a;
    fb_args_init(&a, cli, &create_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        int r = fb_create_option(&create_cmd, c, optarg, body);
        if (r != 1)
            return FB_EXIT_USAGE;
    }
    if (optind < argc)
        return fb_usage_error(&create_cmd, "unexpected argument '%s'", argv[optind]);

    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_json json_t *sbx = NULL;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_sandbox_create(client, body, &sbx, &err) < 0)
        return fb_fail(&err);
    if (cli->json)
        fb_print_json(sbx);
    else
        printf("%s\n", json_string_value(json_object_get(sbx, "id")));
    return FB_EXIT_OK;
}

static const struct option ls_longopts[] = {
    {"label", required_argument, NULL, OPT_LABEL},
    {"state", required_argument, NULL, OPT_STATE},
    {NULL, 0, NULL, 0},
};

static const struct fb_command ls_cmd = {
    .name = "ls",
    .usage = "Usage: forkbox ls [--label K=V]... [--state STATE]\n"
             "Lists sandboxes; every --label must match.\n\n"
             "      --label K=V   only sandboxes with this label (repeatable)\n"
             "      --state S     starting, running, paused, hibernated or stopped\n",
    .longopts = ls_longopts,
};

static int ls_table(json_t *list)
{
    static const char *const head[] = {"ID", "STATE", "TEMPLATE", "CREATED", "EXPIRES", "LABELS"};
    cleanup_table struct fb_table t = {0};
    if (fb_table_init(&t, 6, head) < 0)
        return -1;
    size_t i;
    json_t *s;
    json_array_foreach(list, i, s)
    {
        char created[64], expires[64];
        fb_format_ago(json_string_value(json_object_get(s, "created_at")), created, sizeof created);
        fb_format_until(json_string_value(json_object_get(s, "expires_at")), expires, sizeof expires);
        cleanup_free char *labels = fb_format_map(json_object_get(s, "labels"));
        const char *row[] = {
            json_string_value(json_object_get(s, "id")),
            json_string_value(json_object_get(s, "state")),
            json_string_value(json_object_get(s, "template")),
            created,
            expires,
            labels,
        };
        if (fb_table_add(&t, row) < 0)
            return -1;
    }
    fb_table_print(&t, stdout);
    return 0;
}

int fb_cmd_ls(struct fb_cli *cli, int argc, char **argv)
{
    cleanup_free char *query = NULL;
    size_t qlen = 0;
    cleanup_fclose FILE *q = open_memstream(&query, &qlen);
    if (q == NULL)
        return FB_EXIT_FAIL;
    fputs("/v1/sandboxes", q);
    char sep = '?';
    struct fb_args a;
    fb_args_init(&a, cli, &ls_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
        if (c == OPT_LABEL && (strchr(optarg, '=') == NULL || optarg[0] == '='))
            return fb_usage_error(&ls_cmd, "--label: expected KEY=VALUE, got '%s'", optarg);
        cleanup_free char *esc = fb_client_escape(optarg);
        if (esc == NULL)
            return FB_EXIT_FAIL;
        fprintf(q, "%c%s=%s", sep, c == OPT_LABEL ? "label" : "state", esc);
        sep = '&';
    }
    if (optind < argc)
        return fb_usage_error(&ls_cmd, "unexpected argument '%s'", argv[optind]);
    if (fclose(fb_steal_ptr(q)) != 0)
        return FB_EXIT_FAIL;

    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_json json_t *ans = NULL;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_json(client, "GET", query, NULL, &ans, &err) < 0)
        return fb_fail(&err);
    json_t *list = json_object_get(ans, "sandboxes");
    if (!json_is_array(list)) {
        fb_error_set(&err, FB_ERR_INTERNAL, 0, "forkboxd answered without a sandbox list");
        return fb_fail(&err);
    }
    if (cli->json)
        fb_print_json(ans);
    else if (ls_table(list) < 0)
        return FB_EXIT_FAIL;
    return FB_EXIT_OK;
}

static void field(const char *name, const char *value)
{
    cleanup_free char *clean = fb_sanitize(value ? value : "-");
    printf("%-11s %s\n", name, clean ? clean : "");
}

static void print_sandbox(json_t *s)
{
    char buf[256], rel[64];
    field("ID:", json_string_value(json_object_get(s, "id")));
    field("State:", json_string_value(json_object_get(s, "state")));
    field("Template:", json_string_value(json_object_get(s, "template")));
    const char *created = json_string_value(json_object_get(s, "created_at"));
    fb_format_ago(created, rel, sizeof rel);
    snprintf(buf, sizeof buf, "%s (%s)", created ? created : "-", rel);
    field("Created:", buf);
    const char *expires = json_string_value(json_object_get(s, "expires_at"));
    fb_format_until(expires, rel, sizeof rel);
    snprintf(buf, sizeof buf, "%s (%s)", expires, rel);
    field("Expires:", expires ? buf : "never");
    snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT "s", json_integer_value(json_object_get(s, "ttl")));
    field("TTL:", buf);
    field("Workdir:", json_string_value(json_object_get(s, "workdir")));
    json_t *r = json_object_get(s, "resources");
    snprintf(
        buf, sizeof buf,
        "cpus=%g memory=%" JSON_INTEGER_FORMAT "MB pids=%" JSON_INTEGER_FORMAT " disk=%" JSON_INTEGER_FORMAT
        "MB",
        json_number_value(json_object_get(r, "cpus")), json_integer_value(json_object_get(r, "memory_mb")),
        json_integer_value(json_object_get(r, "pids")), json_integer_value(json_object_get(r, "disk_mb")));
    field("Resources:", buf);
    field("Network:", json_string_value(json_object_get(json_object_get(s, "network"), "mode")));
    cleanup_free char *labels = fb_format_map(json_object_get(s, "labels"));
    field("Labels:", labels && labels[0] ? labels : "-");
    cleanup_free char *env = fb_format_map(json_object_get(s, "env"));
    field("Env:", env && env[0] ? env : "-");
    json_t *u = json_object_get(s, "usage");
    if (json_is_object(u)) {
        char mem[32];
        fb_format_bytes((uint64_t)json_integer_value(json_object_get(u, "memory_bytes")), mem, sizeof mem);
        snprintf(buf, sizeof buf, "memory=%s cpu=%.2fs pids=%" JSON_INTEGER_FORMAT, mem,
                 (double)json_integer_value(json_object_get(u, "cpu_usec")) / 1e6,
                 json_integer_value(json_object_get(u, "pids")));
        field("Usage:", buf);
    }
}

static const struct fb_command get_cmd = {
    .name = "get",
    .usage = "Usage: forkbox get ID\n"
             "Shows one sandbox, with its resource usage (alias: inspect).\n",
};

int fb_cmd_get(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &get_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (argc - optind != 1)
        return fb_usage_error(&get_cmd, "expected exactly one sandbox id");
    const char *id = argv[optind];
    if (!fb_valid_name(id))
        return fb_usage_error(&get_cmd, "invalid sandbox id '%s'", id);

    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_free char *path = fb_sandbox_path(id, "");
    cleanup_json json_t *sbx = NULL;
    if (path == NULL)
        return FB_EXIT_FAIL;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_json(client, "GET", path, NULL, &sbx, &err) < 0)
        return fb_fail(&err);
    if (cli->json)
        fb_print_json(sbx);
    else
        print_sandbox(sbx);
    return FB_EXIT_OK;
}

static const struct fb_command rm_cmd = {
    .name = "rm",
    .usage = "Usage: forkbox rm ID...\n"
             "Deletes sandboxes; goes on past failures and exits 1 if any failed.\n",
};

int fb_cmd_rm(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &rm_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (optind >= argc)
        return fb_usage_error(&rm_cmd, "expected at least one sandbox id");

    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    if (fb_cli_client(cli, &client, &err) < 0)
        return fb_fail(&err);
    cleanup_json json_t *deleted = json_array();
    cleanup_json json_t *failed = json_array();
    if (deleted == NULL || failed == NULL)
        return FB_EXIT_FAIL;
    int rc = FB_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        const char *id = argv[i];
        cleanup_error fb_error_t one = NULL;
        if (!fb_valid_name(id))
            fb_error_set(&one, FB_ERR_BAD_REQUEST, 0, "invalid sandbox id '%s'", id);
        else
            fb_sandbox_delete(client, id, &one);
        if (one == NULL) {
            json_array_append_new(deleted, json_string(id));
            if (!cli->json)
                printf("%s\n", id);
            continue;
        }
        rc = FB_EXIT_FAIL;
        json_array_append_new(failed, json_pack("{s:s?, s:{s:s, s:s}}", "id", id, "error", "code",
                                                fb_error_code(one->kind), "message", one->msg));
        fprintf(stderr, "forkbox: %s\n", one->msg);
    }
    if (cli->json) {
        cleanup_json json_t *out = json_pack("{s:O, s:O}", "deleted", deleted, "failed", failed);
        if (out != NULL)
            fb_print_json(out);
    }
    return rc;
}

static const struct fb_command network_cmd = {
    .name = "network",
    .usage = "Usage: forkbox network ID MODE [ENTRY...]\n"
             "Changes a running sandbox's network mode live (none, open, allowlist with its entries);\n"
             "its processes keep running.\n",
};

int fb_cmd_network(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &network_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (argc - optind < 2)
        return fb_usage_error(&network_cmd, "expected a sandbox id and a mode");
    const char *id = argv[optind];
    if (!fb_valid_name(id))
        return fb_usage_error(&network_cmd, "invalid sandbox id '%s'", id);
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_free char *path = fb_sandbox_path(id, "/network");
    cleanup_json json_t *body = json_pack("{s:s, s:[]}", "mode", argv[optind + 1], "allow");
    cleanup_json json_t *sbx = NULL;
    if (path == NULL || body == NULL)
        return fb_usage_error(&network_cmd, "mode: not valid UTF-8");
    for (int i = optind + 2; i < argc; i++)
        if (json_array_append_new(json_object_get(body, "allow"), json_string(argv[i])) < 0)
            return fb_usage_error(&network_cmd, "entry %s: not valid UTF-8", argv[i]);
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_json(client, "PUT", path, body, &sbx, &err) < 0)
        return fb_fail(&err);
    if (cli->json)
        fb_print_json(sbx);
    else
        printf("%s: network %s\n", id,
               json_string_value(json_object_get(json_object_get(sbx, "network"), "mode")));
    return FB_EXIT_OK;
}

static const struct fb_command ttl_cmd = {
    .name = "ttl",
    .usage = "Usage: forkbox ttl ID SECONDS\n"
             "Sets the sandbox to expire SECONDS from now (0: never).\n",
};

int fb_cmd_ttl(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &ttl_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (argc - optind != 2)
        return fb_usage_error(&ttl_cmd, "expected a sandbox id and a number of seconds");
    const char *id = argv[optind];
    long long secs;
    if (!fb_valid_name(id))
        return fb_usage_error(&ttl_cmd, "invalid sandbox id '%s'", id);
    if (fb_parse_i64(argv[optind + 1], 0, INT64_MAX / 1000, &secs) < 0)
        return fb_usage_error(&ttl_cmd, "'%s' is not a number of seconds", argv[optind + 1]);

    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_free char *path = fb_sandbox_path(id, "/ttl");
    cleanup_json json_t *body = json_pack("{s:I}", "ttl", (json_int_t)secs);
    cleanup_json json_t *sbx = NULL;
    if (path == NULL || body == NULL)
        return FB_EXIT_FAIL;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_json(client, "POST", path, body, &sbx, &err) < 0)
        return fb_fail(&err);
    if (cli->json) {
        fb_print_json(sbx);
        return FB_EXIT_OK;
    }
    const char *expires = json_string_value(json_object_get(sbx, "expires_at"));
    if (expires == NULL) {
        printf("%s: never expires\n", id);
    } else {
        char rel[64];
        fb_format_until(expires, rel, sizeof rel);
        printf("%s: expires at %s (%s)\n", id, expires, rel);
    }
    return FB_EXIT_OK;
}

/* A string as is, a list of strings or numbers as "a, b", anything else
 * as compact JSON; caller frees. */
static char *scalar_text(json_t *j)
{
    if (json_is_string(j))
        return strdup(json_string_value(j));
    size_t i;
    json_t *v;
    bool simple = json_is_array(j);
    json_array_foreach(j, i, v)
    {
        if (!json_is_string(v) && !json_is_number(v))
            simple = false;
    }
    if (!simple)
        return json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
    cleanup_free char *out = NULL;
    size_t len = 0;
    cleanup_fclose FILE *f = open_memstream(&out, &len);
    if (f == NULL)
        return NULL;
    json_array_foreach(j, i, v)
    {
        if (i > 0)
            fputs(", ", f);
        if (json_is_string(v))
            fputs(json_string_value(v), f);
        else
            fprintf(f, "%g", json_number_value(v));
    }
    if (fclose(fb_steal_ptr(f)) != 0)
        return NULL;
    return fb_steal_ptr(out);
}

/* info's layout is open-ended: print every leaf as "a.b.c: value". */
static void print_flat(const char *prefix, json_t *j)
{
    if (json_is_object(j)) {
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v)
        {
            cleanup_free char *name = NULL;
            if (asprintf(&name, "%s%s%s", prefix, prefix[0] ? "." : "", k) < 0) {
                name = NULL;
                return;
            }
            print_flat(name, v);
        }
        return;
    }
    cleanup_free char *text = scalar_text(j);
    cleanup_free char *clean = fb_sanitize(text);
    cleanup_free char *label = fb_sanitize(prefix);
    printf("%s: %s\n", label ? label : "", clean ? clean : "");
}

/* "  MARK a: b" or "  MARK ab" with both parts made safe for a terminal */
static void print_clean(const char *mark, const char *a, const char *sep, const char *b)
{
    cleanup_free char *ca = fb_sanitize(a ? a : "");
    cleanup_free char *cb = fb_sanitize(b ? b : "");
    printf("  %s %s%s%s\n", mark, ca ? ca : "", sep, cb ? cb : "");
}

/* The posture reads as a checklist: what is on, what is off, what the host
 * lacks, and host settings worth hardening. */
static void print_security(json_t *sec)
{
    size_t i;
    json_t *v;
    printf("security mitigations:\n");
    json_array_foreach(json_object_get(sec, "mitigations"), i, v)
    {
        bool on = json_is_true(json_object_get(v, "active"));
        print_clean(on ? "[on ]" : "[OFF]", json_string_value(json_object_get(v, "name")), ": ",
                    json_string_value(json_object_get(v, "detail")));
    }
    printf("missing on this host:\n");
    json_array_foreach(json_object_get(sec, "missing"), i, v)
    {
        print_clean("-", json_string_value(v), "", "");
    }
    printf("host settings:\n");
    json_array_foreach(json_object_get(sec, "host_settings"), i, v)
    {
        char value[64];
        snprintf(value, sizeof value, " = %lld (recommended >= %lld)",
                 (long long)json_integer_value(json_object_get(v, "value")),
                 (long long)json_integer_value(json_object_get(v, "recommended")));
        bool ok = json_is_true(json_object_get(v, "ok"));
        print_clean(ok ? "[ok ]" : "[!! ]", json_string_value(json_object_get(v, "sysctl")), "", value);
    }
}

static const struct fb_command info_cmd = {
    .name = "info",
    .usage = "Usage: forkbox info\n"
             "Shows the daemon's version, templates, limits and the host's security posture:\n"
             "which mitigations are active, which host features are missing, and host\n"
             "settings worth hardening.\n",
};

int fb_cmd_info(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &info_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (optind < argc)
        return fb_usage_error(&info_cmd, "unexpected argument '%s'", argv[optind]);
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_json json_t *info = NULL;
    if (fb_cli_client(cli, &client, &err) < 0 ||
        fb_client_json(client, "GET", "/v1/info", NULL, &info, &err) < 0)
        return fb_fail(&err);
    if (cli->json)
        fb_print_json(info);
    else {
        json_t *sec = json_incref(json_object_get(info, "security"));
        json_object_del(info, "security");
        json_object_del(info, "missing"); /* repeated in the security section */
        print_flat("", info);
        if (sec != NULL)
            print_security(sec);
        json_decref(sec);
    }
    return FB_EXIT_OK;
}

static const struct fb_command version_cmd = {
    .name = "version",
    .usage = "Usage: forkbox version\n"
             "Shows the client's version and, when reachable, the daemon's.\n",
};

int fb_cmd_version(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &version_cmd, argc, argv);
    int c;
    while ((c = fb_args_next(&a)) != -1)
        if (c == FB_ARGS_EXIT)
            return a.exit_code;
    if (optind < argc)
        return fb_usage_error(&version_cmd, "unexpected argument '%s'", argv[optind]);
    if (!cli->json)
        printf("forkbox   %s\n", FB_VERSION);
    fflush(stdout);
    cleanup_error fb_error_t err = NULL;
    struct fb_client *client;
    cleanup_json json_t *info = NULL;
    int r = fb_cli_client(cli, &client, &err);
    if (r == 0)
        r = fb_client_json(client, "GET", "/v1/info", NULL, &info, &err);
    const char *server = json_string_value(json_object_get(info, "version"));
    if (cli->json) {
        cleanup_json json_t *out = json_pack("{s:s, s:s?}", "client", FB_VERSION, "server", server);
        if (out != NULL)
            fb_print_json(out);
    } else if (r == 0) {
        printf("forkboxd  %s\n", server ? server : "unknown");
    }
    return r < 0 ? fb_fail(&err) : FB_EXIT_OK;
}
