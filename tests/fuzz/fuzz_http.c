/*
 * fuzz_http: libFuzzer target for cpuosd's request validation. The real
 * HTTP layer runs in-process (http_start over a real store with one API key
 * and a real sandbox manager whose guest files do not exist, so no VM ever
 * starts); each input is sent as raw bytes over a fresh connection and the
 * answer must be a well-formed HTTP response below 500 whose JSON bodies
 * parse, with an "error" object for every 4xx.
 * Input: byte 0 is flags (bit 0: add "Authorization: Bearer <key>" after
 * the request line; bit 1: over the Unix socket, where the caller is the
 * administrator, else TCP), the rest is the request.
 */
#include "common/log.h"
#include "daemon/api/api.h"
#include "daemon/http/http.h"
#include "daemon/sandbox/sbx.h"
#include "daemon/store/store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ANSWER_MS 10000 /* a handler that takes longer is stuck: no VM can start */

#define BUG(...)                                                                                   \
	do {                                                                                       \
		fprintf(stderr, "fuzz_http: " __VA_ARGS__);                                        \
		fputc('\n', stderr);                                                               \
		abort();                                                                           \
	} while (0)

static struct {
	char dir[48], sock[80], db[80], guest[80], tcp[32];
	char key[STORE_KEY_SECRET_LEN + 1];
	struct store *store;
	struct sbx_mgr *mgr;
	struct api_ctx api;
	struct http *http;
	struct sockaddr_in sin;
} g;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void teardown(void)
{
	http_stop(g.http);
	sbx_mgr_free(g.mgr);
	store_close(g.store);
	nftw(g.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A port nobody listens on now, for the TCP listener. */
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		BUG("cannot find a free port: %s", strerror(errno));
	close(fd);
	return ntohs(sa.sin_port);
}

static void setup(void)
{
	char err[512];
	signal(SIGPIPE, SIG_IGN);
	log_set_level(LOG_ERROR);
	snprintf(g.dir, sizeof(g.dir), "/tmp/cpuos-fuzz-http.XXXXXX");
	if (!mkdtemp(g.dir))
		BUG("mkdtemp: %s", strerror(errno));
	snprintf(g.db, sizeof(g.db), "%s/cpuos.db", g.dir);
	snprintf(g.sock, sizeof(g.sock), "%s/cpuosd.sock", g.dir);
	snprintf(g.guest, sizeof(g.guest), "%s/no-guest", g.dir);
	if (store_open(g.db, &g.store, err, sizeof(err)) < 0)
		BUG("%s", err);
	struct store_key k;
	if (store_key_create(g.store, "fuzz", "fuzz", g.key, &k) < 0)
		BUG("cannot create an API key");
	static struct sbx_config sc;
	sc = (struct sbx_config){
	    .state_dir = g.dir,
	    .guest_dir = g.guest,
	    .cache_dir = g.dir,
	    .qemu = "/nonexistent/qemu",
	    .accel = QEMU_ACCEL_TCG,
	    .max_sandboxes = 2,
	    .max_output = 1 << 20,
	    .images_off = 1, /* no pull, no import: fuzz_image has the unpacking */
	};
	if (sbx_mgr_new(&sc, g.store, &g.mgr) < 0)
		BUG("cannot start the sandbox manager");
	/* The daemon's defaults (config.c). */
	g.api = (struct api_ctx){
	    .store = g.store,
	    .sbx = g.mgr,
	    .guest_dir = g.guest,
	    .max_json_bytes = 1 << 20,
	    .max_file_bytes = 10ull << 30,
	    .max_output_bytes = 1 << 20,
	};
	int port = free_port();
	snprintf(g.tcp, sizeof(g.tcp), "127.0.0.1:%d", port);
	g.sin = (struct sockaddr_in){.sin_family = AF_INET,
				     .sin_port = htons((uint16_t)port),
				     .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (http_start(&g.api, g.tcp, g.sock, &g.http, err, sizeof(err)) < 0)
		BUG("%s", err);
	atexit(teardown);
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int dial(int unix_)
{
	int fd;
	if (unix_) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g.sock);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			BUG("connect '%s': %s", g.sock, strerror(errno));
	} else {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&g.sin, sizeof(g.sin)) < 0)
			BUG("connect %s: %s", g.tcp, strerror(errno));
	}
	return fd;
}

/* Sends req and half-closes, reading the answer as it comes (the server
 * may answer before it has read everything). The whole answer, NUL
 * terminated, in *out (malloc'd); its length is returned. */
static size_t exchange(int fd, const uint8_t *req, size_t n, char **out)
{
	size_t len = 0, cap = 4096, sent = 0;
	char *buf = malloc(cap + 1);
	if (!buf)
		BUG("out of memory");
	int64_t deadline = now_ms() + ANSWER_MS;
	int wr_open = 1;
	for (;;) {
		if (wr_open && sent == n) {
			shutdown(fd, SHUT_WR);
			wr_open = 0;
		}
		struct pollfd p = {.fd = fd, .events = POLLIN | (wr_open ? POLLOUT : 0)};
		int64_t left = deadline - now_ms();
		if (left <= 0)
			BUG("no complete answer within %d ms (%zu of %zu request bytes sent, %zu "
			    "answer bytes):\n%.*s",
			    ANSWER_MS, sent, n, len, (int)len, buf);
		int r = poll(&p, 1, (int)left);
		if (r < 0 && errno != EINTR)
			BUG("poll: %s", strerror(errno));
		if (r <= 0)
			continue;
		if (p.revents & POLLOUT) {
			ssize_t w = send(fd, req + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (w > 0)
				sent += (size_t)w;
			else if (w < 0 && errno != EAGAIN)
				wr_open = 0; /* the server stopped reading: fine */
		}
		if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
			if (cap - len < 4096) {
				char *b = realloc(buf, cap * 2 + 1);
				if (!b)
					BUG("out of memory");
				buf = b;
				cap *= 2;
			}
			ssize_t k = recv(fd, buf + len, cap - len, MSG_DONTWAIT);
			if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
				break; /* closed, or reset after an early answer */
			if (k > 0)
				len += (size_t)k;
		}
	}
	buf[len] = '\0';
	*out = buf;
	return len;
}

