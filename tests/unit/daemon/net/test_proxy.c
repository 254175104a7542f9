/* Unit tests for the names the egress proxy reads: the TLS SNI (from a
 * ClientHello OpenSSL itself makes) and the HTTP Host; and the slots of the
 * resolver and the proxy on loopback (attach, answer, detach, attach again
 * at once, close), with no namespace or helper behind them. */
#include "daemon/net/dns.h"
#include "daemon/net/proxy.h"
#include "tests/lib/tap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A real ClientHello for sni (NULL: none), into buf: its length. */
static size_t client_hello(const char *sni, unsigned char *buf, size_t cap)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = SSL_new(ctx);
	BIO *in = BIO_new(BIO_s_mem()), *out = BIO_new(BIO_s_mem());
	SSL_set_bio(ssl, in, out);
	if (sni)
		SSL_set_tlsext_host_name(ssl, sni);
	SSL_connect(ssl); /* writes the hello, then wants the server's answer */
	int n = BIO_read(out, buf, (int)cap);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	return n > 0 ? (size_t)n : 0;
}

static void test_sni(void)
{
	unsigned char hello[4096];
	char name[256];
	size_t n = client_hello("Api.Example.COM", hello, sizeof(hello));
	if (!CHECK(n > 100))
		return;
	CHECK(proxy_name(1, hello, n, name, sizeof(name)) == 1 && !strcmp(name, "api.example.com"));
	/* split across reads: more is wanted until the hello is whole */
	CHECK(proxy_name(1, hello, 5, name, sizeof(name)) == 0);
	CHECK(proxy_name(1, hello, n / 2, name, sizeof(name)) == 0);
	n = client_hello(NULL, hello, sizeof(hello));
	CHECK(n > 100 && proxy_name(1, hello, n, name, sizeof(name)) == -1); /* no SNI */
	const char *http = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
	CHECK(proxy_name(1, (const unsigned char *)http, strlen(http), name, sizeof(name)) == -1);
}

static int host(const char *req, char *name)
{
	return proxy_name(0, (const unsigned char *)req, strlen(req), name, 256);
}

