/*
 * vm_launch: the runner's own launch ops (launch.h), for callers that
 * start QEMU themselves (cpuos-vm, tests, benchmarks, a daemon with
 * --jail off): fork and exec, kill, waitpid. cpuosd's jailed QEMUs go
 * through its helper's ops instead (priv_launch_ops).
 */
#include "runner/vm.h"

#include "common/launch.h"
#include "common/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int direct_spawn(void *ctx, const struct launch_spec *s, pid_t *pid, uid_t *uid,
			int *pidfd, char *err, size_t errlen)
{
	(void)ctx;
	/* Own session: a Ctrl-C meant for the CLI or a daemon restart does
	 * not reach QEMU. No environment: nothing of the daemon's (its
	 * configuration, a key in a variable) is QEMU's business, and QEMU
	 * faces the guest. */
	static char *const no_env[] = { NULL };
	struct spawn_opts o = { .argv = s->argv, .fd = { -1, s->logfd, s->logfd },
				.new_session = 1, .netns = s->netns, .envp = no_env };
	int r = spawn(&o, pid);
	if (r < 0) {
		snprintf(err, errlen, "cannot run '%s': %s", s->argv[0], strerror(-r));
		return r;
	}
	*uid = 0;
	/* Our child: its pid is not another's until we reap it. -1 on a
	 * kernel without pidfds (before 5.3): the runner polls waitpid. */
	*pidfd = (int)syscall(SYS_pidfd_open, *pid, 0);
	return 0;
}

static int direct_signal(void *ctx, pid_t pid, int sig)
{
	(void)ctx;
	return kill(pid, sig) < 0 ? -errno : 0;
}

static int direct_reap(void *ctx, pid_t pid, int *status)
{
	(void)ctx;
	pid_t r = waitpid(pid, status, WNOHANG);
	return r == pid ? 1 : r == 0 ? 0 : -errno;
}

/* Our child, of our uid: ours to read as a debugger would. */
static int direct_mem_open(void *ctx, pid_t pid, uid_t uid, int which, int *fd, char *err,
			   size_t errlen)
{
	(void)ctx;
	(void)uid;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, which == LAUNCH_MEM ? "mem" : "pagemap");
	*fd = open(path, (which == LAUNCH_MEM ? O_RDWR : O_RDONLY) | O_CLOEXEC);
	if (*fd < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot open '%s': %s", path, strerror(e));
		return -e;
	}
	return 0;
}

const struct launch_ops vm_launch_direct = {
	.spawn = direct_spawn,
	.signal = direct_signal,
	.reap = direct_reap,
	.mem_open = direct_mem_open,
};
