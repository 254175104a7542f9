/*
 * api_exec: commands and processes. A foreground exec collects the tail of
 * each stream (or streams them as NDJSON); a background one keeps its agent
 * operation open, adopted by the sandbox, so stdin can reach the process
 * later. Output leaves as UTF-8 text (invalid bytes become U+FFFD). Every
 * wait is bounded, and a foreground exec whose client leaves is killed.
 */
#include "daemon/api/api.h"

#include "common/clock.h"
#include "common/utf8.h"

#include <errno.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EXEC_TIMEOUT_S (24 * 3600)
#define MAX_STDIN (1 << 20)
#define STDIN_WAIT_MS 30000 /* for the process to take stdin within its credit */
#define MAX_TERM_SIZE 10000 /* rows or columns of a terminal, as the agent's cap */

static json_t *result_json(struct sop *op, const struct sop_state *st, int64_t ms)
{
	int cut[2];
	const struct pbuf *out = sop_output(op, 0, &cut[0]), *err = sop_output(op, 1, &cut[1]);
	json_t *o = json_object();
	json_object_set_new(o, "exit_code", st->exit_code >= 0 ? json_integer(st->exit_code) : json_null());
	json_object_set_new(o, "signal", st->signal >= 0 ? json_integer(st->signal) : json_null());
	json_object_set_new(o, "timed_out", json_boolean(st->timed_out > 0));
	json_object_set_new(o, "stdout", api_text(out, cut[0]));
	json_object_set_new(o, "stderr", api_text(err, cut[1]));
	json_object_set_new(o, "stdout_truncated", json_boolean(cut[0]));
	json_object_set_new(o, "stderr_truncated", json_boolean(cut[1]));
	json_object_set_new(o, "duration_ms", json_integer(ms));
	return o;
}

/* Standard base64 into a malloc'd buffer: 0, or -1 when it is not base64
 * or decodes to more than max bytes. */
static int base64_decode(const char *in, size_t n, size_t max, uint8_t **out, size_t *outlen)
{
	if (n % 4 || n / 4 * 3 > max + 2)
		return -1;
	uint8_t *buf = malloc(n / 4 * 3 + 1);
	if (!buf)
		return -1;
	int len = n ? EVP_DecodeBlock(buf, (const unsigned char *)in, (int)n) : 0;
	if (len < 0) {
		free(buf);
		return -1;
	}
	/* EVP_DecodeBlock counts the padding as zero bytes. */
	len -= (n > 0 && in[n - 1] == '=') + (n > 1 && in[n - 2] == '=');
	if ((size_t)len > max) {
		free(buf);
		return -1;
	}
	*out = buf;
	*outlen = (size_t)len;
	return 0;
}

/* An exec request as the body gives it. */
struct exec_args {
	const char *cmd, *cwd, *user;
	json_t *argv;
	long long timeout;
	char *env;
	int background, stream, close_stdin;
	uint32_t rows, cols; /* "pty": on a terminal of that size; 0 when not */
	uint8_t *in; /* stdin bytes (text or decoded base64), or NULL */
	size_t inlen;
};

static void exec_args_release(struct exec_args *x)
{
	free(x->env);
	free(x->in);
}

/* A terminal's size, {"rows": R, "cols": C}, each 1 to MAX_TERM_SIZE: 0,
 * or -1 after answering 422. */
static int parse_size(struct req *r, json_t *o, const char *what, uint32_t *rows, uint32_t *cols)
{
	json_t *jr = json_object_get(o, "rows"), *jc = json_object_get(o, "cols");
	if (!json_is_object(o) || !json_is_integer(jr) || !json_is_integer(jc) ||
	    json_integer_value(jr) < 1 || json_integer_value(jr) > MAX_TERM_SIZE ||
	    json_integer_value(jc) < 1 || json_integer_value(jc) > MAX_TERM_SIZE)
		return reply_error(r, 422, "invalid_argument",
				   "'%s' must be {\"rows\": R, \"cols\": C}, each from 1 to %d", what,
				   MAX_TERM_SIZE), -1;
	*rows = (uint32_t)json_integer_value(jr);
	*cols = (uint32_t)json_integer_value(jc);
	return 0;
}

