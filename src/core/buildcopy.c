#include "buildcopy.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/util.h"
#include "buildcopy_int.h"
#include "buildcopy_match.h"
#include "path.h"

#define SHOW 100

const char *bc_show(const char *name, char *buf, size_t len)
{
    size_t i = 0, j = 0;
    for (; name[i] != '\0' && j + 4 < len && i < SHOW; i++)
        buf[j++] = (name[i] >= 0x20 && name[i] < 0x7f && name[i] != '"') ? name[i] : '?';
    if (name[i] != '\0')
        j += (size_t)snprintf(buf + j, len - j, "...");
    buf[j] = '\0';
    return buf;
}

#define SHOWN(n) bc_show((n), (char[SHOW + 8]){0}, SHOW + 8)

void bc_tar_support(struct archive *a, bool archive_filters)
{
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    archive_read_support_filter_gzip(a);
    if (!archive_filters)
        return;
    /* ARCHIVE_WARN means libarchive would run an external program on the
     * data: such a filter is left unsupported instead */
    struct archive *probe = archive_read_new();
    if (probe && archive_read_support_filter_bzip2(probe) == ARCHIVE_OK)
        archive_read_support_filter_bzip2(a);
    archive_read_free(probe);
    probe = archive_read_new();
    if (probe && archive_read_support_filter_xz(probe) == ARCHIVE_OK)
        archive_read_support_filter_xz(a);
    archive_read_free(probe);
}

struct archive *bc_open_tar(int fd, fb_error_t *err)
{
    struct archive *a = archive_read_new();
    if (a == NULL) {
        fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "libarchive");
        return NULL;
    }
    bc_tar_support(a, false);
    if (archive_read_open_fd(a, fd, 65536) != ARCHIVE_OK) {
        fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "not a tar archive: %s", archive_error_string(a));
        archive_read_free(a);
        return NULL;
    }
    return a;
}

static void rd_freep(struct archive **a)
{
    if (*a)
        archive_read_free(*a);
}
#define cleanup_archive_rd __attribute__((cleanup(rd_freep)))

static int ent_cmp(const void *a, const void *b)
{
    const struct bc_ent *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c != 0 ? c : (x->ord < y->ord ? -1 : x->ord > y->ord);
}

static struct bc_ent *find(struct bc *c, const char *name)
{
    struct bc_ent key = {.name = (char *)name};
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int r = strcmp(c->ents[mid].name, key.name);
        if (r == 0)
            return &c->ents[mid];
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* First entry whose name is >= s. */
static size_t lower_bound(struct bc *c, const char *s)
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(c->ents[mid].name, s) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The entries below dir ("" for the root) are contiguous in name order. */
static void below(struct bc *c, const char *dir, size_t *from, size_t *to)
{
    if (dir[0] == '\0') {
        *from = 0;
        *to = c->n;
        return;
    }
    char pre[FB_PATH_MAX + 2];
    snprintf(pre, sizeof pre, "%s/", dir);
    size_t n = strlen(pre), i = lower_bound(c, pre);
    *from = i;
    while (i < c->n && strncmp(c->ents[i].name, pre, n) == 0)
        i++;
    *to = i;
}

static int push_ent(struct bc *c, size_t *cap, struct bc_ent *e)
{
    if (c->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        struct bc_ent *ne = realloc(c->ents, nc * sizeof *ne);
        if (ne == NULL)
            return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "build context index");
        c->ents = ne;
        *cap = nc;
    }
    c->ents[c->n++] = *e;
    return 0;
}

static int bad_member(struct bc *c, const char *raw, const char *why)
{
    return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0, "build context member \"%s\": %s", SHOWN(raw), why);
}

static int clean_member(struct bc *c, const char *raw, char *out)
{
    if (raw == NULL)
        return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0, "build context member without a name");
    if (strlen(raw) > FB_PATH_MAX)
        return bad_member(c, raw, "name longer than 4096 bytes");
    switch (bc_clean(raw, out, FB_PATH_MAX + 1)) {
    case BC_CLEAN_OK:
        return 0;
    case BC_CLEAN_ESCAPE:
        return bad_member(c, raw, "climbs above the context root");
    default:
        return bad_member(c, raw, "name too long");
    }
}

