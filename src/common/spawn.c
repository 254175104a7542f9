/*
 * spawn: fork and exec with a clean child. An exec failure comes back to
 * the parent through a close-on-exec pipe, as posix_spawn reports it.
 */
#include "common/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* In the child: only async-signal-safe calls until exec. */
static __attribute__((noreturn)) void child(const struct spawn_opts *o, int errfd)
{
	int fd[3];
	/* Move the sources above 2 first, so dup2 cannot clobber one that
	 * another slot still needs. */
	for (int i = 0; i < 3; i++) {
		int src = o->fd[i] >= 0 ? o->fd[i] : open("/dev/null", i ? O_WRONLY : O_RDONLY);
		fd[i] = src < 0 ? -1 : fcntl(src, F_DUPFD_CLOEXEC, 3);
		if (fd[i] < 0)
			goto fail;
	}
	for (int i = 0; i < 3; i++)
		if (dup2(fd[i], i) < 0)
			goto fail;
	/* Everything else closes at exec; errfd must live until then. */
	if (close_range(3, ~0u, CLOSE_RANGE_CLOEXEC) < 0)
		for (int i = 3; i < 1024; i++)
			if (i != errfd)
				close(i);
	sigset_t none;
	sigemptyset(&none);
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			signal(s, SIG_DFL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (o->new_session)
		setsid();
	if (o->cwd && chdir(o->cwd) < 0)
		goto fail;
	if (o->netns) {
		int ns = open(o->netns, O_RDONLY | O_CLOEXEC);
		if (ns < 0 || setns(ns, CLONE_NEWNET) < 0)
			goto fail;
	}
	if (o->pre_exec && (errno = -o->pre_exec(o->pre_exec_arg)) != 0)
		goto fail;
	if (o->envp)
		execvpe(o->argv[0], o->argv, o->envp);
	else
		execvp(o->argv[0], o->argv);
fail:;
	int e = errno;
	if (write(errfd, &e, sizeof(e)) < 0)
		_exit(127);
	_exit(127);
}

int spawn(const struct spawn_opts *o, pid_t *pid)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	pid_t p = fork();
	if (p < 0) {
		int e = errno;
		close(pfd[0]);
		close(pfd[1]);
		return -e;
	}
	if (p == 0)
		child(o, pfd[1]);
	close(pfd[1]);
	int e = 0;
	ssize_t n;
	while ((n = read(pfd[0], &e, sizeof(e))) < 0 && errno == EINTR)
		;
	close(pfd[0]);
	if (n == (ssize_t)sizeof(e)) { /* the exec failed: the child is gone */
		while (waitpid(p, NULL, 0) < 0 && errno == EINTR)
			;
		return -(e ? e : ENOEXEC);
	}
	*pid = p;
	return 0;
}
