/*
 * test_s3: the object store client against a real S3 server (Swift's
 * s3api, started once by tests/lib/objstore for the whole binary) and
 * against a hostile one (a socket in the test that answers what a broken
 * or taken-over store might).
 */
#include "lib/s3.h"

#include "common/buf.h"
#include "tests/lib/objstore.h"
#include "tests/lib/tap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int store_up;
static char tmpdir[64];

static int setup(void)
{
	if (!store_up)
		t_note("the object store did not start (see above)");
	return store_up ? 0 : -1;
}

static struct s3 *client(uint64_t part_size)
{
	struct s3_conf c;
	char err[256];
	struct s3 *s = NULL;
	if (!CHECK(s3_conf_env(&c, "CPUOS_S3", err, sizeof(err)) == 0)) {
		t_note("%s", err);
		return NULL;
	}
	c.part_size = part_size;
	if (!CHECK(s3_open(&s, &c, err, sizeof(err)) == 0))
		t_note("%s", err);
	return s;
}

/* A file of n pseudo-random bytes (seeded), and its SHA-256. */
static int make_file(const char *path, size_t n, unsigned seed, char sha[65])
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	unsigned char *p = malloc(n ? n : 1);
	unsigned x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		p[i] = (unsigned char)(x >> 16);
	}
	unsigned char md[32];
	unsigned int mdlen;
	EVP_Digest(p, n, md, &mdlen, EVP_sha256(), NULL);
	for (int i = 0; i < 32; i++)
		sprintf(sha + 2 * i, "%02x", md[i]);
	int ok = write(fd, p, n) == (ssize_t)n;
	free(p);
	if (!ok) {
		close(fd);
		return -1;
	}
	return fd;
}

static void test_small_objects_round_trip(void)
{
	struct s3 *s = client(0);
	if (!s)
		return;
	char err[256];
	struct buf b;
	buf_init(&b, 0);
	CHECK(s3_put_mem(s, "small/one", "hello, store", 12, err, sizeof(err)) == 0);
	CHECK(s3_put_mem(s, "small/empty", "", 0, err, sizeof(err)) == 0);
	CHECK(s3_get_mem(s, "small/one", &b, 1024, err, sizeof(err)) == 0);
	CHECK(b.len == 12 && !memcmp(b.p, "hello, store", 12));
	uint64_t size = 99;
	CHECK(s3_head(s, "small/one", &size, err, sizeof(err)) == 0 && size == 12);
	CHECK(s3_head(s, "small/empty", &size, err, sizeof(err)) == 0 && size == 0);
	/* Over the caller's limit: refused, nothing appended. */
	b.len = 0;
	CHECK(s3_get_mem(s, "small/one", &b, 5, err, sizeof(err)) == -EFBIG);
	CHECK(b.len == 0);
	CHECK(s3_delete(s, "small/one", err, sizeof(err)) == 0);
	int r = s3_head(s, "small/one", &size, err, sizeof(err));
	CHECK(r == -ENOENT);
	r = s3_get_mem(s, "small/one", &b, 1024, err, sizeof(err));
	if (!CHECK(r == -ENOENT))
		t_note("get of a deleted object: %d %s", r, err);
	t_note("a missing object: %s", err);
	CHECK(strstr(err, "404") && strstr(err, "NoSuchKey"));
	CHECK(s3_delete(s, "small/one", err, sizeof(err)) == 0); /* gone already: fine */
	CHECK(s3_bucket_create(s, err, sizeof(err)) == 0);       /* ours already: fine */
	buf_release(&b);
	s3_close(s);
}

