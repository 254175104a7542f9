/*
 * netpolicy: what an egress policy is made of, and the ranges every
 * policy treats alike. The daemon parses and judges policies
 * (daemon/net/policy.h, which includes this); the root helper lays them
 * out as nftables rules (src/priv/priv_net.c). Both read these, so they
 * live below both.
 */
#ifndef CPUOS_NETPOLICY_H
#define CPUOS_NETPOLICY_H

#include "common/cidr.h"

#include <stddef.h>

enum net_mode { NET_ALLOW_ALL, NET_DENY_ALL, NET_CUSTOM };

#define NET_MAX_HOSTS 256
#define NET_MAX_CIDRS 256

struct net_policy {
	enum net_mode mode;
	char **hosts; /* lower case, no trailing dot: "a.b", "*.b" or "*" */
	size_t nhosts;
	struct net_cidr *allow, *deny;
	size_t nallow, ndeny;
};

/* The ranges no policy reaches, and those reached only when named in
 * allowedCIDRs, as nftables' sets take them. */
extern const char *const net_always_denied[];  /* NULL-terminated */
extern const char *const net_private_ranges[]; /* NULL-terminated */

#endif
