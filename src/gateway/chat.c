/*
 * chat: see chat.h. One struct run per request, on the stack of the thread
 * that serves it; the sandbox is paused after the answer went (a streamed
 * one after [DONE]; a whole one in a thread of its own, which keeps the
 * conversation until then, so the next request finds it paused).
 */
#include "gateway/chat.h"

#include "common/log.h"
#include "gateway/conv.h"
#include "gateway/gateway.h"
#include "gateway/gw_config.h"
#include "gateway/sbxc.h"
#include "gateway/tool.h"
#include "gateway/turn.h"
#include "gateway/upstream.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

struct run {
	struct gw *g;
	const struct chat_req *q;
	const struct chat_io *io;
	struct sbxc *sbx;
	int locked;          /* holds its conversation */
	json_t *steps;       /* [{"tool_call_id", "code", "output"}] */
	struct tool_arts arts;
	json_t *usage;       /* summed over the turns */
	char id[48];
	long long created;
	const char *model;
	int streaming;       /* the 200 and the first chunk went */
	int gone;            /* the client left */
	unsigned fail_status; /* a failure's status and error body */
	json_t *fail;
};

static void set_fail(struct run *r, unsigned status, const char *type, const char *code,
		     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void set_fail(struct run *r, unsigned status, const char *type, const char *code,
		     const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (r->fail)
		return; /* the first failure is the one to tell */
	r->fail_status = status;
	r->fail = gw_error(type, code, "%s", msg);
	if (status >= 500)
		log_warn("%u %s: %s", status, code, msg);
}

static void fail_upstream(struct run *r, const struct up_err *e)
{
	if (e->fail == UP_CANCELED) {
		r->gone = 1;
		return;
	}
	if (!r->fail)
		r->fail = gw_upstream_error(e, &r->fail_status);
}

/* ---- the event stream ---- */

static int send_event(struct run *r, json_t *o)
{
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!text)
		return -1;
	size_t n = strlen(text);
	int rc = r->io->data(r->io->arg, "data: ", 6) || r->io->data(r->io->arg, text, n) ||
		 r->io->data(r->io->arg, "\n\n", 2);
	free(text);
	if (rc)
		r->gone = 1;
	return rc ? -1 : 0;
}

/* A chat.completion.chunk of the answer's first choice. */
static json_t *chunk(struct run *r, json_t *delta, const char *finish)
{
	return json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:o}]}", "id", r->id, "object",
			 "chat.completion.chunk", "created", (json_int_t)r->created, "model",
			 r->model, "choices", "index", 0, "delta", delta ? delta : json_object(),
			 "finish_reason", finish ? json_string(finish) : json_null());
}

/* The 200 and a first chunk with the role, before the first text. */
static int start_stream(struct run *r)
{
	if (r->streaming)
		return 0;
	if (r->io->head(r->io->arg, 200, NULL)) {
		r->gone = 1;
		return -1;
	}
	r->streaming = 1;
	return send_event(r, chunk(r, json_pack("{s:s, s:s}", "role", "assistant", "content", ""),
				   NULL));
}

static int on_text(void *arg, const char *text, size_t n)
{
	struct run *r = arg;
	if (start_stream(r))
		return -1;
	return send_event(r, chunk(r, json_pack("{s:s%}", "content", text, n), NULL));
}

/* ---- tool calls ---- */

/* Runs one of our calls: its tool message, or NULL when the request must
 * fail (cpuosd failed; r->fail says why). */
static json_t *run_call(struct run *r, json_t *call)
{
	const char *id = json_string_value(json_object_get(call, "id"));
	json_t *args = NULL, *exec = NULL;
	const char *code = "";
	char why[600];
	char *out;
	if (tool_code(call, &args, &code, why, sizeof(why)) < 0) {
		code = "";
		out = tool_error_output("InvalidArguments", why);
	} else {
		int rc = sbxc_run(r->sbx, code, &exec, why, sizeof(why));
		if (rc == -EIO) {
			set_fail(r, 503, "sandbox_error", "cpuos_unavailable", "%s", why);
			json_decref(args);
			return NULL;
		}
		out = rc ? tool_error_output("SandboxError", why) : tool_output(exec, id, &r->arts);
	}
	json_t *msg = NULL;
	if (out) {
		json_array_append_new(r->steps, json_pack("{s:s, s:s, s:s}", "tool_call_id", id,
							  "code", code, "output", out));
		msg = json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", id, "content",
				out);
	}
	free(out);
	json_decref(exec);
	json_decref(args);
	if (!msg)
		set_fail(r, 500, "server_error", "internal", "out of memory");
	return msg;
}

