/*
 * launch: the seam between the runner, which knows what QEMU to start
 * (its command line, its files, its network), and whoever starts,
 * signals and reaps it: the caller itself (the runner's
 * vm_launch_direct: fork and exec, kill, waitpid; cpuos-vm, tests,
 * benchmarks) or cpuosd's root helper, which starts it in a jail
 * (priv_launch_ops). An ops table the higher room fills, so the runner
 * includes nothing of the helper's or the jail's.
 */
#ifndef CPUOS_LAUNCH_H
#define CPUOS_LAUNCH_H

#include <stddef.h>
#include <sys/types.h>

struct jail_spec;

enum launch_mem { LAUNCH_PAGEMAP, LAUNCH_MEM };

/* One QEMU to start. */
struct launch_spec {
	char *const *argv;      /* NULL-terminated; argv[0] is QEMU */
	int logfd;              /* its stdout and stderr (borrowed); stdin is /dev/null */
	const char *netns;      /* the network namespace it runs in (a path), or NULL */
	int net_slot;           /* that namespace's slot (the helper names
				 * namespaces by slot), -1 with none */
	const struct jail_spec *jail; /* what its jail lets it see: for ops
				       * that jail (jails set), else NULL */
};

struct launch_ops {
	/* Starts s in a session of its own with an empty environment: 0
	 * with *pid, *uid (the jail id it runs as, 0 when not jailed) and
	 * *pidfd (the caller's to close: readable once it exited; -1 where
	 * the kernel has no pidfds), or -errno with a reason in err. */
	int (*spawn)(void *ctx, const struct launch_spec *s, pid_t *pid, uid_t *uid, int *pidfd,
		     char *err, size_t errlen);
	/* sig to pid, one it started or holds: 0 or -errno. */
	int (*signal)(void *ctx, pid_t pid, int sig);
	/* One it started, without waiting (the runner asks once its pidfd
	 * turned readable, or now and then without one): 1 with its wait
	 * status, 0 while it runs, -errno (-ECHILD: not its child). */
	int (*reap)(void *ctx, pid_t pid, int *status);
	/* One found running (a daemon restarted): its jail id held until
	 * release, 0 with *uid, or -errno (nothing held). NULL: ids are
	 * none of these ops' business. */
	int (*hold)(void *ctx, pid_t pid, uid_t *uid);
	/* Its process gone: jail id uid and cgroup leaf name are free
	 * again. NULL with hold. */
	int (*release)(void *ctx, uid_t uid, const char *name);
	/* A descriptor of QEMU pid's /proc/PID/pagemap or /proc/PID/mem
	 * (which: enum launch_mem), read and written by the caller while
	 * the VM is stopped (ramdiff.h); uid is the jail id spawn or hold
	 * gave it (0: none), which it must still run as. 0 with *fd, or
	 * -errno with a reason. NULL: not offered (pauses stream the RAM). */
	int (*mem_open)(void *ctx, pid_t pid, uid_t uid, int which, int *fd, char *err,
			size_t errlen);
	void *ctx;
	/* spawn jails QEMU: it takes s->jail, finds the binary itself (the
	 * path may be one only root reaches), and the process runs as
	 * another uid, signalled through these ops only. */
	int jails;
};

#endif
