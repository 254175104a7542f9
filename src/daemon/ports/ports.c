/*
 * ports: see ports.h. A connection's life: read the head (at most
 * HEAD_MAX bytes in HEAD_MS), route it, check the token, dial the guest,
 * send the head as the guest should see it and what came after it, then
 * relay both ways.
 */
#include "daemon/ports/ports.h"

#include "common/clock.h"
#include "common/http1.h"
#include "common/log.h"
#include "common/tcp.h"
#include "lib/loop.h"
#include "lib/workers.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_MAX (16 << 10)
#define HEAD_MS 10000
#define IDLE_MS (15 * 60 * 1000)
#define TOKEN_MAX 64
#define FULL_PAUSE_MS 50 /* out of descriptors: the listener rests this long */

struct ports {
	char domain[256];  /* without its port; "" for path URLs */
	char url_host[300]; /* what the URLs name: domain[:port] or the listen address */
	int any_addr;      /* listening on every address: URLs name the API's host */
	int no_ip_limit;
	char listen_port[8];
	ports_dial_fn dial;
	void (*hangup)(void *arg, const char *id);
	void *arg;
	int lfd;
	struct loop *loop;     /* the acceptor's: the listener */
	struct workers conns;  /* a thread per connection */
	pthread_t acceptor;
	pthread_mutex_t mu;
	int quit;
	int stopped;       /* ports_stop ran (the caller's thread only) */
	int fds[PORTS_MAX_CONNS][2]; /* each connection's client and guest side, -1 if none */
	char ips[PORTS_MAX_CONNS][INET6_ADDRSTRLEN]; /* and the client's address */
};

/* --- routes ------------------------------------------------------------------ */

