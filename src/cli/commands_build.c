/* template build: the context dir as a tar upload, the build's progress
 * printed step by step as the daemon streams it. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/output.h"
#include "cli/stream.h"
#include "cli/tarball.h"
#include "common/cleanup.h"
#include "common/json_util.h"
#include "common/util.h"

#define LINE_MAX_BYTES (16 << 20)

enum { OPT_NETWORK = 1000, OPT_BUILD_ARG, OPT_NO_CACHE, OPT_TIMEOUT };

static const struct option build_longopts[] = {
    {"tag", required_argument, NULL, 't'},
    {"file", required_argument, NULL, 'f'},
    {"network", required_argument, NULL, OPT_NETWORK},
    {"build-arg", required_argument, NULL, OPT_BUILD_ARG},
    {"no-cache", no_argument, NULL, OPT_NO_CACHE},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {NULL, 0, NULL, 0},
};

static const struct fb_command build_cmd = {
    .name = "template build",
    .usage = "Usage: forkbox template build -t NAME [-f Dockerfile] [options] DIR\n"
             "Builds template NAME from the Dockerfile in DIR (the build context).  Every RUN\n"
             "runs in a sandbox; unchanged steps come from the build cache.\n"
             "  -t, --tag NAME         the template to build (replaced if it exists)\n"
             "  -f, --file PATH        the Dockerfile, relative to DIR (default Dockerfile)\n"
             "      --network MODE     network for RUN steps: none (default) or open\n"
             "      --build-arg K=V    a value for ARG K (repeatable)\n"
             "      --no-cache         run every step again\n"
             "      --timeout SECONDS  the longest one RUN may take (default 3600)\n",
    .longopts = build_longopts,
    .shortopts = "t:f:",
};

struct progress {
    bool json;
    char *buf;
    size_t len, cap;
    json_t *last;         /* the done or error event */
    struct fb_stream out; /* writes output events' bytes */
};

static void show(struct progress *p, const char *line, size_t len)
{
    if (p->json) {
        (void)!fb_write_all(STDOUT_FILENO, line, len);
        (void)!fb_write_all(STDOUT_FILENO, "\n", 1);
    }
    cleanup_json json_t *ev = json_loadb(line, len, 0, NULL);
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (type == NULL)
        return;
    if (strcmp(type, "done") == 0 || strcmp(type, "error") == 0) {
        json_decref(p->last);
        p->last = json_incref(ev);
        return;
    }
    if (p->json)
        return;
    if (strcmp(type, "step") == 0) {
        printf("Step %lld/%lld : %s%s\n", (long long)json_integer_value(json_object_get(ev, "step")),
               (long long)json_integer_value(json_object_get(ev, "of")),
               json_string_value(json_object_get(ev, "instruction")),
               json_is_true(json_object_get(ev, "cached")) ? "  (cached)" : "");
        fflush(stdout);
        return;
    }
    int fd = strcmp(type, "stderr") == 0 ? STDERR_FILENO : STDOUT_FILENO;
    cleanup_error fb_error_t err = NULL;
    (void)fb_stream_emit_field(&p->out, fd, ev, "data", "data_b64", &err);
}

static int progress_sink(void *ctx, const char *content_type, const char *data, size_t len, fb_error_t *err)
{
    (void)content_type;
    struct progress *p = ctx;
    if (p->len + len > LINE_MAX_BYTES)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "forkboxd sent a line longer than %d bytes",
                            LINE_MAX_BYTES);
    if (p->len + len + 1 > p->cap) {
        size_t cap = (p->len + len + 1) * 2;
        char *nb = realloc(p->buf, cap);
        if (nb == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "buffer");
        p->buf = nb;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, data, len);
    p->len += len;
    char *nl;
    while ((nl = memchr(p->buf, '\n', p->len)) != NULL) {
        size_t n = (size_t)(nl - p->buf);
        show(p, p->buf, n);
        memmove(p->buf, nl + 1, p->len - n - 1);
        p->len -= n + 1;
    }
    return 0;
}

/* ?key=value pairs, escaped. */
static int add_query(char **path, const char *key, const char *value)
{
    cleanup_free char *esc = fb_client_escape(value);
    char *np = NULL;
    if (esc == NULL || asprintf(&np, "%s%s%s=%s", *path, strchr(*path, '?') ? "&" : "?", key, esc) < 0)
        return -1;
    free(*path);
    *path = np;
    return 0;
}

