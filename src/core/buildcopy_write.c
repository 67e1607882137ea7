/* The writing half of fb_buildcopy_layer: directories of the plan first,
 * then the context streamed once more for data, links and ADD archives. */
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

#define BUF 65536
#define SHOWN(n) bc_show((n), (char[112]){0}, 112)

static void rd_freep(struct archive **a)
{
    if (*a)
        archive_read_free(*a);
}
static void entry_freep(struct archive_entry **e)
{
    if (*e)
        archive_entry_free(*e);
}
#define cleanup_archive_rd __attribute__((cleanup(rd_freep)))
#define cleanup_entry __attribute__((cleanup(entry_freep)))

struct member {
    const char *name;
    char type; /* 'f' 'd' 'l' 'h' */
    mode_t perm;
    uid_t uid;
    gid_t gid;
    int64_t mtime;
    long mtime_ns;
    int64_t size;
    const char *link;
};

static int put(struct bc *c, const struct member *m)
{
    if (c->st.entries >= FB_BUILDCOPY_ENTRIES_MAX)
        return fb_error_set(c->err, FB_ERR_TOO_LARGE, 0, "%s: more than %d members", c->op,
                            FB_BUILDCOPY_ENTRIES_MAX);
    cleanup_entry struct archive_entry *ae = archive_entry_new();
    if (ae == NULL)
        return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "tar entry");
    archive_entry_set_pathname(ae, m->name);
    archive_entry_set_filetype(ae, m->type == 'd' ? AE_IFDIR : m->type == 'l' ? AE_IFLNK : AE_IFREG);
    archive_entry_set_perm(ae, m->type == 'l' ? 0777 : m->perm & 07777);
    archive_entry_set_uid(ae, m->uid);
    archive_entry_set_gid(ae, m->gid);
    archive_entry_set_mtime(ae, (time_t)m->mtime, m->mtime_ns);
    archive_entry_set_size(ae, m->type == 'f' ? m->size : 0);
    if (m->type == 'l')
        archive_entry_set_symlink(ae, m->link);
    if (m->type == 'h')
        archive_entry_set_hardlink(ae, m->link);
    if (archive_write_header(c->w, ae) < ARCHIVE_WARN)
        return fb_error_set(c->err, FB_ERR_INTERNAL, archive_errno(c->w), "layer tar %s: %s", m->name,
                            archive_error_string(c->w));
    c->st.entries++;
    return 0;
}

static int write_data(struct bc *c, const void *buf, size_t n)
{
    if (archive_write_data(c->w, buf, n) != (la_ssize_t)n)
        return fb_error_set(c->err, FB_ERR_INTERNAL, archive_errno(c->w), "layer tar: %s",
                            archive_error_string(c->w));
    c->st.bytes += n;
    return 0;
}

/* The current member's data, from the tar a, into the layer or (fd >= 0)
 * onto the end of fd. */
static int copy_data(struct bc *c, struct archive *a, int fd, const char *what)
{
    for (;;) {
        la_ssize_t n = archive_read_data(a, c->buf, BUF);
        if (n == 0)
            return 0;
        if (n < 0)
            return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0, "%s: corrupt data: %s", what,
                                archive_error_string(a));
        int r = fd >= 0 ? fb_write_all(fd, c->buf, (size_t)n) : write_data(c, c->buf, (size_t)n);
        if (r < 0)
            return fd >= 0 ? fb_error_set(c->err, FB_ERR_INTERNAL, -r, "spool %s", what) : -1;
        if (fd >= 0)
            c->spool_len += n;
    }
}

