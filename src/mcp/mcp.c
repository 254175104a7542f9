/*
 * mcp: the protocol's lifecycle (initialize, ping, tools/list, tools/call)
 * and cpuos's tools (mcp.h). A tool that fails answers a result with
 * isError and the reason, as MCP asks, so a model can read it; JSON-RPC
 * errors are for messages that are not well-formed.
 */
#include "mcp/mcp.h"

#include "cli/cpuos/http.h"
#include "common/buf.h"
#include "common/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STDOUT_TAIL 4000   /* what a command's output keeps, as seed 003 */
#define STDERR_TAIL 2000
#define FILE_MAX    (1u << 20) /* read_file's cap */
#define VERSION	    "0.1"

json_t *mcp_error(json_t *id, int code, const char *msg)
{
	return json_pack("{s:s, s:O?, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id, "error", "code",
			 code, "message", msg);
}

/* ---- tool results ---- */

static json_t *text_result(const char *text, int is_error)
{
	return json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text,
			 "isError", is_error);
}

static json_t *json_result(json_t *v) /* steals v */
{
	char *s = v ? json_dumps(v, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
	json_t *r = s ? text_result(s, 0) : text_result("out of memory", 1);
	if (s && json_is_object(v))
		json_object_set(r, "structuredContent", v);
	free(s);
	json_decref(v);
	return r;
}

static json_t *fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *fail(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return text_result(msg, 1);
}

static json_t *api_fail(struct api *a)
{
	return fail("%s", api_message(a));
}

/* ---- arguments ---- */

static const char *arg_str(json_t *args, const char *k)
{
	return json_string_value(json_object_get(args, k));
}

/* A sandbox id argument as a path: /v1/sandboxes/ID[sub]. NULL without one. */
static const char *sbx_arg(json_t *args, struct apath *p, const char *sub)
{
	const char *id = arg_str(args, "sandbox_id");
	if (!id || !*id)
		return NULL;
	apath_init(p, "/v1/sandboxes");
	apath_seg(p, id);
	if (sub)
		apath_add(p, sub);
	return id;
}

#define NEED_SBX(args, p, sub)                                           \
	do {                                                             \
		if (!sbx_arg(args, p, sub))                              \
			return fail("sandbox_id is required (a string)"); \
	} while (0)

/* The last n characters' worth of s (a UTF-8 text), as a new string. */
static json_t *tail(const char *s, size_t n)
{
	size_t len = s ? strlen(s) : 0;
	const char *t = len > n ? s + len - n : s ? s : "";
	while ((*t & 0xc0) == 0x80) /* not inside a character */
		t++;
	return json_string(t);
}

/* ---- tools ---- */

static json_t *sandbox_brief(json_t *s)
{
	return json_pack("{s:O?, s:O?, s:O?, s:O?, s:O?, s:O?}", "sandbox_id", json_object_get(s, "id"),
			 "template", json_object_get(s, "template"), "state",
			 json_object_get(s, "state"), "created_at", json_object_get(s, "created_at"),
			 "expires_at", json_object_get(s, "expires_at"), "metadata",
			 json_object_get(s, "metadata"));
}

static json_t *t_create(struct api *a, json_t *args)
{
	const char *tpl = arg_str(args, "template");
	json_t *body = json_pack("{s:s, s:s}", "template", tpl ? tpl : "python", "timeout", "30m"),
	       *out = NULL, *v;
	if ((v = json_object_get(args, "timeout")))
		json_object_set(body, "timeout", v);
	if ((v = json_object_get(args, "network")))
		json_object_set(body, "network", v);
	if ((v = json_object_get(args, "metadata")))
		json_object_set(body, "metadata", v);
	struct apath p;
	apath_init(&p, "/v1/sandboxes");
	int rc = api_json(a, "POST", &p, body, &out);
	json_decref(body);
	if (rc < 0)
		return api_fail(a);
	json_t *r = json_result(sandbox_brief(out));
	json_decref(out);
	return r;
}

static json_t *t_list(struct api *a, json_t *args)
{
	struct apath p;
	json_t *out = NULL, *arr = json_array(), *s;
	size_t i;
	const char *state = arg_str(args, "state");
	apath_init(&p, "/v1/sandboxes");
	apath_query(&p, "limit", "100");
	if (state)
		apath_query(&p, "state", state);
	if (api_json(a, "GET", &p, NULL, &out) < 0) {
		json_decref(arr);
		return api_fail(a);
	}
	json_array_foreach(json_object_get(out, "sandboxes"), i, s)
		json_array_append_new(arr, sandbox_brief(s));
	json_decref(out);
	return json_result(json_pack("{s:o}", "sandboxes", arr));
}

/* pause, resume, kill: a POST (DELETE for kill) on the sandbox. */
static json_t *t_lifecycle(struct api *a, json_t *args, const char *sub)
{
	struct apath p;
	json_t *out = NULL;
	NEED_SBX(args, &p, sub);
	if (api_json(a, sub ? "POST" : "DELETE", &p, NULL, &out) < 0)
		return api_fail(a);
	if (!sub)
		return json_result(json_pack("{s:s, s:s}", "sandbox_id", arg_str(args, "sandbox_id"),
					     "state", "stopped"));
	json_t *r = json_result(sandbox_brief(out));
	json_decref(out);
	return r;
}

static json_t *t_pause(struct api *a, json_t *args)
{
	return t_lifecycle(a, args, "/pause");
}

static json_t *t_resume(struct api *a, json_t *args)
{
	return t_lifecycle(a, args, "/resume");
}

static json_t *t_kill(struct api *a, json_t *args)
{
	return t_lifecycle(a, args, NULL);
}

static json_t *t_command(struct api *a, json_t *args)
{
	struct apath p;
	json_t *out = NULL, *v;
	const char *cmd = arg_str(args, "command");
	NEED_SBX(args, &p, "/exec");
	if (!cmd)
		return fail("command is required (a string, run by /bin/sh -c)");
	json_t *body = json_pack("{s:s, s:s}", "cmd", cmd, "timeout", "2m");
	if ((v = json_object_get(args, "timeout")))
		json_object_set(body, "timeout", v);
	if ((v = json_object_get(args, "cwd")))
		json_object_set(body, "cwd", v);
	int rc = api_json(a, "POST", &p, body, &out);
	json_decref(body);
	if (rc < 0)
		return api_fail(a);
	json_t *r = json_pack("{s:O?, s:o, s:o, s:O?}", "exit_code", json_object_get(out, "exit_code"),
			      "stdout", tail(json_string_value(json_object_get(out, "stdout")), STDOUT_TAIL),
			      "stderr", tail(json_string_value(json_object_get(out, "stderr")), STDERR_TAIL),
			      "timed_out", json_object_get(out, "timed_out"));
	json_decref(out);
	return json_result(r);
}

/* run_code: the text of the execution, then each image result as MCP
 * image content. */
static json_t *t_code(struct api *a, json_t *args)
{
	struct apath p;
	json_t *out = NULL, *v, *res;
	const char *code = arg_str(args, "code");
	NEED_SBX(args, &p, "/code");
	if (!code)
		return fail("code is required (a string)");
	json_t *body = json_pack("{s:s}", "code", code);
	if ((v = json_object_get(args, "language")))
		json_object_set(body, "language", v);
	if ((v = json_object_get(args, "timeout")))
		json_object_set(body, "timeout", v);
	int rc = api_json(a, "POST", &p, body, &out);
	json_decref(body);
	if (rc < 0)
		return api_fail(a);
	json_t *text = json_pack("{s:o, s:o, s:O?}", "stdout",
				 tail(json_string_value(json_object_get(out, "stdout")), STDOUT_TAIL),
				 "stderr",
				 tail(json_string_value(json_object_get(out, "stderr")), STDERR_TAIL),
				 "error", json_object_get(out, "error"));
	json_t *images = json_array();
	size_t i;
	json_array_foreach(json_object_get(out, "results"), i, res) {
		if (json_is_true(json_object_get(res, "is_main_result")))
			json_object_set(text, "result", json_object_get(res, "text"));
		const char *png = json_string_value(json_object_get(res, "png"));
		if (png)
			json_array_append_new(images, json_pack("{s:s, s:s, s:s}", "type", "image", "data",
								png, "mimeType", "image/png"));
	}
	json_t *r = json_result(text);
	json_array_extend(json_object_get(r, "content"), images);
	json_decref(images);
	if (json_object_get(out, "error") && !json_is_null(json_object_get(out, "error")))
		json_object_set_new(r, "isError", json_true());
	json_decref(out);
	return r;
}

static int sink(void *arg, const char *p, size_t n)
{
	struct buf *b = arg;
	return buf_add(b, p, n) < 0 ? -EFBIG : 0;
}

static json_t *t_read(struct api *a, json_t *args)
{
	struct apath p;
	const char *path = arg_str(args, "path");
	struct buf b;
	NEED_SBX(args, &p, "/files");
	if (!path)
		return fail("path is required (an absolute path)");
	apath_query(&p, "path", path);
	buf_init(&b, FILE_MAX);
	int rc = api_download(a, &p, sink, &b);
	if (rc == -EFBIG) {
		buf_release(&b);
		return fail("'%s' is over %u bytes: read it in parts with run_command", path, FILE_MAX);
	}
	if (rc < 0) {
		buf_release(&b);
		return api_fail(a);
	}
	char *text = malloc(3 * b.len + 1);
	json_t *r = NULL;
	if (text) {
		size_t n = utf8_sanitize((const uint8_t *)(b.p ? b.p : ""), b.len, text);
		r = text_result("", 0);
		json_t *item = json_array_get(json_object_get(r, "content"), 0);
		json_object_set_new(item, "text", json_stringn(text, n)); /* NULs too */
	}
	free(text);
	buf_release(&b);
	return r ? r : fail("out of memory");
}

struct bytes {
	const char *p;
	size_t n;
};

static ssize_t from_bytes(void *arg, char *p, size_t max)
{
	struct bytes *b = arg;
	size_t n = b->n < max ? b->n : max;
	memcpy(p, b->p, n);
	b->p += n, b->n -= n;
	return (ssize_t)n;
}

static json_t *t_write(struct api *a, json_t *args)
{
	struct apath p;
	const char *path = arg_str(args, "path"), *content = arg_str(args, "content");
	json_t *out = NULL;
	NEED_SBX(args, &p, "/files");
	if (!path || !content)
		return fail("path and content are required (strings)");
	apath_query(&p, "path", path);
	struct bytes b = { content, json_string_length(json_object_get(args, "content")) };
	if (api_upload_from(a, "PUT", &p, from_bytes, &b, &out) < 0)
		return api_fail(a);
	return json_result(out);
}

static json_t *t_listfiles(struct api *a, json_t *args)
{
	struct apath p;
	const char *path = arg_str(args, "path");
	json_t *out = NULL;
	NEED_SBX(args, &p, "/files/list");
	apath_query(&p, "path", path ? path : "/work");
	if (api_json(a, "GET", &p, NULL, &out) < 0)
		return api_fail(a);
	return json_result(out);
}

static json_t *t_url(struct api *a, json_t *args)
{
	struct apath p;
	json_t *out = NULL, *port = json_object_get(args, "port");
	NEED_SBX(args, &p, NULL);
	if (!json_is_integer(port) || json_integer_value(port) < 1 ||
	    json_integer_value(port) > 65535)
		return fail("port is required (1 to 65535)");
	if (api_json(a, "GET", &p, NULL, &out) < 0)
		return api_fail(a);
	const char *tmpl = json_string_value(json_object_get(out, "port_url"));
	const char *tok = json_string_value(json_object_get(out, "traffic_token"));
	const char *at = tmpl ? strstr(tmpl, "{port}") : NULL;
	char url[2048];
	if (!at) {
		json_decref(out);
		return fail("this cpuosd serves no port URLs (--url-listen none)");
	}
	snprintf(url, sizeof(url), "%.*s%lld%s%s%s", (int)(at - tmpl), tmpl,
		 (long long)json_integer_value(port), at + 6,
		 tok && !json_is_true(json_object_get(out, "public")) ? "?cpuos_token=" : "",
		 tok && !json_is_true(json_object_get(out, "public")) ? tok : "");
	json_decref(out);
	return json_result(json_pack("{s:s}", "url", url));
}

/* ---- the tool table ---- */

#define SBX "\"sandbox_id\": {\"type\": \"string\", \"description\": \"the sandbox's id (sbx_...)\"}"

static const struct tool {
	const char *name, *description, *schema;
	json_t *(*fn)(struct api *a, json_t *args);
} tools[] = {
	{ "create_sandbox",
	  "Create a cpuos sandbox (a microVM of its own) and return its id. Templates: python "
	  "(CPython, numpy, pandas, matplotlib), base, node.",
	  "{\"type\": \"object\", \"properties\": {\"template\": {\"type\": \"string\", \"default\": "
	  "\"python\"}, \"timeout\": {\"type\": \"string\", \"description\": \"how long it lives: 30m, "
	  "2h\", \"default\": \"30m\"}, \"metadata\": {\"type\": \"object\"}}}",
	  t_create },
	{ "list_sandboxes", "List this account's sandboxes (newest first).",
	  "{\"type\": \"object\", \"properties\": {\"state\": {\"type\": \"string\", \"enum\": "
	  "[\"running\", \"paused\", \"stopped\"]}}}",
	  t_list },
	{ "pause_sandbox",
	  "Pause a sandbox: its memory, processes and disk are kept, it uses no CPU or RAM.",
	  "{\"type\": \"object\", \"properties\": {" SBX "}, \"required\": [\"sandbox_id\"]}", t_pause },
	{ "resume_sandbox", "Resume a paused sandbox as it was.",
	  "{\"type\": \"object\", \"properties\": {" SBX "}, \"required\": [\"sandbox_id\"]}", t_resume },
	{ "kill_sandbox", "Kill a sandbox: it and everything in it is gone.",
	  "{\"type\": \"object\", \"properties\": {" SBX "}, \"required\": [\"sandbox_id\"]}", t_kill },
	{ "run_command",
	  "Run a shell command (/bin/sh -c) in a sandbox. Returns exit_code, the last 4000 "
	  "characters of stdout and the last 2000 of stderr.",
	  "{\"type\": \"object\", \"properties\": {" SBX ", \"command\": {\"type\": \"string\"}, "
	  "\"timeout\": {\"type\": \"string\", \"default\": \"2m\"}, \"cwd\": {\"type\": "
	  "\"string\"}}, \"required\": [\"sandbox_id\", \"command\"]}",
	  t_command },
	{ "run_code",
	  "Run code in the sandbox's stateful interpreter (variables persist between calls). "
	  "Returns stdout, stderr, the last expression's value and any charts as images.",
	  "{\"type\": \"object\", \"properties\": {" SBX ", \"code\": {\"type\": \"string\"}, "
	  "\"language\": {\"type\": \"string\", \"enum\": [\"python\", \"bash\"], \"default\": "
	  "\"python\"}, \"timeout\": {\"type\": \"string\"}}, \"required\": [\"sandbox_id\", "
	  "\"code\"]}",
	  t_code },
	{ "read_file", "Read a text file of a sandbox (at most 1 MiB).",
	  "{\"type\": \"object\", \"properties\": {" SBX ", \"path\": {\"type\": \"string\"}}, "
	  "\"required\": [\"sandbox_id\", \"path\"]}",
	  t_read },
	{ "write_file", "Write a text file in a sandbox (its directories are made).",
	  "{\"type\": \"object\", \"properties\": {" SBX ", \"path\": {\"type\": \"string\"}, "
	  "\"content\": {\"type\": \"string\"}}, \"required\": [\"sandbox_id\", \"path\", "
	  "\"content\"]}",
	  t_write },
	{ "list_files", "List a directory of a sandbox.",
	  "{\"type\": \"object\", \"properties\": {" SBX ", \"path\": {\"type\": \"string\", "
	  "\"default\": \"/work\"}}, \"required\": [\"sandbox_id\"]}",
	  t_listfiles },
	{ "get_port_url",
	  "The URL of a TCP port a server in the sandbox listens on (on 0.0.0.0), with its "
	  "access token.",
	  "{\"type\": \"object\", \"properties\": {" SBX ", \"port\": {\"type\": \"integer\"}}, "
	  "\"required\": [\"sandbox_id\", \"port\"]}",
	  t_url },
};

static json_t *tools_list(void)
{
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < sizeof(tools) / sizeof(tools[0]); i++) {
		json_t *schema = json_loads(tools[i].schema, 0, NULL);
		json_array_append_new(arr, json_pack("{s:s, s:s, s:o}", "name", tools[i].name,
						     "description", tools[i].description,
						     "inputSchema", schema ? schema : json_object()));
	}
	return json_pack("{s:o}", "tools", arr);
}

