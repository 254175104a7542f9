/*
 * httpd: libmicrohttpd glue (see httpd.h). A connection's state is its
 * request, the program's app bytes behind it, the body kept so far and
 * an answer deferred while an upload streams: MHD takes a response only
 * before or after the body.
 */
#include "lib/httpd.h"

#include "common/buf.h"
#include "common/log.h"
#include "common/tcp.h"

#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define STREAM_BLOCK (64 * 1024) /* what a streamed answer asks its reader for */
#define FD_BLOCK     (16 * 1024) /* and an event stream its descriptor */
#define MESSAGE_MAX  1024	 /* the most message_max may be */

struct httpd {
	const struct httpd_config *c; /* &config */
	struct httpd_config config;
	struct MHD_Daemon *tcp, *unix_;
	char unix_path[108];
};

struct conn {
	struct httpd_req r; /* first: a request is its connection */
	const struct httpd *h;
	struct buf body;
	int too_big;
	uint64_t streamed;		/* an upload's bytes so far */
	struct MHD_Response *deferred; /* answered while the body streamed */
	int in_body;
	struct upgrade *upgrade; /* a 101 queued whose session has not begun */
	char *extra[HTTPD_EXTRA_HEADERS][2]; /* httpd_add_header's, for the answer */
	alignas(max_align_t) char app[]; /* the program's app_size bytes */
};

static struct conn *conn_of(struct httpd_req *r)
{
	return (struct conn *)r;
}

/* ---- answers ---- */

static int queue(struct httpd_req *r, unsigned status, struct MHD_Response *resp, const char *type)
{
	if (!resp)
		return -ENOMEM;
	if (type)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	r->status = (int)status;
	struct conn *c = conn_of(r);
	for (int i = 0; i < HTTPD_EXTRA_HEADERS && c->extra[i][0]; i++)
		MHD_add_response_header(resp, c->extra[i][0], c->extra[i][1]);
	if (c->in_body) {
		if (c->deferred)
			MHD_destroy_response(c->deferred);
		c->deferred = resp;
		return 0;
	}
	enum MHD_Result ok = MHD_queue_response(r->con, status, resp);
	MHD_destroy_response(resp);
	return ok == MHD_YES ? 0 : -EIO;
}

int httpd_add_header(struct httpd_req *r, const char *name, const char *value)
{
	struct conn *c = conn_of(r);
	int i = 0;
	while (i < HTTPD_EXTRA_HEADERS && c->extra[i][0])
		i++;
	if (i == HTTPD_EXTRA_HEADERS)
		return -ENOSPC;
	if (!(c->extra[i][0] = strdup(name)) || !(c->extra[i][1] = strdup(value))) {
		free(c->extra[i][0]);
		c->extra[i][0] = NULL;
		return -ENOMEM;
	}
	return 0;
}

int httpd_reply_verror(struct httpd_req *r, unsigned status, const char *type, const char *code,
		       const char *fmt, va_list ap)
{
	const struct httpd_config *cf = conn_of(r)->h->c;
	char msg[MESSAGE_MAX];
	size_t cap = sizeof(msg);
	if (cf->message_max && cf->message_max < cap)
		cap = cf->message_max;
	vsnprintf(msg, cap, fmt, ap);
	if (status >= 500)
		log_warn("%s: %u %s", r->method, status, msg);
	json_t *body = cf->ops->error_body(type, code, msg);
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!text)
		return -ENOMEM;
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (!resp)
		free(text);
	return queue(r, status, resp, "application/json");
}

int httpd_reply_error(struct httpd_req *r, unsigned status, const char *type, const char *code,
		      const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = httpd_reply_verror(r, status, type, code, fmt, ap);
	va_end(ap);
	return rc;
}

int httpd_refuse(struct httpd_req *r, enum httpd_refusal why, unsigned status, const char *fmt,
		 ...)
{
	const struct httpd_code *name = &conn_of(r)->h->c->codes[why];
	va_list ap;
	va_start(ap, fmt);
	int rc = httpd_reply_verror(r, status, name->type, name->code, fmt, ap);
	va_end(ap);
	return rc;
}

