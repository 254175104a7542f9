/*
 * process: envd's process.Process service on cpuosd's commands API. Every
 * process E2B starts is a background exec, so it outlives its stream, as
 * envd's do; Start and Connect relay its output stream (cpuosd's NDJSON)
 * as Connect envelopes of ProcessEvent: start {pid}, data {stdout, stderr
 * or pty, as base64}, end {exitCode, exited, status}, and a keepalive
 * while it is silent. A pid is cpuosd's (the agent's) process id.
 */
#include "cli/cpuos/http.h"
#include "common/buf.h"
#include "common/clock.h"
#include "e2b/connect.h"
#include "e2b/e2b.h"
#include "e2b/process.h"
#include "e2b/rpc.h"
#include "lib/httpd.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEPALIVE_MS 15000 /* a silent process's stream says it lives */
#define STDIN_MAX    (1u << 20)

/* The pid a selector {"pid": N} names: > 0, or 0 (then answered). Tags
 * are not kept by cpuos. */
static long long selector_pid(struct httpd_req *r, int stream, json_t *sel)
{
	json_t *pid = json_object_get(sel, "pid");
	long long v = json_is_integer(pid) ? json_integer_value(pid)
		      : json_is_string(pid) ? strtoll(json_string_value(pid), NULL, 10)
					    : 0;
	if (v <= 0 || v > 0x7fffffff) {
		if (json_object_get(sel, "tag"))
			rpc_error(r, stream, 404, "process tags are not kept by cpuos: select by pid");
		else
			rpc_error(r, stream, 400, "process.pid must be a positive number");
		return 0;
	}
	return v;
}

static void proc_path(struct apath *p, const char *id, long long pid, const char *sub)
{
	char sbx[24], n[24];
	snprintf(sbx, sizeof(sbx), "sbx_%s", id);
	snprintf(n, sizeof(n), "%lld", pid);
	apath_init(p, "/v1/sandboxes");
	apath_seg(p, sbx);
	apath_add(p, "/processes");
	apath_seg(p, n);
	if (sub)
		apath_add(p, sub);
}

/* ---- streams ---- */

struct relay {
	struct api *a;
	char id[E2B_ID_LEN + 1];
	long long pid;
	int fd;
	long long last; /* when the client was last written to (ms) */
	int ended;
};

static void relay_free(void *arg)
{
	struct relay *x = arg;
	api_free(x->a);
	free(x);
}

static json_t *event(const char *kind, json_t *body)
{
	return json_pack("{s:{s:o}}", "event", kind, body);
}

static int on_line(void *arg, const char *line, size_t n)
{
	struct relay *x = arg;
	json_t *j = json_loadb(line, n, 0, NULL), *ev = NULL;
	const char *type = json_string_value(json_object_get(j, "type"));
	if (!type) {
		json_decref(j);
		return 0;
	}
	if (!strcmp(type, "stdout") || !strcmp(type, "stderr")) {
		json_t *data = json_object_get(j, "data");
		const char *d = json_string_value(data);
		char *b = b64_encode(d ? d : "", d ? json_string_length(data) : 0); /* NULs too */
		if (b)
			ev = event("data", json_pack("{s:s}", type, b));
		free(b);
	} else if (!strcmp(type, "pty")) {
		const char *d = json_string_value(json_object_get(j, "data_base64"));
		ev = event("data", json_pack("{s:s}", "pty", d ? d : ""));
	} else if (!strcmp(type, "exit")) {
		json_t *code = json_object_get(j, "exit_code"), *sig = json_object_get(j, "signal");
		char status[64];
		if (json_is_integer(code))
			snprintf(status, sizeof(status), "exit status %lld",
				 (long long)json_integer_value(code));
		else
			snprintf(status, sizeof(status), "signal: %s",
				 json_integer_value(sig) == SIGKILL ? "killed"
								    : strsignal((int)json_integer_value(sig)));
		ev = event("end", json_pack("{s:I, s:b, s:s}", "exitCode",
					    json_is_integer(code) ? json_integer_value(code) : -1,
					    "exited", json_is_integer(code), "status", status));
		x->ended = 1;
	}
	json_decref(j);
	if (!ev)
		return 0;
	x->last = clock_ms();
	return pump_msg(x->fd, ev) < 0 ? -EPIPE : 0;
}