static json_t *initialize(json_t *params)
{
	static const char *const known[] = { "2025-06-18", "2025-03-26", "2024-11-05" };
	const char *want = json_string_value(json_object_get(params, "protocolVersion"));
	const char *v = MCP_PROTOCOL;
	for (size_t i = 0; want && i < sizeof(known) / sizeof(known[0]); i++)
		if (!strcmp(want, known[i]))
			v = known[i];
	return json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s}, s:s}", "protocolVersion", v,
			 "capabilities", "tools", "listChanged", 0, "serverInfo", "name", "cpuos",
			 "version", VERSION, "instructions",
			 "cpuos runs code in sandboxes: create one, run commands or code in it, "
			 "read and write its files, pause it between tasks and kill it when done.");
}

json_t *mcp_handle(struct api *a, json_t *msg)
{
	if (!json_is_object(msg))
		return mcp_error(NULL, MCP_INVALID_REQUEST, "a message is one JSON-RPC object");
	json_t *id = json_object_get(msg, "id");
	const char *method = json_string_value(json_object_get(msg, "method"));
	const char *jv = json_string_value(json_object_get(msg, "jsonrpc"));
	if (id && !json_is_string(id) && !json_is_integer(id))
		return mcp_error(NULL, MCP_INVALID_REQUEST, "id is a string or an integer");
	if (!method) /* a client's answer to a request of ours: there are none */
		return id || !json_object_get(msg, "result") ? mcp_error(id, MCP_INVALID_REQUEST,
									   "no method")
							     : NULL;
	if (!jv || strcmp(jv, "2.0"))
		return mcp_error(id, MCP_INVALID_REQUEST, "jsonrpc must be \"2.0\"");
	if (!id) /* a notification: initialized, cancelled... nothing to answer */
		return NULL;
	json_t *params = json_object_get(msg, "params"), *result = NULL;
	if (params && !json_is_object(params))
		return mcp_error(id, MCP_INVALID_PARAMS, "params must be an object");
	if (!strcmp(method, "initialize")) {
		result = initialize(params);
	} else if (!strcmp(method, "ping")) {
		result = json_object();
	} else if (!strcmp(method, "tools/list")) {
		result = tools_list();
	} else if (!strcmp(method, "tools/call")) {
		const char *name = json_string_value(json_object_get(params, "name"));
		json_t *args = json_object_get(params, "arguments");
		if (args && !json_is_object(args))
			return mcp_error(id, MCP_INVALID_PARAMS, "arguments must be an object");
		json_t *none = args ? NULL : json_object();
		for (size_t i = 0; name && i < sizeof(tools) / sizeof(tools[0]); i++)
			if (!strcmp(name, tools[i].name))
				result = tools[i].fn(a, args ? args : none);
		json_decref(none);
		if (!result) {
			char m[200];
			snprintf(m, sizeof(m), "unknown tool '%.100s'", name ? name : "");
			return mcp_error(id, MCP_INVALID_PARAMS, m);
		}
	} else {
		char m[200];
		snprintf(m, sizeof(m), "unknown method '%.100s'", method);
		return mcp_error(id, MCP_METHOD_NOT_FOUND, m);
	}
	if (!result)
		return mcp_error(id, MCP_INTERNAL_ERROR, "out of memory");
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}
