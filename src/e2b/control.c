/*
 * control: E2B's control plane (api.<domain>) on cpuosd's sandboxes API.
 * An E2B sandbox id is the 16 hex digits of cpuos's "sbx_" id, a valid
 * host label. What cpuos does not have (volumes, IAM, E2B's own template
 * builder, MCP gateways) is a 501 in E2B's error shape.
 */
#include "cli/cpuos/http.h"
#include "common/cidr.h"
#include "e2b/e2b.h"
#include "e2b/envd.h"
#include "e2b/token.h"
#include "lib/httpd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LIST_MAX 100 /* a page of a listing, as cpuosd's */

/* The E2B id of a cpuos sandbox object's id ("sbx_" + 16 hex), or NULL. */
static const char *e2b_id_of(json_t *sbx)
{
	const char *id = json_string_value(json_object_get(sbx, "id"));
	return id && !strncmp(id, "sbx_", 4) && strlen(id) == 4 + E2B_ID_LEN ? id + 4 : NULL;
}

/* The E2B state of a cpuos one: running and paused show; the rest is gone. */
static const char *state_of(json_t *sbx)
{
	const char *s = json_string_value(json_object_get(sbx, "state"));
	return s && (!strcmp(s, "running") || !strcmp(s, "paused")) ? s : NULL;
}

/* Sets k to a copy of sbx's field from (null when it has none). */
static void copy(json_t *to, const char *k, json_t *sbx, const char *from)
{
	json_t *v = json_object_get(sbx, from);
	json_object_set_new(to, k, v ? json_copy(v) : json_null());
}

/* E2B's Sandbox (what a create, resume or connect answers) of a cpuos
 * sandbox object, with the caller's access token for it. NULL without
 * memory or for an object that is not cpuosd's. */
static json_t *sandbox_of(struct httpd_req *r, json_t *sbx)
{
	struct e2b *g = r->arg;
	struct e2b_req *q = r->app;
	const char *id = e2b_id_of(sbx);
	char tok[TOK_MAX];
	if (!id || tok_seal(g->secret, id, q->key, tok) < 0)
		return NULL;
	tokens_put(g->tokens, id, tok);
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s}", "sandboxID", id, "clientID", "cpuos",
			      "envdVersion", E2B_ENVD_VERSION, "envdAccessToken", tok,
			      "templateID", "");
	explicit_bzero(tok, sizeof(tok));
	if (!o)
		return NULL;
	copy(o, "templateID", sbx, "template");
	copy(o, "alias", sbx, "template");
	/* The interpreter's context calls carry only this header: the same
	 * token, so that they are the caller's too. */
	json_object_set_new(o, "trafficAccessToken", json_string(json_string_value(
							     json_object_get(o, "envdAccessToken"))));
	json_object_set_new(o, "domain", g->cfg->domain[0] ? json_string(g->cfg->domain)
							   : json_null());
	return o;
}

/* E2B's ListedSandbox (and, with detail, SandboxDetail) of a cpuos
 * sandbox object; NULL for one E2B would not show (stopped). */
static json_t *listed_of(struct httpd_req *r, json_t *sbx, int detail)
{
	const char *id = e2b_id_of(sbx), *state = state_of(sbx);
	if (!id || !state)
		return NULL;
	json_t *o = detail ? sandbox_of(r, sbx)
			   : json_pack("{s:s, s:s, s:s}", "sandboxID", id, "clientID", "cpuos",
				       "envdVersion", E2B_ENVD_VERSION);
	if (!o)
		return NULL;
	if (!detail) {
		copy(o, "templateID", sbx, "template");
		copy(o, "alias", sbx, "template");
	}
	copy(o, "startedAt", sbx, "created_at");
	copy(o, "endAt", sbx, "expires_at");
	copy(o, "cpuCount", sbx, "vcpus");
	copy(o, "memoryMB", sbx, "memory_mb");
	copy(o, "diskSizeMB", sbx, "disk_mb");
	json_object_set_new(o, "state", json_string(state));
	json_t *md = json_object_get(sbx, "metadata");
	json_object_set_new(o, "metadata", json_is_object(md) ? json_copy(md) : json_object());
	if (json_is_null(json_object_get(o, "endAt")))
		copy(o, "endAt", sbx, "paused_at");
	if (json_is_null(json_object_get(o, "endAt")))
		copy(o, "endAt", sbx, "created_at");
	if (detail) {
		const char *on = json_string_value(json_object_get(sbx, "on_timeout"));
		json_object_set_new(o, "lifecycle",
				    json_pack("{s:b, s:s}", "autoResume", 1, "onTimeout",
					      on && !strcmp(on, "pause") ? "pause" : "kill"));
	}
	return o;
}

