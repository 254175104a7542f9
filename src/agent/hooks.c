/*
 * hooks: runs the restore hooks of /etc/cpuos/restore.d after P_RESTORED,
 * in name order, each directly (no shell), bounded in time, killed with its
 * process group when late, and reaped here by its own pid.
 */
#include "agent/hooks.h"

#include "agent/sys.h"
#include "common/clock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOOK_PATH    "PATH=/usr/sbin:/usr/bin:/sbin:/bin"
#define KILL_WAIT_MS 100 /* after a SIGKILL, for the reap */
#define NAP_MS	     10	 /* reap polling without a pidfd */

/*
 * Why synchronous: hooks run one at a time while the loop waits, P_RESTORED
 * blocking it for at most the caller's end (about 2.5 s). In the background
 * they would be worse on both sides. The host's next requests after a
 * restore want what the hooks do (a re-addressed network) done, and P_OK
 * after the hooks tells it so. And proc.c's reaper waits for any pid and
 * skips pids that are not in its table as adopted orphans: a hook reaped
 * there would lose its status, and nothing would kill it when late. Here a
 * hook is reaped by waitpid on its own pid before the loop runs again; the
 * SIGCHLD it leaves on the signalfd only makes that reaper find nothing,
 * and the zombie of a hook given up on after its SIGKILL is one more orphan
 * to it. The loop's own children are never waited for here.
 */

/* The first HOOKS_MAX hook names in byte order (run-parts with LC_ALL=C). */
struct hook_list {
	char name[HOOKS_MAX][NAME_MAX + 1];
	int n;
	int skipped; /* hooks past the first HOOKS_MAX */
};

/* Inserts name in order, keeping the HOOKS_MAX smallest: a directory of
 * any size costs one bounded list. */
static void keep(struct hook_list *l, const char *name)
{
	int i = l->n;
	if (i == HOOKS_MAX) {
		l->skipped++;
		if (strcmp(name, l->name[HOOKS_MAX - 1]) >= 0)
			return;
		i--; /* the largest goes */
	} else {
		l->n++;
	}
	for (; i > 0 && strcmp(name, l->name[i - 1]) < 0; i--)
		memcpy(l->name[i], l->name[i - 1], sizeof(l->name[i]));
	snprintf(l->name[i], sizeof(l->name[i]), "%s", name);
}

/* Fills l with the executable regular files of dir: 0 or -errno. */
static int list_hooks(const char *dir, struct hook_list *l)
{
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	struct dirent *e;
	while ((e = readdir(d))) {
		struct stat st;
		/* Hidden names are editors' and package managers' leftovers. */
		if (e->d_name[0] == '.')
			continue;
		/* Symlinks followed, as run-parts does: an image may link a
		 * hook in from elsewhere. */
		if (fstatat(dirfd(d), e->d_name, &st, 0) < 0 || !S_ISREG(st.st_mode) ||
		    !(st.st_mode & 0111))
			continue;
		keep(l, e->d_name);
	}
	closedir(d);
	return 0;
}

/* In the child: never returns. */
static __attribute__((noreturn)) void hook_child(const char *path, char *const env[], int null_fd)
{
	sigset_t none;
	sigemptyset(&none);
	/* As for proc.c's children: the agent's ignored SIGPIPE and blocked
	 * signalfd signals survive execve and would confuse a script. */
	signal(SIGPIPE, SIG_DFL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Its own process group: a kill at the deadline takes along what it
	 * started. It stays in the agent's cgroup (the sandbox's cgroup holds
	 * no process itself, init.c): a hook is the image's own code, bounded
	 * in time, and must not leave daemons behind. */
	setsid();
	/* The agent's -1000 is inherited; best effort, for 2 s at most. */
	int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = write(fd, "0", 1);
		(void)n;
		close(fd);
	}
	if (dup2(null_fd, 0) < 0 || dup2(null_fd, 1) < 0)
		_exit(127);
	close_range(3, ~0u, 0);
	char *const argv[] = {(char *)path, NULL};
	execve(path, argv, env);
	dprintf(2, "cpuos-agent: cannot run restore hook '%s': %s\n", path, strerror(errno));
	_exit(127);
}