static int on_tick(void *arg)
{
	struct relay *x = arg;
	if (atomic_load(&e2b_stopping))
		return -ESHUTDOWN;
	if (clock_ms() - x->last < KEEPALIVE_MS)
		return 0;
	x->last = clock_ms();
	return pump_msg(x->fd, event("keepalive", json_object())) < 0 ? -EPIPE : 0;
}

static void relay_run(int fd, void *arg)
{
	struct relay *x = arg;
	struct apath p;
	x->fd = fd;
	x->last = clock_ms();
	if (pump_msg(fd, event("start", json_pack("{s:I}", "pid", (json_int_t)x->pid))) < 0)
		return;
	proc_path(&p, x->id, x->pid, "/stream");
	int rc = api_lines(x->a, &p, on_line, on_tick, x);
	if (rc == -EPIPE)
		return;
	if (x->ended)
		pump_end(fd, NULL, NULL);
	else if (rc == -ESHUTDOWN) /* the process goes on: Connect finds it */
		pump_end(fd, "unavailable", "cpuos-e2b is stopping");
	else if (rc < 0 && api_status(x->a) == 404)
		pump_end(fd, "not_found", "process %lld not found", x->pid);
	else
		pump_end(fd, "unavailable", "the process's stream was cut: %s",
			 rc < 0 ? api_error(x->a) : "the sandbox stopped");
}

static int relay_start(struct httpd_req *r, long long pid)
{
	struct e2b_req *q = r->app;
	struct relay *x = calloc(1, sizeof(*x));
	if (!x || e2b_api(r, &x->a) < 0) {
		free(x);
		return rpc_error(r, 1, 500, "out of memory");
	}
	snprintf(x->id, sizeof(x->id), "%s", q->id);
	x->pid = pid;
	pump_start(r, 200, "application/connect+json", HTTPD_SIZE_UNKNOWN, relay_run, relay_free, x);
	return 0;
}

/* Start {process: {cmd, args, envs, cwd}, pty: {size: {cols, rows}}, tag,
 * stdin}: a background exec as the request's user. */
int proc_start(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	int stream;
	json_t *m = rpc_request(r, &stream), *proc, *out = NULL, *req = NULL, *v;
	struct api *a = NULL;
	if (!m)
		return 0;
	proc = json_object_get(m, "process");
	const char *cmd = json_string_value(json_object_get(proc, "cmd"));
	if (!cmd || !*cmd) {
		rpc_error(r, stream, 400, "process.cmd is required");
		goto out;
	}
	json_t *argv = json_pack("[s]", cmd);
	size_t i;
	json_array_foreach(json_object_get(proc, "args"), i, v) {
		if (!json_is_string(v)) {
			json_decref(argv);
			rpc_error(r, stream, 400, "process.args are strings");
			goto out;
		}
		json_array_append(argv, v);
	}
	req = json_pack("{s:o, s:s, s:b}", "argv", argv, "user", q->user, "background", 1);
	if ((v = json_object_get(proc, "envs")) && json_object_size(v))
		json_object_set(req, "env", v);
	const char *cwd = json_string_value(json_object_get(proc, "cwd"));
	if (cwd && *cwd)
		json_object_set_new(req, "cwd", json_string(cwd));
	json_t *size = json_object_get(json_object_get(m, "pty"), "size");
	/* stdin: false (the SDK's default) is envd's /dev/null: end of file */
	if (!size && !json_is_true(json_object_get(m, "stdin")))
		json_object_set_new(req, "close_stdin", json_true());
	if (size) {
		json_t *rows = json_object_get(size, "rows"), *cols = json_object_get(size, "cols");
		json_object_set_new(req, "pty",
				    json_pack("{s:I, s:I}", "rows",
					      json_is_integer(rows) ? json_integer_value(rows) : 24,
					      "cols",
					      json_is_integer(cols) ? json_integer_value(cols) : 80));
	}
	char sbx[24];
	struct apath p;
	snprintf(sbx, sizeof(sbx), "sbx_%s", q->id);
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, sbx);
	apath_add(&p, "/exec");
	if (e2b_api(r, &a) < 0) {
		rpc_error(r, stream, 500, "out of memory");
		goto out;
	}
	if (api_json(a, "POST", &p, req, &out) < 0) {
		rpc_api_error(r, stream, a);
		goto out;
	}
	json_int_t pid = json_integer_value(json_object_get(out, "pid"));
	if (pid <= 0) {
		rpc_error(r, stream, 503, "cpuosd answered no process");
		goto out;
	}
	relay_start(r, pid);