/* The cpuos id of the route's {id}: 0, or -1 after answering 404. */
static int route_id(struct httpd_req *r, char out[24])
{
	if (e2b_cpuos_id(r->param[0], out) < 0) {
		e2b_reply_error(r, 404, "sandbox '%s' not found", r->param[0]);
		return -1;
	}
	return 0;
}

/* The request's JSON object (an empty body is {}): NULL after a 400. */
static json_t *body_of(struct httpd_req *r)
{
	if (!r->body || !r->len)
		return json_object();
	json_error_t e;
	json_t *b = json_loadb(r->body, r->len, 0, &e);
	if (!json_is_object(b)) {
		json_decref(b);
		e2b_reply_error(r, 400, "the body is not a JSON object: %s", e.text);
		return NULL;
	}
	return b;
}

/* One call to cpuosd on the route's sandbox (or path, when sub is NULL
 * and path is given). *out gets the answer. 0, or -1 after answering. */
static int call(struct httpd_req *r, const char *method, const char *sbx, const char *sub,
		json_t *body, json_t **out)
{
	struct api *a;
	struct apath p;
	if (e2b_api(r, &a) < 0) {
		e2b_reply_error(r, 500, "out of memory");
		return -1;
	}
	apath_init(&p, "/v1/sandboxes");
	if (sbx)
		apath_seg(&p, sbx);
	if (sub)
		apath_add(&p, sub);
	int rc = api_json(a, method, &p, body, out);
	if (rc < 0) {
		if (api_status(a) == 404 && sbx)
			e2b_reply_error(r, 404, "sandbox '%s' not found", sbx + 4);
		else
			e2b_reply_api_error(r, a);
	}
	api_free(a);
	return rc < 0 ? -1 : 0;
}

/* E2B's network config as a cpuos egress policy: allowOut entries are
 * CIDRs or host names, denyOut CIDRs; with allowOut the rest is denied.
 * NULL after answering 400. */
static json_t *policy_of(struct httpd_req *r, json_t *net, int internet)
{
	json_t *allow = json_object_get(net, "allowOut"), *deny = json_object_get(net, "denyOut");
	json_t *hosts = json_array(), *cidrs = json_array(), *denied = json_array();
	json_t *p = NULL;
	size_t i;
	json_t *v;
	if ((allow && !json_is_array(allow)) || (deny && !json_is_array(deny)))
		goto bad;
	json_array_foreach(allow, i, v) {
		struct net_cidr c;
		const char *s = json_string_value(v);
		if (!s)
			goto bad;
		json_array_append_new(net_cidr_parse(s, &c) == 0 ? cidrs : hosts, json_string(s));
	}
	json_array_foreach(deny, i, v) {
		if (!json_is_string(v))
			goto bad;
		json_array_append(denied, v);
	}
	if (!internet && !json_array_size(hosts) && !json_array_size(cidrs))
		p = json_pack("{s:s}", "mode", "deny-all");
	else if (json_array_size(hosts) || json_array_size(cidrs))
		p = json_pack("{s:s, s:O, s:O}", "mode", "custom", "allowedHosts", hosts,
			      "allowedCIDRs", cidrs);
	else
		p = json_pack("{s:s}", "mode", "allow-all");
	if (p && json_array_size(denied))
		json_object_set(p, "deniedCIDRs", denied);
	goto out;
bad:
	e2b_reply_error(r, 400, "network.allowOut and network.denyOut are arrays of strings");
out:
	json_decref(hosts), json_decref(cidrs), json_decref(denied);
	return p;
}

static int unsupported(struct httpd_req *r)
{
	return e2b_reply_error(r, 501, "%s %s is not supported by cpuos-e2b", r->method, r->url);
}

