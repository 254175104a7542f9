/*
 * place: which node makes a new sandbox. Filter: the nodes ready, leased,
 * not drained, that restore its checkpoint if it has one, with room for
 * its memory (running sandboxes and live reservations counted, against
 * what the node may hold) and on their disk (what its writable layer and
 * a pause of its memory may take, and those of the creates under way
 * there, within what the node last said was free), and starting fewer
 * sandboxes than --node-max-starting at once; score: of K of
 * them sampled at random by the database (only their loads are summed;
 * all nodes' when none of them has room), the least loaded (memory, then
 * CPUs), a node with a free warm VM of the template counted as far less
 * loaded and one holding its template snapshot as less (both of the
 * default size, as nodes say at their lease's renewals); reserve:
 * one transaction with the account's quotas (store_reserve), so parallel
 * creates on several replicas pass neither. A node that filled up
 * meanwhile is dropped and the next best taken. When every node with room
 * is busy starting others, the create waits for one, a while.
 */
#ifndef CPUOS_API_PLACE_H
#define CPUOS_API_PLACE_H

#include <stddef.h>

struct capi;

struct placed {
	char node[64];
	char url[256];
	char rsv[32]; /* the reservation to drop once the node answered */
};

/* What a create asks for: its template ("" from a checkpoint) and size,
 * and for one from a checkpoint what it needs of the node (compat, "":
 * any node). */
struct want {
	char template[64];
	unsigned vcpus, memory_mb, disk_mb;
	char compat[24];
};

/* Places a sandbox w for account, on none of the nodes named in
 * skip[0..nskip): 0 with *out; -EDQUOT (the account's quota) or -ENOSPC
 * (no node can take it now), why in err; -EIO. */
int place(struct capi *a, const char *account, const struct want *w, const char (*skip)[64],
	  size_t nskip, struct placed *out, char *err, size_t errlen);
/* Whether a node's list ("base:2,python" forms) names template with a
 * count above 0 (a bare name counts as one). */
int place_offers(const char *list, const char *template);

#endif
