/*
 * cidr: an address range of the networks' (net_ names): parsed, written
 * and matched. Pure. The daemon's policies are made of them
 * (daemon/net/policy.h) and the root helper writes them into nftables
 * rules (src/priv/), so they live here, below both.
 */
#ifndef CPUOS_CIDR_H
#define CPUOS_CIDR_H

#include <stddef.h>
#include <stdint.h>

struct net_cidr {
	int family; /* AF_INET or AF_INET6 */
	uint8_t addr[16]; /* network byte order; host bits cleared */
	unsigned prefix;
};

/* "10.0.0.0/8", "1.2.3.4" (/32), "2001:db8::/32", "::1" (/128): 0 or
 * -EINVAL. Host bits set beyond the prefix are refused. */
int net_cidr_parse(const char *s, struct net_cidr *out);
/* "10.0.0.0/8" into out (INET6_ADDRSTRLEN + 4 is enough). */
void net_cidr_format(const struct net_cidr *c, char *out, size_t n);
/* Does c hold addr (family, 4 or 16 bytes in network order)? */
int net_cidr_contains(const struct net_cidr *c, int family, const void *addr);

#endif