/* POST /sandboxes, /v2/sandboxes: a create. */
static int create(struct httpd_req *r)
{
	const struct e2b *g = r->arg;
	json_t *b = body_of(r), *out = NULL, *req = NULL, *v;
	if (!b)
		return 0;
	const char *tpl = json_string_value(json_object_get(b, "templateID"));
	if ((v = json_object_get(b, "templateID")) && !tpl) {
		e2b_reply_error(r, 400, "templateID must be a string");
		goto out;
	}
	if (!tpl || !*tpl)
		tpl = g->cfg->template_;
	else if (!strcmp(tpl, "code-interpreter-v1") || !strcmp(tpl, "code-interpreter"))
		tpl = g->cfg->interp_template;
	if (json_array_size(json_object_get(b, "volumeMounts")) ||
	    json_object_size(json_object_get(b, "iam")) ||
	    json_object_size(json_object_get(b, "mcp"))) {
		e2b_reply_error(r, 501, "volumes, IAM and MCP gateways are not supported by cpuos-e2b");
		goto out;
	}
	req = json_pack("{s:s}", "template", tpl);
	json_t *t = json_object_get(b, "timeout");
	if (t && !json_is_integer(t)) {
		e2b_reply_error(r, 400, "timeout must be an integer (seconds)");
		goto out;
	}
	json_object_set_new(req, "timeout", json_integer(t ? json_integer_value(t) : 15));
	json_object_set_new(req, "on_timeout",
			    json_string(json_is_true(json_object_get(b, "autoPause")) ? "pause"
										       : "kill"));
	if ((v = json_object_get(b, "cpuCount")))
		json_object_set(req, "vcpus", v);
	if ((v = json_object_get(b, "memoryMB")))
		json_object_set(req, "memory_mb", v);
	if ((v = json_object_get(b, "envVars")) && !json_is_null(v))
		json_object_set(req, "env", v);
	if ((v = json_object_get(b, "metadata")) && !json_is_null(v))
		json_object_set(req, "metadata", v);
	json_t *net = json_object_get(b, "network");
	int internet = !json_is_false(json_object_get(b, "allow_internet_access")) &&
		       !json_is_false(json_object_get(b, "allowInternetAccess"));
	if (net || !internet) {
		json_t *p = policy_of(r, net, internet);
		if (!p)
			goto out;
		json_object_set_new(req, "network", p);
	}
	json_object_set_new(req, "public",
			    json_boolean(!json_is_false(json_object_get(net, "allowPublicTraffic"))));
	if (call(r, "POST", NULL, NULL, req, &out) < 0)
		goto out;
	json_t *o = sandbox_of(r, out);
	if (!o)
		e2b_reply_error(r, 502, "cpuosd answered no sandbox");
	else
		e2b_reply_json(r, 201, o);
out:
	json_decref(b), json_decref(req), json_decref(out);
	return 0;
}

/* Percent-decodes s in place ('+' is a space, as in a form); a bad
 * escape stays as it is. */
static void pct_decode(char *s)
{
	char *o = s;
	for (; *s; s++) {
		unsigned v;
		if (*s == '%' && sscanf(s + 1, "%2x", &v) == 1 && s[1] && s[2] && v) {
			*o++ = (char)v;
			s += 2;
		} else {
			*o++ = *s == '+' ? ' ' : *s;
		}
	}
	*o = '\0';
}

/* Whether a sandbox object has every k=v of E2B's metadata filter, a
 * query string of its own ("k1=v1&k2=v2", percent-encoded). */
static int metadata_matches(json_t *sbx, const char *filter)
{
	json_t *md = json_object_get(sbx, "metadata");
	char *f = strdup(filter), *save = NULL;
	int ok = f != NULL;
	for (char *kv = f ? strtok_r(f, "&", &save) : NULL; ok && kv;
	     kv = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(kv, '=');
		if (!eq)
			continue;
		*eq = '\0';
		/* the SDK quotes each key and value before it encodes the
		 * whole filter, which httpd_query decoded once */
		pct_decode(kv), pct_decode(eq + 1);
		pct_decode(kv), pct_decode(eq + 1);
		const char *have = json_string_value(json_object_get(md, kv));
		ok = have && !strcmp(have, eq + 1);
	}
	free(f);
	return ok;
}

struct states {
	int running, paused;
};

static int add_state(void *arg, const char *v)
{
	struct states *st = arg;
	/* "running,paused" comes as one value from some clients */
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", v);
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (!strcmp(t, "running"))
			st->running = 1;
		else if (!strcmp(t, "paused"))
			st->paused = 1;
		else
			return -1;
	}
	return 0;
}

/* GET /v2/sandboxes (?state=&metadata=&limit=&nextToken=) and the older
 * GET /sandboxes (running ones, ?metadata=): one page of cpuosd's listing,
 * filtered; the next page's token in the header x-next-token. */
