/*
 * jail_impl: the plan, as jail.c writes it and jail_child.c carries it
 * out. Included by those two files only.
 */
#ifndef CPUOS_JAIL_IMPL_H
#define CPUOS_JAIL_IMPL_H

#include "jail/cgroup.h"
#include "jail/jail.h"

#include <linux/if.h>
#include <sys/types.h>

#define MAX_BINDS (2 * JAIL_MAX_PATHS + 16)

struct bind {
	char src[512], dst[512];
	int fd; /* O_PATH of src, opened as open_bind says: what is bound */
	int dir, ro, exec;
};

/* RO_SHARED: read-only, a file the jail made its shared group's to read
 * (a snapshot's RAM file), which others need not read. */
enum { RW = 0, RO = 1, RO_EXEC = 2, RO_SHARED = 3 };

struct jail_plan {
	uid_t uid;
	gid_t gid, groups[1];
	int ngroups;
	char root[256], cwd[512], tap[IFNAMSIZ];
	int own_netns;
	struct cgroup_join join;
	int nbinds, nlinks;
	struct bind b[MAX_BINDS];
	struct { char name[16], target[64]; } links[8];
	int ndevs;
	struct { char path[32]; dev_t rdev; } devs[8];
};

#endif
