/* tool: see tool.h. Key order in what the model reads follows seed 003's. */
#include "gateway/tool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char description[] =
	"Run Python 3 code in an isolated sandbox, as a notebook cell: variables, imports and "
	"files persist between calls. Files are in /work. Returns exit_code, stdout, stderr, "
	"the error if the code raised, and a line per result (figures are shown to the user).";

static json_t *definition(const char *name)
{
	return json_pack("{s:s, s:{s:s, s:s, s:{s:s, s:{s:{s:s}}, s:[s]}}}", "type", "function",
			 "function", "name", name, "description", description, "parameters",
			 "type", "object", "properties", "code", "type", "string", "required",
			 "code");
}

json_t *tool_list(json_t *callers, const char *name, char *why, size_t whylen)
{
	int theirs = 0;
	if (callers && !json_is_null(callers)) {
		if (!json_is_array(callers) || json_array_size(callers) > TOOL_MAX_TOOLS) {
			snprintf(why, whylen, "'tools' must be an array of at most %d tools",
				 TOOL_MAX_TOOLS);
			return NULL;
		}
		size_t i;
		json_t *t;
		json_array_foreach(callers, i, t) {
			if (!json_is_object(t)) {
				snprintf(why, whylen, "'tools[%zu]' is not an object", i);
				return NULL;
			}
			const char *n = json_string_value(
				json_object_get(json_object_get(t, "function"), "name"));
			if (n && !strcmp(n, name))
				theirs = 1;
		}
	}
	json_t *out = callers && json_is_array(callers) ? json_copy(callers) : json_array();
	if (!out || (!theirs && json_array_append_new(out, definition(name)))) {
		json_decref(out);
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	return out;
}

int tool_is_ours(json_t *call, const char *name)
{
	const char *n = json_string_value(json_object_get(json_object_get(call, "function"), "name"));
	return n && !strcmp(n, name);
}

int tool_code(json_t *call, json_t **args, const char **code, char *why, size_t whylen)
{
	const char *text =
		json_string_value(json_object_get(json_object_get(call, "function"), "arguments"));
	json_error_t je;
	*args = NULL;
	*code = NULL;
	json_t *a = text ? json_loads(text, 0, &je) : NULL;
	if (!a) {
		snprintf(why, whylen, "the arguments are not JSON: %s", text ? je.text : "none");
		return -EINVAL;
	}
	json_t *c = json_object_get(a, "code");
	if (!json_is_string(c) || strlen(json_string_value(c)) != json_string_length(c)) {
		json_decref(a);
		snprintf(why, whylen, "the arguments need \"code\": a string of Python without NUL");
		return -EINVAL;
	}
	*args = a;
	*code = json_string_value(c);
	return 0;
}

size_t tool_tail(const char *s, size_t n, size_t chars)
{
	size_t i = n;
	while (i > 0 && chars > 0) {
		i--;
		/* a continuation byte (10xxxxxx) belongs to the character before */
		if (((unsigned char)s[i] & 0xc0) != 0x80)
			chars--;
	}
	while (i < n && ((unsigned char)s[i] & 0xc0) == 0x80) /* never start mid-character */
		i++;
	return i;
}

/* The tail of the string member key of o, as a new JSON string ("" when
 * absent). */
static json_t *tail_of(json_t *o, const char *key, size_t chars)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_string(v))
		return json_string("");
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	size_t at = tool_tail(s, n, chars);
	return json_stringn(s + at, n - at);
}

/* Base64 as cpuosd sends images: its alphabet and padding only. */
static int b64_ok(const char *s, size_t n)
{
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '+' || c == '/' || c == '='))
			return 0;
	}
	return 1;
}

/* Keeps a figure's image as an artifact when it is sound and within the
 * caps. name: "figure-N.png". */
