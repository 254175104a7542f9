/*
 * e2b_http: every request passes, in order: its plane (the headers
 * E2b-Sandbox-Id and E2b-Sandbox-Port, else a Host "<port>-<id>.<domain>",
 * else the control plane), its route in that plane's table, the key it
 * acts with (X-API-KEY on the control plane; on a sandbox's, its access
 * token, X-Access-Token, which holds the key sealed, or a signed URL),
 * then its handler. Every refusal is E2B's {"code": N, "message": "..."}.
 */
#include "e2b/e2b_http.h"

#include "cli/cpuos/http.h"
#include "common/log.h"
#include "e2b/e2b.h"
#include "e2b/envd.h"
#include "e2b/process.h"
#include "e2b/rpc.h"
#include "e2b/token.h"
#include "lib/httpd.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CONNS   1000u
#define CONN_IDLE_S 300u /* an SDK keeps its connections for its streams */

/* The server's own refusals: the code is the status, as E2B's bodies say. */
static const struct httpd_code codes[HTTPD_REFUSALS] = {
	[HTTPD_NO_KEY] = { NULL, "401" },	[HTTPD_BAD_KEY] = { NULL, "401" },
	[HTTPD_NO_ROUTE] = { NULL, "404" },	[HTTPD_BAD_METHOD] = { NULL, "405" },
	[HTTPD_EXPECT] = { NULL, "417" },	[HTTPD_TOO_BIG] = { NULL, "413" },
	[HTTPD_INTERNAL] = { NULL, "500" },
};

static json_t *error_body(const char *type, const char *code, const char *msg)
{
	(void)type;
	return json_pack("{s:i, s:s%}", "code", atoi(code), "message", msg, strlen(msg));
}

int e2b_cpuos_id(const char *id, char out[24])
{
	if (strlen(id) != E2B_ID_LEN || strspn(id, "0123456789abcdef") != E2B_ID_LEN)
		return -EINVAL;
	snprintf(out, 24, "sbx_%s", id);
	return 0;
}

/* "<port>-<id>" at the head of a Host: 0 with both, else -EINVAL. */
static int host_target(const char *host, unsigned *port, char id[E2B_ID_LEN + 1])
{
	char *end;
	unsigned long p = strtoul(host, &end, 10);
	if (end == host || *end != '-' || !p || p > 65535)
		return -EINVAL;
	const char *h = end + 1;
	if (strspn(h, "0123456789abcdef") != E2B_ID_LEN || h[E2B_ID_LEN] != '.')
		return -EINVAL;
	memcpy(id, h, E2B_ID_LEN);
	id[E2B_ID_LEN] = '\0';
	*port = (unsigned)p;
	return 0;
}

static const struct httpd_route *pick_routes(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	const char *sid = httpd_header(r, "E2b-Sandbox-Id");
	const char *sport = httpd_header(r, "E2b-Sandbox-Port");
	const char *host = httpd_header(r, "Host");
	q->plane = E2B_CONTROL;
	snprintf(q->user, sizeof(q->user), "user");
	if (sid) {
		char *end;
		unsigned long p = sport ? strtoul(sport, &end, 10) : E2B_ENVD_PORT;
		/* An id or port that names no sandbox's is no route there. */
		char cid[24];
		if (e2b_cpuos_id(sid, cid) < 0 || (sport && (*end || !p || p > 65535)))
			return e2b_port_routes;
		snprintf(q->id, sizeof(q->id), "%s", sid);
		q->port = (unsigned)p;
	} else if (!host || host_target(host, &q->port, q->id) < 0) {
		return e2b_control_routes;
	}
	if (q->port == E2B_ENVD_PORT)
		q->plane = E2B_ENVD;
	else if (q->port == E2B_INTERP_PORT)
		q->plane = E2B_INTERP;
	else
		q->plane = E2B_PORT;
	return q->plane == E2B_ENVD     ? e2b_envd_routes
	       : q->plane == E2B_INTERP ? e2b_interp_routes
					: e2b_port_routes;
}

/* The key of a control-plane request: X-API-KEY (or a bearer token, as
 * E2B's own access tokens come). 0, or -1 after refusing. */
