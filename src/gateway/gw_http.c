/*
 * gw_http: the gateway's hooks into lib/httpd. Every request passes, in
 * order: route lookup, authentication (a gateway key), the body cap, then
 * its handler. Every refusal is an OpenAI-style JSON error.
 */
#include "gateway/gw_http.h"

#include "common/log.h"
#include "gateway/gateway.h"
#include "gateway/gw_config.h"

#include <errno.h>
#include <string.h>

/* Each connection is a thread: at most this many, idle ones closed after
 * CONN_IDLE_S (a client keeps its connection between requests). */
#define MAX_CONNS   512u
#define CONN_IDLE_S 120u

/* The names of the server's own refusals, as OpenAI's API has them. */
static const struct httpd_code codes[HTTPD_REFUSALS] = {
	[HTTPD_NO_KEY] = { "authentication_error", "missing_api_key" },
	[HTTPD_BAD_KEY] = { "authentication_error", "invalid_api_key" },
	[HTTPD_NO_ROUTE] = { "invalid_request_error", "not_found" },
	[HTTPD_BAD_METHOD] = { "invalid_request_error", "method_not_allowed" },
	[HTTPD_EXPECT] = { "invalid_request_error", "expectation_failed" },
	[HTTPD_TOO_BIG] = { "invalid_request_error", "payload_too_large" },
	[HTTPD_INTERNAL] = { "server_error", "internal" },
};

static json_t *error_body(const char *type, const char *code, const char *msg)
{
	return gw_error(type, code, "%s", msg);
}

static void on_start(struct httpd_req *r)
{
	(void)r;
	log_set_tag("gateway"); /* this connection's thread */
}

static int on_auth(struct httpd_req *r, const char *key)
{
	struct gw *g = r->arg;
	return gw_key_lookup(g->store, key, ((struct gw_req *)r->app)->key_id);
}

static const struct httpd_ops ops = {
	.start = on_start,
	.auth = on_auth,
	.error_body = error_body,
};

const char *gw_key_id(struct httpd_req *r)
{
	return ((struct gw_req *)r->app)->key_id;
}

int gw_reply_text(struct httpd_req *r, unsigned status, const char *json)
{
	char *text = strdup(json);
	if (!text)
		return -ENOMEM;
	return httpd_reply_buffer(r, status, "application/json", text, strlen(text));
}

const char *gw_query(struct httpd_req *r, const char *name)
{
	int bad = 0;
	const char *v = httpd_query(r, name, &bad);
	return bad ? NULL : v;
}

int gw_http_start(struct gw *g, const char *listen, struct httpd **out, char *err,
		  size_t errlen)
{
	const struct httpd_config c = {
		.tcp = listen,
		.routes = gw_routes,
		.ops = &ops,
		.arg = g,
		.app_size = sizeof(struct gw_req),
		.codes = codes,
		.key_form = "cgw_...",
		.param_max = GW_CONV_MAX + 1,
		.max_body = (uint64_t)g->cfg->max_body_bytes,
		.max_file = (uint64_t)g->cfg->max_file_bytes,
		.max_conns = MAX_CONNS,
		.idle_s = CONN_IDLE_S,
		.message_max = 768,
	};
	return httpd_start(&c, out, err, errlen);
}