static int list(struct httpd_req *r)
{
	int v2 = !strncmp(r->url, "/v2/", 4), bad = 0;
	struct states st = { 0 };
	const char *md = httpd_query(r, "metadata", &bad);
	const char *lim = httpd_query(r, "limit", &bad);
	const char *next = httpd_query(r, "nextToken", &bad);
	long limit = lim ? strtol(lim, NULL, 10) : LIST_MAX;
	if (httpd_query_each(r, "state", add_state, &st, &bad) < 0 || bad) {
		return e2b_reply_error(r, 400, "state is running or paused");
	}
	if (!st.running && !st.paused)
		st.running = 1, st.paused = v2;
	if (limit < 1 || limit > LIST_MAX)
		limit = LIST_MAX;
	struct api *a;
	struct apath p;
	json_t *out = NULL, *arr = json_array();
	char n[16];
	if (!arr || e2b_api(r, &a) < 0) {
		json_decref(arr);
		return e2b_reply_error(r, 500, "out of memory");
	}
	apath_init(&p, "/v1/sandboxes");
	snprintf(n, sizeof(n), "%ld", limit);
	apath_query(&p, "limit", n);
	if (st.running != st.paused)
		apath_query(&p, "state", st.running ? "running" : "paused");
	if (next && *next)
		apath_query(&p, "cursor", next);
	if (api_json(a, "GET", &p, NULL, &out) < 0) {
		e2b_reply_api_error(r, a);
		goto done;
	}
	size_t i;
	json_t *sbx;
	json_array_foreach(json_object_get(out, "sandboxes"), i, sbx) {
		const char *s = state_of(sbx);
		if (!s || (!strcmp(s, "running") && !st.running) ||
		    (!strcmp(s, "paused") && !st.paused) || (md && !metadata_matches(sbx, md)))
			continue;
		json_t *o = listed_of(r, sbx, 0);
		if (o)
			json_array_append_new(arr, o);
	}
	const char *cursor = json_string_value(json_object_get(out, "next_cursor"));
	if (cursor && v2)
		httpd_add_header(r, "x-next-token", cursor);
	e2b_reply_json(r, 200, arr);
	arr = NULL;
done:
	json_decref(arr), json_decref(out);
	api_free(a);
	return 0;
}

static int get(struct httpd_req *r)
{
	char id[24];
	json_t *out = NULL;
	if (route_id(r, id) < 0 || call(r, "GET", id, NULL, NULL, &out) < 0)
		return 0;
	json_t *o = listed_of(r, out, 1);
	json_decref(out);
	if (!o)
		return e2b_reply_error(r, 404, "sandbox '%s' not found", r->param[0]);
	return e2b_reply_json(r, 200, o);
}

static int kill_(struct httpd_req *r)
{
	char id[24];
	json_t *out = NULL;
	/* cpuosd answers 204 for a stopped one; E2B a 404 for what is gone */
	if (route_id(r, id) < 0 || call(r, "GET", id, NULL, NULL, &out) < 0)
		return 0;
	int gone = !state_of(out);
	json_decref(out);
	if (gone)
		return e2b_reply_error(r, 404, "sandbox '%s' not found", r->param[0]);
	if (call(r, "DELETE", id, NULL, NULL, NULL) < 0)
		return 0;
	return httpd_reply_empty(r, 204);
}

/* POST .../timeout {"timeout": s} and .../refreshes {"duration": s}. */
static int set_timeout(struct httpd_req *r)
{
	char id[24];
	json_t *b = body_of(r), *out = NULL;
	if (!b || route_id(r, id) < 0)
		goto out;
	int refresh = strstr(r->url, "/refreshes") != NULL;
	json_t *t = json_object_get(b, refresh ? "duration" : "timeout");
	if ((t || !refresh) && (!json_is_integer(t) || json_integer_value(t) < 0)) {
		e2b_reply_error(r, 400, "%s must be a number of seconds",
				refresh ? "duration" : "timeout");
		goto out;
	}
	json_int_t s = t ? json_integer_value(t) : 60;
	json_t *req = json_pack("{s:I}", "timeout", s < 1 ? (json_int_t)1 : s);
	int rc = call(r, "POST", id, "/timeout", req, &out);
	json_decref(req);
	if (rc == 0)
		httpd_reply_empty(r, 204);
out:
	json_decref(b), json_decref(out);
	return 0;
}

