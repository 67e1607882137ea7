/* Dumping and restoring a sandbox's process tree with CRIU: see memstate.h. */
#include "memstate.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <net/if.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/json_util.h"
#include "../common/wire.h"
#include "../common/log.h"
#include "../common/util.h"
#include "cgroup.h"
#include "container_priv.h"
#include "criu.h"

#define OUTPUT_CAP 8192
#define LISTEN_BACKLOG 64

/* ---- what a restore may touch ---- */

/* "procs/<digits>/<leaf>" with leaf one of the listed names */
static bool record_path(const char *p, const char *const *leaves, size_t n)
{
    if (strncmp(p, "procs/", 6) != 0)
        return false;
    p += 6;
    size_t d = strspn(p, "0123456789");
    if (d == 0 || d > 10 || p[d] != '/')
        return false;
    p += d + 1;
    for (size_t i = 0; i < n; i++)
        if (strcmp(p, leaves[i]) == 0)
            return true;
    return false;
}

bool fb_memstate_rel_valid(enum fb_memstate_ext_kind kind, const char *rel)
{
    static const char *const files[] = {"out", "idx", "status"};
    static const char *const socks[] = {"ctl.sock"};
    if (strnlen(rel, FB_MEMSTATE_REL_MAX) >= FB_MEMSTATE_REL_MAX)
        return false;
    if (kind == FB_EXT_LISTEN)
        return strcmp(rel, "run/init.sock") == 0 ||
               (strncmp(rel, "layer/", 6) == 0 && record_path(rel + 6, socks, 1));
    if (kind == FB_EXT_FILE)
        return strncmp(rel, "layer/", 6) == 0 && record_path(rel + 6, files, 3);
    return false;
}

/* ---- dump ---- */

struct unix_name {
    uint64_t ino;
    char path[108];
};

/* Bound, listening unix sockets of the network namespace pid is in. */
static int read_unix_table(pid_t pid, struct unix_name **out, size_t *n, fb_error_t *err)
{
    *out = NULL;
    *n = 0;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/net/unix", (int)pid);
    cleanup_fclose FILE *f = fopen(path, "re");
    if (f == NULL)
        return fb_error_sys(err, "open %s", path);
    char line[512];
    size_t cap = 0;
    cleanup_free struct unix_name *v = NULL;
    if (fgets(line, sizeof line, f) == NULL) /* header */
        return 0;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long flags = 0;
        unsigned long long ino = 0;
        char name[256] = "";
        /* Num RefCount Protocol Flags Type St Inode Path */
        if (sscanf(line, "%*s %*s %*s %lx %*s %*s %llu %255s", &flags, &ino, name) != 3)
            continue;
        if (!(flags & 0x10000) || name[0] != '/') /* __SO_ACCEPTCON: listening */
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            struct unix_name *nv = realloc(v, cap * sizeof *nv);
            if (nv == NULL)
                return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
            v = nv;
        }
        v[*n].ino = ino;
        fb_strlcpy(v[*n].path, name, sizeof v[*n].path);
        (*n)++;
    }
    *out = fb_steal_ptr(v);
    return 0;
}

/* fdinfo fields of one fd */
static int read_fdinfo(pid_t pid, int fd, int *mnt_id, int *flags, int64_t *pos)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fdinfo/%d", (int)pid, fd);
    cleanup_fclose FILE *f = fopen(path, "re");
    if (f == NULL)
        return -errno;
    char line[256];
    int got = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        long long v;
        unsigned int fl;
        if (sscanf(line, "pos: %lld", &v) == 1) {
            *pos = v;
            got |= 1;
        } else if (sscanf(line, "flags: %o", &fl) == 1) {
            *flags = (int)fl;
            got |= 2;
        } else if (sscanf(line, "mnt_id: %lld", &v) == 1) {
            *mnt_id = (int)v;
            got |= 4;
        }
    }
    return got == 7 ? 0 : -EINVAL;
}

static bool has_prefix(const char *s, const char *prefix, const char **rest)
{
    size_t n = strlen(prefix);
    if (strncmp(s, prefix, n) != 0 || s[n] != '/')
        return false;
    *rest = s + n + 1;
    return true;
}

static int ext_add(struct fb_memstate_ext *ext, size_t *n, const struct fb_memstate_ext *e, fb_error_t *err)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(ext[i].key, e->key) == 0)
            return 0;
    if (*n >= FB_MEMSTATE_EXT_MAX)
        return fb_error_set(err, FB_ERR_UNSUPPORTED, E2BIG,
                            "the sandbox holds more than %d host resources (background processes)",
                            FB_MEMSTATE_EXT_MAX / 5);
    if (!fb_memstate_rel_valid(e->kind, e->rel))
        return fb_error_set(err, FB_ERR_UNSUPPORTED, EINVAL,
                            "a sandbox process holds %s, which cannot be "
                            "checkpointed",
                            e->rel);
    ext[(*n)++] = *e;
    return 0;
}