static void test_http_host(void)
{
	char name[256];
	CHECK(host("GET / HTTP/1.1\r\nUser-Agent: x\r\nHOST:  A.Example.com:8080\r\n\r\n", name) == 1 &&
	      !strcmp(name, "a.example.com"));
	CHECK(host("GET / HTTP/1.1\r\nHost: b.test.\r\nAccept: */*\r\n\r\nbody", name) == 1 &&
	      !strcmp(name, "b.test"));
	CHECK(host("GET / HTTP/1.1\r\nHost: a.test\r\n", name) == 0); /* the head goes on */
	CHECK(host("GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", name) == -1);
	CHECK(host("GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", name) == -1);
	CHECK(host("GET / HTTP/1.1\r\nHost:\r\n\r\n", name) == -1);
	CHECK(host("GET / HTTP/1.1\r\nHost: .:80\r\n\r\n", name) == -1); /* the root */
	CHECK(host("GET / HTTP/1.1\r\nHost: a.test..\r\n\r\n", name) == -1);
	CHECK(host("GET / HTTP/1.1\r\nX-Host: a.test\r\n\r\n", name) == -1);
	CHECK(host("GET http://b.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", name) == -1);
	/* heads a server could read otherwise (http1.h) name nothing */
	static const char *const odd[] = {
		"GET / HTTP/1.1\r\nHost : a.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\n folded\r\n\r\n",
		"GET / HTTP/1.1\r\nX: y\nHost: b.test\r\nHost2: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: h2c\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nUpgrade: h2c\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 99999999999999999999\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length:\r\n\r\n",
		/* a port is digits: nothing else rides in a Host a server may echo */
		"GET / HTTP/1.1\r\nHost: a.test:cpuos-secret-00\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test:\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test:123456\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test:80:80\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
		if (!CHECK(host(odd[i], name) == -1))
			t_note("named '%s': %s", name, odd[i]);
	CHECK(host("GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\n\r\n", name) == 1);
	char big[20000];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	CHECK(host(big, name) == -1); /* a head past the cap names nothing */
}

/* A socket of type on 127.0.0.1, any port (listening if TCP): its fd,
 * with the address in *sa. */
static int loopback(int type, struct sockaddr_in *sa)
{
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	socklen_t len = sizeof(*sa);
	*sa = (struct sockaddr_in){ .sin_family = AF_INET,
				    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (fd < 0 || bind(fd, (struct sockaddr *)sa, sizeof(*sa)) < 0 ||
	    getsockname(fd, (struct sockaddr *)sa, &len) < 0 ||
	    (type == SOCK_STREAM && listen(fd, 8) < 0)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static int netns(void)
{
	return open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
}

/* Asks the resolver listening at sa for example.com: the answer's rcode,
 * or -1 without an answer in ms. */
static int ask(const struct sockaddr_in *sa, int ms)
{
	static const unsigned char q[] = {
		0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,	   /* id, RD, one question */
		7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0, /* example.com */
		0, 1, 0, 1,					   /* A, IN */
	};
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	unsigned char a[512];
	ssize_t n = -1;
	if (fd >= 0 && sendto(fd, q, sizeof(q), 0, (const struct sockaddr *)sa, sizeof(*sa)) ==
			       (ssize_t)sizeof(q)) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, ms) == 1)
			n = recv(fd, a, sizeof(a), 0);
	}
	if (fd >= 0)
		close(fd);
	return n >= 12 && a[0] == 0x12 && a[1] == 0x34 && (a[2] & 0x80) ? a[3] & 15 : -1;
}

static void test_dns_slots(void)
{
	struct dns *d;
	char err[256];
	if (!CHECK(dns_open("127.0.0.1:9", 2, NULL, &d, err, sizeof(err)) == 0))
		return;
	const char *deny = "{\"mode\":\"deny-all\"}";
	struct sockaddr_in a, b;
	int fa = loopback(SOCK_DGRAM, &a), fb = loopback(SOCK_DGRAM, &b);
	CHECK(dns_attach(d, 0, netns(), fa, deny, err, sizeof(err)) == 0);
	CHECK(ask(&a, 5000) == 5); /* REFUSED: the policy allows no name */
	/* Detached and attached again at once: the attach waits for the
	 * loop to let go of the old socket, never for a fixed time. */
	dns_detach(d, 0);
	CHECK(dns_attach(d, 0, netns(), fb, deny, err, sizeof(err)) == 0);
	CHECK(ask(&b, 5000) == 5);
	CHECK(ask(&a, 300) == -1); /* the old one is closed */
	int fc = loopback(SOCK_DGRAM, &a);
	CHECK(dns_attach(d, 0, netns(), fc, deny, err, sizeof(err)) == -EBUSY);
	CHECK(dns_attach(d, 2, netns(), loopback(SOCK_DGRAM, &a), deny, err, sizeof(err)) ==
	      -EINVAL);
	dns_close(d); /* with slot 0 attached and perhaps a query's worker */
}

/* Asks the proxy at sa for a name its resolver never answered: 1 when it
 * ends the connection (a reset or an end). */
static int refused(const struct sockaddr_in *sa)
{
	static const char head[] = "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n";
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	char c;
	int r = 0;
	if (fd >= 0 && connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 &&
	    send(fd, head, sizeof(head) - 1, MSG_NOSIGNAL) == (ssize_t)sizeof(head) - 1) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		r = poll(&p, 1, 5000) == 1 && recv(fd, &c, 1, 0) <= 0;
	}
	if (fd >= 0)
		close(fd);
	return r;
}

static void test_proxy_slots(void)
{
	struct dns *d;
	struct proxy *p;
	char err[256];
	if (!CHECK(dns_open(NULL, 2, NULL, &d, err, sizeof(err)) == 0))
		return;
	if (!CHECK(proxy_open(d, 2, NULL, NULL, NULL, &p, err, sizeof(err)) == 0)) {
		t_note("%s", err);
		dns_close(d);
		return;
	}
	struct sockaddr_in a, b;
	int la = loopback(SOCK_STREAM, &a), lb = loopback(SOCK_STREAM, &b);
	CHECK(proxy_attach(p, 1, netns(), la, err, sizeof(err)) == 0);
	CHECK(refused(&a));
	proxy_detach(p, 1);
	CHECK(proxy_attach(p, 1, netns(), lb, err, sizeof(err)) == 0);
	CHECK(refused(&b));
	proxy_close(p);
	dns_close(d);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "proxy_sni", test_sni },
		{ "proxy_http_host", test_http_host },
		{ "dns_slots", test_dns_slots },
		{ "proxy_slots", test_proxy_slots },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