/* "<port>" of 1 to 65535 from s[0..n): the port, or 0. */
static unsigned parse_port(const char *s, size_t n)
{
	if (n == 0 || n > 5 || s[0] == '0')
		return 0;
	unsigned v = 0;
	for (size_t i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return 0;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	return v <= 65535 ? v : 0;
}

static int is_hex16(const char *s)
{
	for (int i = 0; i < 16; i++)
		if (!isdigit((unsigned char)s[i]) && !(s[i] >= 'a' && s[i] <= 'f'))
			return 0;
	return 1;
}

int ports_route(const char *domain, const char *target, size_t tlen, const char *host,
		struct ports_route *r)
{
	memset(r, 0, sizeof(*r));
	size_t dl = domain ? strlen(domain) : 0, hl = host ? strlen(host) : 0;
	/* <port>-<16 hex>.<domain> */
	if (dl && hl > dl + 1 && host[hl - dl - 1] == '.' && !strcasecmp(host + hl - dl, domain)) {
		size_t ll = hl - dl - 1;
		const char *dash = memchr(host, '-', ll);
		if (!dash || (size_t)(host + ll - dash - 1) != 16 || !is_hex16(dash + 1) ||
		    !(r->port = parse_port(host, (size_t)(dash - host))))
			return 0;
		snprintf(r->id, sizeof(r->id), "sbx_%.16s", dash + 1);
		r->rest = target;
		r->rest_len = tlen;
		return 1;
	}
	/* /sbx_<16 hex>/<port>[/...|?...], only without a domain: the
	 * domain's URLs keep each sandbox to an origin of its own. */
	if (dl || tlen < 23 || memcmp(target, "/sbx_", 5) || !is_hex16(target + 5) || target[21] != '/')
		return 0;
	size_t k = 22;
	while (k < tlen && isdigit((unsigned char)target[k]))
		k++;
	if ((k < tlen && target[k] != '/' && target[k] != '?') ||
	    !(r->port = parse_port(target + 22, k - 22)))
		return 0;
	snprintf(r->id, sizeof(r->id), "%.20s", target + 1);
	r->by_path = 1;
	r->rest = target + k;
	r->rest_len = tlen - k;
	return 1;
}

/* --- the request head ----------------------------------------------------------- */

struct head {
	struct http1_head r;
	char token[TOKEN_MAX + 1]; /* from the header, else the cookie */
};

/* The next pair ("name=value") of a Cookie header's value at *p, before
 * end: 1 with it in *s and *n, 0 at the end. */
static int next_cookie(const char **p, const char *end, const char **s, size_t *n)
{
	const char *c = *p;
	while (c < end && (*c == ' ' || *c == ';'))
		c++;
	if (c >= end)
		return 0;
	size_t left = (size_t)(end - c);
	const char *semi = memchr(c, ';', left);
	*s = c;
	*n = semi ? (size_t)(semi - c) : left;
	*p = c + *n;
	return 1;
}

/* Is pair s[0..n) our token's? */
static int our_cookie(const char *s, size_t n)
{
	size_t pl = strlen(PORTS_TOKEN_PARAM);
	return n > pl && !memcmp(s, PORTS_TOKEN_PARAM "=", pl + 1);
}

/* Parses buf[0..len), which ends with the blank line: 0, or -1 (http1.h). */
static int parse_head(const char *buf, size_t len, struct head *h)
{
	memset(h, 0, sizeof(*h));
	if (http1_parse(buf, len, &h->r) < 0)
		return -1;
	const char *at = NULL, *line, *name, *v;
	size_t ll, nl, vl;
	while (http1_next(&h->r, &at, &line, &ll, &name, &nl, &v, &vl)) {
		if (http1_is(line, ll, PORTS_TOKEN_HEADER)) {
			if (vl > TOKEN_MAX)
				return -1;
			snprintf(h->token, sizeof(h->token), "%.*s", (int)vl, v);
		} else if (http1_is(line, ll, "cookie") && !h->token[0]) {
			const char *p = v, *c;
			size_t n, pl = strlen(PORTS_TOKEN_PARAM) + 1;
			while (next_cookie(&p, v + vl, &c, &n))
				if (our_cookie(c, n) && n - pl <= TOKEN_MAX)
					snprintf(h->token, sizeof(h->token), "%.*s", (int)(n - pl), c + pl);
		}
	}
	return 0;
}

static int head_done(const char *buf, size_t len, void *arg)
{
	return (*(size_t *)arg = http1_head_len(buf, len)) > 0;
}

/* Reads until the blank line: the bytes read (the head and perhaps the
 * start of a body), with *head_len; -1 on a timeout, an end or too long. */
static ssize_t read_head(int fd, char *buf, size_t *head_len)
{
	return tcp_read_until(fd, buf, HEAD_MAX, HEAD_MS, head_done, head_len);
}

/* --- answers of our own -------------------------------------------------------- */

/* After an answer of ours: what the client still sends (a body nobody
 * reads) is taken for a moment, so that it reads the answer rather than
 * a reset. */
static void drain(int fd)
{
	char buf[4096];
	int64_t end = clock_ms() + 2000; /* at most 2 s in all */
	shutdown(fd, SHUT_WR);
	for (size_t n = 0; n < (64 << 10) && clock_ms() < end && tcp_wait(fd, POLLIN, 500) > 0;) {
		ssize_t got = recv(fd, buf, sizeof(buf), 0);
		if (got <= 0)
			break;
		n += (size_t)got;
	}
}

static void answer(int fd, unsigned status, const char *code, const char *msg)
{
	static const struct { unsigned s; const char *t; } texts[] = {
		{ 400, "Bad Request" }, { 401, "Unauthorized" },	{ 404, "Not Found" },
		{ 410, "Gone" },	{ 411, "Length Required" },	{ 429, "Too Many Requests" },
		{ 502, "Bad Gateway" }, { 503, "Service Unavailable" }, { 504, "Gateway Timeout" },
	};
	const char *text = "Error";
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		if (texts[i].s == status)
			text = texts[i].t;
	json_t *j = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
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
	drain(fd);
}

static void answer_dial_error(int fd, int e, const char *err)
{
	switch (e) {
	case -ENOENT: answer(fd, 404, "not_found", err); break;
	case -EACCES: answer(fd, 401, "unauthorized", err); break;
	case -ESHUTDOWN: answer(fd, 410, "gone", err); break;
	case -EDQUOT: answer(fd, 429, "quota_exceeded", err); break;
	case -ECONNREFUSED: answer(fd, 502, "port_closed", err); break;
	case -ETIMEDOUT: answer(fd, 504, "timeout", err); break;
	default: answer(fd, 503, "unavailable", err); break;
	}
}

static int token_chars_ok(const char *t)
{
	return strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") ==
	       strlen(t);
}

/* The token in the query (?cpuos_token=T): 1 with T in token and the
 * target without it in loc; 0 when there is none. */
static int query_token(const struct head *h, char *token, char *loc, size_t loclen)
{
	const char *t = h->r.target, *q = memchr(t, '?', h->r.target_len), *end = t + h->r.target_len;
	size_t pl = strlen(PORTS_TOKEN_PARAM);
	for (const char *p = q ? q + 1 : end; p < end;) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *pe = amp ? amp : end;
		if ((size_t)(pe - p) > pl && !memcmp(p, PORTS_TOKEN_PARAM "=", pl + 1) &&
		    (size_t)(pe - p) - pl - 1 <= TOKEN_MAX) {
			snprintf(token, TOKEN_MAX + 1, "%.*s", (int)((size_t)(pe - p) - pl - 1),
				 p + pl + 1);
			if (amp) /* what came before it (through its '?' or '&'), then after */
				snprintf(loc, loclen, "%.*s%.*s", (int)(p - t), t, (int)(end - amp - 1),
					 amp + 1);
			else /* the last: before it, without the '?' or '&' */
				snprintf(loc, loclen, "%.*s", (int)(p - 1 - t), t);
			/* "//host/..." would send the browser to another site */
			size_t k = strspn(loc, "/\\");
			if (k > 1)
				memmove(loc + 1, loc + k, strlen(loc + k) + 1);
			return 1;
		}
		p = amp ? amp + 1 : end;
	}
	return 0;
}

