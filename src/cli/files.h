/* Helpers shared by `forkbox cp` and `forkbox files`. */
#ifndef FB_CLI_FILES_H
#define FB_CLI_FILES_H

#include <jansson.h>

#include "cli/client.h"
#include "common/error.h"

/* "/v1/sandboxes/<id>/<endpoint>?path=<path><extra>", escaped; extra is
 * appended as is ("" or "&mode=0644").  Caller frees; NULL when out of memory. */
char *fb_files_url(const char *id, const char *endpoint, const char *path, const char *extra);

/* Lists a directory in the sandbox: *out receives {"entries": [...]}.  When
 * path is a file it is not downloaded: the call fails with FB_ERR_CONFLICT. */
int fb_files_list(struct fb_client *c, const char *id, const char *path, json_t **out, fb_error_t *err);

/* The last component of a path ("/a/b/" gives "b", "/" gives ""); points
 * into a copy the caller frees. */
char *fb_path_basename(const char *path);

/* The path with its last component removed ("/a/b" gives "/a", "b" gives
 * "."); caller frees. */
char *fb_path_dirname(const char *path);

#endif
