/* Image archives in the formats people already have: an OCI image layout
 * (as a tar: `podman save --format oci-archive`, or a layout dir the CLI
 * tars up) and a docker-archive (`docker save`, `podman save`, both the
 * classic and the OCI-layout-based format).  No registry is ever asked. */
#ifndef FB_CORE_IMAGE_H
#define FB_CORE_IMAGE_H

#include <stdbool.h>

#include <jansson.h>

#include "../common/error.h"

struct fb_core;

enum fb_image_format { FB_IMAGE_NONE, FB_IMAGE_OCI, FB_IMAGE_DOCKER };

/* Reads only the member names of the archive at path: an image format, or
 * FB_IMAGE_NONE for anything else (a root filesystem tar).  -1 with err
 * set when the file is not a readable archive. */
int fb_image_detect(const char *path, enum fb_image_format *fmt, fb_error_t *err);

/* What an image is made of once checked: its layers' diff ids, lowest
 * first (a JSON array), and its config defaults (env, workdir, user, cmd,
 * entrypoint).  Both are new references owned by the caller. */
struct fb_image {
    json_t *layers;
    json_t *config;
    json_t *fresh; /* the digests this load unpacked (not there before) */
};
void fb_image_clear(struct fb_image *img);

/* Checks the image archive at path whole and stores its layers (blob
 * digests and sizes against the manifest, diff ids against the config,
 * every layer's members through the layer rules).  ref picks one image of
 * several (a RepoTag or an OCI ref.name annotation; NULL: the only one).
 * The caller holds core->layers_lock for reading.  FB_ERR_BAD_REQUEST for
 * anything malformed; staged files are removed whatever happens. */
int fb_image_load(struct fb_core *core, const char *path, enum fb_image_format fmt, const char *ref,
                  struct fb_image *out, fb_error_t *err);

/* Parses an image config blob's "config" into forkbox's defaults object
 * (bounded and type-checked); exposed for tests. */
int fb_image_config_parse(json_t *blob, json_t **out, fb_error_t *err);

#endif
