/*
 * api_sbx: sandboxes (create, list, get, kill, timeout), templates, API
 * keys and the service routes. Limits are the documented ones of
 * docs/api.md; a value outside them is 422, never clamped.
 */
#include "daemon/api/api.h"

#include "common/clock.h"

#include <dirent.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MIN_IDLE_TIMEOUT_S 10 /* two CPU samples (sbx.h, SBX_METRICS_MS) */
#define VERSION "0.1.0"
#define MAX_TIMEOUT_S (24 * 3600)

int api_health(struct req *r)
{
	return reply_json(r, 200, json_pack("{s:s,s:s}", "status", "ok", "version", VERSION));
}

int api_openapi(struct req *r)
{
	json_t *doc = json_loads(api_openapi_json, 0, NULL);
	if (!doc)
		return reply_error(r, 500, "internal", "the built-in OpenAPI document is broken");
	return reply_json(r, 200, doc);
}

int api_sbx_create(struct req *r)
{
	if (!r->body)
		return reply_error(r, 400, "bad_request", "a JSON body with \"template\" is required");
	const char *tpl = NULL, *on_timeout = NULL, *ckpt = NULL;
	long long timeout = 300, vcpus = 1, mem = 512, disk = 2048, procs = 0, idle = 0;
	int is_public = 0;
	char *env = NULL, *meta = NULL, *net = NULL, *secrets = NULL, err[512];
	if (api_str(r, "template", 500, &tpl) < 0 || api_uint(r, "vcpus", 1, 16, &vcpus) < 0 ||
	    api_uint(r, "memory_mb", 128, 65536, &mem) < 0 || api_uint(r, "disk_mb", 64, 1048576, &disk) < 0 ||
	    api_uint(r, "max_processes", 16, 65536, &procs) < 0 ||
	    api_duration(r, json_object_get(r->body, "timeout"), "timeout", MAX_TIMEOUT_S, &timeout) < 0 ||
	    api_duration(r, json_object_get(r->body, "idle_timeout"), "idle_timeout", MAX_TIMEOUT_S,
			 &idle) < 0 ||
	    api_str_map(r, "env", 64, 1, &env) < 0 || api_str_map(r, "metadata", 64, 0, &meta) < 0 ||
	    api_str(r, "on_timeout", 8, &on_timeout) < 0 || api_str(r, "checkpoint", 127, &ckpt) < 0 ||
	    api_bool(r, "public", &is_public) < 0)
		goto out;
	if (!tpl && !ckpt) {
		reply_error(r, 422, "invalid_argument", "'template' is required");
		goto out;
	}
	if (idle && idle < MIN_IDLE_TIMEOUT_S) {
		reply_error(r, 422, "invalid_argument",
			    "'idle_timeout' must be at least %ds: CPU use is sampled every %d s",
			    MIN_IDLE_TIMEOUT_S, SBX_METRICS_MS / 1000);
		goto out;
	}
	if (on_timeout && strcmp(on_timeout, "pause") && strcmp(on_timeout, "kill")) {
		reply_error(r, 422, "invalid_argument", "'on_timeout' must be \"pause\" or \"kill\"");
		goto out;
	}
	json_t *sj = json_object_get(r->body, "secrets");
	if (sj && !json_is_null(sj) && !(secrets = json_dumps(sj, JSON_COMPACT | JSON_ENCODE_ANY))) {
		reply_error(r, 422, "invalid_argument", "'secrets' is not an array of names");
		goto out;
	}
	json_t *nj = json_object_get(r->body, "network");
	if (nj && !json_is_null(nj) && !(net = sbx_network_text(r->api->sbx, nj, err, sizeof(err)))) {
		reply_error(r, 422, "invalid_argument", "%s", err);
		goto out;
	}
	struct sbx_params p = {
		.template = tpl, .timeout_s = timeout, .vcpus = (unsigned)vcpus,
		.memory_mb = (unsigned)mem, .disk_mb = (unsigned)disk, .max_processes = (unsigned)procs,
		.env_json = env, .metadata_json = meta,
		.kill_on_timeout = on_timeout && !strcmp(on_timeout, "kill"), .checkpoint = ckpt,
		.key_id = r->key_id, .network_json = net, .is_public = is_public,
		.secrets_json = secrets, .idle_timeout_s = idle,
	};
	struct store_sbx row;
	int e = sbx_create(r->api->sbx, r->account, &p, &row, err, sizeof(err));
	if (e == -ENOENT || e == -EINVAL)
		reply_error(r, 422, "invalid_argument", "%s", err);
	else if (e == -ENXIO)
		reply_error(r, 404, "not_found", "%s", err);
	else if (e == -EDQUOT)
		reply_error(r, 429, "quota_exceeded", "%s", err);
	else if (e < 0)
		reply_error(r, 503, "unavailable", "the sandbox did not start: %s", err);
	else {
		reply_json(r, 201, api_sandbox_json(r, &row));
		store_sbx_release(&row);
	}
out:
	free(env);
	free(meta);
	free(net);
	free(secrets);
	return 0;
}

struct meta_filter {
	struct store_kv kv[16];
	size_t n;
	int too_many;
};

static enum MHD_Result collect_meta(void *cls, enum MHD_ValueKind kind, const char *key,
				    const char *value)
{
	(void)kind;
	struct meta_filter *m = cls;
	if (strncmp(key, "metadata.", 9) || !key[9])
		return MHD_YES;
	if (m->n == 16) {
		m->too_many = 1;
		return MHD_NO;
	}
	m->kv[m->n++] = (struct store_kv){ .key = key + 9, .value = value ? value : "" };
	return MHD_YES;
}

