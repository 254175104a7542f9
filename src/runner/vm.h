/*
 * vm: the VM runner. Starts a QEMU microvm for (kernel, template, vCPUs,
 * memory, writable-layer size), waits for the agent, drives its sockets
 * (QMP, console, agent) from one poll loop, and stops it: gracefully through
 * the agent, then QMP quit, then SIGKILL. How the VM ended is a state.
 */
#ifndef CPUOS_VM_H
#define CPUOS_VM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "runner/qemu.h"

struct agentc;
struct qemu_build;
struct launch_ops;

struct vm_config {
	const char *qemu;     /* binary name or path; NULL = qemu-system-x86_64 */
	/* The kept build (qemu_build.h) that qemu is: a restore runs on the
	 * build its snapshot was made with while that one is kept beside it;
	 * NULL: qemu as it is. */
	const struct qemu_build *qemu_build;
	enum qemu_accel accel; /* AUTO probes */
	unsigned vcpus;        /* 0 = 1 */
	unsigned memory_mb;    /* 0 = 512 */
	unsigned disk_mb;      /* writable layer; 0 = 2048 */
	const char *kernel, *initrd, *template;
	const char *run_dir;   /* created; holds sockets, logs, the layer */
	const char *cache_dir; /* cached layer bases */
	const char *hostname;
	const char *extra_append;
	const char *const *extra_args; /* more QEMU arguments (benchmarks) */
	int boot_timeout_ms;   /* 0 = 60 s */
	/* Restore from this snapshot directory instead of booting. When it
	 * is run_dir itself the VM resumes in place (after vm_pause); else
	 * its disk is copied and its RAM maps the snapshot's memory file
	 * copy-on-write, so many VMs share one. vcpus and memory_mb must be
	 * the snapshot's. */
	const char *restore;
	/* After a restore the guest is told the time, gets fresh entropy and
	 * (with new_identity) a new hostname and machine id. */
	int new_identity;
	unsigned generation; /* restores so far, passed to the guest's hooks */
	size_t console_cap;    /* bytes of console.log kept; 0 = 1 MiB */
	/* A network namespace (its path) holding the TAP device NET_TAP: QEMU
	 * runs in it and the guest gets a NIC on that TAP. NULL: no NIC. A
	 * snapshot restores only where it had the same. */
	const char *netns;
	int net_slot;          /* netns's slot (net.h), for launch ops that
				* name namespaces by slot (the helper's) */
	/* The id of the egress CA the guest trusts (snap.h's trust): a
	 * booted guest is given it by the caller, a restored one must have
	 * been saved trusting it. NULL: none. */
	const char *trust;
	/* Who starts, signals and reaps QEMU (launch.h): cpuosd's helper,
	 * which jails it (its own uid, cgroup and mount namespace), or
	 * NULL: vm_launch_direct, and it runs as the caller does. */
	const struct launch_ops *launch;
};

/* The caller's own launch ops: fork and exec (spawn.h), kill, waitpid. */
extern const struct launch_ops vm_launch_direct;

/* Lifecycle. BOOTING -> RUNNING -> one of the ended states. */
enum vm_state {
	VM_BOOTING,
	VM_RUNNING,
	VM_STOPPED,  /* the host stopped it */
	VM_POWEROFF, /* the guest powered off (the agent said so) */
	VM_REBOOT,   /* the guest asked for a reboot; a microVM ends instead */
	VM_PANIC,    /* the guest kernel panicked */
	VM_CRASHED,  /* QEMU died, or the guest reset with no word why */
	VM_PAUSED,   /* saved by vm_pause: QEMU gone, the run directory holds it */
};

struct vm_timings {
	double qemu_ms;  /* spawn -> QMP answering */
	double kernel_ms; /* guest boot clock when the agent started */
	double agent_ms; /* agent start -> agent serving (guest clock) */
	double restore_ms; /* a restore: state loaded, guest running */
	double total_ms; /* spawn -> agent answered P_HELLO; the rest of it is
			  * kernel loading and decompression before the guest
			  * clock starts, and host-side connects */
};

struct vm;

/* Starts the VM and returns once its agent answered, or fails with -errno
 * and one readable line in err (a missing file, QEMU refusing to start, the
 * guest dying during boot, the boot timeout). */
int vm_start(const struct vm_config *cfg, struct vm **out, char *err, size_t errlen);

