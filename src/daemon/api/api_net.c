/*
 * api_net: a sandbox's network policy, read and replaced while it runs
 * (or while it is paused: it applies from the resume).
 */
#include "daemon/api/api.h"

#include "daemon/net/net.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* {"policy": {...}, "refused_packets": N, "allowed_flows": M}; the
 * counts only while it runs (a namespace's counters start at its VM's
 * start). */
static int reply_net(struct req *r, const struct store_sbx *row)
{
	json_t *pol = sbx_network_json(r->api->sbx, row->network_json);
	json_t *o = json_pack("{s:o}", "policy", pol ? pol : json_null());
	struct net_counters c;
	if (sbx_net_counters(r->api->sbx, row->id, &c) == 0) {
		json_object_set_new(o, "refused_packets", json_integer((json_int_t)c.refused_packets));
		json_object_set_new(o, "allowed_flows", json_integer((json_int_t)c.allowed_flows));
	}
	return reply_json(r, 200, o);
}

int api_net_get(struct req *r)
{
	struct store_sbx row;
	if (api_row(r, &row) < 0)
		return 0;
	reply_net(r, &row);
	store_sbx_release(&row);
	return 0;
}

int api_net_put(struct req *r)
{
	if (!r->body)
		return reply_error(r, 400, "bad_request", "a JSON body with the policy is required");
	struct store_sbx row;
	if (api_row(r, &row) < 0)
		return 0;
	store_sbx_release(&row);
	char err[512];
	char *text = sbx_network_text(r->api->sbx, r->body, err, sizeof(err));
	if (!text)
		return reply_error(r, 422, "invalid_argument", "%s", err);
	int e = sbx_set_network(r->api->sbx, r->param[0], text, err, sizeof(err));
	free(text);
	if (e == -ESHUTDOWN)
		return reply_error(r, 409, "conflict", "%s", err);
	if (e == -ENOENT)
		return reply_error(r, 404, "not_found", "%s", err);
	if (e < 0)
		return reply_error(r, 503, "unavailable", "%s", err);
	if (api_row(r, &row) < 0)
		return 0;
	reply_net(r, &row);
	store_sbx_release(&row);
	return 0;
}
