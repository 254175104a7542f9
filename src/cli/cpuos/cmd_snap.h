/*
 * cmd_snap: the cpuos commands that keep or copy a sandbox's state: pause,
 * resume, fork, checkpoint, checkpoints, checkpoint-rm; and usage, what an
 * account ran and what it cost. Each takes argv from its own name on and
 * returns the exit status (0, EXIT_API, EXIT_USAGE).
 */
#ifndef CPUOS_CLI_CMD_SNAP_H
#define CPUOS_CLI_CMD_SNAP_H

struct cli;

/* Prints the session id to resume it by. */
int cmd_pause(struct cli *c, int argc, char **argv);
/* Takes a sandbox or a session id; prints the sandbox id. */
int cmd_resume(struct cli *c, int argc, char **argv);
/* Prints the new sandboxes' ids, one per line. */
int cmd_fork(struct cli *c, int argc, char **argv);
/* Prints the new checkpoint's id. */
int cmd_checkpoint(struct cli *c, int argc, char **argv);
/* The account's checkpoints as a table, newest first. */
int cmd_checkpoints(struct cli *c, int argc, char **argv);
/* Deletes checkpoints by id or name; goes on past a failure. */
int cmd_checkpoint_rm(struct cli *c, int argc, char **argv);
int cmd_usage(struct cli *c, int argc, char **argv);

#endif
