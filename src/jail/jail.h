/*
 * jail: what confines one QEMU, after Firecracker's jailer. The root
 * helper makes a plan from the spec the runner worked out (jail_spec.h)
 * before the spawn (every path, id and cgroup file worked out and
 * allocated there) and the spawned child carries it out between fork
 * and exec with system calls only: it joins its cgroup, hands the TAP to
 * its uid, enters a mount namespace whose root holds only the VM's files,
 * and drops to a uid and gid of its own with no capabilities left.
 */
#ifndef CPUOS_JAIL_H
#define CPUOS_JAIL_H

#include "common/jail_spec.h" /* struct jail_spec: one QEMU's */

#include <stddef.h>
#include <sys/types.h>

struct cgroups;

struct jail_config {
	/* ids: first is the group every jail shares for what several VMs
	 * map (a snapshot's RAM file); first+1 .. first+count-1 go one to
	 * each QEMU, as its uid and its gid. */
	unsigned first_id, count;
	const char *root_dir;    /* an empty directory: each jail's root is
				  * a tmpfs mounted on it in the jail's own
				  * mount namespace */
	const char *lock_dir;    /* a lock file per id taken, host-wide: every
				  * daemon on the host names the same one */
	struct cgroups *cg;      /* NULL: no cgroups (still borrowed, not owned) */
};

struct jail;

int jail_new(const struct jail_config *c, struct jail **out, char *err, size_t errlen);
void jail_free(struct jail *j);
/* "ids 1900000001-1900065535, cgroups v1: memory pids cpu blkio". */
void jail_describe(const struct jail *j, char *out, size_t len);

struct jail_plan;

/* Takes a free id, makes the cgroup and the plan; the run directory and
 * what is in it become the shared group's (first_id). 0 or -errno with a reason in err (-EAGAIN:
 * every id is in use). */
int jail_prepare(struct jail *j, const struct jail_spec *s, struct jail_plan **out, char *err,
		 size_t errlen);
/* In the child between fork and exec: 0 or -errno, with one line on
 * stderr saying which step failed. Only system calls. */
int jail_enter(const void *plan);
uid_t jail_plan_uid(const struct jail_plan *p);
/* Frees the plan; the id and cgroup stay held until jail_release. */
void jail_plan_free(struct jail_plan *p);

/* After its QEMU has exited: the id is free again and the cgroup gone. */
void jail_release(struct jail *j, uid_t uid, const char *name);
/* A QEMU found running (a daemon restarted) holds uid: 0, or -ERANGE when
 * uid is not one of the range's. */
int jail_hold(struct jail *j, uid_t uid);
/* uid is one of the ids QEMUs run as. */
int jail_owns(const struct jail *j, uid_t uid);
/* A daemon's own block of ids (jail_block.c), so that two daemons on a
 * host share neither a uid nor their QEMUs' group: block k holds ids
 * base + k * size .. + size - 1. The block recorded for state_dir in the
 * registry dir (root's; a file per block, holding the state directory)
 * is found again, so a restart keeps its ids (what it owns in its state
 * directory, the QEMUs it takes over); else the first one that no state
 * directory that still exists holds, and no process runs as, is taken. 0 with *first, or -errno
 * with a reason (-ENOSPC: every block is taken). */
int jail_block(const char *dir, const char *state_dir, unsigned base, unsigned size,
	       unsigned max, unsigned *first, char *err, size_t errlen);
/* The real uid of process pid, from /proc: 0 or -errno. */
int jail_proc_uid(pid_t pid, uid_t *uid);

#endif