/* Pass 1: every header, no data but .dockerignore's. */
static int read_index(struct bc *c, int fd, char **ignore, size_t *ignore_len)
{
    cleanup_archive_rd struct archive *a = bc_open_tar(fd, c->err);
    if (a == NULL)
        return fb_error_wrap(c->err, "build context");
    size_t cap = 0;
    char name[FB_PATH_MAX + 1], link[FB_PATH_MAX + 1];
    for (long ord = 0;; ord++) {
        struct archive_entry *ae;
        int r = archive_read_next_header(a, &ae);
        if (r == ARCHIVE_EOF) {
            c->nord = (size_t)ord;
            return 0;
        }
        if (r < ARCHIVE_WARN)
            return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0, "corrupt build context: %s",
                                archive_error_string(a));
        if (ord >= FB_BUILDCOPY_ENTRIES_MAX)
            return fb_error_set(c->err, FB_ERR_TOO_LARGE, 0, "build context has more than %d members",
                                FB_BUILDCOPY_ENTRIES_MAX);
        const char *raw = archive_entry_pathname(ae);
        if (clean_member(c, raw, name) < 0)
            return -1;
        if (name[0] == '\0')
            continue; /* the root: nothing of it is copied */
        struct bc_ent e = {.ord = ord,
                           .perm = archive_entry_perm(ae) & 07777,
                           .mtime = archive_entry_mtime(ae),
                           .mtime_ns = archive_entry_mtime_nsec(ae),
                           .size = archive_entry_size(ae)};
        const char *hl = archive_entry_hardlink(ae);
        mode_t ft = archive_entry_filetype(ae);
        if (e.size < 0)
            return bad_member(c, raw, "negative size");
        if (hl != NULL) {
            e.type = 'h';
            if (clean_member(c, hl, link) < 0)
                return fb_error_wrap(c->err, "hardlink target");
            if (link[0] == '\0')
                return bad_member(c, raw, "hardlink to the root");
            e.link = strdup(link);
        } else if (ft == AE_IFREG) {
            e.type = 'f';
        } else if (ft == AE_IFDIR) {
            e.type = 'd';
        } else if (ft == AE_IFLNK) {
            const char *t = archive_entry_symlink(ae);
            if (t == NULL || t[0] == '\0' || strlen(t) > FB_PATH_MAX)
                return bad_member(c, raw, "symlink target empty or longer than 4096 bytes");
            e.type = 'l';
            e.link = strdup(t);
        } else {
            e.type = 's';
        }
        if ((e.name = strdup(name)) == NULL || ((e.type == 'h' || e.type == 'l') && e.link == NULL)) {
            free(e.name);
            free(e.link);
            return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "build context index");
        }
        if (push_ent(c, &cap, &e) < 0) {
            free(e.name);
            free(e.link);
            return -1;
        }
        if (strcmp(name, ".dockerignore") == 0 && e.type == 'f') {
            free(*ignore);
            *ignore = NULL;
            if (e.size > BC_IGNORE_MAX)
                return bad_member(c, raw, "larger than 64 KiB");
            if ((*ignore = malloc((size_t)e.size + 1)) == NULL)
                return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, ".dockerignore");
            size_t got = 0;
            for (la_ssize_t r2; got < (size_t)e.size; got += (size_t)r2) {
                r2 = archive_read_data(a, *ignore + got, (size_t)e.size - got);
                if (r2 < 0)
                    return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0, "corrupt build context: %s",
                                        archive_error_string(a));
                if (r2 == 0)
                    break;
            }
            *ignore_len = got;
        }
    }
}

static void free_ents(struct bc_ent *ents, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        free(ents[i].name);
        free(ents[i].link);
        free(ents[i].outs);
    }
}

/* Sorted, the last member of each name only, every parent directory
 * present (implied when the tar has no member for it), nothing below a
 * member that is not a directory, .dockerignore applied. */
