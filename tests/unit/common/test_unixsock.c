/* Unit tests for unix_connect (common/unixsock): a socket that appears
 * later is connected as soon as it listens (a wait on its directory, not
 * a sleep), a missing one times out, and nothing but a socket is taken. */
#include "common/clock.h"
#include "common/unixsock.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static char dir[64], path[128];
static int lfd = -1;

static int listen_at(const char *p)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(p) >= sizeof(sa.sun_path))
		return -1;
	memcpy(sa.sun_path, p, strlen(p) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static void *later(void *arg)
{
	poll(NULL, 0, (int)(intptr_t)arg);
	lfd = listen_at(path);
	return NULL;
}

static void test_appears(void)
{
	snprintf(path, sizeof(path), "%s/qmp.sock", dir);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, later, (void *)(intptr_t)150) == 0);
	int64_t t0 = clock_ms();
	int fd = unix_connect(path, 5000);
	int64_t took = clock_ms() - t0;
	CHECK(fd >= 0);
	CHECK(took >= 100 && took < 2000);
	pthread_join(t, NULL);
	if (fd >= 0)
		close(fd);
	/* there now: at once */
	t0 = clock_ms();
	fd = unix_connect(path, 5000);
	CHECK(fd >= 0 && clock_ms() - t0 < 1000);
	if (fd >= 0)
		close(fd);
	close(lfd);
	/* no listener any more: refused until the time is up */
	t0 = clock_ms();
	CHECK(unix_connect(path, 200) == -ECONNREFUSED);
	CHECK(clock_ms() - t0 >= 190);
	unlink(path);
}

static void test_refuses(void)
{
	char p[160];
	int64_t t0 = clock_ms();
	snprintf(p, sizeof(p), "%s/never.sock", dir);
	CHECK(unix_connect(p, 200) == -ENOENT);
	CHECK(clock_ms() - t0 >= 190);
	/* a directory that does not exist: waited for by polling, all the same */
	snprintf(p, sizeof(p), "%s/no/such.sock", dir);
	CHECK(unix_connect(p, 100) == -ENOENT);
	snprintf(p, sizeof(p), "%s/file", dir);
	FILE *f = fopen(p, "w");
	if (f)
		fclose(f);
	CHECK(unix_connect(p, 1000) == -ENOTSOCK);
	char link[160];
	snprintf(link, sizeof(link), "%s/link.sock", dir);
	snprintf(path, sizeof(path), "%s/real.sock", dir);
	int fd = listen_at(path);
	CHECK(fd >= 0 && symlink(path, link) == 0);
	CHECK(unix_connect(link, 1000) == -ENOTSOCK); /* never followed */
	if (fd >= 0)
		close(fd);
}

/* Each case in a directory of its own. */
static int setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/test_unixsock.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		t_note("cannot remove %s", dir);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "appears", test_appears },
		{ "refuses", test_refuses },
		{ 0 },
	};
	t_fixture(setup, teardown);
	return t_main(argc, argv, cases);
}
