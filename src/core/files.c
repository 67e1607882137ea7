#include "files.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../runtime/initconn.h"
#include "path.h"

static void handle_clearp(struct fb_sandbox_handle *h)
{
    fb_sandbox_handle_clear(h);
}
#define cleanup_handle __attribute__((cleanup(handle_clearp)))

/* Connects to the sandbox's init and sends req. */
static int open_op(struct fb_core *core, const char *tenant, const char *id, json_t *req, fb_error_t *err)
{
    cleanup_handle struct fb_sandbox_handle h = {0};
    if (fb_sandbox_open(core, tenant, id, &h, err) < 0)
        return -1;
    cleanup_close int fd = fb_initconn_open(h.sock_path, err);
    if (fd < 0 || fb_initconn_send(fd, req, err) < 0)
        return -1;
    return fb_steal_fd(&fd);
}

int fb_files_read_open(struct fb_core *core, const char *tenant, const char *id, const char *path,
                       json_t **meta, fb_error_t *err)
{
    char norm[FB_PATH_MAX + 1];
    if (fb_path_normalize(path, norm, sizeof norm, err) < 0)
        return -1;
    cleanup_json json_t *req = fb_initconn_path_req("read", norm);
    cleanup_close int fd = open_op(core, tenant, id, req, err);
    if (fd < 0)
        return -1;
    int r = fb_initconn_recv_result(fd, meta, err);
    if (r < 0)
        return fb_error_wrap(err, "%s", norm);
    return fb_steal_fd(&fd);
}

int fb_files_write_open(struct fb_core *core, const char *tenant, const char *id, const char *path, int mode,
                        fb_error_t *err)
{
    char norm[FB_PATH_MAX + 1];
    if (fb_path_normalize(path, norm, sizeof norm, err) < 0)
        return -1;
    if (strcmp(norm, "/") == 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "path: cannot write to /");
    if (mode < 0 || mode > 07777)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "mode: must be an octal mode between 0 and 07777");
    cleanup_json json_t *req = fb_initconn_path_req("write", norm);
    if (req == NULL || json_object_set_new(req, "mode", json_integer(mode)) < 0 ||
        json_object_set_new(req, "parents", json_true()) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "build request");
    return open_op(core, tenant, id, req, err);
}

int fb_files_write_finish(int fd, json_t **out, fb_error_t *err)
{
    /* if init already refused the write, END cannot be sent but its
     * result (the reason) is still waiting to be read */
    (void)fb_wire_send(fd, FB_MSG_END, NULL, 0);
    return fb_initconn_recv_result(fd, out, err);
}

int fb_files_delete(struct fb_core *core, const char *tenant, const char *id, const char *path,
                    bool recursive, fb_error_t *err)
{
    char norm[FB_PATH_MAX + 1];
    if (fb_path_normalize(path, norm, sizeof norm, err) < 0)
        return -1;
    if (strcmp(norm, "/") == 0)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "path: cannot delete /");
    cleanup_json json_t *req = fb_initconn_path_req("delete", norm);
    if (req == NULL || json_object_set_new(req, "recursive", json_boolean(recursive)) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "build request");
    cleanup_close int fd = open_op(core, tenant, id, req, err);
    if (fd < 0)
        return -1;
    int r = fb_initconn_recv_result(fd, NULL, err);
    if (r < 0 && (*err)->kind == FB_ERR_CONFLICT)
        return fb_error_wrap(err, "%s is a non-empty directory (use recursive=true)", norm);
    return r < 0 ? fb_error_wrap(err, "%s", norm) : 0;
}
