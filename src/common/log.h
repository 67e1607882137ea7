/* Leveled logging to stderr (the daemon's journal). Thread-safe. */
#ifndef FB_COMMON_LOG_H
#define FB_COMMON_LOG_H

enum fb_log_level { FB_LOG_DEBUG, FB_LOG_INFO, FB_LOG_WARN, FB_LOG_ERROR };

void fb_log_set_level(enum fb_log_level level);
void fb_log(enum fb_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define fb_debug(...) fb_log(FB_LOG_DEBUG, __VA_ARGS__)
#define fb_info(...) fb_log(FB_LOG_INFO, __VA_ARGS__)
#define fb_warn(...) fb_log(FB_LOG_WARN, __VA_ARGS__)
#define fb_errorf(...) fb_log(FB_LOG_ERROR, __VA_ARGS__)

#endif
