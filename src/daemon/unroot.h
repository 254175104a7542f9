/*
 * unroot: the daemon's side of giving up root (priv_drop), with QEMU
 * jailed by the helper.
 */
#ifndef CPUOS_UNROOT_H
#define CPUOS_UNROOT_H

#include "daemon/config.h"

/* Before any thread: o's state, the cache's writable parts and the
 * socket's directory become the jail range's first id's, the guest's
 * files are staged in the cache if that id could not reach them
 * (o->guest_dir then names the copy), and the process becomes that id
 * with no capabilities. 0, or -errno with the reason logged. */
int unroot(struct config *o);

#endif