static int build_index(struct bc *c, const char *ignore, size_t ignore_len)
{
    if (c->n > 0)
        qsort(c->ents, c->n, sizeof *c->ents, ent_cmp);
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (k > 0 && strcmp(c->ents[k - 1].name, c->ents[i].name) == 0) {
            free_ents(c->ents, k - 1, k);
            c->ents[k - 1] = c->ents[i];
        } else {
            c->ents[k++] = c->ents[i];
        }
    }
    c->n = k;
    cleanup_json json_t *implied = json_object();
    if (implied == NULL)
        return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "build context index");
    for (size_t i = 0; i < c->n; i++) {
        char p[FB_PATH_MAX + 1];
        fb_strlcpy(p, c->ents[i].name, sizeof p);
        for (char *slash; (slash = strrchr(p, '/')) != NULL;) {
            *slash = '\0';
            if (find(c, p) != NULL || json_object_get(implied, p) != NULL)
                break;
            if (json_object_set_new(implied, p, json_true()) < 0)
                return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "build context index");
        }
    }
    size_t cap = c->n;
    const char *name;
    json_t *v;
    json_object_foreach(implied, name, v)
    {
        struct bc_ent e = {.type = 'i', .ord = -1, .perm = 0755, .name = strdup(name)};
        if (e.name == NULL || push_ent(c, &cap, &e) < 0) {
            free(e.name);
            return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "build context index");
        }
    }
    if (c->n > 0)
        qsort(c->ents, c->n, sizeof *c->ents, ent_cmp);
    for (size_t i = 0; i + 1 < c->n; i++) {
        size_t len = strlen(c->ents[i].name);
        if (c->ents[i].type != 'd' && c->ents[i].type != 'i' &&
            strncmp(c->ents[i + 1].name, c->ents[i].name, len) == 0 && c->ents[i + 1].name[len] == '/')
            return bad_member(c, c->ents[i + 1].name, "below a member that is not a directory");
    }
    if ((c->by_ord = calloc(c->nord ? c->nord : 1, sizeof *c->by_ord)) == NULL)
        return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "build context index");
    for (size_t i = 0; i < c->n; i++)
        if (c->ents[i].ord >= 0)
            c->by_ord[c->ents[i].ord] = &c->ents[i];
    struct bc_ignore ig;
    if (ignore != NULL && bc_ignore_parse(ignore, ignore_len, &ig) < 0) {
        bc_ignore_free(&ig);
        return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0,
                            ".dockerignore: more than %d patterns or more than %d \"**\" in one",
                            BC_IGNORE_PATTERNS_MAX, BC_DSTAR_MAX);
    }
    if (ignore != NULL) {
        for (size_t i = 0; i < c->n; i++)
            c->ents[i].ignored = bc_ignored(&ig, c->ents[i].name);
        bc_ignore_free(&ig);
    }
    return 0;
}

/* ---- choosing ------------------------------------------------------------ */

struct plan {
    size_t cap;
    size_t seq;
};

static int add_out(struct bc *c, struct plan *p, const char *dir, const char *rel, struct bc_ent *e,
                   bool isdir, mode_t perm)
{
    if (c->nouts == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 64;
        struct bc_out *no = realloc(c->outs, nc * sizeof *no);
        if (no == NULL)
            return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "layer plan");
        c->outs = no;
        p->cap = nc;
    }
    if (c->nouts >= FB_BUILDCOPY_ENTRIES_MAX)
        return fb_error_set(c->err, FB_ERR_TOO_LARGE, 0, "%s: more than %d members", c->op,
                            FB_BUILDCOPY_ENTRIES_MAX);
    char *name = NULL;
    if (asprintf(&name, "%s%s%s", dir, dir[0] && rel[0] ? "/" : "", rel) < 0)
        return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "layer plan");
    if (strlen(name) > FB_PATH_MAX) {
        free(name);
        return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0, "%s: a destination is longer than %d bytes", c->op,
                            FB_PATH_MAX);
    }
    for (const char *q = name; q != NULL; q = strchr(q, '/') ? strchr(q, '/') + 1 : NULL) {
        if (strncmp(q, ".wh.", 4) == 0) {
            fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0,
                         "%s: \"%s\": names starting with .wh. are reserved for layer whiteouts", c->op,
                         SHOWN(name));
            free(name);
            return -1;
        }
    }
    c->outs[c->nouts++] = (struct bc_out){
        .name = name, .e = e, .seq = p->seq++, .dir = isdir, .perm = perm, .uid = c->uid, .gid = c->gid};
    return 0;
}