/* The string member key of messages[i], "" when it has none. */
static const char *field(json_t *messages, size_t i, const char *key)
{
	const char *v = json_string_value(json_object_get(json_array_get(messages, i), key));
	return v ? v : "";
}

/* Calls of our tool that the history leaves unanswered: the last assistant
 * message's, when the turn before went back to the caller for their own
 * tools and the caller answered only those. Their results are put after
 * the caller's. */
static int run_pending(struct run *r, json_t *messages)
{
	size_t n = json_array_size(messages), a = n;
	while (a > 0 && strcmp(field(messages, a - 1, "role"), "assistant"))
		a--;
	if (a == 0)
		return 0;
	json_t *calls = json_object_get(json_array_get(messages, a - 1), "tool_calls");
	size_t at = a;
	while (at < n && !strcmp(field(messages, at, "role"), "tool"))
		at++;
	size_t i;
	json_t *call;
	json_array_foreach(calls, i, call) {
		const char *id = json_string_value(json_object_get(call, "id"));
		if (!id || !tool_is_ours(call, r->g->cfg->tool_name))
			continue;
		int answered = 0;
		for (size_t k = a; k < at && !answered; k++)
			answered = !strcmp(field(messages, k, "tool_call_id"), id);
		if (answered)
			continue;
		json_t *msg = run_call(r, call);
		if (!msg || json_array_insert_new(messages, at++, msg))
			return -1;
	}
	return 0;
}

/* ---- the loop ---- */

/* The body of the next upstream call: the caller's, with our messages and
 * tools, and a tool_choice that forced a tool only on the first turn (a
 * forced choice on every turn could never end). */
static json_t *upstream_body(struct run *r, json_t *messages, json_t *tools, int step)
{
	json_t *b = json_copy(r->q->body);
	if (!b || json_object_set(b, "messages", messages) || json_object_set(b, "tools", tools))
		goto fail;
	json_t *choice = json_object_get(b, "tool_choice");
	if (step > 0 && (json_is_object(choice) ||
			 (json_is_string(choice) && !strcmp(json_string_value(choice), "required"))))
		json_object_del(b, "tool_choice");
	if (r->q->stream) {
		if (json_object_set_new(b, "stream", json_true()))
			goto fail;
	} else {
		json_object_del(b, "stream");
		json_object_del(b, "stream_options");
	}
	return b;
fail:
	json_decref(b);
	return NULL;
}

/* 1 when every call is ours, 0 when one is the caller's. */
static int all_ours(struct run *r, json_t *calls)
{
	size_t i;
	json_t *c;
	json_array_foreach(calls, i, c) {
		if (!tool_is_ours(c, r->g->cfg->tool_name))
			return 0;
	}
	return 1;
}

/* The turns. On success the final message and why it finished; NULL with
 * r->fail (or r->gone) otherwise. */
static json_t *loop(struct run *r, char *finish, size_t finishlen, int *stopped)
{
	char why[256];
	json_t *messages = json_deep_copy(json_object_get(r->q->body, "messages"));
	json_t *tools = tool_list(json_object_get(r->q->body, "tools"), r->g->cfg->tool_name, why,
				  sizeof(why)); /* checked by chat_check: NULL is no memory */
	json_t *final = NULL;
	if (!messages || !tools) {
		set_fail(r, 500, "server_error", "internal", "out of memory");
		goto out;
	}
	if (run_pending(r, messages) < 0)
		goto out;
	for (int step = 0; step < r->g->cfg->max_steps; step++) {
		if (atomic_load(&r->g->stopping)) {
			set_fail(r, 503, "server_error", "shutting_down", "the gateway is stopping");
			goto out;
		}
		if (r->gone || (r->io->gone && r->io->gone(r->io->arg))) {
			r->gone = 1;
			goto out;
		}
		json_t *body = upstream_body(r, messages, tools, step);
		if (!body)
			goto out;
		struct turn t;
		struct up_err e;
		turn_init(&t);
		int rc = up_chat(r->g->up, body, r->q->stream ? on_text : NULL, r, &t, &e);
		json_decref(body);
		if (rc < 0) {
			fail_upstream(r, &e);
			turn_release(&t);
			goto out;
		}
		turn_usage_add(&r->usage, t.usage);
		json_t *calls = turn_tool_calls(&t);
		if (!calls || !all_ours(r, calls)) {
			final = json_incref(t.message);
			snprintf(finish, finishlen, "%s",
				 calls ? "tool_calls" : t.finish_reason[0] ? t.finish_reason : "stop");
			turn_release(&t);
			goto out;
		}
		json_array_append(messages, t.message);
		size_t i;
		json_t *call;
		json_array_foreach(calls, i, call) {
			json_t *msg = run_call(r, call);
			if (!msg || json_array_append_new(messages, msg)) {
				turn_release(&t);
				goto out;
			}
		}
		turn_release(&t);
	}
	/* Every turn called the tool: seed 003's last word. */
	*stopped = 1;
	snprintf(finish, finishlen, "stop");
	final = json_pack("{s:s, s:s}", "role", "assistant", "content", CHAT_STOPPED_TEXT);
	if (r->q->stream && final)
		on_text(r, CHAT_STOPPED_TEXT, strlen(CHAT_STOPPED_TEXT));
out:
	json_decref(messages);
	json_decref(tools);
	return final;
}

