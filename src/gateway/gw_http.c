/*
 * gw_http: libmicrohttpd glue. Every request passes, in order: route
 * lookup, authentication (a gateway key), the body cap, then its handler.
 * Every refusal is an OpenAI-style JSON error.
 */
#include "gateway/gw_http.h"

#include "common/log.h"
#include "common/tcp.h"
#include "gateway/gateway.h"
#include "gateway/gw_config.h"

#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Each connection is a thread: at most this many, idle ones closed after
 * CONN_IDLE_S (a client keeps its connection between requests). */
#define MAX_CONNS   512u
#define CONN_IDLE_S 120u

struct gw_http {
	struct gw *g;
	struct MHD_Daemon *d;
};

struct conn {
	struct gw_req r;
	const struct gw_route *route;
	size_t cap;   /* of r.body */
	int too_big;
};

/* ---- answers ---- */

static int queue(struct gw_req *r, unsigned status, struct MHD_Response *resp, const char *type)
{
	if (!resp)
		return -ENOMEM;
	if (type)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	r->status = (int)status;
	enum MHD_Result ok = MHD_queue_response(r->con, status, resp);
	MHD_destroy_response(resp);
	return ok == MHD_YES ? 0 : -EIO;
}

static int reply_buf(struct gw_req *r, unsigned status, char *text)
{
	if (!text)
		return -ENOMEM;
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (!resp)
		free(text);
	return queue(r, status, resp, "application/json");
}

int gw_reply_json(struct gw_req *r, unsigned status, json_t *body)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!text)
		return gw_reply_error(r, 500, "server_error", "internal", "out of memory");
	return reply_buf(r, status, text);
}

int gw_reply_text(struct gw_req *r, unsigned status, const char *json)
{
	return reply_buf(r, status, strdup(json));
}

int gw_reply_error(struct gw_req *r, unsigned status, const char *type, const char *code,
		   const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (status >= 500)
		log_warn("%s: %u %s", r->method, status, msg);
	json_t *e = gw_error(type, code, "%s", msg);
	char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;
	json_decref(e);
	return reply_buf(r, status, text);
}

struct fd_reply {
	int fd;   /* what the answer is read from */
	int conn; /* the client's connection */
};

/* Waits in slices for the writer, so a client that left ends the wait. */
static ssize_t fd_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	struct fd_reply *f = cls;
	for (;;) {
		int w = tcp_wait(f->fd, POLLIN, 1000);
		if (w < 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (w == 0) {
			if (tcp_peer_gone(f->conn))
				return MHD_CONTENT_READER_END_WITH_ERROR;
			continue;
		}
		ssize_t n = read(f->fd, buf, max);
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0)
			return MHD_CONTENT_READER_END_OF_STREAM;
		return n < 0 ? MHD_CONTENT_READER_END_WITH_ERROR : n;
	}
}

static void fd_free(void *cls)
{
	struct fd_reply *f = cls;
	close(f->fd);
	free(f);
}

int gw_reply_fd(struct gw_req *r, unsigned status, const char *content_type, int fd)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(r->con, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct fd_reply *f = malloc(sizeof(*f));
	if (!f) {
		close(fd);
		return gw_reply_error(r, 500, "server_error", "internal", "out of memory");
	}
	*f = (struct fd_reply){ .fd = fd, .conn = ci ? ci->connect_fd : -1 };
	struct MHD_Response *resp =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, fd_read, f, fd_free);
	if (!resp) {
		fd_free(f);
		return gw_reply_error(r, 500, "server_error", "internal", "out of memory");
	}
	/* An event stream is not to be held back by a proxy or a cache. */
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	return queue(r, status, resp, content_type);
}

const char *gw_header(struct gw_req *r, const char *name)
{
	return MHD_lookup_connection_value(r->con, MHD_HEADER_KIND, name);
}

const char *gw_query(struct gw_req *r, const char *name)
{
	const char *v = NULL;
	size_t n = 0;
	if (MHD_lookup_connection_value_n(r->con, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v,
					  &n) != MHD_YES)
		return NULL;
	return v && strlen(v) == n ? v : NULL;
}

int gw_client_gone(struct gw_req *r)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(r->con, MHD_CONNECTION_INFO_CONNECTION_FD);
	return ci ? tcp_peer_gone(ci->connect_fd) : 0;
}

/* ---- routing ---- */

/* Matches path against pattern, capturing {conv}: 1 on a match. */
static int match(const char *pattern, const char *path, struct gw_req *r)
{
	while (*pattern && *path) {
		if (*pattern == '{') {
			const char *close = strchr(pattern, '}');
			size_t n = strcspn(path, "/");
			if (!close || n == 0 || n >= sizeof(r->param))
				return 0;
			memcpy(r->param, path, n);
			r->param[n] = '\0';
			pattern = close + 1;
			path += n;
			continue;
		}
		if (*pattern++ != *path++)
			return 0;
	}
	return *pattern == '\0' && *path == '\0';
}

/* Routes, authenticates and checks the declared size; answers at once when
 * one of them refuses. */
