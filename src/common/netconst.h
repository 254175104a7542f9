/*
 * netconst: every guest's network, the same in every sandbox: each has a
 * network namespace of its own, so a restored or forked guest keeps its
 * address and its ARP cache stays right. The runner writes these into
 * QEMU's and the guest's command line, the root helper into the
 * namespace's links and rules, the daemon's resolver and proxy listen
 * on them.
 */
#ifndef CPUOS_NETCONST_H
#define CPUOS_NETCONST_H

/* The guest, and the gateway: the TAP device's side, where the host
 * answers DNS and the egress proxy listens. */
#define NET_GUEST_IP "169.254.0.2"
#define NET_GATEWAY_IP "169.254.0.1"
#define NET_GUEST_PREFIX 30 /* as written in qemu.c's cpuos.net= */
#define NET_GUEST_MAC "02:cb:00:00:00:02"
#define NET_GATEWAY_MAC "02:cb:00:00:00:01"

/* The TAP device in the namespace that QEMU's NIC uses. */
#define NET_TAP "tap0"

/* The egress proxy's port in each namespace, on the gateway address. */
#define NET_PROXY_PORT 15080
#define NET_PROXY_PORT_S "15080"

#endif
