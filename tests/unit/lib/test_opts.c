/* Unit tests for options tables (lib/opts): each kind's checks, config
 * files under the command line, --help, and the words after options. */
#include "lib/opts.h"
#include "tests/lib/tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct conf {
	char name[8];
	long long count, wait_s;
	double ratio;
	int on;
	char mode[16];
};

static int set_mode(void *arg, const char *prog, const char *v)
{
	struct conf *c = arg;
	if (strcmp(v, "a") && strcmp(v, "b")) {
		fprintf(stderr, "%s: --mode is a or b\n", prog);
		return -1;
	}
	snprintf(c->mode, sizeof(c->mode), "mode-%s", v);
	return 0;
}

static const struct opt table[] = {
	OPT_TEXT_OF("name", struct conf, name),
	OPT_INT_OF("count", struct conf, count, 1, 10),
	OPT_DURATION_OF("wait", struct conf, wait_s, 1, 3600),
	OPT_REAL_OF("ratio", struct conf, ratio, 0, 2, NULL),
	OPT_ON_OFF_OF("on", struct conf, on),
	OPT_FN_OF("mode", set_mode),
	{ 0 },
};

static const struct opts_spec with_args = { .prog = "t", .usage = "usage: t\n", .opts = table,
					    .args = 1 };
static const struct opts_spec no_args = { .prog = "t", .usage = "usage: t\n", .opts = table };

/* Parses the words of line (split on spaces) into a fresh c. */
static int parse(const struct opts_spec *s, struct conf *c, char *line, int *first)
{
	char *argv[32] = { "t" };
	int argc = 1;
	for (char *w = strtok(line, " "); w && argc < 31; w = strtok(NULL, " "))
		argv[argc++] = w;
	*c = (struct conf){ .count = 5 };
	return opts_parse(s, c, argc, argv, first);
}

static void test_kinds(void)
{
	struct conf c;
	int first = -1;
	char line[] = "--name abc --count 7 --wait 1m30s --ratio 1.5 --on on --mode b";
	CHECK(parse(&no_args, &c, line, &first) == 0 && first == 13);
	CHECK(!strcmp(c.name, "abc") && c.count == 7 && c.wait_s == 90 && c.ratio == 1.5 && c.on &&
	      !strcmp(c.mode, "mode-b"));
	static const char *const bad[] = {
		"--name abcdefgh", "--count 0", "--count 11", "--count 3x", "--count ''",
		"--wait 0", "--wait 2h", "--wait x", "--ratio nan", "--ratio 2.5", "--ratio -1",
		"--on yes", "--mode c", "--unknown 1", "--count",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char l[64];
		snprintf(l, sizeof(l), "%s", bad[i]);
		if (!CHECK(parse(&no_args, &c, l, &first) == -1))
			t_note("took %s", bad[i]);
	}
	/* a failed value leaves the field as it was */
	char l2[] = "--count 11";
	CHECK(parse(&no_args, &c, l2, &first) == -1 && c.count == 5);
}

static void test_words(void)
{
	struct conf c;
	int first = -1;
	char l1[] = "keys --count 2 list";
	CHECK(parse(&with_args, &c, l1, &first) == 0 && c.count == 2 && first == 3);
	char l2[] = "keys --count 2 list";
	CHECK(parse(&no_args, &c, l2, &first) == -1); /* a program that takes none */
	char l3[] = "--help";
	CHECK(parse(&no_args, &c, l3, &first) == 1);
}

static void test_files(void)
{
	char path[] = "/tmp/test_opts.XXXXXX";
	int fd = mkstemp(path);
	if (!CHECK(fd >= 0))
		return;
	const char *text = "# a comment\n\ncount = 3\nname = from-f  # trailing\n  on = on\n";
	CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
	struct conf c;
	int first;
	char line[128];
	/* the file, then the flags, which win wherever they stand */
	snprintf(line, sizeof(line), "--count 9 --config %s", path);
	CHECK(parse(&no_args, &c, line, &first) == 0);
	CHECK(c.count == 9 && !strcmp(c.name, "from-f") && c.on);
	snprintf(line, sizeof(line), "--config=%s", path);
	CHECK(parse(&no_args, &c, line, &first) == 0 && c.count == 3);
	/* what a file may not hold */
	static const char *const bad[] = { "count = 0\n", "config = x\n", "help = 1\n",
					   "count 3\n", "Count = 3\n" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		FILE *f = fopen(path, "w");
		if (!f)
			break;
		fputs(bad[i], f);
		fclose(f);
		c = (struct conf){ 0 };
		if (!CHECK(opts_read_file(&no_args, &c, path) == -1))
			t_note("took %s", bad[i]);
	}
	unlink(path);
	CHECK(opts_read_file(&no_args, &c, path) == -1); /* gone */
	CHECK(opts_set(&no_args, &c, "count", "4") == 0 && c.count == 4);
	CHECK(opts_set(&no_args, &c, "nothing", "4") == -1);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "kinds", test_kinds },
		{ "words", test_words },
		{ "files", test_files },
		{ 0 },
	};
	return t_main(argc, argv, cases);
}
