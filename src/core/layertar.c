#include "layertar.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/util.h"
#include "ckptfmt.h"
#include "path.h"
#include "tarfilter.h"

#define UID_RANGE 65536u
#define NOBODY 65534u
#define DEPTH_MAX 256
#define XATTR_BUF 65536
#define OPAQUE_XATTR "trusted.overlay.opaque"
/* memory spent remembering names: hardlink sources while writing, symlinks
 * while checking (through_symlink); the tree is the sandbox's to shape */
#define LINK_NAMES_MAX (64 << 20)

static void rd_freep(struct archive **a)
{
    if (*a)
        archive_read_free(*a);
}
static void wr_freep(struct archive **a)
{
    if (*a)
        archive_write_free(*a);
}
static void entry_freep(struct archive_entry **e)
{
    if (*e)
        archive_entry_free(*e);
}
#define cleanup_archive_rd __attribute__((cleanup(rd_freep)))
#define cleanup_archive_wr __attribute__((cleanup(wr_freep)))
#define cleanup_entry __attribute__((cleanup(entry_freep)))

static void hex_digest(const unsigned char d[32], char hex[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

int fb_sha256_fd(int fd, char hex[65], int64_t *size, fb_error_t *err)
{
    gnutls_hash_hd_t h;
    if (gnutls_hash_init(&h, GNUTLS_DIG_SHA256) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "sha256");
    cleanup_free char *buf = malloc(1 << 16);
    int64_t total = 0;
    for (;;) {
        ssize_t n = buf ? read(fd, buf, 1 << 16) : -1;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            unsigned char d[32];
            gnutls_hash_deinit(h, d);
            return fb_error_sys(err, "read for sha256");
        }
        if (n == 0)
            break;
        gnutls_hash(h, buf, (size_t)n);
        total += n;
    }
    unsigned char d[32];
    gnutls_hash_deinit(h, d);
    hex_digest(d, hex);
    if (size != NULL)
        *size = total;
    return 0;
}

/* ---- writing ---------------------------------------------------------- */

struct sink {
    int fd;
    gnutls_hash_hd_t h;
    int64_t total, max;
    bool too_large;
};

static la_ssize_t sink_write(struct archive *a, void *cls, const void *buf, size_t n)
{
    struct sink *s = cls;
    if (s->total + (int64_t)n > s->max) {
        s->too_large = true;
        archive_set_error(a, EFBIG, "layer tar larger than %lld bytes", (long long)s->max);
        return -1;
    }
    int r = fb_write_all(s->fd, buf, n);
    if (r < 0) {
        archive_set_error(a, -r, "write: %s", strerror(-r));
        return -1;
    }
    gnutls_hash(s->h, buf, n);
    s->total += (int64_t)n;
    return (la_ssize_t)n;
}

struct walk {
    struct archive *a;
    const struct fb_layer_opts *o;
    json_t *links; /* "dev:ino" -> first path, for hardlinks */
    size_t link_bytes;
    long entries;
    char *buf;
    char *xbuf, *xval;
};

static int64_t inside_id(const struct walk *w, uint32_t host)
{
    if (host >= w->o->uid_from && host - w->o->uid_from < UID_RANGE)
        return host - w->o->uid_from;
    return NOBODY;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* Sorted entry names of the directory dfd (without . and ..). */
static int list_dir(int dfd, char ***out, size_t *n, fb_error_t *err)
{
    int fd = dup(dfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return fb_error_sys(err, "read dir");
    }
    rewinddir(d);
    char **names = NULL;
    size_t len = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (len == cap) {
            cap = cap ? cap * 2 : 32;
            char **nn = realloc(names, cap * sizeof *nn);
            if (nn == NULL) {
                rc = fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "dir listing");
                break;
            }
            names = nn;
        }
        if ((names[len] = strdup(e->d_name)) == NULL) {
            rc = fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "dir listing");
            break;
        }
        len++;
    }
    closedir(d);
    if (rc < 0) {
        names_free(names, len);
        return -1;
    }
    if (len > 0)
        qsort(names, len, sizeof *names, name_cmp);
    *out = names;
    *n = len;
    return 0;
}