static void round_trip_file(uint64_t part_size, size_t n, const char *key)
{
	struct s3 *s = client(part_size);
	if (!s)
		return;
	char err[256], sha[65], put_sha[65] = "", get_sha[65] = "", in[128], out[128];
	snprintf(in, sizeof(in), "%s/in-%d", tmpdir, (int)getpid());
	snprintf(out, sizeof(out), "%s/out-%d", tmpdir, (int)getpid());
	int fd = make_file(in, n, (unsigned)n, sha);
	int ofd = open(out, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0 && ofd >= 0);
	int r = s3_put_fd(s, key, fd, n, put_sha, err, sizeof(err));
	if (!CHECK(r == 0))
		t_note("put: %s", err);
	CHECK(!strcmp(put_sha, sha));
	uint64_t size = 0;
	CHECK(s3_head(s, key, &size, err, sizeof(err)) == 0 && size == n);
	/* Something in the output file before: a get starts it over. */
	CHECK(write(ofd, "junk", 4) == 4);
	r = s3_get_fd(s, key, ofd, n, &size, get_sha, err, sizeof(err));
	if (!CHECK(r == 0))
		t_note("get: %s", err);
	CHECK(size == n && !strcmp(get_sha, sha));
	struct stat st;
	CHECK(fstat(ofd, &st) == 0 && (uint64_t)st.st_size == n);
	/* One byte short of the object: -EFBIG. */
	r = s3_get_fd(s, key, ofd, n - 1, &size, get_sha, err, sizeof(err));
	CHECK(r == -EFBIG);
	t_note("over the limit: %s", err);
	CHECK(s3_delete(s, key, err, sizeof(err)) == 0);
	close(fd);
	close(ofd);
	unlink(in);
	unlink(out);
	s3_close(s);
}

static void test_a_file_in_one_put(void)
{
	round_trip_file(0, (3 << 20) + 17, "files/one-put");
}

/* Three parts of 5 MiB, the last short; the whole checked by SHA-256. */
static void test_a_file_in_parts(void)
{
	round_trip_file(S3_PART_MIN, 2 * S3_PART_MIN + 4097, "files/in-parts");
}

/* A source of n pseudo-random bytes handed out in odd-sized reads. */
struct gen {
	uint64_t n, done;
	unsigned x;
	EVP_MD_CTX *h;
};

static ssize_t gen_read(void *arg, void *p, size_t n)
{
	struct gen *g = arg;
	if (n > 7777)
		n = 7777;
	if (n > g->n - g->done)
		n = (size_t)(g->n - g->done);
	for (size_t i = 0; i < n; i++) {
		g->x = g->x * 1103515245u + 12345u;
		((unsigned char *)p)[i] = (unsigned char)(g->x >> 16);
	}
	EVP_DigestUpdate(g->h, p, n);
	g->done += n;
	return (ssize_t)n;
}

static int sink_write(void *arg, const void *p, size_t n)
{
	struct gen *g = arg;
	EVP_DigestUpdate(g->h, p, n);
	g->done += n;
	return 0;
}

static int sink_reset(void *arg)
{
	struct gen *g = arg;
	g->done = 0;
	EVP_DigestInit_ex(g->h, EVP_sha256(), NULL);
	return 0;
}

/* Sources of unknown size: under a part (one PUT), over one (parts),
 * exactly two parts (no empty third), and nothing; back through a sink. */
static void test_sources_and_sinks(void)
{
	struct s3 *s = client(S3_PART_MIN);
	if (!s)
		return;
	static const uint64_t sizes[] = { 100, 2 * S3_PART_MIN + 5, 2 * S3_PART_MIN, 0 };
	char err[256];
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		struct gen in = { .n = sizes[i], .x = (unsigned)i, .h = EVP_MD_CTX_new() };
		struct gen out = { .h = EVP_MD_CTX_new() };
		EVP_DigestInit_ex(in.h, EVP_sha256(), NULL);
		struct s3_source src = { gen_read, &in };
		uint64_t size = 1;
		int r = s3_put_source(s, "source/x", &src, &size, err, sizeof(err));
		if (!CHECK(r == 0 && size == sizes[i]))
			t_note("%llu bytes: %d %s", (unsigned long long)sizes[i], r, err);
		struct s3_sink sink = { sink_write, sink_reset, &out };
		r = s3_get_sink(s, "source/x", sizes[i], &sink, &size, err, sizeof(err));
		CHECK(r == 0 && size == sizes[i] && out.done == sizes[i]);
		unsigned char a[32], b[32];
		unsigned int al, bl;
		EVP_DigestFinal_ex(in.h, a, &al);
		EVP_DigestFinal_ex(out.h, b, &bl);
		CHECK(!memcmp(a, b, 32));
		if (sizes[i])
			CHECK(s3_get_sink(s, "source/x", sizes[i] - 1, &sink, &size, err,
					  sizeof(err)) == -EFBIG);
		EVP_MD_CTX_free(in.h);
		EVP_MD_CTX_free(out.h);
	}
	s3_delete(s, "source/x", err, sizeof(err));
	s3_close(s);
}

