/* /v1/templates. */
#include "../common/cleanup.h"
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
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "the body must be a root filesystem tarball");
    if (fb_template_import(r->api->core, r->params[0], r->spool_path, &out, &err) < 0)
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