/* Reads and checks the body: 0, or -1 after answering 422. */
static int parse_exec(struct req *r, struct exec_args *x)
{
	const char *in_text = NULL, *in_b64 = NULL;
	/* No user: the sandbox's default ("user", or its image's USER). */
	*x = (struct exec_args){ .argv = json_object_get(r->body, "argv") };
	if (api_str(r, "cmd", PROTO_MAX_STR, &x->cmd) < 0 || api_str(r, "cwd", PROTO_MAX_STR, &x->cwd) < 0 ||
	    api_str(r, "user", 64, &x->user) < 0 || api_str(r, "stdin", MAX_STDIN, &in_text) < 0 ||
	    api_str(r, "stdin_base64", MAX_STDIN / 3 * 4 + 4, &in_b64) < 0 ||
	    api_bool(r, "background", &x->background) < 0 || api_bool(r, "stream", &x->stream) < 0 ||
	    api_bool(r, "close_stdin", &x->close_stdin) < 0 ||
	    api_duration(r, json_object_get(r->body, "timeout"), "timeout", MAX_EXEC_TIMEOUT_S, &x->timeout) < 0 ||
	    api_str_map(r, "env", 256, 1, &x->env) < 0)
		return -1;
	int ok_argv = json_is_array(x->argv) && json_array_size(x->argv) >= 1 &&
		      json_array_size(x->argv) <= 1024;
	for (size_t i = 0; ok_argv && i < json_array_size(x->argv); i++) {
		json_t *a = json_array_get(x->argv, i);
		ok_argv = json_is_string(a) && json_string_length(a) <= PROTO_MAX_STR &&
			  strlen(json_string_value(a)) == json_string_length(a);
	}
	const char *bad = NULL;
	if ((x->cmd != NULL) == (x->argv != NULL) || (x->argv && !ok_argv))
		bad = "give either 'cmd' (a string) or 'argv' (1 to 1024 strings)";
	else if (in_text && in_b64)
		bad = "give 'stdin' (text) or 'stdin_base64' (bytes), not both";
	else if (x->background && x->stream)
		bad = "'stream' is for foreground commands; a background process has its own stream";
	else if (x->close_stdin && (!x->background || in_text || in_b64 ||
				    json_object_get(r->body, "pty")))
		bad = "'close_stdin' is for a background process without 'stdin' or 'pty'";
	if (bad)
		return reply_error(r, 422, "invalid_argument", "%s", bad), -1;
	json_t *pty = json_object_get(r->body, "pty");
	if (pty && !json_is_null(pty) && parse_size(r, pty, "pty", &x->rows, &x->cols) < 0)
		return -1;
	if (x->cwd && api_check_path(r, "cwd", x->cwd) < 0)
		return -1;
	if (in_b64 && base64_decode(in_b64, strlen(in_b64), MAX_STDIN, &x->in, &x->inlen) < 0)
		return reply_error(r, 422, "invalid_argument",
				   "'stdin_base64' must be standard base64 of at most %d bytes", MAX_STDIN), -1;
	if (in_text) {
		x->inlen = strlen(in_text);
		x->in = malloc(x->inlen + 1);
		if (!x->in)
			return reply_error(r, 500, "internal", "out of memory"), -1;
		memcpy(x->in, in_text, x->inlen);
	}
	return 0;
}

/* Sends the P_EXEC: 0, or -1 after answering. */
static int send_exec(struct req *r, struct sbx *s, struct sop *op, const struct exec_args *x)
{
	size_t argc = x->argv ? json_array_size(x->argv) : 0, nenv;
	const char **argv = calloc(argc + 1, sizeof(*argv));
	char **env = NULL;
	if (!argv || api_env(x->env, &env, &nenv) < 0) {
		free(argv);
		return reply_error(r, 500, "internal", "out of memory"), -1;
	}
	for (size_t i = 0; i < argc; i++)
		argv[i] = json_string_value(json_array_get(x->argv, i));
	struct sbx_request q = {
		.kind = SBX_EXEC, .cmd = x->cmd, .argv = argv, .argc = argc,
		.env = (const char *const *)env, .nenv = nenv, .cwd = x->cwd, .user = x->user,
		.timeout_ms = (uint64_t)x->timeout * 1000, .with_stdin = x->in != NULL,
		.background = x->background, .rows = x->rows, .cols = x->cols,
		.no_stdin = x->close_stdin,
	};
	int e = api_send(r, s, op, &q, "the command is too large");
	free(argv);
	api_env_free(env, nenv);
	return e;
}

