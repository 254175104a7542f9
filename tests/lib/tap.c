/*
 * tap: the harness behind tap.h. t_main forks a process per case, as
 * libuv's runner does, so a crash, a hang or state left behind stays with
 * the case that caused it; the case tells t_main through a pipe what it
 * checked and how long it may take.
 */
#include "tests/lib/tap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* In a case's process: what it checked, and the pipe to t_main. */
static int checks, failed_checks;
static int ctl_fd = -1;
static int (*fixture_setup)(void);
static void (*fixture_teardown)(void);

/* What a case's process tells t_main: a new limit, or that the case
 * returned (from the case's own pid: a child it forked that returns
 * too is not the case). */
enum { CTL_TIMEOUT = 1, CTL_DONE };
struct ctl {
	int kind;
	int pid;
	int a, b; /* CTL_TIMEOUT: seconds; CTL_DONE: the case's checks, failures */
};

int t_check(int cond, const char *expr, const char *file, int line)
{
	checks++;
	if (!cond) {
		failed_checks++;
		printf("    failed: %s (%s:%d)\n", expr, file, line);
		fflush(stdout);
	}
	return cond;
}

int t_failed(void)
{
	return failed_checks != 0;
}

void t_note(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("    ");
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	va_end(ap);
}

static void ctl_send(int kind, int a, int b)
{
	struct ctl m = { .kind = kind, .pid = (int)getpid(), .a = a, .b = b };
	/* Smaller than PIPE_BUF: one write, whole or not at all. */
	if (ctl_fd >= 0 && write(ctl_fd, &m, sizeof(m)) < 0)
		t_note("cannot tell the harness: %s", strerror(errno));
}

void t_timeout(int seconds)
{
	ctl_send(CTL_TIMEOUT, seconds, 0);
}

void t_fixture(int (*setup)(void), void (*teardown)(void))
{
	fixture_setup = setup;
	fixture_teardown = teardown;
}

/* --- t_main's side --- */

/* Signals t_main waits for in ppoll, blocked everywhere else. */
static const int waited[] = { SIGCHLD, SIGTERM, SIGINT, SIGHUP };
#define NWAITED (int)(sizeof(waited) / sizeof(waited[0]))
static struct sigaction saved_act[NWAITED];
static sigset_t saved_mask;
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	if (sig != SIGCHLD)
		stop_signal = sig;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A whole number of seconds from the environment, or def. */
static int env_seconds(const char *name, int def)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	char *end;
	long n = strtol(v, &end, 10);
	if (*end || n <= 0 || n > 86400) {
		printf("    ignoring %s='%s': not a number of seconds\n", name, v);
		return def;
	}
	return (int)n;
}

/* A sanitized build is slower: the factor tests/e2e/conftest.py's SLOW
 * also uses. */
static int sanitizer_factor(void)
{
	const char *s = getenv("CPUOS_SANITIZER");
	if (!s || !*s)
		return 1;
	return !strcmp(s, "thread") ? 5 : 3;
}

/* The parent pid and state of process pid, from /proc/pid/stat. */
static int proc_stat(int pid, int *ppid, char *state)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* The name may hold spaces and parentheses: read after the last ')'. */
	char *p = strrchr(buf, ')');
	return p && sscanf(p + 1, " %c %d", state, ppid) == 2 ? 0 : -1;
}

/* Children t_main's process had before the first case: the test's own,
 * never taken for a case's leftovers. */
static int elders[64], nelders;

/* Our children, other than elders, into pids (at most max; "Z" in zombie
 * for those already dead): how many. */
static int children(int *pids, char *zombie, int max)
{
	int n = 0, me = (int)getpid();
	DIR *d = opendir("/proc");
	struct dirent *e;
	while (d && (e = readdir(d)) && n < max) {
		int pid = atoi(e->d_name), ppid, elder = 0;
		char state;
		if (pid <= 0 || proc_stat(pid, &ppid, &state) < 0 || ppid != me)
			continue;
		for (int i = 0; i < nelders; i++)
			elder |= elders[i] == pid;
		if (elder)
			continue;
		zombie[n] = state == 'Z';
		pids[n++] = pid;
	}
	if (d)
		closedir(d);
	return n;
}

