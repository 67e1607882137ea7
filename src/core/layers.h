/* Image layers, stored content-addressed: each one unpacked once under
 * STATE_DIR/layers/HEX (HEX: the sha256 of its uncompressed tar, its OCI
 * diff id), in overlay form (whiteouts as 0:0 character devices, opaque
 * dirs marked with trusted.overlay.opaque).  A template's root filesystem
 * is assembled from them by hard links: a file shared by two templates is
 * one inode on disk, and a sandbox still sees one read-only lower dir. */
#ifndef FB_CORE_LAYERS_H
#define FB_CORE_LAYERS_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "../common/error.h"

struct fb_core;
struct fb_template_row;

#define FB_LAYER_DIGEST_MAX 72 /* "sha256:" + 64 hex + NUL, rounded up */
#define FB_TEMPLATE_LAYERS_MAX 127

/* Whether d is "sha256:" and 64 lowercase hex digits. */
bool fb_layer_digest_valid(const char *d);

/* Stores the uncompressed layer tar at tar_path (checked whole first: no
 * absolute or climbing names, no links out, no devices outside /dev, owners
 * below 65536).  With expect non-NULL its sha256 must be that digest
 * (FB_ERR_BAD_REQUEST otherwise).  A layer already stored is not unpacked
 * again; *fresh says which happened.  digest gets "sha256:HEX".  The caller
 * holds core->layers_lock for reading.  Nothing is left behind on error. */
int fb_layer_add(struct fb_core *core, const char *tar_path, const char *expect,
                 char digest[FB_LAYER_DIGEST_MAX], bool *fresh, fb_error_t *err);

/* Applies stored layer digest onto the tree open at dst_fd, the way
 * overlayfs would stack it: whiteouts remove, opaque dirs hide what was
 * below, anything else replaces; files are hard-linked, never copied.
 * keep_dirs: dirs already in the tree keep their owner, mode and times
 * (a COPY layer's parents).  FB_ERR_NOT_FOUND when it is not stored. */
int fb_layer_apply(struct fb_core *core, const char *digest, int dst_fd, bool keep_dirs, fb_error_t *err);

/* Hard-links the tree below src_fd into dst_fd (an empty dir): dirs are
 * made anew with the same owners, modes and times, everything else is
 * linked.  Neither side's symlinks are followed. */
int fb_tree_link(int src_fd, int dst_fd, fb_error_t *err);

/* How many of rows list each layer: a new {digest: count} object (NULL
 * without memory). */
json_t *fb_layer_counts(const struct fb_template_row *rows, size_t n);

/* Removes stored layers that no template lists (and the build-cache
 * entries that led to them); *out gets {"removed_layers", "freed_bytes"}.
 * Takes core->layers_lock for writing, so it waits for imports and builds. */
int fb_layers_gc(struct fb_core *core, json_t **out, fb_error_t *err);

/* Removes those of digests (a JSON array) that no template lists: what a
 * failed import or build unpacked.  Call without holding layers_lock. */
void fb_layers_drop_unused(struct fb_core *core, json_t *digests);

/* Drops half-unpacked layers an interrupted daemon left (start-up). */
void fb_layers_remove_partial(struct fb_core *core);

/* Bytes of a stored layer (its row), 0 when unknown. */
int64_t fb_layer_size(struct fb_core *core, const char *digest);

#endif