static int control_key(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	const char *k = httpd_header(r, "X-API-KEY");
	const char *auth = httpd_header(r, "Authorization");
	if ((!k || !*k) && auth && !strncmp(auth, "Bearer ", 7))
		k = auth + 7;
	if (!k || !*k) {
		e2b_reply_error(r, 401, "missing API key (the header X-API-KEY: a cpuos API key)");
		return -1;
	}
	if (strlen(k) >= sizeof(q->key) || strpbrk(k, "\r\n")) {
		e2b_reply_error(r, 401, "invalid API key");
		return -1;
	}
	snprintf(q->key, sizeof(q->key), "%s", k);
	return 0;
}

/* The guest user of an envd request: "Authorization: Basic base64(user:)"
 * on RPCs, ?username= on /files; "user" unless said. 0, or -1 after
 * refusing a malformed one. */
static int envd_user(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	const char *auth = httpd_header(r, "Authorization");
	int bad = 0;
	const char *u = httpd_query(r, "username", &bad);
	char dec[3 * E2B_USER_MAX];
	if (auth && !strncmp(auth, "Basic ", 6)) {
		if (b64_decode(auth + 6, dec, sizeof(dec)) < 0) {
			e2b_reply_error(r, 401, "malformed Basic authorization");
			return -1;
		}
		dec[strcspn(dec, ":")] = '\0';
		u = dec;
	}
	if (bad || (u && strlen(u) >= sizeof(q->user))) {
		e2b_reply_error(r, 400, "invalid username");
		return -1;
	}
	if (u && *u)
		snprintf(q->user, sizeof(q->user), "%s", u);
	return 0;
}

/* A signed URL being checked: its signature against a token's. */
struct signed_url {
	const char *path, *op, *user, *sig;
	long long exp;
};

static int signature_of(void *arg, const char *token)
{
	const struct signed_url *u = arg;
	char want[64];
	tok_url_signature(u->path, u->op, u->user, token, u->exp, want);
	size_t n = strlen(want);
	return strlen(u->sig) == n && CRYPTO_memcmp(want, u->sig, n) == 0;
}

/* A signed URL's sandbox and token (into known): its sandbox's, or on the
 * one address of E2B_SANDBOX_URL (no sandbox named), any sandbox's whose
 * token made the signature. 0, or -1 after refusing. */
static int signed_url(struct httpd_req *r, const char *sig, char known[TOK_MAX])
{
	struct e2b *g = r->arg;
	struct e2b_req *q = r->app;
	int bad = 0;
	const char *exp = httpd_query(r, "signature_expiration", &bad);
	struct signed_url u = {
		.path = httpd_query(r, "path", &bad),
		.op = !strcmp(r->method, "GET") ? "read" : "write",
		.user = httpd_query(r, "username", &bad), /* "" when not given */
		.sig = sig,
		.exp = exp ? atoll(exp) : 0,
	};
	char id[24];
	if (bad || !u.path) {
		e2b_reply_error(r, 400, "a signed URL needs its path");
		return -1;
	}
	if (!u.user)
		u.user = "";
	/* Each token seen is tried (4096 at most, as many SHA-256s): a key's
	 * signature, whoever's key it is. */
	int rc = tokens_find(g->tokens, q->id[0] ? q->id : NULL, signature_of, &u, id, known);
	if (rc < 0) {
		e2b_reply_error(r, 401, "invalid signature (or made before cpuos-e2b restarted: "
					"connect to the sandbox and make a new one)");
		return -1;
	}
	if (!q->id[0]) {
		snprintf(q->id, sizeof(q->id), "%.16s", id);
		q->plane = E2B_ENVD;
		q->port = E2B_ENVD_PORT;
	}
	if (u.exp && u.exp < (long long)time(NULL)) {
		e2b_reply_error(r, 401, "signature expired");
		return -1;
	}
	/* What was signed is all it may do: its user (not a Basic header's),
	 * its path (not a multipart part's). */
	if (strlen(u.user) >= sizeof(q->user)) {
		e2b_reply_error(r, 400, "invalid username");
		return -1;
	}
	snprintf(q->user, sizeof(q->user), "%s", *u.user ? u.user : "user");
	q->signed_url = 1;
	return 0;
}

/* The key of a data-plane request: from its access token, or from the
 * token its signed URL was made with. 0, or -1 after refusing. */
