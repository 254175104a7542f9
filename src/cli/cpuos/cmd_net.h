/*
 * cmd_net: a sandbox's egress network policy: net shows it (and the packets
 * it refused) or replaces it; cli_net_policy reads the --network argument of
 * create. Policies go in the API's spelling (docs/api.md): the daemon judges
 * them.
 */
#ifndef CPUOS_CLI_CMD_NET_H
#define CPUOS_CLI_CMD_NET_H

#include <jansson.h>

struct cli;

/* Shows or replaces the policy; returns the exit status (0, EXIT_API,
 * EXIT_USAGE). */
int cmd_net(struct cli *c, int argc, char **argv);

/* Prints the URL of a sandbox's port: 0, EXIT_API or EXIT_USAGE. */
int cmd_url(struct cli *c, int argc, char **argv);

/* The policy that arg (given to option opt of command cmd) names: a JSON
 * object as given, else {"mode": arg} ("allow-all", "deny-all"). A new
 * reference, or NULL after printing why (then exit with EXIT_USAGE). */
json_t *cli_net_policy(const char *arg, const char *cmd, const char *opt);

#endif