/* The name a listening socket of pid goes by, relative to the sandbox:
 * init's under the run dir; a keeper's in its record dir, whether bound
 * there by path or (as the daemon does, for short paths) through
 * /proc/self/fd/N/ctl.sock; ".next" is what a restore bound it as. */
static int listen_rel(const struct fb_container_config *c, const char *layer, const char *name,
                      const char *record_dir, char *rel, size_t len)
{
    char n[sizeof((struct unix_name *)0)->path];
    fb_strlcpy(n, name, sizeof n);
    size_t l = strlen(n);
    if (l > 5 && strcmp(n + l - 5, ".next") == 0)
        n[l - 5] = '\0';
    const char *rest;
    if (has_prefix(n, c->run_dir, &rest))
        return fb_snprintf(rel, len, "run/%s", rest);
    if (has_prefix(n, layer, &rest))
        return fb_snprintf(rel, len, "layer/%s", rest);
    if (strncmp(n, "/proc/self/fd/", 14) == 0 && record_dir[0] != '\0') {
        const char *leaf = strrchr(n, '/');
        return fb_snprintf(rel, len, "%s%s", record_dir, leaf);
    }
    return -1;
}

/* Classifies the fds of pid: host files of the layer and listening sockets
 * bound at host paths become externals. */
static int scan_fds(const struct fb_container_config *c, pid_t pid, const struct unix_name *names,
                    size_t n_names, struct fb_memstate_ext *ext, size_t *n, fb_error_t *err)
{
    char path[64], layer[PATH_MAX], record_dir[FB_MEMSTATE_REL_MAX] = "";
    if (fb_snprintf(layer, sizeof layer, "%s/layer", c->sandbox_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "layer path");
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    /* files first: a keeper's record dir names its control socket */
    for (int pass = 0; pass < 2; pass++) {
        cleanup_dir DIR *d = opendir(path);
        if (d == NULL)
            return errno == ENOENT ? 0 : fb_error_sys(err, "open %s", path);
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            int fd = atoi(e->d_name);
            char link[PATH_MAX + 1];
            ssize_t len = readlinkat(dirfd(d), e->d_name, link, sizeof link - 1);
            if (len < 0)
                continue;
            link[len] = '\0';
            struct fb_memstate_ext x = {0};
            const char *rest;
            unsigned long long ino;
            if (sscanf(link, "socket:[%llu]", &ino) == 1) {
                if (pass == 0)
                    continue;
                for (size_t i = 0; i < n_names; i++) {
                    if (names[i].ino != ino)
                        continue;
                    x.kind = FB_EXT_LISTEN;
                    snprintf(x.key, sizeof x.key, "socket:[%llu]", ino);
                    if (listen_rel(c, layer, names[i].path, record_dir, x.rel, sizeof x.rel) < 0)
                        break; /* bound inside the sandbox: CRIU's own business */
                    if (ext_add(ext, n, &x, err) < 0)
                        return -1;
                    break;
                }
                continue;
            }
            if (pass == 1 || !has_prefix(link, layer, &rest))
                continue;
            int mnt_id = 0, flags = 0;
            int64_t pos = 0;
            struct stat st;
            char fdpath[96];
            snprintf(fdpath, sizeof fdpath, "/proc/%d/fd/%d", (int)pid, fd);
            if (read_fdinfo(pid, fd, &mnt_id, &flags, &pos) < 0 || stat(fdpath, &st) < 0)
                continue; /* closed meanwhile */
            x.kind = FB_EXT_FILE;
            snprintf(x.key, sizeof x.key, "file[%x:%" PRIx64 "]", (unsigned)mnt_id, (uint64_t)st.st_ino);
            snprintf(x.rel, sizeof x.rel, "layer/%s", rest);
            x.flags = flags & (O_ACCMODE | O_APPEND);
            x.pos = pos;
            if (ext_add(ext, n, &x, err) < 0)
                return -1;
            const char *slash = strrchr(x.rel, '/');
            if (slash != NULL && (size_t)(slash - x.rel) < sizeof record_dir)
                snprintf(record_dir, sizeof record_dir, "%.*s", (int)(slash - x.rel), x.rel);
        }
    }
    return 0;
}

/* The host device nodes a sandbox's /dev binds in (and /proc's masks,
 * binds of /dev/null): the only mounts from outside the sandbox.  A dump
 * names each by a fixed key and a restore binds exactly these host paths
 * for those keys, so no image, however made, can have a restore bind any
 * other host path into a sandbox. */
