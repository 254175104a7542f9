/*
 * proxy: see proxy.h. The TLS ClientHello is read by OpenSSL itself (a
 * server-side SSL object over a memory BIO, stopped in its servername
 * callback: nothing is ever answered); the HTTP Host is the one line of a
 * request head this file reads. Connections go out from the daemon's own
 * namespace, to the address the guest asked for.
 */
#include "daemon/net/proxy.h"

#include "common/clock.h"
#include "common/http1.h"
#include "common/log.h"
#include "common/tcp.h"
#include "daemon/net/dns.h"
#include "daemon/net/net_impl.h"
#include "daemon/net/proxy_impl.h"
#include "daemon/net/rules.h"
#include "daemon/net/secret.h"
#include "lib/loop.h"
#include "lib/workers.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CONNECT_MS 10000
#define FULL_PAUSE_MS 50      /* out of descriptors: a listener rests this long */
#define DETACH_WAIT_MS 12000  /* an attach waits this long for the slot's last ends */

struct lsock {
	struct proxy *p;
	int fd;   /* listening, in the namespace; -1: none */
	int nsfd; /* the namespace: connections go out from there */
	int dead; /* detached: the loop's release closes it */
	int conns[PROXY_SLOT_CONNS]; /* guest sides of live connections, -1: free */
	int nconns;
	struct secret_set *secrets; /* NULL: none */
};

struct proxy {
	struct dns *dns;
	struct ca *ca;
	struct priv *priv; /* what makes sockets in the namespaces */
	SSL_CTX *client; /* toward servers, verifying them */
	pthread_mutex_t mu;
	struct lsock *slots;
	int nslots, quit;
	pthread_cond_t cv;       /* a slot's listener was closed or its connections went down */
	struct loop *loop;       /* the acceptor's: the slots' listeners */
	struct workers conns;    /* a thread per connection */
	pthread_t acceptor;
};

/* --- the name asked for ----------------------------------------------- */

struct hello {
	int done;
	char name[256];
};

/* Called while OpenSSL processes the ClientHello: the name is read and the
 * handshake stopped here. */
static int on_servername(SSL *ssl, int *alert, void *arg)
{
	(void)alert;
	(void)arg;
	struct hello *h = SSL_get_app_data(ssl);
	const char *n = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
	h->done = 1;
	snprintf(h->name, sizeof(h->name), "%s", n ? n : "");
	return SSL_TLSEXT_ERR_ALERT_FATAL;
}

static SSL_CTX *shared_ctx;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

static void make_ctx(void)
{
	shared_ctx = SSL_CTX_new(TLS_server_method());
	if (shared_ctx)
		SSL_CTX_set_tlsext_servername_callback(shared_ctx, on_servername);
}

static SSL_CTX *tls_ctx(void)
{
	pthread_once(&ctx_once, make_ctx);
	return shared_ctx;
}

static int tls_name(SSL_CTX *ctx, const unsigned char *buf, size_t len, char *out, size_t n)
{
	SSL *ssl = ctx ? SSL_new(ctx) : NULL;
	BIO *in = BIO_new(BIO_s_mem()), *sink = BIO_new(BIO_s_mem());
	struct hello h = { 0 };
	int r = -1;
	if (!ssl || !in || !sink) {
		BIO_free(in);
		BIO_free(sink);
		SSL_free(ssl);
		return -1;
	}
	BIO_write(in, buf, (int)len);
	SSL_set_bio(ssl, in, sink);
	SSL_set_app_data(ssl, &h);
	SSL_set_accept_state(ssl);
	int hs = SSL_do_handshake(ssl);
	if (h.done)
		r = h.name[0] ? 1 : -1;
	else if (hs <= 0 && SSL_get_error(ssl, hs) == SSL_ERROR_WANT_READ)
		r = 0; /* the ClientHello goes on in the next bytes */
	if (r == 1)
		snprintf(out, n, "%s", h.name);
	SSL_free(ssl);
	return r;
}

/* The Host of an HTTP/1 request head (http1.h: origin form, one Host),
 * without a port. */