int api_sbx_list(struct req *r)
{
	const char *state = req_query(r, "state", NULL);
	const char *lim = req_query(r, "limit", NULL);
	const char *cursor = req_query(r, "cursor", NULL);
	if (state && strcmp(state, "running") && strcmp(state, "paused") && strcmp(state, "stopped") &&
	    strcmp(state, "lost"))
		return reply_error(r, 400, "bad_request", "state must be running, paused, stopped or lost");
	long limit = 50;
	if (lim) {
		char *end;
		limit = strtol(lim, &end, 10);
		if (!*lim || *end || limit < 1 || limit > 100)
			return reply_error(r, 400, "bad_request", "limit must be an integer from 1 to 100");
	}
	struct meta_filter mf = { 0 };
	MHD_get_connection_values(r->con, MHD_GET_ARGUMENT_KIND, collect_meta, &mf);
	if (mf.too_many)
		return reply_error(r, 400, "bad_request", "at most 16 metadata filters");
	struct store_sbx *rows;
	size_t n;
	char next[128];
	int e = store_sbx_list(r->api->store, r->admin ? NULL : r->account, state, mf.kv, mf.n,
			       (size_t)limit, cursor && *cursor ? cursor : NULL, &rows, &n, next,
			       sizeof(next));
	if (e == -EINVAL)
		return reply_error(r, 400, "bad_request", "invalid cursor");
	if (e < 0)
		return reply_error(r, 500, "internal", "cannot list sandboxes");
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, api_sandbox_json(r, &rows[i]));
	store_sbx_free_list(rows, n);
	return reply_json(r, 200, json_pack("{s:o,s:o}", "sandboxes", arr, "next_cursor",
					    next[0] ? json_string(next) : json_null()));
}

int api_sbx_get(struct req *r)
{
	struct store_sbx row;
	if (api_row(r, &row) < 0)
		return 0;
	reply_json(r, 200, api_sandbox_json(r, &row));
	store_sbx_release(&row);
	return 0;
}

int api_sbx_kill(struct req *r)
{
	struct store_sbx row;
	if (api_row(r, &row) < 0)
		return 0;
	char err[256];
	int e = sbx_elsewhere(r->api->sbx, &row, err, sizeof(err));
	store_sbx_release(&row);
	if (e == -EBUSY)
		return reply_error(r, 503, "unavailable", "%s", err);
	if (e < 0)
		return reply_error(r, 421, "misdirected", "%s", err);
	/* -ENOENT: already stopped */
	if (sbx_kill(r->api->sbx, r->param[0], "killed") == -EBUSY)
		return reply_error(r, 503, "unavailable",
				   "sandbox '%s' is busy or moving to another node; try again",
				   r->param[0]);
	return reply_empty(r, 204);
}

int api_sbx_timeout(struct req *r)
{
	long long t = 0;
	if (!r->body || !json_object_get(r->body, "timeout"))
		return reply_error(r, 422, "invalid_argument", "'timeout' is required");
	if (api_duration(r, json_object_get(r->body, "timeout"), "timeout", MAX_TIMEOUT_S, &t) < 0)
		return 0;
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	sbx_put(s);
	if (sbx_set_expiry(r->api->sbx, r->param[0], (long long)time(NULL) + t) < 0)
		return reply_error(r, 409, "conflict", "sandbox '%s' is not running", r->param[0]);
	return api_sbx_get(r);
}

static json_t *key_json(const struct store_key *k)
{
	char when[CLOCK_RFC3339_LEN];
	clock_rfc3339(k->created_at, when, sizeof(when));
	return json_pack("{s:s,s:s,s:s,s:s}", "id", k->id, "name", k->name, "account", k->account,
			 "created_at", when);
}

int api_keys_create(struct req *r)
{
	const char *name = NULL, *account = NULL;
	if (api_str(r, "name", 127, &name) < 0 || api_str(r, "account", 127, &account) < 0)
		return 0;
	if (!name || !*name)
		return reply_error(r, 422, "invalid_argument", "'name' is required");
	char secret[STORE_KEY_SECRET_LEN + 1];
	struct store_key k;
	int e = store_key_create(r->api->store, name, account && *account ? account : name, secret, &k);
	if (e == -EINVAL)
		return reply_error(r, 422, "invalid_argument", "invalid key name or account");
	if (e == -EPERM)
		return reply_error(r, 422, "invalid_argument",
				   "the account '%s' is reserved for the Unix socket; give the key another "
				   "account", STORE_ADMIN_ACCOUNT);
	if (e < 0)
		return reply_error(r, 500, "internal", "cannot create key: %s", strerror(-e));
	json_t *o = key_json(&k);
	json_object_set_new(o, "key", json_string(secret));
	return reply_json(r, 201, o);
}

int api_keys_list(struct req *r)
{
	struct store_key *keys;
	size_t n;
	if (store_key_list(r->api->store, &keys, &n) < 0)
		return reply_error(r, 500, "internal", "cannot list keys");
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, key_json(&keys[i]));
	free(keys);
	return reply_json(r, 200, json_pack("{s:o}", "keys", arr));
}

int api_keys_delete(struct req *r)
{
	if (store_key_delete(r->api->store, r->param[0]) < 0)
		return reply_error(r, 404, "not_found", "no key '%s'", r->param[0]);
	return reply_empty(r, 204);
}