static const char *const host_devs[] = {"null", "zero", "full", "random", "urandom", "tty"};
#define N_HOST_DEVS (sizeof host_devs / sizeof host_devs[0])
#define DEV_KEY_PREFIX "forkbox-dev-"

/* Appends "--external", "type[...]" pairs etc.: the strings live in store. */
struct argbuf {
    const char *argv[FB_CRIU_MAX_ARGS];
    size_t n;
    char store[FB_CRIU_MAX_ARGS][80];
    size_t used;
};

static int arg(struct argbuf *a, const char *s)
{
    if (a->n >= FB_CRIU_MAX_ARGS - 1)
        return -1;
    a->argv[a->n++] = s;
    a->argv[a->n] = NULL;
    return 0;
}

static int argf(struct argbuf *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int argf(struct argbuf *a, const char *fmt, ...)
{
    if (a->used >= FB_CRIU_MAX_ARGS)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(a->store[a->used], sizeof a->store[0], fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= sizeof a->store[0])
        return -1;
    return arg(a, a->store[a->used++]);
}

/* -v4 with FORKBOX_CRIU_DEBUG=1 in the daemon's environment: CRIU's logs
 * then time every step (for profiling); -v2 logs errors and warnings. */
static const char *log_level(void)
{
    const char *d = getenv("FORKBOX_CRIU_DEBUG");
    return d != NULL && strcmp(d, "1") == 0 ? "-v4" : "-v2";
}

/* --external mnt[MOUNTPOINT]:KEY for each bind of a host device node in
 * the sandbox's mount namespace (the fs root of such a mount is /NAME). */
static int dev_externals(pid_t init_pid, struct argbuf *a, fb_error_t *err)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/mountinfo", (int)init_pid);
    cleanup_fclose FILE *f = fopen(path, "re");
    if (f == NULL)
        return fb_error_sys(err, "open %s", path);
    char line[4096];
    while (fgets(line, sizeof line, f) != NULL) {
        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT ... - FSTYPE SOURCE OPTS */
        char root[256], mnt[1024];
        if (sscanf(line, "%*s %*s %*s %255s %1023s", root, mnt) != 2)
            continue;
        const char *sep = strstr(line, " - ");
        char fstype[64] = "";
        if (sep == NULL || sscanf(sep + 3, "%63s", fstype) != 1 || strcmp(fstype, "devtmpfs") != 0)
            continue;
        size_t i = 0;
        while (i < N_HOST_DEVS && !(root[0] == '/' && strcmp(root + 1, host_devs[i]) == 0))
            i++;
        if (i == N_HOST_DEVS)
            return fb_error_set(err, FB_ERR_UNSUPPORTED, 0,
                                "the sandbox has a host device mount the checkpoint cannot name (%s at %s)",
                                root, mnt);
        if (strchr(mnt, '\\') != NULL) /* mountinfo escapes odd characters: not ours */
            return fb_error_set(err, FB_ERR_UNSUPPORTED, 0, "unexpected mount point %s", mnt);
        if (arg(a, "--external") | argf(a, "mnt[%s]:" DEV_KEY_PREFIX "%s", mnt, host_devs[i]))
            return fb_error_set(err, FB_ERR_INTERNAL, E2BIG, "criu arguments");
    }
    return 0;
}

/* Runs criu; a failure carries the first error lines of log. */
static int run(const char *criu, struct argbuf *a, const struct fb_criu_cmd *cmd, int timeout_ms,
               const atomic_bool *cancel, const char *what, const char *log, fb_error_t *err)
{
    cleanup_free char *output = NULL;
    int st = 0;
    if (fb_criu_run_cmd(criu, a->argv, cmd, timeout_ms, OUTPUT_CAP, cancel, &output, &st, err) < 0)
        return fb_error_wrap(err, "criu %s", what);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    char lines[600];
    fb_criu_log_summary(log, output, lines, sizeof lines);
    return fb_error_set(err, FB_ERR_INTERNAL, 0, "criu %s failed: %s", what, lines[0] ? lines : "(no log)");
}

