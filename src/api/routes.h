/*
 * routes: where a request goes. The owner of each sandbox asked about is
 * remembered (a fixed table, a slot per hash of its id) and forgotten when
 * PostgreSQL announces that it moved (NOTIFY cpuos_route, from a trigger
 * on sandboxes.node); the nodes are read again when one changes (NOTIFY
 * cpuos_nodes) and at least every NODES_MAX_AGE_MS, since a lease runs
 * out without a write. While the LISTEN connection is down nothing is
 * remembered: every request asks the store.
 */
#ifndef CPUOS_API_ROUTES_H
#define CPUOS_API_ROUTES_H

#include <stddef.h>

struct capi;
struct routes;

#define ROUTES_SLOTS	   4096
#define NODES_MAX_AGE_MS   1000

/* Starts the LISTEN thread on database url: 0, or -errno with a reason. */
int routes_open(struct capi *a, const char *url, struct routes **out, char *err, size_t errlen);
void routes_close(struct routes *r);

/* Where a request for sandbox id goes: 1 with the URL of its node, which is
 * ready and leased; 0 when no node of its own can answer (no such
 * sandbox, or its node is down: routes_any's node then answers, or takes
 * a stored pause over, and compat, which may be NULL, is what restores
 * that pause, as its record says or else as its node does ("" unknown),
 * for routes_any); -EIO when the store did not
 * answer. */
int routes_owner(struct routes *r, const char *id, char *url, size_t urllen, char compat[24]);
/* The same for the node's port URLs' proxy (its ports_url): 1 with it, 0
 * when no node of its own can answer or it has none, -EIO. */
int routes_owner_ports(struct routes *r, const char *id, char *url, size_t urllen);
/* Any node that is ready, leased and not drained, at random (takes_new
 * 0: a drained one too, when there is no other), one that restores what
 * compat names first (NULL or "": any): 0 with its URL, -ENOENT when there
 * is none, -EIO. */
int routes_any(struct routes *r, int takes_new, const char *compat, char *url, size_t urllen);
/* How many nodes are ready and leased now (the health check's), or -EIO. */
int routes_ready(struct routes *r);

#endif
