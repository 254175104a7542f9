/*
 * api_node: the nodes that share the database (cpuosd --node), for the
 * administrator on the Unix socket: listed, drained (no new sandboxes),
 * made ready again, and their sandboxes moved to the other nodes: each is
 * paused, its pause stored and let go of (sbx_move), then handed to the
 * least loaded node by a call to it (POST /internal/sandboxes/{id}/take,
 * resumed there when it ran). The /internal routes are the cluster's own:
 * only behind the cluster secret (or on the Unix socket), which cpuos-api
 * never passes them to.
 */
#include "daemon/api/api.h"

#include "common/clock.h"
#include "common/errbuf.h"
#include "daemon/store/store.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static json_t *node_json(const struct store_node *n)
{
	char joined[CLOCK_RFC3339_LEN], lease[CLOCK_RFC3339_LEN];
	clock_rfc3339(n->joined_at, joined, sizeof(joined));
	clock_rfc3339(n->lease_until_ms / 1000, lease, sizeof(lease));
	json_t *j = json_pack("{s:s, s:s, s:s, s:b, s:I, s:s, s:s, s:i, s:I, s:s, s:s, s:s}",
			      "name", n->name, "url", n->url, "state", n->state, "drained",
			      n->drained, "epoch", (json_int_t)n->epoch, "lease_until", lease,
			      "joined_at", joined, "vcpus", (int)n->vcpus, "memory_mb",
			      (json_int_t)n->memory_mb, "compat", n->compat, "warm", n->warm, "held",
			      n->held);
	/* null until the node has said */
	json_object_set_new(j, "disk_free_mb",
			    n->disk_free_mb < 0 ? json_null() : json_integer(n->disk_free_mb));
	return j;
}

int api_nodes_list(struct req *r)
{
	struct store_node *ns;
	size_t n;
	if (store_node_list(r->api->store, &ns, &n) < 0)
		return reply_error(r, 500, "internal", "cannot list nodes");
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, node_json(&ns[i]));
	free(ns);
	return reply_json(r, 200, json_pack("{s:o}", "nodes", arr));
}

static int drain_move(struct req *r, json_t *node);

static int drain(struct req *r, int on)
{
	int e = store_node_drain(r->api->store, r->param[0], on);
	if (e == -ENOENT)
		return reply_error(r, 404, "not_found", "no node '%s'", r->param[0]);
	if (e < 0)
		return reply_error(r, 500, "internal", "cannot change node '%s'", r->param[0]);
	struct store_node node;
	if (store_node_get(r->api->store, r->param[0], &node) < 0)
		return reply_error(r, 500, "internal", "cannot read node '%s'", r->param[0]);
	return reply_json(r, 200, node_json(&node));
}

int api_node_drain(struct req *r)
{
	int move = 0;
	if (api_bool(r, "move", &move) < 0)
		return 0;
	if (!move)
		return drain(r, 1);
	int e = store_node_drain(r->api->store, r->param[0], 1);
	struct store_node node;
	if (e == -ENOENT)
		return reply_error(r, 404, "not_found", "no node '%s'", r->param[0]);
	if (e < 0 || store_node_get(r->api->store, r->param[0], &node) < 0)
		return reply_error(r, 500, "internal", "cannot drain node '%s'", r->param[0]);
	return drain_move(r, node_json(&node));
}

int api_node_undrain(struct req *r)
{
	return drain(r, 0);
}

/* ---- a node's sandboxes moved to the others (drain with "move") ---- */

#define CALL_MS	   (5 * 60 * 1000) /* a take with its resume (a fetch of the pause) */
#define MOVE_ALL_MS (60 * 60 * 1000) /* a node's every sandbox, one after another */
#define ANSWER_MAX (1 << 20)

struct answer {
	char *p;
	size_t n;
};

static size_t answer_write(char *p, size_t size, size_t nmemb, void *arg)
{
	struct answer *a = arg;
	size_t n = size * nmemb;
	if (a->n + n > ANSWER_MAX)
		return 0; /* too much: the transfer fails */
	char *q = realloc(a->p, a->n + n + 1);
	if (!q)
		return 0;
	memcpy(q + a->n, p, n);
	a->p = q;
	a->n += n;
	a->p[a->n] = '\0';
	return n;
}

/* POSTs body to path at node_url, as the cluster's own call (the secret in
 * its gate's header): 0 with the status in *status and the answer's JSON
 * in *out (NULL when it is none), or -EIO with a reason. */
