/* Files-only checkpoints: create, list, get, delete, rollback. */
#include <string.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "api.h"

struct MHD_Response *fb_h_checkpoint_create(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *body = NULL;
    json_t *out = NULL;
    if (fb_req_json(r, &body, &err) < 0 ||
        fb_checkpoint_create(r->api->core, r->tenant, r->params[0], body, &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 201;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_checkpoint_list(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *out = NULL;
    if (fb_checkpoint_list(r->api->core, r->tenant, r->params[0], &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_checkpoint_get(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *out = NULL;
    if (fb_checkpoint_get(r->api->core, r->tenant, r->params[0], &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_checkpoint_delete(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    if (fb_checkpoint_delete(r->api->core, r->tenant, r->params[0], &err) < 0)
        return fb_resp_error(err, status);
    *status = 204;
    return fb_resp_empty();
}

struct MHD_Response *fb_h_sandbox_rollback(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *body = NULL;
    if (fb_req_json(r, &body, &err) < 0)
        return fb_resp_error(err, status);
    const char *cid = json_string_value(json_object_get(body, "checkpoint"));
    if (cid == NULL || json_object_size(body) != 1)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "body must be {\"checkpoint\": \"ckpt_...\"}");
    json_t *out = NULL;
    if (fb_sandbox_rollback(r->api->core, r->tenant, r->params[0], cid, &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_sandbox_fork(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *body = NULL;
    json_t *out = NULL;
    if (fb_req_json(r, &body, &err) < 0 ||
        fb_sandbox_fork(r->api->core, r->tenant, r->params[0], body, &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 201;
    return fb_resp_json(out);
}