out:
	api_free(a);
	json_decref(m), json_decref(req), json_decref(out);
	return 0;
}

/* Connect {process: {pid}}: the process's stream again. */
int proc_connect(struct httpd_req *r)
{
	int stream;
	json_t *m = rpc_request(r, &stream);
	if (!m)
		return 0;
	long long pid = selector_pid(r, stream, json_object_get(m, "process"));
	json_decref(m);
	if (pid)
		relay_start(r, pid);
	return 0;
}

/* ---- unary calls ---- */

/* One call about the process the message selects: method on sub with
 * body (raw bytes when raw, else JSON), {} answered. */
static int proc_call(struct httpd_req *r, const char *method, const char *sub, json_t *body,
		     const char *raw, size_t rawlen, const char *query)
{
	struct e2b_req *q = r->app;
	int stream;
	json_t *m = rpc_request(r, &stream);
	struct api *a = NULL;
	if (!m)
		return 0;
	long long pid = selector_pid(r, stream, json_object_get(m, "process"));
	if (!pid)
		goto out;
	struct apath p;
	proc_path(&p, q->id, pid, sub);
	if (query)
		apath_query(&p, query, "true");
	if (e2b_api(r, &a) < 0) {
		rpc_error(r, 0, 500, "out of memory");
		goto out;
	}
	int rc = raw ? api_post_raw(a, &p, raw, rawlen) : api_json(a, method, &p, body, NULL);
	if (rc < 0)
		rpc_api_error(r, 0, a);
	else
		rpc_reply(r, json_object());
out:
	api_free(a);
	json_decref(m);
	return 0;
}

/* SendInput {process, input: {stdin | pty: base64}}. */
int proc_send_input(struct httpd_req *r)
{
	int stream;
	json_t *m = rpc_request(r, &stream);
	if (!m)
		return 0;
	json_t *in = json_object_get(m, "input");
	const char *b = json_string_value(json_object_get(in, "stdin"));
	if (!b)
		b = json_string_value(json_object_get(in, "pty"));
	char *bytes = malloc(STDIN_MAX + 1);
	long n = b && bytes ? b64_decode(b, bytes, STDIN_MAX + 1) : -1;
	json_decref(m);
	if (n < 0) {
		free(bytes);
		return rpc_error(r, 0, 400, "input.stdin or input.pty: base64 of at most 1 MiB");
	}
	proc_call(r, "POST", "/stdin", NULL, bytes, (size_t)n, NULL);
	free(bytes);
	return 0;
}

int proc_close_stdin(struct httpd_req *r)
{
	return proc_call(r, "POST", "/stdin", NULL, "", 0, "eof");
}

/* SendSignal {process, signal: "SIGNAL_SIGKILL" | "SIGNAL_SIGTERM"}:
 * SIGKILL ends the whole tree, as envd's kill does. */
