/*
 * turn: see turn.h. A streamed turn grows in plain buffers (a model streams
 * code a few bytes at a time: appending to JSON strings would copy it over
 * and over) and becomes JSON once, in turn_finish.
 */
#include "gateway/turn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct turn_call {
	char id[128];
	char type[32];
	struct buf name, args;
};

void turn_init(struct turn *t)
{
	memset(t, 0, sizeof(*t));
	t->last_index = -1;
}

void turn_release(struct turn *t)
{
	json_decref(t->message);
	json_decref(t->usage);
	buf_release(&t->content);
	for (int i = 0; i < t->ncalls; i++) {
		buf_release(&t->calls[i].name);
		buf_release(&t->calls[i].args);
	}
	free(t->calls);
	turn_init(t);
}

static void set_why(char *why, size_t whylen, const char *msg)
{
	snprintf(why, whylen, "%s", msg);
}

/* Tool calls as the API has them: an array of at most TURN_MAX_CALLS
 * objects with a string id and a function with a string name and string
 * arguments. A call without an id gets one, so its result can name it. */
static int check_calls(json_t *calls, char *why, size_t whylen)
{
	if (!json_is_array(calls) || json_array_size(calls) > TURN_MAX_CALLS) {
		set_why(why, whylen, "tool_calls is not an array of at most 64 calls");
		return -EPROTO;
	}
	size_t i;
	json_t *c;
	json_array_foreach(calls, i, c) {
		json_t *fn = json_object_get(c, "function");
		if (!json_is_object(c) || !json_is_string(json_object_get(fn, "name")) ||
		    !json_is_string(json_object_get(fn, "arguments"))) {
			set_why(why, whylen, "a tool call without a function name and arguments");
			return -EPROTO;
		}
		json_t *id = json_object_get(c, "id");
		if (id && !json_is_string(id)) {
			set_why(why, whylen, "a tool call's id is not a string");
			return -EPROTO;
		}
		if (!id || !json_string_length(id)) {
			char gen[32];
			snprintf(gen, sizeof(gen), "call_%zu", i);
			if (json_object_set_new(c, "id", json_string(gen)))
				return -ENOMEM;
		}
		if (!json_object_get(c, "type") &&
		    json_object_set_new(c, "type", json_string("function")))
			return -ENOMEM;
	}
	return 0;
}

int turn_from_completion(struct turn *t, json_t *answer, char *why, size_t whylen)
{
	json_t *choice = json_array_get(json_object_get(answer, "choices"), 0);
	json_t *msg = json_object_get(choice, "message");
	if (!json_is_object(msg)) {
		set_why(why, whylen, "the answer has no choices[0].message");
		return -EPROTO;
	}
	json_t *content = json_object_get(msg, "content");
	if (content && !json_is_string(content) && !json_is_null(content)) {
		set_why(why, whylen, "the message's content is not a string");
		return -EPROTO;
	}
	/* A copy: the answer's other parts are not the message's to keep. */
	json_t *m = json_deep_copy(msg);
	if (!m)
		return -ENOMEM;
	json_t *calls = json_object_get(m, "tool_calls");
	if (calls && json_is_null(calls)) {
		json_object_del(m, "tool_calls");
	} else if (calls && check_calls(calls, why, whylen) < 0) {
		json_decref(m);
		return -EPROTO;
	} else if (calls && json_array_size(calls) == 0) {
		json_object_del(m, "tool_calls");
	}
	if (json_object_set_new(m, "role", json_string("assistant"))) {
		json_decref(m);
		return -ENOMEM;
	}
	t->message = m;
	const char *fr = json_string_value(json_object_get(choice, "finish_reason"));
	snprintf(t->finish_reason, sizeof(t->finish_reason), "%s", fr ? fr : "");
	json_t *usage = json_object_get(answer, "usage");
	if (json_is_object(usage))
		t->usage = json_incref(usage);
	return 0;
}

/* The accumulator of the tool call at index i, made if new. */
static struct turn_call *call_at(struct turn *t, int i)
{
	if (i >= t->ncalls) {
		struct turn_call *nc = realloc(t->calls, (size_t)(i + 1) * sizeof(*nc));
		if (!nc)
			return NULL;
		memset(nc + t->ncalls, 0, (size_t)(i + 1 - t->ncalls) * sizeof(*nc));
		t->calls = nc;
		t->ncalls = i + 1;
	}
	return &t->calls[i];
}

/* One element of a delta's tool_calls. A delta without an index goes on
 * the call before it, unless it brings a new id (servers that omit
 * indexes send one call per id). */
