/*
 * api_exec: commands and processes. A foreground exec collects the tail of
 * each stream; a background one keeps its agent operation open, adopted by
 * the sandbox, so stdin can reach the process later. Output leaves as
 * UTF-8 text (invalid bytes become U+FFFD).
 */
#include "daemon/api/api.h"

#include "common/clock.h"
#include "common/utf8.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_EXEC_TIMEOUT_S (24 * 3600)

/* Puts A_ENV for every pair of a JSON object text. */
static int put_env(struct pbuf *b, const char *json)
{
	json_t *o = json ? json_loads(json, 0, NULL) : NULL;
	const char *k;
	json_t *v;
	int r = 0;
	json_object_foreach(o, k, v) {
		char kv[PROTO_MAX_STR + 1];
		if (snprintf(kv, sizeof(kv), "%s=%s", k, json_string_value(v)) >= (int)sizeof(kv))
			continue;
		if ((r = proto_put_str(b, A_ENV, kv)) < 0)
			break;
	}
	json_decref(o);
	return r;
}

static json_t *text(const struct pbuf *b, int cut)
{
	const uint8_t *p = b->data;
	size_t n = b->len;
	/* Cut at the front: do not start inside a character. */
	while (cut && n && (*p & 0xc0) == 0x80)
		p++, n--;
	char *s = malloc(3 * n + 1);
	if (!s)
		return json_string("");
	size_t len = utf8_sanitize(p, n, s);
	json_t *j = json_stringn(s, len);
	free(s);
	return j ? j : json_string("");
}

static json_t *result_json(struct sop *op, int64_t ms)
{
	int cut[2];
	for (int i = 0; i < 2; i++) {
		cut[i] = op->total[i] > op->cap;
		if (op->out[i].len > op->cap)
			pbuf_consume(&op->out[i], op->out[i].len - op->cap);
	}
	json_t *o = json_object();
	json_object_set_new(o, "exit_code", op->exit_code >= 0 ? json_integer(op->exit_code) : json_null());
	json_object_set_new(o, "signal", op->signal >= 0 ? json_integer(op->signal) : json_null());
	json_object_set_new(o, "timed_out", json_boolean(op->timed_out > 0));
	json_object_set_new(o, "stdout", text(&op->out[0], cut[0]));
	json_object_set_new(o, "stderr", text(&op->out[1], cut[1]));
	json_object_set_new(o, "stdout_truncated", json_boolean(cut[0]));
	json_object_set_new(o, "stderr_truncated", json_boolean(cut[1]));
	json_object_set_new(o, "duration_ms", json_integer(ms));
	return o;
}