int proc_send_signal(struct httpd_req *r)
{
	int stream;
	json_t *m = rpc_request(r, &stream);
	if (!m)
		return 0;
	json_t *s = json_object_get(m, "signal");
	const char *name = json_string_value(s);
	long long num = json_is_integer(s) ? json_integer_value(s) : 0;
	if (name && !strncmp(name, "SIGNAL_", 7))
		name += 7;
	int kill = (name && !strcmp(name, "SIGKILL")) || num == SIGKILL;
	int term = (name && !strcmp(name, "SIGTERM")) || num == SIGTERM;
	json_decref(m);
	if (!kill && !term)
		return rpc_error(r, 0, 400, "signal is SIGNAL_SIGKILL or SIGNAL_SIGTERM");
	if (kill)
		return proc_call(r, "DELETE", NULL, NULL, NULL, 0, NULL);
	json_t *body = json_pack("{s:i}", "signal", SIGTERM);
	proc_call(r, "POST", "/signal", body, NULL, 0, NULL);
	json_decref(body);
	return 0;
}

/* Update {process, pty: {size: {cols, rows}}}: a resize. */
int proc_update(struct httpd_req *r)
{
	int stream;
	json_t *m = rpc_request(r, &stream);
	if (!m)
		return 0;
	json_t *size = json_object_get(json_object_get(m, "pty"), "size");
	json_t *body = json_pack("{s:O?, s:O?}", "rows", json_object_get(size, "rows"), "cols",
				 json_object_get(size, "cols"));
	json_decref(m);
	if (!size)
		rpc_reply(r, json_object()); /* nothing to change */
	else
		proc_call(r, "POST", "/resize", body, NULL, 0, NULL);
	json_decref(body);
	return 0;
}

/* List: the running processes as ProcessInfo {config: {cmd, args, envs,
 * cwd}, pid}. */
int proc_list(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	int stream;
	json_t *m = rpc_request(r, &stream), *out = NULL, *arr, *v;
	struct api *a = NULL;
	if (!m)
		return 0;
	json_decref(m);
	char sbx[24];
	struct apath p;
	snprintf(sbx, sizeof(sbx), "sbx_%s", q->id);
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, sbx);
	apath_add(&p, "/processes");
	if (e2b_api(r, &a) < 0)
		return rpc_error(r, 0, 500, "out of memory");
	if (api_json(a, "GET", &p, NULL, &out) < 0) {
		rpc_api_error(r, 0, a);
		goto out;
	}
	arr = json_array();
	size_t i;
	json_array_foreach(json_object_get(out, "processes"), i, v) {
		const char *st = json_string_value(json_object_get(v, "state"));
		if (!st || strcmp(st, "running"))
			continue;
		json_array_append_new(
			arr, json_pack("{s:{s:O?, s:[], s:{}}, s:O?}", "config", "cmd",
				       json_object_get(v, "cmd"), "args", "envs", "pid",
				       json_object_get(v, "pid")));
	}
	rpc_reply(r, json_pack("{s:o}", "processes", arr));
out:
	api_free(a);
	json_decref(out);
	return 0;
}

/* ---- StreamInput: a client stream, read as it comes ----
 * Its envelopes: {"start": {"process": {"pid"}}} first, then {"data":
 * {"input": {"stdin" | "pty": base64}}} (each written to the process as it
 * arrives) and {"keepalive": {}}. The answer, at the end: one empty
 * message and the end of the stream (an error ends it early). */

struct input {
	struct buf pending; /* bytes of an envelope not whole yet */
	struct api *a;
	long long pid;
	char *bytes;
};

void proc_stream_input_drop(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	struct input *in = q->up;
	if (!in)
		return;
	q->up = NULL;
	buf_release(&in->pending);
	api_free(in->a);
	free(in->bytes);
	free(in);
}

