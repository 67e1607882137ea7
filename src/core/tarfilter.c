#include "tarfilter.h"

#include <archive_entry.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "../common/cleanup.h"
#include "../common/util.h"
#include "path.h"

/* Member names are attacker-chosen bytes of any length; the message ends up
 * in a JSON error body and a log line, so show a short, printable version. */
#define SHOW_MAX 96

static const char *show(const char *name, char *buf, size_t len)
{
    size_t i = 0, j = 0;
    for (; name[i] != '\0' && j + 4 < len && i < SHOW_MAX; i++)
        buf[j++] = (name[i] >= 0x20 && name[i] < 0x7f && name[i] != '"') ? name[i] : '?';
    if (name[i] != '\0') {
        memcpy(buf + j, "...", 3);
        j += 3;
    }
    buf[j] = '\0';
    return buf;
}

__attribute__((format(printf, 3, 4))) static int refuse(fb_error_t *err, const char *name, const char *fmt,
                                                        ...)
{
    char shown[SHOW_MAX + 8];
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "archive member \"%s\": %s",
                        show(name, shown, sizeof shown), why);
}

/* Number of components of a normalised path below base ("" or "/" is 0). */
static long depth_below(const char *full, const char *base)
{
    size_t blen = strcmp(base, "/") == 0 ? 0 : strlen(base);
    long d = 0;
    for (const char *p = full + blen; *p != '\0'; p++)
        if (*p == '/')
            d++;
    return d;
}

/* A symlink target is resolved from the directory holding the link, so it
 * stays within base as long as its ".." never outnumber the components
 * between base and that directory.  Lexical only: extracting through a link
 * made by an earlier member is the extractor's to refuse. */
static bool symlink_target_inside(long dir_depth, const char *target)
{
    long d = dir_depth;
    const char *p = target;
    while (*p != '\0') {
        while (*p == '/')
            p++;
        const char *start = p;
        while (*p != '\0' && *p != '/')
            p++;
        size_t n = (size_t)(p - start);
        if (n == 0 || (n == 1 && start[0] == '.'))
            continue;
        if (n == 2 && start[0] == '.' && start[1] == '.') {
            if (--d < 0)
                return false;
        } else {
            d++;
        }
    }
    return true;
}

int fb_tar_entry_check(const char *base, const struct fb_tar_entry *e, char *out, size_t outlen,
                       fb_error_t *err)
{
    if (outlen > 0)
        out[0] = '\0';
    if (e == NULL || e->name == NULL || e->name[0] == '\0')
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "archive member without a name");
    const char *name = e->name;
    if (strlen(name) > FB_PATH_MAX)
        return refuse(err, name, "name longer than %d bytes", FB_PATH_MAX);

    switch (e->type) {
    case FB_TAR_FILE:
    case FB_TAR_DIR:
    case FB_TAR_SYMLINK:
    case FB_TAR_HARDLINK:
        break;
    case FB_TAR_OTHER:
        return refuse(err, name, "device nodes, fifos and sockets are not allowed");
    default:
        return refuse(err, name, "unknown entry type");
    }
    if (e->size < 0)
        return refuse(err, name, "negative size");

    char base_norm[FB_PATH_MAX + 1];
    if (fb_path_normalize(base, base_norm, sizeof base_norm, err) < 0)
        return fb_error_wrap(err, "archive target");

    char full[FB_PATH_MAX + 1];
    {
        cleanup_error fb_error_t jerr = NULL;
        if (fb_path_join_member(base_norm, name, full, sizeof full, &jerr) < 0)
            return refuse(err, name, "%s", jerr->msg);
    }
    /* "./" is how tar spells the directory itself; anything else landing on
     * base would replace the directory everything else is extracted into. */
    bool is_base = strcmp(full, base_norm) == 0;
    if (is_base && e->type != FB_TAR_DIR)
        return refuse(err, name, "only a directory may name the target directory itself");

    if (e->type == FB_TAR_SYMLINK) {
        const char *t = e->linkname;
        if (t == NULL || t[0] == '\0')
            return refuse(err, name, "symlink without a target");
        if (strlen(t) >= FB_PATH_MAX)
            return refuse(err, name, "symlink target longer than %d bytes", FB_PATH_MAX - 1);
        if (t[0] == '/')
            return refuse(err, name, "absolute symlink targets are not allowed");
        if (!symlink_target_inside(depth_below(full, base_norm) - 1, t))
            return refuse(err, name, "symlink target points outside the target directory");
    } else if (e->type == FB_TAR_HARDLINK) {
        const char *src = e->linkname;
        if (src == NULL || src[0] == '\0')
            return refuse(err, name, "hardlink without a source");
        char src_full[FB_PATH_MAX + 1];
        cleanup_error fb_error_t jerr = NULL;
        if (fb_path_join_member(base_norm, src, src_full, sizeof src_full, &jerr) < 0)
            return refuse(err, name, "hardlink source: %s", jerr->msg);
        if (strcmp(src_full, base_norm) == 0)
            return refuse(err, name, "hardlink to the target directory itself");
    }

    if (fb_strlcpy(out, full, outlen) < 0)
        return refuse(err, name, "path too long");
    return 0;
}

enum fb_tar_type fb_tar_type_of(struct archive_entry *ae)
{
    if (archive_entry_hardlink(ae) != NULL)
        return FB_TAR_HARDLINK;
    switch (archive_entry_filetype(ae)) {
    case AE_IFREG:
        return FB_TAR_FILE;
    case AE_IFDIR:
        return FB_TAR_DIR;
    case AE_IFLNK:
        return FB_TAR_SYMLINK;
    default:
        return FB_TAR_OTHER;
    }
}