/* Takes over a VM started earlier (by a daemon that has since restarted):
 * QEMU pid running from run_dir, its jail id held through launch (NULL:
 * vm_launch_direct, which holds none) until it ends; one the ops cannot
 * hold (it runs as root: an unjailed daemon's) is signalled directly.
 * Connects QMP, console and agent anew.
 * 0 or -errno with a reason in err; QEMU is left alone on failure. */
int vm_attach(const char *run_dir, pid_t pid, const struct launch_ops *launch, struct vm **out,
	      char *err, size_t errlen);

/* One round of the poll loop over QMP, console and agent, waiting at most
 * timeout_ms. 0, or -ESHUTDOWN once the VM has ended (its end state settled:
 * this may wait for QEMU to exit). */
int vm_pump(struct vm *vm, int timeout_ms);

/* The same loop split for owners that poll more descriptors themselves and
 * must not block: vm_pollfds fills at most VM_MAX_FDS entries and returns
 * how many; vm_timeout is how long the poll may sleep (-1: no limit; a lost
 * agent connection is retried with a backoff up to 5 s); vm_handle acts on
 * the revents and never waits: 0, or -ESHUTDOWN once QEMU is going, after
 * which vm_wait settles the end state. */
#define VM_MAX_FDS 3
struct pollfd;
int vm_pollfds(struct vm *vm, struct pollfd *fds);
int vm_timeout(const struct vm *vm);
int vm_handle(struct vm *vm, const struct pollfd *fds, int n);
/* Waits up to timeout_ms for QEMU to exit and settles the end state: 1 when
 * it ended, 0 when it still runs. */
int vm_wait(struct vm *vm, int timeout_ms);
/* Closes the agent connection for good (pending operations end with
 * ECONNRESET first): for an owner about to stop the VM. */
void vm_drop_agent(struct vm *vm);
/* How many times a lost agent connection was made anew. */
unsigned vm_reconnects(const struct vm *vm);
/* Pumps until *done, the VM ends (-ESHUTDOWN) or timeout_ms (-ETIMEDOUT). */
int vm_run(struct vm *vm, const int *done, int timeout_ms);

/* Stops the VM: asks the agent to power off and waits grace_ms, then QMP
 * quit, then SIGKILL. The state becomes VM_STOPPED unless it had ended. */
int vm_stop(struct vm *vm, int grace_ms);
/* Pauses the VM into its run directory: the device state (and the RAM
 * when it is not already a file of its own) saved, QEMU gone, every file
 * fsync'ed with a manifest. A vm_start with restore = run_dir resumes it.
 * On failure the VM runs on. 0 or -errno with a reason in err. */
int vm_pause(struct vm *vm, char *err, size_t errlen);
/* Saves the VM into a new directory dir (a sealed snapshot when sealed:
 * every file checksummed) and lets it run on; it stands still while its
 * memory and disk are copied. 0 or -errno; dir is removed on failure. */
int vm_snapshot(struct vm *vm, const char *dir, int sealed, char *err, size_t errlen);

/* Kills QEMU if still running and frees everything; removes the run
 * directory's sockets and the writable layer unless keep is set. */
void vm_free(struct vm *vm, int keep);

/* Removes what a VM keeps in run_dir (sockets, logs, layer, RAM, saved
 * state) and the directory: for a paused VM that is deleted. */
void vm_remove_files(const char *run_dir);

/* Closes the runner's side and frees vm but leaves QEMU running with its
 * run directory, for a later vm_attach. */
void vm_detach(struct vm *vm);

/* Drops the agent connection (pending operations end with ECONNRESET,
 * their processes live on in the guest) and connects anew. 0 or -errno. */
int vm_reconnect(struct vm *vm, char *err, size_t errlen);

/* The agent connection, or NULL after it was lost. */
struct agentc *vm_agent(struct vm *vm);
enum vm_state vm_state(const struct vm *vm);
const char *vm_state_name(enum vm_state s);
/* Why it ended ("kernel panic", "qemu killed by signal 9"), or "". */
const char *vm_reason(const struct vm *vm);
pid_t vm_pid(const struct vm *vm);
const char *vm_run_dir(const struct vm *vm);
const struct vm_timings *vm_timings(const struct vm *vm);
/* The last console bytes kept in memory (up to 64 KiB), NUL-terminated. */
const char *vm_console_tail(const struct vm *vm);

#endif