static json_t *proc_json(const struct sop_state *st, uint32_t proc, const char *cmd, int exited)
{
	json_t *o = json_pack("{s:i,s:i,s:s,s:s,s:b}", "pid", proc, "os_pid", st->pid, "cmd",
			      cmd ? cmd : "", "state", exited ? "exited" : "running", "timed_out",
			      st->timed_out > 0);
	json_object_set_new(o, "exit_code", st->exit_code >= 0 ? json_integer(st->exit_code) : json_null());
	json_object_set_new(o, "signal", st->signal >= 0 ? json_integer(st->signal) : json_null());
	json_object_set_new(o, "pty", json_boolean(st->pty));
	return o;
}

/* The answer for an exec that ended before it started. */
static int start_error(struct req *r, const struct sop_state *st)
{
	/* An unknown user or a missing cwd: the request was well-formed but
	 * names what the sandbox does not have. */
	if (st->end == P_ERROR && (st->err == EINVAL || st->err == ENOENT))
		return reply_error(r, 422, "invalid_argument", "%s", st->msg);
	if (st->end == P_ERROR)
		return api_agent_error(r, st);
	return reply_error(r, 503, "unavailable", "the process did not start");
}

static void exec_background(struct req *r, struct sbx *s, struct sop *op, const struct exec_args *x)
{
	struct sop_state st;
	int e = api_wait(r, s, op, 0, r->api->answer_ms, &st);
	if (e < 0)
		api_wait_error(r, e);
	else if (st.end != P_OK)
		start_error(r, &st);
	else if (!st.proc)
		reply_error(r, 503, "unavailable", "the agent did not say which process it started");
	else if (x->in && sbx_stdin(s, st.proc, 0, x->in, x->inlen, STDIN_WAIT_MS) < 0)
		reply_error(r, 503, "unavailable", "cannot write stdin");
	else
		reply_json(r, 201, proc_json(&st, st.proc, x->cmd, 0));
}

int api_exec(struct req *r)
{
	if (!r->body)
		return reply_error(r, 400, "bad_request", "a JSON body with \"cmd\" or \"argv\" is required");
	struct exec_args x;
	if (parse_exec(r, &x) < 0) {
		exec_args_release(&x);
		return 0;
	}
	struct sbx *s = api_sbx(r);
	if (!s) {
		exec_args_release(&x);
		return 0;
	}
	struct sop *op = sop_new(x.stream ? SOP_NDJSON : SOP_COLLECT, r->api->max_output_bytes);
	struct sop_state st;
	int64_t t0 = clock_ms();
	if (!op) {
		reply_error(r, 500, "internal", "out of memory");
		goto out;
	}
	if (send_exec(r, s, op, &x) < 0)
		goto out;
	if (x.background) {
		exec_background(r, s, op, &x);
		goto out;
	}
	/* A command may end without reading its stdin: its result stands.
	 * One that neither reads it nor ends is killed (sop_free). */
	if (x.in && sbx_data(s, op, PF_EOF, x.in, x.inlen, STDIN_WAIT_MS) < 0 &&
	    sbx_wait(s, op, 0, 0, &st) < 0) {
		reply_error(r, 504, "timeout", "the command did not read its stdin in time");
		goto out;
	}
	if (x.stream) {
		int e = api_wait(r, s, op, 1, r->api->answer_ms, &st);
		if (e < 0 || !st.started) {
			e < 0 ? api_wait_error(r, e) : start_error(r, &st);
			goto out;
		}
		exec_args_release(&x);
		return api_reply_sop(r, s, op, API_STREAM_EXEC); /* takes op and s */
	}
	/* Past its own timeout, a command's end has answer_ms to reach us
	 * before the daemon gives up on the guest. */
	int64_t limit = x.timeout ? x.timeout * 1000 + r->api->answer_ms : -1;
	int e = api_wait(r, s, op, 0, limit > INT32_MAX ? INT32_MAX : (int)limit, &st);
	if (e < 0)
		api_wait_error(r, e); /* sop_free below kills the command */
	else if (st.end == P_ERROR)
		start_error(r, &st);
	else
		reply_json(r, 200, result_json(op, &st, clock_ms() - t0));
out:
	sop_free(s, op);
	sbx_put(s);
	exec_args_release(&x);
	return 0;
}

/* Parses the {pid} path parameter: 0 or -1 after a 404. */
static int path_pid(struct req *r, uint32_t *pid)
{
	char *end;
	unsigned long v = strtoul(r->param[1], &end, 10);
	if (*end || v == 0 || v > UINT32_MAX) {
		reply_error(r, 404, "not_found", "no process '%s'", r->param[1]);
		return -1;
	}
	*pid = (uint32_t)v;
	return 0;
}

