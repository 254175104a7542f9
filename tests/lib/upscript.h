/*
 * upscript: what the tests' servers started by a script (scripts/objstore.sh,
 * scripts/pg.sh) share: a free loopback port, and the script's "export
 * NAME=VALUE" lines taken into the environment of the binary and its cases.
 */
#ifndef CPUOS_TESTS_UPSCRIPT_H
#define CPUOS_TESTS_UPSCRIPT_H

/* The first of n free TCP ports in a row on 127.0.0.1, tried from a spot
 * that depends on the pid within [lo, lo + span), or 0 if none. */
int upscript_ports(int n, int lo, int span);
/* Runs cmd (a shell command) and sets each "export NAME=VALUE" line it
 * prints: how many, or -1 when it could not run or failed (its stderr
 * passes through). */
int upscript_run(const char *cmd);

#endif