/* Builds the P_EXEC from the body; answers 422 and returns -1 if invalid. */
static int exec_request(struct req *r, struct sbx *s, struct sop *op, int background,
			const char **stdin_text)
{
	const char *cmd = NULL, *cwd = NULL, *user = "user";
	long long timeout = 0;
	char *env = NULL;
	json_t *argv = json_object_get(r->body, "argv");
	if (api_str(r, "cmd", PROTO_MAX_STR, &cmd) < 0 || api_str(r, "cwd", PROTO_MAX_STR, &cwd) < 0 ||
	    api_str(r, "user", 64, &user) < 0 || api_str(r, "stdin", 1 << 20, stdin_text) < 0 ||
	    api_duration(r, json_object_get(r->body, "timeout"), "timeout", MAX_EXEC_TIMEOUT_S, &timeout) < 0 ||
	    api_str_map(r, "env", 256, &env) < 0)
		return -1;
	int ok_argv = json_is_array(argv) && json_array_size(argv) >= 1 && json_array_size(argv) <= 1024;
	for (size_t i = 0; ok_argv && i < json_array_size(argv); i++) {
		json_t *a = json_array_get(argv, i);
		ok_argv = json_is_string(a) && json_string_length(a) <= PROTO_MAX_STR &&
			  strlen(json_string_value(a)) == json_string_length(a);
	}
	if ((cmd != NULL) == (argv != NULL) || (argv && !ok_argv)) {
		free(env);
		return reply_error(r, 422, "invalid_argument",
				   "give either 'cmd' (a string) or 'argv' (1 to 1024 strings)"), -1;
	}
	if (cwd && api_check_path(r, "cwd", cwd) < 0) {
		free(env);
		return -1;
	}
	struct pbuf *b = sbx_begin(s, P_EXEC, op);
	if (!b) {
		free(env);
		return reply_error(r, 409, "conflict", "sandbox '%s' is not running", r->param[0]), -1;
	}
	int e = cmd ? proto_put_str(b, A_SHELL, cmd) : 0;
	for (size_t i = 0; !e && argv && i < json_array_size(argv); i++)
		e = proto_put_str(b, A_ARG, json_string_value(json_array_get(argv, i)));
	/* The sandbox's env first: the command's own wins in the agent. */
	if (!e)
		e = put_env(b, sbx_env_json(s));
	if (!e)
		e = put_env(b, env);
	if (!e && cwd)
		e = proto_put_str(b, A_CWD, cwd);
	if (!e)
		e = proto_put_str(b, A_USER, user);
	if (!e && timeout)
		e = proto_put_u64(b, A_TIMEOUT_MS, (uint64_t)timeout * 1000);
	if (!e && (background || *stdin_text))
		e = proto_put_u32(b, A_STDIN, 1);
	/* Background at the agent too: it then keeps the process's output and
	 * exit after the end, for stream, wait and the process list. */
	if (!e && background)
		e = proto_put_u32(b, A_BACKGROUND, 1);
	free(env);
	if (e < 0) /* never send a command with attributes missing */
		sbx_abort(s, op);
	/* A frame over the cap fails here and the operation is dropped. */
	if (e < 0 || sbx_end(s, op) < 0)
		return reply_error(r, 413, "payload_too_large", "the command is too large"), -1;
	return 0;
}

static json_t *proc_json(const struct sop *op, const char *cmd, int exited)
{
	json_t *o = json_pack("{s:i,s:i,s:s,s:s,s:b}", "pid", op->proc, "os_pid", op->pid, "cmd",
			      cmd ? cmd : "", "state", exited ? "exited" : "running", "timed_out",
			      op->timed_out > 0);
	json_object_set_new(o, "exit_code", op->exit_code >= 0 ? json_integer(op->exit_code) : json_null());
	json_object_set_new(o, "signal", op->signal >= 0 ? json_integer(op->signal) : json_null());
	return o;
}