/* Runs a request that takes at most A_PROC (and optionally A_SIGNO) and
 * returns its finished sop with *st, or NULL after answering (also when
 * it did not end in time). */
static struct sop *simple(struct req *r, struct sbx *s, enum sbx_kind kind, uint32_t proc,
			  uint32_t signo, int timeout_ms, struct sop_state *st)
{
	struct sop *op = sop_new(SOP_COLLECT, 0);
	struct sbx_request q = { .kind = kind, .proc = proc, .signo = signo };
	if (api_send(r, s, op, &q, "the request is too large") < 0) {
		sop_free(s, op);
		return NULL;
	}
	int e = api_wait(r, s, op, 0, timeout_ms, st);
	/* A wait that ends in its own time is an answer (process still running). */
	if (e < 0 && !(e == -ETIMEDOUT && kind == SBX_WAIT)) {
		api_wait_error(r, e);
		sop_free(s, op);
		return NULL;
	}
	return op;
}

int api_procs(struct req *r)
{
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop_state st;
	struct sop *op = simple(r, s, SBX_PS, 0, 0, r->api->answer_ms, &st);
	if (op && st.end == P_OK)
		reply_json(r, 200, json_pack("{s:o}", "processes", api_items_json(op)));
	else if (op)
		api_agent_error(r, &st);
	sop_free(s, op);
	sbx_put(s);
	return 0;
}

int api_proc_get(struct req *r)
{
	uint32_t pid;
	if (path_pid(r, &pid) < 0)
		return 0;
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop_state st;
	struct sop *op = simple(r, s, SBX_PS, 0, 0, r->api->answer_ms, &st);
	const struct sbx_item *found = NULL;
	for (size_t i = 0, n = op && st.end == P_OK ? sop_nitems(op) : 0; i < n; i++)
		if (sop_item(op, i)->proc.proc == pid)
			found = sop_item(op, i);
	if (found)
		reply_json(r, 200, api_item_json(found));
	else if (op && st.end != P_OK)
		api_agent_error(r, &st);
	else if (op)
		reply_error(r, 404, "not_found", "no process %u", pid);
	sop_free(s, op);
	sbx_put(s);
	return 0;
}