int fb_memstate_dump(const struct fb_memstate_dump *d, struct fb_memstate_ext *ext, size_t *n,
                     fb_error_t *err)
{
    *n = 0;
    const struct fb_container_config *c = d->c;
    cleanup_free pid_t *pids = NULL;
    size_t npids = 0;
    cleanup_free struct unix_name *names = NULL;
    size_t nnames = 0;
    if (fb_cgroup_procs_read(c->cgroups, c->id, &pids, &npids, err) < 0 ||
        read_unix_table(d->init_pid, &names, &nnames, err) < 0)
        return -1;
    for (size_t i = 0; i < npids; i++)
        if (scan_fds(c, pids[i], names, nnames, ext, n, err) < 0)
            return -1;

    char freezer[PATH_MAX], log[PATH_MAX];
    if (fb_cgroup_freezer_dir(c->cgroups, c->id, freezer, err) < 0)
        return -1;
    if (fb_snprintf(log, sizeof log, "%s/dump.log", d->images) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "images path");
    struct argbuf *a = calloc(1, sizeof *a);
    if (a == NULL)
        return fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    cleanup_free struct argbuf *a_owner = a;
    int bad = arg(a, "dump") | arg(a, "-t") | argf(a, "%d", (int)d->init_pid) | arg(a, "-D") |
              arg(a, d->images) | arg(a, "-o") | arg(a, "dump.log") | arg(a, log_level()) |
              arg(a, "--file-locks") | arg(a, "--network-lock") | arg(a, "skip") | arg(a, "--empty-ns") |
              arg(a, "net") | arg(a, "--freeze-cgroup") | arg(a, freezer);
    if (d->leave_running)
        bad |= arg(a, "--leave-running");
    if (bad == 0 && dev_externals(d->init_pid, a, err) < 0)
        return -1;
    for (size_t i = 0; i < *n; i++)
        if (ext[i].kind == FB_EXT_FILE)
            bad |= arg(a, "--external") | arg(a, ext[i].key);
    if (bad)
        return fb_error_set(err, FB_ERR_INTERNAL, E2BIG, "criu arguments");
    return run(d->criu, a, NULL, d->timeout_ms, d->cancel, "dump", log, err);
}

/* ---- restore ---- */

struct holder {
    pid_t pid;
    int release_wr; /* closing it lets the holder exit */
};

/* A process in a user namespace with the sandbox's id mapping: the
 * template's idmapped mount is keyed on it.  It waits until released. */
static int holder_main(int release_rd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    char go;
    while (read(release_rd, &go, 1) > 0)
        ;
    _exit(0);
}

