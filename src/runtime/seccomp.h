/* Baseline seccomp filter, generated with libseccomp and exported as a
 * classic BPF program so it can be installed by a process that must not
 * allocate (the sandbox's setup child, just before it executes init). */
#ifndef FB_RUNTIME_SECCOMP_H
#define FB_RUNTIME_SECCOMP_H

#include <linux/filter.h>

#include "../common/error.h"

struct fb_seccomp_prog {
    struct sock_filter *filter; /* owned: fb_seccomp_prog_free() */
    unsigned short len;         /* instruction count */
};

/* Builds the baseline profile for x86_64 (and i386/x32 personalities): an
 * allowlist; listed dangerous calls fail with EPERM, everything unlisted
 * with ENOSYS (clone3 too, so libc falls back to clone, whose flags can be
 * filtered).  The caller owns *out; on error *out is empty. */
int fb_seccomp_build(struct fb_seccomp_prog *out, fb_error_t *err);

/* Installs prog into the calling thread with SECCOMP_MODE_FILTER.  Needs
 * no_new_privs (or CAP_SYS_ADMIN).  Async-signal-safe: no allocation.
 * Returns 0 or -errno. */
int fb_seccomp_install(const struct fb_seccomp_prog *prog);

void fb_seccomp_prog_free(struct fb_seccomp_prog *p);

/* Names of the syscalls the baseline denies, NULL-terminated (for docs and
 * /v1/info). */
const char *const *fb_seccomp_denied_names(void);

/* Names of the syscalls allowed without conditions, NULL-terminated. */
const char *const *fb_seccomp_allowed_names(void);

#endif
