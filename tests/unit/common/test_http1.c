/* Unit tests for the end of a chunked body as a relay finds it
 * (common/http1) and for a cluster's secret file (common/fs). */
#include "common/fs.h"
#include "common/http1.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Feeds s in pieces of step bytes: the bytes taken in all, -1 on an error;
 * *done as the last call left it. */
static long long feed(const char *s, size_t step, int *done)
{
	struct http1_chunks c = { 0 };
	size_t n = strlen(s), at = 0;
	long long took = 0;
	*done = 0;
	while (at < n && !*done) {
		size_t k = n - at < step ? n - at : step;
		long long r = http1_chunks_feed(&c, s + at, k, done);
		if (r < 0)
			return -1;
		took += r;
		at += k;
	}
	return took;
}

static void test_chunks_end(void)
{
	const char *body = "5\r\nhello\r\n1a;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n";
	char with_next[256];
	snprintf(with_next, sizeof(with_next), "%sGET /next HTTP/1.1\r\n\r\n", body);
	/* whole, byte by byte and in odd pieces: the end is found at the
	 * same byte, and the next request is not taken */
	for (size_t step = 1; step <= strlen(with_next); step += step < 8 ? 1 : 7) {
		int done;
		long long took = feed(with_next, step, &done);
		CHECK(done && took == (long long)strlen(body));
	}
	int done;
	const char *trailers = "4\r\nwiki\r\n0\r\nX-Sum: 1\r\nY: 2\r\n\r\n";
	CHECK(feed(trailers, 3, &done) == (long long)strlen(trailers) && done);
	/* not yet over */
	CHECK(feed("5\r\nhel", 2, &done) == 6 && !done);
	CHECK(feed("0\r\n\r", 1, &done) == 4 && !done);
}

static void test_chunks_refused(void)
{
	int done;
	CHECK(feed("x\r\n", 1, &done) == -1);                     /* no size */
	CHECK(feed("5\nhello\r\n0\r\n\r\n", 1, &done) == -1);       /* a bare LF */
	CHECK(feed("5\r\nhelloXX0\r\n\r\n", 4, &done) == -1);       /* no CRLF after the data */
	CHECK(feed("1000000000000000\r\n", 5, &done) == -1);        /* 16 hex digits */
	CHECK(feed("0\r\n\n", 1, &done) == -1);                     /* a bare LF to end */
}

static void test_secret_file(void)
{
	char dir[] = "/tmp/test_http1.XXXXXX", path[64], out[64], err[256];
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/secret", dir);
	const char *good = "0123456789abcdef0123456789abcdef0123";
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0 && write(fd, good, strlen(good)) == (ssize_t)strlen(good) &&
	      write(fd, "\n", 1) == 1);
	close(fd);
	CHECK(fs_read_secret(path, out, sizeof(out), err, sizeof(err)) == 0 && !strcmp(out, good));
	/* readable by others: refused */
	CHECK(chmod(path, 0644) == 0);
	CHECK(fs_read_secret(path, out, sizeof(out), err, sizeof(err)) == -EPERM &&
	      strstr(err, "chmod 600"));
	/* too short, and holding a space */
	CHECK(chmod(path, 0600) == 0);
	fd = open(path, O_WRONLY | O_TRUNC);
	CHECK(fd >= 0 && write(fd, "short", 5) == 5);
	close(fd);
	CHECK(fs_read_secret(path, out, sizeof(out), err, sizeof(err)) == -EINVAL);
	fd = open(path, O_WRONLY | O_TRUNC);
	CHECK(fd >= 0 && write(fd, "0123456789abcdef 0123456789abcdef", 33) == 33);
	close(fd);
	CHECK(fs_read_secret(path, out, sizeof(out), err, sizeof(err)) == -EINVAL);
	/* longer than the buffer */
	char big[100];
	memset(big, 'a', sizeof(big));
	fd = open(path, O_WRONLY | O_TRUNC);
	CHECK(fd >= 0 && write(fd, big, sizeof(big)) == (ssize_t)sizeof(big));
	close(fd);
	CHECK(fs_read_secret(path, out, sizeof(out), err, sizeof(err)) == -EINVAL);
	CHECK(fs_read_secret("/nonexistent/secret", out, sizeof(out), err, sizeof(err)) == -ENOENT);
	unlink(path);
	rmdir(dir);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "chunks_end", test_chunks_end },
		{ "chunks_refused", test_chunks_refused },
		{ "secret_file", test_secret_file },
		{ 0 },
	};
	return t_main(argc, argv, cases);
}
