/* relay: see relay.h. */
#include "api/relay.h"

#include "api/capi.h"
#include "api/place.h"
#include "api/routes.h"
#include "common/clock.h"
#include "common/http1.h"
#include "common/log.h"
#include "common/tcp.h"
#include "daemon/ports/ports.h"
#include "lib/workers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_MAX      (64 << 10) /* a request head, and an answer's first bytes */
#define HEAD_MS	      30000      /* for a request head to come whole */
#define DIAL_MS	      5000       /* to connect to a node */
#define CREATE_MS     (10 * 60 * 1000) /* for a node to answer a create */
#define BUF	      (64 << 10)

struct relay {
	struct capi *a;
	int ports; /* port URLs' listener */
	int lfd, stop; /* the listener; an eventfd that ends the acceptor */
	pthread_t acceptor;
	struct workers conns;
	pthread_mutex_t mu; /* the open connections, shut at relay_close */
	int fds[RELAY_MAX_CONNS];
};

struct conn {
	struct relay *r;
	int fd, at;
	char client[INET6_ADDRSTRLEN];
};

/* --- answers of our own ---------------------------------------------------------- */

static void answer(int fd, unsigned status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void answer(int fd, unsigned status, const char *code, const char *fmt, ...)
{
	static const struct {
		unsigned s;
		const char *t;
	} texts[] = {
		{ 200, "OK" },		       { 400, "Bad Request" },	      { 404, "Not Found" },
		{ 411, "Length Required" },    { 413, "Content Too Large" },  { 429, "Too Many Requests" },
		{ 502, "Bad Gateway" },	       { 503, "Service Unavailable" },
	};
	const char *text = "Error";
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		if (texts[i].s == status)
			text = texts[i].t;
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_t *j = status < 300 ? json_loads(msg, 0, NULL)
				 : json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
	char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	char head[256];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
			 status, text, body ? strlen(body) : 0);
	if (tcp_send_all(fd, head, (size_t)n) == 0 && body)
		tcp_send_all(fd, body, strlen(body));
	free(body);
	/* what the client still sends is not read: a close with unread bytes
	 * resets, and the answer may be lost; let it read first */
	shutdown(fd, SHUT_WR);
	char sink[4096];
	for (int i = 0; i < 16 && tcp_wait(fd, POLLIN, 200) > 0; i++)
		if (recv(fd, sink, sizeof(sink), 0) <= 0)
			break;
}

/* --- to a node ------------------------------------------------------------------------ */

/* Connects to url (http://HOST:PORT[/]): a descriptor, or -errno. */
static int dial(const char *url)
{
	char host[256], port[8] = "80";
	const char *p = !strncmp(url, "http://", 7) ? url + 7 : NULL;
	if (!p)
		return -EINVAL;
	size_t hl;
	const char *ps;
	if (*p == '[') { /* [v6]:port */
		const char *e = strchr(p, ']');
		if (!e)
			return -EINVAL;
		hl = (size_t)(e - p - 1);
		p++;
		ps = e[1] == ':' ? e + 2 : NULL;
	} else {
		hl = strcspn(p, ":/");
		ps = p[hl] == ':' ? p + hl + 1 : NULL;
	}
	if (!hl || hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, p, hl);
	host[hl] = '\0';
	if (ps) {
		size_t n = strspn(ps, "0123456789");
		if (!n || n >= sizeof(port))
			return -EINVAL;
		memcpy(port, ps, n);
		port[n] = '\0';
	}
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV }, *ai;
	if (getaddrinfo(host, port, &hints, &ai) != 0)
		return -EHOSTUNREACH;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), e = 0;
	if (fd < 0) {
		e = -errno;
	} else if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
		e = -errno;
	} else if (tcp_wait(fd, POLLOUT, DIAL_MS) <= 0) {
		e = -ETIMEDOUT;
	} else {
		int so = 0;
		socklen_t sl = sizeof(so);
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) < 0 || so)
			e = so ? -so : -errno;
	}
	freeaddrinfo(ai);
	if (e) {
		if (fd >= 0)
			close(fd);
		return e;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	tcp_send_timeout(fd, 60);
	return fd;
}

struct out {
	char *p;
	size_t len, cap;
};

