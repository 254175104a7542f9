/*
 * cmd_files: files in a sandbox: cp (both ways, streamed, never a whole
 * file in memory) and the listing behind "cpuos ls SANDBOX:/path".
 */
#ifndef CPUOS_CLI_CMD_FILES_H
#define CPUOS_CLI_CMD_FILES_H

struct cli;

/* cp LOCAL SANDBOX:/path, cp SANDBOX:/path LOCAL; "-" is stdin or stdout. */
int cmd_cp(struct cli *c, int argc, char **argv);
/* Lists path in sandbox id, depth levels deep (0: the daemon's default),
 * as a table or as the daemon's JSON. Returns the exit status. */
int files_ls(struct cli *c, const char *id, const char *path, unsigned depth, int json);

#endif
