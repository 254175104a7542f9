/*
 * tap: a tiny test harness. Each test is a function; CHECK records a failed
 * expectation without stopping the test. t_main runs each case in a process
 * of its own, under a timeout, and prints one line per case and the closing
 * "N passed, N failed" that tests/run.sh adds up.
 */
#ifndef CPUOS_TAP_H
#define CPUOS_TAP_H

#define CHECK(cond) t_check(!!(cond), #cond, __FILE__, __LINE__)

/* The limit of a case that sets none (t_timeout), in seconds, unless
 * $CPUOS_TEST_TIMEOUT says otherwise. */
#define T_DEFAULT_TIMEOUT_S 120

struct t_case {
	const char *name;
	void (*fn)(void);
};

/* Records one expectation; returns cond so callers can bail out early. */
int t_check(int cond, const char *expr, const char *file, int line);
/* Whether a CHECK of the running case failed so far. */
int t_failed(void);
/* Prints a diagnostic line under the current test. */
void t_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Sets the running case's limit to seconds from now (times the sanitizer
 * factor, see t_main); outside a case it does nothing. */
void t_timeout(int seconds);
/* Hooks that t_main runs in each case's process around its function:
 * setup first (nonzero: the case fails and its function does not run),
 * teardown after it, either may be NULL. Their CHECKs count for the case's
 * verdict but not as the case's own checks. Call before t_main. */
void t_fixture(int (*setup)(void), void (*teardown)(void));
/*
 * Runs the cases (all, or those named in argv; a name no case has fails),
 * each in a child process of its own and in a process group of its own,
 * and prints "ok - name (1.23 s)" or "not ok - name (1.23 s)" with the
 * reason indented above it, then the summary. A case fails when a CHECK
 * failed, when it made no CHECK at all ("checks nothing"), when its process
 * died or exited before the case returned, or when it ran past its limit:
 * T_DEFAULT_TIMEOUT_S, $CPUOS_TEST_TIMEOUT or what it set with t_timeout,
 * times 3 under $CPUOS_SANITIZER (5 for thread). Then its process group is
 * killed. When a case ends, what it left running is killed too: its group,
 * and every process orphaned under it (t_main's process is their
 * subreaper), QEMU in a session of its own included. SIGTERM, SIGINT or
 * SIGHUP to t_main ends the running case the same way, then t_main.
 * The exit status is 0 only when every case passed.
 */
int t_main(int argc, char **argv, const struct t_case *cases);

#endif