static int add_call_delta(struct turn *t, json_t *d, char *why, size_t whylen)
{
	json_t *idx = json_object_get(d, "index");
	const char *id = json_string_value(json_object_get(d, "id"));
	int i;
	if (json_is_integer(idx)) {
		json_int_t v = json_integer_value(idx);
		i = v >= 0 && v < TURN_MAX_CALLS ? (int)v : -1;
	} else if (idx) {
		i = -1;
	} else {
		i = t->last_index < 0 ? 0 : t->last_index;
		if (id && *id && i < t->ncalls && t->calls[i].id[0] && strcmp(t->calls[i].id, id))
			i++;
	}
	if (i < 0 || i >= TURN_MAX_CALLS || !json_is_object(d)) {
		set_why(why, whylen, "a tool call delta out of range (at most 64 calls)");
		return -EPROTO;
	}
	struct turn_call *c = call_at(t, i);
	if (!c)
		return -ENOMEM;
	t->last_index = i;
	if (id && *id)
		snprintf(c->id, sizeof(c->id), "%s", id);
	const char *type = json_string_value(json_object_get(d, "type"));
	if (type)
		snprintf(c->type, sizeof(c->type), "%s", type);
	json_t *fn = json_object_get(d, "function");
	json_t *name = json_object_get(fn, "name");
	json_t *args = json_object_get(fn, "arguments");
	if ((name && !json_is_string(name) && !json_is_null(name)) ||
	    (args && !json_is_string(args) && !json_is_null(args))) {
		set_why(why, whylen, "a tool call delta's name or arguments is not a string");
		return -EPROTO;
	}
	if (json_is_string(name) &&
	    buf_add(&c->name, json_string_value(name), json_string_length(name)))
		return -ENOMEM;
	if (json_is_string(args) &&
	    buf_add(&c->args, json_string_value(args), json_string_length(args)))
		return -ENOMEM;
	return 0;
}

int turn_add_chunk(struct turn *t, json_t *chunk, const char **text, size_t *text_len, char *why,
		   size_t whylen)
{
	*text = "";
	*text_len = 0;
	json_t *choices = json_object_get(chunk, "choices");
	if (!json_is_object(chunk) || (choices && !json_is_array(choices))) {
		set_why(why, whylen, "a stream chunk that is not a chat.completion.chunk");
		return -EPROTO;
	}
	json_t *usage = json_object_get(chunk, "usage");
	if (json_is_object(usage)) {
		json_decref(t->usage);
		t->usage = json_incref(usage);
	}
	json_t *choice = json_array_get(choices, 0);
	if (!choice)
		return 0;
	json_t *delta = json_object_get(choice, "delta");
	const char *fr = json_string_value(json_object_get(choice, "finish_reason"));
	if (fr)
		snprintf(t->finish_reason, sizeof(t->finish_reason), "%s", fr);
	if (!json_is_object(delta))
		return 0;
	json_t *content = json_object_get(delta, "content");
	if (json_is_string(content) && json_string_length(content)) {
		size_t at = t->content.len;
		if (buf_add(&t->content, json_string_value(content), json_string_length(content)))
			return -ENOMEM;
		*text = t->content.p + at;
		*text_len = t->content.len - at;
	}
	json_t *calls = json_object_get(delta, "tool_calls");
	if (calls && !json_is_null(calls)) {
		if (!json_is_array(calls)) {
			set_why(why, whylen, "a delta's tool_calls is not an array");
			return -EPROTO;
		}
		size_t i;
		json_t *d;
		json_array_foreach(calls, i, d) {
			int r = add_call_delta(t, d, why, whylen);
			if (r)
				return r;
		}
	}
	return 0;
}

int turn_finish(struct turn *t)
{
	json_t *m = json_object();
	json_t *calls = json_array();
	if (!m || !calls)
		goto nomem;
	if (json_object_set_new(m, "role", json_string("assistant")) ||
	    json_object_set_new(m, "content",
				t->content.p ? json_stringn(t->content.p, t->content.len)
					     : json_null()))
		goto nomem;
	for (int i = 0; i < t->ncalls; i++) {
		struct turn_call *c = &t->calls[i];
		char gen[32];
		snprintf(gen, sizeof(gen), "call_%d", i);
		json_t *call = json_pack("{s:s, s:s, s:{s:s%, s:s%}}", "id", c->id[0] ? c->id : gen,
					 "type", c->type[0] ? c->type : "function", "function",
					 "name", c->name.p ? c->name.p : "", c->name.len, "arguments",
					 c->args.p ? c->args.p : "", c->args.len);
		if (!call || json_array_append_new(calls, call))
			goto nomem;
	}
	if (json_array_size(calls) && json_object_set(m, "tool_calls", calls))
		goto nomem;
	json_decref(calls);
	json_decref(t->message);
	t->message = m;
	return 0;
nomem:
	json_decref(m);
	json_decref(calls);
	return -ENOMEM;
}

json_t *turn_tool_calls(const struct turn *t)
{
	json_t *calls = json_object_get(t->message, "tool_calls");
	return json_array_size(calls) ? calls : NULL;
}

void turn_usage_add(json_t **sum, json_t *usage)
{
	static const char *const fields[] = { "prompt_tokens", "completion_tokens", "total_tokens" };
	if (!json_is_object(usage))
		return;
	if (!*sum && !(*sum = json_object()))
		return;
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		json_t *v = json_object_get(usage, fields[i]);
		if (!json_is_integer(v))
			continue;
		json_int_t have = json_integer_value(json_object_get(*sum, fields[i]));
		json_int_t add = json_integer_value(v);
		if (add < 0 || add > ((json_int_t)1 << 40)) /* hostile counts stay sane */
			continue;
		json_object_set_new(*sum, fields[i], json_integer(have + add));
	}
}
