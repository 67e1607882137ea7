/* Route table: the whole v1 surface at a glance. */
#include <string.h>

#include "../core/build.h"
#include "../core/ckptfmt.h"
#include "../core/code.h"
#include "../core/procs.h"
#include "api.h"

/* ports in: share tokens may stand in for the key; bodies are spooled */
#define PROXY FB_BODY_SPOOL, true, fb_h_port_proxy, FB_PROXY_BODY_MAX, true

static const struct fb_route routes[] = {
    {"GET", "/healthz", FB_BODY_NONE, false, fb_h_healthz},
    {"GET", "/v1/info", FB_BODY_NONE, true, fb_h_info},
    {"POST", "/v1/sandboxes", FB_BODY_JSON, true, fb_h_sandbox_create},
    {"GET", "/v1/sandboxes", FB_BODY_NONE, true, fb_h_sandbox_list},
    {"GET", "/v1/sandboxes/{}", FB_BODY_NONE, true, fb_h_sandbox_get},
    {"DELETE", "/v1/sandboxes/{}", FB_BODY_NONE, true, fb_h_sandbox_delete},
    {"POST", "/v1/sandboxes/{}/ttl", FB_BODY_JSON, true, fb_h_sandbox_ttl},
    {"PUT", "/v1/sandboxes/{}/network", FB_BODY_JSON, true, fb_h_sandbox_network},
    {"POST", "/v1/sandboxes/{}/pause", FB_BODY_NONE, true, fb_h_sandbox_pause},
    {"POST", "/v1/sandboxes/{}/resume", FB_BODY_NONE, true, fb_h_sandbox_resume},
    {"POST", "/v1/sandboxes/{}/hibernate", FB_BODY_NONE, true, fb_h_sandbox_hibernate},
    {"POST", "/v1/sandboxes/{}/fork", FB_BODY_JSON, true, fb_h_sandbox_fork},
    {"POST", "/v1/sandboxes/{}/checkpoints", FB_BODY_JSON, true, fb_h_checkpoint_create},
    {"GET", "/v1/sandboxes/{}/checkpoints", FB_BODY_NONE, true, fb_h_checkpoint_list},
    {"POST", "/v1/sandboxes/{}/rollback", FB_BODY_JSON, true, fb_h_sandbox_rollback},
    {"GET", "/v1/sandboxes/{}/export", FB_BODY_NONE, true, fb_h_sandbox_export},
    {"POST", "/v1/checkpoints/import", FB_BODY_SPOOL, true, fb_h_checkpoint_import, FB_CKPT_TAR_MAX},
    {"GET", "/v1/checkpoints/{}", FB_BODY_NONE, true, fb_h_checkpoint_get},
    {"GET", "/v1/checkpoints/{}/export", FB_BODY_NONE, true, fb_h_checkpoint_export},
    {"DELETE", "/v1/checkpoints/{}", FB_BODY_NONE, true, fb_h_checkpoint_delete},
    {"POST", "/v1/volumes", FB_BODY_JSON, true, fb_h_volume_create},
    {"GET", "/v1/volumes", FB_BODY_NONE, true, fb_h_volume_list},
    {"GET", "/v1/volumes/{}", FB_BODY_NONE, true, fb_h_volume_get},
    {"DELETE", "/v1/volumes/{}", FB_BODY_NONE, true, fb_h_volume_delete},
    {"GET", "/v1/volumes/{}/archive", FB_BODY_NONE, true, fb_h_volume_archive_get},
    {"PUT", "/v1/volumes/{}/archive", FB_BODY_SPOOL, true, fb_h_volume_archive_put},
    {"GET", "/v1/audit", FB_BODY_NONE, true, fb_h_audit},
    {"GET", "/metrics", FB_BODY_NONE, true, fb_h_metrics},
    {"POST", "/v1/sandboxes/{}/exec", FB_BODY_JSON, true, fb_h_exec, FB_EXEC_BODY_MAX},
    {"GET", "/v1/sandboxes/{}/files", FB_BODY_NONE, true, fb_h_files_get},
    {"PUT", "/v1/sandboxes/{}/files", FB_BODY_FILE, true, fb_h_files_put},
    {"DELETE", "/v1/sandboxes/{}/files", FB_BODY_NONE, true, fb_h_files_delete},
    {"GET", "/v1/sandboxes/{}/archive", FB_BODY_NONE, true, fb_h_archive_get},
    {"PUT", "/v1/sandboxes/{}/archive", FB_BODY_SPOOL, true, fb_h_archive_put},
    {"GET", "/v1/templates", FB_BODY_NONE, true, fb_h_templates_list},
    {"PUT", "/v1/templates/{}/import", FB_BODY_SPOOL, true, fb_h_template_import},
    {"POST", "/v1/templates", FB_BODY_JSON, true, fb_h_template_create, FB_BUILD_DOCKERFILE_MAX + 65536},
    {"POST", "/v1/templates/gc", FB_BODY_NONE, true, fb_h_templates_gc},
    {"POST", "/v1/templates/{}/build", FB_BODY_SPOOL, true, fb_h_template_build, FB_BUILD_CONTEXT_MAX},
    {"GET", "/v1/templates/{}", FB_BODY_NONE, true, fb_h_template_get},
    {"DELETE", "/v1/templates/{}", FB_BODY_NONE, true, fb_h_template_delete},
    {"POST", "/v1/sandboxes/{}/processes", FB_BODY_JSON, true, fb_h_proc_start, 4u << 20},
    {"GET", "/v1/sandboxes/{}/processes", FB_BODY_NONE, true, fb_h_proc_list},
    {"GET", "/v1/sandboxes/{}/processes/{}", FB_BODY_NONE, true, fb_h_proc_get},
    {"GET", "/v1/sandboxes/{}/processes/{}/output", FB_BODY_NONE, true, fb_h_proc_output},
    /* raw bytes, not JSON: buffered like a JSON body, never parsed */
    {"POST", "/v1/sandboxes/{}/processes/{}/stdin", FB_BODY_JSON, true, fb_h_proc_stdin, FB_PROC_STDIN_MAX},
    {"POST", "/v1/sandboxes/{}/processes/{}/signal", FB_BODY_JSON, true, fb_h_proc_signal},
    {"POST", "/v1/sandboxes/{}/processes/{}/resize", FB_BODY_JSON, true, fb_h_proc_resize},
    /* a WebSocket: terminal bytes both ways, JSON control messages */
    {"GET", "/v1/sandboxes/{}/processes/{}/attach", FB_BODY_NONE, true, fb_h_proc_attach},
    {"POST", "/v1/sandboxes/{}/code", FB_BODY_JSON, true, fb_h_code, FB_CODE_BODY_MAX},
    {"POST", "/v1/sandboxes/{}/shares", FB_BODY_JSON, true, fb_h_shares_create},
    /* ports in: every method a browser or an HTTP client may send */
    {"GET", "/v1/sandboxes/{}/ports/{}", PROXY},
    {"GET", "/v1/sandboxes/{}/ports/{}/{*}", PROXY},
    {"HEAD", "/v1/sandboxes/{}/ports/{}", PROXY},
    {"HEAD", "/v1/sandboxes/{}/ports/{}/{*}", PROXY},
    {"POST", "/v1/sandboxes/{}/ports/{}", PROXY},
    {"POST", "/v1/sandboxes/{}/ports/{}/{*}", PROXY},
    {"PUT", "/v1/sandboxes/{}/ports/{}", PROXY},
    {"PUT", "/v1/sandboxes/{}/ports/{}/{*}", PROXY},
    {"PATCH", "/v1/sandboxes/{}/ports/{}", PROXY},
    {"PATCH", "/v1/sandboxes/{}/ports/{}/{*}", PROXY},
    {"DELETE", "/v1/sandboxes/{}/ports/{}", PROXY},
    {"DELETE", "/v1/sandboxes/{}/ports/{}/{*}", PROXY},
    {"OPTIONS", "/v1/sandboxes/{}/ports/{}", PROXY},
    {"OPTIONS", "/v1/sandboxes/{}/ports/{}/{*}", PROXY},
};

/* Matches path against pattern segment by segment; {} captures one
 * non-empty segment of bounded length, a final {*} takes whatever is left
 * (the handler reads it from the raw URL). */
static bool match(const char *pattern, const char *path, struct fb_req *r)
{
    int np = 0;
    while (*pattern) {
        if (strcmp(pattern, "{*}") == 0)
            return true;
        if (*path == '\0')
            break;
        if (pattern[0] == '{' && pattern[1] == '}') {
            const char *end = strchr(path, '/');
            size_t len = end ? (size_t)(end - path) : strlen(path);
            if (len == 0 || len >= sizeof r->params[0] || np >= 2)
                return false;
            memcpy(r->params[np], path, len);
            r->params[np][len] = '\0';
            np++;
            path += len;
            pattern += 2;
            continue;
        }
        if (*pattern != *path)
            return false;
        pattern++;
        path++;
    }
    return *pattern == '\0' && *path == '\0';
}

const struct fb_route *fb_route_match(const char *method, const char *path, struct fb_req *r,
                                      bool *path_known)
{
    *path_known = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (!match(routes[i].pattern, path, r))
            continue;
        *path_known = true;
        if (strcmp(routes[i].method, method) == 0)
            return &routes[i];
    }
    return NULL;
}
