/*
 * cmd_files: files in a sandbox: cp (both ways, streamed, never a whole
 * file in memory) and the listing behind "cpuos ls SANDBOX:/path".
 */
#ifndef CPUOS_CLI_CMD_FILES_H
#define CPUOS_CLI_CMD_FILES_H

#include <sys/types.h>

struct cli;

/* cp LOCAL SANDBOX:/path, cp SANDBOX:/path LOCAL; "-" is stdin or stdout. */
int cmd_cp(struct cli *c, int argc, char **argv);
/* Lists path in sandbox id, depth levels deep (0: the daemon's default),
 * as a table or as the daemon's JSON. Returns the exit status. */
int files_ls(struct cli *c, const char *id, const char *path, unsigned depth, int json);
/* The local tar with argv, its stdin (to_tar) or stdout the other end of a
 * pipe returned in *fd: its pid, or -1 after saying why. */
pid_t cli_tar_start(char *const argv[], int to_tar, int *fd);
/* Waits for it: 0 when it succeeded, else -1 after saying so. */
int cli_tar_end(pid_t pid);

#endif
