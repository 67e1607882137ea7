/* "Ports in": reaching a TCP server inside a sandbox from the host, and
 * the share key that signs share URLs for it.  The HTTP side (request and
 * response relay, WebSocket) is api/ports.c and api/proxy.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gnutls/crypto.h>

#include "../common/cleanup.h"
#include "../common/util.h"
#include "core.h"
#include "internal.h"

#define CONNECT_TIMEOUT_MS 5000

static void row_clearp(struct fb_sandbox_row *r)
{
    fb_sandbox_row_clear(r);
}
#define cleanup_row __attribute__((cleanup(row_clearp)))

/* ---- the share key ---- */

static int read_key(const char *path, unsigned char key[FB_SHARE_KEY_LEN], fb_error_t *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return fb_error_sys(err, "open %s", path);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return fb_error_sys(err, "stat %s", path);
    /* a key others could read would let them mint share URLs */
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "%s must be a regular file of ours with mode 0600",
                            path);
    if (st.st_size != FB_SHARE_KEY_LEN)
        return fb_error_set(err, FB_ERR_INTERNAL, 0,
                            "%s holds %lld bytes, not %d: remove it to make a new one", path,
                            (long long)st.st_size, FB_SHARE_KEY_LEN);
    size_t got = 0;
    while (got < FB_SHARE_KEY_LEN) {
        ssize_t n = read(fd, key + got, FB_SHARE_KEY_LEN - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return fb_error_set(err, FB_ERR_INTERNAL, n < 0 ? errno : 0, "read %s", path);
        got += (size_t)n;
    }
    return 0;
}

int fb_share_key_load(struct fb_core *core, fb_error_t *err)
{
    char path[PATH_MAX], tmp[PATH_MAX];
    if (fb_snprintf(path, sizeof path, "%s/share.key", core->cfg.state_dir) < 0 ||
        fb_snprintf(tmp, sizeof tmp, "%s/share.key.new", core->cfg.state_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "share key path");
    if (access(path, F_OK) == 0 || errno != ENOENT)
        return read_key(path, core->share_key, err);
    /* first start: the key is written whole under a temporary name and
     * linked into place (link refuses an existing name, like O_EXCL), so a
     * crash never leaves a short key behind; the state dir lock keeps
     * other daemons out meanwhile */
    unsigned char key[FB_SHARE_KEY_LEN];
    if (gnutls_rnd(GNUTLS_RND_KEY, key, sizeof key) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "no randomness for the share key");
    unlink(tmp);
    cleanup_close int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return fb_error_sys(err, "create %s", tmp);
    int r = fb_write_all(fd, key, sizeof key);
    if (r == 0 && fsync(fd) < 0)
        r = -errno;
    if (r == 0 && link(tmp, path) < 0)
        r = -errno;
    unlink(tmp);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "write %s", path);
    memcpy(core->share_key, key, sizeof key);
    return 0;
}

/* ---- share tokens ---- */

int fb_share_create(struct fb_core *core, const char *tenant, const char *id, int64_t port,
                    int64_t expires_in, char token[FB_SHARE_TOKEN_MAX], int64_t *expires_at, fb_error_t *err)
{
    if (port < 1 || port > 65535)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "port: must be 1..65535");
    if (expires_in < 1 || expires_in > FB_SHARE_MAX_SECONDS)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "expires_in: must be 1..%d seconds",
                            FB_SHARE_MAX_SECONDS);
    cleanup_row struct fb_sandbox_row row = {0};
    if (fb_core_live_row(core, tenant, id, &row, err) < 0)
        return -1;
    int64_t expiry = fb_now_ms() / 1000 + expires_in;
    if (fb_share_sign(core->share_key, row.tenant, row.id, (unsigned)port, expiry, token) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "sign the share token");
    *expires_at = expiry;
    return 0;
}