/* The value of header name in the header block [h, end), or NULL. */
static const char *header(const char *h, const char *end, const char *name, size_t *vlen)
{
	size_t nl = strlen(name);
	while (h < end) {
		const char *eol = memchr(h, '\n', (size_t)(end - h));
		if (!eol)
			eol = end;
		if ((size_t)(eol - h) > nl && !strncasecmp(h, name, nl) && h[nl] == ':') {
			const char *v = h + nl + 1;
			while (v < eol && (*v == ' ' || *v == '\t'))
				v++;
			const char *ve = eol;
			while (ve > v && (ve[-1] == '\r' || ve[-1] == ' '))
				ve--;
			*vlen = (size_t)(ve - v);
			return v;
		}
		h = eol + 1;
	}
	return NULL;
}

static void check_json(unsigned status, const char *body, size_t n, const char *all)
{
	json_error_t jerr;
	json_t *j = json_loadb(body, n, 0, &jerr);
	if (!j)
		BUG("status %u: JSON body does not parse (%s):\n%s", status, jerr.text, all);
	if (status >= 400) {
		json_t *e = json_object_get(j, "error");
		if (!json_is_object(e) || !json_is_string(json_object_get(e, "code")) ||
		    !json_is_string(json_object_get(e, "message")))
			BUG("status %u without an error object:\n%s", status, all);
	}
	json_decref(j);
}

/* Checks every response in the answer: status line, headers, a body of the
 * declared length (or to the end), JSON where it says JSON. head: the
 * request may be HEAD, whose answer has headers only. */
static void check_answer(const char *a, size_t n, int head)
{
	const char *p = a, *end = a + n;
	while (p < end) {
		unsigned status;
		int used = 0;
		if (end - p < 12 || sscanf(p, "HTTP/1.%*1[01] %3u%n", &status, &used) != 1 ||
		    used != 12)
			BUG("not an HTTP status line at offset %zu:\n%s", (size_t)(p - a), a);
		const char *hend = strstr(p, "\r\n\r\n");
		if (!hend)
			BUG("headers do not end:\n%s", a);
		const char *body = hend + 4;
		size_t vlen = 0, blen;
		const char *cl = header(p, hend + 2, "Content-Length", &vlen);
		const char *te = header(p, hend + 2, "Transfer-Encoding", &vlen);
		const char *ct = header(p, hend + 2, "Content-Type", &vlen);
		size_t ctlen = vlen;
		/* libmicrohttpd refuses what it cannot parse itself (400, 413,
		 * 414, 431, 501 for an unknown transfer coding, 505 for an HTTP
		 * version it does not speak) with an HTML page and no
		 * Content-Type, then closes; 0.9.75 sends the headers of that
		 * answer twice for a bad Content-Length. Not ours to check past
		 * its status. */
		if (status >= 400 && !ct) {
			if (status >= 500 && status != 501 && status != 505)
				BUG("status %u from the HTTP library:\n%s", status, a);
			return;
		}
		/* 501 is ours only for what this daemon is set up without (the
		 * fuzzer's has no image imports and no builder): a refusal,
		 * not a failure. */
		if (status < 100 || (status >= 500 && status != 501))
			BUG("status %u:\n%s", status, a);
		if (status < 200) { /* 100 Continue: the real answer follows */
			p = body;
			continue;
		}
		if (head) {
			return;
		} else if (cl) {
			char *e;
			unsigned long long v = strtoull(cl, &e, 10);
			if ((size_t)(end - body) < v)
				BUG("body shorter than its Content-Length (%llu):\n%s", v, a);
			blen = (size_t)v;
		} else if (te) {
			return; /* a stream: only a download has one, and no sandbox runs */
		} else {
			blen = (size_t)(end - body);
		}
		if (ct && ctlen >= 16 && !strncasecmp(ct, "application/json", 16))
			check_json(status, body, blen, a);
		p = body + blen;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!g.http)
		setup();
	if (size < 1)
		return 0;
	uint8_t flags = data[0];
	data++, size--;
	/* The Authorization header goes right after the request line. */
	char auth[sizeof(g.key) + 32];
	int alen =
	    flags & 1 ? snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", g.key) : 0;
	const uint8_t *nl = memchr(data, '\n', size);
	size_t split = nl ? (size_t)(nl - data) + 1 : size;
	uint8_t *req = malloc(size + (size_t)alen + 1);
	if (!req)
		BUG("out of memory");
	memcpy(req, data, split);
	memcpy(req + split, auth, (size_t)alen);
	memcpy(req + split + alen, data + split, size - split);
	int fd = dial(flags & 2);
	char *answer;
	size_t n = exchange(fd, req, size + (size_t)alen, &answer);
	close(fd);
	if (getenv("FUZZ_HTTP_VERBOSE")) /* what was asked and answered, for triage */
		fprintf(stderr, "---- request (flags %u)\n%.*s\n---- answer\n%s\n", flags,
			(int)(size + (size_t)alen), (const char *)req, answer);
	int head = size >= 4 && memmem(data, size, "HEAD", 4) != NULL;
	check_answer(answer, n, head);
	free(answer);
	free(req);
	return 0;
}
