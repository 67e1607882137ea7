/* GET /metrics: a tenant's sandboxes and their network counters in the
 * Prometheus text format. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "core.h"
#include "internal.h"

static void counter_line(FILE *f, const char *metric, const char *sandbox, const char *label,
                         const char *value, json_t *n)
{
    fprintf(f, "%s{sandbox=\"%s\",%s=\"%s\"} %lld\n", metric, sandbox, label, value,
            (long long)json_integer_value(n));
}

int fb_core_metrics(struct fb_core *core, const char *tenant, char **out, fb_error_t *err)
{
    *out = NULL;
    struct fb_sandbox_row *rows = NULL;
    size_t n = 0;
    if (fb_store_sandbox_list(core->store, tenant, &rows, &n, err) < 0)
        return -1;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL) {
        fb_sandbox_rows_free(rows, n);
        return fb_error_sys(err, "metrics buffer");
    }
    static const char *const states[] = {"starting", "running", "stopped"};
    fprintf(f,
            "# HELP forkbox_sandboxes Sandboxes of this tenant by state.\n# TYPE forkbox_sandboxes gauge\n");
    for (size_t s = 0; s < sizeof states / sizeof states[0]; s++) {
        size_t count = 0;
        for (size_t i = 0; i < n; i++)
            count += strcmp(rows[i].state, states[s]) == 0;
        fprintf(f, "forkbox_sandboxes{state=\"%s\"} %zu\n", states[s], count);
    }
    fprintf(f, "# HELP forkbox_sandbox_network_bytes_total Bytes through a sandbox's link.\n"
               "# TYPE forkbox_sandbox_network_bytes_total counter\n"
               "# HELP forkbox_sandbox_network_connections_total Connections a sandbox opened.\n"
               "# TYPE forkbox_sandbox_network_connections_total counter\n"
               "# HELP forkbox_sandbox_network_denied_total Packets refused by the policy, by reason.\n"
               "# TYPE forkbox_sandbox_network_denied_total counter\n");
    for (size_t i = 0; i < n; i++) {
        if (strcmp(rows[i].state, "running") != 0)
            continue;
        cleanup_json json_t *c = fb_net_counters(core, &rows[i]);
        if (c == NULL)
            continue;
        /* ids are sbx_ + hex: nothing to escape in a label value */
        const char *id = rows[i].id;
        counter_line(f, "forkbox_sandbox_network_bytes_total", id, "direction", "out",
                     json_object_get(c, "bytes_out"));
        counter_line(f, "forkbox_sandbox_network_bytes_total", id, "direction", "in",
                     json_object_get(c, "bytes_in"));
        fprintf(f, "forkbox_sandbox_network_connections_total{sandbox=\"%s\"} %lld\n", id,
                (long long)json_integer_value(json_object_get(c, "connections")));
        const char *reason;
        json_t *v;
        json_object_foreach(json_object_get(c, "denied"), reason, v)
        {
            counter_line(f, "forkbox_sandbox_network_denied_total", id, "reason", reason, v);
        }
    }
    fb_sandbox_rows_free(rows, n);
    if (fclose(f) != 0) {
        free(text);
        return fb_error_sys(err, "metrics buffer");
    }
    *out = text;
    return 0;
}
