/*
 * gw_http: the gateway's face on the servers' library (lib/httpd): one TCP
 * listener, its routes (gw_routes, in gw_api.c), gateway keys checked
 * before routing, capped bodies, OpenAI-style JSON errors ({"error":
 * {"message", "type", "param", "code"}}), and answers streamed from a
 * descriptor (the event streams). Thread per connection: handlers block
 * while the model and the sandbox work. Handlers answer with lib/httpd's
 * reply functions, whose type and code are OpenAI's.
 */
#ifndef CPUOS_GW_HTTP_H
#define CPUOS_GW_HTTP_H

#include "gateway/gw_store.h"
#include "lib/httpd.h"

#include <stddef.h>

struct gw;

/* What the gateway keeps of a request (its httpd_req's app); the gateway,
 * struct gw, is the request's arg. */
struct gw_req {
	char key_id[GW_KEY_ID_LEN]; /* the gateway key it came with */
};

/* The route table ({conv} is a conversation id, at most GW_CONV_MAX
 * bytes), defined by gw_api.c. */
extern const struct httpd_route gw_routes[];

/* Serves g's routes on listen ("HOST:PORT", IPv4): 0 with the server in
 * *out (httpd_stop ends it), or -errno with a reason in err. */
int gw_http_start(struct gw *g, const char *listen, struct httpd **out, char *err,
		  size_t errlen);

/* The gateway key r came with. */
const char *gw_key_id(struct httpd_req *r);
/* A JSON text made elsewhere (copied) as the answer. */
int gw_reply_text(struct httpd_req *r, unsigned status, const char *json);
/* A query parameter's value, NULL if absent or holding a NUL byte. */
const char *gw_query(struct httpd_req *r, const char *name);

#endif