static int cancel_flag;

static void *cancel_soon(void *arg)
{
	(void)arg;
	struct timespec ts = { 0, 100 * 1000000L };
	nanosleep(&ts, NULL);
	__atomic_store_n(&cancel_flag, 1, __ATOMIC_RELAXED);
	return NULL;
}

/* Cancelled before it starts, and in the middle of a multipart upload:
 * -ECANCELED at once, not retried, and no object left behind. */
static void test_a_transfer_is_cancelled(void)
{
	struct s3 *s = client(S3_PART_MIN);
	if (!s)
		return;
	char err[256], sha[65], in[128];
	s3_set_cancel(s, &cancel_flag);
	cancel_flag = 1;
	CHECK(s3_put_mem(s, "cancel/before", "x", 1, err, sizeof(err)) == -ECANCELED);
	t_note("%s", err);
	cancel_flag = 0;
	snprintf(in, sizeof(in), "%s/cancel-%d", tmpdir, (int)getpid());
	size_t n = 40 * S3_PART_MIN; /* 200 MiB: far more than 100 ms of work */
	int fd = make_file(in, n, 3, sha);
	pthread_t t;
	CHECK(fd >= 0 && pthread_create(&t, NULL, cancel_soon, NULL) == 0);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	int r = s3_put_fd(s, "cancel/during", fd, n, NULL, err, sizeof(err));
	clock_gettime(CLOCK_MONOTONIC, &b);
	pthread_join(t, NULL);
	CHECK(r == -ECANCELED);
	t_note("%s, after %.0f ms", err,
	       (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6);
	s3_set_cancel(s, NULL);
	uint64_t size;
	CHECK(s3_head(s, "cancel/during", &size, err, sizeof(err)) == -ENOENT);
	close(fd);
	unlink(in);
	s3_close(s);
}

static void test_names_and_settings_refused(void)
{
	static const char *const bad_keys[] = { "", "/a", "a/", "a//b", "../a", "a/./b",
						"a b", "a?b", "a%2f", "ä" };
	for (size_t i = 0; i < sizeof(bad_keys) / sizeof(bad_keys[0]); i++)
		CHECK(!s3_key_ok(bad_keys[i]));
	CHECK(s3_key_ok("snapshots/sha256-0af/mem") && s3_key_ok("a.b_c-d"));
	char long_key[S3_KEY_MAX + 2];
	memset(long_key, 'k', sizeof(long_key) - 1);
	long_key[sizeof(long_key) - 1] = '\0';
	CHECK(!s3_key_ok(long_key));
	struct s3 *s = client(0);
	if (!s)
		return;
	char err[256];
	CHECK(s3_put_mem(s, "../escape", "x", 1, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "cannot name an object") != NULL);
	s3_close(s);

	struct s3_conf c;
	CHECK(s3_conf_env(&c, "CPUOS_S3", err, sizeof(err)) == 0);
	static const char *const endpoints[] = { "ftp://h", "http://", "http://h/path",
						 "http://u@h", "http://h:99999", "http://h?x" };
	for (size_t i = 0; i < sizeof(endpoints) / sizeof(endpoints[0]); i++) {
		struct s3_conf b = c;
		snprintf(b.endpoint, sizeof(b.endpoint), "%s", endpoints[i]);
		CHECK(s3_open(&s, &b, err, sizeof(err)) == -EINVAL && s == NULL);
	}
	struct s3_conf b = c;
	snprintf(b.bucket, sizeof(b.bucket), "Bad_Bucket");
	CHECK(s3_open(&s, &b, err, sizeof(err)) == -EINVAL);
	t_note("%s", err);
	b = c;
	b.part_size = 1 << 20;
	CHECK(s3_open(&s, &b, err, sizeof(err)) == -EINVAL);
	unsetenv("CPUOS_S3_BUCKET");
	CHECK(s3_conf_env(&c, "CPUOS_S3", err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "CPUOS_S3_BUCKET") != NULL);
}

static void test_a_wrong_secret_is_refused(void)
{
	struct s3_conf c;
	char err[256];
	struct s3 *s = NULL;
	CHECK(s3_conf_env(&c, "CPUOS_S3", err, sizeof(err)) == 0);
	snprintf(c.secret_key, sizeof(c.secret_key), "not-the-secret");
	CHECK(s3_open(&s, &c, err, sizeof(err)) == 0);
	int r = s3_put_mem(s, "denied", "x", 1, err, sizeof(err));
	CHECK(r == -EACCES);
	t_note("%s", err);
	CHECK(strstr(err, "403") != NULL);
	s3_close(s);
}

static void test_no_store_listening(void)
{
	struct s3_conf c;
	char err[256];
	struct s3 *s = NULL;
	CHECK(s3_conf_env(&c, "CPUOS_S3", err, sizeof(err)) == 0);
	/* A port nothing listens on: bound and never listened. */
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof(a);
	CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	      getsockname(fd, (struct sockaddr *)&a, &al) == 0);
	snprintf(c.endpoint, sizeof(c.endpoint), "http://127.0.0.1:%d", ntohs(a.sin_port));
	CHECK(s3_open(&s, &c, err, sizeof(err)) == 0);
	CHECK(s3_put_mem(s, "k", "x", 1, err, sizeof(err)) == -EAGAIN);
	t_note("%s", err);
	s3_close(s);
	close(fd);
}