static void redirect(int fd, const char *loc, const char *token, const char *cookie_path)
{
	char head[HEAD_MAX + 512];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 302 Found\r\nLocation: %s\r\n"
			 "Set-Cookie: " PORTS_TOKEN_PARAM "=%s; Path=%s; HttpOnly; SameSite=Lax\r\n"
			 "Content-Length: 0\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
			 loc, token, cookie_path);
	if (n > 0 && (size_t)n < sizeof(head))
		tcp_send_all(fd, head, (size_t)n);
	drain(fd);
}

/* --- what the guest sees ----------------------------------------------------------- */

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

/* The head as the guest gets it: the target cut from the route's prefix,
 * our token taken out, Connection: close (the next request may be for
 * another sandbox; Upgrade for a WebSocket), forwarded headers added. */
static int guest_head(const struct head *h, const struct ports_route *rt, const char *client,
		      struct out *o)
{
	int r = put(o, h->r.buf, h->r.method_len + 1);
	if (rt->rest_len == 0 || rt->rest[0] != '/')
		r |= put(o, "/", 1);
	r |= put(o, rt->rest, rt->rest_len);
	r |= put(o, " ", 1) | put(o, h->r.version, 8) | put(o, "\r\n", 2);
	static const char *const drop[] = { PORTS_TOKEN_HEADER, "forwarded", "x-real-ip",
					    "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto" };
	const char *at = NULL, *l, *name, *v;
	size_t n, nl, vl;
	while (http1_next(&h->r, &at, &l, &n, &name, &nl, &v, &vl)) {
		int skip = http1_is(l, n, "connection") || http1_is(l, n, "http2-settings");
		for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++)
			skip |= http1_is(l, n, drop[i]);
		if (skip)
			continue;
		if (!http1_is(l, n, "cookie")) {
			r |= put(o, l, n);
			continue;
		}
		size_t mark = o->len, cn; /* all pairs but ours */
		int pairs = 0;
		r |= put(o, "Cookie: ", 8);
		for (const char *p = v, *c; next_cookie(&p, v + vl, &c, &cn);)
			if (!our_cookie(c, cn)) {
				if (pairs++)
					r |= put(o, "; ", 2);
				r |= put(o, c, cn);
			}
		if (pairs)
			r |= put(o, "\r\n", 2);
		else
			o->len = mark;
	}
	char fwd[600];
	int k = snprintf(fwd, sizeof(fwd), "X-Forwarded-For: %s\r\nX-Forwarded-Proto: http\r\n", client);
	if (h->r.host_raw[0])
		k += snprintf(fwd + k, sizeof(fwd) - (size_t)k, "X-Forwarded-Host: %s\r\n", h->r.host_raw);
	r |= put(o, fwd, (size_t)k);
	r |= h->r.websocket ? put(o, "Connection: Upgrade\r\n", 21) : put(o, "Connection: close\r\n", 19);
	r |= put(o, "\r\n", 2);
	return r ? -1 : 0;
}

