/*
 * http: cpuosd's face on the servers' library (lib/httpd): one listener on
 * TCP and one on a Unix socket, the API's route table, bearer keys from the
 * store, body limits, and answers in the API's error shape
 * ({"error": {"code", "message"}}). The names the handlers use (struct
 * req, reply_*, req_query, api_routes) stay theirs; thread per connection,
 * so handlers may block while a sandbox works.
 */
#ifndef CPUOS_HTTP_H
#define CPUOS_HTTP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct MHD_Connection;
struct httpd_req;
struct store;
struct sbx_mgr;
struct ports;

struct api_ctx {
	struct store *store;
	struct sbx_mgr *sbx;
	const char *guest_dir;
	size_t max_json_bytes;
	uint64_t max_file_bytes;
	size_t max_output_bytes;
	unsigned conn_timeout_s;   /* idle connection closed after this */
	unsigned max_conns_per_ip; /* TCP connections from one address */
	int answer_ms;             /* how long a request that answers once (stat,
				    * mkdir, ps, a start) waits for the guest
				    * before it answers 504 */
	/* GET /v1/usage prices running time per hour of a reference size,
	 * scaled by the mean of the vCPU and memory ratios to it, and paused
	 * storage per GiB-month (30 days). A reference of 0 charges nothing. */
	double price_usd_per_hour;
	unsigned price_vcpus;
	unsigned price_memory_gib;
	double price_storage_usd_per_gib_month;
	struct ports *ports;       /* port URLs (ports.h), or NULL: none */
	const char *cluster_secret; /* set: a TCP request must show it (header
				     * cpuos-cluster), as cpuos-api does */
	int tcp_fd;                /* > 0: a socket listening on the TCP address already
				    * (bound while root: a port below 1024), taken over */
	/* Where this daemon reaches its own API, for what calls it as a
	 * client (/mcp's tools): NULL where it cannot. */
	const char *self_url;      /* http://HOST:PORT of the TCP listener */
	const char *self_socket;   /* the Unix socket's path */
};

/* One request as handlers see it. */
struct req {
	struct MHD_Connection *con;
	const struct api_ctx *api;
	const char *method;
	int admin;          /* came over the Unix socket */
	char account[128];  /* whose request ("admin" on the socket) */
	char key_id[32];    /* the key it came with; "" on the socket */
	char param[2][80];  /* {id} and {pid} from the path */
	json_t *body;       /* parsed JSON body, if the route takes one */
	void *stream;       /* a streaming upload's own state */
	struct httpd_req *http; /* the library's side of it */
};

/* A route's handler: queues exactly one response (via the reply helpers)
 * and returns 0; a negative return is a bug turned into a 500. */
typedef int (*http_handler)(struct req *r);
/* A streaming upload, in phases: UP_BEGIN once the headers are in (it may
 * already answer, e.g. a bad path, and the body is then dropped), UP_DATA
 * for each piece of the body, UP_END when it must answer. UP_ABORT when the
 * client went away first: release r->stream. */
enum up_phase { UP_BEGIN, UP_DATA, UP_END, UP_ABORT };
typedef int (*http_upload)(struct req *r, enum up_phase phase, const char *data, size_t n);

#define ROUTE_INTERNAL 2
#define ROUTE_QUERY_KEY 2 /* a route's open */ /* a route's admin_only: for the cluster's own calls */

struct route {
	const char *method;
	const char *path; /* "/v1/sandboxes/{id}/files"; {id} and {pid} captured */
	http_handler handler;
	http_upload upload; /* instead of a JSON body */
	int open;           /* no key needed; ROUTE_QUERY_KEY: a key, which may
			     * come as ?access_token= (a browser's WebSocket
			     * cannot send headers) */
	int admin_only;     /* Unix socket only (else 404); ROUTE_INTERNAL: or behind
			     * the cluster secret, with no key */
};

/* The route table, defined by the API modules. */
extern const struct route api_routes[];

struct http;

/* Listens on the TCP address (host:port) and the Unix socket path (either
 * may be NULL). 0 or -errno with a reason in err. */
int http_start(const struct api_ctx *api, const char *tcp, const char *unix_path,
	       struct http **out, char *err, size_t errlen);
void http_stop(struct http *h);

/* Response helpers: each queues one response on r and returns 0. */
/* Overwrites the request's body where it is kept whole (a secret's value
 * was in it); r->body, its JSON, is the caller's to wipe. */
void req_wipe_body(struct req *r);
int reply_json(struct req *r, unsigned status, json_t *body); /* steals body */
int reply_error(struct req *r, unsigned status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
int reply_empty(struct req *r, unsigned status);
/* A body made elsewhere: takes over data (malloc'd, n bytes). */
int reply_buffer(struct req *r, unsigned status, const char *content_type, char *data, size_t n);
/* A streamed body: read is called from the connection's thread until it
 * returns 0 (end) or < 0 (abort); done frees arg. */
int reply_stream(struct req *r, unsigned status, const char *content_type,
		 ssize_t (*read)(void *arg, char *buf, size_t max), void (*done)(void *arg),
		 void *arg);

/* 101 Switching Protocols with headers (name, value pairs, NULL ended),
 * then session(arg, fd, extra, n) in a thread of its own with the
 * connection's socket and the bytes read past the request; drop(arg)
 * when it cannot start. */
int reply_upgrade(struct req *r, const char *const *headers,
		  void (*session)(void *arg, int fd, const char *extra, size_t n),
		  void (*drop)(void *arg), void *arg);
/* A request header, or NULL. */
const char *req_header(struct req *r, const char *name);

/* Whether the client of r has gone away (closed or reset its connection):
 * a handler that waits checks this now and then, so an abandoned request
 * stops pinning its thread and what it started. */
int req_client_gone(struct req *r);
/* The same for a connection descriptor (from req_fd), for stream readers
 * that outlive the handler. */
int req_fd(struct req *r);
int http_fd_gone(int fd);

/* Query parameter name: its value, NULL if absent. A value holding a NUL
 * byte (%00) is reported through *bad, never silently cut. */
const char *req_query(struct req *r, const char *name, int *bad);
/* Each value of a repeated query parameter (httpd_query_each). */
int req_query_each(struct req *r, const char *name, int (*fn)(void *arg, const char *value),
		   void *arg, int *bad);

#endif
