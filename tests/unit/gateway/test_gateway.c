/* Unit tests for the gateway's pure parts: the event-stream parser, turns
 * assembled from chunks, and what the model is told of a run. */
#include "gateway/sse.h"
#include "gateway/tool.h"
#include "gateway/turn.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- sse ---- */

struct events {
	char got[8][256];
	int n;
};

static int collect(void *arg, const char *data, size_t n)
{
	struct events *e = arg;
	if (e->n < 8)
		snprintf(e->got[e->n], sizeof(e->got[0]), "%.*s", (int)n, data);
	e->n++;
	return 0;
}

/* Feeds text in pieces of step bytes: the events must not depend on where
 * the network cut the stream. */
static int feed(const char *text, size_t step, size_t max, struct events *e)
{
	struct sse p;
	sse_init(&p, max);
	memset(e, 0, sizeof(*e));
	int r = 0;
	for (size_t at = 0, n = strlen(text); at < n && !r; at += step)
		r = sse_feed(&p, text + at, at + step > n ? n - at : step, collect, e);
	if (!r)
		r = sse_end(&p);
	sse_release(&p);
	return r;
}

static void test_sse_events(void)
{
	const char *text = ": keep-alive\n\ndata: {\"a\":1}\n\ndata:{\"b\":2}\r\n\r\n"
			   "event: x\nid: 7\ndata: one\ndata: two\n\ndata: [DONE]\n\n";
	for (size_t step = 1; step <= strlen(text); step++) {
		struct events e;
		int r = feed(text, step, 1024, &e);
		if (!CHECK(r == 0) || !CHECK(e.n == 4)) {
			t_note("step %zu: r %d, %d events", step, r, e.n);
			continue;
		}
		CHECK(!strcmp(e.got[0], "{\"a\":1}"));
		CHECK(!strcmp(e.got[1], "{\"b\":2}"));
		CHECK(!strcmp(e.got[2], "one\ntwo"));
		CHECK(!strcmp(e.got[3], "[DONE]"));
	}
}

static void test_sse_edges(void)
{
	struct events e;
	/* a lone CR ends a line too; a blank line without data is nothing */
	CHECK(feed("data: a\r\rdata: b\n\n\n\n", 3, 64, &e) == 0 && e.n == 2);
	CHECK(!strcmp(e.got[0], "a") && !strcmp(e.got[1], "b"));
	/* "data" without a colon is an empty value, still an event */
	CHECK(feed("data\n\n", 1, 64, &e) == 0 && e.n == 1 && !strcmp(e.got[0], ""));
	/* cut before the blank line: dropped, and said so */
	CHECK(feed("data: cut", 4, 64, &e) == 1 && e.n == 0);
	CHECK(feed("data: x\n\ndata: half\n", 2, 64, &e) == 1 && e.n == 1);
	/* a line or an event's data past the cap */
	char big[200];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	CHECK(feed(big, 7, 64, &e) == -EMSGSIZE);
	CHECK(feed("data: 0123456789\ndata: 0123456789\ndata: 0123456789\n\n", 5, 30, &e) ==
	      -EMSGSIZE);
}

static int stop_at_second(void *arg, const char *data, size_t n)
{
	(void)data, (void)n;
	return ++*(int *)arg == 2 ? 42 : 0;
}

static void test_sse_stop(void)
{
	struct sse p;
	int seen = 0;
	sse_init(&p, 64);
	CHECK(sse_feed(&p, "data: 1\n\ndata: 2\n\ndata: 3\n\n", 27, stop_at_second, &seen) == 42);
	CHECK(seen == 2);
	sse_release(&p);
}

/* ---- turn ---- */

static json_t *js(const char *text)
{
	json_error_t je;
	json_t *j = json_loads(text, 0, &je);
	if (!CHECK(j))
		t_note("bad test JSON: %s: %s", text, je.text);
	return j;
}

/* Adds a chunk given as JSON text; the text it adds goes into out. A
 * refusal without a reason is -1000. */
static int add(struct turn *t, const char *chunk, char *out, size_t outlen)
{
	json_t *c = js(chunk);
	const char *text;
	size_t n;
	char why[200] = "";
	int r = c ? turn_add_chunk(t, c, &text, &n, why, sizeof(why)) : -1;
	json_decref(c);
	if (r == 0 && out)
		snprintf(out, outlen, "%.*s", (int)n, text);
	if (r && !why[0]) /* a refusal always says why */
		r = -1000;
	return r;
}