static int spool_open(struct bc *c, int *fd)
{
    *fd = open(c->tmpdir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (*fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        char path[4200];
        snprintf(path, sizeof path, "%s/.buildcopy.XXXXXX", c->tmpdir);
        *fd = mkostemp(path, O_CLOEXEC);
        if (*fd >= 0)
            unlink(path);
    }
    return *fd < 0 ? fb_error_sys(c->err, "spool file in %s", c->tmpdir) : 0;
}

/* size bytes at off of the spool into the layer */
static int from_spool(struct bc *c, int fd, int64_t off, int64_t size)
{
    while (size > 0) {
        ssize_t n = pread(fd, c->buf, size < BUF ? (size_t)size : BUF, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return fb_error_sys(c->err, "read spool");
        if (write_data(c, c->buf, (size_t)n) < 0)
            return -1;
        off += n;
        size -= n;
    }
    return 0;
}

struct region {
    int fd;
    int64_t off, left;
    char *buf;
};

static la_ssize_t region_read(struct archive *a, void *cls, const void **out)
{
    struct region *r = cls;
    (void)a;
    if (r->left <= 0)
        return 0;
    ssize_t n;
    do
        n = pread(r->fd, r->buf, r->left < BUF ? (size_t)r->left : BUF, r->off);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -1;
    r->off += n;
    r->left -= n;
    *out = r->buf;
    return n;
}

/* An ADD archive's member name below root, refused when it could land
 * anywhere else. */
static int archive_name(struct bc *c, const char *what, const char *raw, const char *root, char *out,
                        size_t outlen)
{
    char clean[FB_PATH_MAX + 1];
    if (raw == NULL || raw[0] == '/' || strlen(raw) > FB_PATH_MAX)
        return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0,
                            "%s: %s: archive member \"%s\": absolute or too long", c->op, what,
                            SHOWN(raw ? raw : ""));
    int r = bc_clean(raw, clean, sizeof clean);
    if (r != BC_CLEAN_OK)
        return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0, "%s: %s: archive member \"%s\": %s", c->op, what,
                            SHOWN(raw),
                            r == BC_CLEAN_ESCAPE ? "climbs above the destination" : "name too long");
    if (clean[0] == '\0') {
        out[0] = '\0';
        return 0;
    }
    if (fb_snprintf(out, outlen, "%s%s%s", root, root[0] ? "/" : "", clean) < 0)
        return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0, "%s: %s: archive member \"%s\": name too long",
                            c->op, what, SHOWN(raw));
    for (const char *q = clean; q != NULL; q = strchr(q, '/') ? strchr(q, '/') + 1 : NULL)
        if (strncmp(q, ".wh.", 4) == 0)
            return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0,
                                "%s: %s: archive member \"%s\": names starting with .wh. are reserved", c->op,
                                what, SHOWN(raw));
    return 1;
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

/* Every directory above name (below root) exists in the layer, and none of
 * them is a file or symlink this layer made. */
static int archive_parents(struct bc *c, json_t *seen, const char *root, const char *name, const char *what)
{
    char p[FB_PATH_MAX + 1];
    size_t rl = strlen(root);
    for (const char *s = name + rl + (rl ? 1 : 0); (s = strchr(s, '/')) != NULL; s++) {
        memcpy(p, name, (size_t)(s - name));
        p[s - name] = '\0';
        const char *t = json_string_value(json_object_get(seen, p));
        struct bc_out *o = t ? NULL : find_out(c, p);
        if ((t && strcmp(t, "d") != 0) || (o && !o->dir))
            return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0,
                                "%s: %s: archive member \"%s\" is below one that is not a directory", c->op,
                                what, SHOWN(name));
        if (t || o)
            continue;
        struct member m = {.name = p, .type = 'd', .perm = 0755, .uid = c->uid, .gid = c->gid};
        if (put(c, &m) < 0 || json_object_set_new(seen, p, json_string("d")) < 0)
            return -1;
    }
    return 0;
}

static int archive_member(struct bc *c, struct archive *in, struct archive_entry *ae, json_t *seen,
                          const char *root, const char *what)
{
    char name[FB_PATH_MAX + 1], target[FB_PATH_MAX + 1];
    int r = archive_name(c, what, archive_entry_pathname(ae), root, name, sizeof name);
    if (r <= 0)
        return r;
    if (archive_parents(c, seen, root, name, what) < 0)
        return -1;
    mode_t ft = archive_entry_filetype(ae);
    const char *hl = archive_entry_hardlink(ae);
    struct member m = {.name = name,
                       .perm = archive_entry_perm(ae),
                       .uid = c->uid,
                       .gid = c->gid,
                       .mtime = archive_entry_mtime(ae),
                       .mtime_ns = archive_entry_mtime_nsec(ae),
                       .size = archive_entry_size(ae)};
    if (hl != NULL) {
        /* only to a file this archive already put in the layer: anything
         * else would share an inode with a file of the image */
        if (archive_name(c, what, hl, root, target, sizeof target) <= 0 ||
            !json_equal(json_object_get(seen, target), c->file_mark))
            return fb_error_set(
                c->err, FB_ERR_BAD_REQUEST, 0,
                "%s: %s: archive member \"%s\" is a hardlink to one not before it in the archive", c->op,
                what, SHOWN(name));
        m.type = 'h';
        m.link = target;
    } else if (ft == AE_IFREG) {
        m.type = 'f';
    } else if (ft == AE_IFDIR) {
        m.type = 'd';
    } else if (ft == AE_IFLNK) {
        /* any target: it resolves inside the sandbox's root */
        m.type = 'l';
        m.link = archive_entry_symlink(ae);
        if (m.link == NULL || m.link[0] == '\0' || strlen(m.link) > FB_PATH_MAX)
            return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0,
                                "%s: %s: archive member \"%s\": bad symlink target", c->op, what,
                                SHOWN(name));
    } else {
        return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0,
                            "%s: %s: archive member \"%s\": device nodes, fifos and sockets cannot be copied",
                            c->op, what, SHOWN(name));
    }
    if (m.size < 0)
        return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0, "%s: %s: archive member \"%s\": negative size",
                            c->op, what, SHOWN(name));
    if (put(c, &m) < 0)
        return -1;
    if (json_object_set_new(seen, name, json_stringn(m.type == 'h' ? "f" : &m.type, 1)) < 0)
        return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "archive names");
    return m.type == 'f' ? copy_data(c, in, -1, what) : 0;
}