static int http_host(const unsigned char *buf, size_t len, char *out, size_t n)
{
	size_t hl = http1_head_len((const char *)buf, len);
	if (!hl)
		return len >= HEAD_MAX ? -1 : 0;
	struct http1_head h;
	if (http1_parse((const char *)buf, hl, &h) < 0 || !h.host[0] || strlen(h.host) >= n)
		return -1;
	snprintf(out, n, "%s", h.host);
	return 1;
}

int proxy_name(int tls, const unsigned char *buf, size_t len, char *out, size_t n)
{
	int r = tls ? tls_name(tls_ctx(), buf, len, out, n) : http_host(buf, len, out, n);
	if (r == 1) {
		size_t k = strlen(out);
		if (k && out[k - 1] == '.')
			out[--k] = '\0';
		for (size_t i = 0; i < k; i++)
			out[i] = (char)tolower((unsigned char)out[i]);
		/* The root alone ("."), or a last label empty ("a.."): no name
		 * (fuzz_proxy_head and fuzz_proxy_sni found them). */
		if (!k || out[k - 1] == '.')
			r = -1;
	}
	return r;
}

/* --- a connection --------------------------------------------------------- */

struct conn {
	struct proxy *p;
	int slot, fd, nsfd, at; /* at: its place in the slot's conns */
};

struct asked {
	int tls, bad;
	char *name;
	size_t n;
};

static int named(const char *buf, size_t len, void *arg)
{
	struct asked *a = arg;
	int r = proxy_name(a->tls, (const unsigned char *)buf, len, a->name, a->n);
	if (r < 0) {
		a->bad = 1; /* kept: an address allowed as such takes any bytes */
		a->name[0] = '\0';
		return 1;
	}
	return r;
}

/* Reads until the head names a host, or cannot (*bad): its length, or -1
 * when the guest ended, erred or was too slow. */
static ssize_t read_head(int fd, int tls, unsigned char *buf, char *name, size_t n, int *bad)
{
	struct asked a = { .tls = tls, .name = name, .n = n };
	ssize_t len = tcp_read_until(fd, (char *)buf, HEAD_MAX, HEAD_MS, named, &a);
	*bad = a.bad;
	return len;
}

char *proxy__head(const struct http1_head *h, const struct secret_set *sec, const char *host,
		  int swap, int tls, size_t *n)
{
	char *rw = malloc(h->len + 32);
	if (!rw)
		return NULL;
	size_t k = (size_t)(h->line2 - h->buf);
	memcpy(rw, h->buf, k);
	const char *at = NULL, *line, *name, *v;
	size_t ll, nl, vl;
	while (http1_next(h, &at, &line, &ll, &name, &nl, &v, &vl))
		if (!http1_is(line, ll, "connection") && !http1_is(line, ll, "http2-settings") &&
		    !(tls && http1_is(line, ll, "expect"))) {
			memcpy(rw + k, line, ll);
			k += ll;
		}
	const char *conn = h->websocket ? "Connection: Upgrade\r\n\r\n" : "Connection: close\r\n\r\n";
	memcpy(rw + k, conn, strlen(conn));
	k += strlen(conn);
	if (!sec) {
		*n = k;
		return rw;
	}
	/* The rules' headers first (their secrets' placeholders then go
	 * through the swap like any), on a name the resolver answered only.
	 * The headers only: a placeholder elsewhere is the guest's business.
	 * Without swap the report alone counts (for the log). */
	size_t first = (size_t)(h->line2 - h->buf), swapped_len, ruled_len = k - first;
	int matched = 0;
	char *ruled = swap && tls && sec->rules ? rules_apply(sec->rules, h, host, sec, rw + first,
						       k - first, &ruled_len, &matched)
					 : NULL;
	if (ruled && !matched) {
		proxy__wipe(ruled, ruled_len);
		ruled = NULL;
		ruled_len = k - first;
	}
	if (matched && !ruled) {
		free(rw);
		return NULL;
	}
	if (matched)
		log_info("proxy: %d header rule%s set in a request to %s", matched,
			 matched > 1 ? "s" : "", host);
	const char *in = ruled ? ruled : rw + first;
	struct swap_report rep;
	char *hdrs = secret_swap(sec, host, tls, in, ruled_len, &swapped_len, &rep);
	if (hdrs && !swap && rep.swapped) {
		rep.held = rep.put;
		rep.why = "the name was not looked up through this sandbox's resolver";
		rep.swapped = 0;
	}
	char *out = hdrs ? malloc(first + (swap ? swapped_len : k - first)) : NULL;
	if (out) {
		memcpy(out, rw, first);
		memcpy(out + first, swap ? hdrs : rw + first, swap ? swapped_len : k - first);
		*n = first + (swap ? swapped_len : k - first);
	}
	if (rep.unbound)
		log_warn("proxy: the placeholder of secret %s went to %s, which it is not bound "
			 "to: left as it is", rep.unbound, host);
	if (rep.held)
		log_warn("proxy: secret %s not put in a request to %s: %s", rep.held, host, rep.why);
	if (rep.swapped)
		log_info("proxy: %d secret%s put in a request to %s", rep.swapped,
			 rep.swapped > 1 ? "s" : "", host);
	proxy__wipe(hdrs, swapped_len);
	proxy__wipe(ruled, ruled_len);
	free(rw);
	return out;
}

