/* Shared state of the forkbox command-line client: global options, the lazily
 * opened API client, argument parsing and the command entry points. */
#ifndef FB_CLI_CLI_H
#define FB_CLI_CLI_H

#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "cli/client.h"
#include "common/error.h"

/* Exit codes of the client itself; exec and run exit with the command's. */
enum {
    FB_EXIT_OK = 0,
    FB_EXIT_FAIL = 1,  /* the API or the host refused */
    FB_EXIT_USAGE = 2, /* the command line is wrong */
    FB_EXIT_INTERRUPTED = 130,
};

struct fb_cli {
    bool json;
    const char *socket_path; /* --socket, lent from argv */
    const char *key;         /* --key, lent from argv */
    bool client_open;
    struct fb_client client;
};

/* Opens the API client on first use (so `help` and `version` work without a
 * daemon) and returns it in *out; the client stays owned by cli. */
int fb_cli_client(struct fb_cli *cli, struct fb_client **out, fb_error_t *err);

/* Set by the SIGINT/SIGTERM handler that `run` installs. */
extern volatile sig_atomic_t fb_cli_interrupted;

struct fb_command {
    const char *name;  /* "files ls": used in messages */
    const char *usage; /* full --help text */
    const char *shortopts;
    const struct option *longopts; /* NULL-terminated; may be NULL */
    bool stop_at_operand;          /* options end at the first operand (exec, run) */
};

/* Argument parser shared by every command: the command's own options plus
 * the global ones (--json, --socket, --key, --help) accepted anywhere. */
struct fb_args {
    struct fb_cli *cli;
    const struct fb_command *cmd;
    int argc;
    char **argv;
    int exit_code; /* valid when fb_args_next() returned FB_ARGS_EXIT */
    char shortopts[64];
    struct option merged[48];
};

#define FB_ARGS_EXIT (-2)

void fb_args_init(struct fb_args *a, struct fb_cli *cli, const struct fb_command *cmd, int argc, char **argv);

/* Next command-specific option character, -1 after the last option (operands
 * then start at optind), or FB_ARGS_EXIT when --help was printed or the
 * option was bad (a->exit_code says which). */
int fb_args_next(struct fb_args *a);