static void holder_end(struct holder *h)
{
    if (h->release_wr >= 0)
        close(h->release_wr);
    h->release_wr = -1;
    if (h->pid > 0) {
        kill(h->pid, SIGKILL);
        while (waitpid(h->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    h->pid = 0;
}

static int holder_start(const struct fb_container_config *c, struct holder *h, fb_error_t *err)
{
    h->pid = 0;
    h->release_wr = -1;
    int release[2];
    if (pipe2(release, O_CLOEXEC) < 0)
        return fb_error_sys(err, "pipe");
    pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);
    if (pid == 0)
        _exit(holder_main(release[0]));
    int e = errno;
    close(release[0]);
    h->release_wr = release[1];
    if (pid < 0) {
        holder_end(h);
        return fb_error_set(err, FB_ERR_INTERNAL, e, "clone a user namespace for the restore");
    }
    h->pid = pid;
    if (fb_container_write_maps(pid, c->uid_base, err) < 0) {
        holder_end(h);
        return -1;
    }
    return 0;
}

struct ns_job {
    int ns_fd; /* -1: stay in the daemon's namespace */
    int nstype;
    const char *path;     /* CLONE_NEWNET: where to bind */
    const char *hostname; /* CLONE_NEWUTS: what to set */
    int fd, errnum;
};

/* On a thread of its own, so that setns() changes no other thread of the
 * daemon: a listening socket made in the sandbox's network namespace (a
 * socket stays in the namespace it was made in), or a hostname set. */
static void *ns_thread(void *arg)
{
    struct ns_job *j = arg;
    if (j->ns_fd >= 0 && setns(j->ns_fd, j->nstype) < 0) {
        j->errnum = errno;
        return NULL;
    }
    if (j->nstype == CLONE_NEWUTS) {
        if (sethostname(j->hostname, strlen(j->hostname)) < 0)
            j->errnum = errno;
        return NULL;
    }
    if (j->path == NULL) { /* the loopback of a new, empty namespace comes up */
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct ifreq ifr;
        memset(&ifr, 0, sizeof ifr);
        memcpy(ifr.ifr_name, "lo", 3);
        if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
            j->errnum = errno;
        ifr.ifr_flags |= IFF_UP;
        if (j->errnum == 0 && ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
            j->errnum = errno;
        if (s >= 0)
            close(s);
        return NULL;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (fb_strlcpy(sa.sun_path, j->path, sizeof sa.sun_path) < 0) {
        j->errnum = ENAMETOOLONG;
        return NULL;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
        j->errnum = errno;
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    j->fd = fd;
    return NULL;
}

static int ns_run(struct ns_job *job, fb_error_t *err)
{
    pthread_t t;
    if (pthread_create(&t, NULL, ns_thread, job) != 0)
        return fb_error_set(err, FB_ERR_UNAVAILABLE, EAGAIN, "start a thread");
    pthread_join(t, NULL);
    return 0;
}

int fb_memstate_listen_in(int netns_fd, const char *path, fb_error_t *err)
{
    struct ns_job job = {.ns_fd = netns_fd, .nstype = CLONE_NEWNET, .path = path, .fd = -1};
    if (ns_run(&job, err) < 0)
        return -1;
    if (job.fd < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, job.errnum, "listen on %s", path);
    return job.fd;
}

/* Host path of a validated external's rel. */
static int ext_path(const struct fb_container_config *c, const struct fb_memstate_ext *x, char *out,
                    size_t len)
{
    return strncmp(x->rel, "run/", 4) == 0 ? fb_snprintf(out, len, "%s/%s", c->run_dir, x->rel + 4)
                                           : fb_snprintf(out, len, "%s/%s", c->sandbox_dir, x->rel);
}

/* Opens (FB_EXT_FILE) or binds (FB_EXT_LISTEN, in the daemon's network
 * namespace: the sandbox's does not exist yet) one external for the new
 * sandbox; returns the fd. */
static int ext_open(const struct fb_container_config *c, const struct fb_memstate_ext *x, fb_error_t *err)
{
    if (!fb_memstate_rel_valid(x->kind, x->rel))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, EINVAL, "checkpoint names an invalid resource %s",
                            x->rel);
    if (x->kind == FB_EXT_LISTEN) {
        char path[PATH_MAX];
        if (ext_path(c, x, path, sizeof path) < 0)
            return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "socket path");
        /* the layer copy holds the old socket's inode: bind needs the name free */
        struct stat st;
        if (lstat(path, &st) == 0) {
            if (!S_ISSOCK(st.st_mode))
                return fb_error_set(err, FB_ERR_CONFLICT, EEXIST, "%s is not a socket", path);
            unlink(path);
        }
        return fb_memstate_listen_in(-1, path, err);
    }
    cleanup_close int dir = open(c->sandbox_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0)
        return fb_error_sys(err, "open %s", c->sandbox_dir);
    /* the layer is a mount of its own below the sandbox dir: crossing into
     * it is allowed, symlinks are not */
    struct open_how how = {
        .flags = (uint64_t)((x->flags & (O_ACCMODE | O_APPEND)) | O_CLOEXEC),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    cleanup_close int fd = (int)syscall(SYS_openat2, dir, x->rel, &how, sizeof how);
    if (fd < 0)
        return fb_error_sys(err, "open %s of the restored layer", x->rel);
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return fb_error_set(err, FB_ERR_CONFLICT, EINVAL, "%s is not a regular file", x->rel);
    if (lseek(fd, x->pos, SEEK_SET) < 0)
        return fb_error_sys(err, "seek %s", x->rel);
    /* the restored keeper reopens it as the sandbox's root */
    if (fchown(fd, c->uid_base, c->uid_base) < 0)
        return fb_error_sys(err, "hand %s to the sandbox", x->rel);
    return fb_steal_fd(&fd);
}

/* ---- the user namespace image ----
 * CRIU makes the restored tasks' user namespace from userns-N.img, which
 * holds the id mapping of the sandbox that was dumped.  A restore as
 * another sandbox (a fork, a new sandbox from a checkpoint) needs that
 * sandbox's own uid range: the image is written anew.  Its message is
 * UsernsEntry { repeated UidGidExtent uid_map = 1, gid_map = 2 }, each
 * extent { uint32 first = 1, lower_first = 2, count = 3 } (CRIU's
 * images/userns.proto). */

static size_t put_varint(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    do {
        unsigned char b = v & 0x7f;
        v >>= 7;
        p[n++] = b | (v ? 0x80 : 0);
    } while (v);
    return n;
}

static size_t put_extent(unsigned char *p, unsigned field, uint32_t base)
{
    unsigned char body[32];
    size_t n = 0;
    body[n++] = 0x08;
    n += put_varint(body + n, 0);
    body[n++] = 0x10;
    n += put_varint(body + n, base);
    body[n++] = 0x18;
    n += put_varint(body + n, FB_UID_COUNT);
    size_t m = 0;
    p[m++] = (unsigned char)(field << 3 | 2);
    m += put_varint(p + m, n);
    memcpy(p + m, body, n);
    return m + n;
}

/* Rewrites the images' userns image (a fresh file: the original may be a
 * hard link shared with other restores) with the mapping 0 -> base. */
static int userns_image_rewrite(int dfd, const char *name, uid_t base, fb_error_t *err)
{
    unsigned char head[8];
    {
        cleanup_close int in = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0 || read(in, head, sizeof head) != (ssize_t)sizeof head)
            return fb_error_set(err, FB_ERR_INTERNAL, errno, "read %s", name);
    }
    unsigned char msg[128], out[160];
    size_t n = put_extent(msg, 1, base);
    n += put_extent(msg + n, 2, base);
    uint32_t len = (uint32_t)n;
    memcpy(out, head, 8);
    memcpy(out + 8, &len, 4); /* CRIU images: host-endian u32 length */
    memcpy(out + 12, msg, n);
    if (unlinkat(dfd, name, 0) < 0)
        return fb_error_sys(err, "replace %s", name);
    cleanup_close int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || fb_write_all(fd, out, 12 + n) < 0 || fchmod(fd, 0644) < 0)
        return fb_error_sys(err, "write %s", name);
    return 0;
}

/* A private view of the images for one restore: hard links to every image
 * (cheap, shared by concurrent restores) in a sibling dir, with the user
 * namespace image written for this sandbox's range. */
static int images_view(const char *images, const char *id, uid_t base, char *out, size_t len, fb_error_t *err)
{
    if (fb_snprintf(out, len, "%s.%s", images, id) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "images path");
    fb_rm_rf(out);
    if (mkdir(out, 0711) < 0 || chmod(out, 0711) < 0)
        return fb_error_set(err, errno == ENOSPC ? FB_ERR_TOO_LARGE : FB_ERR_INTERNAL, errno, "create %s",
                            out);
    cleanup_close int src = open(images, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    cleanup_close int dst = open(out, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (src < 0 || dst < 0)
        return fb_error_sys(err, "open images");
    cleanup_dir DIR *d = fdopendir(dup(src));
    if (d == NULL)
        return fb_error_sys(err, "list %s", images);
    bool userns = false;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || e->d_type != DT_REG)
            continue; /* images are regular files; anything else is not ours to pass on */
        if (linkat(src, e->d_name, dst, e->d_name, 0) < 0)
            return fb_error_sys(err, "link image %s", e->d_name);
        /* the restored tasks read some images themselves, as the sandbox's
         * root, which the host's root-owned files do not admit; the dirs
         * above stay root's alone */
        if (fchmodat(dst, e->d_name, 0644, 0) < 0)
            return fb_error_sys(err, "open image %s to the restore", e->d_name);
        if (strncmp(e->d_name, "userns-", 7) == 0) {
            if (userns_image_rewrite(dst, e->d_name, base, err) < 0)
                return -1;
            userns = true;
        }
    }
    if (!userns)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "the images hold no user namespace: not a sandbox's");
    return 0;
}

struct cg_join {
    const struct fb_container_config *c;
};

/* criu (and so every task it restores) starts inside the sandbox's cgroups */
static int join_cgroups(pid_t pid, void *arg, fb_error_t *err)
{
    const struct cg_join *j = arg;
    return fb_cgroup_add_pid(j->c->cgroups, j->c->id, pid, err);
}

static pid_t read_pidfile(const char *path)
{
    cleanup_free char *text = NULL;
    size_t len = 0;
    if (fb_read_file(path, 64, &text, &len) < 0)
        return -1;
    long v = strtol(text, NULL, 10);
    return v > 0 ? (pid_t)v : -1;
}

static int restore_run(const struct fb_memstate_restore *r, const char *images, pid_t *init_pid,
                       fb_error_t *err)
{
    const struct fb_container_config *c = r->c;
    char rootfs[PATH_MAX], pidfile[PATH_MAX], log[PATH_MAX];
    if (fb_snprintf(rootfs, sizeof rootfs, "%s/rootfs", c->sandbox_dir) < 0 ||
        fb_snprintf(pidfile, sizeof pidfile, "%s/restore.pid", images) < 0 ||
        fb_snprintf(log, sizeof log, "%s/restore.log", images) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "restore paths");
    int fds[FB_MEMSTATE_EXT_MAX];
    size_t nfds = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < r->n_ext; i++) {
        int fd = ext_open(c, &r->ext[i], err);
        if (fd < 0)
            rc = -1;
        else
            fds[nfds++] = fd;
    }
    struct argbuf *a = rc == 0 ? calloc(1, sizeof *a) : NULL;
    if (rc == 0 && a == NULL)
        rc = fb_error_set(err, FB_ERR_INTERNAL, ENOMEM, "out of memory");
    if (rc == 0) {
        int bad = arg(a, "restore") | arg(a, "-D") | arg(a, images) | arg(a, "-o") | arg(a, "restore.log") |
                  arg(a, log_level()) | arg(a, "--empty-ns") | arg(a, "net") | arg(a, "-d") |
                  arg(a, "--pidfile") | arg(a, pidfile) | arg(a, "--root") | arg(a, rootfs) |
                  arg(a, "--file-locks") | arg(a, "--manage-cgroups=ignore");
        for (size_t i = 0; i < N_HOST_DEVS; i++)
            bad |= arg(a, "--external") |
                   argf(a, "mnt[" DEV_KEY_PREFIX "%s]:/dev/%s", host_devs[i], host_devs[i]);
        for (size_t i = 0; i < r->n_ext; i++)
            bad |= arg(a, "--inherit-fd") | argf(a, "fd[%d]:%s", FB_CRIU_FD_BASE + (int)i, r->ext[i].key);
        if (bad)
            rc = fb_error_set(err, FB_ERR_INTERNAL, E2BIG, "criu arguments");
    }
    if (rc == 0) {
        struct cg_join j = {c};
        struct fb_criu_cmd cmd = {.fds = fds, .nfds = nfds, .before_exec = join_cgroups, .arg = &j};
        rc = run(r->criu, a, &cmd, r->timeout_ms, r->cancel, "restore", log, err);
    }
    free(a);
    for (size_t i = 0; i < nfds; i++)
        close(fds[i]);
    if (rc == 0) {
        *init_pid = read_pidfile(pidfile);
        if (*init_pid <= 0)
            rc = fb_error_set(err, FB_ERR_INTERNAL, 0, "criu restore wrote no pid");
    }
    return rc;
}

