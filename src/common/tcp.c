/* tcp: see tcp.h. */
#include "common/tcp.h"

#include "common/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <unistd.h>

#define RELAY_BUF (64 << 10)

int tcp_wait(int fd, short ev, int ms)
{
	struct pollfd pf = { .fd = fd, .events = ev };
	int r;
	while ((r = poll(&pf, 1, ms)) < 0 && errno == EINTR)
		;
	return r;
}

int tcp_wait_peer(int fd, short ev, int peer, int ms)
{
	/* POLLRDHUP alone on the peer: bytes it sends (a pipelined request)
	 * do not wake the wait, its end or a reset does. */
	struct pollfd pf[2] = { { .fd = fd, .events = ev }, { .fd = peer, .events = POLLRDHUP } };
	int64_t end = ms >= 0 ? clock_ms() + ms : 0;
	for (;;) {
		int left = ms < 0 ? -1 : (int)(end - clock_ms() > 0 ? end - clock_ms() : 0);
		int r = poll(pf, peer >= 0 ? 2 : 1, left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return 0;
		if (pf[0].revents)
			return 1;
		if (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
			return -ECONNRESET;
	}
}

ssize_t tcp_read_until(int fd, char *buf, size_t cap, int ms,
		       int (*done)(const char *buf, size_t len, void *arg), void *arg)
{
	int64_t end = clock_ms() + ms;
	for (size_t len = 0; len < cap;) {
		int64_t left = end - clock_ms();
		if (left <= 0 || tcp_wait(fd, POLLIN, (int)left) <= 0)
			return -1;
		ssize_t got = recv(fd, buf + len, cap - len, 0);
		if (got <= 0)
			return -1;
		len += (size_t)got;
		int r = done(buf, len, arg);
		if (r)
			return r > 0 ? (ssize_t)len : -1;
	}
	return -1;
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
	/* On the heap: relays run on threads with small stacks. */
	unsigned char *buf = malloc(RELAY_BUF);
	int open_a = 1, open_b = 1;
	while (buf && (open_a || open_b)) {
		struct pollfd pf[2] = { { .fd = open_a ? a : -1, .events = POLLIN },
					{ .fd = open_b ? b : -1, .events = POLLIN } };
		int r = poll(pf, 2, idle_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		for (int i = 0; i < 2; i++) {
			if (!pf[i].revents)
				continue;
			int from = i ? b : a, to = i ? a : b;
			ssize_t got = recv(from, buf, RELAY_BUF, 0);
			if (got < 0 && errno == EINTR)
				continue;
			if (got == 0) {
				shutdown(to, SHUT_WR);
				*(i ? &open_b : &open_a) = 0;
			} else if (got < 0 || tcp_send_all(to, buf, (size_t)got) < 0) {
				open_a = open_b = 0; /* an error either way ends both */
				break;
			}
		}
	}
	free(buf);
}

void tcp_reset(int fd)
{
	struct linger l = { .l_onoff = 1, .l_linger = 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	close(fd);
}

/* Does the server's first answer switch to a WebSocket: HTTP/1.x 101
 * with "Upgrade: websocket" in its head (all in b[0..n))? */
static int switches(const char *b, ssize_t n)
{
	static const char want[] = "\r\nupgrade: websocket\r\n";
	size_t k = sizeof(want) - 1;
	if (n < 12 || memcmp(b, "HTTP/1.", 7) || memcmp(b + 8, " 101 ", 5))
		return 0;
	for (size_t i = 0; i + k <= (size_t)n; i++)
		if (!strncasecmp(b + i, want, k))
			return 1;
	return 0;
}

void tcp_send_timeout(int fd, int seconds)
{
	struct timeval tv = { .tv_sec = seconds };
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

void tcp_relay_one(int client, int server, long long body, int upgrade, int idle_ms)
{
	char *buf = malloc(RELAY_BUF);
	int client_open = 1, first = 1, ws = 0;
	while (buf) {
		struct pollfd pf[2] = { { .fd = client_open ? client : -1, .events = POLLIN },
					{ .fd = server, .events = POLLIN } };
		int r = poll(pf, 2, idle_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (pf[1].revents) {
			ssize_t got = recv(server, buf, RELAY_BUF, 0);
			if (got < 0 && errno == EINTR)
				continue;
			if (got <= 0 || tcp_send_all(client, buf, (size_t)got) < 0)
				break;
			/* a WebSocket now: no more requests, both ways as they are */
			ws = first && upgrade && switches(buf, got);
			first = 0;
			if (ws)
				break;
		}
		if (pf[0].revents) {
			size_t want = body <= 0 ? 1 : body < RELAY_BUF ? (size_t)body : RELAY_BUF;
			ssize_t got = recv(client, buf, want, 0);
			if (got < 0 && errno == EINTR)
				continue;
			if (got == 0) {
				shutdown(server, SHUT_WR);
				client_open = 0;
			} else if (got < 0 || body <= 0 || tcp_send_all(server, buf, (size_t)got) < 0) {
				break; /* a byte past the request (or an error) */
			} else {
				body -= got;
			}
		}
	}
	free(buf);
	if (ws)
		tcp_relay(client, server, idle_ms);
}

int tcp_peer_gone(int fd)
{
	if (fd < 0)
		return 0;
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
	if (poll(&p, 1, 0) <= 0)
		return 0;
	if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP))
		return 1;
	char c;
	return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

int tcp_listen(const char *addr, char *err, size_t errlen)
{
	char host[64];
	const char *colon = strrchr(addr, ':');
	char *end = NULL;
	long port = colon ? strtol(colon + 1, &end, 10) : -1;
	if (!colon || (size_t)(colon - addr) >= sizeof(host) || port < 0 || port > 65535 || *end ||
	    end == colon + 1) {
		snprintf(err, errlen, "invalid listen address '%s' (HOST:PORT)", addr);
		return -EINVAL;
	}
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
		snprintf(err, errlen, "invalid listen address '%s' (IPv4 HOST:PORT)", addr);
		return -EINVAL;
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int on = 1;
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 128) < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	return fd;
}
