/* Scope-bound cleanup helpers.  Every owned resource in forkbox is declared
 * with one of these so that early returns cannot leak it; ownership is
 * handed on by setting the variable to NULL / -1 (see fb_steal_ptr/fd). */
#ifndef FB_COMMON_CLEANUP_H
#define FB_COMMON_CLEANUP_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "error.h"

static inline void fb_freep(void *p)
{
    void **pp = (void **)p;
    free(*pp);
    *pp = NULL;
}

static inline void fb_closep(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
    *fd = -1;
}

static inline void fb_fclosep(FILE **f)
{
    if (*f != NULL)
        fclose(*f);
    *f = NULL;
}

static inline void fb_closedirp(DIR **d)
{
    if (*d != NULL)
        closedir(*d);
    *d = NULL;
}

static inline void fb_errorp(fb_error_t *e)
{
    fb_error_release(e);
}

#define cleanup_free __attribute__((cleanup(fb_freep)))
#define cleanup_close __attribute__((cleanup(fb_closep)))
#define cleanup_fclose __attribute__((cleanup(fb_fclosep)))
#define cleanup_dir __attribute__((cleanup(fb_closedirp)))
#define cleanup_error __attribute__((cleanup(fb_errorp)))

static inline void *fb_steal_ptr_(void **p)
{
    void *v = *p;
    *p = NULL;
    return v;
}
#define fb_steal_ptr(p) fb_steal_ptr_((void **)&(p))

static inline int fb_steal_fd(int *fd)
{
    int v = *fd;
    *fd = -1;
    return v;
}

#endif
