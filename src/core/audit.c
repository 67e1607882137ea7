/* The audit trail: what sandboxes tried that a policy judged (DNS queries
 * for now), kept in memory in a bounded ring, newest last.  Lost on a
 * daemon restart; see docs/network.md. */
#include <pthread.h>
#include <string.h>

#include "../common/util.h"
#include "core.h"
#include "internal.h"

#define AUDIT_CAP 8192

struct audit_event {
    int64_t ms;
    uint64_t seq;
    char tenant[64];
    char sandbox[FB_ID_MAX];
    char kind[8];
    char name[256];
    unsigned qtype;
    char verdict[16];
};

static struct audit_event ring[AUDIT_CAP];
static uint64_t next_seq; /* events ever added; ring[seq % AUDIT_CAP] */
static pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;

void fb_audit_add(struct fb_core *core, const char *tenant, const char *sandbox, const char *kind,
                  const char *name, unsigned qtype, const char *verdict)
{
    (void)core;
    pthread_mutex_lock(&audit_lock);
    struct audit_event *e = &ring[next_seq % AUDIT_CAP];
    memset(e, 0, sizeof *e);
    e->ms = fb_now_ms();
    e->seq = next_seq++;
    fb_strlcpy(e->tenant, tenant, sizeof e->tenant);
    fb_strlcpy(e->sandbox, sandbox, sizeof e->sandbox);
    fb_strlcpy(e->kind, kind, sizeof e->kind);
    fb_strlcpy(e->name, name, sizeof e->name);
    e->qtype = qtype;
    fb_strlcpy(e->verdict, verdict, sizeof e->verdict);
    pthread_mutex_unlock(&audit_lock);
}

static const char *qtype_name(unsigned t)
{
    switch (t) {
    case 1:
        return "A";
    case 2:
        return "NS";
    case 5:
        return "CNAME";
    case 6:
        return "SOA";
    case 12:
        return "PTR";
    case 15:
        return "MX";
    case 16:
        return "TXT";
    case 28:
        return "AAAA";
    case 33:
        return "SRV";
    case 65:
        return "HTTPS";
    case 255:
        return "ANY";
    default:
        return NULL;
    }
}

json_t *fb_audit_list(struct fb_core *core, const char *tenant, const char *sandbox, int64_t since_ms)
{
    (void)core;
    json_t *events = json_array();
    pthread_mutex_lock(&audit_lock);
    uint64_t first = next_seq > AUDIT_CAP ? next_seq - AUDIT_CAP : 0;
    for (uint64_t s = first; s < next_seq; s++) {
        const struct audit_event *e = &ring[s % AUDIT_CAP];
        if (strcmp(e->tenant, tenant) != 0 || e->ms < since_ms ||
            (sandbox && strcmp(e->sandbox, sandbox) != 0))
            continue;
        char when[40];
        fb_time_format(e->ms, when, sizeof when);
        const char *tn = qtype_name(e->qtype);
        json_t *ev = json_pack("{s:s, s:s, s:s, s:s, s:s}", "time", when, "sandbox", e->sandbox, "kind",
                               e->kind, "name", e->name, "verdict", e->verdict);
        if (strcmp(e->kind, "dns") == 0) /* a query type only for queries */
            json_object_set_new(ev, "type", tn ? json_string(tn) : json_integer(e->qtype));
        json_array_append_new(events, ev);
    }
    pthread_mutex_unlock(&audit_lock);
    return json_pack("{s:o}", "events", events);
}
