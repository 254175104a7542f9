/*
 * test_sysfilter: cpuosd's seccomp filter, loaded in a child of its own
 * per call: what it refuses kills the process with SIGSYS, what the
 * daemon does (files, threads, a fork and an exec, sockets) goes on, and
 * what it does not name answers ENOSYS: clone3, so that glibc's threads
 * fall back to clone, io_uring and bpf for the libraries that probe for
 * them, and any other call.
 */
#include "daemon/sysfilter.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* fn's exit status in a child that loaded the filter first: its wait
 * status. fn returns 0 when all it did went as wanted. */
static int filtered(int (*fn)(void))
{
	pid_t pid = fork();
	if (pid == 0) {
		char err[256];
		if (sysfilter_load(err, sizeof(err)) < 0) {
			fprintf(stderr, "%s\n", err);
			_exit(100);
		}
		_exit(fn());
	}
	int st = -1;
	waitpid(pid, &st, 0);
	return st;
}

static int killed_by_sigsys(int st)
{
	return WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS;
}

static void *thread_main(void *arg)
{
	return arg;
}

static int daemon_like(void)
{
	char status[4096] = "";
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, status, sizeof(status) - 1) : -1;
	if (n <= 0 || !strstr(status, "Seccomp:\t2"))
		return 1;
	close(fd);
	pthread_t t;
	void *ret = NULL;
	if (pthread_create(&t, NULL, thread_main, status) != 0 || pthread_join(t, &ret) != 0 ||
	    ret != status)
		return 2;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 || write(sv[0], "x", 1) != 1)
		return 3;
	/* A program it runs (mkfs.ext4, qemu-img) has the filter too. */
	pid_t pid = fork();
	if (pid == 0) {
		execl("/bin/true", "true", (char *)NULL);
		_exit(127);
	}
	int st = -1;
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return 4;
	errno = 0;
	if (syscall(SYS_clone3, NULL, 0) != -1 || errno != ENOSYS)
		return 5;
	/* Probed for (qemu-img tries io_uring): absent, not fatal. */
	errno = 0;
	if (syscall(SYS_io_uring_setup, 1, NULL) != -1 || errno != ENOSYS)
		return 6;
	errno = 0;
	if (syscall(SYS_bpf, 0, NULL, 0) != -1 || errno != ENOSYS)
		return 7;
	/* Nothing the list does not name: what the daemon never calls
	 * answers ENOSYS, whether the kernel has it or not. */
	errno = 0;
	if (syscall(SYS_msgget, 0, 0) != -1 || errno != ENOSYS)
		return 8;
	errno = 0;
	if (syscall(SYS_setuid, 0) != -1 || errno != ENOSYS)
		return 9;
	/* ioctl but TIOCSTI, and clone without a namespace */
	int flags = 0;
	if (ioctl(sv[0], FIONBIO, &flags) != 0)
		return 10;
	return 0;
}

static int do_unshare(void)
{
	unshare(CLONE_NEWUSER);
	return 0;
}

static int do_clone_netns(void)
{
	long r = syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, NULL, NULL, NULL, NULL);
	if (r == 0)
		_exit(0);
	return 0;
}

static int do_mount(void)
{
	syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, NULL);
	return 0;
}

static int do_open_by_handle(void)
{
	syscall(SYS_open_by_handle_at, AT_FDCWD, NULL, 0);
	return 0;
}

static int do_process_vm_writev(void)
{
	syscall(SYS_process_vm_writev, getppid(), NULL, 0, NULL, 0, 0);
	return 0;
}

static int do_tiocsti(void)
{
	char c = 'x';
	ioctl(0, TIOCSTI, &c);
	return 0;
}

static int do_ptrace(void)
{
	syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, NULL, NULL);
	return 0;
}

static int do_i386(void)
{
	/* getpid by its i386 number, through int 0x80. */
	long r;
	__asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");
	return r > 0 ? 0 : 0;
}

static void test_allows_what_the_daemon_does(void)
{
	int st = filtered(daemon_like);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	if (WIFEXITED(st) && WEXITSTATUS(st))
		t_note("step %d failed", WEXITSTATUS(st));
}

static void test_kills_what_it_refuses(void)
{
	static const struct {
		const char *what;
		int (*fn)(void);
	} calls[] = {
		{ "unshare(CLONE_NEWUSER)", do_unshare }, { "clone(CLONE_NEWNET)", do_clone_netns },
		{ "mount", do_mount },
		{ "open_by_handle_at", do_open_by_handle },
		{ "process_vm_writev", do_process_vm_writev },
		{ "ioctl(TIOCSTI)", do_tiocsti },
		{ "an i386 call", do_i386 },
#ifndef __SANITIZE_ADDRESS__
		{ "ptrace", do_ptrace },
#endif
	};
	for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
		int st = filtered(calls[i].fn);
		if (!CHECK(killed_by_sigsys(st)))
			t_note("%s: wait status %#x, not SIGSYS", calls[i].what, st);
	}
	(void)do_ptrace;
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "sysfilter_allows_what_the_daemon_does", test_allows_what_the_daemon_does },
		{ "sysfilter_kills_what_it_refuses", test_kills_what_it_refuses },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
