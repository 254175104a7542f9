/* unixsock: a retrying Unix socket connect that follows no symlink, and
 * waits for its socket to appear on an inotify watch, not by sleeping;
 * and messages with descriptors beside them. */
#include "common/unixsock.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define REFUSED_MS 5 /* a socket bound but not listening yet: asked again after */

/* An inotify descriptor watching the directory of path for names made
 * or moved there, or -1 (no directory yet, out of watches). */
static int watch_dir(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if ((size_t)snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path),
				  path) >= sizeof(dir))
		return -1;
	int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (in >= 0 && inotify_add_watch(in, dir, IN_CREATE | IN_MOVED_TO | IN_ATTRIB) < 0) {
		close(in);
		in = -1;
	}
	return in;
}

/* Waits up to ms for the directory to change (in >= 0) or just ms. */
static void wait_change(int in, int ms)
{
	struct pollfd p = { .fd = in, .events = POLLIN };
	if (poll(&p, in >= 0 ? 1 : 0, ms) > 0) {
		char ev[4096];
		while (read(in, ev, sizeof(ev)) > 0)
			; /* drained: the next turn looks again */
	}
}

int unix_connect(const char *path, int timeout_ms)
{
	int64_t deadline = clock_ms() + timeout_ms;
	int in = -1, watched = 0;
	for (;;) {
		/* The socket itself, never where a symlink in its place
		 * points: the directories these live in are a jailed QEMU's
		 * to write. Connected through /proc/self/fd, which names the
		 * very inode checked. */
		int at = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC), e = 0;
		struct stat st;
		if (at < 0)
			e = errno;
		else if (fstat(at, &st) < 0)
			e = errno;
		else if (!S_ISSOCK(st.st_mode))
			e = ENOTSOCK;
		/* Non-blocking: a listener whose queue its owner keeps full
		 * would hold a blocking connect for ever (EAGAIN: retried). */
		int fd = e ? -1 : socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (!e && fd < 0)
			e = errno;
		if (!e) {
			struct sockaddr_un sa = { .sun_family = AF_UNIX };
			snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d", at);
			if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
				e = errno == EAGAIN ? ECONNREFUSED : errno;
			int fl = e ? 0 : fcntl(fd, F_GETFL);
			if (!e && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0))
				e = errno;
		}
		if (at >= 0)
			close(at);
		if (fd >= 0 && e)
			close(fd);
		int64_t left = deadline - clock_ms();
		if (!e || (e != ENOENT && e != ECONNREFUSED) || left <= 0) {
			if (in >= 0)
				close(in);
			return e ? -e : fd;
		}
		/* The watch comes before the next try, so a socket made
		 * between a try and the wait is not missed: after making it,
		 * try at once. A socket that is there and refuses is asked
		 * again shortly: its listen(2) makes no event. */
		if (!watched) {
			in = watch_dir(path);
			watched = 1;
			continue;
		}
		int ms = left > INT_MAX ? INT_MAX : (int)left;
		wait_change(in, e == ENOENT && in >= 0 ? ms : ms < REFUSED_MS ? ms : REFUSED_MS);
	}
}

int unix_send_fds(int sock, const void *p, size_t n, const int *fds, int nfds)
{
	union {
		char space[CMSG_SPACE(sizeof(int) * UNIX_MAX_FDS)];
		struct cmsghdr align;
	} c;
	struct iovec iov = { (void *)p, n };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds < 0 || nfds > UNIX_MAX_FDS)
		return -EINVAL;
	if (nfds > 0) {
		memset(&c, 0, sizeof(c));
		m.msg_control = c.space;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *h = CMSG_FIRSTHDR(&m);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(h), fds, sizeof(int) * (size_t)nfds);
	}
	ssize_t w;
	while ((w = sendmsg(sock, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return w == (ssize_t)n ? 0 : w < 0 ? -errno : -EIO;
}

ssize_t unix_recv_fds(int sock, void *buf, size_t cap, int *fds, int max, int *nfds)
{
	union {
		char space[CMSG_SPACE(sizeof(int) * UNIX_MAX_FDS)];
		struct cmsghdr align;
	} c;
	struct iovec iov = { buf, cap };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.space,
			    .msg_controllen = sizeof(c.space) };
	ssize_t n;
	while ((n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	*nfds = 0;
	for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); n >= 0 && h; h = CMSG_NXTHDR(&m, h))
		if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS)
			for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
				int got;
				memcpy(&got, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
				if (*nfds < max)
					fds[(*nfds)++] = got;
				else
					close(got);
			}
	if (n < 0)
		return -errno;
	return m.msg_flags & (MSG_TRUNC | MSG_CTRUNC) ? -EMSGSIZE : n;
}
