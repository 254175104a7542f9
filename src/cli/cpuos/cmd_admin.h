/*
 * cmd_admin: the administrator's cpuos commands: up (start cpuosd unless it
 * runs), keys and nodes (on the Unix socket only) and templates (list,
 * build).
 */
#ifndef CPUOS_CLI_CMD_ADMIN_H
#define CPUOS_CLI_CMD_ADMIN_H

struct cli;

int cmd_up(struct cli *c, int argc, char **argv);
int cmd_keys(struct cli *c, int argc, char **argv);
int cmd_nodes(struct cli *c, int argc, char **argv);
/* "templates build" exits with the build script's status. */
int cmd_templates(struct cli *c, int argc, char **argv);

#endif
