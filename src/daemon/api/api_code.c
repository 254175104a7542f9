/*
 * api_code: code contexts (docs/api.md, "Code"). A call runs in the guest's kernel of its
 * context and answers whole (stdout, stderr, results, error) or as NDJSON while it runs; the
 * results are rebuilt from the guest's lines in sandbox/sbx_code.c. The contexts themselves
 * live in the guest's agent: these handlers only ask it.
 */
#include "daemon/api/api.h"

#include "common/clock.h"

#include <errno.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CODE_BYTES (128 << 10)
#define MAX_CODE_TIMEOUT_S (24 * 3600)
#define DEFAULT_CODE_TIMEOUT_S 300
#define KILL_GRACE_MS 2000 /* an interrupted kernel's time to stop (agent: CODE_GRACE_MS) */

/* A context id as docs/api.md gives it: 1 to 64 of A-Z a-z 0-9 . _ - */
static int valid_ctx_id(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > CTX_ID_MAX)
		return 0;
	return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

/* Reads "language" and "id"/"context" (key) from the body: 0, or -1 after answering 422. */
static int parse_ctx(struct req *r, const char *key, const char **ctx, const char **lang)
{
	if (api_str(r, "language", 16, lang) < 0 || api_str(r, key, CTX_ID_MAX, ctx) < 0)
		return -1;
	if (*lang && strcmp(*lang, "python") && strcmp(*lang, "bash"))
		return reply_error(r, 422, "invalid_argument", "'language' must be \"python\" or \"bash\""), -1;
	if (*ctx && !valid_ctx_id(*ctx))
		return reply_error(r, 422, "invalid_argument",
				   "'%s' must be 1 to %d of A-Z a-z 0-9 . _ -", key, CTX_ID_MAX), -1;
	return 0;
}

/* "figure_formats": an array of "png" and "svg" as the agent's A_FORMATS: 0, or -1 after
 * answering 422. */
static int parse_formats(struct req *r, char *out, size_t n)
{
	json_t *v = json_object_get(r->body, "figure_formats"), *f;
	size_t i;
	int png = 0, svg = 0, ok = !v || json_is_null(v) || (json_is_array(v) && json_array_size(v) >= 1);
	json_array_foreach(v, i, f) {
		const char *s = json_string_value(f);
		png |= s && !strcmp(s, "png");
		svg |= s && !strcmp(s, "svg");
		ok &= s && (!strcmp(s, "png") || !strcmp(s, "svg"));
	}
	if (!ok)
		return reply_error(r, 422, "invalid_argument",
				   "'figure_formats' must be a non-empty array of \"png\" and \"svg\""), -1;
	snprintf(out, n, "%s", png && svg ? "png,svg" : svg ? "svg" : "png");
	return 0;
}

/* The answer for a call or a context request that the agent refused. ENOENT is a context
 * that is not there (404) for requests that name one, else a missing interpreter or
 * directory (422). */
static int code_error(struct req *r, const struct sop_state *st, int named)
{
	if (st->end != P_ERROR)
		return reply_error(r, 503, "unavailable", "the sandbox did not answer the call");
	if (st->err == EBUSY || st->err == EEXIST)
		return reply_error(r, 409, "conflict", "%s", st->msg);
	if (st->err == ENOENT && named)
		return reply_error(r, 404, "not_found", "%s", st->msg);
	/* Well-formed, but the sandbox has no such user, directory or interpreter. */
	if (st->err == EINVAL || st->err == ENOENT || st->err == EPERM)
		return reply_error(r, 422, "invalid_argument", "%s", st->msg);
	return api_agent_error(r, st);
}

json_t *api_code_event_json(const struct sbx_code_event *e, int with_type)
{
	json_t *o = json_object();
	if (e->is_error) {
		if (with_type)
			json_object_set_new(o, "type", json_string("error"));
		const char *const f[3][2] = { { "name", e->name }, { "value", e->value },
					      { "traceback", e->traceback } };
		for (int i = 0; i < 3; i++)
			if (f[i][1])
				json_object_set_new(o, f[i][0], json_string(f[i][1]));
		return o;
	}
	if (with_type)
		json_object_set_new(o, "type", json_string("result"));
	json_object_set_new(o, "is_main_result", json_boolean(e->is_main));
	for (int i = 0; i < SBX_NFIELDS; i++)
		if (e->field[i])
			json_object_set_new(o, sbx_code_field_names[i], json_string(e->field[i]));
	if (e->json)
		json_object_set(o, "json", e->json);
	return o;
}

