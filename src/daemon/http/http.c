/*
 * http: cpuosd's hooks into lib/httpd. Every request passes, in order:
 * route lookup, authentication (the store's keys; the Unix socket is the
 * administrator), body limits, the JSON body parsed, then its handler.
 * Nothing a client sends reaches a handler unchecked; every refusal is a
 * JSON error.
 */
#include "daemon/http/http.h"

#include "common/tcp.h"
#include "daemon/store/store.h"
#include "lib/httpd.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct http {
	struct httpd *server;
	struct httpd_route *routes; /* api_routes, in the library's terms */
};

/* The names of the server's own refusals. */
static const struct httpd_code codes[HTTPD_REFUSALS] = {
	[HTTPD_NO_KEY] = { NULL, "unauthorized" },
	[HTTPD_BAD_KEY] = { NULL, "unauthorized" },
	[HTTPD_NO_ROUTE] = { NULL, "not_found" },
	[HTTPD_BAD_METHOD] = { NULL, "method_not_allowed" },
	[HTTPD_EXPECT] = { NULL, "expectation_failed" },
	[HTTPD_TOO_BIG] = { NULL, "payload_too_large" },
	[HTTPD_INTERNAL] = { NULL, "internal" },
};

/* ---- answers ---- */

static json_t *error_body(const char *type, const char *code, const char *msg)
{
	(void)type;
	json_t *body = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
	if (!body) /* msg was not UTF-8: say so without it */
		body = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", "invalid text");
	return body;
}

void req_wipe_body(struct req *r)
{
	if (r->http->body)
		explicit_bzero(r->http->body, r->http->len);
}

int reply_json(struct req *r, unsigned status, json_t *body)
{
	return httpd_reply_json(r->http, status, body);
}

int reply_error(struct req *r, unsigned status, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = httpd_reply_verror(r->http, status, NULL, code, fmt, ap);
	va_end(ap);
	return rc;
}

int reply_buffer(struct req *r, unsigned status, const char *content_type, char *data, size_t n)
{
	return httpd_reply_buffer(r->http, status, content_type, data, n);
}

int reply_empty(struct req *r, unsigned status)
{
	return httpd_reply_empty(r->http, status);
}

int reply_stream(struct req *r, unsigned status, const char *content_type,
		 ssize_t (*read)(void *arg, char *buf, size_t max), void (*done)(void *arg),
		 void *arg)
{
	return httpd_reply_stream(r->http, status, content_type, read, done, arg);
}

int reply_upgrade(struct req *r, const char *const *headers,
		  void (*session)(void *arg, int fd, const char *extra, size_t n),
		  void (*drop)(void *arg), void *arg)
{
	return httpd_reply_upgrade(r->http, headers, session, drop, arg);
}

const char *req_header(struct req *r, const char *name)
{
	return httpd_header(r->http, name);
}

int req_fd(struct req *r)
{
	return httpd_fd(r->http);
}

int http_fd_gone(int fd)
{
	return tcp_peer_gone(fd);
}

int req_client_gone(struct req *r)
{
	return httpd_client_gone(r->http);
}

const char *req_query(struct req *r, const char *name, int *bad)
{
	return httpd_query(r->http, name, bad);
}

int req_query_each(struct req *r, const char *name, int (*fn)(void *arg, const char *value),
		   void *arg, int *bad)
{
	return httpd_query_each(r->http, name, fn, arg, bad);
}

/* ---- the library's hooks ---- */

static void on_start(struct httpd_req *h)
{
	struct req *r = h->app;
	r->http = h;
	r->con = h->con;
	r->api = h->arg;
	r->method = h->method;
	r->admin = h->local;
	if (r->admin)
		snprintf(r->account, sizeof(r->account), "%s", STORE_ADMIN_ACCOUNT);
}

static int on_auth(struct httpd_req *h, const char *key)
{
	struct req *r = h->app;
	/* the key's id too: usage is metered per key */
	return store_key_lookup_id(r->api->store, key, r->account, sizeof(r->account), r->key_id,
				   sizeof(r->key_id));
}

