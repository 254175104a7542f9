/*
 * api: the route table and the checks every handler shares. Validation
 * answers here, so handlers read as the happy path.
 */
#include "daemon/api/api.h"

#include <errno.h>
#include <microhttpd.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/clock.h"
#include "common/duration.h"
#include "common/utf8.h"
#include "daemon/ports/ports.h"

const struct route api_routes[] = {
	{ "GET", "/v1/health", api_health, NULL, 1, 0 },
	{ "POST", "/mcp", api_mcp, NULL, 0, 0 },
	{ "GET", "/v1/openapi.json", api_openapi, NULL, 1, 0 },
	{ "GET", "/v1/templates", api_templates, NULL, 0, 0 },
	{ "POST", "/v1/templates", NULL, api_tpl_create, 0, 0 },
	{ "GET", "/v1/templates/{id}", api_tpl_get, NULL, 0, 0 },
	{ "DELETE", "/v1/templates/{id}", api_tpl_delete, NULL, 0, 0 },
	{ "POST", "/v1/templates/{id}/build", NULL, api_build_create, 0, 0 },
	{ "GET", "/v1/templates/{id}/build", api_build_get, NULL, 0, 0 },
	{ "GET", "/v1/templates/{id}/build/logs", api_build_logs, NULL, 0, 0 },
	{ "DELETE", "/v1/templates/{id}/build", api_build_cancel, NULL, 0, 0 },
	{ "POST", "/v1/keys", api_keys_create, NULL, 0, 1 },
	{ "GET", "/v1/keys", api_keys_list, NULL, 0, 1 },
	{ "DELETE", "/v1/keys/{id}", api_keys_delete, NULL, 0, 1 },
	{ "GET", "/v1/events", api_events, NULL, 0, 0 },
	{ "POST", "/v1/webhooks", api_webhook_create, NULL, 0, 1 },
	{ "GET", "/v1/webhooks", api_webhook_list, NULL, 0, 1 },
	{ "DELETE", "/v1/webhooks/{id}", api_webhook_delete, NULL, 0, 1 },
	{ "GET", "/v1/webhooks/{id}/deliveries", api_webhook_deliveries, NULL, 0, 1 },
	{ "GET", "/v1/nodes", api_nodes_list, NULL, 0, 1 },
	{ "POST", "/v1/nodes/{id}/drain", api_node_drain, NULL, 0, 1 },
	{ "POST", "/v1/nodes/{id}/undrain", api_node_undrain, NULL, 0, 1 },
	{ "POST", "/internal/nodes/{id}/move", api_node_move, NULL, 0, ROUTE_INTERNAL },
	{ "POST", "/internal/sandboxes/{id}/take", api_sbx_take, NULL, 0, ROUTE_INTERNAL },
	{ "POST", "/v1/sandboxes", api_sbx_create, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes", api_sbx_list, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes/metrics", api_sbxs_metrics, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes/{id}/metrics", api_sbx_metrics, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes/{id}/logs", api_sbx_logs, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes/{id}", api_sbx_get, NULL, 0, 0 },
	{ "DELETE", "/v1/sandboxes/{id}", api_sbx_kill, NULL, 0, 0 },
	{ "POST", "/v1/sandboxes/{id}/timeout", api_sbx_timeout, NULL, 0, 0 },
	{ "POST", "/v1/sandboxes/{id}/pause", api_sbx_pause, NULL, 0, 0 },
	{ "POST", "/v1/sandboxes/{id}/resume", api_sbx_resume, NULL, 0, 0 },
	{ "POST", "/v1/sandboxes/{id}/fork", api_sbx_fork, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes/{id}/network", api_net_get, NULL, 0, 0 },
	{ "PUT", "/v1/sandboxes/{id}/network", api_net_put, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes/{id}/network/transformations", api_rules_get, NULL, 0, 0 },
	{ "PUT", "/v1/sandboxes/{id}/network/transformations", api_rules_put, NULL, 0, 0 },
	{ "POST", "/v1/sandboxes/{id}/network/transformations", api_rules_post, NULL, 0, 0 },
	{ "POST", "/v1/sandboxes/{id}/checkpoints", api_ckpt_create, NULL, 0, 0 },
	{ "GET", "/v1/checkpoints", api_ckpt_list, NULL, 0, 0 },
	{ "GET", "/v1/checkpoints/{id}", api_ckpt_get, NULL, 0, 0 },
	{ "DELETE", "/v1/checkpoints/{id}", api_ckpt_delete, NULL, 0, 0 },
	{ "GET", "/v1/usage", api_usage, NULL, 0, 0 },
	{ "GET", "/v1/secrets", api_secret_list, NULL, 0, 0 },
	{ "GET", "/v1/secrets/{id}", api_secret_get, NULL, 0, 0 },
	{ "PUT", "/v1/secrets/{id}", api_secret_put, NULL, 0, 0 },
	{ "DELETE", "/v1/secrets/{id}", api_secret_delete, NULL, 0, 0 },
	{ "GET", "/metrics", api_metrics, NULL, 0, 0 },
	{ "POST", "/v1/sandboxes/{id}/exec", api_exec, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes/{id}/processes", api_procs, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes/{id}/processes/{pid}", api_proc_get, NULL, 0, 0 },
	{ "DELETE", "/v1/sandboxes/{id}/processes/{pid}", api_proc_kill, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes/{id}/processes/{pid}/stream", api_proc_stream, NULL, 0, 0 },
	{ "POST", "/v1/sandboxes/{id}/processes/{pid}/stdin", NULL, api_proc_stdin, 0, 0 },
	{ "POST", "/v1/sandboxes/{id}/processes/{pid}/signal", api_proc_signal, NULL, 0, 0 },
	{ "POST", "/v1/sandboxes/{id}/processes/{pid}/resize", api_proc_resize, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes/{id}/processes/{pid}/ws", api_proc_ws, NULL, ROUTE_QUERY_KEY, 0 },
	{ "POST", "/v1/sandboxes/{id}/processes/{pid}/wait", api_proc_wait, NULL, 0, 0 },
	{ "POST", "/v1/sandboxes/{id}/code", api_code_run, NULL, 0, 0 },
	{ "POST", "/v1/sandboxes/{id}/code/contexts", api_code_ctx_create, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes/{id}/code/contexts", api_code_ctx_list, NULL, 0, 0 },
	{ "POST", "/v1/sandboxes/{id}/code/contexts/{ctx}/restart", api_code_ctx_restart, NULL, 0, 0 },
	{ "DELETE", "/v1/sandboxes/{id}/code/contexts/{ctx}", api_code_ctx_delete, NULL, 0, 0 },
	{ "PUT", "/v1/sandboxes/{id}/files", NULL, api_file_put, 0, 0 },
	{ "GET", "/v1/sandboxes/{id}/files", api_file_get, NULL, 0, 0 },
	{ "DELETE", "/v1/sandboxes/{id}/files", api_file_delete, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes/{id}/files/stat", api_file_stat, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes/{id}/files/list", api_file_list, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes/{id}/files/watch", api_file_watch, NULL, 0, 0 },
	{ "GET", "/v1/sandboxes/{id}/files/archive", api_file_archive_get, NULL, 0, 0 },
	{ "PUT", "/v1/sandboxes/{id}/files/archive", NULL, api_file_archive_put, 0, 0 },
	{ "POST", "/v1/sandboxes/{id}/files/mkdir", api_file_mkdir, NULL, 0, 0 },
	{ "POST", "/v1/sandboxes/{id}/files/rename", api_file_rename, NULL, 0, 0 },
	{ NULL, NULL, NULL, NULL, 0, 0 },
};

int api_row(struct req *r, struct store_sbx *row)
{
	if (store_sbx_get(r->api->store, r->param[0], row) == 0) {
		if (r->admin || !strcmp(row->account, r->account))
			return 0;
		store_sbx_release(row);
	}
	/* Another account's sandbox is indistinguishable from none. */
	reply_error(r, 404, "not_found", "no sandbox '%s'", r->param[0]);
	return -ENOENT;
}

struct sbx *api_sbx(struct req *r)
{
	struct sbx *s;
	char err[512];
	int e = sbx_acquire(r->api->sbx, r->param[0], r->admin ? NULL : r->account, SBX_RESUME, &s,
			    err, sizeof(err));
	if (e == 0)
		return s;
	api_resume_error(r, e, err);
	return NULL;
}

static json_t *rfc3339(long long t)
{
	char buf[CLOCK_RFC3339_LEN];
	return json_string(clock_rfc3339(t, buf, sizeof(buf)));
}

json_t *api_sandbox_json(struct req *r, const struct store_sbx *row)
{
	json_t *meta = json_loads(row->metadata_json ? row->metadata_json : "{}", 0, NULL);
	json_t *o = json_pack("{s:s,s:s,s:s,s:i,s:i,s:i}", "id", row->id, "template", row->template,
			      "state", row->state, "vcpus", row->vcpus, "memory_mb", row->memory_mb,
			      "disk_mb", row->disk_mb);
	json_object_set_new(o, "created_at", rfc3339(row->created_at));
	json_object_set_new(o, "expires_at", rfc3339(row->expires_at));
	json_object_set_new(o, "metadata", meta ? meta : json_object());
	json_object_set_new(o, "end_reason", row->end_reason[0] ? json_string(row->end_reason) : json_null());
	char session[40];
	snprintf(session, sizeof(session), "ses_%s", row->id + 4);
	json_object_set_new(o, "session_id", json_string(session));
	json_object_set_new(o, "on_timeout", json_string(row->on_timeout[0] ? row->on_timeout : "pause"));
	json_object_set_new(o, "idle_timeout",
			    row->idle_timeout_s ? json_integer(row->idle_timeout_s) : json_null());
	json_object_set_new(o, "paused_at", row->paused_at ? rfc3339(row->paused_at) : json_null());
	json_object_set_new(o, "stored",
			    json_boolean(!strcmp(row->state, "paused") && sbx_pause_stored(row)));
	json_object_set_new(o, "parent", row->parent[0] ? json_string(row->parent) : json_null());
	json_object_set_new(o, "node", row->node[0] ? json_string(row->node) : json_null());
	json_t *net = sbx_network_json(r->api->sbx, row->network_json);
	json_object_set_new(o, "network", net ? net : json_null());
	json_object_set_new(o, "public", json_boolean(row->is_public));
	json_t *sec = json_loads(row->secrets_json ? row->secrets_json : "[]", 0, NULL);
	json_object_set_new(o, "secrets", sec ? sec : json_array());
	if (r->api->ports) {
		char url[600], host[256] = "";
		const char *h = MHD_lookup_connection_value(r->con, MHD_HEADER_KIND, "Host");
		if (h && h[0] != '[') /* a name or IPv4 address, without its port */
			snprintf(host, sizeof(host), "%.*s", (int)strcspn(h, ":"), h);
		ports_url(r->api->ports, row->id, host, url, sizeof(url));
		json_object_set_new(o, "port_url", json_string(url));
		json_object_set_new(o, "traffic_token", row->traffic_token[0]
								? json_string(row->traffic_token)
								: json_null());
	} else {
		json_object_set_new(o, "port_url", json_null());
		json_object_set_new(o, "traffic_token", json_null());
	}
	return o;
}

int api_resume_error(struct req *r, int e, const char *err)
{
	if (e == -ENOENT)
		return reply_error(r, 404, "not_found", "%s", err);
	if (e == -ESHUTDOWN)
		return reply_error(r, 409, "conflict", "%s", err);
	if (e == -EREMOTE)
		return reply_error(r, 421, "misdirected", "%s", err);
	if (e == -EDQUOT)
		return reply_error(r, 429, "quota_exceeded", "%s", err);
	if (e == -EBUSY)
		return reply_error(r, 503, "unavailable", "%s", err);
	return reply_error(r, 503, "unavailable", "the sandbox did not resume: %s", err);
}

int api_uint(struct req *r, const char *key, long long min, long long max, long long *out)
{
	json_t *v = r->body ? json_object_get(r->body, key) : NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
		reply_error(r, 422, "invalid_argument", "'%s' must be an integer from %lld to %lld", key,
			    min, max);
		return -1;
	}
	*out = json_integer_value(v);
	return 0;
}

int api_duration(struct req *r, json_t *v, const char *what, long long max_s, long long *out)
{
	if (!v || json_is_null(v))
		return 0;
	long long s = -1;
	if (json_is_integer(v))
		s = json_integer_value(v);
	else if (!json_is_string(v) || duration_parse(json_string_value(v), &s) < 0)
		s = -1;
	if (s < 1 || s > max_s) {
		reply_error(r, 422, "invalid_argument",
			    "'%s' must be a duration like \"90s\", \"30m\", \"2h\" or seconds, from 1s to %llds",
			    what, max_s);
		return -1;
	}
	*out = s;
	return 0;
}

int api_upload_append(struct req *r, int fd, unsigned long long *size, unsigned long long max,
		      const char *what, const char *data, size_t n)
{
	*size += n;
	if (*size > max) {
		reply_error(r, 413, "too_large", "the %s is over the limit of %llu bytes", what, max);
		return -1;
	}
	for (size_t off = 0; off < n;) {
		ssize_t w = write(fd, data + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			reply_error(r, 507, "insufficient_storage", "cannot keep the upload: %s",
				    strerror(errno));
			return -1;
		}
		off += (size_t)w;
	}
	return 0;
}

int api_str(struct req *r, const char *key, size_t max, const char **out)
{
	json_t *v = r->body ? json_object_get(r->body, key) : NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v) || json_string_length(v) > max ||
	    strlen(json_string_value(v)) != json_string_length(v)) {
		reply_error(r, 422, "invalid_argument", "'%s' must be a string of at most %zu bytes", key, max);
		return -1;
	}
	*out = json_string_value(v);
	return 0;
}

int api_bool(struct req *r, const char *key, int *out)
{
	json_t *v = r->body ? json_object_get(r->body, key) : NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v)) {
		reply_error(r, 422, "invalid_argument", "'%s' must be true or false", key);
		return -1;
	}
	*out = json_is_true(v);
	return 0;
}

int api_str_map(struct req *r, const char *key, size_t max, int env, char **out)
{
	json_t *v = r->body ? json_object_get(r->body, key) : NULL;
	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	const char *k;
	json_t *val;
	int ok = json_is_object(v) && json_object_size(v) <= max;
	json_object_foreach(v, k, val) {
		if (!ok)
			break;
		ok = json_is_string(val) && strlen(k) > 0 && strlen(k) <= 256 &&
		     json_string_length(val) <= 4096 &&
		     strlen(json_string_value(val)) == json_string_length(val);
		if (ok && env && strchr(k, '=')) {
			/* "A=B": x would reach the guest as A=B=x, setting A. */
			reply_error(r, 422, "invalid_argument",
				    "'%s': '%s' is not a variable name (no '=' allowed)", key, k);
			return -1;
		}
	}
	if (!ok) {
		reply_error(r, 422, "invalid_argument",
			    "'%s' must be an object of at most %zu string values with names of 1 to 256 bytes",
			    key, max);
		return -1;
	}
	*out = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
	return 0;
}

int api_check_path(struct req *r, const char *what, const char *p)
{
	const char *why = NULL;
	if (!p || !*p)
		why = "is empty";
	else if (p[0] != '/')
		why = "is not absolute";
	else if (strlen(p) > 4096)
		why = "is longer than 4096 bytes";
	else {
		for (const char *c = p; *c && !why;) {
			size_t n = strcspn(c, "/");
			if (n == 2 && c[0] == '.' && c[1] == '.')
				why = "has a '..' component";
			c += n;
			c += *c == '/';
		}
	}
	if (why) {
		reply_error(r, 400, "bad_request", "%s %s", what, why);
		return -1;
	}
	return 0;
}

const char *api_query_path(struct req *r, const char *name)
{
	int bad = 0;
	const char *p = req_query(r, name, &bad);
	if (bad) {
		reply_error(r, 400, "bad_request", "%s holds a NUL byte", name);
		return NULL;
	}
	return api_check_path(r, name, p) < 0 ? NULL : p;
}

int api_env(const char *json, char ***out, size_t *n)
{
	json_t *o = json ? json_loads(json, 0, NULL) : NULL;
	size_t cap = o ? json_object_size(o) : 0;
	char **v = calloc(cap + 1, sizeof(*v));
	*out = NULL;
	*n = 0;
	if (!v) {
		json_decref(o);
		return -ENOMEM;
	}
	const char *k;
	json_t *val;
	size_t i = 0;
	int r = 0;
	json_object_foreach(o, k, val) {
		if (asprintf(&v[i], "%s=%s", k, json_string_value(val)) < 0) {
			v[i] = NULL;
			r = -ENOMEM;
			break;
		}
		i++;
	}
	json_decref(o);
	if (r < 0) {
		api_env_free(v, i);
		return r;
	}
	*out = v;
	*n = i;
	return 0;
}

void api_env_free(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

/* A guest's string as JSON: UTF-8, invalid bytes as U+FFFD. */
static json_t *guest_string(const char *v)
{
	size_t n = strlen(v);
	char *safe = malloc(3 * n + 1);
	if (!safe)
		return NULL;
	utf8_sanitize((const uint8_t *)v, n, safe);
	json_t *j = json_string(safe);
	free(safe);
	return j;
}

static json_t *file_json(const struct sbx_file *f)
{
	json_t *e = json_object();
	if (f->path) {
		json_object_set_new(e, "name", json_string(f->name));
		json_object_set_new(e, "path", json_string(f->path));
	}
	const char *type = S_ISREG(f->mode) ? "file" : S_ISDIR(f->mode) ? "dir"
			   : S_ISLNK(f->mode) ? "symlink" : "other";
	char octal[8], when[CLOCK_RFC3339_LEN];
	snprintf(octal, sizeof(octal), "%04o", f->mode & 07777);
	clock_rfc3339((long long)(f->mtime_ns / 1000000000u), when, sizeof(when));
	json_object_set_new(e, "type", json_string(type));
	json_object_set_new(e, "size", json_integer((json_int_t)f->size));
	json_object_set_new(e, "mode", json_string(octal));
	json_object_set_new(e, "mtime", json_string(when));
	json_object_set_new(e, "uid", json_integer(f->uid));
	json_object_set_new(e, "gid", json_integer(f->gid));
	if (f->target)
		json_object_set_new(e, "target", json_string(f->target));
	return e;
}

static json_t *proc_json(const struct sbx_proc *p)
{
	json_t *o = json_pack("{s:i,s:i,s:o,s:s,s:b}", "pid", p->proc, "os_pid", p->pid, "cmd",
			      guest_string(p->cmd), "state", p->exited ? "exited" : "running",
			      "timed_out", p->timed_out);
	json_object_set_new(o, "pty", json_boolean(p->pty));
	json_object_set_new(o, "exit_code", p->exit_code >= 0 ? json_integer(p->exit_code) : json_null());
	json_object_set_new(o, "signal", p->signal >= 0 ? json_integer(p->signal) : json_null());
	return o;
}

static json_t *ctx_json(const struct sbx_ctx *c)
{
	json_t *o = json_pack("{s:o,s:o,s:o,s:o,s:s}", "id", guest_string(c->id), "language",
			      guest_string(c->language), "cwd", guest_string(c->cwd), "user",
			      guest_string(c->user), "state",
			      c->state == SBX_CTX_IDLE ? "idle" : c->state == SBX_CTX_BUSY ? "busy" : "exited");
	json_object_set_new(o, "pid", c->pid >= 0 ? json_integer(c->pid) : json_null());
	return o;
}

json_t *api_item_json(const struct sbx_item *it)
{
	if (!it)
		return NULL;
	switch (it->kind) {
	case SBX_ITEM_FILE: return file_json(&it->file);
	case SBX_ITEM_PROC: return proc_json(&it->proc);
	case SBX_ITEM_CTX: return ctx_json(&it->ctx);
	}
	return NULL;
}

json_t *api_items_json(struct sop *op)
{
	json_t *a = json_array();
	for (size_t i = 0, n = sop_nitems(op); a && i < n; i++)
		json_array_append_new(a, api_item_json(sop_item(op, i)));
	return a;
}

json_t *api_text(const struct pbuf *b, int cut)
{
	const uint8_t *p = b->data;
	size_t n = b->len;
	/* Cut at the front: do not start inside a character. */
	while (cut && n && (*p & 0xc0) == 0x80)
		p++, n--;
	char *s = malloc(3 * n + 1);
	if (!s)
		return json_string("");
	size_t len = utf8_sanitize(p, n, s);
	json_t *j = json_stringn(s, len);
	free(s);
	return j ? j : json_string("");
}

int api_agent_error(struct req *r, const struct sop_state *st)
{
	unsigned status = 500;
	const char *code = "internal";
	switch (st->err) {
	case ENOENT: case ESRCH: status = 404, code = "not_found"; break;
	case EISDIR: case ENOTDIR: case EINVAL: case ENAMETOOLONG: case ELOOP:
		status = 400, code = "bad_request"; break;
	case EEXIST: case ENOTEMPTY: case EBUSY: status = 409, code = "conflict"; break;
	case EACCES: case EPERM: status = 403, code = "forbidden"; break;
	case EAGAIN: status = 429, code = "quota_exceeded"; break;
	case E2BIG: case EFBIG: status = 413, code = "payload_too_large"; break;
	case ENOSPC: case EDQUOT: status = 507, code = "insufficient_storage"; break;
	case ECONNRESET: case EPIPE: case ECANCELED: case EPROTO:
		status = 503, code = "unavailable"; break;
	default: break;
	}
	return reply_error(r, status, code, "%s", st->msg[0] ? st->msg : strerror(st->err));
}

int api_wait(struct req *r, struct sbx *s, struct sop *op, int want_start, int timeout_ms,
	     struct sop_state *st)
{
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : clock_ms() + timeout_ms;
	for (;;) {
		int64_t left = deadline - clock_ms();
		int slice = left < 1000 ? (int)(left < 0 ? 0 : left) : 1000;
		if (sbx_wait(s, op, want_start, slice, st) == 0)
			return 0;
		if (req_client_gone(r))
			return -ECONNABORTED;
		if (clock_ms() >= deadline)
			return -ETIMEDOUT;
	}
}

int api_wait_error(struct req *r, int e)
{
	if (e == -ECONNABORTED)
		return reply_error(r, 503, "unavailable", "the client went away");
	return reply_error(r, 504, "timeout", "the sandbox did not answer in time");
}

int api_send(struct req *r, struct sbx *s, struct sop *op, const struct sbx_request *q,
	     const char *too_large)
{
	int e = op ? sbx_request(s, op, q) : -ENOMEM;
	if (e == 0)
		return 0;
	if (e == -EAGAIN)
		reply_error(r, 429, "quota_exceeded",
			    "sandbox '%s' has too many operations or streams open", r->param[0]);
	else if (e == -ECONNRESET)
		reply_error(r, 409, "conflict", "sandbox '%s' is not running", r->param[0]);
	else if (e == -E2BIG)
		reply_error(r, 413, "payload_too_large", "%s", too_large);
	else
		reply_error(r, 500, "internal", "out of memory");
	return -1;
}

struct sop_stream {
	struct sbx *s;
	struct sop *op;
	enum api_stream kind;
	int fd;        /* the client's connection */
	char *line;    /* NDJSON: a line made but not all given out yet */
	size_t len, off;
	char text[3 * 16384 + 64]; /* an output chunk's text */
	char b64[16384 / 3 * 4 + 8]; /* a terminal's chunk in base64 */
	/* API_STREAM_WATCH: what to watch again after a pause. */
	struct sbx_mgr *mgr;
	char id[80], account[128];
	int admin, recursive, api_ms;
	char *path;
};

/* One NDJSON line of what o holds (stolen): 0 or -ENOMEM. */
static int put_line(struct sop_stream *st, json_t *o, size_t flags)
{
	char *text = o ? json_dumps(o, JSON_COMPACT | flags) : NULL;
	json_decref(o);
	if (!text)
		return -ENOMEM;
	size_t n = strlen(text);
	char *line = realloc(text, n + 2);
	if (!line) {
		free(text);
		return -ENOMEM;
	}
	line[n] = '\n';
	line[n + 1] = '\0';
	st->line = line;
	st->len = n + 1;
	st->off = 0;
	return 0;
}

/* The lines that close a stream: a command's exit; a code call's end, after
 * the error of a kernel that died under it. */
static int end_lines(struct sop_stream *st, const struct sop_chunk *c)
{
	if (st->kind == API_STREAM_CODE) {
		const struct sbx_code_info *ci = sop_code(st->op);
		json_t *end = json_pack("{s:s}", "type", "end"), *x = api_code_execution(st->op, 0);
		json_object_update(end, x);
		json_decref(x);
		if (!ci || !ci->died)
			return put_line(st, end, 0);
		/* Both lines at once: the kernel's error first. */
		json_t *e = api_code_died_error(ci);
		json_object_set_new(e, "type", json_string("error"));
		char *a = json_dumps(e, JSON_COMPACT), *b = json_dumps(end, JSON_COMPACT);
		json_decref(e);
		json_decref(end);
		int r = a && b && asprintf(&st->line, "%s\n%s\n", a, b) >= 0 ? 0 : -ENOMEM;
		free(a);
		free(b);
		if (r == 0) {
			st->len = strlen(st->line);
			st->off = 0;
		} else {
			st->line = NULL;
		}
		return r;
	}
	const struct sop_state *ss = &c->st;
	json_t *line = json_pack("{s:s,s:o,s:o,s:b}", "type", "exit", "exit_code",
				 ss->exit_code >= 0 ? json_integer(ss->exit_code) : json_null(),
				 "signal", ss->signal >= 0 ? json_integer(ss->signal) : json_null(),
				 "timed_out", ss->timed_out > 0);
	if (line && st->kind == API_STREAM_EXEC)
		json_object_set_new(line, "duration_ms", json_integer(c->duration_ms));
	return put_line(st, line, 0);
}

/* The next line of an NDJSON stream into st->line: 1, 0 at the end,
 * -ETIMEDOUT, -EPIPE (cut short), -ENOMEM. */
static int next_line(struct sop_stream *st)
{
	struct sop_chunk c;
	int r = sop_next(st->s, st->op, &c, st->text, sizeof(st->text), 1000);
	if (r <= 0)
		return r;
	switch (c.kind) {
	case SOP_CHUNK_OUT:
		if (c.pty) {
			/* 16384 bytes at most: their base64 fits b64. */
			EVP_EncodeBlock((unsigned char *)st->b64, (const unsigned char *)st->text,
					(int)c.len);
			r = put_line(st, json_pack("{s:s,s:s}", "type", "pty", "data_base64", st->b64), 0);
			break;
		}
		r = put_line(st, json_pack("{s:s,s:s%}", "type", c.stream ? "stderr" : "stdout",
					   "data", st->text, c.len), 0);
		break;
	case SOP_CHUNK_EVENT:
		r = put_line(st, api_code_event_json(c.event, 1), JSON_ENSURE_ASCII);
		break;
	case SOP_CHUNK_END:
		r = end_lines(st, &c);
		break;
	case SOP_CHUNK_FSEVENT: {
		static const char *const kinds[] = {
			[FS_CREATE] = "create", [FS_WRITE] = "write", [FS_REMOVE] = "remove",
			[FS_RENAME] = "rename", [FS_CHMOD] = "chmod", [FS_OVERFLOW] = "overflow",
		};
		json_t *o = json_pack("{s:s,s:o,s:b}", "type", kinds[c.fs_op], "path",
				      guest_string(st->text), "is_dir", c.is_dir);
		if (o && c.fs_op == FS_OVERFLOW)
			json_object_set_new(o, "reason", json_string("the sandbox had more events "
								     "than the watch could queue"));
		r = put_line(st, o, 0);
		break;
	}
	}
	return r < 0 ? r : 1;
}

/* A watch whose sandbox paused (or whose agent connection was reset):
 * waits for it to run again and watches anew. 1 with the overflow line
 * that says events may have been missed, 0 when the sandbox stopped or the
 * path is gone (the stream ends), -1 when the client left. */
static int rewatch(struct sop_stream *st)
{
	sop_free(st->s, st->op);
	sbx_put(st->s);
	st->s = NULL;
	st->op = NULL;
	for (int tries = 0;; tries++) {
		/* Paused, between states, or running without an agent yet: look
		 * again shortly, longer each time (at most 2 s). */
		if (tries) {
			long ms = tries < 4 ? 250L << (tries - 1) : 2000;
			struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
			nanosleep(&ts, NULL);
		}
		if (http_fd_gone(st->fd))
			return -1;
		struct sbx *s;
		char err[256];
		int e = sbx_acquire(st->mgr, st->id, st->admin ? NULL : st->account, 0, &s, err,
				    sizeof(err));
		if (e == -EAGAIN || e == -EBUSY)
			continue;
		if (e < 0)
			return 0;
		struct sop *op = sop_new(SOP_NDJSON, 0);
		struct sbx_request q = { .kind = SBX_WATCH, .path = st->path, .recursive = st->recursive };
		struct sop_state ss = { 0 };
		e = op ? sbx_request(s, op, &q) : -ENOMEM;
		if (e == 0)
			e = sbx_wait(s, op, 1, st->api_ms, &ss);
		if (e == 0 && ss.started) {
			st->s = s;
			st->op = op;
			json_t *o = json_pack("{s:s,s:o,s:b,s:s}", "type", "overflow", "path",
					      guest_string(st->path), "is_dir", st->recursive, "reason",
					      "the sandbox was paused and resumed: events may have "
					      "been missed");
			return put_line(st, o, 0) < 0 ? -1 : 1;
		}
		sop_free(s, op);
		sbx_put(s);
		if (e == -ECONNRESET || e == -EAGAIN || e == -ETIMEDOUT)
			continue; /* paused again meanwhile, or busy: try again */
		return 0; /* the path is gone */
	}
}

static ssize_t sop_stream_read(void *arg, char *buf, size_t max)
{
	struct sop_stream *st = arg;
	for (;;) {
		if (st->line) {
			size_t k = st->len - st->off < max ? st->len - st->off : max;
			memcpy(buf, st->line + st->off, k);
			st->off += k;
			if (st->off == st->len) {
				free(st->line);
				st->line = NULL;
			}
			return (ssize_t)k;
		}
		int raw = st->kind == API_STREAM_RAW || st->kind == API_STREAM_TAR;
		int n = raw ? (int)sbx_read(st->s, st->op, buf, max, 1000) : next_line(st);
		if (st->kind == API_STREAM_WATCH && (n == -EPIPE || n == 0)) {
			/* The agent's connection reset (a pause): watch again. */
			struct sop_state ss;
			sbx_wait(st->s, st->op, 0, 0, &ss);
			if (ss.err == ECONNRESET && ss.local) { /* ours, not the guest's word */
				n = rewatch(st);
				if (n == 1)
					continue;
			}
			if (n == -EPIPE)
				return -1;
			return n < 0 ? -1 : 0;
		}
		if (n == -EPIPE || n == -ENOMEM)
			return -1; /* cut short: the client must not take it as whole */
		if (n != -ETIMEDOUT) {
			if (raw || n <= 0)
				return n;
			continue;
		}
		/* Nothing new for a second: is anyone still there? */
		if (http_fd_gone(st->fd))
			return -1;
	}
}

static void sop_stream_done(void *arg)
{
	struct sop_stream *st = arg;
	sop_free(st->s, st->op);
	if (st->s)
		sbx_put(st->s);
	free(st->line);
	free(st->path);
	free(st);
}

int api_reply_sop(struct req *r, struct sbx *s, struct sop *op, enum api_stream kind)
{
	struct sop_stream *st = malloc(sizeof(*st));
	if (!st) {
		sop_free(s, op);
		sbx_put(s);
		return reply_error(r, 500, "internal", "out of memory");
	}
	*st = (struct sop_stream){ .s = s, .op = op, .kind = kind, .fd = req_fd(r) };
	const char *type = kind == API_STREAM_RAW ? "application/octet-stream"
			   : kind == API_STREAM_TAR ? "application/x-tar"
						    : "application/x-ndjson";
	return reply_stream(r, 200, type, sop_stream_read, sop_stream_done, st);
}

int api_reply_watch(struct req *r, struct sbx *s, struct sop *op, const char *path, int recursive)
{
	struct sop_stream *st = malloc(sizeof(*st));
	char *p = strdup(path);
	if (!st || !p) {
		free(st);
		free(p);
		sop_free(s, op);
		sbx_put(s);
		return reply_error(r, 500, "internal", "out of memory");
	}
	*st = (struct sop_stream){ .s = s, .op = op, .kind = API_STREAM_WATCH, .fd = req_fd(r),
				   .mgr = r->api->sbx, .admin = r->admin, .recursive = recursive,
				   .api_ms = r->api->answer_ms, .path = p };
	snprintf(st->id, sizeof(st->id), "%s", r->param[0]);
	snprintf(st->account, sizeof(st->account), "%s", r->account);
	return reply_stream(r, 200, "application/x-ndjson", sop_stream_read, sop_stream_done, st);
}
