/* tcp: see tcp.h. */
#include "common/tcp.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

int tcp_wait(int fd, short ev, int ms)
{
	struct pollfd pf = { .fd = fd, .events = ev };
	int r;
	while ((r = poll(&pf, 1, ms)) < 0 && errno == EINTR)
		;
	return r;
}

int tcp_send_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

void tcp_relay(int a, int b, int idle_ms)
{
	unsigned char buf[1 << 16];
	int open_a = 1, open_b = 1;
	while (open_a || open_b) {
		struct pollfd pf[2] = { { .fd = open_a ? a : -1, .events = POLLIN },
					{ .fd = open_b ? b : -1, .events = POLLIN } };
		int r = poll(pf, 2, idle_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return;
		for (int i = 0; i < 2; i++) {
			if (!pf[i].revents)
				continue;
			int from = i ? b : a, to = i ? a : b;
			ssize_t got = recv(from, buf, sizeof(buf), 0);
			if (got < 0 && errno == EINTR)
				continue;
			if (got == 0) {
				shutdown(to, SHUT_WR);
				*(i ? &open_b : &open_a) = 0;
			} else if (got < 0 || tcp_send_all(to, buf, (size_t)got) < 0) {
				return; /* an error either way ends both */
			}
		}
	}
}

void tcp_reset(int fd)
{
	struct linger l = { .l_onoff = 1, .l_linger = 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	close(fd);
}