/* The restored tasks got sockets made outside their network namespace (it
 * did not exist yet); each listener is replaced by one made inside it, so
 * that the next dump finds it: bound beside the old name, handed to its
 * owner (init, or a keeper) over the old one, then renamed over it. */
static int relisten(const struct fb_container_config *c, pid_t init_pid, const struct fb_memstate_ext *x,
                    fb_error_t *err)
{
    char path[PATH_MAX], next[PATH_MAX + 8], nspath[64];
    if (ext_path(c, x, path, sizeof path) < 0 || fb_snprintf(next, sizeof next, "%s.next", path) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "socket path");
    snprintf(nspath, sizeof nspath, "/proc/%d/ns/net", (int)init_pid);
    cleanup_close int ns = open(nspath, O_RDONLY | O_CLOEXEC);
    if (ns < 0)
        return fb_error_sys(err, "open %s", nspath);
    unlink(next);
    cleanup_close int lfd = fb_memstate_listen_in(ns, next, err);
    if (lfd < 0)
        return -1;
    cleanup_close int conn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    fb_strlcpy(sa.sun_path, path, sizeof sa.sun_path);
    struct timeval tv = {.tv_sec = 5};
    if (conn < 0 || setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
        connect(conn, (struct sockaddr *)&sa, sizeof sa) < 0)
        return fb_error_sys(err, "connect to %s", x->rel);
    cleanup_json json_t *req = json_pack("{s:s}", "op", "relisten");
    int r = fb_wire_send_json(conn, FB_MSG_REQUEST, req);
    if (r == 0)
        r = fb_wire_send_fds(conn, &lfd, 1);
    struct fb_frame f = {0};
    if (r == 0)
        r = fb_wire_recv(conn, &f);
    cleanup_json json_t *res = r == 0 ? fb_wire_frame_json(&f) : NULL;
    free(f.data);
    if (r < 0 || !json_is_true(json_object_get(res, "ok"))) {
        unlink(next);
        return fb_error_set(err, FB_ERR_INTERNAL, r < 0 ? -r : EPROTO, "hand %s a new socket", x->rel);
    }
    if (rename(next, path) < 0)
        return fb_error_sys(err, "rename %s", next);
    return 0;
}