static int node_post(const char *node_url, const char *path, const char *secret,
		     const char *body, long timeout_ms, long *status, json_t **out, char *err,
		     size_t errlen)
{
	*out = NULL;
	*status = 0;
	char url[600], gate[600];
	snprintf(url, sizeof(url), "%s%s", node_url, path);
	snprintf(gate, sizeof(gate), "cpuos-cluster: %s", secret);
	CURL *c = curl_easy_init();
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
	struct curl_slist *h2 = h ? curl_slist_append(h, gate) : NULL;
	if (!c || !h2) {
		curl_slist_free_all(h);
		curl_easy_cleanup(c);
		return errbuf_set(err, errlen, -EIO, "out of memory");
	}
	h = h2;
	struct answer a = { 0 };
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, answer_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
	CURLcode cr = curl_easy_perform(c);
	int r = 0;
	if (cr != CURLE_OK) {
		r = errbuf_set(err, errlen, -EIO, "%s", curl_easy_strerror(cr));
	} else {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
		*out = a.p ? json_loads(a.p, 0, NULL) : NULL;
	}
	free(a.p);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return r;
}

/* The message of an {"error": {...}} answer, or "". */
static const char *error_message(json_t *j)
{
	const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
	return m ? m : "";
}

/* The node, not this one, that takes new sandboxes, restores what this one
 * made (its compat, or either is unknown), has room for sandbox x (its
 * memory, and on its disk what a create there would need) and is least
 * loaded (the share of its memory held, and half that of its CPUs): 0
 * with its name and URL, or -ENOENT. */
static int least_loaded(struct store *st, const char *not, const struct store_sbx *x, char *name,
			size_t namelen, char *url, size_t urllen)
{
	struct store_node me;
	if (store_node_get(st, not, &me) < 0)
		return -EIO;
	struct store_load *l;
	size_t n;
	if (store_node_loads(st, (long long)(clock_realtime_ns() / 1000000), 0, &l, &n) < 0)
		return -EIO;
	double best = 0;
	int found = 0;
	for (size_t i = 0; i < n; i++) {
		if (!strcmp(l[i].name, not) || !l[i].url[0] ||
		    (me.compat[0] && l[i].compat[0] && strcmp(me.compat, l[i].compat)) ||
		    !store_load_room(&l[i], x->memory_mb, x->disk_mb))
			continue;
		double s = (l[i].memory_mb ? (double)l[i].held_memory_mb / (double)l[i].memory_mb : 0) +
			   (l[i].vcpus ? 0.5 * (double)l[i].held_vcpus / l[i].vcpus : 0);
		if (!found || s < best) {
			best = s;
			found = 1;
			snprintf(name, namelen, "%s", l[i].name);
			snprintf(url, urllen, "%s", l[i].url);
		}
	}
	free(l);
	return found ? 0 : -ENOENT;
}

/* Sandbox id of this node let go of (sbx_move), then given to the least
 * loaded other node, resumed there when it ran here. What became of it. */
static json_t *move_one(struct req *r, const char *id)
{
	const struct api_ctx *api = r->api;
	char err[512], name[64], url[256], path[128];
	int was_running;
	if (sbx_move(api->sbx, id, &was_running, err, sizeof(err)) < 0)
		return json_pack("{s:s, s:n, s:s}", "id", id, "node", "error", err);
	json_t *out = json_pack("{s:s, s:n, s:b}", "id", id, "node", "resumed", 0);
	/* Let go of: any node takes it at its next request, if the handing
	 * below does not. */
	if (!api->cluster_secret) {
		json_object_set_new(out, "note", json_string("no --cluster-secret to hand it on with: "
							     "any node takes it when it is asked for"));
		return out;
	}
	struct store_sbx x;
	if (store_sbx_get(api->store, id, &x) < 0) {
		json_object_set_new(out, "note", json_string("its row cannot be read: any node "
							     "takes it when it is asked for"));
		return out;
	}
	int e = least_loaded(api->store, store_node_name(api->store), &x, name, sizeof(name), url,
			     sizeof(url));
	store_sbx_release(&x);
	if (e < 0) {
		json_object_set_new(out, "note", json_string("no other node has room for it now: "
							     "one takes it when it is asked for"));
		return out;
	}
	snprintf(path, sizeof(path), "/internal/sandboxes/%s/take", id);
	long status;
	json_t *ans;
	e = node_post(url, path, api->cluster_secret,
		      was_running ? "{\"resume\":true}" : "{\"resume\":false}", CALL_MS, &status,
		      &ans, err, sizeof(err));
	const char *failed = json_string_value(json_object_get(ans, "resume_error"));
	if (e == 0 && status == 200) {
		json_object_set_new(out, "node", json_string(name));
		json_object_set_new(out, "resumed", json_boolean(was_running && !failed));
		if (failed) {
			char note[700];
			snprintf(note, sizeof(note), "taken, but paused there: its resume failed (%s)",
				 failed);
			json_object_set_new(out, "note", json_string(note));
		}
	} else {
		char note[700];
		snprintf(note, sizeof(note), "node '%s' did not take it (%s): any node takes it when "
			 "it is asked for", name, e < 0 ? err : error_message(ans));
		json_object_set_new(out, "note", json_string(note));
	}
	json_decref(ans);
	return out;
}