json_t *api_code_died_error(const struct sbx_code_info *ci)
{
	return json_pack("{s:s,s:s,s:s}", "name", "KernelDied", "value",
			 ci->died_msg[0] ? ci->died_msg : "the kernel died", "traceback", "");
}

json_t *api_code_execution(struct sop *op, int with_results)
{
	const struct sbx_code_info *ci = sop_code(op);
	if (!ci)
		return NULL;
	json_t *o = json_pack("{s:s,s:s}", "context", ci->context, "language", ci->language);
	json_object_set_new(o, "execution_count", ci->count >= 0 ? json_integer(ci->count) : json_null());
	if (with_results) {
		/* The results in order; the last error the kernel reported, or
		 * its death. */
		json_t *results = json_array(), *error = NULL;
		for (size_t i = 0; i < ci->nevents; i++) {
			const struct sbx_code_event *e = sop_code_event(op, i);
			if (!e->is_error) {
				json_array_append_new(results, api_code_event_json(e, 0));
				continue;
			}
			json_decref(error);
			error = api_code_event_json(e, 0);
		}
		if (ci->died) {
			json_decref(error);
			error = api_code_died_error(ci);
		}
		json_object_set_new(o, "results", results);
		json_object_set_new(o, "error", error ? error : json_null());
	}
	json_object_set_new(o, "timed_out", json_boolean(ci->timed_out));
	json_object_set_new(o, "kernel_restarted", json_boolean(ci->restarted));
	json_object_set_new(o, "restart_reason",
			    ci->restarted ? json_string(ci->restart_reason) : json_null());
	json_object_set_new(o, "results_truncated", json_boolean(ci->truncated));
	json_object_set_new(o, "duration_ms", json_integer(ci->duration_ms));
	return o;
}

/* The execution a whole answer carries: the results and the kept output. */
static json_t *execution_json(struct sop *op)
{
	json_t *o = api_code_execution(op, 1);
	if (!o)
		return NULL;
	int cut[2];
	const struct pbuf *out = sop_output(op, 0, &cut[0]), *err = sop_output(op, 1, &cut[1]);
	json_object_set_new(o, "stdout", api_text(out, cut[0]));
	json_object_set_new(o, "stderr", api_text(err, cut[1]));
	json_object_set_new(o, "stdout_truncated", json_boolean(cut[0]));
	json_object_set_new(o, "stderr_truncated", json_boolean(cut[1]));
	return o;
}

int api_code_run(struct req *r)
{
	if (!r->body)
		return reply_error(r, 400, "bad_request", "a JSON body with \"code\" is required");
	const char *code = NULL, *ctx = NULL, *lang = NULL;
	long long timeout = DEFAULT_CODE_TIMEOUT_S;
	int stream = 0;
	char formats[16];
	if (api_str(r, "code", MAX_CODE_BYTES, &code) < 0 || parse_ctx(r, "context", &ctx, &lang) < 0 ||
	    api_duration(r, json_object_get(r->body, "timeout"), "timeout", MAX_CODE_TIMEOUT_S, &timeout) < 0 ||
	    api_bool(r, "stream", &stream) < 0 || parse_formats(r, formats, sizeof(formats)) < 0)
		return 0;
	if (!code)
		return reply_error(r, 422, "invalid_argument",
				   "'code' is required: a string of at most %d bytes without NUL", MAX_CODE_BYTES);
	/* Each language has a default context: python's "default", bash's "bash". */
	if (!ctx)
		ctx = lang && !strcmp(lang, "bash") ? "bash" : "default";
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop *op = sop_new(stream ? SOP_NDJSON : SOP_COLLECT, r->api->max_output_bytes);
	struct sbx_request q = { .kind = SBX_CODE, .context = ctx, .language = lang, .code = code,
				 .timeout_ms = (uint64_t)timeout * 1000, /* the sandbox's user */
				 .formats = formats };
	if (api_send(r, s, op, &q, "the code and the sandbox's env are too large") < 0)
		goto out;
	struct sop_state st;
	int e = api_wait(r, s, op, 1, r->api->answer_ms, &st);
	if (e < 0 || !st.started) {
		e < 0 ? api_wait_error(r, e) : code_error(r, &st, 0);
		goto out;
	}
	if (stream)
		return api_reply_sop(r, s, op, API_STREAM_CODE); /* takes op and s */
	/* Past its timeout a call ends within the kill grace; answer_ms more
	 * before the daemon gives up on the guest. */
	long long limit = timeout * 1000 + KILL_GRACE_MS + r->api->answer_ms;
	e = api_wait(r, s, op, 0, limit > INT32_MAX ? INT32_MAX : (int)limit, &st);
	json_t *x = e == 0 && st.end == P_OK ? execution_json(op) : NULL;
	if (e < 0)
		api_wait_error(r, e); /* sop_free below interrupts the call */
	else if (!x)
		reply_error(r, 503, "unavailable", "the call ended without its answer: %s",
			    st.msg[0] ? st.msg : "the sandbox went away");
	else
		reply_json(r, 200, x);
out:
	sop_free(s, op);
	sbx_put(s);
	return 0;
}

