/* /v1/sandboxes: create, list, get, delete, ttl, network. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "api.h"

#define LABEL_SELECTORS_MAX 16

struct MHD_Response *fb_h_sandbox_create(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *body = NULL;
    cleanup_spec struct fb_create_spec spec = {0};
    json_t *obj = NULL;
    if (fb_req_json(r, &body, &err) < 0 || fb_create_spec_parse(body, &spec, &err) < 0 ||
        (spec.checkpoint[0] == '\0' && fb_template_defaults(r->api->core, &spec, &err) < 0) ||
        fb_sandbox_create(r->api->core, r->tenant, &spec, &obj, &err) < 0)
        return fb_resp_error(err, status);
    *status = 201;
    return fb_resp_json(obj);
}

struct label_collect {
    const char *labels[LABEL_SELECTORS_MAX];
    size_t n;
    bool overflow;
};

static enum MHD_Result collect_label(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    struct label_collect *c = cls;
    if (strcmp(key, "label") != 0)
        return MHD_YES;
    if (c->n >= LABEL_SELECTORS_MAX) {
        c->overflow = true;
        return MHD_NO;
    }
    c->labels[c->n++] = value ? value : "";
    return MHD_YES;
}

struct MHD_Response *fb_h_sandbox_list(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    struct label_collect lc = {0};
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, collect_label, &lc);
    if (lc.overflow)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "at most %d label selectors",
                                 LABEL_SELECTORS_MAX);
    for (size_t i = 0; i < lc.n; i++) {
        char k[FB_LABEL_KEY_MAX + 1], v[FB_LABEL_VALUE_MAX + 1];
        if (fb_label_selector_parse(lc.labels[i], k, sizeof k, v, sizeof v, &err) < 0)
            return fb_resp_error(err, status);
    }
    const char *state = fb_req_query(r, "state");
    static const char *const states[] = {"starting", "running", "paused", "hibernated", "stopped"};
    if (state != NULL) {
        bool ok = false;
        for (size_t i = 0; i < sizeof states / sizeof states[0]; i++)
            ok |= strcmp(state, states[i]) == 0;
        if (!ok)
            return fb_resp_error_new(FB_ERR_BAD_REQUEST, status,
                                     "state: must be one of starting, running, paused, hibernated, stopped");
    }
    json_t *out = NULL;
    if (fb_sandbox_list(r->api->core, r->tenant, lc.labels, lc.n, state, &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_sandbox_get(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *out = NULL;
    if (fb_sandbox_get(r->api->core, r->tenant, r->params[0], &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_sandbox_delete(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    if (fb_sandbox_delete(r->api->core, r->tenant, r->params[0], &err) < 0)
        return fb_resp_error(err, status);
    *status = 204;
    return fb_resp_empty();
}

struct MHD_Response *fb_h_sandbox_network(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *body = NULL;
    if (fb_req_json(r, &body, &err) < 0)
        return fb_resp_error(err, status);
    if (body == NULL)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status,
                                 "body must be {\"mode\": ..., \"allow\": [...]}");
    json_t *out = NULL;
    if (fb_sandbox_set_network(r->api->core, r->tenant, r->params[0], body, &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_sandbox_ttl(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *body = NULL;
    if (fb_req_json(r, &body, &err) < 0)
        return fb_resp_error(err, status);
    json_t *ttl = body ? json_object_get(body, "ttl") : NULL;
    if (!json_is_integer(ttl) || json_object_size(body) != 1)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "body must be {\"ttl\": <seconds>}");
    json_t *out = NULL;
    if (fb_sandbox_set_ttl(r->api->core, r->tenant, r->params[0], json_integer_value(ttl), &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_sandbox_pause(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *out = NULL;
    if (fb_sandbox_pause(r->api->core, r->tenant, r->params[0], &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_sandbox_hibernate(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *out = NULL;
    if (fb_sandbox_hibernate(r->api->core, r->tenant, r->params[0], &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_sandbox_resume(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *out = NULL;
    if (fb_sandbox_resume(r->api->core, r->tenant, r->params[0], &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(out);
}