int httpd_reply_buffer(struct httpd_req *r, unsigned status, const char *content_type, char *data,
		       size_t n)
{
	struct MHD_Response *resp =
		data ? MHD_create_response_from_buffer(n, data, MHD_RESPMEM_MUST_FREE) : NULL;
	if (!resp) {
		free(data);
		return httpd_refuse(r, HTTPD_INTERNAL, 500, "out of memory");
	}
	return queue(r, status, resp, content_type);
}

int httpd_reply_json(struct httpd_req *r, unsigned status, json_t *body)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!text)
		return httpd_refuse(r, HTTPD_INTERNAL, 500, "out of memory");
	return httpd_reply_buffer(r, status, "application/json", text, strlen(text));
}

int httpd_reply_empty(struct httpd_req *r, unsigned status)
{
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	return queue(r, status, resp, NULL);
}

struct stream_reply {
	ssize_t (*read)(void *arg, char *buf, size_t max);
	void (*done)(void *arg);
	void *arg;
};

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	struct stream_reply *s = cls;
	ssize_t n = s->read(s->arg, buf, max);
	if (n == 0)
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (n < 0)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	return n;
}

static void stream_free(void *cls)
{
	struct stream_reply *s = cls;
	s->done(s->arg);
	free(s);
}

/* A streamed answer whose reader asks for block bytes at a time. */
static struct MHD_Response *stream_response(ssize_t (*read)(void *arg, char *buf, size_t max),
					    void (*done)(void *arg), void *arg, size_t block,
					    uint64_t size)
{
	struct stream_reply *s = malloc(sizeof(*s));
	if (!s) {
		done(arg);
		return NULL;
	}
	*s = (struct stream_reply){ .read = read, .done = done, .arg = arg };
	struct MHD_Response *resp = MHD_create_response_from_callback(size, block, stream_read, s,
								      stream_free);
	if (!resp)
		stream_free(s);
	return resp;
}

int httpd_reply_stream(struct httpd_req *r, unsigned status, const char *content_type,
		       ssize_t (*read)(void *arg, char *buf, size_t max), void (*done)(void *arg),
		       void *arg)
{
	struct MHD_Response *resp = stream_response(read, done, arg, STREAM_BLOCK, MHD_SIZE_UNKNOWN);
	if (!resp)
		return httpd_refuse(r, HTTPD_INTERNAL, 500, "out of memory");
	return queue(r, status, resp, content_type);
}

/* An upgraded connection's session, run in a thread of its own. */
struct upgrade {
	httpd_session_fn session;
	void (*drop)(void *arg);
	void *arg;
	int fd;
	char *extra;
	size_t nextra;
	struct MHD_UpgradeResponseHandle *urh;
};

static void *upgrade_main(void *p)
{
	struct upgrade *u = p;
	u->session(u->arg, u->fd, u->extra, u->nextra);
	MHD_upgrade_action(u->urh, MHD_UPGRADE_ACTION_CLOSE);
	free(u->extra);
	free(u);
	return NULL;
}

static void upgrade_drop(struct upgrade *u)
{
	if (u->drop)
		u->drop(u->arg);
	free(u);
}

static void on_upgrade(void *cls, struct MHD_Connection *con, void *req_cls, const char *extra_in,
		       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	(void)con;
	struct upgrade *u = cls;
	struct conn *c = req_cls;
	if (c)
		c->upgrade = NULL; /* the session's now, not on_completed's */
	u->fd = sock;
	u->urh = urh;
	u->extra = extra_in_size ? malloc(extra_in_size) : NULL;
	if (u->extra) {
		memcpy(u->extra, extra_in, extra_in_size);
		u->nextra = extra_in_size;
	}
	pthread_t t;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if ((extra_in_size && !u->extra) || pthread_create(&t, &at, upgrade_main, u) != 0) {
		MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
		free(u->extra);
		upgrade_drop(u);
	}
	pthread_attr_destroy(&at);
}

