/*
 * http: libmicrohttpd glue. Every request passes, in order: route lookup,
 * authentication, body limits, then its handler. Nothing a client sends
 * reaches a handler unchecked; every refusal is a JSON error.
 */
#include "daemon/http/http.h"

#include "common/log.h"
#include "common/tcp.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

struct http {
	const struct api_ctx *api;
	struct MHD_Daemon *tcp, *unix_;
	char unix_path[108];
};

/* Per-connection state (MHD's con_cls). */
struct conn_state {
	struct req r;
	const struct route *route;
	char *body;
	size_t len;
	int too_big;
	int begun;
};

/* ---- responses ---- */

static int queue(struct req *r, unsigned status, struct MHD_Response *resp, const char *type)
{
	if (!resp)
		return -ENOMEM;
	if (type)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	r->status = (int)status;
	if (r->in_body) {
		r->deferred = resp;
		return 0;
	}
	enum MHD_Result ok = MHD_queue_response(r->con, status, resp);
	MHD_destroy_response(resp);
	return ok == MHD_YES ? 0 : -EIO;
}

int reply_json(struct req *r, unsigned status, json_t *body)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!text)
		return reply_error(r, 500, "internal", "out of memory");
	size_t n = strlen(text);
	struct MHD_Response *resp = MHD_create_response_from_buffer(n, text, MHD_RESPMEM_MUST_FREE);
	if (!resp)
		free(text);
	return queue(r, status, resp, "application/json");
}

int reply_error(struct req *r, unsigned status, const char *code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_t *body = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
	if (!body) { /* msg was not UTF-8: say so without it */
		body = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", "invalid text");
	}
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	if (!text)
		return -ENOMEM;
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (!resp)
		free(text);
	if (status >= 500)
		log_warn("%s: %u %s", r->method, status, msg);
	return queue(r, status, resp, "application/json");
}

int reply_buffer(struct req *r, unsigned status, const char *content_type, char *data, size_t n)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(n, data, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(data);
		return reply_error(r, 500, "internal", "out of memory");
	}
	return queue(r, status, resp, content_type);
}

int req_fd(struct req *r)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(r->con, MHD_CONNECTION_INFO_CONNECTION_FD);
	return ci ? ci->connect_fd : -1;
}

int http_fd_gone(int fd)
{
	return tcp_peer_gone(fd);
}

int req_client_gone(struct req *r)
{
	return http_fd_gone(req_fd(r));
}

int reply_empty(struct req *r, unsigned status)
{
	return queue(r, status, MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT),
		     NULL);
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

int reply_stream(struct req *r, unsigned status, const char *content_type,
		 ssize_t (*read)(void *arg, char *buf, size_t max), void (*done)(void *arg),
		 void *arg)
{
	struct stream_reply *s = malloc(sizeof(*s));
	if (!s) {
		done(arg);
		return reply_error(r, 500, "internal", "out of memory");
	}
	*s = (struct stream_reply){ .read = read, .done = done, .arg = arg };
	struct MHD_Response *resp =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, stream_read, s, stream_free);
	if (!resp) {
		stream_free(s);
		return reply_error(r, 500, "internal", "out of memory");
	}
	return queue(r, status, resp, content_type);
}

const char *req_query(struct req *r, const char *name, int *bad)
{
	const char *v = NULL;
	size_t n = 0;
	if (MHD_lookup_connection_value_n(r->con, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v, &n) !=
	    MHD_YES)
		return NULL;
	if (!v)
		return "";
	if (strlen(v) != n && bad)
		*bad = 1;
	return v;
}

/* ---- routing ---- */

