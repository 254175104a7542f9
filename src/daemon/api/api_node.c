/*
 * api_node: the nodes that share the database (cpuosd --node), for the
 * administrator on the Unix socket: listed, drained (no new sandboxes)
 * and made ready again.
 */
#include "daemon/api/api.h"

#include "common/clock.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

static json_t *node_json(const struct store_node *n)
{
	char joined[CLOCK_RFC3339_LEN], lease[CLOCK_RFC3339_LEN];
	clock_rfc3339(n->joined_at, joined, sizeof(joined));
	clock_rfc3339(n->lease_until_ms / 1000, lease, sizeof(lease));
	return json_pack("{s:s, s:s, s:s, s:b, s:I, s:s, s:s, s:i, s:I}", "name", n->name, "url",
			 n->url, "state", n->state, "drained", n->drained, "epoch",
			 (json_int_t)n->epoch, "lease_until", lease, "joined_at", joined, "vcpus",
			 (int)n->vcpus, "memory_mb", (json_int_t)n->memory_mb);
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
	return drain(r, 1);
}

int api_node_undrain(struct req *r)
{
	return drain(r, 0);
}
