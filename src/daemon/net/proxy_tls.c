/*
 * proxy_tls: see proxy_impl.h. Both TLS sessions are OpenSSL's, on
 * blocking sockets with receive timeouts; the request head is read and
 * checked as plain HTTP is (http1.h), and must name the host its SNI
 * named: a secret goes to the server the certificate was checked for,
 * never to another site behind the same address.
 */
#include "daemon/net/proxy_impl.h"

#include "common/clock.h"
#include "common/http1.h"
#include "common/log.h"
#include "common/tcp.h"
#include "daemon/net/ca.h"

#include <errno.h>
#include <openssl/err.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define RELAY_BUF (16 << 10)

/* --- the guest's side: bytes already read, then the socket ------------- */

struct prefixed {
	int fd;
	const unsigned char *buf;
	size_t len, off;
	int64_t deadline; /* clock_ms by which reads must be done; 0: none */
};

static int pre_read(BIO *b, char *out, size_t n, size_t *got)
{
	struct prefixed *p = BIO_get_data(b);
	*got = 0;
	if (p->off < p->len) {
		size_t k = n < p->len - p->off ? n : p->len - p->off;
		memcpy(out, p->buf + p->off, k);
		p->off += k;
		*got = k;
		return 1;
	}
	/* A guest that sends a byte now and then gets no more time. */
	int64_t left = p->deadline ? p->deadline - clock_ms() : -1;
	if (p->deadline && (left <= 0 || tcp_wait(p->fd, POLLIN, (int)left) <= 0))
		return 0;
	ssize_t r;
	while ((r = recv(p->fd, out, n, 0)) < 0 && errno == EINTR)
		;
	if (r <= 0)
		return 0;
	*got = (size_t)r;
	return 1;
}

static long pre_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	(void)b;
	(void)num;
	(void)ptr;
	return cmd == BIO_CTRL_FLUSH;
}

static BIO_METHOD *pre_method;
static pthread_once_t pre_once = PTHREAD_ONCE_INIT;

static void make_method(void)
{
	pre_method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "cpuos prefixed");
	if (pre_method) {
		BIO_meth_set_read_ex(pre_method, pre_read);
		BIO_meth_set_ctrl(pre_method, pre_ctrl);
	}
}