static int put(struct out *o, const char *s, size_t n)
{
	if (o->len + n > o->cap)
		return -1;
	memcpy(o->p + o->len, s, n);
	o->len += n;
	return 0;
}

/* The head as the node gets it: the client's, less its hop-by-hop and
 * forwarding headers and any cluster secret it made up, with ours, the
 * client's address and Connection: close (Upgrade for a WebSocket). */
static int node_head(const struct capi *a, const struct http1_head *h, const char *client,
		     int whole, struct out *o)
{
	int r = put(o, h->buf, (size_t)(h->line2 - h->buf));
	static const char *const drop[] = { "connection", "keep-alive", "proxy-connection",
					    "cpuos-cluster", "forwarded", "x-forwarded-for",
					    "x-real-ip", "te", "http2-settings" };
	const char *at = NULL, *l, *name, *v;
	size_t n, nl, vl;
	while (http1_next(h, &at, &l, &n, &name, &nl, &v, &vl)) {
		int skip = (http1_is(l, n, "upgrade") && !h->websocket) ||
			   (whole && http1_is(l, n, "expect")); /* the body is here already */
		for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++)
			skip |= http1_is(l, n, drop[i]);
		if (!skip)
			r |= put(o, l, n);
	}
	char add[512];
	int k = snprintf(add, sizeof(add), "Cpuos-Cluster: %s\r\nX-Forwarded-For: %s\r\nConnection: %s\r\n\r\n",
			 a->secret, client, h->websocket ? "Upgrade" : "close");
	r |= k < (int)sizeof(add) ? put(o, add, (size_t)k) : -1;
	return r ? -1 : 0;
}

/* What is left of the request's body to pass on. */
struct body {
	long long left;        /* with a Content-Length */
	int chunked;
	struct http1_chunks ck;
	int done;
};

/* Passes on p[0..n), client bytes that follow the head, as far as they are
 * the body's: 0, or -1 (not chunked as it must be, the node gone). */
static int body_pass(int nfd, struct body *b, const char *p, size_t n)
{
	if (b->done || !n)
		return 0;
	size_t take = n;
	if (b->chunked) {
		long long k = http1_chunks_feed(&b->ck, p, n, &b->done);
		if (k < 0)
			return -1;
		take = (size_t)k;
	} else {
		if ((long long)take > b->left)
			take = (size_t)b->left;
		b->left -= (long long)take;
		b->done = b->left == 0;
	}
	return tcp_send_all(nfd, p, take);
}

#define PIPE_BYTES (1 << 20)

static void close_pipe(int p[2])
{
	for (int i = 0; i < 2; i++)
		if (p[i] >= 0)
			close(p[i]);
}

/* Moves n bytes from the pipe's read end to the socket: 0, or -1. */
static int drain_pipe(int from, int to, size_t n)
{
	while (n > 0) {
		ssize_t k = splice(from, NULL, to, NULL, n, SPLICE_F_MOVE);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		n -= (size_t)k;
	}
	return 0;
}

static int is_101(const char *p, size_t n)
{
	return n >= 12 && !memcmp(p, "HTTP/1.1 101", 12);
}

/* The rest of the request's body to the node and all the node answers to
 * the client (first[0..nfirst) of it read already), until the node ends
 * its answer, either side goes away or nothing passes for RELAY_IDLE_MS.
 * A WebSocket, once the node switched, goes on both ways. */