/* user.* xattrs only: trusted.overlay.* are the overlay's own bookkeeping
 * (converted or meaningless elsewhere); security.capability written in a
 * user namespace names a host uid and grants nothing under no_new_privs. */
static void add_xattrs(struct walk *w, struct archive_entry *ae, int fd)
{
    ssize_t n = flistxattr(fd, w->xbuf, XATTR_BUF);
    for (ssize_t off = 0; n > 0 && off < n; off += (ssize_t)strlen(w->xbuf + off) + 1) {
        const char *name = w->xbuf + off;
        if (strncmp(name, "user.", 5) != 0)
            continue;
        ssize_t v = fgetxattr(fd, name, w->xval, XATTR_BUF);
        if (v >= 0)
            archive_entry_xattr_add_entry(ae, name, w->xval, (size_t)v);
    }
}

static bool is_opaque(int fd)
{
    char v[4];
    ssize_t n = fgetxattr(fd, OPAQUE_XATTR, v, sizeof v);
    return n == 1 && v[0] == 'y';
}

static int put_header(struct walk *w, struct archive_entry *ae, fb_error_t *err)
{
    if (++w->entries > FB_LAYER_ENTRIES_MAX)
        return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "layer has more than %d entries", FB_LAYER_ENTRIES_MAX);
    if (archive_write_header(w->a, ae) < ARCHIVE_WARN)
        return fb_error_set(err, archive_errno(w->a) == EFBIG ? FB_ERR_TOO_LARGE : FB_ERR_INTERNAL, 0,
                            "layer tar: %s", archive_error_string(w->a));
    return 0;
}