/* The restored sandbox's own identity: its hostname (a fork's differs
 * from its parent's) and the loopback of its new network namespace, which
 * CRIU leaves empty (--empty-ns net: no veth of the parent's comes along;
 * the daemon attaches the sandbox's own). */
static int set_identity(pid_t init_pid, const char *hostname, fb_error_t *err)
{
    char uts[64], net[64];
    snprintf(uts, sizeof uts, "/proc/%d/ns/uts", (int)init_pid);
    snprintf(net, sizeof net, "/proc/%d/ns/net", (int)init_pid);
    cleanup_close int ufd = open(uts, O_RDONLY | O_CLOEXEC);
    cleanup_close int nfd = open(net, O_RDONLY | O_CLOEXEC);
    if (ufd < 0 || nfd < 0)
        return fb_error_sys(err, "open the namespaces of pid %d", (int)init_pid);
    struct ns_job job = {.ns_fd = ufd, .nstype = CLONE_NEWUTS, .hostname = hostname, .fd = -1};
    if (ns_run(&job, err) < 0)
        return -1;
    if (job.errnum != 0)
        return fb_error_set(err, FB_ERR_INTERNAL, job.errnum, "set the hostname");
    struct ns_job lo = {.ns_fd = nfd, .nstype = CLONE_NEWNET, .path = NULL, .fd = -1};
    if (ns_run(&lo, err) < 0)
        return -1;
    if (lo.errnum != 0)
        return fb_error_set(err, FB_ERR_INTERNAL, lo.errnum, "bring up the loopback");
    return 0;
}

