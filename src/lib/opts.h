/*
 * opts: a program's options as one table, read from its config files
 * (--config FILE: one "name = value" per line, '#' starts a comment, the
 * names are the long options) and then its command line, which wins.
 * Each entry says where its value goes in the program's options struct
 * and how it is checked; a value that fails is said on stderr as
 * "PROG: invalid --NAME 'VALUE' (...)". Both cpuosd and cpuos-gateway
 * parse this way; --config and --help are opts' own.
 */
#ifndef CPUOS_OPTS_H
#define CPUOS_OPTS_H

#include <stddef.h>

enum opt_kind {
	OPT_TEXT,     /* a string into a char array of size bytes */
	OPT_INT,      /* a long long, min..max (max 0: no bound above) */
	OPT_DURATION, /* seconds as a long long from "90s", "30m", "1h30m"..., min..max */
	OPT_REAL,     /* a finite double, fmin..fmax */
	OPT_ON_OFF,   /* "on" or "off" into an int */
	OPT_FN,       /* the entry's fn parses it */
};

struct opt {
	const char *name; /* the long option, and its name in a config file */
	enum opt_kind kind;
	size_t off;       /* where the value goes in the options struct */
	size_t size;      /* OPT_TEXT: the array's size */
	long long min, max;
	double fmin, fmax;
	const char *hint; /* what an invalid value should be, for the message */
	/* OPT_FN: takes value into the options o: 0, or -1 after saying why
	 * on stderr. */
	int (*fn)(void *o, const char *prog, const char *value);
};

/* Entries by field: each checks at compile time that the field has the
 * type its kind writes (a long long, a double, an int, a char array). */
#define OPTS_FIELD(type, f, ctype) \
	.off = offsetof(type, f) + 0 * sizeof((ctype *){ &((type *)0)->f })
#define OPT_TEXT_OF(n, type, f)                                                                    \
	{ .name = n, .kind = OPT_TEXT, .size = sizeof(((type *)0)->f),                             \
	  .off = offsetof(type, f) + 0 * sizeof((char *){ ((type *)0)->f }) }
#define OPT_INT_OF(n, type, f, lo, hi) \
	{ .name = n, .kind = OPT_INT, OPTS_FIELD(type, f, long long), .min = lo, .max = hi }
#define OPT_DURATION_OF(n, type, f, lo, hi) \
	{ .name = n, .kind = OPT_DURATION, OPTS_FIELD(type, f, long long), .min = lo, .max = hi }
#define OPT_REAL_OF(n, type, f, lo, hi, h)                                                         \
	{ .name = n, .kind = OPT_REAL, OPTS_FIELD(type, f, double), .fmin = lo, .fmax = hi,        \
	  .hint = h }
#define OPT_ON_OFF_OF(n, type, f) { .name = n, .kind = OPT_ON_OFF, OPTS_FIELD(type, f, int) }
#define OPT_FN_OF(n, f) { .name = n, .kind = OPT_FN, .fn = f }

struct opts_spec {
	const char *prog;       /* "cpuosd": how messages begin */
	const char *usage;      /* what --help prints */
	const struct opt *opts; /* ends with a NULL name */
	int args;               /* words after the options are the program's (else refused) */
};

/* Fills o (already set to its defaults) from every --config file named in
 * argv, then from argv's options, which win wherever they stand. 0 to run,
 * with the index of the first word that is not an option in *first (when
 * first is not NULL); 1 after printing the usage (--help); -1 after saying
 * what is wrong on stderr. */
int opts_parse(const struct opts_spec *spec, void *o, int argc, char **argv, int *first);
/* Sets one option by its name: 0, or -1 after saying why (an unknown name
 * too). */
int opts_set(const struct opts_spec *spec, void *o, const char *name, const char *value);
/* Reads a config file's options into o: 0, or -1 after saying why as
 * "PROG: PATH:LINE: ...". */
int opts_read_file(const struct opts_spec *spec, void *o, const char *path);

#endif