static struct archive_entry *new_entry(struct walk *w, const char *path, const struct stat *st, mode_t type)
{
    struct archive_entry *ae = archive_entry_new();
    if (ae == NULL)
        return NULL;
    archive_entry_set_pathname(ae, path);
    archive_entry_set_filetype(ae, type);
    archive_entry_set_perm(ae, st ? st->st_mode & 07777 : 0);
    archive_entry_set_uid(ae, st ? inside_id(w, st->st_uid) : 0);
    archive_entry_set_gid(ae, st ? inside_id(w, st->st_gid) : 0);
    if (st)
        archive_entry_set_mtime(ae, st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
    return ae;
}

static int put_empty(struct walk *w, const char *path, fb_error_t *err)
{
    cleanup_entry struct archive_entry *ae = new_entry(w, path, NULL, AE_IFREG);
    if (ae == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "tar entry");
    archive_entry_set_size(ae, 0);
    return put_header(w, ae, err);
}

static int put_file(struct walk *w, int dfd, const char *name, const char *path, const struct stat *st,
                    fb_error_t *err)
{
    cleanup_entry struct archive_entry *ae = new_entry(w, path, st, AE_IFREG);
    if (ae == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "tar entry");
    if (st->st_nlink > 1) {
        char key[48];
        snprintf(key, sizeof key, "%ju:%ju", (uintmax_t)st->st_dev, (uintmax_t)st->st_ino);
        const char *first = json_string_value(json_object_get(w->links, key));
        if (first != NULL) {
            archive_entry_set_hardlink(ae, first);
            archive_entry_set_size(ae, 0);
            return put_header(w, ae, err);
        }
        /* past the budget, further names of an inode are stored as copies */
        if (w->link_bytes + strlen(path) + 64 <= LINK_NAMES_MAX) {
            w->link_bytes += strlen(path) + 64;
            json_object_set_new(w->links, key, json_string(path));
        }
    }
    cleanup_close int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return fb_error_sys(err, "open %s", path);
    archive_entry_set_size(ae, st->st_size);
    add_xattrs(w, ae, fd);
    if (put_header(w, ae, err) < 0)
        return -1;
    int64_t left = st->st_size;
    while (left > 0) {
        ssize_t n = read(fd, w->buf, left < (1 << 16) ? (size_t)left : (1 << 16));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return fb_error_sys(err, "read %s", path);
        if (n == 0)
            break; /* shrank meanwhile: libarchive pads to the size in the header */
        if (archive_write_data(w->a, w->buf, (size_t)n) < 0)
            return fb_error_set(err, archive_errno(w->a) == EFBIG ? FB_ERR_TOO_LARGE : FB_ERR_INTERNAL, 0,
                                "layer tar: %s", archive_error_string(w->a));
        left -= n;
    }
    return 0;
}

static int walk_dir(struct walk *w, int dfd, const char *rel, int depth, fb_error_t *err);

static int walk_entry(struct walk *w, int dfd, const char *rel, const char *name, int depth, fb_error_t *err)
{
    char path[FB_PATH_MAX + 1];
    if (fb_snprintf(path, sizeof path, "%s%s%s", rel, rel[0] ? "/" : "", name) < 0)
        return fb_error_set(err, FB_ERR_TOO_LARGE, ENAMETOOLONG, "path longer than %d bytes", FB_PATH_MAX);
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : fb_error_sys(err, "stat %s", path);
    if (S_ISREG(st.st_mode))
        return put_file(w, dfd, name, path, &st, err);
    if (S_ISLNK(st.st_mode)) {
        char target[FB_PATH_MAX + 1];
        ssize_t n = readlinkat(dfd, name, target, sizeof target - 1);
        if (n < 0)
            return fb_error_sys(err, "readlink %s", path);
        target[n] = '\0';
        cleanup_entry struct archive_entry *ae = new_entry(w, path, &st, AE_IFLNK);
        if (ae == NULL)
            return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "tar entry");
        archive_entry_set_perm(ae, 0777);
        archive_entry_set_symlink(ae, target);
        return put_header(w, ae, err);
    }
    if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0) && w->o->overlay) {
        char wh[FB_PATH_MAX + 1];
        if (fb_whiteout_name(rel, name, false, wh, sizeof wh) < 0)
            return fb_error_set(err, FB_ERR_TOO_LARGE, ENAMETOOLONG, "path longer than %d bytes",
                                FB_PATH_MAX);
        return put_empty(w, wh, err);
    }
    if (!S_ISDIR(st.st_mode))
        return 0; /* fifos, sockets, devices: not part of a layer */
    if (depth >= DEPTH_MAX)
        return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "%s: more than %d directories deep", path, DEPTH_MAX);
    cleanup_close int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return fb_error_sys(err, "open %s", path);
    cleanup_entry struct archive_entry *ae = new_entry(w, path, &st, AE_IFDIR);
    if (ae == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "tar entry");
    add_xattrs(w, ae, fd);
    if (put_header(w, ae, err) < 0)
        return -1;
    if (w->o->overlay && is_opaque(fd)) {
        char wh[FB_PATH_MAX + 1];
        if (fb_whiteout_name(path, "", true, wh, sizeof wh) < 0)
            return fb_error_set(err, FB_ERR_TOO_LARGE, ENAMETOOLONG, "path longer than %d bytes",
                                FB_PATH_MAX);
        if (put_empty(w, wh, err) < 0)
            return -1;
    }
    return walk_dir(w, fd, path, depth + 1, err);
}

