/*
 * qemu_build: the QEMU builds a host keeps, by content, so that a VM
 * saved by one build restores with that build after the package changed:
 * a QEMU upgrade must not strand 30 days of paused sandboxes (migration
 * between releases of the microvm machine, which has no versioned machine
 * types, is not promised). A kept build is a directory <builds>/<id>/
 * laid out as QEMU's relocatable build looks for its parts next to its
 * binary:
 *   bin/qemu-system-x86_64
 *   lib/x86_64-linux-gnu/qemu/accel-*.so  (Debian builds TCG as a module)
 *   share/qemu/...                        (microvm's qboot, option ROMs)
 *   version                               (as QMP query-version says it)
 * id is 16 hex digits of a SHA-256 over the files' names and contents, so
 * the same build is kept once and another package's firmware is another
 * build. The directory is made whole in a temporary one and renamed.
 */
#ifndef CPUOS_QEMU_BUILD_H
#define CPUOS_QEMU_BUILD_H

#include "common/jail_spec.h" /* QEMU_BUILD_BIN, QEMU_BUILD_ID_LEN */

#include <limits.h>
#include <stddef.h>

struct qemu_build {
	char id[QEMU_BUILD_ID_LEN + 1];
	char dir[PATH_MAX];      /* <builds>/<id> */
	char binary[PATH_MAX + 32]; /* <dir>/bin/qemu-system-x86_64 */
	char version[128];       /* "10.0.2 Debian 1:10.0.2+ds-2+deb13u1~bpo12+1" */
	unsigned major, minor;
};

/* Keeps binary (a path, or a name looked up in PATH) with the modules and
 * firmware beside it (<bin>/../lib/..., <bin>/../share/qemu) in builds,
 * unless that build is kept already, and describes the kept one in b. Runs
 * the binary once (--version). 0 or -errno with a reason: -ENOEXEC when
 * binary is not an ELF file (a wrapper script: not kept). For a daemon's
 * start: one thread at a time (its buffers are static). */
int qemu_build_keep(const char *builds, const char *binary, struct qemu_build *b, char *err,
		    size_t errlen);

/* The kept build id (when id is not empty), else the one whose version is
 * version: 0 with b, or -ENOENT. */
int qemu_build_find(const char *builds, const char *id, const char *version,
		    struct qemu_build *b);

/* qemu_build_find in the directory that holds now (another build kept
 * beside it): 0 with b, or -ENOENT. */
int qemu_build_beside(const struct qemu_build *now, const char *id, const char *version,
		      struct qemu_build *b);

/* id is 16 lowercase hex digits. */
int qemu_build_id_ok(const char *id);

/* It opens a file-backed RAM read-only and maps it private and writable
 * (memory-backend-file's rom=off, QEMU 8.2 and later). */
int qemu_build_has_rom_off(const struct qemu_build *b);

#endif