/* Reaps pid by end (monotonic ms): 0 with *status, -ETIMEDOUT or -errno. */
static int reap_by(pid_t pid, int pidfd, int64_t end, int *status)
{
	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);
		if (r == pid)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
		int64_t left = end - clock_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		/* The pidfd turns readable when the hook exits; without one
		 * poll just naps (it skips a negative fd). Not SIGCHLD: that
		 * belongs to the loop's signalfd. */
		if (pidfd < 0 && left > NAP_MS)
			left = NAP_MS;
		struct pollfd p = {.fd = pidfd, .events = POLLIN};
		poll(&p, 1, (int)left);
	}
}

/* Runs one hook until it ends or by (monotonic ms), then kills it. */
static void run_one(const char *path, char *const env[], int null_fd, int64_t by)
{
	int64_t start = clock_ms();
	pid_t pid = fork();
	if (pid < 0) {
		sys_log("cannot start restore hook '%s': %s", path, strerror(errno));
		return;
	}
	if (pid == 0)
		hook_child(path, env, null_fd);
	/* Cannot race the reap: only this function waits for pid. */
	int pidfd = pidfd_open(pid, 0);
	int status = 0;
	int r = reap_by(pid, pidfd, by, &status);
	if (r == -ETIMEDOUT) {
		/* The group, and the hook alone if it has not reached setsid
		 * yet (then there is no group -pid: never our own). */
		kill(-pid, SIGKILL);
		kill(pid, SIGKILL);
		sys_log("restore hook '%s' still running after %lld ms: killed", path,
			(long long)(clock_ms() - start));
		r = reap_by(pid, pidfd, clock_ms() + KILL_WAIT_MS, &status);
		if (r < 0)
			sys_log("restore hook '%s' not reaped after its kill: %s", path,
				strerror(-r));
	} else if (r < 0) {
		sys_log("cannot wait for restore hook '%s': %s", path, strerror(-r));
	} else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
		sys_log("restore hook '%s' exited %d", path, WEXITSTATUS(status));
	} else if (WIFSIGNALED(status)) {
		sys_log("restore hook '%s' killed by signal %d", path, WTERMSIG(status));
	}
	if (pidfd >= 0)
		close(pidfd);
}

int hooks_run(const char *dir, const char *generation, const char *hostname, int64_t end)
{
	struct hook_list l;
	l.n = l.skipped = 0;
	int r = list_hooks(dir, &l);
	if (r < 0)
		return r;
	if (l.skipped)
		sys_log("%d restore hooks in '%s' past the first %d skipped", l.skipped, dir,
			HOOKS_MAX);
	if (l.n == 0)
		return 0;
	int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null_fd < 0) {
		r = -errno;
		sys_log("cannot open '/dev/null' for the restore hooks: %s", strerror(-r));
		return r;
	}
	char host[128], gen[64];
	char *env[4];
	int k = 0;
	env[k++] = (char *)HOOK_PATH;
	if (hostname) {
		snprintf(host, sizeof(host), "CPUOS_HOSTNAME=%s", hostname);
		env[k++] = host;
	}
	if (generation) {
		snprintf(gen, sizeof(gen), "CPUOS_GENERATION=%s", generation);
		env[k++] = gen;
	}
	env[k] = NULL;
	for (int i = 0; i < l.n; i++) {
		char path[PATH_MAX];
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, l.name[i]) >= sizeof(path)) {
			sys_log("restore hook '%s' in '%s': path too long", l.name[i], dir);
			continue;
		}
		/* The kill wait comes out of the budget too. */
		int64_t now = clock_ms(), by = end - KILL_WAIT_MS;
		if (now + HOOKS_WAIT_MS < by)
			by = now + HOOKS_WAIT_MS;
		if (by <= now) {
			sys_log("no time left for %d restore hooks from '%s' on", l.n - i, path);
			break;
		}
		run_one(path, env, null_fd, by);
	}
	close(null_fd);
	return 0;
}