static const struct {
	const char *name;
	int signo;
} signals[] = {
	{ "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT }, { "KILL", SIGKILL },
	{ "USR1", SIGUSR1 }, { "USR2", SIGUSR2 }, { "TERM", SIGTERM }, { "STOP", SIGSTOP },
	{ "CONT", SIGCONT },
};

/* Signals the process group of pid: 204, or the agent's error. */
static int signal_proc(struct req *r, uint32_t pid, int signo)
{
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop_state st;
	struct sop *op = simple(r, s, SBX_SIGNAL, pid, (uint32_t)signo, r->api->answer_ms, &st);
	if (op && st.end == P_OK)
		reply_empty(r, 204);
	else if (op)
		api_agent_error(r, &st);
	sop_free(s, op);
	sbx_put(s);
	return 0;
}

int api_proc_signal(struct req *r)
{
	uint32_t pid;
	if (path_pid(r, &pid) < 0)
		return 0;
	json_t *v = r->body ? json_object_get(r->body, "signal") : NULL;
	int signo = 0;
	if (json_is_integer(v) && json_integer_value(v) >= 1 && json_integer_value(v) <= 64)
		signo = (int)json_integer_value(v);
	for (size_t i = 0; json_is_string(v) && i < sizeof(signals) / sizeof(signals[0]); i++) {
		const char *n = json_string_value(v);
		if (!strncmp(n, "SIG", 3))
			n += 3;
		if (!strcmp(n, signals[i].name))
			signo = signals[i].signo;
	}
	if (!signo)
		return reply_error(r, 422, "invalid_argument",
				   "'signal' must be a number from 1 to 64 or a name like \"SIGTERM\"");
	return signal_proc(r, pid, signo);
}

int api_proc_resize(struct req *r)
{
	uint32_t pid, rows, cols;
	if (path_pid(r, &pid) < 0)
		return 0;
	if (!r->body)
		return reply_error(r, 400, "bad_request", "a JSON body {\"rows\": R, \"cols\": C} is required");
	if (parse_size(r, r->body, "the body", &rows, &cols) < 0)
		return 0;
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop *op = sop_new(SOP_COLLECT, 0);
	struct sbx_request q = { .kind = SBX_RESIZE, .proc = pid, .rows = rows, .cols = cols };
	struct sop_state st;
	if (api_send(r, s, op, &q, "the request is too large") < 0) {
		sop_free(s, op);
		sbx_put(s);
		return 0;
	}
	int e = api_wait(r, s, op, 0, r->api->answer_ms, &st);
	if (e < 0)
		api_wait_error(r, e);
	else if (st.end == P_OK)
		reply_empty(r, 204);
	else if (st.err == ENOTTY)
		reply_error(r, 409, "conflict", "process %u does not run on a terminal", pid);
	else if (st.err == ESRCH)
		reply_error(r, 404, "not_found", "no running process %u", pid);
	else
		api_agent_error(r, &st);
	sop_free(s, op);
	sbx_put(s);
	return 0;
}

int api_proc_kill(struct req *r)
{
	uint32_t pid;
	if (path_pid(r, &pid) < 0)
		return 0;
	return signal_proc(r, pid, SIGKILL);
}

int api_proc_wait(struct req *r)
{
	uint32_t pid;
	if (path_pid(r, &pid) < 0)
		return 0;
	long long timeout = -1;
	const char *t = req_query(r, "timeout", NULL);
	json_t *tv = t ? json_string(t) : NULL;
	int bad = t && api_duration(r, tv, "timeout", MAX_EXEC_TIMEOUT_S, &timeout) < 0;
	json_decref(tv);
	if (bad)
		return 0;
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop_state st;
	struct sop *op = simple(r, s, SBX_WAIT, pid, 0, timeout < 0 ? -1 : (int)(timeout * 1000), &st);
	if (op && st.end == P_ERROR)
		api_agent_error(r, &st);
	else if (op)
		reply_json(r, 200, proc_json(&st, pid, NULL, st.end == P_EXIT));
	sop_free(s, op);
	sbx_put(s);
	return 0;
}

int api_proc_stream(struct req *r)
{
	uint32_t pid;
	if (path_pid(r, &pid) < 0)
		return 0;
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop *op = sop_new(SOP_NDJSON, 0);
	struct sbx_request q = { .kind = SBX_ATTACH, .proc = pid };
	if (api_send(r, s, op, &q, "the request is too large") < 0) {
		sop_free(s, op);
		sbx_put(s);
		return 0;
	}
	struct sop_state st = { 0 };
	int e = api_wait(r, s, op, 1, r->api->answer_ms, &st);
	if (e < 0 || !st.started) {
		if (e < 0)
			api_wait_error(r, e);
		else if (st.end == P_ERROR)
			api_agent_error(r, &st);
		else
			reply_error(r, 503, "unavailable", "the agent did not answer");
		sop_free(s, op);
		sbx_put(s);
		return 0;
	}
	return api_reply_sop(r, s, op, API_STREAM_ATTACH);
}

struct stdin_up {
	struct sbx *s;
	uint32_t pid;
};

int api_proc_stdin(struct req *r, enum up_phase phase, const char *data, size_t n)
{
	struct stdin_up *up = r->stream;
	int e;
	switch (phase) {
	case UP_BEGIN: {
		uint32_t pid;
		if (path_pid(r, &pid) < 0)
			return 0;
		struct sbx *s = api_sbx(r);
		if (!s)
			return 0;
		up = calloc(1, sizeof(*up));
		if (!up) {
			sbx_put(s);
			return -ENOMEM;
		}
		*up = (struct stdin_up){ .s = s, .pid = pid };
		r->stream = up;
		return 0;
	}
	case UP_DATA:
		e = sbx_stdin(up->s, up->pid, 0, data, n, STDIN_WAIT_MS);
		break;
	case UP_END: {
		const char *eof = req_query(r, "eof", NULL);
		int close_it = eof && (!strcmp(eof, "true") || !strcmp(eof, "1"));
		e = close_it ? sbx_stdin(up->s, up->pid, PF_EOF, "", 0, STDIN_WAIT_MS) : 0;
		if (e == 0)
			reply_empty(r, 204);
		break;
	}
	case UP_ABORT:
	default:
		e = 0;
		break;
	}
	if (e == -ESRCH)
		reply_error(r, 404, "not_found", "no running process %u with stdin", up->pid);
	else if (e == -ETIMEDOUT)
		reply_error(r, 504, "timeout", "process %u did not read its stdin in time", up->pid);
	else if (e < 0)
		reply_error(r, 503, "unavailable", "cannot write stdin: %s", strerror(-e));
	if (phase == UP_END || phase == UP_ABORT || e < 0) {
		sbx_put(up->s);
		free(up);
		r->stream = NULL;
	}
	return 0;
}