static void test_turn_stream_text(void)
{
	struct turn t;
	char got[64];
	turn_init(&t);
	CHECK(add(&t, "{\"id\":\"c1\",\"model\":\"m\",\"created\":5,\"choices\":[{\"index\":0,"
		      "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}",
		  got, sizeof(got)) == 0 && !strcmp(got, ""));
	CHECK(add(&t, "{\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}", got, sizeof(got)) == 0 &&
	      !strcmp(got, "Hel"));
	CHECK(add(&t, "{\"choices\":[{\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}",
		  got, sizeof(got)) == 0 && !strcmp(got, "lo"));
	CHECK(add(&t, "{\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,"
		      "\"total_tokens\":5}}", NULL, 0) == 0);
	CHECK(turn_finish(&t) == 0);
	CHECK(!strcmp(json_string_value(json_object_get(t.message, "content")), "Hello"));
	CHECK(!turn_tool_calls(&t));
	CHECK(!strcmp(t.finish_reason, "stop"));
	CHECK(json_integer_value(json_object_get(t.usage, "total_tokens")) == 5);
	turn_release(&t);
}

static void test_turn_stream_calls(void)
{
	struct turn t;
	turn_init(&t);
	/* two calls, arguments in pieces, interleaved by index */
	CHECK(add(&t, "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\","
		      "\"type\":\"function\",\"function\":{\"name\":\"run_python\",\"arguments\":\"\"}}]}}]}",
		  NULL, 0) == 0);
	CHECK(add(&t, "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"b\","
		      "\"function\":{\"name\":\"other\",\"arguments\":\"{}\"}}]}}]}", NULL, 0) == 0);
	CHECK(add(&t, "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
		      "{\"arguments\":\"{\\\"code\\\": \"}}]}}]}", NULL, 0) == 0);
	CHECK(add(&t, "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
		      "{\"arguments\":\"\\\"print(1)\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}",
		  NULL, 0) == 0);
	CHECK(turn_finish(&t) == 0);
	json_t *calls = turn_tool_calls(&t);
	if (CHECK(json_array_size(calls) == 2)) {
		json_t *a = json_array_get(calls, 0), *b = json_array_get(calls, 1);
		CHECK(!strcmp(json_string_value(json_object_get(a, "id")), "a"));
		CHECK(!strcmp(json_string_value(json_object_get(json_object_get(a, "function"),
								 "arguments")), "{\"code\": \"print(1)\"}"));
		CHECK(tool_is_ours(a, "run_python") && !tool_is_ours(b, "run_python"));
		CHECK(!strcmp(json_string_value(json_object_get(b, "type")), "function"));
	}
	CHECK(json_is_null(json_object_get(t.message, "content")));
	turn_release(&t);

	/* a server without indexes: a new id is the next call */
	turn_init(&t);
	CHECK(add(&t, "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"x\",\"function\":"
		      "{\"name\":\"f\",\"arguments\":\"1\"}}]}}]}", NULL, 0) == 0);
	CHECK(add(&t, "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\"2\"}}]}}]}",
		  NULL, 0) == 0);
	CHECK(add(&t, "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"y\",\"function\":"
		      "{\"name\":\"g\",\"arguments\":\"3\"}}]}}]}", NULL, 0) == 0);
	CHECK(turn_finish(&t) == 0);
	calls = turn_tool_calls(&t);
	CHECK(json_array_size(calls) == 2);
	CHECK(!strcmp(json_string_value(json_object_get(
			      json_object_get(json_array_get(calls, 0), "function"), "arguments")),
		      "12"));
	turn_release(&t);
}

static void test_turn_hostile(void)
{
	struct turn t;
	turn_init(&t);
	CHECK(add(&t, "[1]", NULL, 0) == -EPROTO);
	CHECK(add(&t, "{\"choices\":{}}", NULL, 0) == -EPROTO);
	CHECK(add(&t, "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":64}]}}]}", NULL, 0) ==
	      -EPROTO);
	CHECK(add(&t, "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":-1}]}}]}", NULL, 0) ==
	      -EPROTO);
	CHECK(add(&t, "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
		      "{\"arguments\":7}}]}}]}", NULL, 0) == -EPROTO);
	CHECK(add(&t, "{\"choices\":[{\"delta\":{\"tool_calls\":\"x\"}}]}", NULL, 0) == -EPROTO);
	/* odd but harmless: ignored */
	CHECK(add(&t, "{\"choices\":[{\"delta\":7}]}", NULL, 0) == 0);
	CHECK(add(&t, "{\"choices\":[{\"delta\":{\"content\":7}}]}", NULL, 0) == 0);
	turn_release(&t);

	const char *bad[] = {
		"{}", "{\"choices\":[]}", "{\"choices\":[{\"message\":\"x\"}]}",
		"{\"choices\":[{\"message\":{\"content\":5}}]}",
		"{\"choices\":[{\"message\":{\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]}}]}",
		"{\"choices\":[{\"message\":{\"tool_calls\":{}}}]}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *a = js(bad[i]);
		char why[200] = "";
		turn_init(&t);
		if (!CHECK(turn_from_completion(&t, a, why, sizeof(why)) == -EPROTO) ||
		    !CHECK(why[0]))
			t_note("accepted: %s", bad[i]);
		turn_release(&t);
		json_decref(a);
	}
}

