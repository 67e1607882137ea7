#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"

int64_t fb_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t fb_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t fb_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void fb_time_format(int64_t ms, char *buf, size_t len)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

int fb_random_hex(char *buf, size_t nbytes)
{
    unsigned char raw[64];
    if (nbytes > sizeof raw)
        return -EINVAL;
    size_t got = 0;
    while (got < nbytes) {
        ssize_t n = getrandom(raw + got, nbytes - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < nbytes; i++) {
        buf[2 * i] = hex[raw[i] >> 4];
        buf[2 * i + 1] = hex[raw[i] & 15];
    }
    buf[2 * nbytes] = '\0';
    return 0;
}

int fb_strlcpy(char *dst, const char *src, size_t dstlen)
{
    size_t n = strlen(src);
    if (dstlen == 0)
        return -ENAMETOOLONG;
    if (n >= dstlen) {
        dst[0] = '\0';
        return -ENAMETOOLONG;
    }
    memcpy(dst, src, n + 1);
    return 0;
}

int fb_snprintf(char *dst, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(dst, len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len) {
        if (len > 0)
            dst[0] = '\0';
        return -ENAMETOOLONG;
    }
    return 0;
}

int fb_mkdir_p(const char *path, mode_t mode)
{
    char buf[4096];
    if (fb_strlcpy(buf, path, sizeof buf) < 0)
        return -ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

int fb_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int fb_write_file(const char *path, const void *data, size_t len, mode_t mode)
{
    cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0)
        return -errno;
    return fb_write_all(fd, data, len);
}

int fb_read_file(const char *path, size_t max, char **out, size_t *outlen)
{
    cleanup_close int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t cap = 4096, len = 0;
    cleanup_free char *buf = malloc(cap + 1);
    if (buf == NULL)
        return -ENOMEM;
    for (;;) {
        if (len == cap) {
            if (cap > max)
                return -EFBIG;
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (nb == NULL)
                return -ENOMEM;
            buf = nb;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > max)
            return -EFBIG;
    }
    buf[len] = '\0';
    if (outlen != NULL)
        *outlen = len;
    *out = fb_steal_ptr(buf);
    return 0;
}

static int rm_one(const char *fpath, const struct stat *sb, int typeflag, struct FTW *ftwbuf)
{
    (void)sb;
    (void)ftwbuf;
    int r = (typeflag == FTW_DP) ? rmdir(fpath) : unlink(fpath);
    if (r < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

int fb_rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    return nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

static _Thread_local int64_t du_total;
static int du_one(const char *fpath, const struct stat *sb, int typeflag, struct FTW *ftwbuf)
{
    (void)fpath;
    (void)typeflag;
    (void)ftwbuf;
    du_total += (int64_t)sb->st_blocks * 512;
    return 0;
}

int64_t fb_du(const char *path)
{
    /* nftw has no user pointer: the running total is per thread */
    du_total = 0;
    if (nftw(path, du_one, 32, FTW_PHYS | FTW_MOUNT) < 0)
        return -1;
    return du_total;
}

void fb_rm_prefixed(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *de;
    size_t n = strlen(prefix);
    while ((de = readdir(d)) != NULL) {
        char path[4096];
        if (strncmp(de->d_name, prefix, n) == 0 && strcmp(de->d_name, ".") != 0 &&
            strcmp(de->d_name, "..") != 0 && fb_snprintf(path, sizeof path, "%s/%s", dir, de->d_name) == 0)
            fb_rm_rf(path);
    }
    closedir(d);
}