static int pause_(struct httpd_req *r)
{
	char id[24];
	json_t *out = NULL;
	if (route_id(r, id) < 0 || call(r, "GET", id, NULL, NULL, &out) < 0)
		return 0;
	const char *s = state_of(out);
	int paused = s && !strcmp(s, "paused");
	json_decref(out);
	out = NULL;
	if (!s)
		return e2b_reply_error(r, 404, "sandbox '%s' not found", r->param[0]);
	if (paused)
		return e2b_reply_error(r, 409, "sandbox '%s' is already paused", r->param[0]);
	if (call(r, "POST", id, "/pause", NULL, &out) < 0)
		return 0;
	json_decref(out);
	return httpd_reply_empty(r, 204);
}

/* POST .../resume (201), .../connect and /v2/.../connect (200 when it
 * ran, 201 when it was resumed): {"timeout": s} sets its timeout from now. */
static int resume(struct httpd_req *r)
{
	char id[24];
	json_t *b = body_of(r), *out = NULL, *req = NULL;
	int connect = strstr(r->url, "/connect") != NULL;
	if (!b || route_id(r, id) < 0 || call(r, "GET", id, NULL, NULL, &out) < 0)
		goto out;
	const char *s = state_of(out);
	if (!s) {
		e2b_reply_error(r, 404, "sandbox '%s' not found", r->param[0]);
		goto out;
	}
	int was_running = !strcmp(s, "running");
	if (!connect && was_running) {
		e2b_reply_error(r, 409, "sandbox '%s' is already running", r->param[0]);
		goto out;
	}
	json_decref(out);
	out = NULL;
	if (!was_running && call(r, "POST", id, "/resume", NULL, &out) < 0)
		goto out;
	json_t *t = json_object_get(b, "timeout");
	if (json_is_integer(t) && json_integer_value(t) > 0) {
		json_decref(out);
		out = NULL;
		req = json_pack("{s:I}", "timeout", json_integer_value(t));
		if (call(r, "POST", id, "/timeout", req, &out) < 0)
			goto out;
	} else if (!out && call(r, "GET", id, NULL, NULL, &out) < 0) {
		goto out;
	}
	json_t *o = sandbox_of(r, out);
	if (!o)
		e2b_reply_error(r, 502, "cpuosd answered no sandbox");
	else
		e2b_reply_json(r, connect && was_running ? 200 : 201, o);
out:
	json_decref(b), json_decref(out), json_decref(req);
	return 0;
}

/* POST .../fork {"count": n}: 201 [{"sandbox": Sandbox}...]. */
static int fork_(struct httpd_req *r)
{
	char id[24];
	json_t *b = body_of(r), *out = NULL, *req = NULL;
	if (!b || route_id(r, id) < 0)
		goto out;
	json_t *c = json_object_get(b, "count");
	req = json_pack("{s:I}", "count", json_is_integer(c) ? json_integer_value(c) : 1);
	if (call(r, "POST", id, "/fork", req, &out) < 0)
		goto out;
	json_t *arr = json_array(), *sbx;
	size_t i;
	json_array_foreach(json_object_get(out, "sandboxes"), i, sbx) {
		json_t *o = sandbox_of(r, sbx);
		if (o)
			json_array_append_new(arr, json_pack("{s:o}", "sandbox", o));
	}
	e2b_reply_json(r, 201, arr);
out:
	json_decref(b), json_decref(out), json_decref(req);
	return 0;
}

/* POST .../snapshots {"name": n}: a cpuos checkpoint; 201 {"snapshotID",
 * "names"}. A create with templateID naming it starts from it. */
static int snapshot(struct httpd_req *r)
{
	char id[24];
	json_t *b = body_of(r), *out = NULL, *req = NULL;
	if (!b || route_id(r, id) < 0)
		goto out;
	const char *name = json_string_value(json_object_get(b, "name"));
	req = name ? json_pack("{s:s}", "name", name) : json_object();
	if (call(r, "POST", id, "/checkpoints", req, &out) < 0)
		goto out;
	json_t *o = json_pack("{s:O?, s:[O?]}", "snapshotID", json_object_get(out, "id"), "names",
			      json_object_get(out, "name"));
	e2b_reply_json(r, 201, o);
out:
	json_decref(b), json_decref(out), json_decref(req);
	return 0;
}