int api_exec(struct req *r)
{
	if (!r->body)
		return reply_error(r, 400, "bad_request", "a JSON body with \"cmd\" or \"argv\" is required");
	int background = 0;
	if (api_bool(r, "background", &background) < 0)
		return 0;
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop *op = sop_new(SOP_COLLECT);
	const char *in = "";
	int64_t t0 = clock_ms();
	if (!op) {
		reply_error(r, 500, "internal", "out of memory");
		goto out;
	}
	op->cap = r->api->max_output_bytes;
	if (exec_request(r, s, op, background, &in) < 0)
		goto out;
	if (background) {
		sbx_wait(s, op, 0, 60000);
		if (op->end == P_ERROR && (op->err == EINVAL || op->err == ENOENT))
			reply_error(r, 422, "invalid_argument", "%s", op->msg);
		else if (op->end == P_ERROR)
			api_agent_error(r, op);
		else if (op->end != P_OK)
			reply_error(r, 503, "unavailable", "the process did not start");
		else if (*in && sbx_stdin(s, op->proc, 0, in, strlen(in)) < 0)
			reply_error(r, 503, "unavailable", "cannot write stdin");
		else
			reply_json(r, 201, proc_json(op, json_string_value(json_object_get(r->body, "cmd")), 0));
		goto out;
	}
	if (*in)
		sbx_data(s, op, PF_EOF, in, strlen(in));
	sbx_wait(s, op, 0, -1);
	if (op->end == P_ERROR && (op->err == EINVAL || op->err == ENOENT))
		/* An unknown user or a missing cwd: the request was well-formed
		 * but names what the sandbox does not have. */
		reply_error(r, 422, "invalid_argument", "%s", op->msg);
	else if (op->end == P_ERROR)
		api_agent_error(r, op);
	else
		reply_json(r, 200, result_json(op, clock_ms() - t0));
out:
	sop_free(s, op);
	sbx_put(s);
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
 * returns its finished sop, or NULL after answering. */
static struct sop *simple(struct req *r, struct sbx *s, uint16_t type, uint32_t proc, uint32_t signo,
			  int timeout_ms)
{
	struct sop *op = sop_new(SOP_COLLECT);
	struct pbuf *b = op ? sbx_begin(s, type, op) : NULL;
	if (!b) {
		sop_free(s, op);
		reply_error(r, 409, "conflict", "sandbox '%s' is not running", r->param[0]);
		return NULL;
	}
	if ((proc && proto_put_u32(b, A_PROC, proc) < 0) ||
	    (signo && proto_put_u32(b, A_SIGNO, signo) < 0)) {
		sbx_abort(s, op);
		sop_free(s, op);
		reply_error(r, 500, "internal", "out of memory");
		return NULL;
	}
	sbx_end(s, op);
	sbx_wait(s, op, 0, timeout_ms);
	return op;
}

int api_procs(struct req *r)
{
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop *op = simple(r, s, P_PS, 0, 0, 30000);
	if (op && op->end == P_OK)
		reply_json(r, 200, json_pack("{s:O}", "processes", op->items ? op->items : json_array()));
	else if (op)
		api_agent_error(r, op);
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
	struct sop *op = simple(r, s, P_PS, 0, 0, 30000);
	json_t *found = NULL;
	size_t i;
	json_t *p;
	json_array_foreach(op ? op->items : NULL, i, p)
		if (json_integer_value(json_object_get(p, "pid")) == pid)
			found = p;
	if (op && found)
		reply_json(r, 200, json_incref(found));
	else if (op && op->end == P_ERROR)
		api_agent_error(r, op);
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
	struct sop *op = simple(r, s, P_SIGNAL, pid, (uint32_t)signo, 30000);
	if (op && op->end == P_OK)
		reply_empty(r, 204);
	else if (op)
		api_agent_error(r, op);
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
	struct sop *op = simple(r, s, P_WAIT, pid, 0, timeout < 0 ? -1 : (int)(timeout * 1000));
	if (op && op->end == P_ERROR) {
		api_agent_error(r, op);
	} else if (op) {
		op->proc = pid;
		reply_json(r, 200, proc_json(op, NULL, op->end == P_EXIT));
	}
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
	struct sop *op = sop_new(SOP_NDJSON);
	struct pbuf *b = op ? sbx_begin(s, P_ATTACH, op) : NULL;
	if (!b) {
		sop_free(s, op);
		sbx_put(s);
		return reply_error(r, 409, "conflict", "sandbox '%s' is not running", r->param[0]);
	}
	int e = proto_put_u32(b, A_PROC, pid);
	if (e < 0)
		sbx_abort(s, op);
	else
		sbx_end(s, op);
	if (e == 0)
		sbx_wait(s, op, 1, 30000);
	if (!op->started) {
		if (op->end == P_ERROR)
			api_agent_error(r, op);
		else
			reply_error(r, 503, "unavailable", "the agent did not answer");
		sop_free(s, op);
		sbx_put(s);
		return 0;
	}
	return api_reply_sop(r, s, op, "application/x-ndjson");
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
		e = sbx_stdin(up->s, up->pid, 0, data, n);
		break;
	case UP_END: {
		const char *eof = req_query(r, "eof", NULL);
		int close_it = eof && (!strcmp(eof, "true") || !strcmp(eof, "1"));
		e = close_it ? sbx_stdin(up->s, up->pid, PF_EOF, "", 0) : 0;
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
	else if (e < 0)
		reply_error(r, 503, "unavailable", "cannot write stdin: %s", strerror(-e));
	if (phase == UP_END || phase == UP_ABORT || e < 0) {
		sbx_put(up->s);
		free(up);
		r->stream = NULL;
	}
	return 0;
}
