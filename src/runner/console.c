/*
 * console: copies the guest's serial console to console.log and keeps its
 * tail in memory.
 */
#include "runner/console.h"

#include "common/fs.h"
#include "common/unixsock.h"
#include "runner/qemu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

void console_open(struct console *c, const char *run_dir, size_t cap, int append, int timeout_ms)
{
	char path[300];
	c->fd = -1;
	c->written = c->tail_len = 0;
	c->tail[0] = '\0';
	c->cap = cap ? cap : 1024 * 1024;
	snprintf(path, sizeof(path), "%s/console.log", run_dir);
	c->log = fs_open_file(path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0600);
	struct stat st;
	if (append && c->log >= 0 && fstat(c->log, &st) == 0)
		c->written = (size_t)st.st_size;
	snprintf(path, sizeof(path), "%s/" QEMU_CONSOLE_SOCK, run_dir);
	c->fd = unix_connect(path, timeout_ms);
	if (c->fd >= 0) {
		int on = 1;
		ioctl(c->fd, FIONBIO, &on);
	}
}

static void take(struct console *c, const char *p, size_t n)
{
	if (c->log >= 0 && c->written < c->cap) {
		size_t w = n < c->cap - c->written ? n : c->cap - c->written;
		if (write(c->log, p, w) > 0)
			c->written += w;
		if (c->written == c->cap)
			dprintf(c->log, "\n[console log truncated]\n");
	}
	/* The in-memory tail always keeps the newest bytes: a panic is at the
	 * end. Callers pass at most CONSOLE_TAIL bytes at a time. */
	if (c->tail_len + n > CONSOLE_TAIL) {
		size_t drop = c->tail_len + n - CONSOLE_TAIL;
		memmove(c->tail, c->tail + drop, c->tail_len - drop);
		c->tail_len -= drop;
	}
	memcpy(c->tail + c->tail_len, p, n);
	c->tail_len += n;
	c->tail[c->tail_len] = '\0';
}

void console_drain(struct console *c)
{
	char buf[16384];
	ssize_t n;
	/* A bounded turn: a guest flooding its console must not keep the
	 * runner's loop here (the socket stays readable, the next turn
	 * continues). */
	for (int turn = 0; c->fd >= 0 && turn < 16; turn++) {
		n = read(c->fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) { /* EOF or error: QEMU is going away */
			close(c->fd);
			c->fd = -1;
			return;
		}
		take(c, buf, (size_t)n);
	}
}

void console_close(struct console *c)
{
	if (c->fd >= 0)
		close(c->fd);
	if (c->log >= 0)
		close(c->log);
	c->fd = c->log = -1;
}

int console_panic(const struct console *c, char *line, size_t len)
{
	/* The tail may hold NUL bytes the guest wrote: look past them. */
	const char *end = c->tail + c->tail_len;
	for (const char *p = c->tail; p < end; p += strlen(p) + 1) {
		const char *hit = strstr(p, "Kernel panic");
		if (hit) {
			snprintf(line, len, "%.*s", (int)strcspn(hit, "\r\n"), hit);
			return 1;
		}
	}
	return 0;
}