static bool is_dir(const struct bc_ent *e)
{
    return e->type == 'd' || e->type == 'i';
}

static int special(struct bc *c, const char *name)
{
    return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0,
                        "%s: \"%s\": device nodes, fifos and sockets cannot be copied", c->op, SHOWN(name));
}

/* The entries a source names; NULL in m[] stands for the context root. */
static int match_src(struct bc *c, const char *src, struct bc_ent ***m, size_t *nm, bool *root)
{
    char pat[FB_PATH_MAX + 1];
    *nm = 0;
    *root = false;
    int r = strlen(src) > FB_PATH_MAX ? BC_CLEAN_TOO_LONG : bc_clean(src, pat, sizeof pat);
    if (r == BC_CLEAN_ESCAPE)
        return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0, "%s: %s: is outside the build context", c->op,
                            SHOWN(src));
    if (r != BC_CLEAN_OK)
        return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0, "%s: %s: name too long", c->op, SHOWN(src));
    if (pat[0] == '\0') {
        *root = true;
        return 0;
    }
    if (!bc_has_glob(pat)) {
        struct bc_ent *e = find(c, pat);
        if (e != NULL && !e->ignored) {
            if ((*m = malloc(sizeof **m)) == NULL)
                return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "match");
            (*m)[(*nm)++] = e;
        }
        return 0;
    }
    /* the components before the first glob narrow the search */
    char pre[FB_PATH_MAX + 1] = "";
    const char *g = pat + strcspn(pat, "*?[\\");
    while (g > pat && *g != '/')
        g--;
    memcpy(pre, pat, (size_t)(g - pat));
    pre[g - pat] = '\0';
    size_t from, to, cap = 0;
    below(c, pre, &from, &to);
    for (size_t i = from; i < to; i++) {
        if (c->ents[i].ignored || !bc_glob_match(pat, c->ents[i].name))
            continue;
        if (*nm == cap) {
            cap = cap ? cap * 2 : 16;
            struct bc_ent **nn = realloc(*m, cap * sizeof *nn);
            if (nn == NULL)
                return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "match");
            *m = nn;
        }
        (*m)[(*nm)++] = &c->ents[i];
    }
    return 0;
}

static int out_cmp(const void *a, const void *b)
{
    const struct bc_out *x = a, *y = b;
    int r = strcmp(x->name, y->name);
    return r != 0 ? r : (x->seq < y->seq ? -1 : x->seq > y->seq);
}

