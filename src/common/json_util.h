/* jansson helpers: scope cleanup for json_t and bounded getters. */
#ifndef FB_COMMON_JSON_UTIL_H
#define FB_COMMON_JSON_UTIL_H

#include <jansson.h>

static inline void fb_json_decrefp(json_t **j)
{
    if (*j != NULL)
        json_decref(*j);
    *j = NULL;
}
#define cleanup_json __attribute__((cleanup(fb_json_decrefp)))

#endif
