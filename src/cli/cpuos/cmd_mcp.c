/* cmd_mcp: the stdio transport of MCP around src/mcp (cmd_mcp.h). Only
 * answers go to stdout; what goes wrong goes to stderr, which MCP clients
 * keep as the server's log. */
#include "cli/cpuos/cmd_mcp.h"

#include "cli/cpuos/cli.h"
#include "cli/cpuos/http.h"
#include "mcp/mcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_BYTES (8u << 20) /* one message, with a file's content in it */

int cmd_mcp(struct cli *c, int argc, char **argv)
{
	(void)argv;
	if (argc > 1)
		return cli_usage_err("mcp", "mcp takes no arguments");
	struct api *a = cli_api(c);
	if (!a)
		return EXIT_API;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	while ((n = getline(&line, &cap, stdin)) >= 0) {
		while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (!n)
			continue;
		json_t *answer;
		if ((size_t)n > LINE_MAX_BYTES) {
			answer = mcp_error(NULL, MCP_INVALID_REQUEST, "a message is at most 8 MiB");
		} else {
			json_error_t e;
			json_t *msg = json_loadb(line, (size_t)n, 0, &e);
			answer = msg ? mcp_handle(a, msg) : mcp_error(NULL, MCP_PARSE_ERROR, e.text);
			json_decref(msg);
		}
		if (!answer)
			continue;
		char *s = json_dumps(answer, JSON_COMPACT);
		json_decref(answer);
		if (!s || printf("%s\n", s) < 0 || fflush(stdout) != 0) {
			free(s);
			break; /* the client went away */
		}
		free(s);
	}
	free(line);
	return 0;
}
