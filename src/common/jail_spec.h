/*
 * jail_spec: what one QEMU's jail lets it see and use, as the runner
 * works it out (vm.c), the root helper carries it on its socket
 * (priv_msg.h) and the jail enforces it (jail/jail.h). A plain struct,
 * so each of those rooms reads it without including another.
 */
#ifndef CPUOS_JAIL_SPEC_H
#define CPUOS_JAIL_SPEC_H

#define JAIL_MAX_PATHS 12

/* A kept QEMU build (runner/qemu_build.h) is <builds>/<id>/ with its
 * binary at <id>/QEMU_BUILD_BIN; id is this many lowercase hex digits.
 * A daemon's builds are its cache directory's QEMU_BUILDS_DIR. */
#define QEMU_BUILDS_DIR "qemu"
#define QEMU_BUILD_BIN "bin/qemu-system-x86_64"
#define QEMU_BUILD_ID_LEN 16

/* A VM restored from a snapshot's RAM file that its QEMU opens read-only
 * maps it through a hard link under this name in its run directory (as
 * ram_ro), linked before QEMU starts; its pauses save the pages written
 * over it (runner/ramdiff.h). Never made the shared group's to write
 * with the rest of the run directory. */
#define JAIL_RAM_BASE "base"

/* One QEMU. */
struct jail_spec {
	const char *name;     /* its cgroup leaf: one path component */
	unsigned vcpus, memory_mb;
	int kvm;              /* it opens /dev/kvm */
	const char *run_dir;  /* read-write, and made the shared group's */
	const char *binary;   /* a QEMU outside /usr (tests, --qemu), or NULL */
	const char *prefix;   /* a kept QEMU build's directory (binary under
			       * it): bound whole, for the modules and
			       * firmware QEMU finds beside its binary */
	/* Files or directories it reads (kernel, initramfs, image, layer
	 * base: readable by others, or refused) and files it writes (a
	 * snapshot's RAM file, which QEMU before 8.2 opens for writing even
	 * to map it private). */
	const char *ro[JAIL_MAX_PATHS];
	const char *rw[JAIL_MAX_PATHS];
	/* A snapshot's RAM file mapped private by a QEMU that opens it
	 * read-only (rom=off): bound read-only, the shared group's to read
	 * and no one's to write. */
	const char *ram_ro;
	const char *tap;      /* a TAP in the network namespace it runs in,
			       * opened by QEMU by name: given to its uid */
	int own_netns;        /* it has no network namespace of the caller's:
			       * it gets an empty one, not the host's */
};

#endif
