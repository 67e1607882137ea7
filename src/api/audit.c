/* GET /v1/audit: the tenant's audit events (policy decisions about its
 * sandboxes, such as DNS queries), oldest first; GET /metrics: counters in
 * the Prometheus text format.  Both are the tenant's own view. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/cleanup.h"
#include "../core/internal.h"
#include "api.h"

/* "since" is epoch milliseconds or an RFC 3339 UTC time
 * ("2026-11-29T10:00:00Z", fractions allowed). */
static int parse_since(const char *v, int64_t *out)
{
    char *end;
    if (v[0] >= '0' && v[0] <= '9' && strlen(v) <= 15) {
        long long ms = strtoll(v, &end, 10);
        if (*end == '\0') {
            *out = ms;
            return 0;
        }
    }
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    end = strptime(v, "%Y-%m-%dT%H:%M:%S", &tm);
    if (end == NULL)
        return -1;
    int64_t frac = 0;
    if (*end == '.') {
        int digits = 0;
        for (end++; *end >= '0' && *end <= '9'; end++, digits++)
            if (digits < 3)
                frac = frac * 10 + (*end - '0');
        for (; digits < 3; digits++)
            frac *= 10;
    }
    if (strcmp(end, "Z") != 0)
        return -1;
    *out = (int64_t)timegm(&tm) * 1000 + frac;
    return 0;
}

struct MHD_Response *fb_h_metrics(struct fb_req *r, unsigned *status)
{
    char *text = NULL;
    cleanup_error fb_error_t err = NULL;
    if (fb_core_metrics(r->api->core, r->tenant, &text, &err) < 0)
        return fb_resp_error(err, status);
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        free(text);
        return fb_resp_error_new(FB_ERR_INTERNAL, status, "out of memory");
    }
    MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
    *status = 200;
    return resp;
}

struct MHD_Response *fb_h_audit(struct fb_req *r, unsigned *status)
{
    const char *sandbox = fb_req_query(r, "sandbox");
    const char *since = fb_req_query(r, "since");
    int64_t since_ms = 0;
    if (since != NULL && parse_since(since, &since_ms) < 0)
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status,
                                 "since: must be epoch milliseconds or an RFC 3339 UTC time");
    if (sandbox != NULL && (strlen(sandbox) >= FB_ID_MAX || strncmp(sandbox, "sbx_", 4) != 0))
        return fb_resp_error_new(FB_ERR_BAD_REQUEST, status, "sandbox: not a sandbox id");
    *status = 200;
    return fb_resp_json(fb_audit_list(r->api->core, r->tenant, sandbox, since_ms));
}
