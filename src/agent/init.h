/*
 * init: PID 1 duties. Boots from the initramfs into the sandbox root, sets up
 * the cgroup layout and finds the agent port; shuts the VM down with a reset.
 * Used only when the agent is PID 1 (not in --listen mode).
 */
#ifndef CPUOS_AGENT_INIT_H
#define CPUOS_AGENT_INIT_H

#include <stdbool.h>
#include <stddef.h>

struct conn;

/* Mounts, root overlay, switch root, hostname, loopback, self-install; on
 * failure it logs one line and resets the VM. Returns the channel fd. */
int init_boot(void);
/* Stops everything and resets the VM; notice is PN_POWEROFF, PN_REBOOT or 0
 * (none, the host asked). Never returns. */
__attribute__((noreturn)) void init_shutdown(struct conn *c, int notice);
/* Re-checks the port after a disconnect: true when a host is there. */
bool init_port_ready(int fd);
/* The value of key=value on the kernel command line into out: 0, or -1
 * when it is not there or does not fit. */
int init_cmdline(const char *key, char *out, size_t len);

#endif
