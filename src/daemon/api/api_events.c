/*
 * api_events: GET /v1/events, the lifecycle events of the caller's
 * sandboxes (kept a week), and /v1/webhooks, the URLs they are posted to
 * (sbx_hooks.c delivers them). A webhook is a request cpuosd makes from the
 * host to wherever its URL points, past every sandbox's egress policy:
 * making one is the administrator's decision, so /v1/webhooks is on the
 * Unix socket only, for the account it names.
 */
#include "daemon/api/api.h"

#include "common/clock.h"

#include <errno.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EVENTS_LIMIT_DEFAULT 100
#define EVENTS_LIMIT_MAX     1000
#define MAX_WEBHOOKS	     64 /* per account */

static const char *const event_types[] = { "created", "paused", "resumed", "forked", "checkpointed",
					   "timeout", "killed", "stopped", "lost" };

static json_t *ms_time(long long ms)
{
	char at[64];
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&t, &tm);
	snprintf(at, sizeof(at), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
	return json_string(at);
}

static json_t *event_json(const struct store_event *e)
{
	char id[40];
	snprintf(id, sizeof(id), "evt_%lld", e->seq);
	json_t *o = json_pack("{s:s,s:I,s:s,s:s,s:o}", "id", id, "seq", (json_int_t)e->seq, "type",
			      e->type, "sandbox_id", e->sbx_id, "time", ms_time(e->at_ms));
	json_object_set_new(o, "cause", e->cause[0] ? json_string(e->cause) : json_null());
	return o;
}

/* A non-negative integer query parameter: 0 (absent: *out unchanged), or
 * -1 after answering 400. */
static int query_num(struct req *r, const char *name, long long max, long long *out)
{
	const char *v = req_query(r, name, NULL);
	if (!v)
		return 0;
	char *end;
	long long n = strtoll(v, &end, 10);
	if (!*v || *end || n < 0 || n > max) {
		reply_error(r, 400, "bad_request", "%s must be an integer from 0 to %lld", name, max);
		return -1;
	}
	*out = n;
	return 0;
}

int api_events(struct req *r)
{
	long long since = 0, limit = EVENTS_LIMIT_DEFAULT;
	if (query_num(r, "since", (long long)1 << 62, &since) < 0 ||
	    query_num(r, "limit", EVENTS_LIMIT_MAX, &limit) < 0)
		return 0;
	if (limit < 1)
		return reply_error(r, 400, "bad_request", "limit must be from 1 to %d", EVENTS_LIMIT_MAX);
	const char *sbx = req_query(r, "sandbox", NULL);
	const char *account = r->admin ? req_query(r, "account", NULL) : r->account;
	if (sbx && (!*sbx || strlen(sbx) >= 32))
		return reply_error(r, 400, "bad_request", "sandbox must be a sandbox id");
	struct store_event *ev;
	size_t n;
	int e = store_event_list(r->api->store, account, sbx, since, (size_t)limit, &ev, &n);
	if (e < 0)
		return reply_error(r, 500, "internal", "cannot read the events: %s", strerror(-e));
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, event_json(&ev[i]));
	long long next = n ? ev[n - 1].seq : since;
	free(ev);
	return reply_json(r, 200, json_pack("{s:o,s:I}", "events", a, "next_since", (json_int_t)next));
}

/* ---- webhooks (Unix socket only) ---- */

static json_t *hook_json(const struct store_webhook *w, int with_secret)
{
	json_t *types = json_loads(w->types, 0, NULL);
	json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:o}", "id", w->id, "account", w->account, "url",
			      w->url, "events", types ? types : json_array(), "created_at",
			      ms_time(w->created_ms));
	if (with_secret)
		json_object_set_new(o, "secret", json_string(w->secret));
	return o;
}

/* An http or https URL of printable bytes, no spaces, with a host. */
static int url_ok(const char *u)
{
	const char *rest = !strncmp(u, "http://", 7) ? u + 7 : !strncmp(u, "https://", 8) ? u + 8 : NULL;
	if (!rest || !*rest || *rest == '/' || strlen(u) >= sizeof(((struct store_webhook *)0)->url))
		return 0;
	for (const char *p = u; *p; p++)
		if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
			return 0;
	return 1;
}