/* The extension object: what ran, what it drew, why it stopped. */
static json_t *extension(struct run *r, int stopped)
{
	const char *sbx = r->sbx ? sbxc_id(r->sbx) : "";
	json_t *x = json_pack("{s:o, s:o, s:O, s:O, s:o}", "conversation_id",
			      r->q->conv[0] ? json_string(r->q->conv) : json_null(), "sandbox_id",
			      sbx[0] ? json_string(sbx) : json_null(), "steps", r->steps, "artifacts",
			      r->arts.list, "stopped", stopped ? json_string("max_steps") : json_null());
	if (x && r->arts.left_out)
		json_object_set_new(x, "artifacts_left_out", json_integer(r->arts.left_out));
	return x;
}

static json_t *completion(struct run *r, json_t *final, const char *finish, int stopped)
{
	json_t *a = json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:O, s:s, s:n}]}", "id", r->id,
			      "object", "chat.completion", "created", (json_int_t)r->created,
			      "model", r->model, "choices", "index", 0, "message", final,
			      "finish_reason", finish, "logprobs");
	if (a && r->usage)
		json_object_set(a, "usage", r->usage);
	if (a)
		json_object_set_new(a, "cpuos", extension(r, stopped));
	return a;
}

/* The end of a stream: a caller's tool calls whole (they were held back
 * while it was unknown whose they were), the finish, the extension, and
 * the usage when asked for. */
static void end_stream(struct run *r, json_t *final, const char *finish, int stopped)
{
	if (start_stream(r))
		return;
	json_t *calls = json_object_get(final, "tool_calls");
	if (json_array_size(calls)) {
		json_t *deltas = json_deep_copy(calls);
		size_t i;
		json_t *c;
		json_array_foreach(deltas, i, c)
			json_object_set_new(c, "index", json_integer((json_int_t)i));
		if (send_event(r, chunk(r, json_pack("{s:o}", "tool_calls", deltas), NULL)))
			return;
	}
	int usage = json_is_true(json_object_get(
		json_object_get(r->q->body, "stream_options"), "include_usage"));
	json_t *last = chunk(r, NULL, finish);
	if (usage) { /* OpenAI's usage chunk: no choices, after the finish */
		if (send_event(r, last))
			return;
		last = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", r->id, "object",
				 "chat.completion.chunk", "created", (json_int_t)r->created, "model",
				 r->model, "choices", "usage",
				 r->usage ? json_incref(r->usage) : json_object());
	}
	if (last)
		json_object_set_new(last, "cpuos", extension(r, stopped));
	if (!send_event(r, last))
		r->io->data(r->io->arg, "data: [DONE]\n\n", 14);
}

static void fail_stream(struct run *r)
{
	char *text = json_dumps(r->fail, JSON_COMPACT);
	if (!r->streaming) {
		r->io->head(r->io->arg, r->fail_status, text ? text : "{}");
	} else if (!send_event(r, json_incref(r->fail))) {
		r->io->data(r->io->arg, "data: [DONE]\n\n", 14);
	}
	free(text);
}

/* ---- after the answer ---- */

static void finish_run(struct gw *g, const struct chat_req *q, struct sbxc *sbx, int locked)
{
	sbxc_done(sbx);
	if (locked)
		conv_give(g->locks, q->key_id, q->conv);
}

struct later {
	struct gw *g;
	struct chat_req q;
	struct sbxc *sbx;
	int locked;
};

static void finish_later(void *arg)
{
	struct later *l = arg;
	finish_run(l->g, &l->q, l->sbx, l->locked);
	free(l);
}

/* Pauses the sandbox in a thread of its own, so a whole answer need not
 * wait for it; inline when no thread can be had, or nothing is to do. */
static void finish_soon(struct run *r)
{
	struct later *l = r->sbx && sbxc_id(r->sbx)[0] ? malloc(sizeof(*l)) : NULL;
	if (l) {
		*l = (struct later){ .g = r->g, .q = *r->q, .sbx = r->sbx, .locked = r->locked };
		l->q.body = NULL;
		if (workers_spawn(&r->g->background, finish_later, l) == 0)
			return;
		free(l);
	}
	finish_run(r->g, r->q, r->sbx, r->locked);
}

