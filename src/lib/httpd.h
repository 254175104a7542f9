/*
 * httpd: the HTTP server both cpuosd and cpuos-gateway are, on
 * libmicrohttpd, a thread per connection (handlers block while a sandbox
 * or a model works). Every request passes, in order: the route (a table
 * with {name} captures), its key (a bearer key the program checks; a
 * request on the Unix socket is the local administrator's and needs none),
 * the body's cap, then the program's handler, which answers once through
 * the reply functions. What the server refuses itself is answered in the
 * program's error shape (ops.error_body) with the program's codes.
 * Uploads may stream into the handler; answers may stream out of it.
 */
#ifndef CPUOS_HTTPD_H
#define CPUOS_HTTPD_H

#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct MHD_Connection;
struct httpd;

#define HTTPD_MAX_PARAMS 2   /* {captures} in one route */
#define HTTPD_PARAM_MAX	 260 /* bytes of a capture's buffer (NUL included) */

/* Route flags. */
#define HTTPD_OPEN   1u /* no key needed */
#define HTTPD_LOCAL  2u /* on the Unix socket only: elsewhere no such route (404) */
#define HTTPD_UPLOAD 4u /* the body streams to ops.upload, capped at max_file */
#define HTTPD_FILE   8u /* the body is kept whole, capped at max_file, not max_body */
/* No key needed: on the Unix socket, or on TCP behind a gate (gate_value;
 * the secret is the authority); elsewhere no such route (404). */
#define HTTPD_CLUSTER 16u
/* The key may come as the query parameter access_token instead of the
 * header: for browsers' WebSockets, which cannot send headers. */
#define HTTPD_QUERY_KEY 32u

struct httpd_req;
typedef int (*httpd_handler)(struct httpd_req *r);

struct httpd_route {
	const char *method;
	const char *path;      /* "/v1/sandboxes/{id}/files": each {name} is captured;
				* "*" matches any path */
	unsigned flags;
	httpd_handler handler; /* called unless ops.handle dispatches (then NULL) */
	const void *data;      /* the program's, for ops.handle */
};

/* What the server refuses by itself; the program names each (codes). */
enum httpd_refusal {
	HTTPD_NO_KEY,     /* 401: no "Authorization: Bearer" */
	HTTPD_BAD_KEY,    /* 401: ops.auth refused it */
	HTTPD_NO_ROUTE,   /* 404 */
	HTTPD_BAD_METHOD, /* 405 */
	HTTPD_EXPECT,     /* 417: "Expect" without a body */
	HTTPD_TOO_BIG,    /* 413 */
	HTTPD_INTERNAL,   /* 500: out of memory, a handler that answered nothing */
	HTTPD_REFUSALS
};

/* How an error is named in the program's bodies: type may be NULL. */
struct httpd_code {
	const char *type;
	const char *code;
};

/* A streamed upload, in phases: BEGIN once the headers are in (it may
 * already answer, e.g. a bad path, and the body is then dropped), DATA for
 * each piece of the body, END when it must answer; ABORT when the client
 * went away first (ops.finish tells it). */
enum httpd_up { HTTPD_UP_BEGIN, HTTPD_UP_DATA, HTTPD_UP_END, HTTPD_UP_ABORT };

/* What the program supplies; every hook may be NULL but error_body. */
struct httpd_ops {
	/* A request begins (before its route): set up r->app. */
	void (*start)(struct httpd_req *r);
	/* The table to route r by (its headers are in), NULL for the
	 * config's: a program that serves several sites on one listener
	 * (by Host) picks the site's. */
	const struct httpd_route *(*routes)(struct httpd_req *r);
	/* The bearer key of a request that needs one: 0, or < 0 to refuse it
	 * as invalid. */
	int (*auth)(struct httpd_req *r, const char *key);
	/* Runs r->route (its body, if any, in r->body): instead of calling
	 * route->handler. Answers once and returns 0; a negative return
	 * with nothing answered is a 500. */
	int (*handle)(struct httpd_req *r);
	/* An HTTPD_UPLOAD route's body: < 0 with nothing answered is a 500. */
	int (*upload)(struct httpd_req *r, enum httpd_up phase, const char *data, size_t n);
	/* The request is over (answered, or abandoned): let go of r->app's. */
	void (*finish)(struct httpd_req *r);
	/* The body of an error answer, {"error": ...} in the program's shape;
	 * msg may not be UTF-8. A new reference, or NULL without memory. */
	json_t *(*error_body)(const char *type, const char *code, const char *msg);
};

struct httpd_config {
	const char *tcp;       /* "HOST:PORT" (IPv4) to listen on, or NULL */
	int tcp_fd;            /* > 0: a socket listening on tcp already (bound while the
				* program was root), taken over; else httpd_start listens */
	const char *unix_path; /* a Unix socket made 0600 (its opener is local), or NULL */
	const struct httpd_route *routes; /* ends with a NULL path */
	const struct httpd_ops *ops;
	void *arg;             /* the program's, as r->arg in every request */
	size_t app_size;       /* bytes of r->app, zeroed, per request */
	const struct httpd_code *codes; /* [HTTPD_REFUSALS] */
	const char *key_form;  /* how a 401 shows a key: "<key>" */
	size_t param_max;      /* a capture's bytes with its NUL, at most HTTPD_PARAM_MAX; a
				* longer one matches no route */
	uint64_t max_body;     /* a body kept whole */
	uint64_t max_file;     /* HTTPD_UPLOAD and HTTPD_FILE bodies */
	unsigned max_conns;    /* connections (threads) in all */
	unsigned max_conns_per_ip; /* TCP connections from one address; 0: no limit */
	unsigned idle_s;       /* an idle connection is closed after this */
	size_t message_max;    /* an error message is cut to this many bytes, NUL included */
	/* Set: a TCP request must carry the header gate_header with the value
	 * gate_value (compared in constant time), else 403 not_internal: a
	 * listener only the holders of a shared secret may use. */
	const char *gate_header, *gate_value;
	/* Set: a request that no route takes is 404 (or 405) without a key,
	 * for a program whose routes all check their own credentials. */
	int no_route_open;
};

