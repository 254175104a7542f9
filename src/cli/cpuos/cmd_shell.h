/*
 * cmd_shell: cpuos shell, an interactive terminal in a sandbox.
 */
#ifndef CPUOS_CLI_CMD_SHELL_H
#define CPUOS_CLI_CMD_SHELL_H

struct cli;

/* Exits with the shell's status: its code, 128+N for signal N, 125 when
 * cpuos itself failed. */
int cmd_shell(struct cli *c, int argc, char **argv);

#endif