/* Passes the checked connection on. TLS, and what goes to an address the
 * policy allows as such (raw), goes as it is; of the latter, a plain-HTTP
 * head is still read for placeholders, which are logged. Plain HTTP
 * otherwise goes one request at a time, asked to close after it: a next
 * request on the same connection could name another Host, which a shared
 * (CDN) address would serve; a WebSocket handshake goes on as one once
 * the server agreed. Secrets bound to the host are put in when swap. 0,
 * or -1 when it was not passed. */
static int pass(struct proxy *p, int guest, int out, int tls, int raw, const unsigned char *buf,
		size_t len, struct secret_set *sec, const char *host, int swap)
{
	tcp_send_timeout(guest, 60);
	tcp_send_timeout(out, 60);
	const char *head = (const char *)buf;
	size_t hl = tls ? 0 : http1_head_len(head, len), n = 0;
	struct http1_head h;
	int parsed = hl && http1_parse(head, hl, &h) == 0;
	char *rw = parsed ? proxy__head(&h, host[0] ? sec : NULL, host, swap, 0, &n) : NULL;
	proxy__put(p, sec); /* values are not held past the head */
	if (tls || raw) {
		proxy__wipe(rw, n); /* made for its log lines only */
		if (tcp_send_all(out, buf, len) < 0)
			return -1;
		tcp_relay(guest, out, IDLE_MS);
		return 0;
	}
	if (!rw || h.chunked) { /* no framing of our own for chunks */
		proxy__wipe(rw, n);
		return -1;
	}
	size_t extra = len - hl;
	if ((long long)extra > h.body)
		extra = (size_t)h.body; /* the rest would be a next request */
	int r = tcp_send_all(out, rw, n) < 0 || tcp_send_all(out, head + hl, extra) < 0 ? -1 : 0;
	proxy__wipe(rw, n);
	if (r == 0)
		tcp_relay_one(guest, out, h.body - (long long)extra, h.websocket, IDLE_MS);
	return r;
}

void proxy__wipe(char *buf, size_t n)
{
	if (buf)
		explicit_bzero(buf, n);
	free(buf);
}

struct secret_set *proxy__secrets(struct proxy *p, int slot)
{
	pthread_mutex_lock(&p->mu);
	struct secret_set *s = p->slots[slot].secrets;
	if (s)
		s->refs++;
	pthread_mutex_unlock(&p->mu);
	return s;
}

void proxy__put(struct proxy *p, struct secret_set *s)
{
	pthread_mutex_lock(&p->mu);
	int last = s && --s->refs == 0;
	pthread_mutex_unlock(&p->mu);
	if (last)
		secret_set_free(s);
}

