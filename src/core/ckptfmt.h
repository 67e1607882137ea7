/* The exported checkpoint format (docs/checkpoint-format.md): the manifest
 * that opens every export, and the OCI layer tar's whiteout names.  Pure
 * logic, no I/O, so that it can be unit-tested. */
#ifndef FB_CORE_CKPTFMT_H
#define FB_CORE_CKPTFMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "../common/error.h"

#define FB_CKPT_FORMAT "forkbox-checkpoint"
#define FB_CKPT_FORMAT_VERSION 1
/* the manifest, as a tar member and as JSON text */
#define FB_CKPT_MANIFEST_NAME "manifest.json"
#define FB_CKPT_MANIFEST_MAX (1 << 20)
#define FB_CKPT_LAYER_NAME "rootfs/layer.tar"
#define FB_CKPT_CRIU_PREFIX "criu/"
/* members besides the manifest: the layer and at most this many CRIU images */
#define FB_CKPT_MEMBERS_MAX 4096
#define FB_CKPT_MEMBER_NAME_MAX 160
/* a whole export (and so an import upload) */
#define FB_CKPT_TAR_MAX (4LL << 30)
/* disk sizes a manifest may ask for: the bounds of resources.disk_mb */
#define FB_CKPT_DISK_MIN (16LL << 20)
#define FB_CKPT_DISK_MAX (1048576LL << 20)

struct fb_ckpt_member {
    char name[FB_CKPT_MEMBER_NAME_MAX];
    int64_t size;
    char sha256[65]; /* lowercase hex */
};

struct fb_ckpt_manifest {
    int version;
    char forkbox_version[32];
    char id[64];
    char name[128]; /* "" when none */
    char parent[64];
    char created_at[40];
    char template_name[128];
    char template_digest[80]; /* "sha256:<hex>" of the template's layer tar */
    bool memory;              /* criu/ members hold the process tree */
    char layer_kind[8];       /* "image" or "dir" on the exporting host */
    int64_t disk_bytes;       /* image size; 0 for "dir" */
    int64_t uid_base;         /* host uid of root inside on the exporting host (informative) */
    size_t n_members;
    struct fb_ckpt_member *members; /* owned; fb_ckpt_manifest_clear frees */
};

/* Frees what m owns and zeroes it. */
void fb_ckpt_manifest_clear(struct fb_ckpt_manifest *m);

/* Appends a member (name copied).  0, or -1 with FB_ERR_TOO_LARGE past
 * FB_CKPT_MEMBERS_MAX / FB_ERR_INTERNAL without memory. */
int fb_ckpt_manifest_add(struct fb_ckpt_manifest *m, const char *name, int64_t size, const char *sha256,
                         fb_error_t *err);

/* The manifest as JSON (new reference, NULL without memory). */
json_t *fb_ckpt_manifest_to_json(const struct fb_ckpt_manifest *m);

/* Parses and validates manifest text from an untrusted upload into *m
 * (caller clears it, also on failure).  FB_ERR_BAD_REQUEST for anything
 * malformed: unknown or duplicate keys, another format or version, bad
 * names, sizes or digests, a member listed twice, no layer member, memory
 * not matching the presence of criu/ members. */
int fb_ckpt_manifest_parse(const char *text, size_t len, struct fb_ckpt_manifest *m, fb_error_t *err);

/* Whether name may be a member of an export: "rootfs/layer.tar" or
 * "criu/" + 1..128 of [A-Za-z0-9._-] not starting with '.'. */
bool fb_ckpt_member_name_valid(const char *name);

/* The member named name in m, or NULL. */
const struct fb_ckpt_member *fb_ckpt_manifest_find(const struct fb_ckpt_manifest *m, const char *name);

enum fb_whiteout { FB_WH_NONE = 0, FB_WH_FILE, FB_WH_OPAQUE };

/* Classifies a layer tar path (relative, "./" prefixes and trailing '/'
 * already removed).  FB_WH_FILE: ".wh.NAME" deletes NAME, whose path is
 * written to target; FB_WH_OPAQUE: ".wh..wh..opq" marks its directory
 * (target: the directory, "" for the root) opaque; FB_WH_NONE: an ordinary
 * member (target: path).  -1 with FB_ERR_BAD_REQUEST for whiteout names
 * that name nothing (".wh.", ".wh..", other ".wh..wh." names). */
int fb_whiteout_parse(const char *path, char *target, size_t len, fb_error_t *err);

/* The layer tar path of a whiteout of name in dir ("" for the root), or,
 * with opaque, of dir's opaque marker.  0, or -1 when out is too small. */
int fb_whiteout_name(const char *dir, const char *name, bool opaque, char *out, size_t len);

/* Whether s is "sha256:" + 64 lowercase hex digits (with_prefix) or just
 * the 64 digits. */
bool fb_sha256_hex_valid(const char *s, bool with_prefix);

#endif
