/*
 * gw_api: see gw_api.h. The pipe of a stream carries first a head (the
 * status, and for an error its JSON body), then the event stream: so the
 * handler can answer an upstream that failed before anything went with a
 * plain HTTP error, and everything after as events.
 */
#include "gateway/gw_api.h"

#include "common/log.h"
#include "common/tcp.h"
#include "gateway/chat.h"
#include "gateway/conv.h"
#include "gateway/gateway.h"
#include "gateway/gw_config.h"
#include "gateway/gw_http.h"
#include "gateway/sbxc.h"
#include "gateway/upstream.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_HEAD_BODY (64u << 10) /* an error answer through the pipe */

int gw_conv_ok(const char *s, size_t n)
{
	if (n == 0 || n > GW_CONV_MAX || strlen(s) != n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return 0;
	json_t *utf8 = json_stringn(s, n); /* it goes into JSON: answers, metadata */
	json_decref(utf8);
	return utf8 != NULL;
}

static json_t *parse_body(struct httpd_req *r)
{
	json_error_t je;
	json_t *body = r->body ? json_loadb(r->body, r->len, 0, &je) : NULL;
	if (!r->body)
		httpd_reply_error(r, 400, "invalid_request_error", "invalid_json",
				  "the request needs a JSON body");
	else if (!body)
		httpd_reply_error(r, 400, "invalid_request_error", "invalid_json",
				  "malformed JSON: %s (line %d)", je.text, je.line);
	else if (!json_is_object(body))
		httpd_reply_error(r, 400, "invalid_request_error", "invalid_json",
				  "the body must be a JSON object");
	else
		return body;
	json_decref(body);
	return NULL;
}

/* ---- streamed completions: a worker thread and a pipe ---- */

struct head {
	uint32_t status, len;
};

struct worker {
	struct gw *g;
	struct chat_req q;
	int fd; /* the pipe's write end; -1 once closed */
};

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1; /* EPIPE: the reader, so the client, is gone */
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static int w_head(void *arg, unsigned status, const char *body)
{
	struct worker *w = arg;
	size_t n = body ? strlen(body) : 0;
	struct head h = { status, (uint32_t)(n < MAX_HEAD_BODY ? n : 0) };
	return write_all(w->fd, &h, sizeof(h)) || write_all(w->fd, body, h.len) ? -1 : 0;
}

static int w_data(void *arg, const char *p, size_t n)
{
	struct worker *w = arg;
	return write_all(w->fd, p, n);
}

static void w_end(void *arg)
{
	struct worker *w = arg;
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
}

static void worker_main(void *arg)
{
	struct worker *w = arg;
	struct chat_io io = { .head = w_head, .data = w_data, .end = w_end, .arg = w };
	unsigned status;
	json_t *answer;
	chat_run(w->g, &w->q, &io, &status, &answer);
	w_end(w);
	json_decref(w->q.body);
	free(w);
}

/* Reads the head: its status, with body (an error answer) in buf. 0, or
 * -1 when the worker ended without one or the client left first. */
static int read_head(struct httpd_req *r, int fd, struct head *h, char *buf)
{
	size_t got = 0;
	char *dst = (char *)h;
	for (int part = 0; part < 2; part++) {
		size_t want = part ? h->len : sizeof(*h);
		if (part && want >= MAX_HEAD_BODY)
			return -1;
		dst = part ? buf : dst;
		for (got = 0; got < want;) {
			if (tcp_wait_peer(fd, POLLIN, httpd_fd(r), -1) <= 0)
				return -1;
			ssize_t n = read(fd, dst + got, want - got);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return -1;
			got += (size_t)n;
		}
	}
	buf[h->len] = '\0';
	return 0;
}

/* Starts the worker, which takes over q->body: jansson's values are not
 * to be shared between threads, its reference counts included. */
static int stream(struct httpd_req *r, const struct chat_req *q)
{
	struct gw *gw = r->arg;
	int fds[2];
	struct worker *w = malloc(sizeof(*w));
	if (!w || pipe2(fds, O_CLOEXEC) < 0) {
		int e = errno;
		free(w);
		json_decref(q->body);
		return httpd_reply_error(r, 500, "server_error", "internal",
					 "cannot start a stream: %s", strerror(e));
	}
	*w = (struct worker){ .g = gw, .q = *q, .fd = fds[1] };
	int e = workers_spawn(&gw->background, worker_main, w);
	if (e) {
		json_decref(w->q.body);
		free(w);
		close(fds[0]);
		close(fds[1]);
		return httpd_reply_error(r, 503, "server_error", "busy",
					 "cannot start a stream: %s", strerror(-e));
	}
	struct head h;
	char *buf = malloc(MAX_HEAD_BODY);
	if (!buf || read_head(r, fds[0], &h, buf) < 0) {
		free(buf);
		close(fds[0]);
		return httpd_reply_error(r, 500, "server_error", "internal",
					 "the stream ended early");
	}
	if (h.status == 200) {
		free(buf);
		return httpd_reply_fd(r, 200, "text/event-stream", fds[0]);
	}
	close(fds[0]);
	int rc = h.len ? gw_reply_text(r, h.status, buf)
		       : httpd_reply_error(r, h.status, "server_error", "internal",
					   "(an error too long)");
	free(buf);
	return rc;
}

/* ---- routes ---- */

static int bad_conversation(struct httpd_req *r)
{
	return httpd_reply_error(r, 400, "invalid_request_error", "invalid_conversation",
				 "a conversation id is 1 to %d bytes without control characters",
				 GW_CONV_MAX);
}

static int client_gone(void *arg)
{
	return httpd_client_gone(arg);
}

static int h_chat(struct httpd_req *r)
{
	struct gw *gw = r->arg;
	json_t *body = parse_body(r);
	if (!body)
		return 0;
	struct chat_req q = { .body = body };
	snprintf(q.key_id, sizeof(q.key_id), "%s", gw_key_id(r));
	char why[256];
	const char *param;
	if (chat_check(body, gw->cfg->tool_name, &q.stream, why, sizeof(why), &param) < 0) {
		json_t *e = gw_error("invalid_request_error", "invalid_value", "%s", why);
		json_object_set_new(json_object_get(e, "error"), "param", json_string(param));
		json_decref(body);
		return httpd_reply_json(r, 400, e);
	}
	/* The conversation: the header, else the OpenAI "user" field. */
	const char *conv = httpd_header(r, "X-Conversation-Id");
	json_t *user = json_object_get(body, "user");
	if (!conv && json_is_string(user))
		conv = json_string_value(user);
	if (conv && !gw_conv_ok(conv, strlen(conv))) {
		json_decref(body);
		return bad_conversation(r);
	}
	snprintf(q.conv, sizeof(q.conv), "%s", conv ? conv : "");
	if (q.stream)
		return stream(r, &q);
	unsigned status;
	json_t *answer;
	struct chat_io io = { .gone = client_gone, .arg = r };
	chat_run(gw, &q, &io, &status, &answer);
	json_decref(body);
	return httpd_reply_json(r, status, answer);
}

static int h_models(struct httpd_req *r)
{
	struct gw *gw = r->arg;
	json_t *out;
	struct up_err e;
	if (up_get(gw->up, "/models", &out, &e) == 0)
		return httpd_reply_json(r, 200, out);
	unsigned status;
	json_t *err = gw_upstream_error(&e, &status);
	return httpd_reply_json(r, status, err);
}

static int h_files(struct httpd_req *r)
{
	struct gw *gw = r->arg;
	const char *path = gw_query(r, "path");
	if (!path || !*path)
		return httpd_reply_error(r, 400, "invalid_request_error", "invalid_path",
					 "the query needs path=/absolute/path");
	if (!gw_conv_ok(r->param[0], strlen(r->param[0])))
		return bad_conversation(r);
	int e = conv_take(gw->locks, gw_key_id(r), r->param[0], CHAT_CONV_WAIT_MS);
	if (e == -EBUSY)
		return httpd_reply_error(r, 409, "conflict", "conversation_busy",
					 "conversation '%s' is busy with another request",
					 r->param[0]);
	if (e)
		return httpd_reply_error(r, 503, "server_error", "busy",
					 "too many conversations at once");
	struct sbxc *s = NULL;
	char err[600];
	int rc = sbxc_new(&gw->sbx, gw->store, gw_key_id(r), r->param[0], &s);
	if (rc == 0)
		rc = sbxc_write(s, path, r->body ? r->body : "", r->len, err, sizeof(err));
	else
		snprintf(err, sizeof(err), "out of memory");
	sbxc_done(s);
	conv_give(gw->locks, gw_key_id(r), r->param[0]);
	if (rc == -EINVAL)
		return httpd_reply_error(r, 400, "invalid_request_error", "invalid_path", "%s",
					 err);
	if (rc)
		return httpd_reply_error(r, 503, "sandbox_error", "cpuos_unavailable", "%s", err);
	return httpd_reply_json(r, 201, json_pack("{s:s, s:s, s:I}", "conversation_id", r->param[0],
					       "path", path, "size", (json_int_t)r->len));
}

static int h_health(struct httpd_req *r)
{
	return httpd_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

const struct httpd_route gw_routes[] = {
	{ "POST", "/v1/chat/completions", 0, h_chat, NULL },
	{ "GET", "/v1/models", 0, h_models, NULL },
	{ "PUT", "/v1/conversations/{conv}/files", HTTPD_FILE, h_files, NULL },
	{ "GET", "/health", HTTPD_OPEN, h_health, NULL },
	{ 0 },
};