static void conn_main(void *arg)
{
	struct conn *c = arg;
	struct sockaddr_in dst;
	socklen_t dl = sizeof(dst);
	unsigned char *head = malloc(HEAD_MAX);
	char name[256] = "", ip[INET_ADDRSTRLEN] = "?";
	int out = -1, bad = 0;
	struct secret_set *sec = NULL;
	if (head && getsockopt(c->fd, SOL_IP, SO_ORIGINAL_DST, &dst, &dl) == 0) {
		inet_ntop(AF_INET, &dst.sin_addr, ip, sizeof(ip));
		int tls = ntohs(dst.sin_port) == 443;
		ssize_t len = read_head(c->fd, tls, head, name, sizeof(name), &bad);
		pthread_mutex_lock(&c->p->mu);
		int quit = c->p->quit;
		pthread_mutex_unlock(&c->p->mu);
		int how = len > 0 && !quit ? dns_check(c->p->dns, c->slot, name, dst.sin_addr.s_addr) : 0;
		/* Taken once the head is in: a secret changed meanwhile counts. */
		sec = how ? proxy__secrets(c->p, c->slot) : NULL;
		/* Secrets go only where this sandbox's resolver sent the name
		 * it asked for; an address allowed as such takes anything else
		 * as it is. */
		int swap = !bad && (how & DNS_NAMED) && secret_bound(sec, name, tls);
		int raw = !swap && (how & DNS_ADDR);
		int r = -1;
		if (swap && tls) { /* it takes them again once the request is in */
			proxy__put(c->p, sec);
			sec = NULL;
		}
		if ((swap || raw || (!bad && how)) &&
		    (out = net__dial(c->p->priv, c->slot, c->nsfd, &dst, CONNECT_MS)) >= 0) {
			r = swap && tls ? proxy__tls_swap(c->fd, out, name, head, (size_t)len, c->p,
							  c->slot, c->p->ca, c->p->client)
					: pass(c->p, c->fd, out, tls, raw, head, (size_t)len, sec, name,
					       swap);
			sec = NULL; /* pass let go of it */
		}
		if (r < 0)
			log_info("proxy: refused %s:%u for '%s'", ip, ntohs(dst.sin_port),
				 name[0] ? name : "(no name)");
	}
	proxy__put(c->p, sec);
	free(head);
	/* Out of the slot's list before the descriptor goes: a cut must not
	 * reach a number used again. */
	pthread_mutex_lock(&c->p->mu);
	struct lsock *l = &c->p->slots[c->slot];
	l->conns[c->at] = -1;
	if (--l->nconns == 0)
		pthread_cond_broadcast(&c->p->cv);
	pthread_mutex_unlock(&c->p->mu);
	if (out >= 0) {
		close(out);
		close(c->fd);
	} else {
		tcp_reset(c->fd);
	}
	close(c->nsfd);
	free(c);
}

/* --- accepting -------------------------------------------------------------- */

/* Accepts one connection on slot (locked): 0, or -1 when out of
 * descriptors (the acceptor then rests a moment). */
static int take_conn(struct proxy *p, int slot)
{
	struct lsock *l = &p->slots[slot];
	int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return errno == EMFILE || errno == ENFILE ? -1 : 0;
	/* Each sandbox has its share: one cannot take the others' turns. */
	int at = -1;
	for (int i = 0; i < PROXY_SLOT_CONNS && at < 0; i++)
		if (l->conns[i] < 0)
			at = i;
	struct conn *c = at >= 0 ? calloc(1, sizeof(*c)) : NULL;
	int nsfd = c ? fcntl(l->nsfd, F_DUPFD_CLOEXEC, 3) : -1;
	if (c && nsfd >= 0) {
		*c = (struct conn){ .p = p, .slot = slot, .fd = fd, .nsfd = nsfd, .at = at };
		/* past PROXY_MAX_CONNS in all, reset as well */
		if (workers_spawn(&p->conns, conn_main, c) == 0) {
			l->conns[at] = fd;
			l->nconns++;
			c = NULL;
			nsfd = fd = -1;
		}
	}
	free(c);
	if (nsfd >= 0)
		close(nsfd);
	if (fd >= 0)
		tcp_reset(fd);
	return 0;
}

