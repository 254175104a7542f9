/*
 * cgroup: a cgroup per QEMU, on either layout the host mounts. cgroup v1
 * has a hierarchy per controller (/sys/fs/cgroup/memory, .../pids, ...);
 * v2 one unified tree. The layout is found once, at start; every leaf
 * lives in a "cpuos" group under the daemon's own cgroup, so limits set
 * around the daemon (a systemd slice, a container) hold its VMs too.
 */
#ifndef CPUOS_CGROUP_H
#define CPUOS_CGROUP_H

#include <stddef.h>

enum cgroup_layout { CGROUP_V1 = 1, CGROUP_V2 = 2 };

/* The controllers a leaf is limited by. v1 mounts each on its own (cpu may
 * share a mount with cpuacct); a missing one is left out, and said. */
enum { CG_MEMORY, CG_PIDS, CG_CPU, CG_IO, CG_NCTL };

struct cgroup_limits {
	unsigned long long memory_bytes; /* 0: no limit */
	unsigned pids;                   /* 0: no limit */
	unsigned cpus;                   /* whole CPUs of time per period; 0: none */
	unsigned io_weight;              /* 1..10000 as v2 counts it; 0: default */
};

/* The cgroup.procs files a child writes "0" into to join a leaf: one per
 * hierarchy (v1), or one (v2). */
#define CGROUP_MAX_PROCS CG_NCTL
struct cgroup_join {
	int n;
	char procs[CGROUP_MAX_PROCS][700];
};

struct cgroups;

/* Finds the layout under root ("/sys/fs/cgroup"; tests pass a tree of
 * their own) and this process's place in it from self (its
 * /proc/self/cgroup), and makes the "cpuos" groups. 0 or -errno with a
 * reason in err (no controller at all, a group that cannot be made). */
int cgroup_open(const char *root, const char *self, struct cgroups **out, char *err,
		size_t errlen);
void cgroup_close(struct cgroups *cg);
enum cgroup_layout cgroup_layout(const struct cgroups *cg);
/* The controllers found, for a log line ("v1: memory pids cpu"). */
const char *cgroup_describe(const struct cgroups *cg);

/* Makes the leaf name (one path component) with limits l, and says what to
 * write to join it. An existing leaf (a VM that died before its leaf was
 * removed) is reused with the new limits. 0 or -errno with err. */
int cgroup_create(struct cgroups *cg, const char *name, const struct cgroup_limits *l,
		  struct cgroup_join *join, char *err, size_t errlen);
/* Removes the leaf once no process is left in it; a leaf still in use
 * stays (-EBUSY). */
int cgroup_remove(struct cgroups *cg, const char *name);
/* Reads a leaf's memory in use (v1 memory.usage_in_bytes, v2
 * memory.current) and its peak where the layout keeps one: 0 or -errno. */
int cgroup_memory(struct cgroups *cg, const char *name, unsigned long long *now,
		  unsigned long long *peak);

#endif
