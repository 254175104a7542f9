/*
 * log: leveled logging to stderr. One JSON object per line when stderr is
 * not a terminal (for journald and log shippers), plain text when it is.
 * Each thread may carry a tag ("sbx/sbx_1234") that prefixes its records.
 */
#ifndef CPUOS_LOG_H
#define CPUOS_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Parses "error", "warn", "info", "debug": 0 or -EINVAL. */
int log_level_parse(const char *s, enum log_level *out);
void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Sets this thread's tag (copied; NULL clears it). */
void log_set_tag(const char *tag);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
