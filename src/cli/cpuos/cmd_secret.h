/*
 * cmd_secret: the account's egress secrets: set (the value read from
 * stdin, never from the command line, where ps would show it), ls, rm.
 */
#ifndef CPUOS_CLI_CMD_SECRET_H
#define CPUOS_CLI_CMD_SECRET_H

struct cli;

/* Returns the exit status (0, EXIT_API, EXIT_USAGE). */
int cmd_secret(struct cli *c, int argc, char **argv);

#endif
