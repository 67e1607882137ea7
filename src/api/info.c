#include "api.h"

struct MHD_Response *fb_h_healthz(struct fb_req *r, unsigned *status)
{
    (void)r;
    *status = 200;
    return fb_resp_json(json_pack("{s:s}", "status", "ok"));
}

struct MHD_Response *fb_h_info(struct fb_req *r, unsigned *status)
{
    *status = 200;
    return fb_resp_json(fb_core_info(r->api->core));
}
