/* Unit tests for the HTTP server library (lib/httpd), on loopback and a
 * Unix socket with raw requests: routes and captures, keys, the local
 * socket, body caps, streamed uploads with a deferred answer, streamed
 * answers, the program's error shape and its refusal codes. */
#include "lib/httpd.h"
#include "tests/lib/tap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define KEY "sesame"

struct app {
	char who[16];
	int chunks;
	size_t got;
};

static atomic_int finished;

static int h_thing(struct httpd_req *r)
{
	struct app *a = r->app;
	return httpd_reply_json(r, 200, json_pack("{s:s, s:s, s:s}", "id", r->param[0], "who",
						  a->who, "body", r->body ? r->body : ""));
}

static int h_two(struct httpd_req *r)
{
	json_t *j = json_pack("{s:s, s:s}", "a", r->param[0], "b", r->param[1]);
	return httpd_reply_json(r, 200, j);
}

static int h_silent(struct httpd_req *r)
{
	(void)r;
	return -5; /* answers nothing: the server says 500 */
}

static int h_long(struct httpd_req *r)
{
	char big[2000];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	return httpd_reply_error(r, 409, "t", "c", "%s", big);
}

struct counter {
	int left;
};

static ssize_t count_read(void *arg, char *buf, size_t max)
{
	struct counter *c = arg;
	if (!c->left)
		return 0;
	int n = snprintf(buf, max, "line %d\n", c->left--);
	return n;
}

static void count_done(void *arg)
{
	free(arg);
}

static int h_stream(struct httpd_req *r)
{
	struct counter *c = malloc(sizeof(*c));
	c->left = 3;
	return httpd_reply_stream(r, 200, "application/x-ndjson", count_read, count_done, c);
}

static void *writer(void *arg)
{
	int fd = (int)(intptr_t)arg;
	const char *parts[] = { "data: 1\n\n", "data: 2\n\n" };
	for (int i = 0; i < 2; i++) {
		poll(NULL, 0, 50);
		if (write(fd, parts[i], strlen(parts[i])) < 0)
			break;
	}
	close(fd);
	return NULL;
}

static int h_events(struct httpd_req *r)
{
	int p[2];
	pthread_t t;
	if (pipe(p) < 0 || pthread_create(&t, NULL, writer, (void *)(intptr_t)p[1]))
		return -1;
	pthread_detach(t);
	return httpd_reply_fd(r, 200, "text/event-stream", p[0]);
}

static atomic_int writer_saw_epipe;

/* Writes events until the answer is gone: a client that leaves closes the
 * pipe's read end, so this sees EPIPE. */
static void *endless(void *arg)
{
	int fd = (int)(intptr_t)arg;
	for (int i = 0; i < 500; i++) {
		if (write(fd, "data: x\n\n", 9) < 0) {
			atomic_store(&writer_saw_epipe, errno == EPIPE);
			break;
		}
		poll(NULL, 0, 10);
	}
	close(fd);
	return NULL;
}

static int h_endless(struct httpd_req *r)
{
	int p[2];
	pthread_t t;
	if (pipe(p) < 0 || pthread_create(&t, NULL, endless, (void *)(intptr_t)p[1]))
		return -1;
	pthread_detach(t);
	return httpd_reply_fd(r, 200, "text/event-stream", p[0]);
}

static int h_query(struct httpd_req *r)
{
	int bad = 0;
	const char *v = httpd_query(r, "q", &bad);
	return httpd_reply_json(r, 200, json_pack("{s:s?, s:b}", "q", bad ? NULL : v, "bad", bad));
}

static const struct httpd_route routes[] = {
	{ "GET", "/things/{id}", 0, h_thing, NULL },
	{ "POST", "/things/{id}", 0, h_thing, NULL },
	{ "GET", "/a/{x}/b/{y}", 0, h_two, NULL },
	{ "GET", "/open", HTTPD_OPEN, h_thing, NULL },
	{ "GET", "/local", HTTPD_LOCAL, h_thing, NULL },
	{ "PUT", "/file", HTTPD_FILE, h_thing, NULL },
	{ "PUT", "/upload/{id}", HTTPD_UPLOAD, NULL, NULL },
	{ "GET", "/silent", 0, h_silent, NULL },
	{ "GET", "/long", 0, h_long, NULL },
	{ "GET", "/stream", 0, h_stream, NULL },
	{ "GET", "/events", 0, h_events, NULL },
	{ "GET", "/endless", 0, h_endless, NULL },
	{ "GET", "/query", 0, h_query, NULL },
	{ NULL, NULL, 0, NULL, NULL },
};