static struct bc_out *find_out(struct bc *c, const char *name)
{
    size_t lo = 0, hi = c->nouts;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int r = strcmp(c->outs[mid].name, name);
        if (r == 0)
            return &c->outs[mid];
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* One source: a directory (or the root) gives its contents, anything else
 * itself. */
static int plan_item(struct bc *c, struct plan *p, struct bc_ent *e, const char *dest, bool dir_mode,
                     bool add)
{
    if (e == NULL || is_dir(e)) {
        const char *base = e ? e->name : "";
        size_t blen = e ? strlen(base) + 1 : 0;
        if (e != NULL && e->type == 'd' && dest[0] != '\0' && add_out(c, p, dest, "", e, true, e->perm) < 0)
            return -1;
        size_t from, to;
        below(c, base, &from, &to);
        for (size_t i = from; i < to; i++) {
            struct bc_ent *x = &c->ents[i];
            if (x->ignored)
                continue;
            if (x->type == 's')
                return special(c, x->name);
            if (add_out(c, p, dest, x->name + blen, x, is_dir(x), x->perm) < 0)
                return -1;
        }
        return 0;
    }
    if (e->type == 's')
        return special(c, e->name);
    const char *slash = strrchr(e->name, '/');
    if (add_out(c, p, dest, dir_mode ? (slash ? slash + 1 : e->name) : "", e, false, e->perm) < 0)
        return -1;
    if (add && e->type == 'f') {
        c->outs[c->nouts - 1].archive = true;
        c->outs[c->nouts - 1].root = dest;
    }
    return 0;
}

static int plan(struct bc *c, const char *const *srcs, size_t nsrcs, const char *dest, bool slash, bool add)
{
    struct plan p = {0};
    struct bc_ent **m[FB_BUILDCOPY_SRCS_MAX] = {0};
    size_t nm[FB_BUILDCOPY_SRCS_MAX] = {0}, total = 0;
    bool root[FB_BUILDCOPY_SRCS_MAX] = {0}, any_dir = false;
    int rc = 0;
    for (size_t i = 0; i < nsrcs && rc == 0; i++) {
        rc = match_src(c, srcs[i], &m[i], &nm[i], &root[i]);
        if (rc == 0 && nm[i] == 0 && !root[i])
            rc =
                fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0,
                             "%s: %s: no such file or directory in the build context", c->op, SHOWN(srcs[i]));
        total += nm[i] + root[i];
        any_dir = any_dir || root[i];
        for (size_t j = 0; rc == 0 && j < nm[i]; j++)
            any_dir = any_dir || is_dir(m[i][j]);
    }
    bool dir_mode = slash || nsrcs > 1 || total > 1 || any_dir;
    /* the directories above dest, then dest itself */
    char pre[FB_PATH_MAX + 1];
    for (const char *q = dest; rc == 0 && (q = strchr(q, '/')) != NULL; q++) {
        memcpy(pre, dest, (size_t)(q - dest));
        pre[q - dest] = '\0';
        if ((rc = add_out(c, &p, pre, "", NULL, true, 0755)) == 0)
            c->outs[c->nouts - 1].uid = c->outs[c->nouts - 1].gid = 0;
    }
    if (rc == 0 && dir_mode && dest[0] != '\0')
        rc = add_out(c, &p, dest, "", NULL, true, 0755);
    for (size_t i = 0; i < nsrcs; i++) {
        if (rc == 0 && root[i])
            rc = plan_item(c, &p, NULL, dest, dir_mode, add);
        for (size_t j = 0; rc == 0 && j < nm[i]; j++)
            rc = plan_item(c, &p, m[i][j], dest, dir_mode, add);
        free(m[i]);
    }
    if (rc < 0)
        return -1;
    if (c->nouts > 0)
        qsort(c->outs, c->nouts, sizeof *c->outs, out_cmp);
    size_t k = 0;
    for (size_t i = 0; i < c->nouts; i++) {
        if (k > 0 && strcmp(c->outs[k - 1].name, c->outs[i].name) == 0) {
            free(c->outs[k - 1].name);
            c->outs[k - 1] = c->outs[i];
        } else {
            c->outs[k++] = c->outs[i];
        }
    }
    c->nouts = k;
    /* a layer member below one that is not a directory would be unpacked
     * through it */
    for (size_t i = 0; i < c->nouts; i++) {
        char q[FB_PATH_MAX + 1];
        fb_strlcpy(q, c->outs[i].name, sizeof q);
        for (char *s; (s = strrchr(q, '/')) != NULL;) {
            *s = '\0';
            struct bc_out *o = find_out(c, q);
            if (o != NULL && !o->dir)
                return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0,
                                    "%s: \"%s\" would be below \"%s\", which is not a directory", c->op,
                                    SHOWN(c->outs[i].name), q);
        }
    }
    return 0;
}

/* Non-directory members hang off their context entry for the data pass;
 * hardlinks left without their target keep the target's data aside. */