int httpd_reply_upgrade(struct httpd_req *r, const char *const *headers, httpd_session_fn session,
			void (*drop)(void *arg), void *arg)
{
	struct upgrade *u = calloc(1, sizeof(*u));
	struct MHD_Response *resp = u ? MHD_create_response_for_upgrade(on_upgrade, u) : NULL;
	if (!resp) {
		free(u);
		if (drop)
			drop(arg);
		return httpd_refuse(r, HTTPD_INTERNAL, 500, "out of memory");
	}
	*u = (struct upgrade){ .session = session, .drop = drop, .arg = arg, .fd = -1 };
	for (size_t i = 0; headers && headers[i]; i += 2)
		MHD_add_response_header(resp, headers[i], headers[i + 1]);
	/* on_upgrade takes u once the 101 is sent; a connection that ends
	 * first leaves it to on_completed. */
	struct conn *c = conn_of(r);
	int e = queue(r, MHD_HTTP_SWITCHING_PROTOCOLS, resp, NULL);
	if (e < 0) /* refused (an HTTP/1.0 request): nothing will take u */
		upgrade_drop(u);
	else
		c->upgrade = u;
	return e;
}

struct fd_reply {
	int fd;	  /* what the answer is read from */
	int conn; /* the client's connection */
};

/* Waits for the writer, or for the client to leave (which ends the
 * answer: the writer then meets a closed pipe). */
static ssize_t fd_read(void *arg, char *buf, size_t max)
{
	struct fd_reply *f = arg;
	for (;;) {
		int w = tcp_wait_peer(f->fd, POLLIN, f->conn, -1);
		if (w < 0)
			return -1;
		ssize_t n = read(f->fd, buf, max);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		return n;
	}
}

static void fd_done(void *arg)
{
	struct fd_reply *f = arg;
	close(f->fd);
	free(f);
}

int httpd_reply_fd(struct httpd_req *r, unsigned status, const char *content_type, int fd)
{
	return httpd_reply_fd_sized(r, status, content_type, fd, HTTPD_SIZE_UNKNOWN);
}

int httpd_reply_fd_sized(struct httpd_req *r, unsigned status, const char *content_type, int fd,
			 uint64_t size)
{
	struct fd_reply *f = malloc(sizeof(*f));
	if (!f) {
		close(fd);
		return httpd_refuse(r, HTTPD_INTERNAL, 500, "out of memory");
	}
	*f = (struct fd_reply){ .fd = fd, .conn = httpd_fd(r) };
	struct MHD_Response *resp = stream_response(fd_read, fd_done, f, FD_BLOCK, size);
	if (!resp)
		return httpd_refuse(r, HTTPD_INTERNAL, 500, "out of memory");
	/* An event stream is not to be held back by a proxy or a cache. */
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	return queue(r, status, resp, content_type);
}

/* ---- what a request carries ---- */

const char *httpd_header(struct httpd_req *r, const char *name)
{
	return MHD_lookup_connection_value(r->con, MHD_HEADER_KIND, name);
}

const char *httpd_query(struct httpd_req *r, const char *name, int *bad)
{
	const char *v = NULL;
	size_t n = 0;
	if (MHD_lookup_connection_value_n(r->con, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v,
					  &n) != MHD_YES)
		return NULL;
	if (!v)
		return "";
	if (strlen(v) != n && bad)
		*bad = 1;
	return v;
}

struct query_each {
	const char *name;
	int (*fn)(void *arg, const char *value);
	void *arg;
	int rc, *bad;
};

