/*
 * gw_config: cpuos-gateway's options, from a config file ('name = value'
 * lines, names as the long options) and then the command line, which wins;
 * and its two secrets, the upstream's key and cpuosd's, from files or the
 * environment (never from the command line, where ps shows them).
 */
#ifndef CPUOS_GW_CONFIG_H
#define CPUOS_GW_CONFIG_H

#include <limits.h>

struct gw_config {
	char listen[128];
	char upstream_url[1024];
	char upstream_key_file[PATH_MAX];
	char cpuos_url[1024];
	char cpuos_key_file[PATH_MAX];
	char state_dir[PATH_MAX];
	char template_[64];
	char tool_name[65];
	char log_level[16];
	char name[128]; /* keys create --name */
	long long max_steps;
	long long upstream_timeout_s, sandbox_timeout_s, code_timeout_s;
	long long max_body_bytes, max_file_bytes;
	/* what is left of the command line: the subcommand and its words */
	char **args;
	int nargs;
};

/* Fills c from the defaults, then every --config file, then the flags.
 * 0 to run; 1 after printing --help (exit 0); -1 after saying what is
 * wrong on stderr (exit 2). */
int gw_config_parse(struct gw_config *c, int argc, char **argv);

/* A secret from file (if set; its first line) or else the environment
 * variable env: a malloc'd string, "" when neither has one; NULL after
 * saying on stderr why the file could not be read. */
char *gw_config_secret(const char *file, const char *env);

#endif