/* Ends slot's connections (locked): their threads see the guest side
 * shut and finish. */
static void cut(struct proxy *p, int slot)
{
	struct lsock *l = &p->slots[slot];
	for (int i = 0; i < PROXY_SLOT_CONNS; i++)
		if (l->conns[i] >= 0)
			shutdown(l->conns[i], SHUT_RDWR);
}

/* A slot's listener is readable (the loop's thread). */
static void on_accept(struct loop *lp, int fd, short revents, void *arg)
{
	(void)revents;
	struct lsock *l = arg;
	struct proxy *p = l->p;
	pthread_mutex_lock(&p->mu);
	int full = l->fd == fd && !l->dead && take_conn(p, (int)(l - p->slots)) < 0;
	pthread_mutex_unlock(&p->mu);
	if (full) /* out of descriptors: not a busy loop */
		loop_pause(lp, fd, FULL_PAUSE_MS);
}

/* A detached slot's listener is out of the loop: closed here only, so a
 * polled socket is never another's. */
static void on_release(int fd, void *arg)
{
	struct lsock *l = arg;
	struct proxy *p = l->p;
	pthread_mutex_lock(&p->mu);
	if (l->fd == fd) {
		close(l->fd);
		close(l->nsfd);
		l->fd = l->nsfd = -1;
		l->dead = 0;
	}
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

static void *acceptor_main(void *arg)
{
	struct proxy *p = arg;
	int r = loop_run(p->loop);
	if (r < 0)
		log_error("proxy: the acceptor stopped: %s", strerror(-r));
	return NULL;
}

/* The roots in trust_pem (certificates, PEM) into c's store: how many. */
static int load_roots(SSL_CTX *c, const char *trust_pem)
{
	BIO *b = BIO_new_mem_buf(trust_pem, -1);
	X509_STORE *st = SSL_CTX_get_cert_store(c);
	X509 *x;
	int n = 0;
	while (b && (x = PEM_read_bio_X509(b, NULL, NULL, NULL))) {
		n += X509_STORE_add_cert(st, x) == 1;
		X509_free(x);
	}
	ERR_clear_error(); /* the end of the text reads as an error */
	BIO_free(b);
	return n;
}

/* Toward servers: their certificates checked against trust_pem or the
 * host's roots, HTTP/1.1 only. */
static SSL_CTX *client_ctx(const char *trust_pem, char *err, size_t errlen)
{
	SSL_CTX *c = SSL_CTX_new(TLS_client_method());
	if (!c || !SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION) ||
	    SSL_CTX_set_alpn_protos(c, (const unsigned char *)"\x08http/1.1", 9) != 0 ||
	    (trust_pem ? load_roots(c, trust_pem) < 1 : SSL_CTX_set_default_verify_paths(c) != 1)) {
		snprintf(err, errlen, "cannot load the roots to check servers by%s",
			 trust_pem ? ": no certificate in --egress-trust" : "");
		SSL_CTX_free(c);
		return NULL;
	}
	SSL_CTX_set_verify(c, SSL_VERIFY_PEER, NULL);
	return c;
}

int proxy_open(struct dns *dns, int nslots, struct ca *ca, const char *trust_pem,
	       struct priv *priv, struct proxy **out, char *err, size_t errlen)
{
	SSL_CTX *client = client_ctx(trust_pem, err, errlen);
	if (!client)
		return -EINVAL;
	struct proxy *p = calloc(1, sizeof(*p));
	if (!p) {
		SSL_CTX_free(client);
		return -ENOMEM;
	}
	p->dns = dns;
	p->ca = ca;
	p->priv = priv;
	p->client = client;
	p->nslots = nslots;
	pthread_mutex_init(&p->mu, NULL);
	p->slots = calloc((size_t)nslots, sizeof(*p->slots));
	for (int i = 0; p->slots && i < nslots; i++) {
		p->slots[i].p = p;
		p->slots[i].fd = p->slots[i].nsfd = -1;
		for (int k = 0; k < PROXY_SLOT_CONNS; k++)
			p->slots[i].conns[k] = -1;
	}
	clock_cond_init(&p->cv);
	int wr = workers_init(&p->conns, PROXY_MAX_CONNS, 0, NULL);
	if (!p->slots || wr < 0 || loop_new(&p->loop) < 0 || !tls_ctx() ||
	    pthread_create(&p->acceptor, NULL, acceptor_main, p) != 0) {
		snprintf(err, errlen, "cannot start the egress proxy");
		loop_free(p->loop);
		if (wr == 0)
			workers_release(&p->conns);
		SSL_CTX_free(p->client);
		free(p->slots);
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
		free(p);
		return -ENOMEM;
	}
	*out = p;
	return 0;
}

