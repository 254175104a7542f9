/*
 * sbx_code: what a code call (P_CODE) gathers besides stdout and stderr. The kernel's events
 * come as JSON lines in P_EVENT frames; each complete line is parsed and checked, and a result
 * or an error becomes a typed event (struct sbx_code_event) of only the fields docs/api.md
 * names, nothing else of the guest's JSON. A line past SBX_CODE_MAX_LINE, or events past
 * SBX_CODE_MAX_RESULTS in all, are dropped and the call says so. Runs in the pump with the
 * sandbox locked, like the rest of sop_cb; the API shapes the events (api_code.c).
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/clock.h"
#include "common/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SBX_CODE_MAX_LINE (8u << 20)     /* one event line (a figure, a big table) */
#define SBX_CODE_MAX_RESULTS (16u << 20) /* the results and the error of one call */
#define SBX_CODE_MAX_EVENTS 65536

const char *const sbx_code_field_names[SBX_NFIELDS] = {
	[SBX_TEXT] = "text", [SBX_HTML] = "html", [SBX_MARKDOWN] = "markdown", [SBX_SVG] = "svg",
	[SBX_LATEX] = "latex", [SBX_JAVASCRIPT] = "javascript", [SBX_PNG] = "png",
	[SBX_JPEG] = "jpeg", [SBX_PDF] = "pdf",
};

struct sop_code {
	struct sbx_code_info info;
	char context[CTX_ID_MAX + 1], language[16], restart_reason[256], died_msg[256];
	struct pbuf line; /* the event line being received */
	int skipping;     /* the line grew past the cap: drop it up to its newline */
	struct sbx_code_event **events; /* each its own allocation: a reader
					 * keeps one while the pump adds more */
	size_t cap;
	size_t bytes;     /* what the events hold */
};

int sop_code_begin(struct sop *op, const char *context, const char *language)
{
	struct sop_code *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	snprintf(c->context, sizeof(c->context), "%s", context);
	snprintf(c->language, sizeof(c->language), "%s", language ? language : "");
	c->info.count = -1;
	op->code = c;
	return 0;
}

static void event_release(struct sbx_code_event *e)
{
	for (int i = 0; i < SBX_NFIELDS; i++)
		free((char *)e->field[i]);
	json_decref(e->json);
	free((char *)e->name);
	free((char *)e->value);
	free((char *)e->traceback);
}

void sbx__code_free(struct sop_code *c)
{
	if (!c)
		return;
	pbuf_release(&c->line);
	for (size_t i = 0; i < c->info.nevents; i++) {
		event_release(c->events[i]);
		free(c->events[i]);
	}
	free(c->events);
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

/* Copies key of in into *out if it is a string (and base64 where b64
 * says): 0, or -1 when it is there but not that (or out of memory). */
static int copy_str(const char **out, json_t *in, const char *key, int b64, size_t *bytes)
{
	json_t *v = json_object_get(in, key);
	if (!v)
		return 0;
	if (!json_is_string(v) || (b64 && !is_base64(json_string_value(v), json_string_length(v))))
		return -1;
	size_t n = json_string_length(v);
	char *s = malloc(n + 1);
	if (!s)
		return -1;
	memcpy(s, json_string_value(v), n + 1);
	*out = s;
	*bytes += n;
	return 0;
}

/* A result or an error as a typed event, from a kernel's line: 0, or -1
 * when the line is none of those (the end line is taken here too). */
static int take_event(struct sop_code *c, json_t *ev, struct sbx_code_event *e, size_t *bytes)
{
	const char *type = json_string_value(json_object_get(ev, "type"));
	memset(e, 0, sizeof(*e));
	if (!type)
		return -1;
	if (!strcmp(type, "end")) {
		json_t *n = json_object_get(ev, "execution_count");
		if (json_is_integer(n) && json_integer_value(n) >= 0)
			c->info.count = json_integer_value(n);
		return -1;
	}
	int bad = 0;
	if (!strcmp(type, "result")) {
		e->is_main = json_is_true(json_object_get(ev, "is_main_result"));
		for (int i = 0; i < SBX_NFIELDS; i++)
			bad |= copy_str(&e->field[i], ev, sbx_code_field_names[i], i >= SBX_PNG, bytes);
		json_t *j = json_object_get(ev, "json");
		if (j) {
			/* Its size as the answer will spell it, for the cap. */
			char *text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
			*bytes += text ? strlen(text) : 0;
			free(text);
			e->json = json_incref(j);
		}
	} else if (!strcmp(type, "error")) {
		e->is_error = 1;
		bad |= copy_str(&e->name, ev, "name", 0, bytes) | copy_str(&e->value, ev, "value", 0, bytes) |
		       copy_str(&e->traceback, ev, "traceback", 0, bytes);
	} else {
		bad = 1;
	}
	if (bad) {
		event_release(e);
		return -1;
	}
	return 0;
}

/* One complete line from the kernel. */
static void on_line(struct sop *op, const char *p, size_t n)
{
	struct sop_code *c = op->code;
	json_error_t jerr;
	json_t *ev = json_loadb(p, n, JSON_REJECT_DUPLICATES, &jerr);
	struct sbx_code_event e;
	size_t bytes = 0;
	int ok = json_is_object(ev) && take_event(c, ev, &e, &bytes) == 0;
	json_decref(ev);
	if (!ok)
		return;
	if (c->bytes + bytes > SBX_CODE_MAX_RESULTS || c->info.nevents == SBX_CODE_MAX_EVENTS) {
		c->info.truncated = 1;
		event_release(&e);
		return;
	}
	struct sbx_code_event *kept = malloc(sizeof(*kept));
	if (kept && c->info.nevents == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 8;
		struct sbx_code_event **v = realloc(c->events, cap * sizeof(*v));
		if (v) {
			c->events = v;
			c->cap = cap;
		}
	}
	if (!kept || c->info.nevents == c->cap) {
		c->info.truncated = 1; /* out of memory: this one is lost, not the daemon */
		event_release(&e);
		free(kept);
		return;
	}
	c->bytes += bytes;
	*kept = e;
	c->events[c->info.nevents] = kept;
	if (op->mode == SOP_NDJSON)
		sbx__queue_event(op, (uint32_t)c->info.nevents);
	c->info.nevents++;
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
			c->info.truncated = 1;
			c->line.len = 0;
		}
		if (!c->skipping && pbuf_append(&c->line, p, k) < 0) {
			c->skipping = 1; /* out of memory: this line is lost, not the daemon */
			c->info.truncated = 1;
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
		c->info.restarted = 1;
		utf8_sanitize((const uint8_t *)msg, strnlen(msg, 80), c->restart_reason);
	}
	if (f->type == P_OK) {
		op->st.timed_out = proto_get_u32(f, A_TIMED_OUT, &v) == 0 && v;
		if (proto_get_u32(f, A_DIED, &v) == 0 && v) {
			c->info.died = 1;
			utf8_sanitize((const uint8_t *)msg, strnlen(msg, 80), c->died_msg);
		}
	}
}

const struct sbx_code_info *sop_code(struct sop *op)
{
	struct sop_code *c = op->code;
	if (!c || !op->done)
		return NULL;
	c->info.context = c->context;
	c->info.language = c->language;
	c->info.restart_reason = c->restart_reason;
	c->info.died_msg = c->died_msg;
	c->info.timed_out = op->st.timed_out > 0;
	c->info.duration_ms = clock_ms() - op->t0;
	return &c->info;
}

const struct sbx_code_event *sop_code_event(struct sop *op, size_t i)
{
	struct sop_code *c = op->code;
	return c && i < c->info.nevents ? c->events[i] : NULL;
}
