/*
 * user: /etc/passwd and /etc/group, read without NSS (the agent is a static
 * glibc binary). exec and the file requests resolve A_USER with it.
 */
#ifndef CPUOS_AGENT_USER_H
#define CPUOS_AGENT_USER_H

#include <sys/types.h>

#include "common/proto.h"

#define MAX_GROUPS 64 /* supplementary groups of a user */

struct user {
	uid_t uid;
	gid_t gid;
	char name[256];
	char home[PROTO_MAX_STR + 1];
	gid_t groups[MAX_GROUPS];
	int ngroups;
};

/* Looks up a user by name: 0, -ENOENT when unknown, -errno on read errors.
 * "root" always resolves (uid 0, /root) even without /etc/passwd. */
int user_lookup(const char *name, struct user *u);

#endif
