/*
 * console: the guest's serial console (ttyS0) as the runner sees it. QEMU
 * serves it on a socket; we copy it into the run directory's console.log
 * (capped) and keep its newest bytes in memory, where a kernel panic is
 * read from. The guest writes what it likes here: nothing is parsed but
 * the tail, and nothing is held beyond the caps.
 */
#ifndef CPUOS_CONSOLE_H
#define CPUOS_CONSOLE_H

#include <stddef.h>

#define CONSOLE_TAIL (64 * 1024)

struct console {
	int fd;  /* QEMU's console socket, -1 when closed */
	int log; /* run_dir/console.log, -1 when it cannot be written */
	size_t written, cap;
	char tail[CONSOLE_TAIL + 1];
	size_t tail_len;
};

/* Opens run_dir/console.log (appending to it when append, else anew) with
 * room for cap bytes (0: 1 MiB), and connects to QEMU's console socket,
 * waiting up to timeout_ms. A console that cannot be had is not an error:
 * the VM runs without one. */
void console_open(struct console *c, const char *run_dir, size_t cap, int append, int timeout_ms);
/* Takes what the socket has without blocking; at EOF the socket closes. */
void console_drain(struct console *c);
void console_close(struct console *c);
/* Whether the kept tail mentions a kernel panic: its line (up to len - 1
 * bytes) in line and 1, else 0. */
int console_panic(const struct console *c, char *line, size_t len);

#endif
