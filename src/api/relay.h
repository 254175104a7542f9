/*
 * relay: cpuos-api's listener. Each connection carries one request (its
 * answer ends with Connection: close: the next may be for another node):
 * its head is read and checked as a proxy must (common/http1), routed,
 * and sent on to the node with the cluster secret and the client's
 * address; then its body and the node's answer pass through as they come
 * (a chunked body's end is found as it passes, so no byte of a next
 * request reaches the node); a WebSocket goes on both ways once the node
 * agreed. Creates are the exception: their small JSON body is read whole,
 * so that a node that refuses one (503) can be replaced by another.
 *
 * One thread accepts; each connection has a thread of its own, at most
 * RELAY_MAX_CONNS. A connection idle for RELAY_IDLE_MS ends.
 */
#ifndef CPUOS_API_RELAY_H
#define CPUOS_API_RELAY_H

#include <stddef.h>

#define RELAY_MAX_CONNS	   4096
#define RELAY_IDLE_MS	   (15 * 60 * 1000)
#define RELAY_CREATE_MAX   (1 << 20) /* bytes of a create's body */

struct capi;
struct relay;

/* Listens on HOST:PORT and serves the API, or (ports) port URLs: those
 * go as they are to the proxy of the sandbox's node (cpuosd --url-listen),
 * which checks their token. 0, or -errno with a reason. */
int relay_open(struct capi *a, const char *listen, int ports, struct relay **out, char *err,
	       size_t errlen);
/* Stops accepting, ends every connection and frees r: 0, or -EBUSY when
 * some did not end in time (r and what they use must then stay). */
int relay_close(struct relay *r);

#endif