static void on_start(struct httpd_req *r)
{
	struct app *a = r->app;
	snprintf(a->who, sizeof(a->who), "%s", r->local ? "local" : "nobody");
}

static int on_auth(struct httpd_req *r, const char *key)
{
	struct app *a = r->app;
	if (strcmp(key, KEY))
		return -ENOENT;
	snprintf(a->who, sizeof(a->who), "keyholder");
	return 0;
}

/* An upload that counts its bytes; a body that starts with "bad" is
 * refused while it still streams (the answer waits for its end). */
static int on_upload(struct httpd_req *r, enum httpd_up phase, const char *data, size_t n)
{
	struct app *a = r->app;
	if (phase == HTTPD_UP_DATA) {
		if (!a->got && n >= 3 && !memcmp(data, "bad", 3))
			return httpd_reply_error(r, 400, "t", "bad_upload", "no");
		a->chunks++;
		a->got += n;
		return 0;
	}
	if (phase == HTTPD_UP_END)
		return httpd_reply_json(r, 201, json_pack("{s:s, s:I}", "id", r->param[0], "got",
							  (json_int_t)a->got));
	return 0;
}

static void on_finish(struct httpd_req *r)
{
	(void)r;
	atomic_fetch_add(&finished, 1);
}

/* The program's shape: {"error": {"type", "code", "message"}}. */
static json_t *error_body(const char *type, const char *code, const char *msg)
{
	return json_pack("{s:{s:s?, s:s, s:s}}", "error", "type", type, "code", code, "message",
			 msg);
}

static const struct httpd_ops ops = {
	.start = on_start,
	.auth = on_auth,
	.upload = on_upload,
	.finish = on_finish,
	.error_body = error_body,
};

static const struct httpd_code codes[HTTPD_REFUSALS] = {
	[HTTPD_NO_KEY] = { "auth", "no_key" },	    [HTTPD_BAD_KEY] = { "auth", "bad_key" },
	[HTTPD_NO_ROUTE] = { "req", "no_route" },   [HTTPD_BAD_METHOD] = { "req", "bad_method" },
	[HTTPD_EXPECT] = { "req", "expect" },	    [HTTPD_TOO_BIG] = { "req", "too_big" },
	[HTTPD_INTERNAL] = { "server", "internal" },
};

static struct {
	struct httpd *h;
	struct sockaddr_in sin;
	char sock[64], dir[32];
} g;

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int port = -1;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static int start(void)
{
	static char tcp[32];
	static struct httpd_config c;
	int port = free_port();
	snprintf(g.dir, sizeof(g.dir), "/tmp/test_httpd.XXXXXX");
	if (port < 0 || !mkdtemp(g.dir))
		return -1;
	snprintf(g.sock, sizeof(g.sock), "%s/s.sock", g.dir);
	snprintf(tcp, sizeof(tcp), "127.0.0.1:%d", port);
	g.sin = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				      .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	c = (struct httpd_config){
		.tcp = tcp,
		.unix_path = g.sock,
		.routes = routes,
		.ops = &ops,
		.app_size = sizeof(struct app),
		.codes = codes,
		.key_form = "<key>",
		.param_max = 8,
		.max_body = 64,
		.max_file = 128,
		.max_conns = 16,
		.max_conns_per_ip = 8,
		.idle_s = 10,
		.message_max = 100,
	};
	char err[256];
	if (httpd_start(&c, &g.h, err, sizeof(err)) < 0) {
		t_note("%s", err);
		return -1;
	}
	return 0;
}

/* Sends req over TCP (or the Unix socket) and reads the whole answer
 * (requests say Connection: close) into out[cap]: its status, or -1. */
static int ask(int local, const char *req, char *out, size_t cap)
{
	int fd;
	if (local) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g.sock);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			return -1;
	} else {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&g.sin, sizeof(g.sin)) < 0)
			return -1;
	}
	size_t len = 0, n = strlen(req);
	if (send(fd, req, n, MSG_NOSIGNAL) != (ssize_t)n) {
		close(fd);
		return -1;
	}
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (len + 1 >= cap || poll(&p, 1, 5000) != 1)
			break;
		ssize_t k = recv(fd, out + len, cap - 1 - len, 0);
		if (k <= 0)
			break;
		len += (size_t)k;
	}
	out[len] = '\0';
	close(fd);
	int status = -1;
	return sscanf(out, "HTTP/1.1 %d", &status) == 1 ? status : -1;
}

