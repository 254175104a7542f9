/*
 * wipe: the allocators cpuosd gives jansson and SQLite, which overwrite
 * what they free. A secret's value passes through both on its way to be
 * sealed (net/seal.h), a plaintext one from an older daemon's store through
 * SQLite too; freed as it was, malloc would keep it for whoever reads
 * cpuosd's memory later.
 */
#ifndef CPUOS_DAEMON_WIPE_H
#define CPUOS_DAEMON_WIPE_H

/* Before either library is used (first in main): 0, or -1 when SQLite
 * was already started and kept its own. SQLite's lookaside, per-connection
 * memory it reuses without freeing, is turned off with it. */
int wipe_install(void);

#endif