static void recv_timeout(int fd, int ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

static int write_all(SSL *s, const void *p, size_t n)
{
	size_t w;
	while (n) {
		if (SSL_write_ex(s, p, n, &w) != 1)
			return -1;
		p = (const char *)p + w;
		n -= w;
	}
	return 0;
}

/* An error of ours to the guest, in HTTP, over its TLS; and in the log. */
static void answer(SSL *g, const char *host, int code, const char *status, const char *why)
{
	log_info("proxy: refused a request to %s: %s", host, why);
	char body[512], msg[768];
	int bl = snprintf(body, sizeof(body), "{\"error\":\"%s\",\"message\":\"%s\"}\n",
			  status, why);
	int n = snprintf(msg, sizeof(msg),
			 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
			 "Connection: close\r\n\r\n%s", code, status, bl, body);
	write_all(g, msg, (size_t)n);
}

/* Reads g until a whole head is in buf: its length (bytes past it are the
 * body's start), with *got all bytes read; 0 when none came. */
static size_t read_head(SSL *g, char *buf, size_t cap, size_t *got)
{
	size_t len = 0, r;
	while (len < cap && SSL_read_ex(g, buf + len, cap - len, &r) == 1) {
		len += r;
		size_t hl = http1_head_len(buf, len);
		if (hl) {
			*got = len;
			return hl;
		}
	}
	return 0;
}

static SSL *to_server(int out, const char *host, SSL_CTX *client)
{
	SSL *u = SSL_new(client);
	if (!u)
		return NULL;
	/* Its certificate must name host: nothing goes if that cannot be set. */
	if (SSL_set_fd(u, out) != 1 || SSL_set_tlsext_host_name(u, host) != 1 ||
	    SSL_set1_host(u, host) != 1) {
		SSL_free(u);
		return NULL;
	}
	if (SSL_connect(u) != 1) {
		long v = SSL_get_verify_result(u);
		log_warn("proxy: TLS to %s failed: %s", host,
			 v != X509_V_OK ? X509_verify_cert_error_string(v) : "handshake");
		SSL_free(u);
		return NULL;
	}
	return u;
}

/* One request from g to u, then the answer back (or g told why not). */
static void one_request(SSL *g, SSL *u, const char *host, struct proxy *p, int slot, char *buf,
			size_t hl, size_t got)
{
	struct http1_head h;
	if (http1_parse(buf, hl, &h) < 0) {
		answer(g, host, 400, "Bad Request", "not an HTTP/1.1 request the proxy passes");
		return;
	}
	if (strcmp(h.host, host)) {
		answer(g, host, 421, "Misdirected Request", "the Host is not the name TLS was for");
		return;
	}
	if (h.chunked || h.websocket) {
		answer(g, host, h.chunked ? 411 : 501, h.chunked ? "Length Required" : "Not Implemented",
		       "to a host with secrets: requests with a Content-Length only");
		return;
	}
	size_t n;
	struct secret_set *sec = proxy__secrets(p, slot); /* as they are now */
	char *head = proxy__head(&h, sec, host, 1, 1, &n);
	proxy__put(p, sec); /* values are not held past the head */
	long long body = h.body, extra = (long long)(got - hl);
	if (extra > body)
		extra = body; /* a next request: not passed */
	int r = head && write_all(u, head, n) == 0 && write_all(u, buf + hl, (size_t)extra) == 0
			? 0 : -1;
	proxy__wipe(head, n);
	for (body -= extra; r == 0 && body > 0;) {
		size_t k;
		if (SSL_read_ex(g, buf, (size_t)(body < HEAD_MAX ? body : HEAD_MAX), &k) != 1 ||
		    write_all(u, buf, k) < 0)
			r = -1;
		else
			body -= (long long)k;
	}
	/* The server closes after its answer (Connection: close). */
	for (size_t k; r == 0 && SSL_read_ex(u, buf, HEAD_MAX, &k) == 1;)
		if (write_all(g, buf, k) < 0)
			r = -1;
}

int proxy__tls_swap(int guest, int out, const char *host, const unsigned char *hello, size_t len,
		    struct proxy *p, int slot, struct ca *ca, SSL_CTX *client)
{
	pthread_once(&pre_once, make_method);
	struct prefixed pre = { .fd = guest, .buf = hello, .len = len,
				.deadline = clock_ms() + HEAD_MS };
	SSL_CTX *ctx = ca_server_ctx(ca, host);
	SSL *g = ctx ? SSL_new(ctx) : NULL, *u = NULL;
	BIO *rb = g && pre_method ? BIO_new(pre_method) : NULL;
	BIO *wb = rb ? BIO_new_socket(guest, BIO_NOCLOSE) : NULL;
	char *buf = malloc(HEAD_MAX);
	int r = -1;
	SSL_CTX_free(ctx); /* g holds it */
	if (!wb || !buf) {
		BIO_free(rb);
		BIO_free(wb);
		goto out;
	}
	BIO_set_data(rb, &pre);
	BIO_set_init(rb, 1);
	SSL_set_bio(g, rb, wb);
	recv_timeout(out, HEAD_MS);
	tcp_send_timeout(guest, 60);
	tcp_send_timeout(out, 60);
	if (SSL_accept(g) != 1) {
		if (clock_ms() >= pre.deadline)
			log_info("proxy: no TLS handshake for %s in time", host);
		else
			log_warn("proxy: the guest's TLS to %s did not accept our certificate (does "
				 "it trust the cpuos CA?)", host);
		goto out;
	}
	r = 0; /* from here on the guest is answered */
	size_t got = 0, hl = read_head(g, buf, HEAD_MAX, &got);
	if (!hl)
		answer(g, host, 400, "Bad Request", "no request head in time");
	else if (!(u = to_server(out, host, client)))
		answer(g, host, 502, "Bad Gateway", "the server's certificate did not verify");
	if (hl && u) {
		pre.deadline = 0; /* the body and the answer: idle time only */
		recv_timeout(guest, IDLE_MS);
		recv_timeout(out, IDLE_MS);
		one_request(g, u, host, p, slot, buf, hl, got);
	}
	SSL_shutdown(g);
out:
	SSL_free(u);
	SSL_free(g);
	free(buf);
	ERR_clear_error();
	return r;
}