/* A store that answers each request with the next canned answer. */
struct hostile {
	int fd;
	const char *const *answers;
	int n;
};

static void *hostile_serve(void *arg)
{
	struct hostile *h = arg;
	for (int i = 0; i < h->n; i++) {
		int c = accept(h->fd, NULL, NULL);
		if (c < 0)
			return NULL;
		/* Read the request head (and any small body) before answering. */
		char req[65536];
		size_t got = 0;
		while (got < sizeof(req) - 1) {
			ssize_t n = recv(c, req + got, sizeof(req) - 1 - got, 0);
			if (n <= 0)
				break;
			got += (size_t)n;
			req[got] = '\0';
			char *end = strstr(req, "\r\n\r\n");
			if (!end)
				continue;
			const char *cl = strcasestr(req, "content-length:");
			size_t body = cl ? (size_t)strtoul(cl + 15, NULL, 10) : 0;
			if (got >= (size_t)(end + 4 - req) + body || body > 4096)
				break;
		}
		const char *a = h->answers[i];
		if (send(c, a, strlen(a), MSG_NOSIGNAL) < 0)
			t_note("hostile store: send: %s", strerror(errno));
		shutdown(c, SHUT_WR);
		close(c);
	}
	return NULL;
}

static struct s3 *hostile_client(struct hostile *h, pthread_t *t, uint64_t part_size)
{
	h->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof(a);
	CHECK(bind(h->fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(h->fd, 8) == 0 &&
	      getsockname(h->fd, (struct sockaddr *)&a, &al) == 0);
	CHECK(pthread_create(t, NULL, hostile_serve, h) == 0);
	struct s3_conf c = { .region = "us-east-1", .bucket = "bkt", .access_key = "a",
			     .secret_key = "b", .part_size = part_size };
	snprintf(c.endpoint, sizeof(c.endpoint), "http://127.0.0.1:%d", ntohs(a.sin_port));
	char err[256];
	struct s3 *s = NULL;
	CHECK(s3_open(&s, &c, err, sizeof(err)) == 0);
	return s;
}

static void test_a_hostile_store(void)
{
	static const char *const answers[] = {
		/* 1. An error whose text carries control bytes and markup. */
		"HTTP/1.1 400 Bad\r\nConnection: close\r\n\r\n"
		"<Error><Code>Evil\x1b[2J</Code><Message>a\x07&lt;b</Message></Error>",
		/* 2-4. A body shorter than it says: a transport error, three times. */
		"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\nshort",
		/* 5. A multipart upload begun with no UploadId in the answer. */
		"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\n<x/>",
		/* 6. A body with no length, longer than the caller allows. */
		"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n0123456789012345678901234567890123456789",
	};
	struct hostile h = { .answers = answers, .n = 6 };
	pthread_t t;
	struct s3 *s = hostile_client(&h, &t, S3_PART_MIN);
	if (!s)
		return;
	char err[256];
	struct buf b;
	buf_init(&b, 0);
	int r = s3_get_mem(s, "k", &b, 1024, err, sizeof(err));
	CHECK(r == -EIO);
	t_note("1: %s", err);
	for (const char *p = err; *p; p++)
		CHECK(*p >= 0x20 && *p < 0x7f);
	CHECK(strstr(err, "HTTP 400") && strstr(err, "a?<b"));
	r = s3_get_mem(s, "k", &b, 1024, err, sizeof(err));
	CHECK(r == -EAGAIN && b.len == 0);
	t_note("2-4: %s", err);
	char sha[65], in[128];
	snprintf(in, sizeof(in), "%s/hostile-%d", tmpdir, (int)getpid());
	int fd = make_file(in, S3_PART_MIN + 1, 1, sha);
	r = s3_put_fd(s, "k", fd, S3_PART_MIN + 1, NULL, err, sizeof(err));
	CHECK(r == -EIO);
	t_note("5: %s", err);
	CHECK(strstr(err, "names no upload") != NULL);
	int ofd = open(in, O_RDWR | O_TRUNC | O_CLOEXEC);
	uint64_t size = 0;
	r = s3_get_fd(s, "k", ofd, 16, &size, NULL, err, sizeof(err));
	CHECK(r == -EFBIG);
	t_note("6: %s", err);
	struct stat st;
	CHECK(fstat(ofd, &st) == 0 && st.st_size <= 16);
	pthread_join(t, NULL);
	close(fd);
	close(ofd);
	close(h.fd);
	unlink(in);
	buf_release(&b);
	s3_close(s);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "small_objects_round_trip", test_small_objects_round_trip },
		{ "a_file_in_one_put", test_a_file_in_one_put },
		{ "a_file_in_parts", test_a_file_in_parts },
		{ "a_transfer_is_cancelled", test_a_transfer_is_cancelled },
		{ "sources_and_sinks", test_sources_and_sinks },
		{ "names_and_settings_refused", test_names_and_settings_refused },
		{ "a_wrong_secret_is_refused", test_a_wrong_secret_is_refused },
		{ "no_store_listening", test_no_store_listening },
		{ "a_hostile_store", test_a_hostile_store },
		{ NULL, NULL },
	};
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/cpuos-test-s3-%d", (int)getpid());
	mkdir(tmpdir, 0700);
	char store[96];
	snprintf(store, sizeof(store), "%s/store", tmpdir);
	store_up = objstore_up(store, "cpuos-test-s3") == 0;
	t_fixture(setup, NULL);
	int rc = t_main(argc, argv, cases);
	objstore_down();
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "test_s3: could not remove %s\n", tmpdir);
	return rc;
}