/* One message: 0, or -1 after answering. */
static int input_msg(struct httpd_req *r, struct input *in, const char *msg, size_t len)
{
	struct e2b_req *q = r->app;
	json_t *m = json_loadb(msg, len, 0, NULL);
	json_t *start = json_object_get(m, "start"), *data = json_object_get(m, "data");
	const char *why = NULL;
	long n = -1;
	if (!json_is_object(m))
		why = "a message is not a JSON object";
	else if (start && in->pid)
		why = "start came twice";
	else if (data && !in->pid)
		why = "data before start";
	if (why) {
		json_decref(m);
		rpc_error(r, 1, 400, "%s", why);
		return -1;
	}
	if (start) {
		in->pid = selector_pid(r, 1, json_object_get(start, "process"));
		json_decref(m);
		return in->pid ? 0 : -1;
	}
	if (data) {
		json_t *i = json_object_get(data, "input");
		const char *b = json_string_value(json_object_get(i, "stdin"));
		if (!b)
			b = json_string_value(json_object_get(i, "pty"));
		n = b ? b64_decode(b, in->bytes, STDIN_MAX + 1) : -1;
	}
	json_decref(m);
	if (!data) /* a keepalive */
		return 0;
	if (n < 0) {
		rpc_error(r, 1, 400, "input.stdin or input.pty: base64 of at most 1 MiB");
		return -1;
	}
	struct apath p;
	proc_path(&p, q->id, in->pid, "/stdin");
	if (api_post_raw(in->a, &p, in->bytes, (size_t)n) < 0) {
		rpc_api_error(r, 1, in->a);
		return -1;
	}
	return 0;
}

int proc_stream_input_up(struct httpd_req *r, enum httpd_up phase, const char *data, size_t n)
{
	struct e2b_req *q = r->app;
	struct input *in = q->up;
	if (phase == HTTPD_UP_BEGIN) {
		const char *ct = httpd_header(r, "Content-Type");
		if (!ct || strncmp(ct, "application/connect+json", 24))
			return rpc_error(r, 0, 415, "StreamInput is a stream of application/connect+json");
		if (!(in = calloc(1, sizeof(*in))) || !(in->bytes = malloc(STDIN_MAX + 1)) ||
		    e2b_api(r, &in->a) < 0) {
			if (in)
				free(in->bytes);
			free(in);
			return rpc_error(r, 1, 500, "out of memory");
		}
		buf_init(&in->pending, CONNECT_MSG_MAX + 5);
		q->up = in;
		return 0;
	}
	if (!in || phase == HTTPD_UP_ABORT)
		return 0;
	if (phase == HTTPD_UP_DATA && buf_add(&in->pending, data, n) < 0)
		return rpc_error(r, 1, 400, "message too large");
	size_t at = 0;
	const char *base = in->pending.p ? in->pending.p : "";
	for (;;) {
		unsigned flags;
		const char *msg;
		size_t len, used;
		int rc = connect_unframe(base + at, in->pending.len - at, CONNECT_MSG_MAX,
					 &flags, &msg, &len, &used);
		if (rc == -EMSGSIZE)
			return rpc_error(r, 1, 400, "message too large");
		if (rc < 0)
			break;
		at += used;
		if (flags & CONNECT_COMPRESSED)
			return rpc_error(r, 1, 400, "compressed messages are not taken");
		if (!(flags & CONNECT_END) && input_msg(r, in, msg, len) < 0)
			return 0;
	}
	/* what was taken goes; a partial envelope waits for more */
	if (at) {
		memmove(in->pending.p, in->pending.p + at, in->pending.len - at);
		in->pending.len -= at;
	}
	if (phase != HTTPD_UP_END)
		return 0;
	if (in->pending.len)
		return rpc_error(r, 1, 400, "the stream ends inside a message");
	if (!in->pid)
		return rpc_error(r, 1, 400, "no start message");
	struct buf b;
	buf_init(&b, 0);
	if (connect_frame(&b, 0, "{}", 2) < 0 || connect_frame_end(&b, NULL, NULL) < 0) {
		buf_release(&b);
		return rpc_error(r, 1, 500, "out of memory");
	}
	size_t len;
	char *p = buf_detach(&b, &len);
	return httpd_reply_buffer(r, 200, "application/connect+json", p, len);
}