static int walk_dir(struct walk *w, int dfd, const char *rel, int depth, fb_error_t *err)
{
    char **names = NULL;
    size_t n = 0;
    if (list_dir(dfd, &names, &n, err) < 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = walk_entry(w, dfd, rel, names[i], depth, err);
    names_free(names, n);
    return rc;
}

int fb_layer_tar_write(int dir_fd, const struct fb_layer_opts *o, int out_fd, int64_t *size, char sha256[65],
                       fb_error_t *err)
{
    struct sink s = {.fd = out_fd, .max = o->max_bytes > 0 ? o->max_bytes : INT64_MAX};
    if (gnutls_hash_init(&s.h, GNUTLS_DIG_SHA256) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "sha256");
    cleanup_free char *buf = malloc(1 << 16);
    cleanup_free char *xbuf = malloc(XATTR_BUF);
    cleanup_free char *xval = malloc(XATTR_BUF);
    cleanup_json json_t *links = json_object();
    cleanup_archive_wr struct archive *a = archive_write_new();
    int rc = 0;
    if (buf == NULL || xbuf == NULL || xval == NULL || links == NULL || a == NULL)
        rc = fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "layer tar");
    /* names are bytes: written as they are, not converted through a locale */
    else if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
             archive_write_set_options(a, "hdrcharset=BINARY") < ARCHIVE_WARN ||
             archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
             archive_write_open2(a, &s, NULL, sink_write, NULL, NULL) != ARCHIVE_OK)
        rc = fb_error_set(err, FB_ERR_INTERNAL, 0, "start tar: %s", archive_error_string(a));
    if (rc == 0) {
        struct walk w = {.a = a, .o = o, .links = links, .buf = buf, .xbuf = xbuf, .xval = xval};
        rc = walk_dir(&w, dir_fd, "", 0, err);
    }
    if (rc == 0 && archive_write_close(a) != ARCHIVE_OK)
        rc = fb_error_set(err, s.too_large ? FB_ERR_TOO_LARGE : FB_ERR_INTERNAL, 0, "finish tar: %s",
                          archive_error_string(a));
    unsigned char d[32];
    gnutls_hash_deinit(s.h, d);
    if (rc < 0)
        return -1;
    hex_digest(d, sha256);
    *size = s.total;
    return 0;
}

/* ---- reading ---------------------------------------------------------- */

static struct archive *open_layer(int fd, fb_error_t *err)
{
    struct archive *a = archive_read_new();
    if (a == NULL) {
        fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "libarchive");
        return NULL;
    }
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    if (archive_read_open_fd(a, fd, 65536) != ARCHIVE_OK) {
        fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "layer is not a tar archive: %s", archive_error_string(a));
        archive_read_free(a);
        return NULL;
    }
    return a;
}

/* The member name without "./" prefixes and trailing slashes. */
static void clean_name(const char *in, char *out, size_t len)
{
    while (in[0] == '.' && in[1] == '/')
        in += 2;
    while (in[0] == '/' && in[1] == '\0')
        in++;
    fb_strlcpy(out, in, len);
    size_t n = strlen(out);
    while (n > 0 && out[n - 1] == '/')
        out[--n] = '\0';
    if (strcmp(out, ".") == 0)
        out[0] = '\0';
}

/* Refuses a member below a symlink an earlier member made: unpacking
 * would replace the link with a directory (or refuse), so the layer would
 * not come back as the tar says; links holds the symlinks' paths. */
static int through_symlink(json_t *links, const char *name, fb_error_t *err)
{
    if (json_object_size(links) == 0)
        return 0;
    char buf[FB_PATH_MAX + 2];
    fb_strlcpy(buf, name, sizeof buf);
    for (char *slash = strrchr(buf, '/'); slash != NULL; slash = strrchr(buf, '/')) {
        *slash = '\0';
        if (json_object_get(links, buf) != NULL)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "layer member \"%.96s\" is below the symlink %.96s", name, buf);
    }
    return 0;
}

/* Image layers made from a full root filesystem (podman import of a
 * debootstrap tree, say) carry /dev's nodes; a sandbox gets its own /dev,
 * so those are dropped rather than refused.  A node anywhere else is. */
static bool dev_node_skipped(struct archive_entry *ae, const char *name, bool skip_dev)
{
    mode_t t = archive_entry_filetype(ae);
    if (!skip_dev || (t != AE_IFCHR && t != AE_IFBLK))
        return false;
    if (strncmp(name, "./", 2) == 0)
        name += 2;
    return strncmp(name, "dev/", 4) == 0 && name[4] != '\0' && strchr(name + 4, '/') == NULL;
}