/* Kills what a case left behind: its process group, then every process
 * orphaned under us (a QEMU in a session of its own, an agent's children),
 * round after round, since killing one orphans its children in turn.
 * Returns how many it killed. */
static int kill_leftovers(int pgid)
{
	int killed = 0;
	kill(-pgid, SIGKILL);
	/* A moment for what ends by itself once the case is gone (a kernel
	 * reading from a dead agent), reaping it; then the rest is killed. */
	double grace = now_s() + 0.2;
	for (int round = 0; round < 1000; round++) {
		int pids[64];
		char zombie[64];
		int n = children(pids, zombie, 64), live = 0;
		if (!n)
			break;
		for (int i = 0; i < n; i++)
			if (zombie[i])
				waitpid(pids[i], NULL, 0);
			else
				live++;
		if (live && now_s() < grace) {
			usleep(10000);
			continue;
		}
		for (int i = 0; i < n; i++)
			if (!zombie[i] && kill(pids[i], SIGKILL) == 0)
				killed++;
		/* SIGKILL is certain, but not instant: reap each, a while at most. */
		double end = now_s() + 5;
		for (int i = 0; i < n; i++)
			while (waitpid(pids[i], NULL, WNOHANG) == 0 && now_s() < end)
				usleep(1000);
	}
	return killed;
}

static void describe_status(int st, int done)
{
	if (WIFSIGNALED(st))
		t_note("killed by signal %d (%s)%s", WTERMSIG(st), strsignal(WTERMSIG(st)),
		       done ? " after the case returned" : "");
	else if (WIFEXITED(st) && !done)
		t_note("exited with status %d before the case returned", WEXITSTATUS(st));
	else if (WIFEXITED(st) && WEXITSTATUS(st))
		t_note("exited with status %d after the case returned", WEXITSTATUS(st));
}

/* In the case's process: runs it, tells t_main how it went, exits
 * (atexit handlers run: a test's clean-up of what its cases started). */
