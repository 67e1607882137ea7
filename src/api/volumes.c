/* /v1/volumes: create, list, get, delete, and tar transfers of a volume's
 * contents without a sandbox. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/util.h"
#include "api.h"

struct MHD_Response *fb_h_volume_create(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_json json_t *body = NULL;
    json_t *obj = NULL;
    if (fb_req_json(r, &body, &err) < 0)
        return fb_resp_error(err, status);
    if (body == NULL)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "request body required: {\"name\": ...}");
    if (fb_volume_create(r->api->core, r->tenant, body, &obj, &err) < 0)
        return fb_resp_error(err, status);
    *status = 201;
    return fb_resp_json(obj);
}

struct MHD_Response *fb_h_volume_list(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *obj = NULL;
    if (fb_volume_list(r->api->core, r->tenant, &obj, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(obj);
}

struct MHD_Response *fb_h_volume_get(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *obj = NULL;
    if (fb_volume_get(r->api->core, r->tenant, r->params[0], &obj, &err) < 0)
        return fb_resp_error(err, status);
    *status = 200;
    return fb_resp_json(obj);
}

struct MHD_Response *fb_h_volume_delete(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    if (fb_volume_delete(r->api->core, r->tenant, r->params[0], &err) < 0)
        return fb_resp_error(err, status);
    *status = 204;
    return fb_resp_empty();
}

struct MHD_Response *fb_h_volume_archive_get(struct fb_req *r, unsigned *status)
{
    char spool[PATH_MAX];
    if (fb_snprintf(spool, sizeof spool, "%s/tmp/archive.XXXXXX", r->api->core->cfg.state_dir) < 0)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "spool path too long");
    cleanup_close int fd = mkostemp(spool, O_CLOEXEC);
    if (fd < 0)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "create spool: %s", strerror(errno));
    unlink(spool); /* the open fd is all the response needs */
    cleanup_error fb_error_t err = NULL;
    if (fb_volume_archive_get(r->api->core, r->tenant, r->params[0], fb_req_query(r, "path"), fd, &err) < 0)
        return fb_resp_error(err, status);
    struct stat st;
    if (fstat(fd, &st) < 0 || lseek(fd, 0, SEEK_SET) < 0)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "spool: %s", strerror(errno));
    if (fb_spool_reserve(r, (long long)st.st_size, &err) < 0)
        return fb_resp_error(err, status);
    struct MHD_Response *resp = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
    if (resp == NULL)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    fd = -1; /* owned by the response now */
    MHD_add_response_header(resp, "Content-Type", "application/x-tar");
    *status = 200;
    return resp;
}

struct MHD_Response *fb_h_volume_archive_put(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *out = NULL;
    if (fb_volume_archive_put(r->api->core, r->tenant, r->params[0], fb_req_query(r, "path"), r->spool_path,
                              &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 201;
    return fb_resp_json(out);
}