static int check_entry(struct archive_entry *ae, json_t *links, size_t *link_bytes, bool skip_dev,
                       fb_error_t *err)
{
    char name[FB_PATH_MAX + 2], target[FB_PATH_MAX + 2], full[FB_PATH_MAX + 1];
    const char *raw = archive_entry_pathname(ae);
    if (raw == NULL || strlen(raw) > FB_PATH_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "layer member without a name or with one too long");
    if (raw[0] == '/')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "layer member \"%.96s\": absolute name", raw);
    clean_name(raw, name, sizeof name);
    enum fb_tar_type type = fb_tar_type_of(ae);
    if (dev_node_skipped(ae, name, skip_dev))
        return 0;
    if (name[0] == '\0')
        return type == FB_TAR_DIR
                   ? 0
                   : fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "layer member \"%.96s\": not a directory", raw);
    if (archive_entry_uid(ae) < 0 || archive_entry_uid(ae) >= UID_RANGE || archive_entry_gid(ae) < 0 ||
        archive_entry_gid(ae) >= UID_RANGE)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "layer member \"%.96s\": owner outside 0..65535",
                            raw);
    int wh = fb_whiteout_parse(name, target, sizeof target, err);
    if (wh < 0 || through_symlink(links, name, err) < 0)
        return -1;
    if (type == FB_TAR_SYMLINK) {
        *link_bytes += strlen(name) + 64;
        if (*link_bytes > LINK_NAMES_MAX)
            return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "layer holds more than %d MiB of symlink names",
                                LINK_NAMES_MAX >> 20);
        json_object_set_new(links, name, json_true());
    }
    if (wh != FB_WH_NONE) {
        if (type != FB_TAR_FILE || archive_entry_size(ae) != 0)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                                "layer member \"%.96s\": a whiteout must be empty", raw);
        if (target[0] == '\0')
            return 0; /* the root is opaque: nothing below the layer shows */
        struct fb_tar_entry te = {.name = target, .type = wh == FB_WH_OPAQUE ? FB_TAR_DIR : FB_TAR_FILE};
        return fb_tar_entry_check("/", &te, full, sizeof full, err);
    }
    struct fb_tar_entry te = {
        .name = name,
        .type = type,
        .linkname = type == FB_TAR_HARDLINK ? archive_entry_hardlink(ae) : archive_entry_symlink(ae),
        .mode = archive_entry_perm(ae),
        .size = (long long)archive_entry_size(ae),
    };
    /* an absolute symlink target resolves inside the sandbox's own root;
     * only relative ones can climb, and those are checked */
    if (type == FB_TAR_SYMLINK && te.linkname != NULL && te.linkname[0] == '/') {
        if (strlen(te.linkname) >= FB_PATH_MAX)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "layer member \"%.96s\": symlink target too long",
                                raw);
        te.type = FB_TAR_FILE;
        te.linkname = NULL;
    }
    return fb_tar_entry_check("/", &te, full, sizeof full, err);
}

static int check_pass(int fd, bool skip_dev, fb_error_t *err)
{
    cleanup_archive_rd struct archive *a = open_layer(fd, err);
    cleanup_json json_t *links = json_object();
    if (a == NULL || links == NULL)
        return a == NULL ? -1 : fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "symlink set");
    long n = 0;
    size_t link_bytes = 0;
    for (;;) {
        struct archive_entry *ae;
        int r = archive_read_next_header(a, &ae);
        if (r == ARCHIVE_EOF)
            return 0;
        if (r < ARCHIVE_WARN)
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "corrupt layer tar: %s", archive_error_string(a));
        if (++n > FB_LAYER_ENTRIES_MAX)
            return fb_error_set(err, FB_ERR_TOO_LARGE, 0, "layer has more than %d entries",
                                FB_LAYER_ENTRIES_MAX);
        if (check_entry(ae, links, &link_bytes, skip_dev, err) < 0)
            return -1;
    }
}

/* Keeps only user.* xattrs of an entry (see add_xattrs). */
static void filter_xattrs(struct archive_entry *ae)
{
    int n = archive_entry_xattr_reset(ae);
    if (n <= 0)
        return;
    struct kept {
        char *name;
        void *val;
        size_t size;
    } *keep = calloc((size_t)n, sizeof *keep);
    int k = 0;
    const char *name;
    const void *val;
    size_t size;
    while (keep != NULL && archive_entry_xattr_next(ae, &name, &val, &size) == ARCHIVE_OK && k < n) {
        if (strncmp(name, "user.", 5) != 0)
            continue;
        keep[k].name = strdup(name);
        keep[k].val = malloc(size ? size : 1);
        if (keep[k].name == NULL || keep[k].val == NULL) {
            free(keep[k].name);
            free(keep[k].val);
            continue;
        }
        memcpy(keep[k].val, val, size);
        keep[k++].size = size;
    }
    archive_entry_xattr_clear(ae);
    for (int i = 0; i < k; i++) {
        archive_entry_xattr_add_entry(ae, keep[i].name, keep[i].val, keep[i].size);
        free(keep[i].name);
        free(keep[i].val);
    }
    free(keep);
}