/* --- a connection --------------------------------------------------------------------- */

struct conn {
	struct ports *p;
	int fd, at;
	char client[INET6_ADDRSTRLEN];
};

static void set_guest_fd(struct conn *c, int fd)
{
	pthread_mutex_lock(&c->p->mu);
	c->p->fds[c->at][1] = fd;
	int quit = c->p->quit;
	pthread_mutex_unlock(&c->p->mu);
	if (quit && fd >= 0)
		shutdown(fd, SHUT_RDWR);
}

static void serve(struct conn *c)
{
	struct ports *p = c->p;
	char *buf = malloc(HEAD_MAX), *ob = malloc(HEAD_MAX + 1024), err[512];
	size_t head_len;
	ssize_t got = buf && ob ? read_head(c->fd, buf, &head_len) : -1;
	struct head h;
	struct ports_route rt;
	if (got < 0)
		goto out;
	if (parse_head(buf, head_len, &h) < 0) {
		answer(c->fd, 400, "bad_request", "not an HTTP/1 request");
		goto out;
	}
	if (!ports_route(p->domain[0] ? p->domain : NULL, h.r.target, h.r.target_len, h.r.host, &rt)) {
		answer(c->fd, 404, "not_found",
		       p->domain[0] ? "no sandbox port here: URLs are http://<port>-<id>.<domain>/"
				    : "no sandbox port here: URLs are /<sandbox id>/<port>/");
		goto out;
	}
	char qtoken[TOKEN_MAX + 1], loc[HEAD_MAX];
	if (query_token(&h, qtoken, loc, sizeof(loc))) {
		/* A browser's first visit: the token becomes its cookie. */
		int e = token_chars_ok(qtoken)
			    ? p->dial(p->arg, rt.id, qtoken, rt.port, NULL, err, sizeof(err))
			    : -EACCES;
		if (e == -EACCES && !token_chars_ok(qtoken))
			snprintf(err, sizeof(err), "not a traffic token");
		char cookie_path[64];
		snprintf(cookie_path, sizeof(cookie_path), rt.by_path ? "/%s/%u" : "/", rt.id, rt.port);
		if (e < 0)
			answer_dial_error(c->fd, e, err);
		else
			redirect(c->fd, loc, qtoken, cookie_path);
		goto out;
	}
	if (h.r.chunked) { /* no framing of our own for it: browsers send a length */
		answer(c->fd, 411, "length_required",
		       "a path URL takes a request body with a Content-Length only");
		goto out;
	}
	int gfd;
	int e = p->dial(p->arg, rt.id, h.token[0] ? h.token : NULL, rt.port, &gfd, err, sizeof(err));
	if (e < 0) {
		answer_dial_error(c->fd, e, err);
		goto out;
	}
	set_guest_fd(c, gfd);
	/* A guest paused or gone sends no end: probes find that out. */
	int on = 1, idle = 60, intvl = 10, cnt = 3;
	setsockopt(gfd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
	setsockopt(gfd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(gfd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(gfd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	tcp_send_timeout(gfd, 60);
	struct out o = { .p = ob, .cap = HEAD_MAX + 1024 };
	/* What came after the head: the body's start (no more than the
	 * body: the rest would be a next request). */
	size_t extra = (size_t)got - head_len;
	long long body = h.r.body;
	if ((long long)extra > body)
		extra = (size_t)body;
	body -= (long long)extra;
	if (guest_head(&h, &rt, c->client, &o) < 0) {
		answer(c->fd, 400, "bad_request", "the request head is too large");
	} else if (tcp_send_all(gfd, o.p, o.len) == 0 &&
		   tcp_send_all(gfd, buf + head_len, extra) == 0) {
		free(buf);
		free(ob);
		buf = ob = NULL;
		tcp_relay_one(c->fd, gfd, body, h.r.websocket, IDLE_MS);
	}
	set_guest_fd(c, -1);
	close(gfd);
	if (p->hangup)
		p->hangup(p->arg, rt.id);
out:
	free(buf);
	free(ob);
}

static void conn_main(void *arg)
{
	struct conn *c = arg;
	serve(c);
	pthread_mutex_lock(&c->p->mu);
	c->p->fds[c->at][0] = -1;
	close(c->fd); /* under the lock: ports_close never shuts a number reused */
	pthread_mutex_unlock(&c->p->mu);
	free(c);
}

/* --- accepting --------------------------------------------------------------------- */

static void take(struct ports *p, int fd, const struct sockaddr_storage *sa)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		tcp_reset(fd);
		return;
	}
	if (sa->ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, c->client,
			  sizeof(c->client));
	else
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, c->client,
			  sizeof(c->client));
	int at = -1, same = 0;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < PORTS_MAX_CONNS; i++) {
		if (p->fds[i][0] < 0)
			at = at < 0 ? i : at;
		else
			same += !strcmp(p->ips[i], c->client);
	}
	if (same >= PORTS_MAX_PER_IP && !p->no_ip_limit) /* one address cannot take every thread */
		at = -1;
	if (at >= 0) {
		p->fds[at][0] = fd;
		p->fds[at][1] = -1;
		snprintf(p->ips[at], sizeof(p->ips[at]), "%s", c->client);
	}
	pthread_mutex_unlock(&p->mu);
	if (at < 0) {
		free(c);
		tcp_reset(fd);
		return;
	}
	c->p = p;
	c->fd = fd;
	c->at = at;
	tcp_send_timeout(fd, 60);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (workers_spawn(&p->conns, conn_main, c) != 0) {
		pthread_mutex_lock(&p->mu);
		p->fds[at][0] = -1;
		pthread_mutex_unlock(&p->mu);
		free(c);
		tcp_reset(fd);
	}
}

