/*
 * net: a network per sandbox, on the host. Each VM runs in a network
 * namespace of its own, "cpuos-<tag>-<slot>": a TAP device (tap0) to the
 * guest, which has the same address in every namespace (qemu.h), and a
 * veth pair to the host, whose outside end has an address of the slot's
 * own (a /30 of the daemon's range). The egress policy is a nftables
 * table inside the namespace, out of the guest's reach; the host's table
 * forwards the namespaces' traffic to the uplink (masqueraded), and
 * drops what they send to the host itself or to each other, and what
 * would come in unasked.
 *
 * The tag (from the daemon's state directory) keeps the namespaces,
 * interfaces and tables of several daemons on one host apart; each needs
 * a range of its own (--net-range).
 */
#ifndef CPUOS_NET_H
#define CPUOS_NET_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct net_policy;
struct net;
struct priv;

#define NET_NO_SLOT (-1)

/* The slots of range (an IPv4 CIDR of /16 to /24; each slot takes a
 * /30): their number, or -EINVAL with a reason. */
int net_slots(const char *range, char *err, size_t errlen);
/* The networks of the helper priv (priv.h, started with this range and
 * state_dir's tag, which set up the host's part), served by netd (netd.h:
 * the guests' resolver and proxy, the egress CA). 0 or -errno with a
 * reason. */
struct netd;
int net_open(const char *range, const char *state_dir, struct netd *netd, struct priv *priv,
	     struct net **out, char *err, size_t errlen);
/* The tag of the names a daemon with state_dir gives its networks. */
void net_tag(const char *state_dir, char out[8]);
/* Frees n; namespaces and the host table stay for the next daemon
 * (running sandboxes keep their network across a restart). */
void net_close(struct net *n);

/* A namespace with policy p: 0 with *slot, or -errno (-ENOSPC: every slot
 * is taken). */
int net_create(struct net *n, const struct net_policy *p, int *slot, char *err, size_t errlen);
/* Replaces the policy of a live namespace at once (one nft transaction). */
int net_apply(struct net *n, int slot, const struct net_policy *p, char *err, size_t errlen);
/* The egress secrets of slot from now on, account's: a JSON array as
 * secret.h's secret_set_parse reads, but each value sealed (net_seal), in
 * "sealed" for "value"; and its request transformations, as rules.h's
 * rules_parse reads (NULL or empty: none). 0, or -EINVAL with a reason,
 * and then none of either. A secret whose value does not open is left
 * out (netd says so in the log). */
int net_set_secrets(struct net *n, int slot, const char *account, const json_t *secrets,
		    const json_t *rules, char *err, size_t errlen);
/* Secret name's value sealed by netd to account, name, hosts (a JSON
 * array, as secret_hosts_ok gives it) and http: the text into
 * out[outlen], or -errno with a reason. */
int net_seal(struct net *n, const char *account, const char *name, const json_t *hosts, int http,
	     const char *value, char *out, size_t outlen, char *err, size_t errlen);
/* The egress CA's certificate (PEM), which guests must trust, and its
 * SHA-256 (hex): what a template snapshot made with it is known by. */
const char *net_ca_pem(const struct net *n);
const char *net_ca_id(const struct net *n);
/* Removes the namespace; its veth and TAP go with it. */
void net_destroy(struct net *n, int slot);
/* The path QEMU joins (vm_config.netns). */
void net_ns_path(const struct net *n, int slot, char *out, size_t len);

/* Port URLs. The namespace of slot, open (so a slot given to another
 * sandbox meanwhile is not the one dialed): its fd or -ENETUNREACH. Then
 * a TCP connection to the guest's port from there: a blocking descriptor,
 * or -errno: -ECONNREFUSED nothing listens, -ETIMEDOUT after ms. */
int net_ns_open(const struct net *n, int slot);
int net_dial_guest(const struct net *n, int slot, int nsfd, unsigned port, int ms);

/* After a restart: the slots of running sandboxes are taken again, their
 * resolver served under policy p (net_keep, while restoring), then every
 * other namespace of this daemon is removed (net_sweep). */
int net_keep(struct net *n, int slot, const struct net_policy *p, char *err, size_t errlen);
void net_sweep(struct net *n);

struct net_counters {
	uint64_t refused_packets; /* egress the policy refused */
	uint64_t allowed_flows;   /* connections (flows) it let out: the first
				   * packet of each meets the policy, the rest
				   * pass as established */
};
int net_counters(struct net *n, int slot, struct net_counters *c);

#endif