/* One entry, in the child: a whiteout or opaque marker by hand, anything
 * else through libarchive.  0, or the kind of failure ('B' bad input, 'S'
 * out of space, 'I' other) with msg filled. */
static char extract_one(struct archive *in, struct archive *out, struct archive_entry *ae, uid_t base,
                        bool skip_dev, char *msg, size_t len)
{
    char name[FB_PATH_MAX + 2], target[FB_PATH_MAX + 2];
    clean_name(archive_entry_pathname(ae), name, sizeof name);
    if (name[0] == '\0' || dev_node_skipped(ae, name, skip_dev))
        return 0; /* the upper dir itself is made by the daemon */
    int wh = fb_whiteout_parse(name, target, sizeof target, NULL);
    if (wh == FB_WH_FILE || wh == FB_WH_OPAQUE) {
        const char *t = target[0] ? target : ".";
        int e = wh == FB_WH_FILE ? mknod(t, S_IFCHR, makedev(0, 0)) : lsetxattr(t, OPAQUE_XATTR, "y", 1, 0);
        if (e == 0 && wh == FB_WH_FILE)
            e = lchown(t, base, base);
        if (e == 0)
            return 0;
        snprintf(msg, len, "whiteout %.200s: %s", name, strerror(errno));
        return errno == ENOSPC ? 'S' : 'B';
    }
    archive_entry_set_pathname(ae, name);
    archive_entry_set_uid(ae, archive_entry_uid(ae) + base);
    archive_entry_set_gid(ae, archive_entry_gid(ae) + base);
    archive_entry_set_uname(ae, NULL);
    archive_entry_set_gname(ae, NULL);
    filter_xattrs(ae);
    if (archive_read_extract2(in, ae, out) >= ARCHIVE_WARN)
        return 0;
    snprintf(msg, len, "unpack %.200s: %s", name, archive_error_string(out));
    return archive_errno(out) == ENOSPC || archive_errno(in) == ENOSPC ? 'S' : 'B';
}

static char extract_all(struct archive *in, struct archive *out, uid_t base, bool skip_dev, char *msg,
                        size_t len)
{
    for (;;) {
        struct archive_entry *ae;
        int r = archive_read_next_header(in, &ae);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN) {
            snprintf(msg, len, "corrupt layer tar: %s", archive_error_string(in));
            return 'B';
        }
        char kind = extract_one(in, out, ae, base, skip_dev, msg, len);
        if (kind != 0)
            return kind;
    }
    if (archive_write_close(out) != ARCHIVE_OK) {
        snprintf(msg, len, "finish unpacking: %s", archive_error_string(out));
        return archive_errno(out) == ENOSPC ? 'S' : 'I';
    }
    return 0;
}

/* In the child, chrooted into the upper dir: reports "<kind><message>" on
 * report_fd when it fails. */
static int extract_child(int tar_fd, uid_t base, bool skip_dev, int report_fd)
{
    char msg[512] = "no memory";
    cleanup_error fb_error_t err = NULL;
    cleanup_archive_wr struct archive *out = archive_write_disk_new();
    cleanup_archive_rd struct archive *in = out ? open_layer(tar_fd, &err) : NULL;
    char kind = 'I';
    if (in != NULL) {
        archive_write_disk_set_options(
            out, ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                     ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                     ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS | ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_UNLINK);
        kind = extract_all(in, out, base, skip_dev, msg, sizeof msg);
    } else if (err != NULL) {
        snprintf(msg, sizeof msg, "%s", err->msg);
    }
    if (kind == 0)
        return 0;
    char line[520];
    int n = snprintf(line, sizeof line, "%c%s", kind, msg);
    (void)!write(report_fd, line, (size_t)n);
    return 1;
}