static void keep_figure(struct tool_arts *arts, const char *call_id, const char *name,
			const char *mime, json_t *b64)
{
	const char *s = json_string_value(b64);
	size_t n = json_string_length(b64);
	size_t head = strlen("data:;base64,") + strlen(mime);
	if (!b64_ok(s, n) || !arts->list || json_array_size(arts->list) >= TOOL_MAX_ARTIFACTS ||
	    arts->bytes + head + n > TOOL_MAX_ARTIFACT_BYTES) {
		arts->left_out++;
		return;
	}
	char *url = malloc(head + n + 1);
	if (!url) {
		arts->left_out++;
		return;
	}
	int h = snprintf(url, head + 1, "data:%s;base64,", mime);
	memcpy(url + h, s, n);
	json_t *a = json_pack("{s:s, s:s, s:s%, s:s}", "name", name, "mime_type", mime, "url", url,
			      head + n, "tool_call_id", call_id ? call_id : "");
	free(url);
	if (!a || json_array_append_new(arts->list, a)) {
		arts->left_out++;
		return;
	}
	arts->bytes += head + n;
}

/* One result's line for the model: a figure's name and caption, or the
 * tail of its text. NULL when it has nothing to say in text. */
static json_t *result_line(json_t *res, const char *call_id, struct tool_arts *arts)
{
	static const struct {
		const char *key, *ext, *mime;
	} images[] = { { "png", "png", "image/png" }, { "jpeg", "jpg", "image/jpeg" } };
	json_t *text = tail_of(res, "text", TOOL_RESULT_TAIL);
	if (!text)
		return NULL;
	for (size_t i = 0; i < sizeof(images) / sizeof(images[0]); i++) {
		json_t *img = json_object_get(res, images[i].key);
		if (!json_is_string(img))
			continue;
		char name[48];
		snprintf(name, sizeof(name), "figure-%d.%s", ++arts->figures, images[i].ext);
		keep_figure(arts, call_id, name, images[i].mime, img);
		json_t *line = json_sprintf("%s: %s", name, json_string_value(text));
		json_decref(text);
		return line;
	}
	if (!json_string_length(text)) {
		json_decref(text);
		return NULL;
	}
	return text;
}

static char *dump(json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII) : NULL;
	json_decref(o);
	return s;
}

char *tool_output(json_t *exec, const char *call_id, struct tool_arts *arts)
{
	json_t *err = json_object_get(exec, "error");
	int failed = json_is_object(err) || json_is_true(json_object_get(exec, "timed_out"));
	json_t *out = json_object();
	json_t *lines = json_array();
	if (!out || !lines)
		goto nomem;
	if (json_object_set_new(out, "exit_code", json_integer(failed)) ||
	    json_object_set_new(out, "stdout", tail_of(exec, "stdout", TOOL_STDOUT_TAIL)) ||
	    json_object_set_new(out, "stderr", tail_of(exec, "stderr", TOOL_STDERR_TAIL)))
		goto nomem;
	json_t *e = json_null();
	if (json_is_object(err)) {
		const char *name = json_string_value(json_object_get(err, "name"));
		const char *value = json_string_value(json_object_get(err, "value"));
		e = json_pack("{s:s, s:s, s:o}", "name", name ? name : "Error", "value",
			      value ? value : "", "traceback",
			      tail_of(err, "traceback", TOOL_TRACE_TAIL));
	}
	if (json_object_set_new(out, "error", e))
		goto nomem;
	json_t *results = json_object_get(exec, "results");
	size_t i, skipped = 0;
	json_t *res;
	json_array_foreach(results, i, res) {
		if (!json_is_object(res))
			continue;
		json_t *line = result_line(res, call_id, arts);
		if (!line)
			continue;
		if (json_array_size(lines) >= TOOL_MAX_RESULTS) {
			json_decref(line);
			skipped++;
			continue;
		}
		if (json_array_append_new(lines, line))
			goto nomem;
	}
	if (skipped && json_array_append_new(lines, json_sprintf("(%zu more results)", skipped)))
		goto nomem;
	if (json_object_set(out, "results", lines))
		goto nomem;
	json_decref(lines);
	if (json_is_true(json_object_get(exec, "timed_out")) &&
	    json_object_set_new(out, "timed_out", json_true()))
		goto nomem_out;
	return dump(out);
nomem:
	json_decref(lines);
nomem_out:
	json_decref(out);
	return NULL;
}

char *tool_error_output(const char *name, const char *value)
{
	return dump(json_pack("{s:n, s:s, s:s, s:{s:s, s:s}, s:[]}", "exit_code", "stdout", "",
			      "stderr", "", "error", "name", name, "value", value, "results"));
}