/* Every sandbox of this node moved (move_one), running ones first. */
static json_t *move_all(struct req *r)
{
	json_t *moved = json_array();
	struct store_sbx *rows;
	size_t n;
	if (store_sbx_running(r->api->store, &rows, &n) == 0) {
		for (size_t i = 0; i < n; i++)
			json_array_append_new(moved, move_one(r, rows[i].id));
		store_sbx_free_list(rows, n);
	}
	if (store_sbx_paused(r->api->store, &rows, &n) == 0) {
		for (size_t i = 0; i < n; i++)
			json_array_append_new(moved, move_one(r, rows[i].id));
		store_sbx_free_list(rows, n);
	}
	return moved;
}

/* A drain with {"move": true}: this node's sandboxes moved here, another
 * node's by a call to it. */
static int drain_move(struct req *r, json_t *node)
{
	const struct api_ctx *api = r->api;
	const char *me = store_node_name(api->store);
	if (!strcmp(r->param[0], me)) {
		json_object_set_new(node, "moved", move_all(r));
		return reply_json(r, 200, node);
	}
	struct store_node other;
	char err[512], path[128];
	if (!api->cluster_secret) {
		json_decref(node);
		return reply_error(r, 400, "bad_request",
				   "this node has no --cluster-secret to call node '%s' with: run "
				   "the drain on that node",
				   r->param[0]);
	}
	if (store_node_get(api->store, r->param[0], &other) < 0) {
		json_decref(node);
		return reply_error(r, 500, "internal", "node '%s' is drained, but cannot be read",
				   r->param[0]);
	}
	snprintf(path, sizeof(path), "/internal/nodes/%s/move", other.name);
	long status;
	json_t *ans;
	int e = node_post(other.url, path, api->cluster_secret, "{}", MOVE_ALL_MS, &status, &ans,
			  err, sizeof(err));
	if (e < 0 || status != 200) {
		json_decref(node);
		reply_error(r, 502, "node_unreachable",
			    "node '%s' is drained, but did not move its sandboxes: %s", other.name,
			    e < 0 ? err : error_message(ans));
		json_decref(ans);
		return 0;
	}
	json_object_set(node, "moved", json_object_get(ans, "moved"));
	json_decref(ans);
	return reply_json(r, 200, node);
}

int api_node_move(struct req *r)
{
	if (strcmp(r->param[0], store_node_name(r->api->store)))
		return reply_error(r, 421, "misdirected", "this is node '%s', not '%s'",
				   store_node_name(r->api->store), r->param[0]);
	/* moved away only to stay away: new sandboxes would come back */
	struct store_node me;
	if (store_node_get(r->api->store, r->param[0], &me) < 0)
		return reply_error(r, 500, "internal", "cannot read node '%s'", r->param[0]);
	if (!me.drained)
		return reply_error(r, 409, "conflict",
				   "node '%s' is not drained: drain it first, then move", r->param[0]);
	return reply_json(r, 200, json_pack("{s:o}", "moved", move_all(r)));
}

int api_sbx_take(struct req *r)
{
	int resume = 0;
	if (api_bool(r, "resume", &resume) < 0)
		return 0;
	char err[512], why[512] = "";
	int e = sbx_take(r->api->sbx, r->param[0], err, sizeof(err));
	if (e == -ESTALE || e == -EXDEV)
		return reply_error(r, 409, "conflict", "%s", err);
	if (e < 0)
		return api_resume_error(r, e, err);
	/* Taken, it is this node's whatever its resume does: a failed one
	 * leaves it paused here, and says why. */
	if (resume && sbx_resume(r->api->sbx, r->param[0], why, sizeof(why)) == 0)
		why[0] = '\0';
	struct store_sbx row;
	if (store_sbx_get(r->api->store, r->param[0], &row) < 0)
		return reply_error(r, 404, "not_found", "no sandbox '%s'", r->param[0]);
	json_t *j = api_sandbox_json(r, &row);
	if (why[0])
		json_object_set_new(j, "resume_error", json_string(why));
	reply_json(r, 200, j);
	store_sbx_release(&row);
	return 0;
}