static int finish(struct progress *p, const char *name)
{
    json_t *ev = p->last;
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (type == NULL) {
        fprintf(stderr, "forkbox: the build's stream ended without a result\n");
        return FB_EXIT_FAIL;
    }
    if (strcmp(type, "error") == 0) {
        if (!p->json)
            fprintf(stderr, "forkbox: build of %s failed: %s\n", name,
                    json_string_value(json_object_get(ev, "message")));
        return FB_EXIT_FAIL;
    }
    if (p->json)
        return FB_EXIT_OK;
    json_t *tpl = json_object_get(ev, "template");
    char size[32] = "?";
    json_t *bytes = json_object_get(tpl, "size_bytes");
    if (json_is_integer(bytes))
        fb_format_bytes((uint64_t)json_integer_value(bytes), size, sizeof size);
    printf("built template %s: %zu layers, %s, %.1f s (%lld steps cached)\n", name,
           json_array_size(json_object_get(tpl, "layers")), size,
           (double)json_integer_value(json_object_get(ev, "duration_ms")) / 1000.0,
           (long long)json_integer_value(json_object_get(ev, "cached_steps")));
    return FB_EXIT_OK;
}

int fb_cmd_template_build(struct fb_cli *cli, int argc, char **argv)
{
    struct fb_args a;
    fb_args_init(&a, cli, &build_cmd, argc, argv);
    const char *name = NULL, *file = "Dockerfile", *network = NULL, *timeout = NULL;
    bool no_cache = false;
    cleanup_json json_t *args = json_object();
    int c;
    while ((c = fb_args_next(&a)) != -1) {
        switch (c) {
        case FB_ARGS_EXIT:
            return a.exit_code;
        case 't':
            name = optarg;
            break;
        case 'f':
            file = optarg;
            break;
        case OPT_NETWORK:
            network = optarg;
            break;
        case OPT_TIMEOUT:
            timeout = optarg;
            break;
        case OPT_NO_CACHE:
            no_cache = true;
            break;
        case OPT_BUILD_ARG: {
            const char *eq = strchr(optarg, '=');
            if (eq == NULL || eq == optarg)
                return fb_usage_error(&build_cmd, "--build-arg wants KEY=VALUE, not '%s'", optarg);
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)(eq - optarg), optarg);
            json_object_set_new(args, key, json_string(eq + 1));
            break;
        }
        default:
            return fb_usage_error(&build_cmd, "unexpected option");
        }
    }
    if (name == NULL)
        return fb_usage_error(&build_cmd, "-t NAME is required");
    if (!fb_valid_name(name))
        return fb_usage_error(&build_cmd, "invalid template name '%s'", name);
    if (argc - optind != 1)
        return fb_usage_error(&build_cmd, "expected the build context directory");
    const char *dir = argv[optind];
    cleanup_error fb_error_t err = NULL;
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        fb_error_set(&err, FB_ERR_BAD_REQUEST, 0, "%s is not a directory", dir);
        return fb_fail(&err);
    }
    cleanup_fclose FILE *tar = fb_temp_file(&err);
    long count = 0;
    if (tar == NULL || fb_tar_create(dir, tar, &count, &err) < 0 || fflush(tar) != 0 ||
        fseek(tar, 0, SEEK_SET) < 0)
        return fb_fail(&err);
    struct stat ts;
    if (fstat(fileno(tar), &ts) < 0)
        return FB_EXIT_FAIL;
    cleanup_free char *esc = fb_client_escape(name);
    char *path = NULL;
    if (esc == NULL || asprintf(&path, "/v1/templates/%s/build", esc) < 0)
        return FB_EXIT_FAIL;
    cleanup_free char *argtext = json_object_size(args) ? json_dumps(args, JSON_COMPACT) : NULL;
    if (add_query(&path, "dockerfile", file) < 0 || (network && add_query(&path, "network", network) < 0) ||
        (timeout && add_query(&path, "timeout", timeout) < 0) ||
        (no_cache && add_query(&path, "no_cache", "1") < 0) ||
        (argtext && add_query(&path, "build_args", argtext) < 0)) {
        free(path);
        return FB_EXIT_FAIL;
    }
    cleanup_free char *owned_path = path;
    struct progress p = {.json = cli->json};
    struct fb_request req = {
        .method = "POST",
        .path = path,
        .accept = "application/x-ndjson",
        .content_type = "application/x-tar",
        .upload = tar,
        .upload_size = (int64_t)ts.st_size,
        .sink = progress_sink,
        .sink_ctx = &p,
        .cancellable = true,
    };
    struct fb_client *client;
    cleanup_response struct fb_response resp = {0};
    int rc;
    if (fb_cli_client(cli, &client, &err) < 0 || fb_client_do(client, &req, &resp, &err) < 0)
        rc = fb_fail(&err);
    else
        rc = finish(&p, name);
    free(p.buf);
    json_decref(p.last);
    fb_stream_release(&p.out);
    return rc;
}