/* Runs a context request (kind, on context ctx, with a new one's language,
 * cwd and user) and waits for its end: the finished sop with *st, or NULL
 * after answering. */
static struct sop *ctx_request(struct req *r, struct sbx *s, enum sbx_kind kind, const char *ctx,
			       const char *lang, const char *cwd, const char *user, struct sop_state *st)
{
	struct sop *op = sop_new(SOP_COLLECT, 0);
	struct sbx_request q = { .kind = kind, .context = ctx, .language = lang, .cwd = cwd,
				 .user = user };
	if (api_send(r, s, op, &q, "the request is too large") < 0) {
		sop_free(s, op);
		return NULL;
	}
	int e = api_wait(r, s, op, 0, r->api->answer_ms, st);
	if (e < 0) {
		api_wait_error(r, e);
		sop_free(s, op);
		return NULL;
	}
	if (st->end != P_OK) {
		code_error(r, st, kind == SBX_CTX_RESTART || kind == SBX_CTX_DELETE);
		sop_free(s, op);
		return NULL;
	}
	return op;
}

int api_code_ctx_create(struct req *r)
{
	const char *ctx = NULL, *lang = NULL, *cwd = NULL, *user = "user";
	if (parse_ctx(r, "id", &ctx, &lang) < 0 || api_str(r, "cwd", PROTO_MAX_STR, &cwd) < 0 ||
	    api_str(r, "user", 64, &user) < 0)
		return 0;
	if (cwd && api_check_path(r, "cwd", cwd) < 0)
		return 0;
	char id[16];
	if (!ctx) {
		uint8_t raw[4];
		if (RAND_bytes(raw, sizeof(raw)) != 1)
			return reply_error(r, 500, "internal", "no randomness for a context id");
		snprintf(id, sizeof(id), "ctx_%02x%02x%02x%02x", raw[0], raw[1], raw[2], raw[3]);
		ctx = id;
	}
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop_state st;
	struct sop *op = ctx_request(r, s, SBX_CTX_NEW, ctx, lang ? lang : "python", cwd, user, &st);
	json_t *e = op ? api_item_json(sop_entry(op)) : NULL;
	if (e)
		reply_json(r, 201, e);
	else if (op)
		reply_error(r, 503, "unavailable", "the agent did not describe the context");
	sop_free(s, op);
	sbx_put(s);
	return 0;
}

int api_code_ctx_list(struct req *r)
{
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop_state st;
	struct sop *op = ctx_request(r, s, SBX_CTX_LIST, NULL, NULL, NULL, NULL, &st);
	if (op) {
		reply_json(r, 200, json_pack("{s:o}", "contexts", api_items_json(op)));
	}
	sop_free(s, op);
	sbx_put(s);
	return 0;
}

/* The {ctx} path parameter: it, or NULL after a 404. */
static const char *path_ctx(struct req *r)
{
	if (valid_ctx_id(r->param[1]))
		return r->param[1];
	reply_error(r, 404, "not_found", "no code context '%s'", r->param[1]);
	return NULL;
}

int api_code_ctx_restart(struct req *r)
{
	const char *ctx = path_ctx(r);
	struct sbx *s = ctx ? api_sbx(r) : NULL;
	if (!s)
		return 0;
	struct sop_state st;
	struct sop *op = ctx_request(r, s, SBX_CTX_RESTART, ctx, NULL, NULL, NULL, &st);
	json_t *e = op ? api_item_json(sop_entry(op)) : NULL;
	if (e)
		reply_json(r, 200, e);
	else if (op)
		reply_error(r, 503, "unavailable", "the agent did not describe the context");
	sop_free(s, op);
	sbx_put(s);
	return 0;
}

int api_code_ctx_delete(struct req *r)
{
	const char *ctx = path_ctx(r);
	struct sbx *s = ctx ? api_sbx(r) : NULL;
	if (!s)
		return 0;
	struct sop_state st;
	struct sop *op = ctx_request(r, s, SBX_CTX_DELETE, ctx, NULL, NULL, NULL, &st);
	if (op)
		reply_empty(r, 204);
	sop_free(s, op);
	sbx_put(s);
	return 0;
}