/* Matches path against pattern, capturing {id} and {pid}: 1 on a match. */
static int match(const char *pattern, const char *path, struct req *r)
{
	int slot = 0;
	while (*pattern && *path) {
		if (*pattern == '{') {
			const char *close = strchr(pattern, '}');
			size_t n = strcspn(path, "/");
			if (!close || n == 0 || n >= sizeof(r->param[0]) || slot > 1)
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

/* The route for method and path; *wrong_method when only the method was off. */
static const struct route *find_route(const char *method, const char *path, struct req *r,
				      int *wrong_method)
{
	*wrong_method = 0;
	for (const struct route *rt = api_routes; rt->path; rt++) {
		if (!match(rt->path, path, r))
			continue;
		if (!strcmp(rt->method, method))
			return rt;
		*wrong_method = 1;
	}
	return NULL;
}

/* Who is asking: the Unix socket is the administrator; TCP needs a key. */
static int authenticate(struct conn_state *cs, const struct http *h, int open)
{
	struct req *r = &cs->r;
	if (r->admin) {
		snprintf(r->account, sizeof(r->account), "%s", STORE_ADMIN_ACCOUNT);
		return 0;
	}
	if (open)
		return 0;
	const char *auth = MHD_lookup_connection_value(r->con, MHD_HEADER_KIND,
						       MHD_HTTP_HEADER_AUTHORIZATION);
	if (!auth || strncmp(auth, "Bearer ", 7) || !auth[7]) {
		reply_error(r, 401, "unauthorized", "missing API key (Authorization: Bearer <key>)");
		return -1;
	}
	/* the key's id too: usage is metered per key */
	if (store_key_lookup_id(h->api->store, auth + 7, r->account, sizeof(r->account), r->key_id,
				sizeof(r->key_id)) < 0) {
		reply_error(r, 401, "unauthorized", "invalid API key");
		return -1;
	}
	return 0;
}

/* First call for a request: route, authenticate, check the declared size.
 * Answers right away when any of them refuses. */
static void begin(struct conn_state *cs, struct http *h, const char *url)
{
	struct req *r = &cs->r;
	int wrong_method;
	const struct route *rt = find_route(r->method, url, r, &wrong_method);
	if (authenticate(cs, h, rt ? rt->open : 0) < 0)
		return;
	if (rt && rt->admin_only && !r->admin)
		rt = NULL, wrong_method = 0;
	if (!rt) {
		if (wrong_method)
			reply_error(r, 405, "method_not_allowed", "%s is not allowed on %s", r->method, url);
		else
			reply_error(r, 404, "not_found", "no route %s %s", r->method, url);
		return;
	}
	cs->route = rt;
	const char *cl = MHD_lookup_connection_value(r->con, MHD_HEADER_KIND,
						     MHD_HTTP_HEADER_CONTENT_LENGTH);
	unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
	/* libmicrohttpd 0.9.75 answers "Expect: 100-continue" on a request
	 * without a body with 100 Continue, then spins without answering
	 * once more bytes follow (tests/fuzz/corpus/http/expect_nobody):
	 * refuse such a request before it can. */
	if (!declared && MHD_lookup_connection_value(r->con, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT) &&
	    !MHD_lookup_connection_value(r->con, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
		reply_error(r, 417, "expectation_failed", "Expect without a request body");
		return;
	}
	if (!rt->upload && declared > h->api->max_json_bytes) {
		reply_error(r, 413, "payload_too_large", "body over %zu bytes", h->api->max_json_bytes);
		return;
	}
	if (rt->upload && declared > h->api->max_file_bytes) {
		reply_error(r, 413, "payload_too_large", "file over %llu bytes",
			    (unsigned long long)h->api->max_file_bytes);
		return;
	}
	if (rt->upload && rt->upload(r, UP_BEGIN, NULL, 0) < 0 && !r->status)
		reply_error(r, 500, "internal", "upload failed to start");
}

static int parse_body(struct conn_state *cs)
{
	struct req *r = &cs->r;
	if (cs->too_big)
		return reply_error(r, 413, "payload_too_large", "body over %zu bytes",
				   r->api->max_json_bytes), -1;
	if (!cs->len)
		return 0;
	json_error_t jerr;
	r->body = json_loadb(cs->body, cs->len, 0, &jerr);
	if (!r->body)
		return reply_error(r, 400, "bad_request", "malformed JSON: %s (line %d)", jerr.text,
				   jerr.line), -1;
	if (!json_is_object(r->body))
		return reply_error(r, 400, "bad_request", "the body must be a JSON object"), -1;
	return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *con, const char *url,
				  const char *method, const char *version, const char *data,
				  size_t *data_size, void **con_cls)
{
	(void)version;
	struct http *h = cls;
	struct conn_state *cs = *con_cls;
	if (!cs) {
		cs = calloc(1, sizeof(*cs));
		if (!cs)
			return MHD_NO;
		*con_cls = cs;
		cs->r.con = con;
		cs->r.api = h->api;
		cs->r.method = method;
		/* The Unix socket is the administrator's. Told by the peer's
		 * address family: comparing daemons would read h->unix_ while
		 * http_start still writes it and TCP already serves (TSan). */
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(con, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		cs->r.admin = ci && ci->client_addr && ci->client_addr->sa_family == AF_UNIX;
		begin(cs, h, url);
		return MHD_YES;
	}
	struct req *r = &cs->r;
	if (*data_size) {
		size_t n = *data_size;
		*data_size = 0;
		if (r->status) /* already answered: drop the body */
			return MHD_YES;
		if (cs->route->upload) {
			cs->len += n;
			r->in_body = 1;
			if (cs->len > h->api->max_file_bytes)
				reply_error(r, 413, "payload_too_large", "file over %llu bytes",
					    (unsigned long long)h->api->max_file_bytes);
			else if (cs->route->upload(r, UP_DATA, data, n) < 0 && !r->status)
				reply_error(r, 500, "internal", "upload failed");
			r->in_body = 0;
			return MHD_YES;
		}
		if (cs->too_big || cs->len + n > h->api->max_json_bytes) {
			cs->too_big = 1;
			return MHD_YES;
		}
		char *b = realloc(cs->body, cs->len + n);
		if (!b)
			return MHD_NO;
		memcpy(b + cs->len, data, n);
		cs->body = b;
		cs->len += n;
		return MHD_YES;
	}
	if (r->deferred) {
		enum MHD_Result ok = MHD_queue_response(con, (unsigned)r->status, r->deferred);
		MHD_destroy_response(r->deferred);
		r->deferred = NULL;
		return ok;
	}
	if (r->status)
		return MHD_YES;
	int rc;
	if (cs->route->upload)
		rc = cs->route->upload(r, UP_END, NULL, 0);
	else
		rc = parse_body(cs) < 0 ? 0 : cs->route->handler(r);
	if (!r->status)
		reply_error(r, 500, "internal", "handler failed (%d)", rc);
	return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *con, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)con;
	(void)toe;
	struct conn_state *cs = *con_cls;
	if (!cs)
		return;
	if (cs->route && cs->route->upload && cs->r.stream)
		cs->route->upload(&cs->r, UP_ABORT, NULL, 0);
	if (cs->r.deferred)
		MHD_destroy_response(cs->r.deferred);
	json_decref(cs->r.body);
	free(cs->body);
	free(cs);
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

/* Thread per connection (handlers block while a sandbox works), so every
 * connection costs a thread: at most 1000 of them, idle ones closed after
 * conn_timeout_s, and on TCP at most max_conns_per_ip from one address, so
 * one client cannot take them all. (The Unix socket is the administrator's
 * alone.) */
static struct MHD_Daemon *start_mhd(struct http *h, int fd, int tcp)
{
	unsigned timeout = h->api->conn_timeout_s ? h->api->conn_timeout_s : 60;
	unsigned per_ip = tcp && h->api->max_conns_per_ip ? h->api->max_conns_per_ip : 0;
	return MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
					MHD_USE_ERROR_LOG,
				0, NULL, NULL, on_request, h, MHD_OPTION_LISTEN_SOCKET, fd,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
				MHD_OPTION_CONNECTION_LIMIT, 1000u,
				MHD_OPTION_CONNECTION_TIMEOUT, timeout,
				MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_END);
}

int http_start(const struct api_ctx *api, const char *tcp, const char *unix_path,
	       struct http **out, char *err, size_t errlen)
{
	struct http *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->api = api;
	int r = 0;
	if (tcp) {
		int fd = tcp_listen(tcp, err, errlen);
		if (fd < 0 || !(h->tcp = start_mhd(h, fd, 1))) {
			r = fd < 0 ? fd : -EIO;
			if (fd >= 0) {
				close(fd);
				snprintf(err, errlen, "cannot start the HTTP server on %s", tcp);
			}
			goto fail;
		}
	}
	if (unix_path) {
		snprintf(h->unix_path, sizeof(h->unix_path), "%s", unix_path);
		int fd = listen_unix(unix_path, err, errlen);
		if (fd < 0 || !(h->unix_ = start_mhd(h, fd, 0))) {
			r = fd < 0 ? fd : -EIO;
			if (fd >= 0) {
				close(fd);
				snprintf(err, errlen, "cannot start the HTTP server on '%s'", unix_path);
			}
			goto fail;
		}
	}
	*out = h;
	return 0;
fail:
	http_stop(h);
	return r;
}

void http_stop(struct http *h)
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