/* 1 when the spooled file is not a tar: it is then copied as it is. */
static int unpack(struct bc *c, int fd, const struct bc_ent *e, const struct bc_out *o)
{
    if (e->size == 0)
        return 1;
    cleanup_free char *rbuf = malloc(BUF);
    if (rbuf == NULL)
        return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "archive");
    struct region reg = {.fd = fd, .off = e->spool_off, .left = e->size, .buf = rbuf};
    cleanup_archive_rd struct archive *in = archive_read_new();
    if (in == NULL)
        return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "archive");
    bc_tar_support(in, true);
    if (archive_read_open(in, &reg, NULL, region_read, NULL) != ARCHIVE_OK)
        return 1;
    struct archive_entry *ae;
    int r = archive_read_next_header(in, &ae);
    if (r < ARCHIVE_WARN)
        return 1;
    cleanup_json json_t *seen = json_object();
    if (seen == NULL)
        return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "archive names");
    struct bc_out *ro = o->root[0] ? find_out(c, o->root) : NULL;
    if (o->root[0] && (ro == NULL || !ro->dir)) {
        struct member m = {.name = o->root, .type = 'd', .perm = 0755, .uid = c->uid, .gid = c->gid};
        if (put(c, &m) < 0)
            return -1;
    }
    if (json_object_set_new(seen, o->root, json_string("d")) < 0)
        return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "archive names");
    const char *what = SHOWN(e->name);
    for (long n = 0; r != ARCHIVE_EOF; n++) {
        if (r < ARCHIVE_WARN)
            return fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0, "%s: %s: corrupt archive: %s", c->op, what,
                                archive_error_string(in));
        if (archive_member(c, in, ae, seen, o->root, what) < 0)
            return -1;
        r = archive_read_next_header(in, &ae);
    }
    return 0;
}

static const char *first_plain(const struct bc_ent *t)
{
    for (size_t j = 0; j < t->nouts; j++)
        if (!t->outs[j]->archive)
            return t->outs[j]->name;
    return NULL;
}

