#include "initconn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/util.h"

int fb_initconn_open(const char *sock_path, fb_error_t *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (fb_strlcpy(sa.sun_path, sock_path, sizeof sa.sun_path) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "init socket path");
    cleanup_close int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fb_error_sys(err, "socket");
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
        return fb_error_set(err, FB_ERR_UNAVAILABLE, errno, "sandbox init is not answering");
    return fb_steal_fd(&fd);
}

json_t *fb_initconn_path_req(const char *op, const char *path)
{
    json_t *req = json_pack("{s:s}", "op", op);
    if (req != NULL && fb_wire_set_bytes(req, "path", path) < 0) {
        json_decref(req);
        return NULL;
    }
    return req;
}

int fb_initconn_send(int fd, json_t *req, fb_error_t *err)
{
    int r = fb_wire_send_json(fd, FB_MSG_REQUEST, req);
    if (r < 0)
        return fb_error_set(err, FB_ERR_UNAVAILABLE, -r, "send to sandbox init");
    return 0;
}

int fb_initconn_send_data(int fd, uint16_t type, const void *data, size_t len, fb_error_t *err)
{
    int r = fb_wire_send(fd, type, data, len);
    if (r < 0)
        return fb_error_set(err, FB_ERR_UNAVAILABLE, -r, "send to sandbox init");
    return 0;
}

int fb_initconn_recv(int fd, struct fb_frame *f, fb_error_t *err)
{
    int r = fb_wire_recv(fd, f);
    if (r < 0)
        return fb_error_set(err, FB_ERR_UNAVAILABLE, -r, "sandbox init closed the connection");
    return 0;
}

static enum fb_error_kind kind_for_errno(int e)
{
    switch (e) {
    case ENOENT:
        return FB_ERR_NOT_FOUND;
    case EEXIST:
    case ENOTEMPTY:
    case EISDIR:
    case EBUSY:
    case ETXTBSY:
    case ESRCH: /* the process has exited */
    case EPIPE: /* its stdin is closed */
        return FB_ERR_CONFLICT;
    case EINVAL:
    case ENOTDIR:
    case ELOOP:
    case ENAMETOOLONG:
    case EXDEV:
    case EACCES:
    case EPERM:
    case EROFS:
        return FB_ERR_BAD_REQUEST;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
        return FB_ERR_TOO_LARGE;
    case EAGAIN:
    case ENOBUFS:                  /* a process not reading its stdin */
        return FB_ERR_UNAVAILABLE; /* e.g. the sandbox is at its pids limit */
    default:
        return FB_ERR_INTERNAL;
    }
}

int fb_initconn_check_result(const struct fb_frame *f, json_t **out, fb_error_t *err)
{
    if (f->type != FB_MSG_RESULT)
        return fb_error_set(err, FB_ERR_INTERNAL, EPROTO, "unexpected frame %u from sandbox init", f->type);
    cleanup_json json_t *j = fb_wire_frame_json(f);
    if (j == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, EPROTO, "malformed result from sandbox init");
    if (!json_is_true(json_object_get(j, "ok"))) {
        int e = (int)json_integer_value(json_object_get(j, "errno"));
        const char *msg = json_string_value(json_object_get(j, "error"));
        return fb_error_set(err, kind_for_errno(e), 0, "%s", msg ? msg : "operation failed");
    }
    if (out != NULL)
        *out = fb_steal_ptr(j);
    return 0;
}

int fb_initconn_recv_result(int fd, json_t **out, fb_error_t *err)
{
    struct fb_frame f;
    if (fb_initconn_recv(fd, &f, err) < 0)
        return -1;
    int r = fb_initconn_check_result(&f, out, err);
    free(f.data);
    return r;
}

int fb_initconn_call(const char *sock_path, json_t *req, json_t **out, fb_error_t *err)
{
    cleanup_close int fd = fb_initconn_open(sock_path, err);
    if (fd < 0)
        return -1;
    if (fb_initconn_send(fd, req, err) < 0)
        return -1;
    return fb_initconn_recv_result(fd, out, err);
}
