/*
 * tap: a tiny test harness. Each test is a function; CHECK records a failed
 * expectation without stopping the test. t_main prints one line per test
 * and the closing "N passed, N failed" that tests/run.sh adds up.
 */
#ifndef CPUOS_TAP_H
#define CPUOS_TAP_H

#define CHECK(cond) t_check(!!(cond), #cond, __FILE__, __LINE__)

struct t_case {
	const char *name;
	void (*fn)(void);
};

/* Records one expectation; returns cond so callers can bail out early. */
int t_check(int cond, const char *expr, const char *file, int line);
/* Prints a diagnostic line under the current test. */
void t_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Runs the cases (all, or those named in argv), prints the summary; the
 * exit status is 0 only when every case passed. */
int t_main(int argc, char **argv, const struct t_case *cases);

#endif