static enum MHD_Result query_one(void *cls, enum MHD_ValueKind kind, const char *key,
				 size_t key_size, const char *value, size_t value_size)
{
	struct query_each *q = cls;
	(void)kind;
	if (!key || strlen(key) != key_size || strcmp(key, q->name))
		return MHD_YES;
	if (value && strlen(value) != value_size) {
		if (q->bad)
			*q->bad = 1;
		q->rc = -1;
		return MHD_NO;
	}
	q->rc = q->fn(q->arg, value ? value : "");
	return q->rc ? MHD_NO : MHD_YES;
}

int httpd_query_each(struct httpd_req *r, const char *name,
		     int (*fn)(void *arg, const char *value), void *arg, int *bad)
{
	struct query_each q = { name, fn, arg, 0, bad };
	MHD_get_connection_values_n(r->con, MHD_GET_ARGUMENT_KIND, query_one, &q);
	return q.rc;
}

struct qs {
	struct buf *b;
	int n, err;
};

static void qs_put(struct qs *q, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char e[3] = { '%', hex[c >> 4], hex[c & 15] };
		int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			    (c >= '0' && c <= '9') || strchr("-._~", c);
		if ((plain ? buf_add(q->b, s, 1) : buf_add(q->b, e, 3)) < 0)
			q->err = 1;
	}
}

static enum MHD_Result qs_each(void *cls, enum MHD_ValueKind kind, const char *key,
			       const char *value)
{
	(void)kind;
	struct qs *q = cls;
	if (buf_add(q->b, q->n++ ? "&" : "?", 1) < 0)
		q->err = 1;
	qs_put(q, key);
	if (value) {
		if (buf_add(q->b, "=", 1) < 0)
			q->err = 1;
		qs_put(q, value);
	}
	return MHD_YES;
}

int httpd_query_string(struct httpd_req *r, struct buf *b)
{
	struct qs q = { .b = b };
	MHD_get_connection_values(r->con, MHD_GET_ARGUMENT_KIND, qs_each, &q);
	return q.err ? -E2BIG : 0;
}

int httpd_fd(struct httpd_req *r)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(r->con, MHD_CONNECTION_INFO_CONNECTION_FD);
	return ci ? ci->connect_fd : -1;
}

int httpd_client_gone(struct httpd_req *r)
{
	return tcp_peer_gone(httpd_fd(r));
}

/* ---- routing ---- */

/* Matches path against pattern, capturing each {name} into r->param: 1
 * on a match. A capture is 1 to param_max - 1 bytes without a '/'. A
 * pattern "*" matches every path: a proxy's catch-all. */
static int match(const char *pattern, const char *path, struct httpd_req *r, size_t param_max)
{
	int slot = 0;
	if (!strcmp(pattern, "*"))
		return 1;
	while (*pattern && *path) {
		if (*pattern == '{') {
			const char *close = strchr(pattern, '}');
			size_t n = strcspn(path, "/");
			if (!close || n == 0 || n >= param_max || slot >= HTTPD_MAX_PARAMS)
				return 0;
			memcpy(r->param[slot], path, n);
			r->param[slot++][n] = '\0';
			pattern = close + 1;
			path += n;
			continue;
		}
		if (*pattern++ != *path++)
			return 0;
	}
	return *pattern == '\0' && *path == '\0';
}

/* The route of r; *wrong_method when only the method was off. */
static const struct httpd_route *find_route(const struct httpd_config *cf, struct httpd_req *r,
					    int *wrong_method)
{
	size_t param_max = cf->param_max && cf->param_max <= HTTPD_PARAM_MAX ? cf->param_max
									     : HTTPD_PARAM_MAX;
	const struct httpd_route *table = cf->ops->routes ? cf->ops->routes(r) : NULL;
	*wrong_method = 0;
	for (const struct httpd_route *rt = table ? table : cf->routes; rt->path; rt++) {
		if (!match(rt->path, r->url, r, param_max))
			continue;
		if (!strcmp(rt->method, r->method))
			return rt;
		*wrong_method = 1;
	}
	return NULL;
}

/* Whether got (may be NULL) is want, in a time that tells nothing of
 * where they differ. */