static struct bc_ent *find_ent(struct bc *c, const char *name)
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int r = strcmp(c->ents[mid].name, name);
        if (r == 0)
            return &c->ents[mid];
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* One context member that has somewhere to go. */
static int emit(struct bc *c, struct archive *a, struct bc_ent *e)
{
    bool spooled = false;
    bool any_archive = false;
    for (size_t j = 0; j < e->nouts; j++)
        any_archive = any_archive || e->outs[j]->archive;
    if (e->type == 'f' && (e->spool || any_archive)) {
        if (c->spool_fd < 0 && spool_open(c, &c->spool_fd) < 0)
            return -1;
        e->spool_off = c->spool_len;
        if (lseek(c->spool_fd, 0, SEEK_END) < 0)
            return fb_error_sys(c->err, "spool");
        if (copy_data(c, a, c->spool_fd, e->name) < 0)
            return -1;
        e->size = c->spool_len - e->spool_off;
        spooled = true;
    }
    const char *first = NULL;
    for (size_t j = 0; j < e->nouts; j++) {
        const struct bc_out *o = e->outs[j];
        struct member m = {.name = o->name,
                           .type = e->type,
                           .perm = e->perm,
                           .uid = o->uid,
                           .gid = o->gid,
                           .mtime = e->mtime,
                           .mtime_ns = e->mtime_ns,
                           .size = e->size,
                           .link = e->link};
        if (o->archive) {
            int r = unpack(c, c->spool_fd, e, o);
            if (r < 0)
                return -1;
            if (r == 0)
                continue;
        }
        if (e->type == 'h') {
            struct bc_ent *t = find_ent(c, e->link);
            if (t->type == 'l') {
                m.type = 'l';
                m.link = t->link;
            } else if ((m.link = first_plain(t)) == NULL) {
                /* its target is not copied: a file of its own */
                m.type = 'f';
                m.size = t->size;
                if (put(c, &m) < 0 || from_spool(c, c->spool_fd, t->spool_off, t->size) < 0)
                    return -1;
                continue;
            }
            if (put(c, &m) < 0)
                return -1;
            continue;
        }
        if (e->type == 'f' && first != NULL) {
            m.type = 'h';
            m.link = first;
            if (put(c, &m) < 0)
                return -1;
            continue;
        }
        if (put(c, &m) < 0)
            return -1;
        if (e->type == 'f') {
            first = o->name;
            if ((spooled ? from_spool(c, c->spool_fd, e->spool_off, e->size) : copy_data(c, a, -1, e->name)) <
                0)
                return -1;
        }
    }
    return 0;
}

static void wr_freep(struct archive **a)
{
    if (*a)
        archive_write_free(*a);
}
#define cleanup_archive_wr __attribute__((cleanup(wr_freep)))

int bc_write(struct bc *c, int context_fd, int out_fd)
{
    cleanup_free char *buf = malloc(BUF);
    cleanup_archive_wr struct archive *w = archive_write_new();
    cleanup_close int spool = -1;
    if (buf == NULL || w == NULL)
        return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "layer tar");
    cleanup_json json_t *mark = json_string("f");
    if (mark == NULL)
        return fb_error_set(c->err, FB_ERR_INTERNAL, ENOMEM, "layer tar");
    c->buf = buf;
    c->w = w;
    c->file_mark = mark;
    /* names are bytes: written as they are, not converted through a locale */
    if (archive_write_set_format_pax_restricted(w) != ARCHIVE_OK ||
        archive_write_set_options(w, "hdrcharset=BINARY") < ARCHIVE_WARN ||
        archive_write_set_bytes_in_last_block(w, 1) != ARCHIVE_OK ||
        archive_write_open_fd(w, out_fd) != ARCHIVE_OK)
        return fb_error_set(c->err, FB_ERR_INTERNAL, 0, "start tar: %s", archive_error_string(w));
    for (size_t i = 0; i < c->nouts; i++) {
        const struct bc_out *o = &c->outs[i];
        if (!o->dir)
            continue;
        struct member m = {.name = o->name,
                           .type = 'd',
                           .perm = o->perm,
                           .uid = o->uid,
                           .gid = o->gid,
                           .mtime = o->e ? o->e->mtime : 0,
                           .mtime_ns = o->e ? o->e->mtime_ns : 0};
        if (put(c, &m) < 0)
            return -1;
    }
    cleanup_archive_rd struct archive *a = bc_open_tar(context_fd, c->err);
    if (a == NULL)
        return fb_error_wrap(c->err, "build context");
    int rc = 0;
    char name[FB_PATH_MAX + 1];
    for (size_t ord = 0; rc == 0; ord++) {
        struct archive_entry *ae;
        int r = archive_read_next_header(a, &ae);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN)
            rc = fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0, "corrupt build context: %s",
                              archive_error_string(a));
        struct bc_ent *e = rc == 0 && ord < c->nord ? c->by_ord[ord] : NULL;
        if (e == NULL || (e->nouts == 0 && !e->spool))
            continue;
        const char *raw = archive_entry_pathname(ae);
        if (raw == NULL || bc_clean(raw, name, sizeof name) != BC_CLEAN_OK || strcmp(name, e->name) != 0)
            rc = fb_error_set(c->err, FB_ERR_BAD_REQUEST, 0, "the build context changed while being read");
        else
            rc = emit(c, a, e);
    }
    spool = c->spool_fd;
    c->spool_fd = -1;
    if (rc == 0 && archive_write_close(w) != ARCHIVE_OK)
        rc = fb_error_set(c->err, FB_ERR_INTERNAL, archive_errno(w), "finish tar: %s",
                          archive_error_string(w));
    c->w = NULL;
    c->buf = NULL;
    return rc;
}
