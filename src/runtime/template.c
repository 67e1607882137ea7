#include "template.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/cleanup.h"
#include "../common/log.h"
#include "../common/util.h"

extern char **environ;

int fb_template_debootstrap(const char *dest, const char *cache_dir, fb_error_t *err)
{
    int r = fb_mkdir_p(cache_dir, 0755);
    if (r < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, -r, "create %s", cache_dir);
    char cache_arg[4200];
    if (fb_snprintf(cache_arg, sizeof cache_arg, "--cache-dir=%s", cache_dir) < 0)
        return fb_error_set(err, FB_ERR_INTERNAL, ENAMETOOLONG, "cache dir path");
    char *const argv[] = {
        "debootstrap", "--variant=minbase", "--include=python3", cache_arg, "bookworm", (char *)dest, NULL};
    fb_info("building the default template: debootstrap bookworm (minbase + python3) into %s", dest);
    pid_t pid;
    r = posix_spawnp(&pid, "debootstrap", NULL, NULL, argv, environ);
    if (r != 0)
        return fb_error_set(err, FB_ERR_UNSUPPORTED, r,
                            "run debootstrap (install it: apt-get install debootstrap)");
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return fb_error_sys(err, "wait for debootstrap");
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fb_rm_rf(dest);
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "debootstrap failed (status %d); see the log above",
                            status);
    }
    return 0;
}

/* Runs in a child chrooted into dest: whatever the archive holds, links
 * and names resolve inside dest, never on the rest of the host. */
static int extract_in_root(const char *tar_path_fd, int report_fd)
{
    struct archive *in = archive_read_new();
    struct archive *out = archive_write_disk_new();
    char msg[512] = "";
    int rc = 1;
    if (in == NULL || out == NULL)
        goto done;
    archive_read_support_filter_all(in);
    archive_read_support_format_tar(in);
    archive_read_support_format_gnutar(in);
    archive_write_disk_set_options(
        out, ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                 ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                 ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS | ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_UNLINK);
    if (archive_read_open_fd(in, atoi(tar_path_fd), 65536) != ARCHIVE_OK) {
        snprintf(msg, sizeof msg, "not a readable archive: %s", archive_error_string(in));
        goto done;
    }
    long entries = 0;
    for (;;) {
        struct archive_entry *e;
        int r = archive_read_next_header(in, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN) {
            snprintf(msg, sizeof msg, "corrupt archive: %s", archive_error_string(in));
            goto done;
        }
        mode_t type = archive_entry_filetype(e);
        if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
            continue; /* device nodes, fifos: a sandbox gets its own /dev */
        const char *name = archive_entry_pathname(e);
        if (name == NULL)
            continue;
        while (name[0] == '.' && name[1] == '/')
            name += 2;
        if (name[0] == '\0' || strcmp(name, ".") == 0)
            continue;
        archive_entry_set_pathname(e, name);
        r = archive_read_extract2(in, e, out);
        if (r < ARCHIVE_WARN) {
            snprintf(msg, sizeof msg, "cannot extract %.200s: %s", name, archive_error_string(out));
            goto done;
        }
        entries++;
    }
    if (entries == 0) {
        snprintf(msg, sizeof msg, "archive holds no files");
        goto done;
    }
    if (archive_write_close(out) != ARCHIVE_OK) {
        snprintf(msg, sizeof msg, "finish extraction: %s", archive_error_string(out));
        goto done;
    }
    rc = 0;
done:
    if (rc != 0)
        (void)!write(report_fd, msg, strlen(msg));
    if (in)
        archive_read_free(in);
    if (out)
        archive_write_free(out);
    return rc;
}

int fb_template_extract(const char *tar_path, const char *dest, fb_error_t *err)
{
    if (mkdir(dest, 0755) < 0)
        return fb_error_sys(err, "create %s", dest);
    cleanup_close int tar_fd = open(tar_path, O_RDONLY | O_CLOEXEC);
    if (tar_fd < 0) {
        fb_rm_rf(dest);
        return fb_error_sys(err, "open %s", tar_path);
    }
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0) {
        fb_rm_rf(dest);
        return fb_error_sys(err, "pipe");
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        char fdstr[16];
        snprintf(fdstr, sizeof fdstr, "%d", tar_fd);
        if (chroot(dest) < 0 || chdir("/") < 0)
            _exit(1);
        _exit(extract_in_root(fdstr, pipefd[1]));
    }
    close(pipefd[1]);
    char msg[512];
    ssize_t n = pid > 0 ? read(pipefd[0], msg, sizeof msg - 1) : -1;
    close(pipefd[0]);
    int status = 0;
    if (pid > 0)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fb_rm_rf(dest);
        if (n > 0) {
            msg[n] = '\0';
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "%s", msg);
        }
        return fb_error_set(err, FB_ERR_INTERNAL, 0, "template extraction failed");
    }
    return 0;
}
