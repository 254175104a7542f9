/* cmd_mcp: `cpuos mcp`, cpuos's tools as an MCP server on stdio, for the
 * MCP clients that start their servers as commands (Claude Code, Cursor,
 * Codex): one JSON-RPC message per line in, its answer per line out. */
#ifndef CPUOS_CLI_CMD_MCP_H
#define CPUOS_CLI_CMD_MCP_H

struct cli;

/* Serves until stdin ends: 0, or EXIT_API when cpuosd has no handle. */
int cmd_mcp(struct cli *c, int argc, char **argv);

#endif
