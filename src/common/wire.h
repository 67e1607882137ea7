/* The daemon <-> forkbox-init wire protocol.
 *
 * forkbox-init listens on a unix socket that only the host can reach; the
 * daemon opens one connection per operation and may reconnect at any time,
 * so nothing about a sandbox depends on a connection (or the daemon)
 * staying alive.  A connection carries frames: a fixed 12-byte header
 * (payload length, type, flags, 0) followed by at most FB_WIRE_MAX_PAYLOAD
 * bytes.  Control frames carry a JSON object; data frames carry raw bytes.
 *
 * Conversation per connection: the daemon sends one FB_MSG_REQUEST, then
 * the two sides exchange data frames as the op defines, and init ends with
 * one FB_MSG_RESULT ({"ok":true,...} or {"ok":false,"errno":N,"error":"..."}).
 */
#ifndef FB_COMMON_WIRE_H
#define FB_COMMON_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"

#define FB_WIRE_VERSION 1
#define FB_WIRE_MAX_PAYLOAD (1u << 20)

enum fb_msg_type {
    FB_MSG_REQUEST = 1, /* daemon -> init: JSON {"op": ...} */
    FB_MSG_RESULT = 2,  /* init -> daemon: JSON, ends the op */
    FB_MSG_STDIN = 3,   /* daemon -> init: bytes for the process's stdin */
    FB_MSG_STDIN_EOF = 4,
    FB_MSG_STDOUT = 5, /* init -> daemon: process output */
    FB_MSG_STDERR = 6,
    FB_MSG_DATA = 7,  /* file content, either direction */
    FB_MSG_END = 8,   /* end of a data stream, either direction */
    FB_MSG_ENTRY = 9, /* init -> daemon: JSON describing one walked entry */
};

struct fb_frame_header {
    uint32_t len;
    uint16_t type;
    uint16_t flags;
    uint32_t reserved;
};

struct fb_frame {
    uint16_t type;
    uint32_t len;
    char *data; /* owned, NUL-terminated for convenience, len bytes of payload */
};

/* Writes one frame; handles short writes and EINTR.  Returns 0 or -errno. */
int fb_wire_send(int fd, uint16_t type, const void *data, size_t len);

/* Serialises obj compactly and sends it as one frame; obj stays the caller's.
 * Returns 0 or -errno (-EMSGSIZE when it does not fit in a frame). */
int fb_wire_send_json(int fd, uint16_t type, json_t *obj);

/* Reads one whole frame into *out (caller frees out->data with free()).
 * Returns 0, -ECONNRESET on a clean EOF before a header, -EPROTO on a
 * malformed or oversized frame, or -errno. */
int fb_wire_recv(int fd, struct fb_frame *out);

/* File names are bytes, JSON strings are UTF-8: a name that is not UTF-8
 * travels base64-encoded under "<key>_b64" instead of "<key>".  Sets the
 * field on obj; returns 0 or -ENOMEM. */
int fb_wire_set_bytes(json_t *obj, const char *key, const char *bytes);

/* Reads "<key>" or "<key>_b64" from obj into buf (len bytes, NUL
 * terminated).  Returns 0, -ENOENT when absent, -ENAMETOOLONG, or -EINVAL
 * (bad base64, or a NUL inside). */
int fb_wire_get_bytes(json_t *obj, const char *key, char *buf, size_t len);

#define FB_WIRE_MAX_FDS 8

/* Passes n (1..FB_WIRE_MAX_FDS) open fds over a unix socket with one
 * marker byte; the fds stay the caller's.  Returns 0 or -errno. */
int fb_wire_send_fds(int sock, const int *fds, size_t n);

/* Receives exactly n fds sent by fb_wire_send_fds (close-on-exec; the
 * caller owns them).  Any other count closes what came: -EPROTO. */
int fb_wire_recv_fds(int sock, int *fds, size_t n);

/* Parses a control frame's payload as a JSON object; NULL if it is not one. */
json_t *fb_wire_frame_json(const struct fb_frame *f);

#endif