static void begin(struct conn *c, const char *url)
{
	struct gw_req *r = &c->r;
	const struct gw_route *rt = NULL;
	int wrong_method = 0;
	for (const struct gw_route *x = gw_routes; x->path && !rt; x++) {
		if (match(x->path, url, r)) {
			if (!strcmp(x->method, r->method))
				rt = x;
			else
				wrong_method = 1;
		}
	}
	if (!rt || !rt->open) {
		const char *auth = gw_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
		if (!auth || strncmp(auth, "Bearer ", 7) || !auth[7]) {
			gw_reply_error(r, 401, "authentication_error", "missing_api_key",
				       "missing API key (Authorization: Bearer cgw_...)");
			return;
		}
		if (gw_key_lookup(r->g->store, auth + 7, r->key_id) < 0) {
			gw_reply_error(r, 401, "authentication_error", "invalid_api_key",
				       "invalid API key");
			return;
		}
	}
	if (!rt) {
		if (wrong_method)
			gw_reply_error(r, 405, "invalid_request_error", "method_not_allowed",
				       "%s is not allowed on %s", r->method, url);
		else
			gw_reply_error(r, 404, "invalid_request_error", "not_found", "no route %s %s",
				       r->method, url);
		return;
	}
	c->route = rt;
	const char *cl = gw_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
	unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
	long long max = rt->file ? r->g->cfg->max_file_bytes : r->g->cfg->max_body_bytes;
	/* libmicrohttpd 0.9.75 spins on "Expect: 100-continue" without a
	 * body (see cpuosd's http.c): refused before it can. */
	if (!declared && gw_header(r, MHD_HTTP_HEADER_EXPECT) &&
	    !gw_header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
		gw_reply_error(r, 417, "invalid_request_error", "expectation_failed",
			       "Expect without a request body");
		return;
	}
	if (declared > (unsigned long long)max)
		gw_reply_error(r, 413, "invalid_request_error", "payload_too_large",
			       "body over %lld bytes", max);
}

static int add_body(struct conn *c, const char *data, size_t n)
{
	long long max = c->route->file ? c->r.g->cfg->max_file_bytes : c->r.g->cfg->max_body_bytes;
	if (c->too_big || c->r.len + n > (unsigned long long)max) {
		c->too_big = 1;
		return 0;
	}
	if (c->r.len + n + 1 > c->cap) {
		size_t cap = c->cap ? c->cap : 16384;
		while (cap < c->r.len + n + 1)
			cap *= 2;
		char *b = realloc(c->r.body, cap);
		if (!b)
			return -ENOMEM;
		c->r.body = b;
		c->cap = cap;
	}
	memcpy(c->r.body + c->r.len, data, n);
	c->r.len += n;
	c->r.body[c->r.len] = '\0';
	return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *con, const char *url,
				  const char *method, const char *version, const char *data,
				  size_t *data_size, void **con_cls)
{
	(void)version;
	struct gw_http *h = cls;
	struct conn *c = *con_cls;
	if (!c) {
		if (!(c = calloc(1, sizeof(*c))))
			return MHD_NO;
		*con_cls = c;
		c->r.con = con;
		c->r.g = h->g;
		c->r.method = method;
		log_set_tag("gateway"); /* this connection's thread */
		begin(c, url);
		return MHD_YES;
	}
	struct gw_req *r = &c->r;
	if (*data_size) {
		size_t n = *data_size;
		*data_size = 0;
		if (r->status) /* answered already: the body is dropped */
			return MHD_YES;
		return add_body(c, data, n) ? MHD_NO : MHD_YES;
	}
	if (r->status)
		return MHD_YES;
	int rc = 0;
	if (c->too_big) {
		long long max = c->route->file ? h->g->cfg->max_file_bytes : h->g->cfg->max_body_bytes;
		gw_reply_error(r, 413, "invalid_request_error", "payload_too_large",
			       "body over %lld bytes", max);
	} else {
		rc = c->route->fn(r);
	}
	if (!r->status)
		gw_reply_error(r, 500, "server_error", "internal", "handler failed (%d)", rc);
	return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *con, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)cls, (void)con, (void)toe;
	struct conn *c = *con_cls;
	if (!c)
		return;
	free(c->r.body);
	free(c);
	*con_cls = NULL;
}

int gw_http_start(struct gw *g, const char *listen, struct gw_http **out, char *err,
		  size_t errlen)
{
	struct gw_http *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->g = g;
	int fd = tcp_listen(listen, err, errlen);
	if (fd < 0) {
		free(h);
		return fd;
	}
	h->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
					MHD_USE_ERROR_LOG,
				0, NULL, NULL, on_request, h, MHD_OPTION_LISTEN_SOCKET, fd,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
				MHD_OPTION_CONNECTION_LIMIT, MAX_CONNS,
				MHD_OPTION_CONNECTION_TIMEOUT, CONN_IDLE_S, MHD_OPTION_END);
	if (!h->d) {
		close(fd);
		free(h);
		snprintf(err, errlen, "cannot start the HTTP server on %s", listen);
		return -EIO;
	}
	*out = h;
	return 0;
}

void gw_http_stop(struct gw_http *h)
{
	if (!h)
		return;
	MHD_stop_daemon(h->d);
	free(h);
}