static int same_secret(const char *got, const char *want)
{
	size_t n = strlen(want), g = got ? strlen(got) : 0;
	unsigned char d = g != n;
	for (size_t i = 0; i < n; i++)
		d |= (unsigned char)(i < g ? got[i] : 0) ^ (unsigned char)want[i];
	return d == 0;
}

/* Who is asking: the Unix socket is the local administrator; a route that
 * is not open (or none) needs a key the program knows. 0, or -1 after
 * refusing. */
static int authenticate(const struct httpd_config *cf, struct httpd_req *r,
			const struct httpd_route *rt)
{
	if (!r->local && cf->gate_value && !same_secret(httpd_header(r, cf->gate_header),
							cf->gate_value)) {
		httpd_reply_error(r, 403, NULL, "not_internal",
				  "this listener serves the cluster's API replicas only");
		return -1;
	}
	if (r->local || (rt && rt->flags & (HTTPD_OPEN | HTTPD_CLUSTER)) ||
	    (!rt && cf->no_route_open))
		return 0;
	const char *auth = httpd_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
	const char *token = !auth && rt && rt->flags & HTTPD_QUERY_KEY
				    ? MHD_lookup_connection_value(r->con, MHD_GET_ARGUMENT_KIND,
								  "access_token")
				    : NULL;
	if (token && *token) {
		if (!cf->ops->auth || cf->ops->auth(r, token) < 0) {
			httpd_refuse(r, HTTPD_BAD_KEY, 401, "invalid API key");
			return -1;
		}
		return 0;
	}
	if (!auth || strncmp(auth, "Bearer ", 7) || !auth[7]) {
		httpd_refuse(r, HTTPD_NO_KEY, 401, "missing API key (Authorization: Bearer %s)",
			     cf->key_form);
		return -1;
	}
	if (!cf->ops->auth || cf->ops->auth(r, auth + 7) < 0) {
		httpd_refuse(r, HTTPD_BAD_KEY, 401, "invalid API key");
		return -1;
	}
	return 0;
}

static uint64_t cap_of(const struct httpd_config *cf, const struct httpd_route *rt)
{
	return rt->flags & (HTTPD_UPLOAD | HTTPD_FILE) ? cf->max_file : cf->max_body;
}

/* First call for a request: route, authenticate, check the declared size.
 * Answers right away when any of them refuses. */
static void begin(struct conn *c)
{
	const struct httpd_config *cf = c->h->c;
	struct httpd_req *r = &c->r;
	int wrong_method;
	const struct httpd_route *rt = find_route(cf, r, &wrong_method);
	if (authenticate(cf, r, rt) < 0)
		return;
	if (rt && rt->flags & HTTPD_LOCAL && !r->local)
		rt = NULL, wrong_method = 0;
	if (rt && rt->flags & HTTPD_CLUSTER && !r->local && !cf->gate_value)
		rt = NULL, wrong_method = 0;
	if (!rt) {
		if (wrong_method)
			httpd_refuse(r, HTTPD_BAD_METHOD, 405, "%s is not allowed on %s", r->method,
				     r->url);
		else
			httpd_refuse(r, HTTPD_NO_ROUTE, 404, "no route %s %s", r->method, r->url);
		return;
	}
	r->route = rt;
	const char *cl = httpd_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
	unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
	/* libmicrohttpd 0.9.75 answers "Expect: 100-continue" on a request
	 * without a body with 100 Continue, then spins without answering
	 * once more bytes follow (tests/fuzz/corpus/http/expect_nobody):
	 * refuse such a request before it can. */
	if (!declared && httpd_header(r, MHD_HTTP_HEADER_EXPECT) &&
	    !httpd_header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
		httpd_refuse(r, HTTPD_EXPECT, 417, "Expect without a request body");
		return;
	}
	uint64_t max = cap_of(cf, rt);
	if (declared > max) {
		httpd_refuse(r, HTTPD_TOO_BIG, 413, "%s over %llu bytes",
			     rt->flags & HTTPD_UPLOAD ? "file" : "body", (unsigned long long)max);
		return;
	}
	if (rt->flags & HTTPD_UPLOAD && cf->ops->upload(r, HTTPD_UP_BEGIN, NULL, 0) < 0 &&
	    !r->status)
		httpd_refuse(r, HTTPD_INTERNAL, 500, "upload failed to start");
}

