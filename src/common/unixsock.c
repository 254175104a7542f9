/* unixsock: a retrying Unix socket connect that follows no symlink. */
#include "common/unixsock.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int unix_connect(const char *path, int timeout_ms)
{
	int64_t deadline = clock_ms() + timeout_ms;
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
		if (!e)
			return fd;
		if (fd >= 0)
			close(fd);
		if ((e != ENOENT && e != ECONNREFUSED) || clock_ms() >= deadline)
			return -e;
		usleep(5000);
	}
}
