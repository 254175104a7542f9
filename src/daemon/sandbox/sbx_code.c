/*
 * sbx_code: what a code call (P_CODE) gathers besides stdout and stderr. The kernel's events
 * come as JSON lines in P_EVENT frames; each complete line is parsed and rebuilt from the keys
 * docs/api.md names (nothing else of the guest's JSON goes on), then kept for the whole answer
 * (SOP_COLLECT) or queued as an NDJSON line (SOP_NDJSON). A line past SBX_CODE_MAX_LINE, or
 * results past SBX_CODE_MAX_RESULTS in all, are dropped and the answer says so. Runs in the
 * pump with the sandbox locked, like the rest of sop_cb.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SBX_CODE_MAX_LINE (8u << 20)     /* one event line (a figure, a big table) */
#define SBX_CODE_MAX_RESULTS (16u << 20) /* the results and the error of one call */

struct sop_code {
	char context[CTX_ID_MAX + 1], language[16];
	struct pbuf line; /* the event line being received */
	int skipping;     /* the line grew past the cap: drop it up to its newline */
	json_t *results;  /* SOP_COLLECT: the result objects */
	json_t *error;    /* the error object, or NULL */
	long long count;  /* execution_count, -1 until the kernel says */
	size_t bytes;     /* results and error kept or queued, as JSON */
	int truncated;
	int restarted;
	char restart_reason[256];
	int died;
	char died_msg[256];
	int tail_sent; /* SOP_NDJSON: the closing lines are out */
};

int sop_code_begin(struct sop *op, const char *context, const char *language)
{
	struct sop_code *c = calloc(1, sizeof(*c));
	if (!c || !(c->results = json_array())) {
		free(c);
		return -ENOMEM;
	}
	snprintf(c->context, sizeof(c->context), "%s", context);
	snprintf(c->language, sizeof(c->language), "%s", language ? language : "");
	c->count = -1;
	op->code = c;
	return 0;
}

void sbx__code_free(struct sop_code *c)
{
	if (!c)
		return;
	pbuf_release(&c->line);
	json_decref(c->results);
	json_decref(c->error);
	free(c);
}

static int is_base64(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
		      ch == '+' || ch == '/' || ch == '='))
			return 0;
	}
	return 1;
}

/* Copies key from in to out if it is a string (and base64 where b64 says): 0, or -1 when it
 * is there but not that. */
static int copy_str(json_t *out, json_t *in, const char *key, int b64)
{
	json_t *v = json_object_get(in, key);
	if (!v)
		return 0;
	if (!json_is_string(v) || (b64 && !is_base64(json_string_value(v), json_string_length(v))))
		return -1;
	json_object_set(out, key, v);
	return 0;
}

/* A result or an error as the API shows it, rebuilt from a kernel's line: NULL when the line
 * is none of those (the end line is taken here too). */
static json_t *clean_event(struct sop_code *c, json_t *ev)
{
	static const char *const texts[] = {"text", "html", "markdown", "svg", "latex", "javascript"};
	static const char *const binary[] = {"png", "jpeg", "pdf"};
	const char *type = json_string_value(json_object_get(ev, "type"));
	if (!type)
		return NULL;
	if (!strcmp(type, "end")) {
		json_t *n = json_object_get(ev, "execution_count");
		if (json_is_integer(n) && json_integer_value(n) >= 0)
			c->count = json_integer_value(n);
		return NULL;
	}
	json_t *out = json_object();
	int bad = 0;
	if (!strcmp(type, "result")) {
		json_object_set_new(out, "type", json_string("result"));
		json_object_set_new(out, "is_main_result",
				    json_boolean(json_is_true(json_object_get(ev, "is_main_result"))));
		for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
			bad |= copy_str(out, ev, texts[i], 0);
		for (size_t i = 0; i < sizeof(binary) / sizeof(binary[0]); i++)
			bad |= copy_str(out, ev, binary[i], 1);
		json_t *j = json_object_get(ev, "json");
		if (j)
			json_object_set(out, "json", j);
	} else if (!strcmp(type, "error")) {
		json_object_set_new(out, "type", json_string("error"));
		bad |= copy_str(out, ev, "name", 0) | copy_str(out, ev, "value", 0) |
		       copy_str(out, ev, "traceback", 0);
	} else {
		bad = 1;
	}
	if (bad) {
		json_decref(out);
		return NULL;
	}
	return out;
}

