/*
 * qemu: everything about the QEMU process that is pure policy: which
 * accelerator to use and the exact command line of a microvm guest. No I/O
 * beyond the accelerator probe, so the command line is unit-tested.
 */
#ifndef CPUOS_QEMU_H
#define CPUOS_QEMU_H

#include <stddef.h>

enum qemu_accel { QEMU_ACCEL_AUTO = 0, QEMU_ACCEL_KVM, QEMU_ACCEL_TCG };
/* The vCPU under TCG. No AVX2: QEMU 7.2's TCG AVX2 miscomputes numpy's
 * vectorised sort (argsort of 2000 ints segfaults); with it off numpy
 * picks its SSE/AVX paths, which are right. */
#define QEMU_TCG_CPU "max,-avx2"

struct qemu_config {
	const char *binary;   /* qemu-system-x86_64 */
	enum qemu_accel accel; /* resolved: KVM or TCG */
	unsigned vcpus;
	unsigned memory_mb;
	const char *kernel;   /* bzImage */
	const char *initrd;   /* initramfs carrying cpuos-agent */
	const char *template; /* read-only root image (erofs) */
	const char *scratch;  /* per-VM writable layer (qcow2) */
	const char *run_dir;  /* holds qmp.sock, agent.sock, console.sock */
	const char *hostname;
	const char *extra_append; /* appended to the kernel command line, or NULL */
	unsigned tsc_khz;     /* TCG: the host's TSC rate for the guest, 0 = let it calibrate */
	/* Guest RAM in a file: mapped shared, the file is the RAM (a pause
	 * leaves it in place); not shared, the file is a copy-on-write base
	 * that never changes (a snapshot restored by many VMs). */
	const char *mem_path;
	int mem_shared;
	/* mem_path opened read-only though mapped private and writable
	 * (rom=off, QEMU 8.2 and later): a snapshot's RAM that many VMs map
	 * and none may change. */
	int mem_readonly;
	int incoming;         /* wait for a migration (`-incoming defer`) */
	/* ... of device state only (migrate_save_devices): stopped until a
	 * cont (-S), since that stream says "running". */
	int devices_only;
	/* A state without a configuration section: expects none, and its
	 * own saves write none (MIGRATE_NO_CONFIG). */
	int no_config;
	/* The guest's one NIC (virtio-net) uses this TAP device, which QEMU
	 * finds in its network namespace; NULL: no NIC. */
	const char *tap;
	const char *const *extra_args; /* NULL-terminated, appended as they are */
};

/* Parses "auto", "kvm" or "tcg": 0 or -EINVAL. */
int qemu_accel_parse(const char *s, enum qemu_accel *out);
const char *qemu_accel_name(enum qemu_accel a);

/* Resolves QEMU_ACCEL_AUTO: KVM only when the CPU has hardware virtualization
 * (vmx/svm), the kvm_intel or kvm_amd module drives /dev/kvm and it opens.
 * A paravirtual /dev/kvm (kvm_pvm) cannot run a normal guest kernel, so it
 * does not count. */
enum qemu_accel qemu_accel_probe(void);

/* The host's TSC rate in kHz, measured once (0 when it cannot be). Under
 * TCG the guest reads the host's TSC, but without ACPI it cannot calibrate
 * it and falls back to jiffies, which run slow on a busy host: timeouts in
 * the guest then run late. */
unsigned qemu_host_tsc_khz(void);

/* Builds the argv (NULL-terminated, malloc'd strings in a malloc'd array;
 * free with qemu_argv_free). 0 or -errno (-EINVAL for a bad config). */
int qemu_argv(const struct qemu_config *c, char ***out);
void qemu_argv_free(char **argv);
/* The run directory named in a QEMU command line (its arguments joined by
 * spaces): how a daemon finds the VMs an earlier one left. 0 or -ENOENT. */
int qemu_run_dir_of(const char *cmdline, char *dir, size_t len);

/* Socket paths inside the run directory, shared by the runner and tests. */
#define QEMU_QMP_SOCK "qmp.sock"
#define QEMU_RAM_ID "mem" /* the memory backend's id: its RAM block's name */
#define QEMU_AGENT_SOCK "agent.sock"
#define QEMU_CONSOLE_SOCK "console.sock"

#endif