/* The answer's JSON body, or NULL. */
static json_t *body_of(const char *answer)
{
	const char *b = strstr(answer, "\r\n\r\n");
	return b ? json_loads(b + 4, 0, NULL) : NULL;
}

static int error_is(const char *answer, const char *type, const char *code)
{
	json_t *j = body_of(answer), *e = json_object_get(j, "error");
	int ok = e && !strcmp(json_string_value(json_object_get(e, "code")), code) &&
		 (!type ? json_is_null(json_object_get(e, "type"))
			: !strcmp(json_string_value(json_object_get(e, "type")), type));
	json_decref(j);
	return ok;
}

static const char *field(json_t *j, const char *name)
{
	const char *v = json_string_value(json_object_get(j, name));
	return v ? v : "";
}

#define GET(path, extra) "GET " path " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" extra "\r\n"
#define AUTH "Authorization: Bearer " KEY "\r\n"

static void test_routes(void)
{
	char a[8192];
	CHECK(ask(0, GET("/things/abc", AUTH), a, sizeof(a)) == 200);
	json_t *j = body_of(a);
	CHECK(!strcmp(field(j, "id"), "abc") && !strcmp(field(j, "who"), "keyholder"));
	json_decref(j);
	CHECK(ask(0, GET("/a/1/b/22", AUTH), a, sizeof(a)) == 200);
	j = body_of(a);
	CHECK(!strcmp(field(j, "a"), "1") && !strcmp(field(j, "b"), "22"));
	json_decref(j);
	/* a capture of param_max bytes or more matches nothing */
	CHECK(ask(0, GET("/things/1234567", AUTH), a, sizeof(a)) == 200);
	CHECK(ask(0, GET("/things/12345678", AUTH), a, sizeof(a)) == 404);
	CHECK(error_is(a, "req", "no_route") && strstr(a, "no route GET /things/12345678"));
	CHECK(ask(0, "DELETE /things/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" AUTH "\r\n", a,
		  sizeof(a)) == 405);
	CHECK(error_is(a, "req", "bad_method") && strstr(a, "DELETE is not allowed on /things/x"));
	CHECK(ask(0, GET("/things/", AUTH), a, sizeof(a)) == 404);
	CHECK(ask(0, GET("/query?q=v", AUTH), a, sizeof(a)) == 200 && strstr(a, "\"q\":\"v\""));
	CHECK(ask(0, GET("/query?q=a%00b", AUTH), a, sizeof(a)) == 200);
	CHECK(strstr(a, "\"bad\":true") != NULL); /* a NUL in a value is told, not cut */
}

static void test_keys(void)
{
	char a[8192];
	/* no route and no key: the key is asked for first */
	CHECK(ask(0, GET("/nowhere", ""), a, sizeof(a)) == 401 && error_is(a, "auth", "no_key"));
	CHECK(strstr(a, "missing API key (Authorization: Bearer <key>)") != NULL);
	CHECK(ask(0, GET("/things/a", "Authorization: Bearer nope\r\n"), a, sizeof(a)) == 401);
	CHECK(error_is(a, "auth", "bad_key"));
	CHECK(ask(0, GET("/things/a", "Authorization: Basic " KEY "\r\n"), a, sizeof(a)) == 401);
	CHECK(ask(0, GET("/open", ""), a, sizeof(a)) == 200 && strstr(a, "\"who\":\"nobody\""));
	/* the Unix socket needs no key and may use local routes; TCP may not */
	CHECK(ask(1, GET("/things/a", ""), a, sizeof(a)) == 200 && strstr(a, "\"who\":\"local\""));
	CHECK(ask(1, GET("/local", ""), a, sizeof(a)) == 200);
	CHECK(ask(0, GET("/local", AUTH), a, sizeof(a)) == 404 && error_is(a, "req", "no_route"));
	CHECK(ask(0, GET("/local", ""), a, sizeof(a)) == 401);
}

