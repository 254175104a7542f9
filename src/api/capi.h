/*
 * cpuos-api: a stateless API replica in front of cluster nodes (cpuosd
 * --node), any number of them behind HAProxy, all on one PostgreSQL. It
 * keeps no state of its own: it reads the nodes and the sandboxes' owners
 * from the store, places each create on a node (place.c), and passes every
 * other request through to a node as it is (relay.c): a sandbox's to the
 * node that owns it, an account's (keys, usage, lists, secrets) to any
 * node, since every node answers those from the same database. Bodies and
 * answers stream both ways, never held whole, so NDJSON streams, uploads,
 * downloads and WebSockets need nothing of their own. The nodes' listeners
 * serve only requests that carry the cluster secret, which this adds.
 */
#ifndef CPUOS_CAPI_H
#define CPUOS_CAPI_H

#include "daemon/store/store.h"

#include <stdatomic.h>
#include <stddef.h>

#define CAPI_DB_CONNS_MAX 32

struct routes;

struct capi {
	/* connections to the store, taken in turn (each serialises its
	 * callers); routes has one of its own for LISTEN */
	struct store *db[CAPI_DB_CONNS_MAX];
	unsigned ndb;
	atomic_uint next_db;
	struct routes *routes;
	char secret[256];           /* the cluster secret, sent to nodes */
	struct store_quota quota;   /* an account's, across the cluster */
	unsigned sample;            /* placement's K: nodes compared per create */
	unsigned create_tries;      /* nodes asked before a create fails */
	long long hold_ms;          /* how long a reservation may outlive its create */
	unsigned max_starting;      /* creates under way on one node (0: any number) */
	long long busy_wait_ms;     /* how long a create waits for a node not busy */
	char url_domain[256];       /* the nodes' --url-domain ("": path URLs) */
};

/* A store connection for one call. */
struct store *capi_db(struct capi *a);
/* The wall clock in milliseconds (leases and reservations are in it). */
long long capi_now_ms(void);

#endif
