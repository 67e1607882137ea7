#include "exec.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../runtime/initconn.h"

static void handle_clearp(struct fb_sandbox_handle *h)
{
    fb_sandbox_handle_clear(h);
}

json_t *fb_exec_build_env(json_t *sandbox_env, json_t *exec_env)
{
    cleanup_json json_t *merged =
        json_pack("{s:s, s:s}", "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                  "LANG", "C.UTF-8");
    if (merged == NULL)
        return NULL;
    json_object_update(merged, sandbox_env);
    if (exec_env != NULL)
        json_object_update(merged, exec_env);
    json_t *arr = json_array();
    const char *k;
    json_t *v;
    json_object_foreach(merged, k, v)
    {
        size_t kl = strlen(k), vl = strlen(json_string_value(v));
        cleanup_free char *kv = malloc(kl + vl + 2);
        if (kv == NULL) {
            json_decref(arr);
            return NULL;
        }
        memcpy(kv, k, kl);
        kv[kl] = '=';
        memcpy(kv + kl + 1, json_string_value(v), vl + 1);
        json_array_append_new(arr, json_string(kv));
    }
    return arr;
}

int fb_exec_start(struct fb_core *core, const char *tenant, const char *id, const struct fb_exec_spec *spec,
                  fb_error_t *err)
{
    __attribute__((cleanup(handle_clearp))) struct fb_sandbox_handle h = {0};
    if (fb_sandbox_open(core, tenant, id, &h, err) < 0)
        return -1;
    cleanup_json json_t *argv = json_array();
    for (size_t i = 0; i < spec->argc; i++)
        json_array_append_new(argv, json_string(spec->argv[i]));
    json_t *env = fb_exec_build_env(h.env, spec->env);
    if (env == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "build environment");
    cleanup_json json_t *req =
        json_pack("{s:s, s:o, s:o, s:s, s:s, s:I, s:I, s:b}", "op", "exec", "argv", json_incref(argv), "env",
                  env, "cwd", spec->cwd[0] ? spec->cwd : h.workdir, "user",
                  spec->user[0] ? spec->user : h.user, "timeout_ms", (json_int_t)spec->timeout_ms,
                  "max_output", (json_int_t)spec->max_output, "stdin", spec->stdin_data != NULL);
    if (req == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "build exec request");
    cleanup_close int fd = fb_initconn_open(h.sock_path, err);
    if (fd < 0)
        return -1;
    if (fb_initconn_send(fd, req, err) < 0)
        return -1;
    if (spec->stdin_data != NULL) {
        for (size_t off = 0; off < spec->stdin_len;) {
            size_t n = spec->stdin_len - off;
            if (n > FB_WIRE_MAX_PAYLOAD)
                n = FB_WIRE_MAX_PAYLOAD;
            if (fb_initconn_send_data(fd, FB_MSG_STDIN, spec->stdin_data + off, n, err) < 0)
                return -1;
            off += n;
        }
        if (fb_initconn_send_data(fd, FB_MSG_STDIN_EOF, NULL, 0, err) < 0)
            return -1;
    }
    return fb_steal_fd(&fd);
}

uint64_t fb_exec_oom_count(struct fb_core *core, const char *id)
{
    uint64_t n = 0;
    cleanup_error fb_error_t err = NULL;
    if (fb_cgroup_oom_kills(&core->cgroups, id, &n, &err) < 0)
        return 0;
    return n;
}