void proxy_close(struct proxy *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->quit = 1;
	pthread_mutex_unlock(&p->mu);
	loop_stop(p->loop);
	pthread_join(p->acceptor, NULL);
	/* Every connection is cut, then waited for: one may still be
	 * dialling (CONNECT_MS at most) and touches p until it is done. */
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->nslots; i++)
		cut(p, i);
	pthread_mutex_unlock(&p->mu);
	workers_drain(&p->conns, -1);
	workers_release(&p->conns);
	loop_free(p->loop); /* which closes every listener still attached */
	for (int i = 0; i < p->nslots; i++)
		secret_set_free(p->slots[i].secrets); /* no connection holds it now */
	SSL_CTX_free(p->client);
	free(p->slots);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

int proxy_attach(struct proxy *p, int slot, int nsfd, int fd, char *err, size_t errlen)
{
	if (slot < 0 || slot >= p->nslots) {
		close(fd);
		close(nsfd);
		return -EINVAL;
	}
	struct timespec until;
	clock_deadline(&until, DETACH_WAIT_MS);
	pthread_mutex_lock(&p->mu);
	struct lsock *l = &p->slots[slot];
	/* Detached, but the loop has not released it yet, or its last
	 * connections are still ending: soon. */
	while (((l->fd >= 0 && l->dead) || l->nconns) &&
	       pthread_cond_timedwait(&p->cv, &p->mu, &until) != ETIMEDOUT)
		;
	int busy = l->fd >= 0 || l->nconns;
	/* Watched from now on: the loop looks the slot up under p->mu. */
	int r = busy ? -EBUSY : loop_add(p->loop, fd, POLLIN, on_accept, on_release, l);
	if (!r) {
		l->fd = fd;
		l->nsfd = nsfd;
		l->dead = 0;
	}
	pthread_mutex_unlock(&p->mu);
	if (r) {
		close(fd);
		close(nsfd);
		if (busy)
			snprintf(err, errlen, "proxy slot %d is still in use", slot);
		else
			snprintf(err, errlen, "out of memory");
		return r;
	}
	return 0;
}

void proxy_cut(struct proxy *p, int slot)
{
	if (slot < 0 || slot >= p->nslots)
		return;
	pthread_mutex_lock(&p->mu);
	cut(p, slot);
	pthread_mutex_unlock(&p->mu);
}

void proxy_set_secrets(struct proxy *p, int slot, struct secret_set *s)
{
	if (slot < 0 || slot >= p->nslots) {
		secret_set_free(s);
		return;
	}
	pthread_mutex_lock(&p->mu);
	struct secret_set *old = p->slots[slot].secrets;
	p->slots[slot].secrets = s;
	pthread_mutex_unlock(&p->mu);
	proxy__put(p, old); /* connections under way keep theirs */
}

void proxy_detach(struct proxy *p, int slot)
{
	if (slot < 0 || slot >= p->nslots)
		return;
	pthread_mutex_lock(&p->mu);
	struct lsock *l = &p->slots[slot];
	if (l->fd >= 0 && !l->dead) {
		l->dead = 1;
		loop_del(p->loop, l->fd); /* under p->mu: the release comes after */
	}
	cut(p, slot); /* nothing outlives its sandbox */
	pthread_mutex_unlock(&p->mu);
	proxy_set_secrets(p, slot, NULL);
}