/* The listener is readable (the loop's thread). */
static void on_accept(struct loop *l, int lfd, short revents, void *arg)
{
	(void)revents;
	struct sockaddr_storage sa;
	socklen_t sl = sizeof(sa);
	int fd = accept4(lfd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC);
	if (fd >= 0)
		take(arg, fd, &sa);
	else if (errno == EMFILE || errno == ENFILE)
		loop_pause(l, lfd, FULL_PAUSE_MS); /* out of descriptors: let connections end */
}

static void *acceptor_main(void *arg)
{
	struct ports *p = arg;
	int r = loop_run(p->loop);
	if (r < 0)
		log_error("ports: the acceptor stopped: %s", strerror(-r));
	return NULL;
}

/* HOST:PORT ([v6]:PORT) into host and port, and a listening socket (or
 * fd, when > 0, as it is): its fd or -errno. */
static int listen_on(const char *addr, int fd_in, char *host, size_t hostlen, char *port,
		     size_t portlen, char *err, size_t errlen)
{
	const char *colon = strrchr(addr, ':');
	if (!colon || colon == addr || !colon[1]) {
		snprintf(err, errlen, "--url-listen '%s' is not HOST:PORT", addr);
		return -EINVAL;
	}
	size_t hl = (size_t)(colon - addr);
	if (addr[0] == '[' && hl >= 2 && addr[hl - 1] == ']')
		snprintf(host, hostlen, "%.*s", (int)(hl - 2), addr + 1);
	else
		snprintf(host, hostlen, "%.*s", (int)hl, addr);
	snprintf(port, portlen, "%s", colon + 1);
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE };
	struct addrinfo *ai;
	if (getaddrinfo(host, port, &hints, &ai) != 0) {
		snprintf(err, errlen, "--url-listen '%s' is not a numeric HOST:PORT", addr);
		return -EINVAL;
	}
	if (fd_in > 0) {
		freeaddrinfo(ai);
		return fd_in;
	}
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1, e = 0;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 256) < 0)
		e = errno;
	freeaddrinfo(ai);
	if (e) {
		snprintf(err, errlen, "cannot listen on %s for port URLs: %s", addr, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	return fd;
}

int ports_listen(const char *addr, char *err, size_t errlen)
{
	char host[256], port[8];
	return listen_on(addr, -1, host, sizeof(host), port, sizeof(port), err, errlen);
}

int ports_open(const struct ports_config *c, struct ports **out, char *err, size_t errlen)
{
	struct ports *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	char host[256];
	int r = listen_on(c->listen, c->fd, host, sizeof(host), p->listen_port,
			  sizeof(p->listen_port), err, errlen);
	if (r < 0) {
		free(p);
		return r;
	}
	p->lfd = r;
	p->dial = c->dial;
	p->hangup = c->hangup;
	p->arg = c->arg;
	p->no_ip_limit = c->no_ip_limit;
	if (c->domain && c->domain[0]) {
		snprintf(p->url_host, sizeof(p->url_host), "%s", c->domain);
		snprintf(p->domain, sizeof(p->domain), "%.*s", (int)strcspn(c->domain, ":"), c->domain);
		for (char *s = p->domain; *s; s++)
			*s = (char)tolower((unsigned char)*s);
	} else if (c->public_host && c->public_host[0]) {
		snprintf(p->url_host, sizeof(p->url_host), "%s", c->public_host);
	} else {
		p->any_addr = !strcmp(host, "0.0.0.0") || !strcmp(host, "::");
		snprintf(p->url_host, sizeof(p->url_host), strchr(host, ':') ? "[%s]:%s" : "%s:%s", host,
			 p->listen_port);
	}
	for (int i = 0; i < PORTS_MAX_CONNS; i++)
		p->fds[i][0] = p->fds[i][1] = -1;
	pthread_mutex_init(&p->mu, NULL);
	/* The slots of fds bound the connections (take); each thread's stack
	 * is small, the relay's buffers are on the heap. */
	int wr = workers_init(&p->conns, 0, 256 << 10, NULL);
	if (wr < 0 || loop_new(&p->loop) < 0 ||
	    loop_add(p->loop, p->lfd, POLLIN, on_accept, NULL, p) < 0 ||
	    pthread_create(&p->acceptor, NULL, acceptor_main, p) != 0) {
		snprintf(err, errlen, "cannot start the port URL proxy");
		loop_free(p->loop);
		if (wr == 0)
			workers_release(&p->conns);
		pthread_mutex_destroy(&p->mu);
		close(p->lfd);
		free(p);
		return -EAGAIN;
	}
	*out = p;
	return 0;
}

void ports_stop(struct ports *p)
{
	if (!p || p->stopped)
		return;
	p->stopped = 1;
	loop_stop(p->loop);
	pthread_join(p->acceptor, NULL);
	pthread_mutex_lock(&p->mu);
	p->quit = 1;
	for (int i = 0; i < PORTS_MAX_CONNS; i++)
		for (int k = 0; k < 2; k++)
			if (p->fds[i][k] >= 0)
				shutdown(p->fds[i][k], SHUT_RDWR);
	pthread_mutex_unlock(&p->mu);
	workers_drain(&p->conns, -1);
}

void ports_close(struct ports *p)
{
	if (!p)
		return;
	ports_stop(p);
	loop_free(p->loop);
	close(p->lfd);
	workers_release(&p->conns);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

void ports_url(const struct ports *p, const char *id, const char *api_host, char *out,
	       size_t len)
{
	if (p->domain[0])
		snprintf(out, len, "http://{port}-%s.%s/", id + 4, p->url_host);
	else if (p->any_addr && api_host && api_host[0])
		snprintf(out, len, "http://%s:%s/%s/{port}/", api_host, p->listen_port, id);
	else
		snprintf(out, len, "http://%s/%s/{port}/", p->url_host, id);
}
