/* Entries of a sandbox's network allowlist: "pypi.org", "*.github.com",
 * "203.0.113.0/24", "198.51.100.7", each optionally with ":PORT".  Parsed
 * and normalised once (lower case, canonical CIDR), so the stored spec,
 * the resolver and the packet filter all read the same thing. */
#ifndef FB_CORE_ALLOW_H
#define FB_CORE_ALLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/error.h"

#define FB_ALLOW_MAX 256      /* entries per sandbox */
#define FB_ALLOW_TEXT_MAX 272 /* longest entry, as text */

enum fb_allow_kind { FB_ALLOW_NAME, FB_ALLOW_WILDCARD, FB_ALLOW_CIDR };

struct fb_allow {
    enum fb_allow_kind kind;
    char name[254]; /* NAME: the name; WILDCARD: the suffix after "*." */
    uint32_t net;   /* CIDR, host order */
    unsigned prefix;
    uint16_t port; /* 0: any */
};

/* Parses one entry (400 with the reason on bad input). */
int fb_allow_parse(const char *text, struct fb_allow *out, fb_error_t *err);

/* The canonical text of an entry (at least FB_ALLOW_TEXT_MAX bytes). */
void fb_allow_format(const struct fb_allow *a, char *out, size_t len);

/* Whether a CIDR entry touches a range no sandbox may reach (private,
 * link-local, loopback, shared, multicast, reserved). */
bool fb_allow_blocked(const struct fb_allow *a);

/* Those ranges as nft set elements ("0.0.0.0/8, 10.0.0.0/8, ..."). */
const char *fb_allow_blocked_elements(void);

/* Whether name (lower case, no trailing dot) is allowed by a NAME or
 * WILDCARD entry: exact for NAME; for "*.x", any name ending in ".x". */
bool fb_allow_matches(const struct fb_allow *a, const char *name);

#endif
