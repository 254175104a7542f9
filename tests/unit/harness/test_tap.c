/*
 * test_tap: the harness itself (tests/lib/tap). This binary runs itself
 * again as a test of cases that go wrong on purpose (a failed CHECK, a
 * hang, a crash, an early exit, no CHECK at all, a process left running)
 * and checks that each is reported "not ok" with its reason and counted.
 */
#include "tests/lib/tap.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* --- the cases of the child run, each going wrong in its own way --- */

static void passes(void)
{
	CHECK(1 + 1 == 2);
}

static void fails(void)
{
	CHECK(1 + 1 == 3);
}

static void hangs(void)
{
	t_timeout(1);
	CHECK(1);
	for (;;)
		pause();
}

/* No t_timeout: the limit comes from $CPUOS_TEST_TIMEOUT. */
static void hangs_default(void)
{
	CHECK(1);
	for (;;)
		pause();
}

static void crashes(void)
{
	CHECK(1);
	abort(); /* SIGABRT: a sanitizer lets it through, unlike a SIGSEGV */
}

static void exits(void)
{
	CHECK(1);
	exit(0);
}

static void checks_nothing(void)
{
}

/* A process in a session of its own, as QEMU is: it outlives the case. */
static void leaves_a_process(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		setsid();
		execlp("sleep", "sleep", "60", (char *)NULL);
		_exit(127);
	}
	CHECK(pid > 0);
	/* Out of the case's group before the case ends: not killed with it. */
	for (int i = 0; i < 5000 && getsid(pid) != pid; i++)
		usleep(1000);
	t_note("sleeper %d", (int)pid);
}

/* Waits to be interrupted, after starting a process that outlives it. */
static void waits(void)
{
	t_timeout(60);
	leaves_a_process();
	for (;;)
		pause();
}

static const struct t_case child_cases[] = {
	{ "waits", waits },
	{ "passes", passes },
	{ "fails", fails },
	{ "hangs", hangs },
	{ "hangs_default", hangs_default },
	{ "crashes", crashes },
	{ "exits", exits },
	{ "checks_nothing", checks_nothing },
	{ "leaves_a_process", leaves_a_process },
	{ "waits", waits },
	{ 0, 0 },
};

/* --- running the child --- */

struct run {
	char out[16384];
	size_t len;
	int status;
	double took;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs this binary as the child test with the cases named in names (NULL
 * ends them; none: all but "waits"), its output into r; SIGTERM to it once
 * its output holds interrupt_at (when not NULL). 0, or -1 when it did not
 * end within 60 s. */
static int run_child(const char *const *names, const char *interrupt_at, struct run *r)
{
	memset(r, 0, sizeof(*r));
	int p[2];
	if (!CHECK(pipe(p) == 0))
		return -1;
	double t0 = now_s();
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		close(p[0]);
		close(p[1]);
		setenv("CPUOS_TAP_CHILD", "1", 1);
		setenv("CPUOS_TEST_TIMEOUT", "1", 1);
		unsetenv("CPUOS_SANITIZER");
		const char *argv[16] = { "test_tap" };
		int n = 1;
		static const char *const all[] = { "passes", "fails", "hangs", "hangs_default",
						   "crashes", "exits", "checks_nothing",
						   "leaves_a_process", NULL };
		for (const char *const *s = names ? names : all; *s && n < 15; s++)
			argv[n++] = *s;
		argv[n] = NULL;
		execv("/proc/self/exe", (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	int interrupted = 0, rc = 0;
	for (;;) {
		struct pollfd pfd = { .fd = p[0], .events = POLLIN };
		if (now_s() - t0 > 60) {
			kill(pid, SIGKILL);
			rc = -1;
			break;
		}
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		ssize_t n = read(p[0], r->out + r->len, sizeof(r->out) - 1 - r->len);
		if (n <= 0)
			break;
		r->len += (size_t)n;
		r->out[r->len] = '\0';
		if (interrupt_at && !interrupted && strstr(r->out, interrupt_at)) {
			kill(pid, SIGTERM);
			interrupted = 1;
		}
	}
	close(p[0]);
	waitpid(pid, &r->status, 0);
	r->took = now_s() - t0;
	if (!CHECK(rc == 0))
		t_note("the child did not end within 60 s");
	return rc;
}

/* Whether the output holds line (a whole line, or its start when it ends
 * in "("). */
static int has_line(const struct run *r, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = r->out; (p = strstr(p, line)); p++)
		if ((p == r->out || p[-1] == '\n') && (line[n - 1] == '(' || p[n] == '\n'))
			return 1;
	return 0;
}

static int check_line(const struct run *r, const char *line)
{
	if (has_line(r, line))
		return 1;
	t_note("no line '%s' in the output:\n%s", line, r->out);
	return CHECK(0);
}

/* Whether the sleeper the output names is gone. */
static int sleeper_gone(const struct run *r)
{
	const char *p = strstr(r->out, "    sleeper ");
	int pid = p ? atoi(p + 12) : 0;
	if (!CHECK(pid > 0))
		return 0;
	return CHECK(kill(pid, 0) < 0 && errno == ESRCH);
}

/* --- the cases of this test --- */

static void test_verdicts(void)
{
	struct run r;
	if (run_child(NULL, NULL, &r) < 0)
		return;
	CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 1);
	check_line(&r, "ok - passes (");
	check_line(&r, "not ok - fails (");
	check_line(&r, "    failed: 1 + 1 == 3 (");
	check_line(&r, "    timed out after 1 s: its process group killed");
	check_line(&r, "not ok - hangs (");
	check_line(&r, "not ok - hangs_default (");
	check_line(&r, "not ok - crashes (");
	check_line(&r, "    killed by signal 6 (Aborted)");
	check_line(&r, "not ok - exits (");
	check_line(&r, "    exited with status 0 before the case returned");
	check_line(&r, "    checks nothing");
	check_line(&r, "not ok - checks_nothing (");
	check_line(&r, "    1 process it left running killed");
	check_line(&r, "ok - leaves_a_process (");
	check_line(&r, "2 passed, 6 failed");
	sleeper_gone(&r);
	/* Two hangs of 1 s, a second of grace for the sleeper, and the rest. */
	if (!CHECK(r.took < 10))
		t_note("took %.1f s", r.took);
}

static void test_selected(void)
{
	struct run r;
	static const char *const names[] = { "passes", "no_such_case", NULL };
	if (run_child(names, NULL, &r) < 0)
		return;
	CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 1);
	check_line(&r, "ok - passes (");
	check_line(&r, "    no such case");
	check_line(&r, "not ok - no_such_case");
	check_line(&r, "1 passed, 1 failed");
	CHECK(!has_line(&r, "ok - fails ("));
}

/* What tests/run.sh's timeout does: a SIGTERM to the harness ends the
 * running case, its process group and what it left, then the run. */
static void test_interrupted(void)
{
	struct run r;
	static const char *const names[] = { "waits", "passes", NULL };
	if (run_child(names, "    sleeper ", &r) < 0)
		return;
	CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 1);
	check_line(&r, "    interrupted by signal 15 (Terminated): its process group killed");
	check_line(&r, "not ok - waits (");
	check_line(&r, "0 passed, 1 failed");
	CHECK(!has_line(&r, "ok - passes (")); /* the run ended there */
	sleeper_gone(&r);
}

int main(int argc, char **argv)
{
	if (getenv("CPUOS_TAP_CHILD"))
		return t_main(argc, argv, child_cases);
	static const struct t_case cases[] = {
		{ "tap_verdicts", test_verdicts },
		{ "tap_selected", test_selected },
		{ "tap_interrupted", test_interrupted },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
