/* log: leveled records, JSON lines off a tty; one write per record. */
#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static enum log_level max_level = LOG_INFO;
static _Thread_local char tag[64];
static const char *const names[] = { "error", "warn", "info", "debug" };

int log_level_parse(const char *s, enum log_level *out)
{
	for (int i = 0; i <= LOG_DEBUG; i++) {
		if (!strcmp(s, names[i])) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

void log_set_level(enum log_level level)
{
	max_level = level;
}

enum log_level log_get_level(void)
{
	return max_level;
}

void log_set_tag(const char *t)
{
	snprintf(tag, sizeof(tag), "%s", t ? t : "");
}

/* Appends s to out as the inside of a JSON string. */
static size_t json_escape(char *out, size_t cap, const char *s)
{
	size_t n = 0;
	for (; *s && n + 7 < cap; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\') {
			out[n++] = '\\';
			out[n++] = (char)ch;
		} else if (ch < 0x20) {
			n += (size_t)snprintf(out + n, cap - n, "\\u%04x", ch);
		} else {
			out[n++] = (char)ch;
		}
	}
	out[n] = '\0';
	return n;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	if (level > max_level)
		return;
	int saved = errno;
	char msg[1024], line[2400], ts[32];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct tm tm;
	gmtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	int n;
	if (isatty(2)) {
		n = snprintf(line, sizeof(line), "%s.%03ldZ %-5s %s%s%s\n", ts, now.tv_nsec / 1000000,
			     names[level], tag, tag[0] ? ": " : "", msg);
	} else {
		char esc[2100];
		json_escape(esc, sizeof(esc), msg);
		n = snprintf(line, sizeof(line),
			     "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"tag\":\"%s\",\"msg\":\"%s\"}\n", ts,
			     now.tv_nsec / 1000000, names[level], tag, esc);
	}
	if (n > (int)sizeof(line) - 1)
		n = (int)sizeof(line) - 1;
	if (write(2, line, (size_t)n) < 0) {
		/* nowhere left to report it */
	}
	errno = saved;
}
