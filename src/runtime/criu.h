/* CRIU (checkpoint/restore in userspace): finding the binary, running it
 * with a hard deadline, and the start-up self-test that says whether memory
 * features (hibernate, memory checkpoints, fork) can work on this host.
 *
 * criu always runs with CRIU_FAULT=130 in its environment: on the virtual
 * machines forkbox is developed on, dumping hangs unless CRIU's use of
 * hardware breakpoints is turned off, and fault 130 does that. */
#ifndef FB_RUNTIME_CRIU_H
#define FB_RUNTIME_CRIU_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/error.h"

/* Where scripts/install-criu.sh puts criu; looked at before PATH. */
#define FB_CRIU_INSTALL_PATH "/usr/local/lib/forkbox/criu/criu"
/* The oldest CRIU known to work here (Debian 12's 3.17 does not). */
#define FB_CRIU_MIN_MAJOR 4

/* Parses the output of `criu --version` ("Version: 4.1.1\n..."): fills
 * version (e.g. "4.1.1") and *major; -1 if there is no version line. */
int fb_criu_parse_version(const char *text, char *version, size_t len, int *major);

/* The binary to run: configured if not empty (must be executable), else
 * FB_CRIU_INSTALL_PATH if executable, else `criu` on PATH.  Fills out;
 * FB_ERR_UNSUPPORTED with the reason when there is none. */
int fb_criu_locate(const char *configured, char *out, size_t len, fb_error_t *err);

/* Runs path with args (args[0] is the first argument, NULL-terminated) in a
 * process group of its own, stdin /dev/null, stdout and stderr captured
 * (the first `cap` bytes kept in *output, NUL-terminated, caller frees),
 * environment PATH, LANG=C and CRIU_FAULT=130.  At timeout_ms, or as soon
 * as *cancel (may be NULL) is set, the group is SIGKILLed and reaped.
 * Returns 0 with *status (a wait status) when criu ended by itself; -1
 * with FB_ERR_UNAVAILABLE and "timed out after N ms" / "cancelled", or an
 * internal error if it could not be started. */
int fb_criu_run(const char *path, const char *const *args, int timeout_ms, size_t cap,
                const atomic_bool *cancel, char **output, int *status, fb_error_t *err);

/* Inherited fds of a criu run land at FB_CRIU_FD_BASE, FB_CRIU_FD_BASE+1, ...
 * (what --inherit-fd fd[N] names). */
#define FB_CRIU_FD_BASE 10
#define FB_CRIU_MAX_FDS 240
#define FB_CRIU_MAX_ARGS 640

#include <sys/types.h>

struct fb_criu_cmd {
    const int *fds; /* handed to criu as FB_CRIU_FD_BASE + i (the caller keeps its own copies) */
    size_t nfds;
    /* run by the daemon after criu is forked and before it executes (e.g.
     * to move it into a cgroup its restored tasks inherit); -1 kills it */
    int (*before_exec)(pid_t pid, void *arg, fb_error_t *err);
    void *arg;
};

/* fb_criu_run with fds to inherit and a hook before exec (cmd may be NULL). */
int fb_criu_run_cmd(const char *path, const char *const *args, const struct fb_criu_cmd *cmd, int timeout_ms,
                    size_t cap, const atomic_bool *cancel, char **output, int *status, fb_error_t *err);

/* The error lines of a criu log (or of output when the log is unreadable),
 * joined with " | " into dst. */
void fb_criu_log_summary(const char *log_path, const char *output, char *dst, size_t len);

enum fb_criu_state { FB_CRIU_CHECKING = 0, FB_CRIU_AVAILABLE, FB_CRIU_UNAVAILABLE };

struct fb_criu_result {
    enum fb_criu_state state;
    char path[PATH_MAX]; /* "" when no binary was found */
    char version[32];    /* "" when unknown */
    char reason[768];    /* why not available; "" when available */
    int64_t took_ms;     /* how long the self-test ran */
};

struct fb_criu_probe {
    const char *configured; /* --criu / FORKBOX_CRIU; NULL or "" to search */
    const char *work_dir;   /* an existing dir for the test's images (a subdir is made and removed) */
    int step_timeout_ms;    /* deadline of each criu run */
    const atomic_bool *cancel;
};

/* The self-test: locate, `criu --version` (>= FB_CRIU_MIN_MAJOR), `criu
 * check`, then a real dump and restore of a sleeping process in a session
 * of its own, checked to be alive after restore and then killed.  Every
 * criu run is bounded by step_timeout_ms, so the whole test is bounded by
 * four of them plus ~2 s.  Never fails: the verdict is in *out. */
void fb_criu_selftest(const struct fb_criu_probe *probe, struct fb_criu_result *out);

#endif