static void test_bodies(void)
{
	char a[8192];
	CHECK(ask(0, "POST /things/b HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" AUTH
		     "Content-Length: 5\r\n\r\nhello",
		  a, sizeof(a)) == 200 &&
	      strstr(a, "\"body\":\"hello\""));
	/* declared over the cap: refused before it is read */
	CHECK(ask(0, "POST /things/b HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" AUTH
		     "Content-Length: 65\r\n\r\n",
		  a, sizeof(a)) == 413);
	CHECK(error_is(a, "req", "too_big") && strstr(a, "body over 64 bytes"));
	/* chunked past the cap: refused at its end */
	char req[1024];
	snprintf(req, sizeof(req),
		 "POST /things/b HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" AUTH
		 "Transfer-Encoding: chunked\r\n\r\n28\r\n%040d\r\n28\r\n%040d\r\n0\r\n\r\n",
		 0, 0);
	CHECK(ask(0, req, a, sizeof(a)) == 413 && strstr(a, "body over 64 bytes"));
	/* a file route has the file cap */
	snprintf(req, sizeof(req),
		 "PUT /file HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" AUTH
		 "Content-Length: 100\r\n\r\n%0100d",
		 0);
	CHECK(ask(0, req, a, sizeof(a)) == 200);
	CHECK(ask(0, "PUT /file HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" AUTH
		     "Content-Length: 129\r\n\r\n",
		  a, sizeof(a)) == 413 &&
	      strstr(a, "body over 128 bytes"));
	CHECK(ask(0, GET("/things/b", AUTH "Expect: 100-continue\r\n"), a, sizeof(a)) == 417);
	CHECK(error_is(a, "req", "expect"));
}

static void test_uploads(void)
{
	char a[8192], req[1024];
	snprintf(req, sizeof(req),
		 "PUT /upload/u1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" AUTH
		 "Content-Length: 100\r\n\r\n%0100d",
		 0);
	CHECK(ask(0, req, a, sizeof(a)) == 201 && strstr(a, "\"id\":\"u1\"") &&
	      strstr(a, "\"got\":100"));
	/* refused while the body streams: the answer comes after it */
	snprintf(req, sizeof(req),
		 "PUT /upload/u2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" AUTH
		 "Content-Length: 50\r\n\r\nbad%047d",
		 0);
	CHECK(ask(0, req, a, sizeof(a)) == 400 && error_is(a, "t", "bad_upload"));
	CHECK(ask(0, "PUT /upload/u3 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" AUTH
		     "Content-Length: 129\r\n\r\n",
		  a, sizeof(a)) == 413 &&
	      strstr(a, "file over 128 bytes"));
}

static void test_answers(void)
{
	char a[8192];
	int before = atomic_load(&finished);
	CHECK(ask(0, GET("/silent", AUTH), a, sizeof(a)) == 500);
	CHECK(error_is(a, "server", "internal") && strstr(a, "handler failed (-5)"));
	/* a message is cut to message_max */
	CHECK(ask(0, GET("/long", AUTH), a, sizeof(a)) == 409);
	json_t *j = body_of(a);
	CHECK(strlen(field(json_object_get(j, "error"), "message")) == 99);
	json_decref(j);
	CHECK(ask(0, GET("/stream", AUTH), a, sizeof(a)) == 200);
	CHECK(strstr(a, "Transfer-Encoding: chunked") && strstr(a, "line 3\n") &&
	      strstr(a, "line 1\n"));
	CHECK(ask(0, GET("/events", AUTH), a, sizeof(a)) == 200);
	CHECK(strstr(a, "Cache-Control: no-cache") && strstr(a, "data: 1\n\n") &&
	      strstr(a, "data: 2\n\n"));
	/* every request's finish hook ran (answers are read to their end) */
	CHECK(atomic_load(&finished) - before == 4);
}

/* A client that leaves an event stream ends it: the writer meets EPIPE. */
static void test_client_leaves(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	const char *req = GET("/endless", AUTH);
	char buf[512];
	struct pollfd p = { .fd = fd, .events = POLLIN };
	if (!CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&g.sin, sizeof(g.sin)) == 0))
		return;
	CHECK(send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req));
	CHECK(poll(&p, 1, 5000) == 1 && recv(fd, buf, sizeof(buf), 0) > 0);
	close(fd);
	for (int i = 0; i < 300 && !atomic_load(&writer_saw_epipe); i++)
		poll(NULL, 0, 10);
	CHECK(atomic_load(&writer_saw_epipe));
}

/* Each case's process serves its own: a server's threads do not cross
 * the fork of the case's process. */
static int setup(void)
{
	signal(SIGPIPE, SIG_IGN);
	return start();
}

static void teardown(void)
{
	httpd_stop(g.h);
	rmdir(g.dir);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "routes", test_routes },
		{ "keys", test_keys },
		{ "bodies", test_bodies },
		{ "uploads", test_uploads },
		{ "answers", test_answers },
		{ "client_leaves", test_client_leaves },
		{ 0 },
	};
	t_fixture(setup, teardown);
	return t_main(argc, argv, cases);
}
