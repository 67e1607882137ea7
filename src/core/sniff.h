/* Reading the destination name out of the first bytes of a connection: the
 * server name of a TLS ClientHello, the Host of an HTTP request.  The
 * egress proxy judges a connection by it before any byte goes upstream. */
#ifndef FB_CORE_SNIFF_H
#define FB_CORE_SNIFF_H

#include <stddef.h>

#define FB_SNIFF_MORE 0     /* not enough bytes yet */
#define FB_SNIFF_FOUND 1    /* name filled in (lower case, no port) */
#define FB_SNIFF_INVALID -1 /* not that protocol, malformed, or no name */

/* TLS: the server_name of a ClientHello in the first record. */
int fb_sniff_tls_sni(const unsigned char *buf, size_t len, char *name, size_t cap);

/* HTTP/1.x: the Host header of the first request (headers within len). */
int fb_sniff_http_host(const unsigned char *buf, size_t len, char *name, size_t cap);

#endif