static void pump(int cfd, int nfd, struct body *b, int upgrade, const char *first, size_t nfirst)
{
	char *buf = malloc(BUF);
	int fresh = 1, pipe[2] = { -1, -1 };
	if (!buf)
		return;
	int pipe_ok = pipe2(pipe, O_CLOEXEC) == 0;
	if (pipe_ok)
		fcntl(pipe[1], F_SETPIPE_SZ, PIPE_BYTES);
	if (nfirst) {
		if (tcp_send_all(cfd, first, nfirst) < 0)
			goto out;
		if (upgrade && is_101(first, nfirst)) {
			free(buf);
			close_pipe(pipe);
			tcp_relay(cfd, nfd, RELAY_IDLE_MS);
			return;
		}
		fresh = 0;
	}
	for (;;) {
		struct pollfd pf[2] = {
			{ .fd = cfd, .events = (short)(POLLRDHUP | (b->done ? 0 : POLLIN)) },
			{ .fd = nfd, .events = POLLIN },
		};
		int r = poll(pf, 2, RELAY_IDLE_MS);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (pf[1].revents && !fresh && pipe_ok) {
			/* an answer's body: kernel to kernel, not through buf */
			ssize_t got = splice(nfd, NULL, pipe[1], NULL, PIPE_BYTES,
					     SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (got < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (got <= 0 || drain_pipe(pipe[0], cfd, (size_t)got) < 0)
				break;
		} else if (pf[1].revents) {
			ssize_t got = recv(nfd, buf, BUF, 0);
			if (got < 0 && errno == EINTR)
				continue;
			if (got <= 0 || tcp_send_all(cfd, buf, (size_t)got) < 0)
				break;
			if (fresh && upgrade && is_101(buf, (size_t)got)) {
				free(buf);
				close_pipe(pipe);
				tcp_relay(cfd, nfd, RELAY_IDLE_MS);
				return;
			}
			fresh = 0;
		}
		if (pf[0].revents & POLLIN && !b->done) {
			size_t want = BUF;
			if (!b->chunked && b->left < (long long)want)
				want = (size_t)b->left;
			ssize_t got = recv(cfd, buf, want, 0);
			if (got < 0 && errno == EINTR)
				continue;
			if (got <= 0 || body_pass(nfd, b, buf, (size_t)got) < 0)
				break; /* gone before its body ended, or a bad one */
		} else if (pf[0].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
			break; /* the client left: the node sees its request end */
		}
	}
out:
	free(buf);
	close_pipe(pipe);
}

/* Sends the head h (as node_head makes it; whole: its body read already,
 * extra) and the client bytes that followed it, as far as they are the
 * body's, or all of them for a WebSocket (its first frames). 0, or -1. */
static int send_request(const struct capi *a, int nfd, const struct http1_head *h, const char *client,
			int whole, struct body *b, const char *extra, size_t nextra)
{
	struct out o = { .p = malloc(HEAD_MAX + 1024), .cap = HEAD_MAX + 1024 };
	int r = o.p && node_head(a, h, client, whole, &o) == 0 && tcp_send_all(nfd, o.p, o.len) == 0 &&
			(h->websocket ? tcp_send_all(nfd, extra, nextra)
				      : body_pass(nfd, b, extra, nextra)) == 0
		? 0
		: -1;
	free(o.p);
	return r;
}

/* --- one request --------------------------------------------------------------------- */

/* The sandbox id a path names (/v1/sandboxes/{id}[/...]): 1 with it, else
 * 0. A session id names its sandbox (ses_X is sbx_X, as on a node). */
static int path_sandbox(const char *t, size_t n, char *id, size_t idlen)
{
	static const char pre[] = "/v1/sandboxes/";
	size_t pl = sizeof(pre) - 1;
	if (n <= pl || memcmp(t, pre, pl))
		return 0;
	size_t k = pl;
	while (k < n && t[k] != '/' && t[k] != '?')
		k++;
	if (k - pl >= idlen)
		return 0;
	memcpy(id, t + pl, k - pl);
	id[k - pl] = '\0';
	if (!strncmp(id, "ses_", 4))
		memcpy(id, "sbx_", 4);
	return 1;
}

static int path_is(const struct http1_head *h, const char *path)
{
	size_t n = strlen(path);
	return h->target_len >= n && !memcmp(h->target, path, n) &&
	       (h->target_len == n || h->target[n] == '?');
}

static int method_is(const struct http1_head *h, const char *m)
{
	return h->method_len == strlen(m) && !memcmp(h->buf, m, h->method_len);
}

/* The bearer key's account: 0; -ENOENT when there is none or it is
 * unknown (the node then answers 401 in its own words); -EIO when the
 * store did not answer. */
static int account_of(struct capi *a, const struct http1_head *h, char *account, size_t len)
{
	const char *at = NULL, *l, *name, *v;
	size_t n, nl, vl;
	while (http1_next(h, &at, &l, &n, &name, &nl, &v, &vl)) {
		if (!http1_is(l, n, "authorization"))
			continue;
		char key[256];
		if (vl < 8 || vl - 7 >= sizeof(key) || strncmp(v, "Bearer ", 7))
			return -ENOENT;
		memcpy(key, v + 7, vl - 7);
		key[vl - 7] = '\0';
		int r = store_key_lookup(capi_db(a), key, account, len);
		explicit_bzero(key, sizeof(key));
		return r == 0 ? 0 : r == -ENOENT ? -ENOENT : -EIO;
	}
	return -ENOENT;
}

/* A create's template and size, as the node will read them, and from a
 * checkpoint of account's what it needs; what the node would refuse leaves
 * the defaults, and the node says why. */
static void create_want(struct capi *a, const char *account, const char *body, size_t n,
			struct want *w)
{
	*w = (struct want){ .vcpus = 1, .memory_mb = 512, .disk_mb = 2048 };
	json_t *j = json_loadb(body, n, 0, NULL), *v;
	if ((v = json_object_get(j, "vcpus")) && json_is_integer(v) && json_integer_value(v) >= 1 &&
	    json_integer_value(v) <= 64)
		w->vcpus = (unsigned)json_integer_value(v);
	if ((v = json_object_get(j, "memory_mb")) && json_is_integer(v) &&
	    json_integer_value(v) >= 128 && json_integer_value(v) <= 1 << 20)
		w->memory_mb = (unsigned)json_integer_value(v);
	if ((v = json_object_get(j, "disk_mb")) && json_is_integer(v) &&
	    json_integer_value(v) >= 64 && json_integer_value(v) <= 1 << 20)
		w->disk_mb = (unsigned)json_integer_value(v);
	if ((v = json_object_get(j, "template")) && json_is_string(v) &&
	    json_string_length(v) < sizeof(w->template) &&
	    !json_is_string(json_object_get(j, "checkpoint"))) /* a checkpoint has its own */
		snprintf(w->template, sizeof(w->template), "%s", json_string_value(v));
	if ((v = json_object_get(j, "checkpoint")) && json_is_string(v))
		store_ckpt_compat(capi_db(a), account, json_string_value(v), w->compat);
	json_decref(j);
}

static int status_line_done(const char *buf, size_t len, void *arg)
{
	(void)arg;
	return memchr(buf, '\n', len) != NULL;
}

/* POST /v1/sandboxes: placed, reserved, asked; another node (at most
 * create_tries in all) when one cannot start it (503) or cannot be
 * reached. */
static void create(struct conn *c, const struct http1_head *h, const char *extra, size_t nextra)
{
	struct capi *a = c->r->a;
	if (h->chunked) {
		answer(c->fd, 411, "length_required", "a create's body needs a Content-Length");
		return;
	}
	if (h->body > RELAY_CREATE_MAX) {
		answer(c->fd, 413, "too_large", "a create's body is at most %d bytes", RELAY_CREATE_MAX);
		return;
	}
	size_t len = (size_t)h->body, have = nextra < len ? nextra : len;
	char *body = malloc(len + 1), *rb = malloc(HEAD_MAX);
	if (!body || !rb)
		goto out;
	memcpy(body, extra, have);
	/* a client that waits for 100 Continue gets it from here: the body is
	 * read whole before any node is asked */
	const char *at = NULL, *l, *name, *v;
	size_t hn, nl, vl;
	while (have < len && http1_next(h, &at, &l, &hn, &name, &nl, &v, &vl))
		if (http1_is(l, hn, "expect") && vl == 12 && !strncasecmp(v, "100-continue", 12) &&
		    tcp_send_all(c->fd, "HTTP/1.1 100 Continue\r\n\r\n", 25) < 0)
			goto out;
	/* one deadline for all of it: a body that drips holds no thread long */
	long long until = clock_ms() + HEAD_MS;
	while (have < len) {
		long long left = until - clock_ms();
		if (left <= 0 || tcp_wait(c->fd, POLLIN, (int)left) <= 0)
			goto out;
		ssize_t got = recv(c->fd, body + have, len - have, 0);
		if (got <= 0)
			goto out;
		have += (size_t)got;
	}
	char account[128], err[512], url[256];
	int known = account_of(a, h, account, sizeof(account));
	if (known == -EIO) {
		answer(c->fd, 503, "unavailable", "the database does not answer");
		goto out;
	}
	if (known < 0) {
		/* no key or an unknown one: a node says so */
		int e = routes_any(a->routes, 0, NULL, url, sizeof(url));
		int nfd = e ? -1 : dial(url);
		struct body b = { .done = 1 };
		if (nfd < 0) {
			answer(c->fd, 503, "unavailable", "no node answers now");
		} else {
			b.left = (long long)len;
			b.done = len == 0;
			if (send_request(a, nfd, h, c->client, 1, &b, body, len) == 0)
				pump(c->fd, nfd, &b, 0, NULL, 0);
			close(nfd);
		}
		goto out;
	}
	struct want w;
	create_want(a, account, body, len, &w);
	char tried[8][64];
	size_t ntried = 0;
	unsigned tries = a->create_tries < 8 ? a->create_tries : 8;
	snprintf(err, sizeof(err), "no node could start it");
	while (ntried < tries) {
		struct placed p;
		int e = place(a, account, &w, (const char(*)[64])tried, ntried, &p, err, sizeof(err));
		if (e == -EDQUOT) {
			answer(c->fd, 429, "quota_exceeded", "%s", err);
			goto out;
		}
		if (e < 0)
			break;
		snprintf(tried[ntried++], sizeof(tried[0]), "%s", p.node);
		int nfd = dial(p.url);
		struct body b = { .left = (long long)len, .done = len == 0 };
		if (nfd < 0 || send_request(a, nfd, h, c->client, 1, &b, body, len) < 0) {
			snprintf(err, sizeof(err), "node %s cannot be reached", p.node);
			store_unreserve(capi_db(a), p.rsv);
			if (nfd >= 0)
				close(nfd);
			continue;
		}
		ssize_t got = tcp_read_until(nfd, rb, HEAD_MAX, CREATE_MS, status_line_done, NULL);
		int status = got > 12 && !memcmp(rb, "HTTP/1.", 7) ? atoi(rb + 9) : 0;
		/* another node only when this one said it could not: a node that
		 * did not answer may still be making the sandbox */
		if (status == 503 && ntried < tries) {
			log_info("create: node %s answered %d; another is asked", p.node, status);
			snprintf(err, sizeof(err), "node %s could not start it", p.node);
			store_unreserve(capi_db(a), p.rsv);
			close(nfd);
			continue;
		}
		if (status >= 200)
			pump(c->fd, nfd, &b, 0, rb, (size_t)got);
		else
			answer(c->fd, 502, "node_unreachable", "node %s did not answer the create",
			       p.node);
		store_unreserve(capi_db(a), p.rsv);
		close(nfd);
		goto out;
	}
	answer(c->fd, 503, "no_capacity", "%s", err);
out:
	free(body);
	free(rb);
}

static int head_done(const char *buf, size_t len, void *arg)
{
	return (*(size_t *)arg = http1_head_len(buf, len)) > 0;
}

static void serve(struct conn *c)
{
	struct capi *a = c->r->a;
	char *buf = malloc(HEAD_MAX);
	size_t head_len = 0;
	ssize_t got = buf ? tcp_read_until(c->fd, buf, HEAD_MAX, HEAD_MS, head_done, &head_len) : -1;
	struct http1_head h;
	if (got < 0)
		goto out;
	if (http1_parse(buf, head_len, &h) < 0) {
		answer(c->fd, 400, "bad_request", "not an HTTP/1 request cpuos-api can pass on");
		goto out;
	}
	const char *extra = buf + head_len;
	size_t nextra = (size_t)got - head_len;
	/* routed by the path as it came, while a node routes it decoded: a
	 * path that decoding would change could pass a create by placement */
	const char *q = memchr(h.target, '?', h.target_len);
	if (memchr(h.target, '%', q ? (size_t)(q - h.target) : h.target_len)) {
		answer(c->fd, 400, "bad_request", "no %%-escapes in an API path");
		goto out;
	}
	/* a node's /internal routes are the cluster's own: the secret this
	 * replica adds must not carry a client's call to them (nor any path
	 * that is not origin-form, which a node would read otherwise) */
	if (h.target_len < 1 || h.target[0] != '/' ||
	    (h.target_len >= 9 && !memcmp(h.target, "/internal", 9))) {
		answer(c->fd, 404, "not_found", "no such route");
		goto out;
	}
	if (method_is(&h, "POST") && path_is(&h, "/v1/sandboxes")) {
		create(c, &h, extra, nextra);
		goto out;
	}
	if (method_is(&h, "GET") && path_is(&h, "/v1/health")) {
		int n = routes_ready(a->routes);
		if (n < 0)
			answer(c->fd, 503, "unavailable", "the database does not answer");
		else
			answer(c->fd, 200, "", "{\"status\":\"ok\",\"role\":\"api\",\"nodes\":%d}", n);
		goto out;
	}
	char id[64], url[256], compat[24] = "";
	int e = 0, own = 0;
	if (path_sandbox(h.target, h.target_len, id, sizeof(id)))
		e = own = routes_owner(a->routes, id, url, sizeof(url), compat);
	/* an account's request, or a sandbox with no node of its own to
	 * answer: any node (one that takes sandboxes, since it may take a
	 * stored pause over, and restores what its own node made, if any) */
	if (e == 0 && !own)
		e = routes_any(a->routes, path_sandbox(h.target, h.target_len, id, sizeof(id)),
			       compat, url, sizeof(url));
	if (e < 0) {
		answer(c->fd, 503, "unavailable",
		       e == -ENOENT ? "no node is ready" : "the database does not answer");
		goto out;
	}
	int nfd = dial(url);
	if (nfd < 0) {
		answer(c->fd, 502, "node_unreachable", "the node cannot be reached: %s",
		       strerror(-nfd));
		goto out;
	}
	struct body b = { .left = h.body, .chunked = h.chunked };
	b.done = !b.chunked && b.left == 0;
	if (send_request(a, nfd, &h, c->client, 0, &b, extra, nextra) == 0) {
		free(buf);
		buf = NULL;
		pump(c->fd, nfd, &b, h.websocket, NULL, 0);
	}
	close(nfd);
out:
	free(buf);
}

/* A port URL's request: to the proxy of the node that owns the sandbox,
 * as it came (that proxy checks the token, cuts the path's prefix, passes
 * a WebSocket on), and whatever follows both ways. */
static void serve_port(struct conn *c)
{
	struct capi *a = c->r->a;
	char *buf = malloc(HEAD_MAX);
	size_t head_len = 0;
	ssize_t got = buf ? tcp_read_until(c->fd, buf, HEAD_MAX, HEAD_MS, head_done, &head_len) : -1;
	struct http1_head h;
	struct ports_route rt;
	char url[256];
	if (got < 0)
		goto out;
	if (http1_parse(buf, head_len, &h) < 0) {
		answer(c->fd, 400, "bad_request", "not an HTTP/1 request");
		goto out;
	}
	if (!ports_route(a->url_domain[0] ? a->url_domain : NULL, h.target, h.target_len, h.host,
			 &rt)) {
		answer(c->fd, 404, "not_found",
		       a->url_domain[0] ? "no sandbox port here: URLs are http://<port>-<id>.<domain>/"
					: "no sandbox port here: URLs are /<sandbox id>/<port>/");
		goto out;
	}
	int e = routes_owner_ports(a->routes, rt.id, url, sizeof(url));
	if (e <= 0) {
		answer(c->fd, e < 0 ? 503 : 404, e < 0 ? "unavailable" : "not_found",
		       e < 0 ? "the database does not answer"
			     : "no such sandbox, or its node serves no port URLs now");
		goto out;
	}
	int nfd = dial(url);
	if (nfd < 0) {
		answer(c->fd, 502, "node_unreachable", "the node cannot be reached: %s", strerror(-nfd));
		goto out;
	}
	if (tcp_send_all(nfd, buf, (size_t)got) == 0) {
		free(buf);
		buf = NULL;
		tcp_relay(c->fd, nfd, RELAY_IDLE_MS);
	}
	close(nfd);
out:
	free(buf);
}

static void conn_main(void *arg)
{
	struct conn *c = arg;
	if (c->r->ports)
		serve_port(c);
	else
		serve(c);
	pthread_mutex_lock(&c->r->mu);
	c->r->fds[c->at] = -1;
	close(c->fd); /* under the lock: relay_close never shuts a number reused */
	pthread_mutex_unlock(&c->r->mu);
	free(c);
}

/* --- accepting ---------------------------------------------------------------------- */

static void take(struct relay *r, int fd, const struct sockaddr_storage *sa)
{
	struct conn *c = calloc(1, sizeof(*c));
	int at = -1;
	if (c) {
		if (sa->ss_family == AF_INET6)
			inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, c->client,
				  sizeof(c->client));
		else
			inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, c->client,
				  sizeof(c->client));
		pthread_mutex_lock(&r->mu);
		for (int i = 0; i < RELAY_MAX_CONNS && at < 0; i++)
			if (r->fds[i] < 0)
				at = i;
		if (at >= 0)
			r->fds[at] = fd;
		pthread_mutex_unlock(&r->mu);
	}
	if (at < 0) {
		free(c);
		tcp_reset(fd);
		return;
	}
	c->r = r;
	c->fd = fd;
	c->at = at;
	tcp_send_timeout(fd, 60);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (workers_spawn(&r->conns, conn_main, c) != 0) {
		pthread_mutex_lock(&r->mu);
		r->fds[at] = -1;
		pthread_mutex_unlock(&r->mu);
		free(c);
		tcp_reset(fd);
	}
}

