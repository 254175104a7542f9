/*
 * conffile: the options files of cpuosd and cpuos-gateway (--config FILE):
 * one "name = value" per line, '#' starts a comment, the names are the
 * program's long options.
 */
#ifndef CPUOS_CONFFILE_H
#define CPUOS_CONFFILE_H

struct option;

/* Takes one option: its getopt value and its text. 0, or -1 after printing
 * why. */
typedef int (*conf_apply_fn)(void *arg, int val, const char *value);

/* Reads path, giving each line's option to apply; "config" and "help" are
 * not options there. 0, or -1 after printing why on stderr as
 * "PROG: PATH:LINE: ..." (or the first failure of apply). */
int conf_read(const char *prog, const char *path, const struct option *longopts,
	      conf_apply_fn apply, void *arg);

#endif
