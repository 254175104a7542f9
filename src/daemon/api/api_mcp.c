/*
 * api_mcp: POST /mcp, cpuos's MCP tools (src/mcp) over MCP's streamable
 * HTTP transport, each message answered with one JSON body (no event
 * stream, no session: every call stands alone). The tools call this
 * daemon's API as the caller, with the caller's own key (on the Unix
 * socket, as the administrator), so they see what that key sees.
 */
#include "daemon/api/api.h"

#include "cli/cpuos/http.h"
#include "mcp/mcp.h"

#include <stdlib.h>
#include <string.h>

int api_mcp(struct req *r)
{
	const char *auth = req_header(r, "Authorization");
	const char *url = r->admin ? r->api->self_socket : r->api->self_url;
	struct api *a = NULL;
	if (!url)
		return reply_error(r, 501, "not_implemented",
				   "this daemon serves no MCP here (it needs its own %s)",
				   r->admin ? "Unix socket" : "TCP listener, without --cluster-secret");
	char full[1100];
	snprintf(full, sizeof(full), "%s%s", r->admin ? "unix://" : "", url);
	/* the caller's key, checked already: the tools act as the caller */
	const char *key = !r->admin && auth && !strncmp(auth, "Bearer ", 7) ? auth + 7 : NULL;
	if (api_new(full, key, &a) < 0)
		return reply_error(r, 500, "internal", "out of memory");
	json_t *answer = mcp_handle(a, r->body);
	api_free(a);
	if (!answer) /* a notification or a client's answer: accepted, nothing to say */
		return reply_empty(r, 202);
	return reply_json(r, 200, answer);
}