/* Prints "forkbox: <cmd>: <message>" plus a --help hint; returns FB_EXIT_USAGE. */
int fb_usage_error(const struct fb_command *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "forkbox: <message>" and releases the error; returns FB_EXIT_FAIL. */
int fb_fail(fb_error_t *err);

/* Strict number parsing for option values; 0 or -1. */
int fb_parse_i64(const char *s, long long min, long long max, long long *out);
int fb_parse_double(const char *s, double *out);

/* Adds "K=V" to obj (created on first use).  Returns 0, or -1 when s has no
 * '=' or an empty key, or jansson refuses the text (not UTF-8). */
int fb_parse_kv(const char *s, json_t **obj);

/* A sandbox id or template name as a path segment: refuses the empty
 * string, "." and "..", and anything outside [A-Za-z0-9._-]. */
bool fb_valid_name(const char *s);

/* Sandbox commands (commands_sandbox.c) */
int fb_cmd_create(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_ls(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_get(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_rm(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_ttl(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_network(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_info(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_version(struct fb_cli *cli, int argc, char **argv);

/* Builds the POST /v1/sandboxes body from one create option; shared by
 * create and run.  Returns 1 when c was a create option, 0 when not, and
 * FB_EXIT_USAGE (after printing) when its value is bad. */
int fb_create_option(const struct fb_command *cmd, int c, const char *arg, json_t *body);
#define FB_CREATE_SHORTOPTS "t:"
extern const struct option fb_create_longopts[];
#define FB_CREATE_USAGE                                                                                      \
    "  -t, --template T      root filesystem template (default: default)\n"                                  \
    "      --ttl S           delete the sandbox after S seconds (0: never)\n"                                \
    "      --label K=V       attach a label (repeatable)\n"                                                  \
    "      --env K=V         environment of every command (repeatable)\n"                                    \
    "      --workdir P       working directory (default /root)\n"                                            \
    "      --cpus N          CPU limit, e.g. 0.5\n"                                                          \
    "      --memory MB       memory limit in MiB\n"                                                          \
    "      --pids N          process limit\n"                                                                \
    "      --disk MB         size of the sandbox's own disk in MiB (default 2048)\n"                         \
    "      --network MODE    none (default: loopback only), open or allowlist (see docs/network.md)\n"       \
    "      --allow ENTRY     allowlist entry, e.g. pypi.org, *.github.com, 203.0.113.0/24:443\n"             \
    "                        (repeatable; implies --network allowlist)\n"                                    \
    "      --checkpoint C    start from the files of checkpoint C (its template)\n"                          \
    "      --volume V:PATH[:ro]  mount volume V at PATH, read-only with :ro (repeatable)\n"

/* "/v1/sandboxes/<id><suffix>" with id escaped; caller frees, NULL when out
 * of memory.  suffix may be "" or start with "/" or "?". */
char *fb_sandbox_path(const char *id, const char *suffix);

/* Creates a sandbox from body; *out receives the sandbox object. */
int fb_sandbox_create(struct fb_client *c, json_t *body, json_t **out, fb_error_t *err);
/* Deletes one sandbox; used by rm and by run's cleanup. */
int fb_sandbox_delete(struct fb_client *c, const char *id, fb_error_t *err);

/* Exec commands (commands_exec.c) */
int fb_cmd_exec(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_run(struct fb_cli *cli, int argc, char **argv);

/* File commands (commands_files.c, commands_cp.c) */
int fb_cmd_cp(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_files(struct fb_cli *cli, int argc, char **argv);

/* Ports in (commands_port.c) */
int fb_cmd_port(struct fb_cli *cli, int argc, char **argv);
/* Options every process start takes (spawn, shell): --env/-e, --cwd,
 * --user/-u.  FB_PROC_START_LONGOPTS lists them for a longopts table. */
enum { FB_OPT_PROC_ENV = 0x3400, FB_OPT_PROC_CWD, FB_OPT_PROC_USER };
#define FB_PROC_START_LONGOPTS                                                                               \
    {"env", required_argument, NULL, FB_OPT_PROC_ENV}, {"cwd", required_argument, NULL, FB_OPT_PROC_CWD},    \
    {                                                                                                        \
        "user", required_argument, NULL, FB_OPT_PROC_USER                                                    \
    }
#define FB_OPT_NOT_MINE (-1)
/* Takes option c (value arg) into a process-start body: env into *env
 * (created on first use), cwd and user into body.  0 when taken,
 * FB_OPT_NOT_MINE for another option, or the usage exit code for a bad
 * value (after the message). */
int fb_proc_start_option(const struct fb_command *cmd, int c, const char *arg, json_t *body, json_t **env);

int fb_cmd_spawn(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_ps(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_logs(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_kill(struct fb_cli *cli, int argc, char **argv);
/* Interactive sessions over the attach WebSocket (commands_shell.c) */
int fb_cmd_shell(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_attach(struct fb_cli *cli, int argc, char **argv);

/* GETs path (a tar) into out, or stdout when NULL (never a terminal):
 * written next to out and renamed when complete, so a failed download
 * leaves no partial file.  Returns an exit code (commands_export.c). */
int fb_cli_download(struct fb_cli *cli, const char *path, const char *out, const char *label);

/* Volume commands (commands_volume.c) */
int fb_cmd_volume(struct fb_cli *cli, int argc, char **argv);

/* Template commands (commands_template.c) */
int fb_cmd_template(struct fb_cli *cli, int argc, char **argv);
/* template build (commands_build.c) */
int fb_cmd_template_build(struct fb_cli *cli, int argc, char **argv);
/* Checkpoints (commands_checkpoint.c) */
int fb_cmd_checkpoint(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_checkpoints(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_rollback(struct fb_cli *cli, int argc, char **argv);
/* Checkpoints and sandboxes as tar files (commands_export.c) */
int fb_cmd_checkpoint_export(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_checkpoint_import(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_export(struct fb_cli *cli, int argc, char **argv);
/* Processes: fork, pause, hibernate, resume (commands_state.c) */
int fb_cmd_fork(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_pause(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_hibernate(struct fb_cli *cli, int argc, char **argv);
int fb_cmd_resume(struct fb_cli *cli, int argc, char **argv);

#endif
