/* conffile: "name = value" options files (conffile.h). */
#include "common/conffile.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

int conf_read(const char *prog, const char *path, const struct option *longopts,
	      conf_apply_fn apply, void *arg)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		fprintf(stderr, "%s: cannot open config '%s': %s\n", prog, path, strerror(errno));
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
				fprintf(stderr, "%s: %s:%d: expected 'name = value'\n", prog, path, lineno);
				r = -1;
			}
			continue;
		}
		size_t n = strlen(value);
		while (n && (value[n - 1] == ' ' || value[n - 1] == '\t'))
			value[--n] = '\0';
		const struct option *opt = longopts;
		while (opt->name && strcmp(opt->name, name))
			opt++;
		if (!opt->name || !strcmp(opt->name, "config") || !strcmp(opt->name, "help")) {
			fprintf(stderr, "%s: %s:%d: unknown option '%s'\n", prog, path, lineno, name);
			r = -1;
		} else {
			r = apply(arg, opt->val, value);
		}
	}
	fclose(f);
	return r;
}