int api_webhook_create(struct req *r)
{
	if (!r->body)
		return reply_error(r, 400, "bad_request", "a JSON body with \"account\" and \"url\" is required");
	const char *account = NULL, *url = NULL;
	if (api_str(r, "account", 127, &account) < 0 || api_str(r, "url", 1023, &url) < 0)
		return 0;
	if (!account || !*account)
		return reply_error(r, 422, "invalid_argument", "'account' is required: whose events it gets");
	if (!url || !url_ok(url))
		return reply_error(r, 422, "invalid_argument",
				   "'url' must be an http:// or https:// URL (printable, no spaces)");
	json_t *types = json_object_get(r->body, "events");
	size_t i;
	json_t *v;
	if (types && !json_is_array(types))
		return reply_error(r, 422, "invalid_argument", "'events' must be an array of event types");
	json_array_foreach(types, i, v) {
		int known = 0;
		for (size_t k = 0; json_is_string(v) && k < sizeof(event_types) / sizeof(*event_types); k++)
			known |= !strcmp(json_string_value(v), event_types[k]);
		if (!known)
			return reply_error(r, 422, "invalid_argument",
					   "'events' holds an unknown type: the types are created, paused, "
					   "resumed, forked, checkpointed, timeout, killed, stopped, lost");
	}
	struct store_webhook *have;
	size_t n;
	if (store_webhook_list(r->api->store, account, &have, &n) == 0) {
		free(have);
		if (n >= MAX_WEBHOOKS)
			return reply_error(r, 429, "quota_exceeded", "account '%s' has %d webhooks already",
					   account, MAX_WEBHOOKS);
	}
	struct store_webhook w = { .created_ms = (long long)(clock_realtime_ns() / 1000000) };
	unsigned char raw[24];
	if (RAND_bytes(raw, sizeof(raw)) != 1)
		return reply_error(r, 500, "internal", "no randomness");
	snprintf(w.id, sizeof(w.id), "whk_");
	for (int k = 0; k < 8; k++)
		snprintf(w.id + 4 + 2 * k, 3, "%02x", raw[k]);
	snprintf(w.secret, sizeof(w.secret), "whsec_");
	for (int k = 8; k < 24; k++)
		snprintf(w.secret + 6 + 2 * (k - 8), 3, "%02x", raw[k]);
	snprintf(w.account, sizeof(w.account), "%s", account);
	snprintf(w.url, sizeof(w.url), "%s", url);
	char *t = json_dumps(types ? types : json_array(), JSON_COMPACT);
	snprintf(w.types, sizeof(w.types), "%s", t ? t : "[]");
	free(t);
	int e = store_webhook_add(r->api->store, &w);
	if (e < 0)
		return reply_error(r, 500, "internal", "cannot keep the webhook: %s", strerror(-e));
	sbx_hooks_changed(r->api->sbx);
	/* The secret is shown here once, as a key is. */
	return reply_json(r, 201, hook_json(&w, 1));
}

int api_webhook_list(struct req *r)
{
	struct store_webhook *w;
	size_t n;
	int e = store_webhook_list(r->api->store, req_query(r, "account", NULL), &w, &n);
	if (e < 0)
		return reply_error(r, 500, "internal", "cannot read the webhooks: %s", strerror(-e));
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, hook_json(&w[i], 0));
	free(w);
	return reply_json(r, 200, json_pack("{s:o}", "webhooks", a));
}

int api_webhook_delete(struct req *r)
{
	int e = store_webhook_delete(r->api->store, r->param[0]);
	if (e == -ENOENT)
		return reply_error(r, 404, "not_found", "no webhook '%s'", r->param[0]);
	if (e < 0)
		return reply_error(r, 500, "internal", "cannot delete the webhook: %s", strerror(-e));
	return reply_empty(r, 204);
}

int api_webhook_deliveries(struct req *r)
{
	long long limit = EVENTS_LIMIT_DEFAULT;
	if (query_num(r, "limit", EVENTS_LIMIT_MAX, &limit) < 0)
		return 0;
	if (limit < 1)
		return reply_error(r, 400, "bad_request", "limit must be from 1 to %d", EVENTS_LIMIT_MAX);
	struct store_delivery *d;
	size_t n;
	int e = store_delivery_list(r->api->store, r->param[0], (size_t)limit, &d, &n);
	if (e < 0)
		return reply_error(r, 500, "internal", "cannot read the deliveries: %s", strerror(-e));
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++) {
		char id[40];
		snprintf(id, sizeof(id), "evt_%lld", d[i].event_seq);
		json_t *o = json_pack("{s:s,s:i,s:o,s:o}", "event_id", id, "attempt", d[i].attempt,
				      "status", d[i].status ? json_integer(d[i].status) : json_null(),
				      "time", ms_time(d[i].at_ms));
		json_object_set_new(o, "error", d[i].error[0] ? json_string(d[i].error) : json_null());
		json_array_append_new(a, o);
	}
	free(d);
	return reply_json(r, 200, json_pack("{s:o}", "deliveries", a));
}
