/* Checkpoints and sandboxes leaving and entering the host as tar files:
 * the checkpoint format of docs/checkpoint-format.md (ckpt_export.c,
 * ckpt_import.c) and OCI / docker image archives of a sandbox (oci.c). */
#ifndef FB_CORE_EXPORT_H
#define FB_CORE_EXPORT_H

#include <stdint.h>

#include <jansson.h>

#include "../common/error.h"
#include "core.h"

/* The host uid that stands for root inside in an imported checkpoint's
 * files: sandboxes made from it move [base, base + 65536) to their own
 * range as they do for any checkpoint.  Never 0 (0 means "no move"). */
#define FB_IMPORT_UID_BASE 65536u

/* Writes checkpoint cid of tenant in the export format to out_fd (a
 * spool: regular file, empty).  not_found; conflict when its template is
 * gone (the export must name the template's digest). */
int fb_checkpoint_export(struct fb_core *core, const char *tenant, const char *cid, int out_fd,
                         fb_error_t *err);

/* Makes a new checkpoint of tenant from the export at tar_path (the
 * untrusted, spooled upload; plain, gzip or zstd).  bad_request for
 * anything malformed, conflict when the template is missing or differs,
 * payload_too_large when it does not fit; nothing is left behind on
 * failure.  *out: the checkpoint object (new reference). */
int fb_checkpoint_import(struct fb_core *core, const char *tenant, const char *tar_path, json_t **out,
                         fb_error_t *err);

/* Writes an image archive of sandbox id's filesystem (template layer +
 * writable layer) to out_fd: format "oci" (OCI image layout) or "docker"
 * (docker-archive).  The sandbox is frozen while its layer is read. */
int fb_sandbox_export_image(struct fb_core *core, const char *tenant, const char *id, const char *format,
                            int out_fd, fb_error_t *err);

/* The cached OCI layer tar of template name (built on first use, again
 * when the template was replaced): its path, "sha256:<hex>" digest and
 * size.  not_found / unavailable as fb_template_rootfs. */
int fb_template_layer(struct fb_core *core, const char *name, char *path, size_t pathlen, char digest[80],
                      int64_t *size, fb_error_t *err);

/* The sandbox's writable layer as an OCI layer tar into spool, taken
 * frozen (a paused one already is) and synced, under pause_lock like a
 * checkpoint; row gets the sandbox's row (caller clears it). */
int fb_sandbox_layer_tar(struct fb_core *core, const char *tenant, const char *id, struct fb_sandbox_row *row,
                         int spool, int64_t *size, char sha[65], fb_error_t *err);

#endif
