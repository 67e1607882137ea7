#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static enum fb_log_level min_level = FB_LOG_INFO;

void fb_log_set_level(enum fb_log_level level)
{
    min_level = level;
}

void fb_log(enum fb_log_level level, const char *fmt, ...)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    if (level < min_level)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char line[2048];
    int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %-5s ", tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, names[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* one fputs per line keeps lines from concurrent threads whole */
    fprintf(stderr, "%s\n", line);
}
