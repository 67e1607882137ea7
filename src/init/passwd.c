#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "init.h"

/* Parses one passwd line in place; returns 0 when it has the 7 fields. */
static int split_line(char *line, char *fields[7])
{
    int n = 0;
    char *p = line;
    fields[n++] = p;
    while (*p && n < 7) {
        if (*p == ':') {
            *p = '\0';
            fields[n++] = p + 1;
        }
        p++;
    }
    char *nl = strchr(fields[n - 1], '\n');
    if (nl)
        *nl = '\0';
    return n == 7 ? 0 : -1;
}

static int parse_id(const char *s, unsigned long *out)
{
    if (*s == '\0' || strlen(s) > 10)
        return -1;
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v > 0xfffffffeUL)
        return -1;
    *out = v;
    return 0;
}

int fbi_user_lookup(const char *spec, struct fbi_user *out)
{
    unsigned long numeric = 0;
    int by_id = parse_id(spec, &numeric) == 0;

    memset(out, 0, sizeof *out);
    if (by_id) {
        out->uid = (uid_t)numeric;
        out->gid = (gid_t)numeric;
        snprintf(out->home, sizeof out->home, "/");
    }
    FILE *f = fopen("/etc/passwd", "re");
    if (f == NULL) {
        if (strcmp(spec, "root") == 0)
            snprintf(out->home, sizeof out->home, "/root");
        return (by_id || strcmp(spec, "root") == 0) ? 0 : -ENOENT;
    }
    char line[1024];
    int found = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        char *fld[7];
        if (split_line(line, fld) < 0)
            continue;
        unsigned long uid, gid;
        if (parse_id(fld[2], &uid) < 0 || parse_id(fld[3], &gid) < 0)
            continue;
        if ((by_id && uid == numeric) || (!by_id && strcmp(fld[0], spec) == 0)) {
            out->uid = (uid_t)uid;
            out->gid = (gid_t)gid;
            snprintf(out->home, sizeof out->home, "%s", fld[5]);
            found = 1;
            break;
        }
    }
    fclose(f);
    if (!found && strcmp(spec, "root") == 0) {
        /* an image without /etc/passwd still has a root */
        snprintf(out->home, sizeof out->home, "/root");
        return 0;
    }
    return (found || by_id) ? 0 : -ENOENT;
}
