/* tap: the harness behind tap.h. */
#include "tests/lib/tap.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int failed_checks;

int t_check(int cond, const char *expr, const char *file, int line)
{
	if (!cond) {
		failed_checks++;
		printf("    failed: %s (%s:%d)\n", expr, file, line);
		fflush(stdout);
	}
	return cond;
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

static int selected(int argc, char **argv, const char *name)
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
	for (const struct t_case *c = cases; c->name; c++) {
		if (!selected(argc, argv, c->name))
			continue;
		int before = failed_checks;
		c->fn();
		int ok = failed_checks == before;
		printf("%s - %s\n", ok ? "ok" : "not ok", c->name);
		fflush(stdout);
		if (ok)
			passed++;
		else
			failed++;
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
