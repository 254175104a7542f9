/*
 * cmd_code: "cpuos code SANDBOX [CODE]", a call of the sandbox's stateful
 * interpreter (a code context).
 */
#ifndef CPUOS_CLI_CMD_CODE_H
#define CPUOS_CLI_CMD_CODE_H

struct cli;

/* Returns the exit status: 0, 1 when the code raised or cpuosd refused,
 * 2 for a bad command line. */
int cmd_code(struct cli *c, int argc, char **argv);

#endif