int fb_memstate_restore(const struct fb_memstate_restore *r, struct fb_container *out, fb_error_t *err)
{
    const struct fb_container_config *c = r->c;
    memset(out, 0, sizeof *out);
    if (fb_snprintf(out->sock_path, sizeof out->sock_path, "%s/init.sock", c->run_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "socket path");
    if (fb_container_prepare_dirs(c, err) < 0)
        return -1;
    char view[PATH_MAX];
    if (images_view(r->images, c->id, c->uid_base, view, sizeof view, err) < 0) {
        fb_rm_rf(view);
        return -1;
    }
    if (fb_cgroup_create(c->cgroups, c->id, c->limits, err) < 0) {
        fb_rm_rf(view);
        return -1;
    }
    struct holder h;
    int rc = holder_start(c, &h, err);
    if (rc == 0)
        rc = fb_container_mount_root(c, h.pid, err);
    pid_t init_pid = 0;
    if (rc == 0)
        rc = restore_run(r, view, &init_pid, err);
    /* the restored tasks hold their namespaces now; the overlay lives on in
     * their mount namespace alone */
    fb_container_unmount_root(c);
    holder_end(&h);
    if (rc == 0)
        rc = set_identity(init_pid, c->hostname, err);
    for (size_t i = 0; rc == 0 && i < r->n_ext; i++)
        if (r->ext[i].kind == FB_EXT_LISTEN)
            rc = relisten(c, init_pid, &r->ext[i], err);
    if (rc < 0) {
        /* kept for a post-mortem: the first lines are in *err */
        char log[PATH_MAX + 16], keep[PATH_MAX + 16];
        if (fb_snprintf(log, sizeof log, "%s/restore.log", view) == 0 &&
            fb_snprintf(keep, sizeof keep, "%s/restore-failed.log", c->sandbox_dir) == 0)
            rename(log, keep);
    }
    fb_rm_rf(view);
    if (rc < 0) {
        if (init_pid > 0)
            fb_container_kill(init_pid);
        fb_cgroup_destroy(c->cgroups, c->id, NULL);
        return -1;
    }
    out->init_pid = init_pid;
    return 0;
}

int fb_memstate_busy(const struct fb_container_config *c, pid_t init_pid, fb_error_t *err)
{
    cleanup_free pid_t *pids = NULL;
    size_t n = 0;
    if (fb_cgroup_procs_read(c->cgroups, c->id, &pids, &n, err) < 0)
        return -1;
    char layer[PATH_MAX];
    if (fb_snprintf(layer, sizeof layer, "%s/layer/", c->sandbox_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "layer path");
    int busy = 0;
    for (size_t i = 0; i < n && !busy; i++) {
        if (pids[i] == init_pid) {
            /* init itself between accepting a connection and handing it
             * to a worker: any socket beside its listener (fd 3) */
            char path[64];
            snprintf(path, sizeof path, "/proc/%d/fd", (int)init_pid);
            cleanup_dir DIR *d = opendir(path);
            struct dirent *e;
            while (d != NULL && !busy && (e = readdir(d)) != NULL) {
                char link[64];
                ssize_t l = readlinkat(dirfd(d), e->d_name, link, sizeof link - 1);
                if (l <= 0)
                    continue;
                link[l] = '\0';
                busy = strncmp(link, "socket:", 7) == 0 && atoi(e->d_name) != 3;
            }
            continue;
        }
        char path[64], exe[64];
        snprintf(path, sizeof path, "/proc/%d/exe", (int)pids[i]);
        ssize_t len = readlink(path, exe, sizeof exe - 1);
        if (len < 0)
            continue;
        exe[len] = '\0';
        if (strncmp(exe, "/memfd:forkbox-init", 19) != 0)
            continue;
        /* a keeper holds its record files; any other worker of init is
         * serving a request, over a connection to the daemon */
        bool keeper = false;
        snprintf(path, sizeof path, "/proc/%d/fd", (int)pids[i]);
        cleanup_dir DIR *d = opendir(path);
        struct dirent *e;
        while (d != NULL && !keeper && (e = readdir(d)) != NULL) {
            char link[PATH_MAX];
            ssize_t l = readlinkat(dirfd(d), e->d_name, link, sizeof link - 1);
            if (l <= 0)
                continue;
            link[l] = '\0';
            keeper = strncmp(link, layer, strlen(layer)) == 0;
        }
        if (d != NULL && !keeper)
            busy = 1;
    }
    return busy;
}