int fb_share_verify(struct fb_core *core, const char *id, unsigned port, const char *token,
                    char tenant_out[FB_ID_MAX], int64_t *expires_at, fb_error_t *err)
{
    cleanup_row struct fb_sandbox_row row = {0};
    cleanup_error fb_error_t lerr = NULL;
    /* an unknown sandbox looks like a bad token: no existence oracle; and
     * an unchecked token must not wake a paused sandbox, so no live_row */
    if (fb_store_sandbox_get(core->store, NULL, id, &row, &lerr) < 0 || strcmp(row.state, "deleting") == 0 ||
        fb_share_check(core->share_key, row.tenant, row.id, port, token, fb_now_ms() / 1000, expires_at) < 0)
        return fb_error_set(err, FB_ERR_UNAUTHORIZED, 0, "invalid or expired share token");
    fb_strlcpy(tenant_out, row.tenant, FB_ID_MAX);
    return 0;
}

/* ---- connecting inside ---- */

struct connect_job {
    int netns_fd;
    uint16_t port;
    int fd;     /* the connected socket, or -1 */
    int errnum; /* why not */
};

/* One non-blocking connect to addr, waiting until deadline. */
static int connect_one(const struct sockaddr *sa, socklen_t len, int64_t deadline)
{
    cleanup_close int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, sa, len) < 0) {
        if (errno != EINPROGRESS)
            return -errno;
        for (;;) {
            int64_t left = deadline - fb_mono_ms();
            if (left <= 0)
                return -ETIMEDOUT;
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int n = poll(&p, 1, (int)left);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                return -errno;
            if (n > 0)
                break;
        }
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
            return -errno;
        if (soerr != 0)
            return -soerr;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fb_steal_fd(&fd);
}

/* Runs on a thread of its own: setns() changes only the calling thread's
 * namespace, and a socket stays in the namespace it was created in after
 * the thread is gone. */
static void *connect_inside(void *arg)
{
    struct connect_job *j = arg;
    if (setns(j->netns_fd, CLONE_NEWNET) < 0) {
        j->errnum = errno;
        return NULL;
    }
    int64_t deadline = fb_mono_ms() + CONNECT_TIMEOUT_MS;
    struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = htons(j->port)};
    v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int r = connect_one((struct sockaddr *)&v4, sizeof v4, deadline);
    if (r == -ECONNREFUSED) {
        /* a server bound to ::1 only */
        struct sockaddr_in6 v6 = {
            .sin6_family = AF_INET6, .sin6_port = htons(j->port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
        int r6 = connect_one((struct sockaddr *)&v6, sizeof v6, deadline);
        if (r6 >= 0 || r6 == -ETIMEDOUT)
            r = r6;
    }
    if (r >= 0)
        j->fd = r;
    else
        j->errnum = -r;
    return NULL;
}

int fb_port_connect(struct fb_core *core, const char *tenant, const char *id, unsigned port, fb_error_t *err)
{
    if (port < 1 || port > 65535)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "port: must be 1..65535");
    cleanup_row struct fb_sandbox_row row = {0};
    if (fb_core_live_row(core, tenant, id, &row, err) < 0)
        return -1;
    if (strcmp(row.state, "running") != 0 || row.init_pid <= 0)
        return fb_error_set(err, FB_ERR_CONFLICT, 0, "sandbox %s is %s", id, row.state);
    cleanup_close int ns = fb_core_netns_open(row.id, row.init_pid, row.uid_base, err);
    if (ns < 0)
        return -1;
    struct connect_job job = {.netns_fd = ns, .port = (uint16_t)port, .fd = -1};
    pthread_t t;
    if (pthread_create(&t, NULL, connect_inside, &job) != 0)
        return fb_error_set(err, FB_ERR_UNAVAILABLE, EAGAIN, "start a connect thread");
    pthread_join(t, NULL);
    if (job.fd >= 0)
        return job.fd;
    if (job.errnum == ETIMEDOUT)
        return fb_error_set(err, FB_ERR_BAD_GATEWAY, 0,
                            "port %u inside sandbox %s did not accept the connection within %d s", port, id,
                            CONNECT_TIMEOUT_MS / 1000);
    if (job.errnum == ECONNREFUSED || job.errnum == EADDRNOTAVAIL || job.errnum == ENETUNREACH ||
        job.errnum == EAFNOSUPPORT)
        return fb_error_set(err, FB_ERR_BAD_GATEWAY, 0, "nothing is listening on port %u inside sandbox %s",
                            port, id);
    return fb_error_set(err, FB_ERR_BAD_GATEWAY, job.errnum, "connect to port %u inside sandbox %s", port,
                        id);
}
