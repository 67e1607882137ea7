#include "nft.h"

#include <errno.h>
#include <nftables/libnftables.h>
#include <stdlib.h>
#include <string.h>

int fb_nft_open(struct fb_nft *n, fb_error_t *err)
{
    n->ctx = nft_ctx_new(NFT_CTX_DEFAULT);
    if (n->ctx == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "nftables context");
    /* output and errors are captured, never printed by the library */
    if (nft_ctx_buffer_output(n->ctx) != 0 || nft_ctx_buffer_error(n->ctx) != 0) {
        fb_nft_close(n);
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "nftables buffers");
    }
    return 0;
}

void fb_nft_close(struct fb_nft *n)
{
    if (n->ctx != NULL)
        nft_ctx_free(n->ctx);
    n->ctx = NULL;
}

/* nft's message without its trailing newlines, bounded for the log */
static int nft_failure(struct fb_nft *n, const char *what, fb_error_t *err)
{
    const char *msg = nft_ctx_get_error_buffer(n->ctx);
    size_t len = msg ? strcspn(msg, "\n") : 0;
    if (len > 400)
        len = 400;
    return fb_error_set(err, FB_ERR_INTERNAL, EINVAL, "nftables: %s: %.*s", what, (int)len, msg ? msg : "");
}

int fb_nft_run(struct fb_nft *n, const char *cmds, fb_error_t *err)
{
    if (nft_run_cmd_from_buffer(n->ctx, cmds) != 0)
        return nft_failure(n, "apply rules", err);
    return 0;
}

int fb_nft_query(struct fb_nft *n, const char *cmd, char **out, fb_error_t *err)
{
    *out = NULL;
    if (nft_run_cmd_from_buffer(n->ctx, cmd) != 0)
        return nft_failure(n, "query", err);
    const char *text = nft_ctx_get_output_buffer(n->ctx);
    *out = strdup(text ? text : "");
    if (*out == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "nftables output");
    return 0;
}
