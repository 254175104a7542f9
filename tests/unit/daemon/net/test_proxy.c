/* Unit tests for the names the egress proxy reads: the TLS SNI (from a
 * ClientHello OpenSSL itself makes) and the HTTP Host. */
#include "daemon/net/proxy.h"
#include "tests/lib/tap.h"

#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "proxy_sni", test_sni },
		{ "proxy_http_host", test_http_host },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