static void test_turn_completion(void)
{
	json_t *a = js("{\"id\":\"x\",\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":"
		       "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":"
		       "\"function\",\"function\":{\"name\":\"run_python\",\"arguments\":\"{}\"}}]},"
		       "\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":1,"
		       "\"completion_tokens\":2,\"total_tokens\":3}}");
	struct turn t;
	char why[200];
	turn_init(&t);
	CHECK(turn_from_completion(&t, a, why, sizeof(why)) == 0);
	json_t *calls = turn_tool_calls(&t);
	CHECK(json_array_size(calls) == 1);
	/* a call without an id gets one, so its result can name it */
	CHECK(!strcmp(json_string_value(json_object_get(json_array_get(calls, 0), "id")), "call_0"));
	json_t *sum = NULL;
	turn_usage_add(&sum, t.usage);
	turn_usage_add(&sum, t.usage);
	turn_usage_add(&sum, NULL);
	CHECK(json_integer_value(json_object_get(sum, "total_tokens")) == 6);
	CHECK(json_integer_value(json_object_get(sum, "prompt_tokens")) == 2);
	json_decref(sum);
	turn_release(&t);
	json_decref(a);
}

/* ---- tool ---- */

static void test_tool_list(void)
{
	char why[200];
	json_t *t = tool_list(NULL, "run_python", why, sizeof(why));
	CHECK(json_array_size(t) == 1 && tool_is_ours(json_array_get(t, 0), "run_python"));
	json_decref(t);
	/* the caller's own run_python is kept as theirs, not doubled */
	json_t *mine = js("[{\"type\":\"function\",\"function\":{\"name\":\"run_python\","
			  "\"description\":\"mine\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]");
	t = tool_list(mine, "run_python", why, sizeof(why));
	CHECK(json_array_size(t) == 2);
	CHECK(!strcmp(json_string_value(json_object_get(
			      json_object_get(json_array_get(t, 0), "function"), "description")),
		      "mine"));
	json_decref(t);
	t = tool_list(mine, "py", why, sizeof(why));
	CHECK(json_array_size(t) == 3);
	json_decref(t);
	json_decref(mine);
	json_t *bad = js("[1]");
	CHECK(!tool_list(bad, "run_python", why, sizeof(why)) && strstr(why, "tools[0]"));
	json_decref(bad);
	bad = js("{}");
	CHECK(!tool_list(bad, "run_python", why, sizeof(why)));
	json_decref(bad);
}

static void test_tool_code(void)
{
	const char *bad[] = { "not json", "[]", "{}", "{\"code\": 5}", "{\"code\": \"a\\u0000b\"}" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *call = json_pack("{s:{s:s, s:s}}", "function", "name", "run_python",
					 "arguments", bad[i]);
		json_t *args;
		const char *code;
		char why[200] = "";
		CHECK(tool_code(call, &args, &code, why, sizeof(why)) == -EINVAL && why[0] && !args);
		json_decref(call);
	}
	json_t *call = json_pack("{s:{s:s, s:s}}", "function", "name", "run_python", "arguments",
				 "{\"code\": \"print(1)\"}");
	json_t *args;
	const char *code;
	char why[200];
	CHECK(tool_code(call, &args, &code, why, sizeof(why)) == 0 && !strcmp(code, "print(1)"));
	json_decref(args);
	json_decref(call);
}

static void test_tool_tail(void)
{
	CHECK(tool_tail("abcdef", 6, 3) == 3);
	CHECK(tool_tail("abc", 3, 10) == 0);
	CHECK(tool_tail("abc", 3, 0) == 3);
	/* "é" is two bytes, "€" three: the tail counts characters */
	const char *s = "a\xc3\xa9\xe2\x82\xac";
	CHECK(tool_tail(s, strlen(s), 1) == 3);
	CHECK(tool_tail(s, strlen(s), 2) == 1);
	/* cut mid-character by the stream: never start inside one */
	CHECK(tool_tail(s + 2, strlen(s) - 2, 5) == 1);
}

