/* nftables through libnftables: forkbox's host-side packet filter for
 * sandbox networks lives in one table of its own, changed only in whole
 * batches (a batch applies completely or not at all). */
#ifndef FB_RUNTIME_NFT_H
#define FB_RUNTIME_NFT_H

#include "../common/error.h"

struct nft_ctx;

struct fb_nft {
    struct nft_ctx *ctx;
};

/* Opens a context for the calling thread's network namespace. */
int fb_nft_open(struct fb_nft *n, fb_error_t *err);
void fb_nft_close(struct fb_nft *n);

/* Runs cmds (nft syntax, several lines) as one atomic batch.  Never give it
 * text from a client: callers build it from validated numbers and names
 * of their own.  On failure *err carries nft's own message. */
int fb_nft_run(struct fb_nft *n, const char *cmds, fb_error_t *err);

/* Runs a listing command and returns its output (caller frees). */
int fb_nft_query(struct fb_nft *n, const char *cmd, char **out, fb_error_t *err);

#endif
