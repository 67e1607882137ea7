/* The daemon's side of the init wire protocol (see common/wire.h). */
#ifndef FB_RUNTIME_INITCONN_H
#define FB_RUNTIME_INITCONN_H

#include <jansson.h>

#include "../common/error.h"
#include "../common/wire.h"

/* Connects to a sandbox's init.  Returns an fd (caller closes) or -1 with
 * FB_ERR_UNAVAILABLE when init is not answering. */
int fb_initconn_open(const char *sock_path, fb_error_t *err);

/* A new request object {"op": op, "path": path} (path as bytes, see
 * fb_wire_set_bytes); NULL on allocation failure. */
json_t *fb_initconn_path_req(const char *op, const char *path);

/* Sends the op request. */
int fb_initconn_send(int fd, json_t *req, fb_error_t *err);

/* Sends a data frame of the given type (DATA, STDIN, END...). */
int fb_initconn_send_data(int fd, uint16_t type, const void *data, size_t len, fb_error_t *err);

/* Reads the next frame (caller frees f->data). A vanished init is
 * FB_ERR_UNAVAILABLE. */
int fb_initconn_recv(int fd, struct fb_frame *f, fb_error_t *err);

/* Turns a RESULT frame's JSON into success (returns 0, *out gets the
 * object if out is non-NULL) or an error whose kind follows the errno init
 * reported (ENOENT -> not_found, EEXIST/ENOTEMPTY/EISDIR/EBUSY -> conflict,
 * EINVAL/ENOTDIR/ELOOP/ENAMETOOLONG -> bad_request, ENOSPC/EDQUOT/EFBIG ->
 * payload_too_large). */
int fb_initconn_check_result(const struct fb_frame *f, json_t **out, fb_error_t *err);

/* Reads the next frame, which must be the op's RESULT, and checks it as
 * fb_initconn_check_result() does. */
int fb_initconn_recv_result(int fd, json_t **out, fb_error_t *err);

/* Connects, sends req, expects a RESULT directly: for simple ops. */
int fb_initconn_call(const char *sock_path, json_t *req, json_t **out, fb_error_t *err);

#endif
