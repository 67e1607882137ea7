/* Checkpoints and sandboxes as tar files: GET /v1/checkpoints/{id}/export,
 * POST /v1/checkpoints/import, GET /v1/sandboxes/{id}/export. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/util.h"
#include "../core/export.h"
#include "api.h"

/* An unlinked spool in STATE_DIR/tmp; the response serves it from its fd. */
static int spool_open(struct fb_req *r, fb_error_t *err)
{
    char spool[PATH_MAX];
    if (fb_snprintf(spool, sizeof spool, "%s/tmp/archive.XXXXXX", r->api->core->cfg.state_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "spool path too long");
    int fd = mkostemp(spool, O_CLOEXEC);
    if (fd < 0)
        return fb_error_sys(err, "create spool");
    unlink(spool);
    return fd;
}

static struct MHD_Response *serve_spool(struct fb_req *r, int *fd, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    struct stat st;
    if (fstat(*fd, &st) < 0 || lseek(*fd, 0, SEEK_SET) < 0)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "spool: %s", strerror(errno));
    if (fb_spool_reserve(r, (long long)st.st_size, &err) < 0)
        return fb_resp_error(err, status);
    struct MHD_Response *resp = MHD_create_response_from_fd((uint64_t)st.st_size, *fd);
    if (resp == NULL)
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    *fd = -1; /* owned by the response now */
    MHD_add_response_header(resp, "Content-Type", "application/x-tar");
    *status = 200;
    return resp;
}

struct MHD_Response *fb_h_checkpoint_export(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    cleanup_close int fd = spool_open(r, &err);
    if (fd < 0 || fb_checkpoint_export(r->api->core, r->tenant, r->params[0], fd, &err) < 0)
        return fb_resp_error(err, status);
    return serve_spool(r, &fd, status);
}

struct MHD_Response *fb_h_checkpoint_import(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    json_t *out = NULL;
    if (r->received == 0)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "the body must be a checkpoint export (a tar)");
    if (fb_checkpoint_import(r->api->core, r->tenant, r->spool_path, &out, &err) < 0)
        return fb_resp_error(err, status);
    *status = 201;
    return fb_resp_json(out);
}

struct MHD_Response *fb_h_sandbox_export(struct fb_req *r, unsigned *status)
{
    cleanup_error fb_error_t err = NULL;
    const char *format = fb_req_query(r, "format");
    cleanup_close int fd = spool_open(r, &err);
    if (fd < 0 || fb_sandbox_export_image(r->api->core, r->tenant, r->params[0], format, fd, &err) < 0)
        return fb_resp_error(err, status);
    return serve_spool(r, &fd, status);
}
