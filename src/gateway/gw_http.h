/*
 * gw_http: the gateway's HTTP server on libmicrohttpd: one TCP listener, a
 * route table, gateway-key authentication before routing, capped bodies,
 * OpenAI-style JSON errors, and answers streamed from a descriptor (the
 * event streams). Thread per connection: handlers block while the model
 * and the sandbox work.
 */
#ifndef CPUOS_GW_HTTP_H
#define CPUOS_GW_HTTP_H

#include "gateway/gw_store.h"

#include <jansson.h>
#include <stddef.h>

struct MHD_Connection;
struct gw;
struct gw_http;

/* One request as handlers see it. */
struct gw_req {
	struct MHD_Connection *con;
	struct gw *g;
	const char *method;
	char key_id[GW_KEY_ID_LEN]; /* the gateway key it came with */
	char param[GW_CONV_MAX + 1]; /* {conv} from the path */
	char *body;                  /* the whole body, NUL-terminated; NULL: none */
	size_t len;
	int status;                  /* the status queued, 0 before */
};

/* A route's handler queues exactly one answer (the reply helpers) and
 * returns 0; a negative return with nothing queued is a 500. */
typedef int (*gw_handler)(struct gw_req *r);

struct gw_route {
	const char *method;
	const char *path; /* "/v1/conversations/{conv}/files": {conv} captured */
	gw_handler fn;
	int open; /* no key needed */
	int file; /* the body is a file (--max-file-bytes), not JSON */
};

/* The route table, defined by gw_api.c. */
extern const struct gw_route gw_routes[];

/* Serves g's routes on listen ("HOST:PORT", IPv4). 0 or -errno with a
 * reason in err. */
int gw_http_start(struct gw *g, const char *listen, struct gw_http **out, char *err,
		  size_t errlen);
/* Stops listening and ends every connection. */
void gw_http_stop(struct gw_http *h);

/* Answers: each queues one and returns 0. */
int gw_reply_json(struct gw_req *r, unsigned status, json_t *body); /* steals body */
int gw_reply_error(struct gw_req *r, unsigned status, const char *type, const char *code,
		   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* A JSON text made elsewhere (copied). */
int gw_reply_text(struct gw_req *r, unsigned status, const char *json);
/* A body read from fd until its end, as it comes (chunked); takes fd. A
 * client that goes away closes fd, which its writer sees as EPIPE. */
int gw_reply_fd(struct gw_req *r, unsigned status, const char *content_type, int fd);

/* A request header's value, NULL if absent. */
const char *gw_header(struct gw_req *r, const char *name);
/* A query parameter's value, NULL if absent or holding a NUL byte. */
const char *gw_query(struct gw_req *r, const char *name);
/* 1 when the client has closed its connection. */
int gw_client_gone(struct gw_req *r);

#endif
