/*
 * policy: a sandbox's egress policy, as the API and the AI SDK spell it
 * ({"mode": "allow-all" | "deny-all" | "custom", "allowedHosts": [...],
 * "allowedCIDRs": [...], "deniedCIDRs": [...]}), parsed, checked and
 * judged. Pure: no I/O, so every rule is unit-tested; net.c turns a
 * policy into nftables rules, the resolver asks it about names.
 *
 * What any policy refuses, whatever it says: loopback, link-local
 * (metadata services live there), multicast, reserved and "this network"
 * addresses. Private ranges (RFC 1918, CGNAT, IPv6 ULA) only when an
 * allowedCIDRs entry names them: never through allow-all or a name that
 * resolves there (DNS rebinding). deniedCIDRs win over every allow.
 */
#ifndef CPUOS_NET_POLICY_H
#define CPUOS_NET_POLICY_H

#include "common/cidr.h"
#include "common/netpolicy.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* enum net_mode, struct net_policy, struct net_cidr and the fixed
 * ranges are common/netpolicy.h's and common/cidr.h's: the root helper
 * reads them too. */

/* Parses and checks j: 0, or -EINVAL with one readable line in err (an
 * unknown mode or key, a bad name or CIDR, too many entries, allowedHosts
 * or allowedCIDRs outside custom, a custom policy that allows nothing).
 * deniedCIDRs may go with any mode. *out is freed with net_policy_free. */
int net_policy_parse(const json_t *j, struct net_policy *out, char *err, size_t errlen);
/* The policy in the API's spelling (new reference), or NULL. */
json_t *net_policy_json(const struct net_policy *p);
void net_policy_free(struct net_policy *p);

/* May the guest connect to this address literally (no name)? */
int net_policy_addr_allowed(const struct net_policy *p, int family, const void *addr);
/* May the guest look up this name? Case and a trailing dot do not count;
 * "*.b" matches "a.b" and "x.a.b" but not "b"; "*" matches any name.
 * allow-all: every name; deny-all: none. */
int net_policy_host_allowed(const struct net_policy *p, const char *name);
/* May an allowed name's answer point here? Not to what any policy
 * refuses, nor deniedCIDRs, nor private ranges unless allowedCIDRs names
 * them. */
int net_policy_resolved_allowed(const struct net_policy *p, int family, const void *addr);

#endif