/* GET .../metrics: cpuosd's samples in E2B's SandboxMetric shape. */
static int metrics(struct httpd_req *r)
{
	char id[24];
	json_t *out = NULL, *arr = json_array(), *m;
	size_t i;
	if (!arr || route_id(r, id) < 0 || call(r, "GET", id, "/metrics", NULL, &out) < 0) {
		json_decref(arr);
		return 0;
	}
	json_array_foreach(json_object_get(out, "metrics"), i, m) {
		json_t *o = json_object();
		copy(o, "timestamp", m, "timestamp");
		copy(o, "cpuCount", m, "cpu_count");
		copy(o, "cpuUsedPct", m, "cpu_used_pct");
		copy(o, "memUsed", m, "mem_used");
		copy(o, "memTotal", m, "mem_total");
		copy(o, "diskUsed", m, "disk_used");
		copy(o, "diskTotal", m, "disk_total");
		json_object_set_new(o, "memCache", json_integer(0));
		/* the guest's figures are null when its agent was late: 0 */
		const char *k;
		json_t *v;
		json_object_foreach(o, k, v)
			if (json_is_null(v))
				json_object_set_new(o, k, json_integer(0));
		struct tm tm = { 0 };
		const char *ts = json_string_value(json_object_get(m, "timestamp"));
		json_object_set_new(o, "timestampUnix",
				    json_integer(ts && strptime(ts, "%Y-%m-%dT%H:%M:%S", &tm)
							 ? (json_int_t)timegm(&tm)
							 : 0));
		json_array_append_new(arr, o);
	}
	json_decref(out);
	return e2b_reply_json(r, 200, arr);
}

/* PUT .../network {"allowOut": [...], "denyOut": [...]}. */
static int network(struct httpd_req *r)
{
	char id[24];
	json_t *b = body_of(r), *out = NULL, *p = NULL;
	if (!b || route_id(r, id) < 0 || !(p = policy_of(r, b, 1)))
		goto out;
	if (call(r, "PUT", id, "/network", p, &out) == 0)
		httpd_reply_empty(r, 204);
out:
	json_decref(b), json_decref(out), json_decref(p);
	return 0;
}

static int health(struct httpd_req *r)
{
	return e2b_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

#define R(m, p, h) { m, p, HTTPD_OPEN, h, NULL }
const struct httpd_route e2b_control_routes[] = {
	{ "GET", "/health", HTTPD_OPEN, health, e2b_auth_none },
	/* signed URLs made for E2B_SANDBOX_URL name no sandbox: the
	 * signature finds it */
	{ "GET", "/files", HTTPD_OPEN, envd_files_get, e2b_auth_signed },
	{ "POST", "/files", HTTPD_OPEN | HTTPD_UPLOAD, NULL, e2b_auth_signed },
	R("POST", "/sandboxes", create),
	R("POST", "/v2/sandboxes", create),
	R("GET", "/sandboxes", list),
	R("GET", "/v2/sandboxes", list),
	R("GET", "/sandboxes/metrics", unsupported), /* before {id}, which would take it */
	R("GET", "/sandboxes/{id}", get),
	R("DELETE", "/sandboxes/{id}", kill_),
	R("POST", "/sandboxes/{id}/timeout", set_timeout),
	R("POST", "/sandboxes/{id}/refreshes", set_timeout),
	R("POST", "/sandboxes/{id}/pause", pause_),
	R("POST", "/sandboxes/{id}/resume", resume),
	R("POST", "/sandboxes/{id}/connect", resume),
	R("POST", "/v2/sandboxes/{id}/connect", resume),
	R("POST", "/sandboxes/{id}/fork", fork_),
	R("POST", "/sandboxes/{id}/snapshots", snapshot),
	R("GET", "/sandboxes/{id}/metrics", metrics),
	R("PUT", "/sandboxes/{id}/network", network),
	/* What cpuos does not do answers 501, named so the SDK says why. */
	R("GET", "/sandboxes/{id}/logs", unsupported),
	R("GET", "/v2/sandboxes/{id}/logs", unsupported),
	R("GET", "/volumes", unsupported),
	R("POST", "/volumes", unsupported),
	R("GET", "/volumes/{id}", unsupported),
	R("DELETE", "/volumes/{id}", unsupported),
	R("GET", "/templates", unsupported),
	R("POST", "/templates", unsupported),
	R("POST", "/v2/templates", unsupported),
	R("POST", "/v3/templates", unsupported),
	R("GET", "/templates/{id}", unsupported),
	R("DELETE", "/templates/{id}", unsupported),
	R("POST", "/v2/templates/{id}/builds/{build}", unsupported),
	R("GET", "/templates/{id}/builds/{build}/status", unsupported),
	R("GET", "/secrets", unsupported),
	R("POST", "/secrets", unsupported),
	{ 0 },
};