static int layer_extract(const char *tar_path, const char *dest, uid_t uid_base, bool skip_dev,
                         fb_error_t *err)
{
    cleanup_close int tar_fd = open(tar_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (tar_fd < 0)
        return fb_error_sys(err, "open %s", tar_path);
    if (check_pass(tar_fd, skip_dev, err) < 0)
        return -1;
    if (lseek(tar_fd, 0, SEEK_SET) < 0)
        return fb_error_sys(err, "rewind %s", tar_path);
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        return fb_error_sys(err, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        if (chroot(dest) < 0 || chdir("/") < 0)
            _exit(1);
        _exit(extract_child(tar_fd, uid_base, skip_dev, pipefd[1]));
    }
    close(pipefd[1]);
    char msg[600];
    ssize_t n = pid > 0 ? read(pipefd[0], msg, sizeof msg - 1) : -1;
    close(pipefd[0]);
    int status = 0;
    if (pid > 0)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (n > 1) {
        msg[n] = '\0';
        enum fb_error_kind k = msg[0] == 'B'   ? FB_ERR_BAD_REQUEST
                               : msg[0] == 'S' ? FB_ERR_TOO_LARGE
                                               : FB_ERR_INTERNAL;
        return fb_error_set(err, k, 0, "%s%s", msg + 1,
                            k == FB_ERR_TOO_LARGE ? " (the disk size is too small)" : "");
    }
    return fb_error_set(err, FB_ERR_INTERNAL, 0, "unpacking the layer failed");
}

int fb_layer_tar_extract(const char *tar_path, const char *dest, uid_t uid_base, fb_error_t *err)
{
    return layer_extract(tar_path, dest, uid_base, false, err);
}

int fb_layer_tar_extract_image(const char *tar_path, const char *dest, fb_error_t *err)
{
    return layer_extract(tar_path, dest, 0, true, err);
}

/* ---- outer tars (exports, image archives) ------------------------------ */

int fb_tar_open_fd(struct archive *a, int out_fd, fb_error_t *err)
{
    if (a == NULL || archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_set_options(a, "hdrcharset=BINARY") < ARCHIVE_WARN ||
        archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
        archive_write_open_fd(a, out_fd) != ARCHIVE_OK)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "start tar: %s",
                            a ? archive_error_string(a) : "no memory");
    return 0;
}

int fb_tar_put(struct archive *a, const char *name, int64_t mtime_s, int fd, int64_t size, const void *data,
               size_t len, fb_error_t *err)
{
    cleanup_entry struct archive_entry *ae = archive_entry_new();
    if (ae == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "tar entry");
    archive_entry_set_pathname(ae, name);
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_perm(ae, 0644);
    archive_entry_set_mtime(ae, (time_t)mtime_s, 0);
    archive_entry_set_size(ae, fd >= 0 ? size : (int64_t)len);
    if (archive_write_header(a, ae) < ARCHIVE_WARN)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "tar header %s: %s", name, archive_error_string(a));
    if (fd < 0)
        return len == 0 || archive_write_data(a, data, len) == (la_ssize_t)len
                   ? 0
                   : fb_error_set(err, FB_ERR_INTERNAL, 0, "write %s: %s", name, archive_error_string(a));
    if (lseek(fd, 0, SEEK_SET) < 0)
        return fb_error_sys(err, "rewind %s", name);
    cleanup_free char *buf = malloc(1 << 16);
    if (buf == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "buffer");
    int64_t left = size;
    while (left > 0) {
        ssize_t n = read(fd, buf, left < (1 << 16) ? (size_t)left : (1 << 16));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? fb_error_sys(err, "read %s", name)
                         : fb_error_set(err, FB_ERR_INTERNAL, 0, "%s shrank while being written", name);
        if (archive_write_data(a, buf, (size_t)n) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, 0, "write %s: %s", name, archive_error_string(a));
        left -= n;
    }
    return 0;
}
