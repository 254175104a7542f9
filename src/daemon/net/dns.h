/*
 * dns: the guests' resolver. Each sandbox's namespace has a UDP socket of
 * ours on the gateway address, port 53 (the guest's resolv.conf names it).
 * A query is answered by its policy (policy.h): a name it does not allow
 * gets REFUSED; an allowed one is asked of the upstream resolver, and the
 * answer keeps only addresses the policy lets the name point to (no
 * rebinding to loopback, link-local, private ranges). Those addresses go
 * into the namespace's "resolved" set, which its egress rules accept:
 * allowedHosts work by name, for as long as the answer lives. AAAA
 * answers are empty (the namespaces have no IPv6), and well-known DNS over
 * HTTPS endpoints are refused unless the policy names them exactly.
 *
 * One thread reads every socket; each query is answered by a thread of
 * its own (at most DNS_MAX_WORKERS at once: past that a query is dropped
 * and the guest asks again).
 */
#ifndef CPUOS_NET_DNS_H
#define CPUOS_NET_DNS_H

#include <stddef.h>
#include <stdint.h>

#define DNS_MAX_WORKERS 32

struct dns;

/* upstream: "ADDR" or "ADDR:PORT" (IPv4), or NULL for /etc/resolv.conf's.
 * nslots: the largest slot number + 1. 0 or -errno with a reason. */
struct priv;
int dns_open(const char *upstream, int nslots, struct priv *priv, struct dns **out, char *err,
	     size_t errlen);
void dns_close(struct dns *d);

/* Serves slot on fd, a UDP socket bound in its namespace nsfd, under
 * policy (JSON text as net_policy_json writes it); both descriptors are
 * the resolver's from here on, whatever the outcome. 0 or -errno. */
int dns_attach(struct dns *d, int slot, int nsfd, int fd, const char *policy, char *err,
	       size_t errlen);
void dns_set_policy(struct dns *d, int slot, const char *policy);
void dns_detach(struct dns *d, int slot);

/* Slot's sandbox has egress secrets (on) or not: with them, every answer
 * opens the proxy to its addresses (web ports only) under allow-all too,
 * where no answer needs to otherwise, so its requests meet the proxy. */
void dns_set_secrets(struct dns *d, int slot, int on);

/* For the proxy, flags: DNS_NAMED when slot's policy allows name and its
 * resolver answered name with addr (IPv4, network order) within that
 * answer's lifetime; DNS_ADDR when the policy lets the guest reach addr
 * as such (allow-all does: any name, or none, may go there). 0: neither. */
#define DNS_ADDR 1
#define DNS_NAMED 2
int dns_check(struct dns *d, int slot, const char *name, uint32_t addr);

/* A guest's query, read (pure: no I/O, no state; fuzzed by
 * tests/fuzz/fuzz_dns.c). */
struct ldns_struct_pkt;
struct net_policy;
enum dns_verdict {
	DNS_DROP,   /* not a query with one question: not worth an answer */
	DNS_REFUSE, /* the policy does not let the guest look the name up */
	DNS_EMPTY,  /* answered with no records: AAAA (no IPv6 here), a class not IN */
	DNS_ASK,    /* the upstream resolver answers it */
};
struct dns_query {
	struct ldns_struct_pkt *pkt; /* the query, parsed */
	char *name;        /* its question's name as ldns writes it (an odd byte
			    * is \DDD), lower case, no final dot; NULL: no memory */
	uint16_t type, cls;
};
/* Reads the datagram buf[0..len) under policy p. DNS_DROP leaves q empty;
 * otherwise q holds the query, and dns_query_release frees it. */
enum dns_verdict dns_query_read(const uint8_t *buf, size_t len, const struct net_policy *p,
				struct dns_query *q);
void dns_query_release(struct dns_query *q);

#endif
