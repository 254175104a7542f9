/*
 * snap: a VM snapshot as a directory. manifest.json says what made it (the
 * exact QEMU, kernel, initramfs, template image, accelerator, vCPU model,
 * machine size and egress CA) and lists its files with sizes and checksums:
 *   state  QEMU's device state; also the RAM when "ram" is "stream"
 *   mem    the guest RAM, page for page, when "ram" is "file"
 *   disk   the writable layer (qcow2)
 *   pages  when "ram" is "diff": the pages the guest wrote (ramdiff.h)
 *   base   when "ram" is "diff": the snapshot RAM file they are over, a
 *          hard link to it (JAIL_RAM_BASE), mapped copy-on-write
 * A snapshot is refused unless everything it was made with is what would
 * restore it. No QEMU here: vm_snap.c drives QEMU, this file keeps the
 * records and copies files.
 */
#ifndef CPUOS_SNAP_H
#define CPUOS_SNAP_H

#include <stddef.h>

#define SNAP_FORMAT 1
#define SNAP_MANIFEST "manifest.json"
/* A manifest is a few hundred bytes; one over this is refused unread. */
#define SNAP_MANIFEST_MAX 65536

/* What a snapshot depends on; the restoring side fills the same struct
 * and snap_check compares. */
struct snap_env {
	char qemu[128];     /* QMP query-version: "7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)" */
	/* The kept QEMU build it ran on (qemu_build.h), which restores it
	 * after the installed QEMU changed; "" when it ran on a QEMU not
	 * kept (cpuos-vm, tests) or in a manifest of a cpuos before, then
	 * found by its version. Not compared: the version is. */
	char qemu_build[17];
	char accel[8];      /* "tcg" or "kvm": CPU state does not cross them */
	char kernel_sha[65], initrd_sha[65];
	/* The template image by content, "sha256:" + hex, so the same image
	 * names itself the same on every host. */
	char template[80];
	/* Its real path, size and mtime: how a cpuos before named it, still
	 * compared when a manifest has that form (not written any more). */
	char template_was[512];
	/* The vCPU model: TCG's (QEMU_TCG_CPU), or under KVM the host's
	 * vendor, family, model and a checksum of its feature flags, since a
	 * VM saved with -cpu host restores only on such a CPU. "" in a
	 * manifest of a cpuos before: not compared. */
	char cpu[96];
	unsigned vcpus, memory_mb, disk_mb;
	int nic;            /* has the network device: its state is in the save */
	/* The egress CA the guest trusts (its id, the SHA-256 of its
	 * certificate): a guest restored under another CA would refuse every
	 * certificate the proxy makes. "" with no network, in a manifest of
	 * a cpuos before, and of a VM taken over after a daemon restart
	 * (QEMU's command line does not say): not compared. */
	char trust[65];
};

enum snap_file { SNAP_STATE, SNAP_MEM, SNAP_DISK, SNAP_PAGES, SNAP_BASE, SNAP_NFILES };

struct snap_manifest {
	struct snap_env env;
	int ram_in_file;   /* RAM in "mem" (QEMU's x-ignore-shared), else in "state" */
	int ram_diff;      /* RAM is "base" with "pages" written over it, and
			    * "state" has no RAM (QMP xen-save-devices-state) */
	/* "state" has no configuration section: the device state of
	 * ram_diff, or any state a QEMU started with MIGRATE_NO_CONFIG
	 * saved (one that resumed such a state: its saves have none
	 * either). Only such a QEMU loads it. */
	int no_config;
	int sealed;        /* every file is checksummed (an immutable snapshot:
			    * checkpoint, fork source, template); a pause
			    * checksums only the state, the rest by size */
	long long created_ns;
	struct {
		char name[64];   /* inside the directory; "" when absent */
		long long size;
		char sha256[65]; /* "" when not checksummed */
		/* How its copy in an object store is encoded ("zstd"); ""
		 * in a directory, where every file is as it is. */
		char encoding[8];
	} files[SNAP_NFILES];
};

/* The environment of files kernel/initrd/template and the vCPU model for
 * e->accel, which is set before (checksums are cached per path, size and
 * mtime, so asking again is cheap). 0 or -errno. */
int snap_env_files(struct snap_env *e, const char *kernel, const char *initrd,
		   const char *template, char *err, size_t errlen);

/* Fills the sizes (and with sealed, checksums) of m's named files in dir
 * and writes the manifest atomically, everything fsync'ed; a base's
 * checksum already in m is kept. 0 or -errno. */
int snap_seal(const char *dir, struct snap_manifest *m, char *err, size_t errlen);

/* Writes m as dir's manifest as it is (sizes and checksums not taken
 * again), atomically and fsync'ed: 0 or -errno. */
int snap_manifest_write(const char *dir, const struct snap_manifest *m, char *err, size_t errlen);

/* m as manifest text (malloc'd, NUL-terminated), or NULL without memory. */
char *snap_manifest_json(const struct snap_manifest *m);

/* Reads manifest text from elsewhere (another host, an object store) into
 * m, as hostile as any: 0, or -EBADMSG/-EPROTO with a reason naming what.
 * Files' names are plain names in a directory, checksums 64 hex digits. */
int snap_manifest_parse(const char *text, size_t len, const char *what, struct snap_manifest *m,
			char *err, size_t errlen);

/* Reads dir's manifest and checks that every file is there with its size,
 * the state's checksum, and with full also the others' (full costs a read
 * of the whole snapshot). 0, or -EBADMSG/-ENOENT/-errno with a reason. */
int snap_load(const char *dir, struct snap_manifest *m, int full, char *err, size_t errlen);

/* Compares what a snapshot needs with what would restore it: 0, or
 * -EPROTO with the first difference in err. An empty now->qemu is not
 * compared (QEMU's version is known once it runs). */
int snap_check(const struct snap_manifest *m, const struct snap_env *now, char *err,
	       size_t errlen);

/* Copies src to dst (created, must not exist): a reflink where the file
 * system has them, else a copy of the data that keeps holes; fsync'ed.
 * 0 or -errno. */
int snap_copy(const char *src, const char *dst);

/* Bytes a file takes on disk (allocated blocks), for storage metering. */
long long snap_file_bytes(const char *path);

/* Removes a snapshot directory's known files and the directory. */
void snap_remove(const char *dir);

#endif
