/*
 * ports: port URLs, a reverse proxy from the host into the guests' ports
 * (sbx.url(port)). It reads a request's head only to learn where it goes:
 *   http://<port>-<hex of the id>.<domain>/...  with a wildcard domain,
 *   http://<listen address>/<id>/<port>/...     without one (the prefix is
 *                                               cut before the guest sees it);
 * then passes the connection on as it is, so streamed responses, uploads
 * and WebSocket need nothing of their own. A connection carries one
 * request (its Connection becomes close, and a byte past its body ends
 * it): the next may be for another sandbox, and every request is checked
 * and cleaned (a WebSocket goes on once the guest agreed). Path URLs share
 * one origin, so a page of one sandbox can read another's in the same
 * browser: the wildcard domain is for previews that users open. A request shows the sandbox's traffic token unless it is public:
 * as the query parameter cpuos_token (answered with a redirect that sets
 * it as a cookie, for browsers), the cookie cpuos_token or the header
 * cpuos-traffic-token; neither reaches the guest. The answers of its own
 * (no such sandbox, no token, nothing listens) are JSON errors as the API's.
 *
 * One thread accepts; each connection has a thread of its own, at most
 * PORTS_MAX_CONNS (PORTS_MAX_PER_IP from one address), ended by 15
 * idle minutes, a peer that reads nothing for 60 s, or ports_close.
 */
#ifndef CPUOS_PORTS_H
#define CPUOS_PORTS_H

#include <stddef.h>

#define PORTS_MAX_CONNS 512
#define PORTS_MAX_PER_IP 64
#define PORTS_TOKEN_PARAM "cpuos_token"
#define PORTS_TOKEN_HEADER "cpuos-traffic-token"

/* Connects to port of sandbox id for a client that shows token (NULL:
 * none): sbx_port_dial's contract (sbx.h), fd NULL only checks. */
typedef int (*ports_dial_fn)(void *arg, const char *id, const char *token, unsigned port,
			     int *fd, char *err, size_t errlen);

struct ports_config {
	const char *listen; /* HOST:PORT */
	int fd;             /* > 0: ports_listen's socket on it (bound while root) */
	const char *domain; /* NAME[:PORT] of the wildcard URLs, or NULL: path URLs */
	const char *public_host; /* HOST:PORT path URLs name instead of the listen
				  * address (a cluster's front), or NULL */
	int no_ip_limit;    /* every connection comes from a cluster's replicas:
			     * no PORTS_MAX_PER_IP */
	ports_dial_fn dial;
	/* Called once a connection dial gave is closed (may be NULL). */
	void (*hangup)(void *arg, const char *id);
	void *arg;
};

struct ports;

/* A socket listening on HOST:PORT ([v6]:PORT), for ports_config.fd: its
 * fd, or -errno with a reason. */
int ports_listen(const char *addr, char *err, size_t errlen);
/* Listens (or takes c->fd) and serves: 0, or -errno with a reason. */
int ports_open(const struct ports_config *c, struct ports **out, char *err, size_t errlen);
/* Stops accepting and ends every connection; ports_url still answers, so
 * the API may go on until it is stopped too. ports_close then frees p
 * (stopping it first if need be). */
void ports_stop(struct ports *p);
void ports_close(struct ports *p);

/* The URLs of sandbox id with "{port}" for the port. api_host: the host
 * the caller reached the API at, named when the proxy listens on every
 * address (0.0.0.0). */
void ports_url(const struct ports *p, const char *id, const char *api_host, char *out,
	       size_t len);

/* The route of a request head (exposed for the unit tests): 1 with the
 * sandbox id, port and the target the guest sees (cut from the path
 * URL's prefix; rest and rest_len, in the head's bytes, not terminated)
 * and *by_path; 0 when the head names no sandbox port. */
struct ports_route {
	char id[32];
	unsigned port;
	int by_path;
	const char *rest;
	size_t rest_len;
};
int ports_route(const char *domain, const char *target, size_t target_len, const char *host,
		struct ports_route *r);

#endif