/* A piece of the body: streamed to an upload, else kept (up to the cap).
 * 0, or -ENOMEM to drop the connection. */
static int take_body(struct conn *c, const char *data, size_t n)
{
	const struct httpd_config *cf = c->h->c;
	struct httpd_req *r = &c->r;
	if (r->route->flags & HTTPD_UPLOAD) {
		c->streamed += n;
		c->in_body = 1;
		if (c->streamed > cf->max_file)
			httpd_refuse(r, HTTPD_TOO_BIG, 413, "file over %llu bytes",
				     (unsigned long long)cf->max_file);
		else if (cf->ops->upload(r, HTTPD_UP_DATA, data, n) < 0 && !r->status)
			httpd_refuse(r, HTTPD_INTERNAL, 500, "upload failed");
		c->in_body = 0;
		return 0;
	}
	if (c->too_big || c->body.len + n > cap_of(cf, r->route)) {
		c->too_big = 1;
		return 0;
	}
	int rc = buf_add(&c->body, data, n);
	/* Taken: MHD moves past it in its connection's buffer, where a
	 * secret's value would otherwise stay until the next request. */
	explicit_bzero((char *)data, n);
	return rc;
}

/* The body is in: the handler answers. */
static void end(struct conn *c)
{
	const struct httpd_config *cf = c->h->c;
	struct httpd_req *r = &c->r;
	int rc = 0;
	if (r->route->flags & HTTPD_UPLOAD) {
		rc = cf->ops->upload(r, HTTPD_UP_END, NULL, 0);
	} else if (c->too_big) {
		httpd_refuse(r, HTTPD_TOO_BIG, 413, "body over %llu bytes",
			     (unsigned long long)cap_of(cf, r->route));
	} else {
		r->body = c->body.p;
		r->len = c->body.len;
		rc = cf->ops->handle ? cf->ops->handle(r) : r->route->handler(r);
	}
	if (!r->status)
		httpd_refuse(r, HTTPD_INTERNAL, 500, "handler failed (%d)", rc);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *con, const char *url,
				  const char *method, const char *version, const char *data,
				  size_t *data_size, void **con_cls)
{
	(void)version;
	const struct httpd *h = cls;
	struct conn *c = *con_cls;
	if (!c) {
		if (!(c = calloc(1, sizeof(*c) + h->c->app_size)))
			return MHD_NO;
		*con_cls = c;
		c->h = h;
		buf_init(&c->body, 0);
		c->body.secret = 1; /* a secret's value may be in it */
		c->r = (struct httpd_req){
			.con = con, .method = method, .url = url, .arg = h->c->arg, .app = c->app
		};
		/* The Unix socket is the administrator's. Told by the peer's
		 * address family: comparing daemons would read h->unix_ while
		 * httpd_start still writes it and TCP already serves (TSan). */
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(con, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		c->r.local = ci && ci->client_addr && ci->client_addr->sa_family == AF_UNIX;
		if (h->c->ops->start)
			h->c->ops->start(&c->r);
		begin(c);
		return MHD_YES;
	}
	struct httpd_req *r = &c->r;
	if (*data_size) {
		size_t n = *data_size;
		*data_size = 0;
		if (r->status) /* answered already: the body is dropped */
			return MHD_YES;
		return take_body(c, data, n) < 0 ? MHD_NO : MHD_YES;
	}
	if (c->deferred) {
		enum MHD_Result ok = MHD_queue_response(con, (unsigned)r->status, c->deferred);
		MHD_destroy_response(c->deferred);
		c->deferred = NULL;
		return ok;
	}
	if (!r->status)
		end(c);
	return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *con, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)con, (void)toe;
	const struct httpd *h = cls;
	struct conn *c = *con_cls;
	if (!c)
		return;
	if (h->c->ops->finish)
		h->c->ops->finish(&c->r);
	if (c->deferred)
		MHD_destroy_response(c->deferred);
	if (c->upgrade) /* the 101 never went out */
		upgrade_drop(c->upgrade);
	for (int i = 0; i < HTTPD_EXTRA_HEADERS; i++)
		free(c->extra[i][0]), free(c->extra[i][1]);
	buf_release(&c->body);
	free(c);
	*con_cls = NULL;
}