static int attach(struct bc *c)
{
    for (size_t i = 0; i < c->nouts; i++) {
        struct bc_out *o = &c->outs[i];
        if (o->dir)
            continue;
        struct bc_out **no = realloc(o->e->outs, (o->e->nouts + 1) * sizeof *no);
        if (no == NULL)
            return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "layer plan");
        o->e->outs = no;
        no[o->e->nouts++] = o;
    }
    for (size_t i = 0; i < c->n; i++) {
        struct bc_ent *e = &c->ents[i], *t = e;
        if (e->type != 'h' || e->nouts == 0)
            continue;
        for (int hops = 0; t->type == 'h'; hops++) {
            struct bc_ent *next = find(c, t->link);
            if (next == NULL || hops == 8 || next->ord >= t->ord)
                return bad_member(c, e->name, "hardlink to a member that is not before it in the context");
            t = next;
        }
        if (t->type != 'f' && t->type != 'l')
            return bad_member(c, e->name, "hardlink to a directory or device");
        free(e->link);
        e->link = strdup(t->name); /* now the final target */
        if (e->link == NULL)
            return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "layer plan");
        bool linked = false;
        for (size_t j = 0; j < t->nouts; j++)
            linked = linked || !t->outs[j]->archive;
        if (t->type == 'f' && !linked)
            t->spool = true;
    }
    return 0;
}

int fb_buildcopy_layer(const char *context_tar, const char *const *srcs, size_t nsrcs, const char *dest,
                       uid_t uid, gid_t gid, bool add, const char *out_tar, struct fb_buildcopy_stats *stats,
                       fb_error_t *err)
{
    const char *op = add ? "ADD" : "COPY";
    if (stats != NULL)
        *stats = (struct fb_buildcopy_stats){0};
    if (nsrcs == 0 || nsrcs > FB_BUILDCOPY_SRCS_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: between 1 and %d sources", op,
                            FB_BUILDCOPY_SRCS_MAX);
    for (size_t i = 0; i < nsrcs; i++) {
        if (srcs[i] == NULL || srcs[i][0] == '\0')
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: a source is empty", op);
        if (strncmp(srcs[i], "http://", 7) == 0 || strncmp(srcs[i], "https://", 8) == 0)
            return fb_error_set(
                err, FB_ERR_BAD_REQUEST, 0,
                add ? "ADD from a URL is not supported (no network during builds); download it "
                      "into the context"
                    : "COPY cannot fetch a URL");
    }
    char norm[FB_PATH_MAX + 1];
    if (dest == NULL || dest[0] != '/')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s: the destination must be an absolute path", op);
    if (fb_path_normalize(dest, norm, sizeof norm, err) < 0)
        return fb_error_wrap(err, "%s destination", op);
    bool slash = dest[strlen(dest) - 1] == '/';
    const char *dest_rel = norm + 1; /* the layer's names are relative */

    struct bc c = {.op = op, .uid = uid, .gid = gid, .spool_fd = -1, .err = err};
    cleanup_close int cfd = open(context_tar, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (cfd < 0)
        return fb_error_sys(err, "open build context %s", context_tar);
    cleanup_free char *ignore = NULL;
    size_t ignore_len = 0;
    int rc = read_index(&c, cfd, &ignore, &ignore_len);
    if (rc == 0)
        rc = build_index(&c, ignore, ignore_len);
    if (rc == 0)
        rc = plan(&c, srcs, nsrcs, dest_rel, slash, add);
    if (rc == 0)
        rc = attach(&c);
    if (rc == 0 && lseek(cfd, 0, SEEK_SET) < 0)
        rc = fb_error_sys(err, "rewind build context");
    const char *s = strrchr(out_tar, '/');
    if (s == NULL)
        strcpy(c.tmpdir, ".");
    else if (fb_snprintf(c.tmpdir, sizeof c.tmpdir, "%.*s", (int)(s == out_tar ? 1 : s - out_tar), out_tar) <
             0)
        rc = rc < 0 ? rc : fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "output path");
    cleanup_close int ofd = -1;
    if (rc == 0 && (ofd = open(out_tar, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
        rc = fb_error_sys(err, "create %s", out_tar);
    if (rc == 0)
        rc = bc_write(&c, cfd, ofd);
    if (rc < 0 && ofd >= 0)
        unlink(out_tar);
    if (rc == 0 && stats != NULL)
        *stats = c.st;
    free_ents(c.ents, 0, c.n);
    free(c.ents);
    free(c.by_ord);
    for (size_t i = 0; i < c.nouts; i++)
        free(c.outs[i].name);
    free(c.outs);
    return rc;
}
