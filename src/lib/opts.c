/* opts: see opts.h. */
#include "lib/opts.h"

#include "common/duration.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VAL_BASE 256 /* getopt values: VAL_BASE + the entry's index */

static const struct opt *find(const struct opts_spec *spec, const char *name)
{
	for (const struct opt *p = spec->opts; p->name; p++)
		if (!strcmp(p->name, name))
			return p;
	return NULL;
}

/* Says why value is not one for p: -1. */
static int invalid(const struct opts_spec *spec, const struct opt *p, const char *value)
{
	char range[96];
	const char *hint = p->hint;
	if (!hint) {
		hint = range;
		if (p->kind == OPT_INT && p->max)
			snprintf(range, sizeof(range), "%lld to %lld", p->min, p->max);
		else if (p->kind == OPT_INT)
			snprintf(range, sizeof(range), "a whole number, at least %lld", p->min);
		else if (p->kind == OPT_DURATION)
			snprintf(range, sizeof(range),
				 "a duration such as 90s or 30m, at most %llds", p->max);
		else if (p->kind == OPT_REAL)
			snprintf(range, sizeof(range), "%g to %g", p->fmin, p->fmax);
		else
			hint = NULL;
	}
	fprintf(stderr, "%s: invalid --%s '%s'%s%s%s\n", spec->prog, p->name, value,
		hint ? " (" : "", hint ? hint : "", hint ? ")" : "");
	return -1;
}

static int set(const struct opts_spec *spec, const struct opt *p, void *o, const char *value)
{
	char *at = (char *)o + p->off, *end;
	long long n;
	double d;
	switch (p->kind) {
	case OPT_TEXT:
		if (strlen(value) >= p->size) {
			fprintf(stderr, "%s: --%s is too long\n", spec->prog, p->name);
			return -1;
		}
		memcpy(at, value, strlen(value) + 1);
		return 0;
	case OPT_INT:
		errno = 0;
		n = strtoll(value, &end, 10);
		if (errno || !*value || *end || n < p->min || (p->max && n > p->max))
			return invalid(spec, p, value);
		memcpy(at, &n, sizeof(n));
		return 0;
	case OPT_DURATION:
		if (duration_parse(value, &n) < 0 || n < p->min || n > p->max)
			return invalid(spec, p, value);
		memcpy(at, &n, sizeof(n));
		return 0;
	case OPT_REAL:
		errno = 0;
		d = strtod(value, &end);
		/* !(d >= fmin) also refuses NaN; the bound refuses inf */
		if (errno || !*value || *end || !(d >= p->fmin) || d > p->fmax)
			return invalid(spec, p, value);
		memcpy(at, &d, sizeof(d));
		return 0;
	case OPT_ON_OFF:
		if (strcmp(value, "on") && strcmp(value, "off")) {
			fprintf(stderr, "%s: --%s must be on or off\n", spec->prog, p->name);
			return -1;
		}
		*(int *)(void *)at = !strcmp(value, "on");
		return 0;
	case OPT_FN:
		return p->fn(o, spec->prog, value);
	}
	return -1;
}

int opts_set(const struct opts_spec *spec, void *o, const char *name, const char *value)
{
	const struct opt *p = find(spec, name);
	if (!p) {
		fprintf(stderr, "%s: unknown option '%s'\n", spec->prog, name);
		return -1;
	}
	return set(spec, p, o, value);
}

int opts_read_file(const struct opts_spec *spec, void *o, const char *path)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		fprintf(stderr, "%s: cannot open config '%s': %s\n", spec->prog, path,
			strerror(errno));
		return -1;
	}
	char line[4096];
	int lineno = 0, r = 0;
	while (r == 0 && fgets(line, sizeof(line), f)) {
		lineno++;
		line[strcspn(line, "#\r\n")] = '\0';
		char name[64], value[4000];
		if (sscanf(line, " %63[a-z-] = %3999[^\n]", name, value) != 2) {
			if (strspn(line, " \t") != strlen(line)) {
				fprintf(stderr, "%s: %s:%d: expected 'name = value'\n", spec->prog,
					path, lineno);
				r = -1;
			}
			continue;
		}
		size_t n = strlen(value);
		while (n && (value[n - 1] == ' ' || value[n - 1] == '\t'))
			value[--n] = '\0';
		const struct opt *p = find(spec, name);
		if (!p) {
			fprintf(stderr, "%s: %s:%d: unknown option '%s'\n", spec->prog, path,
				lineno, name);
			r = -1;
		} else {
			r = set(spec, p, o, value);
		}
	}
	fclose(f);
	return r;
}

int opts_parse(const struct opts_spec *spec, void *o, int argc, char **argv, int *first)
{
	/* The config files first, so flags override them wherever they stand. */
	for (int i = 1; i < argc; i++) {
		const char *v = !strcmp(argv[i], "--config") && i + 1 < argc ? argv[i + 1]
				: !strncmp(argv[i], "--config=", 9) ? argv[i] + 9 : NULL;
		if (v && opts_read_file(spec, o, v) < 0)
			return -1;
	}
	size_t n = 0;
	while (spec->opts[n].name)
		n++;
	struct option *longopts = calloc(n + 3, sizeof(*longopts));
	if (!longopts) {
		fprintf(stderr, "%s: out of memory\n", spec->prog);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		longopts[i] = (struct option){ spec->opts[i].name, required_argument, NULL,
					       VAL_BASE + (int)i };
	longopts[n] = (struct option){ "config", required_argument, NULL, 'c' };
	longopts[n + 1] = (struct option){ "help", no_argument, NULL, 'h' };
	int c, r = 0;
	optind = 1;
	while (r == 0 && (c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (c == 'h') {
			fputs(spec->usage, stdout);
			r = 1;
		} else if (c != 'c' && (c < VAL_BASE ||
					set(spec, &spec->opts[c - VAL_BASE], o, optarg) < 0)) {
			fprintf(stderr, "%s: see %s --help\n", spec->prog, spec->prog);
			r = -1;
		}
	}
	free(longopts);
	if (r == 0 && optind < argc && !spec->args) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", spec->prog, argv[optind]);
		r = -1;
	}
	if (r == 0 && first)
		*first = optind;
	return r;
}
