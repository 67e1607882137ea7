/* /v1/templates. */
#include "../common/cleanup.h"
#include "../core/layers.h"
#include "api.h"

struct MHD_Response *fb_h_templates_list(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *out = NULL;
    if (fb_templates_list(r->api->core, &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_template_import(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *out = NULL;
    if (r->received == 0)
        return fb_resp_error_new(
            FB_ERR_BAD_REQUEST, status,
            "the body must be an image archive (OCI layout or docker-archive tar) or a root "
            "filesystem tar");
    if (fb_template_import(r->api->core, r->params[0], r->spool_path, fb_req_query(r, "ref"), &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 201;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_template_delete(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    if (fb_template_delete(r->api->core, r->params[0], &err) < 0)
        return fb_resp_error(err, status);
    *status = 204;
    return fb_resp_empty();
}

struct MHD_Response *fb_h_template_get(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *out = NULL;
    if (fb_template_inspect(r->api->core, r->params[0], &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_templates_gc(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *out = NULL;
    if (fb_layers_gc(r->api->core, &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(out);
}