static __attribute__((noreturn)) void run_child(const struct t_case *c, int fd)
{
	setpgid(0, 0);
	for (int i = 0; i < NWAITED; i++)
		sigaction(waited[i], &saved_act[i], NULL);
	sigprocmask(SIG_SETMASK, &saved_mask, NULL);
	/* A killed case keeps the lines it printed. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	ctl_fd = fd;
	checks = failed_checks = 0;
	int own = 0;
	if (fixture_setup && fixture_setup() != 0) {
		if (!failed_checks)
			failed_checks++;
		t_note("the fixture's setup failed: the case did not run");
	} else {
		int before = checks;
		c->fn();
		own = checks - before;
	}
	if (fixture_teardown)
		fixture_teardown();
	fflush(stdout);
	ctl_send(CTL_DONE, own, failed_checks);
	exit(0);
}

/* Reads what the case's process sent: 0, or -1 once its pipe is closed. */
static int ctl_read(int fd, int pid, double *deadline, int factor, int *done, int *own,
		    int *fails)
{
	struct ctl m;
	ssize_t n;
	while ((n = read(fd, &m, sizeof(m))) == (ssize_t)sizeof(m)) {
		if (m.pid != pid)
			continue;
		if (m.kind == CTL_TIMEOUT && m.a > 0)
			*deadline = now_s() + (double)m.a * factor;
		else if (m.kind == CTL_DONE) {
			*done = 1;
			*own = m.a;
			*fails = m.b;
		}
	}
	return n == 0 ? -1 : 0;
}

/* Runs one case in a child; 1 when it passed. */
static int run_case(const struct t_case *c, int limit, int factor)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		t_note("cannot make a pipe: %s", strerror(errno));
		printf("not ok - %s\n", c->name);
		return 0;
	}
	fflush(NULL);
	double t0 = now_s(), deadline = t0 + (double)limit * factor;
	pid_t pid = fork();
	if (pid < 0) {
		t_note("cannot fork: %s", strerror(errno));
		printf("not ok - %s\n", c->name);
		close(p[0]);
		close(p[1]);
		return 0;
	}
	if (pid == 0) {
		close(p[0]);
		run_child(c, p[1]);
	}
	setpgid(pid, pid); /* also here: no signal may miss the group */
	close(p[1]);
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	int done = 0, own = 0, fails = 0, st = 0, timed_out = 0, stopped = 0;
	struct pollfd pfd = { .fd = p[0], .events = POLLIN };
	for (;;) {
		double left = deadline - now_s();
		struct timespec ts = { .tv_sec = 0 };
		if (left > 0 && !timed_out && !stopped) {
			ts.tv_sec = (time_t)left;
			ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
		} else if (timed_out || stopped) {
			ts.tv_nsec = 100000000; /* killed: waiting to reap it */
		}
		ppoll(&pfd, 1, &ts, &saved_mask);
		if (pfd.fd >= 0 &&
		    ctl_read(pfd.fd, pid, &deadline, factor, &done, &own, &fails) < 0)
			pfd.fd = -1; /* closed: poll it no more */
		/* Only the case: an orphan of its is reaped with the leftovers. */
		if (waitpid(pid, &st, WNOHANG) == pid)
			break;
		if (stop_signal && !stopped) {
			stopped = 1;
			kill(-pid, SIGKILL);
		} else if (!timed_out && !stopped && now_s() >= deadline) {
			timed_out = 1;
			kill(-pid, SIGKILL);
		}
	}
	ctl_read(p[0], pid, &deadline, factor, &done, &own, &fails);
	close(p[0]);
	double took = now_s() - t0;
	int left = kill_leftovers(pid);

	int ok = 0;
	if (stopped)
		t_note("interrupted by signal %d (%s): its process group killed", stop_signal,
		       strsignal(stop_signal));
	else if (timed_out)
		t_note("timed out after %d s: its process group killed",
		       (int)(deadline - t0 + 0.5));
	else if (!done || !WIFEXITED(st) || WEXITSTATUS(st))
		describe_status(st, done);
	else if (fails)
		; /* the failed CHECKs said it */
	else if (!own)
		t_note("checks nothing");
	else
		ok = 1;
	if (left)
		t_note("%d process%s it left running killed", left, left == 1 ? "" : "es");
	printf("%s - %s (%.2f s)\n", ok ? "ok" : "not ok", c->name, took);
	fflush(stdout);
	return ok;
}

static int named(int argc, char **argv, const char *name)
{
	if (argc < 2)
		return 1;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], name))
			return 1;
	return 0;
}

int t_main(int argc, char **argv, const struct t_case *cases)
{
	int passed = 0, failed = 0;
	int limit = env_seconds("CPUOS_TEST_TIMEOUT", T_DEFAULT_TIMEOUT_S);
	int factor = sanitizer_factor();
	/* Orphans of a case come to us, to be killed with it. */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
		printf("    cannot become a subreaper: %s\n", strerror(errno));
	char zombie[64];
	nelders = children(elders, zombie, 64);
	sigset_t block;
	sigemptyset(&block);
	for (int i = 0; i < NWAITED; i++)
		sigaddset(&block, waited[i]);
	sigprocmask(SIG_BLOCK, &block, &saved_mask);
	struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_NOCLDSTOP };
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < NWAITED; i++)
		sigaction(waited[i], &sa, &saved_act[i]);

	for (int i = 1; i < argc; i++) {
		const struct t_case *c = cases;
		while (c->name && strcmp(c->name, argv[i]))
			c++;
		if (!c->name) {
			t_note("no such case");
			printf("not ok - %s\n", argv[i]);
			failed++;
		}
	}
	for (const struct t_case *c = cases; c->name && !stop_signal; c++) {
		if (!named(argc, argv, c->name))
			continue;
		if (run_case(c, limit, factor))
			passed++;
		else
			failed++;
	}
	printf("%d passed, %d failed\n", passed, failed);
	fflush(stdout);
	for (int i = 0; i < NWAITED; i++)
		sigaction(waited[i], &saved_act[i], NULL);
	sigprocmask(SIG_SETMASK, &saved_mask, NULL);
	return failed || stop_signal ? 1 : 0;
}