/* ---- checks and the entry ---- */

int chat_check(json_t *body, const char *tool_name, int *stream, char *why, size_t whylen,
	       const char **param)
{
	json_t *messages = json_object_get(body, "messages");
	json_t *s = json_object_get(body, "stream");
	json_t *n = json_object_get(body, "n");
	*param = NULL;
	if (!json_is_string(json_object_get(body, "model"))) {
		*param = "model";
		snprintf(why, whylen, "'model' must be a string");
	} else if (!json_is_array(messages) || !json_array_size(messages) ||
		   json_array_size(messages) > CHAT_MAX_MESSAGES) {
		*param = "messages";
		snprintf(why, whylen, "'messages' must be an array of 1 to %d messages",
			 CHAT_MAX_MESSAGES);
	} else if (s && !json_is_boolean(s) && !json_is_null(s)) {
		*param = "stream";
		snprintf(why, whylen, "'stream' must be a boolean");
	} else if (n && !json_is_null(n) && !(json_is_integer(n) && json_integer_value(n) == 1)) {
		*param = "n";
		snprintf(why, whylen, "the gateway answers one choice: 'n' must be 1");
	} else {
		size_t i;
		json_t *m;
		json_array_foreach(messages, i, m) {
			if (!json_is_string(json_object_get(m, "role"))) {
				*param = "messages";
				snprintf(why, whylen, "'messages[%zu]' is not a message with a role", i);
				return -EINVAL;
			}
		}
		json_t *tools = tool_list(json_object_get(body, "tools"), tool_name, why, whylen);
		if (!tools) {
			*param = "tools";
			return -EINVAL;
		}
		json_decref(tools);
		*stream = json_is_true(s);
		return 0;
	}
	return -EINVAL;
}

static void new_id(char *out, size_t n)
{
	unsigned char raw[12];
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		memset(raw, 0, sizeof(raw));
	size_t at = (size_t)snprintf(out, n, "chatcmpl-");
	for (size_t i = 0; i < sizeof(raw) && at + 2 < n; i++)
		at += (size_t)snprintf(out + at, n - at, "%02x", raw[i]);
}

void chat_run(struct gw *g, const struct chat_req *q, const struct chat_io *io,
	      unsigned *status, json_t **answer)
{
	struct run r = { .g = g, .q = q, .io = io, .created = (long long)time(NULL),
			 .model = json_string_value(json_object_get(q->body, "model")),
			 .steps = json_array(), .arts = { .list = json_array() } };
	char finish[32] = "stop";
	int stopped = 0;
	json_t *final = NULL;
	*status = 500; /* a client that left gets this, and nobody reads it */
	*answer = NULL;
	new_id(r.id, sizeof(r.id));
	if (!r.steps || !r.arts.list) {
		set_fail(&r, 500, "server_error", "internal", "out of memory");
		goto done;
	}
	if (q->conv[0]) {
		int e = conv_take(g->locks, q->key_id, q->conv, CHAT_CONV_WAIT_MS);
		if (e == -EBUSY)
			set_fail(&r, 409, "conflict", "conversation_busy",
				 "conversation '%s' is busy with another request", q->conv);
		else if (e)
			set_fail(&r, 503, "server_error", "busy", "too many conversations at once");
		if (e)
			goto done;
		r.locked = 1;
	}
	if (sbxc_new(&g->sbx, g->store, q->key_id, q->conv, &r.sbx) < 0) {
		set_fail(&r, 500, "server_error", "internal", "out of memory");
		goto done;
	}
	final = loop(&r, finish, sizeof(finish), &stopped);
	if (!final && !r.gone)
		set_fail(&r, 500, "server_error", "internal", "out of memory");
done:
	if (r.gone) {
		if (!q->stream)
			*answer = gw_error("server_error", "client_gone", "the client went away");
	} else if (q->stream) {
		if (final)
			end_stream(&r, final, finish, stopped);
		else
			fail_stream(&r);
	} else if (final) {
		*status = 200;
		if (!(*answer = completion(&r, final, finish, stopped))) {
			*status = 500;
			*answer = gw_error("server_error", "internal", "out of memory");
		}
	} else {
		*status = r.fail_status;
		*answer = json_incref(r.fail);
	}
	if (io->end)
		io->end(io->arg);
	if (q->stream)
		finish_run(g, q, r.sbx, r.locked);
	else
		finish_soon(&r);
	json_decref(final);
	json_decref(r.fail);
	json_decref(r.usage);
	json_decref(r.steps);
	json_decref(r.arts.list);
}
