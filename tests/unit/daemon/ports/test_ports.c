/* Unit tests for port URLs: routes, and the proxy itself on loopback with a
 * stand-in guest (one end of a socketpair) behind its dial callback. */
#include "daemon/ports/ports.h"
#include "tests/lib/tap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define ID "sbx_0123456789abcdef"
#define TOKEN "00112233445566778899aabbccddeeff"

static int route(const char *domain, const char *target, const char *host, struct ports_route *r)
{
	return ports_route(domain, target, strlen(target), host, r);
}

static int rest_is(const struct ports_route *r, const char *want)
{
	return r->rest_len == strlen(want) && !memcmp(r->rest, want, r->rest_len);
}

static void test_routes(void)
{
	struct ports_route r;
	CHECK(route(NULL, "/" ID "/3000/a/b?c=1", "127.0.0.1", &r) == 1);
	CHECK(!strcmp(r.id, ID) && r.port == 3000 && r.by_path && rest_is(&r, "/a/b?c=1"));
	CHECK(route(NULL, "/" ID "/80", NULL, &r) == 1 && r.port == 80 && rest_is(&r, ""));
	CHECK(route(NULL, "/" ID "/80?x", NULL, &r) == 1 && rest_is(&r, "?x"));
	CHECK(route(NULL, "/" ID "/65535/", NULL, &r) == 1 && r.port == 65535);
	static const char *const bad[] = {
		"/", "/" ID, "/" ID "/", "/" ID "/0/", "/" ID "/65536/", "/" ID "/030/", "/" ID "/80x/",
		"/sbx_0123456789ABCDEF/80/", "/sbx_0123456789abcde/80/", "/box_0123456789abcdef/80/",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (!CHECK(route(NULL, bad[i], NULL, &r) == 0))
			t_note("routed: %s", bad[i]);
	/* by host under the domain; the path is the guest's */
	CHECK(route("sbx.test", "/x", "3000-0123456789abcdef.sbx.test", &r) == 1);
	CHECK(!strcmp(r.id, ID) && r.port == 3000 && !r.by_path && rest_is(&r, "/x"));
	CHECK(route("sbx.test", "/x", "3000-0123456789abcdef.sbx.test.evil", &r) == 0);
	CHECK(route("sbx.test", "/x", "3000-0123456789abcdef.a.sbx.test", &r) == 0);
	CHECK(route("sbx.test", "/x", "sbx.test", &r) == 0);
	CHECK(route("sbx.test", "/x", "0-0123456789abcdef.sbx.test", &r) == 0);
	CHECK(route("sbx.test", "/x", "3000-0123456789abcdef0.sbx.test", &r) == 0);
	/* with a domain, no path URLs: each sandbox has an origin of its own */
	CHECK(route("sbx.test", "/" ID "/8/", "other", &r) == 0);
}

/* --- the proxy, live ------------------------------------------------------------ */

/* The stand-in guest behind dial: reads a head, answers "hi", closes. */
static struct {
	int fd, running;
	pthread_t t;
	char got[8192];
} guest;

static void *guest_main(void *arg)
{
	(void)arg;
	size_t n = 0;
	while (n < sizeof(guest.got) - 1 && !strstr(guest.got, "\r\n\r\n")) {
		ssize_t r = read(guest.fd, guest.got + n, sizeof(guest.got) - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
		guest.got[n] = '\0';
	}
	/* and what else comes within a moment (a body, or what must not) */
	struct pollfd pf = { .fd = guest.fd, .events = POLLIN };
	ssize_t r;
	while (n < sizeof(guest.got) - 1 && poll(&pf, 1, 200) > 0 &&
	       (r = read(guest.fd, guest.got + n, sizeof(guest.got) - 1 - n)) > 0) {
		n += (size_t)r;
		guest.got[n] = '\0';
	}
	static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
	if (write(guest.fd, answer, sizeof(answer) - 1) < 0) {
		/* the test sees no answer */
	}
	close(guest.fd);
	return NULL;
}

static int dial(void *arg, const char *id, const char *token, unsigned port, int *fd, char *err,
		size_t errlen)
{
	(void)arg;
	if (strcmp(id, ID)) {
		snprintf(err, errlen, "no sandbox '%s'", id);
		return -ENOENT;
	}
	if (!token || strcmp(token, TOKEN)) {
		snprintf(err, errlen, "its traffic token is needed");
		return -EACCES;
	}
	if (port != 3000) {
		snprintf(err, errlen, "nothing listens on port %u", port);
		return -ECONNREFUSED;
	}
	if (!fd)
		return 0;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	guest.fd = sv[1];
	guest.running = pthread_create(&guest.t, NULL, guest_main, NULL) == 0;
	*fd = sv[0];
	return 0;
}

static int free_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int r = bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
			getsockname(s, (struct sockaddr *)&sa, &sl) == 0
		    ? ntohs(sa.sin_port)
		    : -1;
	close(s);
	return r;
}

/* Sends req to the proxy on port and reads its whole answer into out. */
static void ask(int port, const char *req, char *out, size_t outlen)
{
	memset(&guest, 0, sizeof(guest));
	out[0] = '\0';
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (CHECK(connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0) &&
	    CHECK(write(s, req, strlen(req)) == (ssize_t)strlen(req))) {
		size_t n = 0;
		ssize_t r;
		while (n < outlen - 1 && (r = read(s, out + n, outlen - 1 - n)) > 0)
			n += (size_t)r;
		out[n] = '\0';
	}
	close(s);
	if (guest.running)
		pthread_join(guest.t, NULL);
}

static void test_proxy(void)
{
	int port = free_port();
	char listen[32], err[256], out[8192], url[256];
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	struct ports_config c = { .listen = listen, .dial = dial };
	struct ports *p;
	if (!CHECK(ports_open(&c, &p, err, sizeof(err)) == 0)) {
		t_note("%s", err);
		return;
	}
	ports_url(p, ID, "ignored", url, sizeof(url));
	char want[128];
	snprintf(want, sizeof(want), "http://127.0.0.1:%d/" ID "/{port}/", port);
	CHECK(!strcmp(url, want));

	/* the guest's head: the prefix cut, our token gone, one request */
	ask(port,
	    "GET /" ID "/3000/app?q=1 HTTP/1.1\r\nHost: x\r\nCookie: a=1; cpuos_token=" TOKEN
	    "; b=2\r\nConnection: keep-alive\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n",
	    out, sizeof(out));
	CHECK(strstr(out, "200 OK") && strstr(out, "\r\n\r\nhi"));
	CHECK(!strncmp(guest.got, "GET /app?q=1 HTTP/1.1\r\n", 23));
	CHECK(strstr(guest.got, "\r\nCookie: a=1; b=2\r\n"));
	CHECK(!strstr(guest.got, TOKEN) && !strstr(guest.got, "keep-alive"));
	CHECK(strstr(guest.got, "\r\nConnection: close\r\n"));
	CHECK(strstr(guest.got, "X-Forwarded-For: 127.0.0.1\r\n") && !strstr(guest.got, "6.6.6.6"));
	ask(port, "GET /" ID "/3000 HTTP/1.1\r\n" PORTS_TOKEN_HEADER ": " TOKEN "\r\n\r\n", out,
	    sizeof(out));
	CHECK(!strncmp(guest.got, "GET / HTTP/1.1\r\n", 16) && !strstr(guest.got, TOKEN));

	/* one request per path URL connection: a second one never reaches
	 * the guest (it would be for any sandbox), nor bytes past the body */
	ask(port,
	    "POST /" ID "/3000/a HTTP/1.1\r\n" PORTS_TOKEN_HEADER ": " TOKEN
	    "\r\nContent-Length: 4\r\n\r\n"
	    "bodyGET /sbx_1111111111111111/3000/ HTTP/1.1\r\n\r\n",
	    out, sizeof(out));
	CHECK(strstr(out, "\r\n\r\nhi") && strstr(guest.got, "\r\n\r\nbody") &&
	      !strstr(guest.got, "sbx_1111"));
	/* a Cookie line of many pairs is rebuilt within bounds */
	char big[12000];
	int k = snprintf(big, sizeof(big), "GET /" ID "/3000/ HTTP/1.1\r\n" PORTS_TOKEN_HEADER ": " TOKEN
			 "\r\nCookie: ");
	while (k < 11000)
		k += snprintf(big + k, sizeof(big) - (size_t)k, "a;");
	snprintf(big + k, sizeof(big) - (size_t)k, "\r\n\r\n");
	ask(port, big, out, sizeof(out));
	CHECK(!strncmp(out, "HTTP/1.1 400", 12) || strstr(out, "\r\n\r\nhi"));
	/* heads the guest might read otherwise than we did */
	static const char *const odd[] = {
		"GET /" ID "/3000/ HTTP/1.1\r\nHost : x\r\n\r\n",
		"GET /" ID "/3000/ HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
		"GET /" ID "/3000/ HTTP/1.1\r\nA: b\nHost: y\r\n\r\n",
		"GET /" ID "/3000/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"GET /" ID "/3000/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET /" ID "/3000/ HTTP/2.0\r\n\r\n",
		"GET /" ID "/3000/ HTTP/1.1\r\nUpgrade: h2c\r\n\r\n",
		"GET /" ID "/3000/ HTTP/1.1\r\nUpgrade: h2c\r\nUpgrade: websocket\r\n\r\n",
		"POST /" ID "/3000/ HTTP/1.1\r\nUpgrade: websocket\r\nContent-Length: 5\r\n\r\n",
		"POST /" ID "/3000/ HTTP/1.1\r\nContent-Length: 1844674407370955162\r\n\r\n",
		"POST /" ID "/3000/ HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
		"POST /" ID "/3000/ HTTP/1.1\r\nContent-Length:\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		ask(port, odd[i], out, sizeof(out));
		if (!CHECK(!strncmp(out, "HTTP/1.1 400", 12)))
			t_note("accepted: %s", odd[i]);
	}
	ask(port, "POST /" ID "/3000/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", out, sizeof(out));
	CHECK(!strncmp(out, "HTTP/1.1 411", 12));

	/* the query token: a redirect without it, the cookie set */
	ask(port, "GET /" ID "/3000/x?a=1&cpuos_token=" TOKEN "&b=2 HTTP/1.1\r\n\r\n", out,
	    sizeof(out));
	CHECK(strstr(out, "302 Found") && strstr(out, "\r\nLocation: /" ID "/3000/x?a=1&b=2\r\n"));
	CHECK(strstr(out, "Set-Cookie: cpuos_token=" TOKEN "; Path=/" ID "/3000; HttpOnly"));
	ask(port, "GET /" ID "/3000/x?cpuos_token=" TOKEN " HTTP/1.1\r\n\r\n", out, sizeof(out));
	CHECK(strstr(out, "\r\nLocation: /" ID "/3000/x\r\n"));
	ask(port, "GET /" ID "/3000//evil.test/?cpuos_token=" TOKEN " HTTP/1.1\r\n\r\n", out,
	    sizeof(out));
	CHECK(strstr(out, "\r\nLocation: /" ID "/3000//evil.test/\r\n"));
	ask(port, "GET /" ID "/3000/x?cpuos_token=bad%0d%0a HTTP/1.1\r\n\r\n", out, sizeof(out));
	CHECK(!strncmp(out, "HTTP/1.1 401", 12));

	/* refusals, each a JSON error */
	ask(port, "GET /" ID "/3000/ HTTP/1.1\r\n\r\n", out, sizeof(out));
	CHECK(!strncmp(out, "HTTP/1.1 401", 12) && strstr(out, "{\"error\":{\"code\":\"unauthorized\""));
	ask(port, "GET /" ID "/3001/ HTTP/1.1\r\n" PORTS_TOKEN_HEADER ": " TOKEN "\r\n\r\n", out,
	    sizeof(out));
	CHECK(!strncmp(out, "HTTP/1.1 502", 12) && strstr(out, "nothing listens on port 3001"));
	ask(port, "GET /sbx_1111111111111111/3000/ HTTP/1.1\r\n\r\n", out, sizeof(out));
	CHECK(!strncmp(out, "HTTP/1.1 404", 12));
	ask(port, "GET /elsewhere HTTP/1.1\r\n\r\n", out, sizeof(out));
	CHECK(!strncmp(out, "HTTP/1.1 404", 12) && strstr(out, "no sandbox port here"));
	ask(port, "GET http://other/ HTTP/1.1\r\n\r\n", out, sizeof(out));
	CHECK(!strncmp(out, "HTTP/1.1 400", 12));
	ask(port, "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", out, sizeof(out));
	CHECK(!strncmp(out, "HTTP/1.1 400", 12));
	ports_close(p);

	c.domain = "sbx.test:8443";
	if (!CHECK(ports_open(&c, &p, err, sizeof(err)) == 0))
		return;
	ports_url(p, ID, NULL, url, sizeof(url));
	CHECK(!strcmp(url, "http://{port}-0123456789abcdef.sbx.test:8443/"));
	/* by Host: the target as it came, one request as well */
	ask(port,
	    "GET /y HTTP/1.1\r\nHost: 3000-0123456789ABCDEF.sbx.test:8443\r\nConnection: keep-alive\r\n"
	    "Cookie: cpuos_token=" TOKEN "\r\n\r\n",
	    out, sizeof(out));
	CHECK(strstr(out, "\r\n\r\nhi"));
	CHECK(!strncmp(guest.got, "GET /y HTTP/1.1\r\n", 17) && !strstr(guest.got, "keep-alive") &&
	      strstr(guest.got, "\r\nConnection: close\r\n") && !strstr(guest.got, "Cookie") &&
	      strstr(guest.got, "X-Forwarded-Host: 3000-0123456789ABCDEF.sbx.test:8443\r\n"));
	/* a WebSocket handshake keeps its Upgrade, nothing for HTTP/2 */
	ask(port,
	    "GET /ws HTTP/1.1\r\nHost: 3000-0123456789abcdef.sbx.test\r\nConnection: Upgrade, "
	    "HTTP2-Settings\r\nUpgrade: websocket\r\nHTTP2-Settings: AAMAAABk\r\n"
	    "Cookie: cpuos_token=" TOKEN "\r\n\r\n",
	    out, sizeof(out));
	CHECK(strstr(guest.got, "\r\nConnection: Upgrade\r\n") &&
	      strstr(guest.got, "\r\nUpgrade: websocket\r\n") && !strstr(guest.got, "HTTP2-Settings"));
	/* no redirect off to another site */
	ask(port,
	    "GET //evil.test/?cpuos_token=" TOKEN
	    " HTTP/1.1\r\nHost: 3000-0123456789abcdef.sbx.test\r\n\r\n",
	    out, sizeof(out));
	CHECK(strstr(out, "\r\nLocation: /evil.test/\r\n"));
	ports_close(p);

	c.listen = "127.0.0.1";
	CHECK(ports_open(&c, &p, err, sizeof(err)) == -EINVAL && strstr(err, "HOST:PORT"));
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "ports_routes", test_routes },
		{ "ports_proxy", test_proxy },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
