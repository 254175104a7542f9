/*
 * spawn: the one fork/exec of the host programs (QEMU, qemu-img, mkfs,
 * template scripts, a detached cpuosd). The child gets only the three
 * descriptors it is given, default signal dispositions and an empty mask,
 * so nothing of the parent's (sockets, the store, blocked signals) leaks.
 */
#ifndef CPUOS_SPAWN_H
#define CPUOS_SPAWN_H

#include <sys/types.h>

struct spawn_opts {
	char *const *argv;  /* argv[0] is looked up in PATH */
	int fd[3];          /* the child's stdin, stdout, stderr; -1: /dev/null */
	int new_session;    /* setsid(): signals for our terminal or group miss it */
	const char *cwd;    /* NULL: ours */
	const char *netns;  /* a network namespace to run in (its /run/netns
			     * path), or NULL: ours */
	char *const *envp;  /* the child's environment, or NULL: ours */
	/* Run in the child last before the exec (after netns): 0, or -errno
	 * to fail the spawn with. It may make system calls only, the
	 * parent's threads having left their locks as they were. */
	int (*pre_exec)(const void *arg);
	const void *pre_exec_arg;
};

/* Starts argv: 0 with *pid once the exec happened, or -errno (the exec's
 * own errno when argv[0] cannot run; nothing is left to reap then). */
int spawn(const struct spawn_opts *o, pid_t *pid);

#endif