/* The path's captures, which param_max keeps to the size of r's. */
static void take_params(struct req *r, const struct httpd_req *h)
{
	for (int i = 0; i < 2; i++) {
		size_t n = strnlen(h->param[i], sizeof(r->param[i]) - 1);
		memcpy(r->param[i], h->param[i], n);
		r->param[i][n] = '\0';
	}
}

/* The route's handler, after its captures and its JSON body. */
static int on_handle(struct httpd_req *h)
{
	struct req *r = h->app;
	const struct route *rt = h->route->data;
	take_params(r, h);
	if (!h->len)
		return rt->handler(r);
	json_error_t jerr;
	r->body = json_loadb(h->body, h->len, 0, &jerr);
	if (!r->body)
		return reply_error(r, 400, "bad_request", "malformed JSON: %s (line %d)", jerr.text,
				   jerr.line);
	if (!json_is_object(r->body))
		return reply_error(r, 400, "bad_request", "the body must be a JSON object");
	return rt->handler(r);
}

static int on_upload(struct httpd_req *h, enum httpd_up phase, const char *data, size_t n)
{
	struct req *r = h->app;
	const struct route *rt = h->route->data;
	static const enum up_phase phases[] = {
		[HTTPD_UP_BEGIN] = UP_BEGIN, [HTTPD_UP_DATA] = UP_DATA,
		[HTTPD_UP_END] = UP_END,     [HTTPD_UP_ABORT] = UP_ABORT,
	};
	if (phase == HTTPD_UP_BEGIN)
		take_params(r, h);
	return rt->upload(r, phases[phase], data, n);
}

static void on_finish(struct httpd_req *h)
{
	struct req *r = h->app;
	/* an upload whose client went away before its end */
	if (h->route && h->route->flags & HTTPD_UPLOAD && r->stream)
		on_upload(h, HTTPD_UP_ABORT, NULL, 0);
	json_decref(r->body);
}

static const struct httpd_ops ops = {
	.start = on_start,
	.auth = on_auth,
	.handle = on_handle,
	.upload = on_upload,
	.finish = on_finish,
	.error_body = error_body,
};

/* ---- listeners ---- */

int http_start(const struct api_ctx *api, const char *tcp, const char *unix_path,
	       struct http **out, char *err, size_t errlen)
{
	struct http *h = calloc(1, sizeof(*h));
	size_t n = 0;
	while (api_routes[n].path)
		n++;
	if (!h || !(h->routes = calloc(n + 1, sizeof(*h->routes)))) {
		free(h);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const struct route *rt = &api_routes[i];
		h->routes[i] = (struct httpd_route){
			.method = rt->method,
			.path = rt->path,
			.flags = (rt->open == 1 ? HTTPD_OPEN : 0) |
				 (rt->open == ROUTE_QUERY_KEY ? HTTPD_QUERY_KEY : 0) |
				 (rt->admin_only == 1 ? HTTPD_LOCAL : 0) |
				 (rt->admin_only == ROUTE_INTERNAL ? HTTPD_CLUSTER : 0) |
				 (rt->upload ? HTTPD_UPLOAD : 0),
			.data = rt,
		};
	}
	const struct httpd_config c = {
		.tcp = tcp,
		.unix_path = unix_path,
		.routes = h->routes,
		.ops = &ops,
		.arg = (void *)api,
		.app_size = sizeof(struct req),
		.codes = codes,
		.key_form = "<key>",
		.param_max = sizeof(((struct req *)0)->param[0]),
		.max_body = api->max_json_bytes,
		.max_file = api->max_file_bytes,
		.max_conns = 1000,
		.max_conns_per_ip = api->max_conns_per_ip,
		.idle_s = api->conn_timeout_s ? api->conn_timeout_s : 60,
		.message_max = 512,
		.tcp_fd = api->tcp_fd,
		.gate_header = "cpuos-cluster",
		.gate_value = api->cluster_secret,
	};
	int r = httpd_start(&c, &h->server, err, errlen);
	if (r) {
		free(h->routes);
		free(h);
		return r;
	}
	*out = h;
	return 0;
}

void http_stop(struct http *h)
{
	if (!h)
		return;
	httpd_stop(h->server);
	free(h->routes);
	free(h);
}