static void test_tool_output(void)
{
	/* stdout of 5000 'o', stderr 3000 'e', an error, a figure, a main
	 * result and a bad image */
	char *out = malloc(5001), *err = malloc(3001);
	memset(out, 'o', 5000), out[5000] = '\0';
	memset(err, 'e', 3000), err[3000] = '\0';
	json_t *exec = json_pack(
		"{s:s, s:s, s:{s:s, s:s, s:s}, s:[{s:b, s:s, s:s}, {s:b, s:s}, {s:b, s:s, s:s}],"
		" s:b}",
		"stdout", out, "stderr", err, "error", "name", "ValueError", "value", "bad",
		"traceback", "Traceback...", "results", "is_main_result", 0, "text",
		"<Figure size 640x480 with 1 Axes>", "png", "iVBORw0KGgo=", "is_main_result", 1,
		"text", "42", "is_main_result", 0, "text", "evil", "png", "not base64!",
		"timed_out", 0);
	struct tool_arts arts = { .list = json_array() };
	char *text = tool_output(exec, "call_1", &arts);
	json_t *o = text ? js(text) : NULL;
	CHECK(o);
	CHECK(json_integer_value(json_object_get(o, "exit_code")) == 1);
	CHECK(json_string_length(json_object_get(o, "stdout")) == TOOL_STDOUT_TAIL);
	CHECK(json_string_length(json_object_get(o, "stderr")) == TOOL_STDERR_TAIL);
	CHECK(!strcmp(json_string_value(json_object_get(json_object_get(o, "error"), "name")),
		      "ValueError"));
	json_t *lines = json_object_get(o, "results");
	CHECK(json_array_size(lines) == 3);
	CHECK(!strcmp(json_string_value(json_array_get(lines, 0)),
		      "figure-1.png: <Figure size 640x480 with 1 Axes>"));
	CHECK(!strcmp(json_string_value(json_array_get(lines, 1)), "42"));
	/* seed 003's keys first, in its order; no base64 for the model */
	if (!CHECK(!strncmp(text, "{\"exit_code\":1,\"stdout\":\"ooo", 28)))
		t_note("%.60s", text);
	CHECK(!strstr(text, "iVBORw0KGgo"));
	/* the good image is an artifact, the bad one is not */
	CHECK(json_array_size(arts.list) == 1 && arts.left_out == 1 && arts.figures == 2);
	json_t *a = json_array_get(arts.list, 0);
	CHECK(!strcmp(json_string_value(json_object_get(a, "url")),
		      "data:image/png;base64,iVBORw0KGgo="));
	CHECK(!strcmp(json_string_value(json_object_get(a, "name")), "figure-1.png"));
	CHECK(!strcmp(json_string_value(json_object_get(a, "tool_call_id")), "call_1"));
	free(text);
	json_decref(o);
	json_decref(exec);

	/* a clean run: exit 0, no error */
	exec = js("{\"stdout\":\"hi\\n\",\"stderr\":\"\",\"error\":null,\"results\":[]}");
	text = tool_output(exec, "c", &arts);
	CHECK(text && !strcmp(text, "{\"exit_code\":0,\"stdout\":\"hi\\n\",\"stderr\":\"\","
				    "\"error\":null,\"results\":[]}"));
	free(text);
	json_decref(exec);
	json_decref(arts.list);
	free(out);
	free(err);

	text = tool_error_output("InvalidArguments", "no \"code\"");
	o = text ? js(text) : NULL;
	CHECK(o && json_is_null(json_object_get(o, "exit_code")));
	CHECK(o && !strcmp(json_string_value(json_object_get(json_object_get(o, "error"), "value")),
			   "no \"code\""));
	json_decref(o);
	free(text);
}

static void test_tool_caps(void)
{
	/* figures past the count cap are counted, not kept */
	json_t *results = json_array();
	for (int i = 0; i < TOOL_MAX_ARTIFACTS + 5; i++)
		json_array_append_new(results, json_pack("{s:s, s:s}", "text", "f", "png", "AAAA"));
	json_t *exec = json_pack("{s:o}", "results", results);
	struct tool_arts arts = { .list = json_array() };
	char *text = tool_output(exec, "c", &arts);
	json_t *o = text ? js(text) : NULL;
	CHECK(json_array_size(arts.list) == TOOL_MAX_ARTIFACTS && arts.left_out == 5);
	/* and the model gets at most TOOL_MAX_RESULTS lines and a count */
	json_t *lines = json_object_get(o, "results");
	CHECK(json_array_size(lines) == TOOL_MAX_RESULTS + 1);
	CHECK(strstr(json_string_value(json_array_get(lines, TOOL_MAX_RESULTS)), "more results"));
	json_decref(o);
	free(text);
	json_decref(exec);
	json_decref(arts.list);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "sse_events", test_sse_events },
		{ "sse_edges", test_sse_edges },
		{ "sse_stop", test_sse_stop },
		{ "turn_stream_text", test_turn_stream_text },
		{ "turn_stream_calls", test_turn_stream_calls },
		{ "turn_hostile", test_turn_hostile },
		{ "turn_completion", test_turn_completion },
		{ "tool_list", test_tool_list },
		{ "tool_code", test_tool_code },
		{ "tool_tail", test_tool_tail },
		{ "tool_output", test_tool_output },
		{ "tool_caps", test_tool_caps },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