static int sandbox_key(struct httpd_req *r)
{
	struct e2b *g = r->arg;
	struct e2b_req *q = r->app;
	const char *tok = httpd_header(r, "X-Access-Token");
	char known[TOK_MAX];
	int bad = 0;
	const char *sig = httpd_query(r, "signature", &bad);
	if (!tok && sig && !bad && r->route->data == e2b_auth_signed) {
		if (signed_url(r, sig, known) < 0)
			return -1;
		tok = known;
	}
	if (!q->id[0]) {
		e2b_reply_error(r, 404, "no sandbox named: send E2b-Sandbox-Id and E2b-Sandbox-Port");
		return -1;
	}
	/* The interpreter's context calls carry only the traffic token,
	 * which is the same token. */
	if (!tok && q->plane == E2B_INTERP)
		tok = httpd_header(r, "E2B-Traffic-Access-Token");
	if (!tok) {
		const char *k = httpd_header(r, "X-API-KEY");
		if (k && *k && strlen(k) < sizeof(q->key)) {
			snprintf(q->key, sizeof(q->key), "%s", k);
			return 0;
		}
		e2b_reply_error(r, 401, "missing access token (X-Access-Token)");
		return -1;
	}
	if (tok_open(g->secret, q->id, tok, q->key, sizeof(q->key)) < 0) {
		e2b_reply_error(r, 401, "invalid access token");
		return -1;
	}
	if (tok != known)
		tokens_put(g->tokens, q->id, tok);
	return 0;
}

static int handle(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	int rc;
	if (r->route->data != e2b_auth_none) {
		if (q->plane != E2B_CONTROL && envd_user(r) < 0)
			return 0;
		/* the control plane's /files: a signed URL on E2B_SANDBOX_URL */
		rc = q->plane == E2B_CONTROL && r->route->data != e2b_auth_signed ? control_key(r)
										  : sandbox_key(r);
		if (rc < 0)
			return 0;
	}
	rc = r->route->handler(r);
	explicit_bzero(q->key, sizeof(q->key));
	return rc;
}

static int upload(struct httpd_req *r, enum httpd_up phase, const char *data, size_t n)
{
	if (phase == HTTPD_UP_BEGIN && (envd_user(r) < 0 || sandbox_key(r) < 0))
		return 0;
	if (r->status && phase != HTTPD_UP_ABORT)
		return 0;
	if (!strcmp(r->route->path, "/process.Process/StreamInput"))
		return proc_stream_input_up(r, phase, data, n);
	return envd_upload(r, phase, data, n);
}

static void finish(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	if (r->route && !strcmp(r->route->path, "/process.Process/StreamInput"))
		proc_stream_input_drop(r);
	else
		envd_upload_drop(r);
	explicit_bzero(q->key, sizeof(q->key));
}

static void start(struct httpd_req *r)
{
	(void)r;
	log_set_tag("e2b");
}

static const struct httpd_ops ops = {
	.start = start,
	.routes = pick_routes,
	.handle = handle,
	.upload = upload,
	.finish = finish,
	.error_body = error_body,
};

int e2b_reply_json(struct httpd_req *r, unsigned status, json_t *body)
{
	return httpd_reply_json(r, status, body);
}

int e2b_reply_error(struct httpd_req *r, unsigned status, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_t *b = json_pack("{s:i, s:s%}", "code", (int)status, "message", msg, strlen(msg));
	return b ? httpd_reply_json(r, status, b) : -ENOMEM;
}

int e2b_reply_api_error(struct httpd_req *r, struct api *a)
{
	long st = api_status(a);
	if (st < 400 || st > 599)
		return e2b_reply_error(r, 502, "%s", api_error(a));
	return e2b_reply_error(r, (unsigned)st, "%s", api_message(a));
}

int e2b_api(struct httpd_req *r, struct api **out)
{
	const struct e2b *g = r->arg;
	const struct e2b_req *q = r->app;
	return api_new(g->cfg->cpuos_url, q->key, out);
}

const char e2b_auth_none[] = "none", e2b_auth_signed[] = "signed";

int e2b_http_start(struct e2b *g, struct httpd **out, char *err, size_t errlen)
{
	const struct httpd_config c = {
		.tcp = g->cfg->listen,
		.routes = e2b_control_routes,
		.ops = &ops,
		.arg = g,
		.app_size = sizeof(struct e2b_req),
		.codes = codes,
		.key_form = "<cpuos API key>",
		.param_max = 200,
		.max_body = (uint64_t)g->cfg->max_body_bytes,
		.max_file = (uint64_t)g->cfg->max_file_bytes,
		.max_conns = MAX_CONNS,
		.idle_s = CONN_IDLE_S,
		.message_max = 768,
		.no_route_open = 1,
	};
	return httpd_start(&c, out, err, errlen);
}
