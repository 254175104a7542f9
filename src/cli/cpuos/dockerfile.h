/*
 * dockerfile: a Dockerfile's text (dockerfile.c), for build.c: its
 * instructions, with the expansion of $VAR in them and the forms their
 * arguments take. Pure: no sandbox, no API.
 */
#ifndef CPUOS_CLI_DOCKERFILE_H
#define CPUOS_CLI_DOCKERFILE_H

#include <jansson.h>
#include <stddef.h>

struct df_instr {
	char kw[16];  /* upper-cased */
	char *args;   /* the rest, continuations joined (malloc'd) */
	int line;     /* where it began */
};

/* The instructions of text (changed in place) into steps[max]: lines
 * joined at a trailing backslash, comments and blank lines dropped.
 * 0, or -1 after saying why. */
int df_parse(char *text, struct df_instr *steps, int max, int *nsteps);
/* in with $NAME, ${NAME} and ${NAME:-default} from env, then args
 * (objects of strings); "\$" is a '$'. 0, or -1 when out[n] is short. */
int df_expand(const json_t *env, const json_t *args, const char *in, char *out, size_t n);
/* The exec form (a JSON array of strings), or the shell form as
 * /bin/sh -c: a new reference. */
json_t *df_argv(const char *args);
/* "K=V K2=V2" (values may be quoted) or "K V" into obj: 0 or -1. */
int df_pairs(const char *s, json_t *obj);

#endif
