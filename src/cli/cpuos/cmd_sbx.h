/*
 * cmd_sbx: the sandbox commands of cpuos: create, ls (sandboxes), kill and
 * exec. Each takes argv from its own name on and returns the exit status.
 */
#ifndef CPUOS_CLI_CMD_SBX_H
#define CPUOS_CLI_CMD_SBX_H

struct cli;

int cmd_create(struct cli *c, int argc, char **argv);
/* Sandboxes; "ls SANDBOX:/path" is handed to cmd_ls_files. */
int cmd_ls(struct cli *c, int argc, char **argv);
int cmd_kill(struct cli *c, int argc, char **argv);
/* Exits with the command's status: its code, 128+N for signal N, 124 for
 * its timeout, 125 when cpuos itself failed. */
int cmd_exec(struct cli *c, int argc, char **argv);

#endif
