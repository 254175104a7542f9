/*
 * api_net: a sandbox's network policy and its request transformations,
 * read and replaced while it runs (or while it is paused: they apply
 * from the resume).
 */
#include "daemon/api/api.h"

#include "daemon/net/net.h"
#include "daemon/net/rules.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* --- request transformations ------------------------------------------ */

/* {"transformations": [...]}, each literal value shown as "***". */
static int reply_rules(struct req *r, const struct store_sbx *row)
{
	json_t *rules = json_loads(row->transforms_json ? row->transforms_json : "[]", 0, NULL);
	json_t *shown = rules ? rules_redacted(rules) : NULL;
	json_decref(rules);
	if (!shown)
		return reply_error(r, 500, "internal", "its request transformations cannot be read");
	return reply_json(r, 200, json_pack("{s:o}", "transformations", shown));
}

int api_rules_get(struct req *r)
{
	struct store_sbx row;
	if (api_row(r, &row) < 0)
		return 0;
	reply_rules(r, &row);
	store_sbx_release(&row);
	return 0;
}

/* PUT replaces them, POST adds to them (the AI SDK's set and add):
 * {"transformations": [rule, ...]} or the bare array. */
static int set_rules(struct req *r, int add)
{
	json_t *list = json_is_array(r->body) ? r->body : json_object_get(r->body, "transformations");
	if (!r->body || !list)
		return reply_error(r, 400, "bad_request",
				   "a JSON body {\"transformations\": [...]} is required");
	struct store_sbx row;
	if (api_row(r, &row) < 0)
		return 0;
	store_sbx_release(&row);
	char err[512];
	json_t *rules = NULL;
	if (rules_check(list, &rules, err, sizeof(err)) < 0)
		return reply_error(r, 422, "invalid_argument", "%s", err);
	int e = sbx_set_transforms(r->api->sbx, r->param[0], rules, add, err, sizeof(err));
	json_decref(rules);
	if (e == -ESHUTDOWN)
		return reply_error(r, 409, "conflict", "%s", err);
	if (e == -ENOENT && !strncmp(err, "no secret", 9))
		return reply_error(r, 422, "invalid_argument", "%s", err);
	if (e == -ENOENT)
		return reply_error(r, 404, "not_found", "%s", err);
	if (e == -EINVAL)
		return reply_error(r, 422, "invalid_argument", "%s", err);
	if (e < 0)
		return reply_error(r, 503, "unavailable", "%s", err);
	if (api_row(r, &row) < 0)
		return 0;
	reply_rules(r, &row);
	store_sbx_release(&row);
	return 0;
}

int api_rules_put(struct req *r)
{
	return set_rules(r, 0);
}

int api_rules_post(struct req *r)
{
	return set_rules(r, 1);
}
