/*
 * migrate: QEMU's migration commands as the snapshot code uses them: save
 * a stopped VM's state to a file, load one into a QEMU started with
 * `-incoming defer`. With ignore_shared (QEMU's x-ignore-shared) RAM that
 * lives in a shared memory file is left out of the state: the file is the
 * RAM. Both sides must agree on it, so the snapshot records it.
 */
#ifndef CPUOS_MIGRATE_H
#define CPUOS_MIGRATE_H

#include <stddef.h>

struct qmp;

/* Stops the VM (it stays stopped) and writes its state to path; once it
 * returns 0 QEMU is done with the migration (a cont is taken). 0 or
 * -errno with QEMU's reason in err. */
int migrate_save(struct qmp *q, const char *path, int ignore_shared, int timeout_ms, char *err,
		 size_t errlen);
/* The device state of the VM, stopped by the caller (its RAM read at the
 * same moment), without its RAM, into path (QMP
 * xen-save-devices-state, which any accelerator has): QEMU opens path
 * itself, so it is one the jail sees at that name. The stream has no
 * configuration section and no description: only a QEMU started with
 * MIGRATE_NO_CONFIG loads it, once MIGRATE_DEVICES_TAIL is appended. */
int migrate_save_devices(struct qmp *q, const char *path, char *err, size_t errlen);
#define MIGRATE_NO_CONFIG "migration.send-configuration=off" /* a -global */
/* QEMU_VM_VMDESCRIPTION, a length of 2, "{}": what the loader looks for
 * after the end of the stream (else it says so on stderr). */
#define MIGRATE_DEVICES_TAIL "\x06\x00\x00\x00\x02{}"
#define MIGRATE_DEVICES_TAIL_LEN 7
/* Loads the state at path and runs the guest. */
int migrate_load(struct qmp *q, const char *path, int ignore_shared, int timeout_ms, char *err,
		 size_t errlen);
/* QEMU's version and package as one string ("7.2.22 (Debian ...)"). */
int migrate_qemu_version(struct qmp *q, char *out, size_t outlen, char *err, size_t errlen);

#endif