/* One complete line from the kernel. */
static void on_line(struct sop *op, const char *p, size_t n)
{
	struct sop_code *c = op->code;
	json_error_t jerr;
	json_t *ev = json_loadb(p, n, JSON_REJECT_DUPLICATES, &jerr);
	json_t *out = json_is_object(ev) ? clean_event(c, ev) : NULL;
	json_decref(ev);
	if (!out)
		return;
	char *text = json_dumps(out, JSON_COMPACT | JSON_ENSURE_ASCII);
	size_t len = text ? strlen(text) : 0;
	if (!text || c->bytes + len > SBX_CODE_MAX_RESULTS) {
		c->truncated = 1;
	} else {
		c->bytes += len;
		if (op->mode == SOP_NDJSON) {
			text[len] = '\n'; /* the NUL's place: the line as the client gets it */
			sbx__queue_line(op, text, len + 1);
		} else if (!strcmp(json_string_value(json_object_get(out, "type")), "error")) {
			json_object_del(out, "type");
			json_decref(c->error);
			c->error = json_incref(out);
		} else {
			json_object_del(out, "type");
			json_array_append(c->results, out);
		}
	}
	free(text);
	json_decref(out);
}

void sbx__code_event(struct sop *op, const uint8_t *p, size_t n)
{
	struct sop_code *c = op->code;
	if (!c)
		return;
	while (n) {
		const uint8_t *nl = memchr(p, '\n', n);
		size_t k = nl ? (size_t)(nl - p) : n;
		if (!c->skipping && c->line.len + k > SBX_CODE_MAX_LINE) {
			c->skipping = 1;
			c->truncated = 1;
			c->line.len = 0;
		}
		if (!c->skipping && pbuf_append(&c->line, p, k) < 0) {
			c->skipping = 1; /* out of memory: this line is lost, not the daemon */
			c->truncated = 1;
		}
		if (!nl)
			return;
		if (!c->skipping)
			on_line(op, (const char *)c->line.data, c->line.len);
		c->line.len = 0;
		c->skipping = 0;
		p += k + 1;
		n -= k + 1;
	}
}

void sbx__code_attrs(struct sop *op, const struct proto_frame *f)
{
	struct sop_code *c = op->code;
	uint32_t v;
	if (!c)
		return;
	char msg[256] = "", lang[16];
	proto_get_str(f, A_MESSAGE, msg, sizeof(msg));
	if (f->type == P_STARTED && proto_get_str(f, A_LANGUAGE, lang, sizeof(lang)) == 0 &&
	    strspn(lang, "abcdefghijklmnopqrstuvwxyz") == strlen(lang))
		snprintf(c->language, sizeof(c->language), "%s", lang);
	if (f->type == P_STARTED && proto_get_u32(f, A_RESTARTED, &v) == 0 && v) {
		c->restarted = 1;
		utf8_sanitize((const uint8_t *)msg, strnlen(msg, 80), c->restart_reason);
	}
	if (f->type == P_OK) {
		op->st.timed_out = proto_get_u32(f, A_TIMED_OUT, &v) == 0 && v;
		if (proto_get_u32(f, A_DIED, &v) == 0 && v) {
			c->died = 1;
			utf8_sanitize((const uint8_t *)msg, strnlen(msg, 80), c->died_msg);
		}
	}
}

/* The error of a kernel that died during the call. */
static json_t *died_error(const struct sop_code *c)
{
	return json_pack("{s:s,s:s,s:s}", "name", "KernelDied", "value",
			 c->died_msg[0] ? c->died_msg : "the kernel died", "traceback", "");
}

/* The fields of an execution (docs/api.md), results and error as given (NULL: left out, as
 * in the stream's end line), stdout and stderr left to the caller. */
static json_t *execution(struct sop *op, json_t *results, json_t *error)
{
	struct sop_code *c = op->code;
	json_t *o = json_pack("{s:s,s:s}", "context", c->context, "language", c->language);
	json_object_set_new(o, "execution_count", c->count >= 0 ? json_integer(c->count) : json_null());
	if (results)
		json_object_set(o, "results", results);
	if (error)
		json_object_set_new(o, "error", error);
	json_object_set_new(o, "timed_out", json_boolean(op->st.timed_out > 0));
	json_object_set_new(o, "kernel_restarted", json_boolean(c->restarted));
	json_object_set_new(o, "restart_reason",
			    c->restarted ? json_string(c->restart_reason) : json_null());
	json_object_set_new(o, "results_truncated", json_boolean(c->truncated));
	json_object_set_new(o, "duration_ms", json_integer(clock_ms() - op->t0));
	return o;
}

json_t *sop_code_result(struct sop *op)
{
	struct sop_code *c = op->code;
	if (!c || !op->done)
		return NULL;
	json_t *err = c->died ? died_error(c) : c->error ? json_incref(c->error) : json_null();
	return execution(op, c->results, err);
}

json_t *sbx__code_tail(struct sop *op)
{
	struct sop_code *c = op->code;
	if (!c || c->tail_sent)
		return NULL;
	c->tail_sent = 1;
	json_t *lines = json_array();
	if (c->died) {
		json_t *e = died_error(c);
		json_object_set_new(e, "type", json_string("error"));
		json_array_append_new(lines, e);
	}
	json_t *end = json_pack("{s:s}", "type", "end"), *x = execution(op, NULL, NULL);
	json_object_update(end, x);
	json_decref(x);
	json_array_append_new(lines, end);
	return lines;
}
