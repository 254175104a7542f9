/*
 * net: the guest's network, set up once at boot. Loopback always; eth0
 * when the host gave the VM a NIC (cpuos.net=ADDR/PREFIX,GATEWAY on the
 * kernel command line), with the gateway as route and resolver. The
 * address is the same in every sandbox (each has a network namespace of
 * its own on the host), so restores and forks need nothing new here.
 */
#ifndef CPUOS_AGENT_NET_H
#define CPUOS_AGENT_NET_H

void net_up(void);

#endif
