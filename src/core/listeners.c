/* A thread serving two sockets until stopped: the shape the DNS resolver
 * (UDP + TCP) and the egress proxy (HTTP + TLS) share.  A pipe wakes it. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include "core.h"
#include "internal.h"

void fb_listeners_init(struct fb_listeners *l)
{
    l->fd[0] = l->fd[1] = l->wake[0] = l->wake[1] = -1;
    l->started = false;
}

static void *listeners_main(void *arg)
{
    struct fb_listeners *l = arg;
    while (!l->core->stopping) {
        struct pollfd p[3] = {{l->fd[0], POLLIN, 0}, {l->fd[1], POLLIN, 0}, {l->wake[0], POLLIN, 0}};
        if (poll(p, 3, -1) < 0 && errno != EINTR)
            break;
        if (p[2].revents)
            break;
        for (int i = 0; i < 2; i++)
            if (p[i].revents & POLLIN)
                l->ready(l->core, i);
    }
    return NULL;
}

int fb_listeners_start(struct fb_listeners *l, struct fb_core *core, int fd0, int fd1,
                       void (*ready)(struct fb_core *core, int which), fb_error_t *err)
{
    l->fd[0] = fd0;
    l->fd[1] = fd1;
    l->wake[0] = l->wake[1] = -1;
    l->started = false;
    l->core = core;
    l->ready = ready;
    if (pipe2(l->wake, O_CLOEXEC) < 0) {
        fb_error_sys(err, "pipe");
        fb_listeners_close(l);
        return -1;
    }
    if (pthread_create(&l->thread, NULL, listeners_main, l) != 0) {
        fb_listeners_close(l);
        return fb_error_set(err, FB_ERR_INTERNAL, EAGAIN, "start a listener thread");
    }
    l->started = true;
    return 0;
}

void fb_listeners_stop(struct fb_listeners *l)
{
    if (l->started) {
        (void)!write(l->wake[1], "x", 1);
        pthread_join(l->thread, NULL);
        l->started = false;
    }
}

void fb_listeners_close(struct fb_listeners *l)
{
    fb_listeners_stop(l);
    int *fds[] = {&l->fd[0], &l->fd[1], &l->wake[0], &l->wake[1]};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) {
        if (*fds[i] >= 0)
            close(*fds[i]);
        *fds[i] = -1;
    }
}

bool fb_spawn_detached(void *(*fn)(void *), void *arg)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    bool ok = pthread_create(&t, &attr, fn, arg) == 0;
    pthread_attr_destroy(&attr);
    return ok;
}