static void *acceptor_main(void *arg)
{
	struct relay *r = arg;
	for (;;) {
		struct pollfd pf[2] = { { .fd = r->lfd, .events = POLLIN },
					{ .fd = r->stop, .events = POLLIN } };
		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			break;
		if (pf[1].revents)
			break;
		if (!pf[0].revents)
			continue;
		struct sockaddr_storage sa;
		socklen_t sl = sizeof(sa);
		int fd = accept4(r->lfd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC);
		if (fd >= 0) {
			take(r, fd, &sa);
		} else if (errno == EMFILE || errno == ENFILE) {
			struct pollfd s = { .fd = r->stop, .events = POLLIN };
			poll(&s, 1, 100); /* out of descriptors: let connections end */
		}
	}
	return NULL;
}

int relay_open(struct capi *a, const char *listen, int ports, struct relay **out, char *err,
	       size_t errlen)
{
	struct relay *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->a = a;
	r->ports = ports;
	r->lfd = r->stop = -1;
	for (int i = 0; i < RELAY_MAX_CONNS; i++)
		r->fds[i] = -1;
	pthread_mutex_init(&r->mu, NULL);
	int e = workers_init(&r->conns, RELAY_MAX_CONNS, 256 << 10, "relay");
	if (e) {
		snprintf(err, errlen, "cannot set up its threads: %s", strerror(-e));
		goto fail_workers;
	}
	if ((r->stop = eventfd(0, EFD_CLOEXEC)) < 0) {
		e = -errno;
		snprintf(err, errlen, "eventfd: %s", strerror(errno));
		goto fail;
	}
	if ((r->lfd = tcp_listen(listen, err, errlen)) < 0) {
		e = r->lfd;
		goto fail;
	}
	if ((e = pthread_create(&r->acceptor, NULL, acceptor_main, r)) != 0) {
		snprintf(err, errlen, "cannot start a thread: %s", strerror(e));
		e = -e;
		goto fail;
	}
	*out = r;
	return 0;
fail:
	if (r->lfd >= 0)
		close(r->lfd);
	if (r->stop >= 0)
		close(r->stop);
	workers_release(&r->conns);
fail_workers:
	pthread_mutex_destroy(&r->mu);
	free(r);
	return e;
}

int relay_close(struct relay *r)
{
	if (!r)
		return 0;
	uint64_t one = 1;
	if (write(r->stop, &one, sizeof(one)) != sizeof(one))
		log_warn("relay: cannot stop the acceptor");
	pthread_join(r->acceptor, NULL);
	close(r->lfd);
	pthread_mutex_lock(&r->mu);
	for (int i = 0; i < RELAY_MAX_CONNS; i++)
		if (r->fds[i] >= 0)
			shutdown(r->fds[i], SHUT_RDWR);
	pthread_mutex_unlock(&r->mu);
	/* a create may wait for its node for minutes: past this, the
	 * process ends under it (r is not freed while a thread may use it) */
	if (workers_drain(&r->conns, 10000) < 0) {
		log_warn("relay: %u connections still open at exit", workers_count(&r->conns));
		return -EBUSY;
	}
	workers_release(&r->conns);
	close(r->stop);
	pthread_mutex_destroy(&r->mu);
	free(r);
	return 0;
}
