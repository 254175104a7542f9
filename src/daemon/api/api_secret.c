/*
 * api_secret: an account's egress secrets (docs/api.md "Egress
 * secrets"). A value goes in and never comes out: answers carry the
 * name, the hosts and the placeholder. It goes to cpuos-netd at once to
 * be sealed (net/seal.h), and only its sealed text is stored.
 */
#include "daemon/api/api.h"

#include "common/clock.h"
#include "daemon/net/seal.h"
#include "daemon/net/secret.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static json_t *secret_json(const struct store_secret *x)
{
	json_t *hosts = json_loads(x->hosts_json, 0, NULL);
	char c[CLOCK_RFC3339_LEN], u[CLOCK_RFC3339_LEN];
	return json_pack("{s:s, s:o, s:b, s:s, s:s, s:s}", "name", x->name, "hosts",
			 hosts ? hosts : json_array(), "allow_http", x->allow_http, "placeholder",
			 x->placeholder, "created_at", clock_rfc3339(x->created_at, c, sizeof(c)),
			 "updated_at", clock_rfc3339(x->updated_at, u, sizeof(u)));
}

/* The secret named in the path: 0 with *x, or -1 after answering. */
static int find(struct req *r, struct store_secret *x)
{
	if (!secret_name_ok(r->param[0]) ||
	    store_secret_get(r->api->store, r->account, r->param[0], x) < 0) {
		reply_error(r, 404, "not_found", "no secret '%.64s'", r->param[0]);
		return -1;
	}
	return 0;
}

int api_secret_list(struct req *r)
{
	struct store_secret *xs = NULL;
	size_t n = 0;
	if (store_secret_list(r->api->store, r->account, NULL, &xs, &n) < 0)
		return reply_error(r, 500, "internal", "cannot read the secrets");
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, secret_json(&xs[i]));
	store_secret_free_list(xs, n);
	return reply_json(r, 200, json_pack("{s:o}", "secrets", a));
}

int api_secret_get(struct req *r)
{
	struct store_secret x;
	if (find(r, &x) < 0)
		return 0;
	reply_json(r, 200, secret_json(&x));
	store_secret_release(&x);
	return 0;
}

static int put(struct req *r)
{
	if (!r->body)
		return reply_error(r, 400, "bad_request",
				   "a JSON body with \"value\" and \"hosts\" is required");
	if (!secret_name_ok(r->param[0]))
		return reply_error(r, 422, "invalid_argument",
				   "a secret's name is an environment variable's: letters, digits "
				   "and '_', not starting with a digit, at most 64");
	const char *value = NULL;
	char err[256];
	json_t *hosts = NULL;
	int allow_http = 0;
	if (api_str(r, "value", SECRET_MAX_VALUE, &value) < 0 ||
	    api_bool(r, "allow_http", &allow_http) < 0)
		return 0;
	if (secret_value_ok(value, err, sizeof(err)) < 0 ||
	    secret_hosts_ok(json_object_get(r->body, "hosts"), &hosts, err, sizeof(err)) < 0)
		return reply_error(r, 422, "invalid_argument", "%s", err);
	unsigned char rnd[16];
	struct store_secret x = { .allow_http = allow_http, .sealed = 1,
				  .updated_at = (long long)time(NULL) };
	snprintf(x.account, sizeof(x.account), "%s", r->account);
	snprintf(x.name, sizeof(x.name), "%.64s", r->param[0]); /* checked: at most 64 */
	/* Sealed by cpuos-netd: this process keeps no value it can read. */
	char sealed[SEAL_TEXT_MAX(SECRET_MAX_VALUE)];
	int e = sbx_secret_seal(r->api->sbx, r->account, x.name, hosts, allow_http, value, sealed,
				sizeof(sealed), err, sizeof(err));
	if (e < 0) {
		json_decref(hosts);
		if (e == -ENOTSUP)
			return reply_error(r, 409, "conflict", "%s", err);
		return reply_error(r, 503, "unavailable", "cannot seal it: %s", err);
	}
	x.value = sealed;
	x.hosts_json = json_dumps(hosts, JSON_COMPACT);
	json_decref(hosts);
	int n = snprintf(x.placeholder, sizeof(x.placeholder), "%s", SECRET_PREFIX);
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd) || !x.hosts_json) {
		free(x.hosts_json);
		return reply_error(r, 503, "unavailable", "out of randomness or memory");
	}
	for (int i = 0; i < 16; i++)
		n += snprintf(x.placeholder + n, sizeof(x.placeholder) - (size_t)n, "%02x", rnd[i]);
	int created = 0;
	e = store_secret_put(r->api->store, &x, &created);
	free(x.hosts_json);
	if (e < 0)
		return reply_error(r, 500, "internal", "cannot store the secret: %s", strerror(-e));
	sbx_secrets_changed(r->api->sbx, r->account);
	struct store_secret now;
	if (find(r, &now) < 0)
		return 0;
	reply_json(r, created ? 201 : 200, secret_json(&now));
	store_secret_release(&now);
	return 0;
}

/* The value is overwritten before the answer goes: where the request's
 * body was kept and in its JSON (freed later, when the request is over,
 * and then by a free that wipes: cpuosd.c). */
int api_secret_put(struct req *r)
{
	int rc = put(r);
	const json_t *v = json_object_get(r->body, "value");
	if (json_is_string(v))
		explicit_bzero((char *)json_string_value(v), json_string_length(v));
	req_wipe_body(r);
	return rc;
}

int api_secret_delete(struct req *r)
{
	if (!secret_name_ok(r->param[0]) ||
	    store_secret_delete(r->api->store, r->account, r->param[0]) < 0)
		return reply_error(r, 404, "not_found", "no secret '%.64s'", r->param[0]);
	sbx_secrets_changed(r->api->sbx, r->account);
	return reply_empty(r, 204);
}