/* One request as the program sees it. */
struct httpd_req {
	struct MHD_Connection *con;
	const char *method;
	const char *url;
	void *arg;                         /* httpd_config.arg */
	void *app;                         /* app_size bytes of the program's */
	const struct httpd_route *route;   /* NULL until routed */
	int local;                         /* came over the Unix socket */
	char param[HTTPD_MAX_PARAMS][HTTPD_PARAM_MAX]; /* the captures, in order */
	char *body;                        /* a body kept whole, NUL-terminated; NULL: none */
	size_t len;
	int status;                        /* the status answered, 0 before */
};

/* An upgraded connection (a WebSocket): its socket, and the bytes the
 * client sent past its request that were read already. Returns when done;
 * the socket is closed after. */
typedef void (*httpd_session_fn)(void *arg, int fd, const char *extra, size_t n);

/* Listens where c says and serves: 0 with the server in *out, or -errno
 * with a reason in err. c is copied; what it points to (routes, ops,
 * codes, arg) must outlive the server. */
int httpd_start(const struct httpd_config *c, struct httpd **out, char *err, size_t errlen);
/* Stops listening, ends every connection (their finish hooks run) and
 * frees h; the Unix socket is removed. */
void httpd_stop(struct httpd *h);

/* Answers: each queues one answer on r and returns 0 (or -errno when
 * nothing could be queued). */
/* 101 Switching Protocols with headers (name, value pairs, NULL ended),
 * then session(arg, ...) in a thread of its own once the connection is
 * the program's; drop(arg) (may be NULL) when it cannot start. */
int httpd_reply_upgrade(struct httpd_req *r, const char *const *headers, httpd_session_fn session,
			void (*drop)(void *arg), void *arg);
int httpd_reply_json(struct httpd_req *r, unsigned status, json_t *body); /* steals body */
int httpd_reply_error(struct httpd_req *r, unsigned status, const char *type, const char *code,
		      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
int httpd_reply_verror(struct httpd_req *r, unsigned status, const char *type, const char *code,
		       const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));
/* One of the server's own refusals, by its name in the program's codes. */
int httpd_refuse(struct httpd_req *r, enum httpd_refusal why, unsigned status, const char *fmt,
		 ...) __attribute__((format(printf, 4, 5)));
int httpd_reply_empty(struct httpd_req *r, unsigned status);
/* A body made elsewhere: takes over data (malloc'd, n bytes). */
int httpd_reply_buffer(struct httpd_req *r, unsigned status, const char *content_type, char *data,
		       size_t n);
/* A body streamed as read makes it (chunked): read is called from the
 * connection's thread until it returns 0 (the end) or < 0 (cut short);
 * done(arg) then follows, also when nothing could be queued. */
int httpd_reply_stream(struct httpd_req *r, unsigned status, const char *content_type,
		       ssize_t (*read)(void *arg, char *buf, size_t max), void (*done)(void *arg),
		       void *arg);
/* A body read from fd until its end, as it comes, for an event stream
 * (no caching, no buffering by a proxy); takes fd. A client that goes
 * away closes fd, which its writer sees as EPIPE. */
int httpd_reply_fd(struct httpd_req *r, unsigned status, const char *content_type, int fd);
#define HTTPD_SIZE_UNKNOWN UINT64_MAX /* libmicrohttpd's MHD_SIZE_UNKNOWN */
/* The same with a Content-Length of size bytes: an fd that ends before
 * them cuts the connection, which the client sees as a short body, not
 * as the end of one (a download whose source failed). */
int httpd_reply_fd_sized(struct httpd_req *r, unsigned status, const char *content_type, int fd,
			 uint64_t size);

/* A header for r's answer, queued later by one of the reply functions:
 * 0, -ENOSPC past HTTPD_EXTRA_HEADERS, -ENOMEM. Both strings are copied. */
#define HTTPD_EXTRA_HEADERS 4
int httpd_add_header(struct httpd_req *r, const char *name, const char *value);
/* A request header's value, NULL if absent. */
const char *httpd_header(struct httpd_req *r, const char *name);
/* A query parameter's value ("" when it has none), NULL if absent. A
 * value holding a NUL byte (%00) sets *bad (when bad is not NULL): it is
 * never silently cut. */
const char *httpd_query(struct httpd_req *r, const char *name, int *bad);
/* Each value of a query parameter that may repeat (?k=1&k=2), in order:
 * fn's first non-zero return ends the walk and is returned; 0 after all.
 * A value holding a NUL byte (%00) ends it too, reported through *bad. */
int httpd_query_each(struct httpd_req *r, const char *name,
		     int (*fn)(void *arg, const char *value), void *arg, int *bad);
/* Appends the request's query, "?k=v&..." as the client sent it, each
 * part percent-encoded again (nothing when it had none): 0, or -E2BIG
 * when b's cap was reached. */
struct buf;
int httpd_query_string(struct httpd_req *r, struct buf *b);
/* The connection's descriptor (-1 if unknown), for waits that outlive a
 * handler: tcp_peer_gone tells whether its client left. */
int httpd_fd(struct httpd_req *r);
/* Whether the client of r has gone away (closed or reset its connection):
 * a handler that waits checks it, so an abandoned request stops pinning
 * its thread and what it started. */
int httpd_client_gone(struct httpd_req *r);

#endif