/* ---- listeners ---- */

static int listen_unix(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path too long: '%s'", path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	unlink(path); /* a stale socket from an earlier run */
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	/* Whoever can open the socket is the administrator: owner only. */
	mode_t old = umask(0177);
	int r = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0 || listen(fd, 128) < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot listen on '%s': %s", path, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	return fd;
}

/* Thread per connection, so every connection costs a thread: at most
 * max_conns of them, idle ones closed after idle_s, and on TCP at most
 * max_conns_per_ip from one address, so one client cannot take them all.
 * (The Unix socket is the administrator's alone.) Each connection's
 * memory, where MHD reads requests, is over 32 KiB so that MHD maps it
 * rather than mallocs it: unmapped when the connection ends, and zeroed
 * between its requests, it leaves no body (a secret's value) behind. */
#define CONN_MEMORY (64u * 1024)
static struct MHD_Daemon *start_mhd(struct httpd *h, int fd, int tcp)
{
	const struct httpd_config *c = h->c;
	unsigned per_ip = tcp ? c->max_conns_per_ip : 0;
	return MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
					MHD_USE_ERROR_LOG | MHD_ALLOW_UPGRADE,
				0, NULL, NULL, on_request, h, MHD_OPTION_LISTEN_SOCKET, fd,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
				MHD_OPTION_CONNECTION_LIMIT, c->max_conns,
				MHD_OPTION_CONNECTION_TIMEOUT, c->idle_s,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
				MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_END);
}

/* Serves fd (a listener, taken) in *d: 0, or -errno with a reason. */
static int serve(struct httpd *h, int fd, int tcp, const char *where, struct MHD_Daemon **d,
		 char *err, size_t errlen)
{
	if (fd < 0)
		return fd;
	if (!(*d = start_mhd(h, fd, tcp))) {
		close(fd);
		snprintf(err, errlen, tcp ? "cannot start the HTTP server on %s"
					  : "cannot start the HTTP server on '%s'", where);
		return -EIO;
	}
	return 0;
}

int httpd_start(const struct httpd_config *c, struct httpd **out, char *err, size_t errlen)
{
	struct httpd *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->config = *c;
	h->c = &h->config;
	/* The Unix socket first: a TCP listener bound earlier (while root)
	 * has queued connections already, answered the moment its server
	 * runs, and whoever saw an answer there may use the socket next. */
	int r = 0;
	if (c->unix_path) {
		snprintf(h->unix_path, sizeof(h->unix_path), "%s", c->unix_path);
		r = serve(h, listen_unix(c->unix_path, err, errlen), 0, c->unix_path, &h->unix_,
			  err, errlen);
	}
	if (!r && c->tcp)
		r = serve(h, c->tcp_fd > 0 ? c->tcp_fd : tcp_listen(c->tcp, err, errlen), 1, c->tcp,
			  &h->tcp, err, errlen);
	if (r) {
		httpd_stop(h);
		return r;
	}
	*out = h;
	return 0;
}

void httpd_stop(struct httpd *h)
{
	if (!h)
		return;
	if (h->tcp)
		MHD_stop_daemon(h->tcp);
	if (h->unix_) {
		MHD_stop_daemon(h->unix_);
		unlink(h->unix_path);
	}
	free(h);
}
