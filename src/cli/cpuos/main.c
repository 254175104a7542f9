/*
 * cpuos: the command-line client of cpuosd. main parses the global options
 * (--url, --key) and hands the rest to one command; each command returns
 * the process's exit status (0, 1 for cpuosd's errors, 2 for usage).
 */
#include "cli/cpuos/cli.h"
#include "cli/cpuos/cmd_admin.h"
#include "cli/cpuos/cmd_code.h"
#include "cli/cpuos/cmd_files.h"
#include "cli/cpuos/cmd_mcp.h"
#include "cli/cpuos/cmd_net.h"
#include "cli/cpuos/cmd_secret.h"
#include "cli/cpuos/cmd_shell.h"
#include "cli/cpuos/cmd_sbx.h"
#include "cli/cpuos/cmd_snap.h"
#include "cli/cpuos/http.h"

#include <curl/curl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: cpuos [--url URL] [--key KEY] COMMAND [ARGS]\n"
    "\n"
    "Commands:\n"
    "  up                      start cpuosd unless it is running\n"
    "  create                  create a sandbox, print its id\n"
    "  exec SANDBOX -- CMD     run a command in a sandbox, streaming its output\n"
    "  shell SANDBOX           an interactive terminal in a sandbox\n"
    "  code SANDBOX [CODE]     run code in the sandbox's stateful interpreter\n"
    "  cp SRC DST              copy a file into or out of a sandbox (SANDBOX:/PATH)\n"
    "  ls [SANDBOX:/PATH]      list sandboxes, or files in a sandbox\n"
    "  kill SANDBOX...         stop sandboxes\n"
    "  net SANDBOX [POLICY]    show or set a sandbox's egress network policy\n"
    "  url SANDBOX PORT        the URL at which a port of the sandbox is served\n"
    "  secret set|ls|rm        egress secrets: values only their hosts get\n"
    "  pause SANDBOX           pause a sandbox, print its session id\n"
    "  resume SANDBOX|SESSION  resume a paused sandbox\n"
    "  fork SANDBOX [-n N]     copy a running sandbox N times, print the new ids\n"
    "  checkpoint SANDBOX NAME save a sandbox as a named checkpoint, print its id\n"
    "  checkpoints             list checkpoints\n"
    "  checkpoint-rm CKP...    delete checkpoints (by id or name)\n"
    "  usage                   what the account ran and what it cost, by time range\n"
    "  keys create|ls|rm       manage API keys (administrator)\n"
    "  nodes [ls|drain|undrain] the nodes sharing the database (administrator)\n"
    "  templates [ls|build|import]  list templates, build one, import an OCI image\n"
    "  mcp                     serve cpuos's tools to an MCP client on stdio\n"
    "  version                 print the versions of cpuos and cpuosd\n"
    "Run 'cpuos COMMAND --help' for a command's options.\n"
    "\n"
    "  --url URL   cpuosd's address: http://HOST:PORT or unix:///PATH (default\n"
    "              $CPUOS_API_URL; else, without a key, the Unix socket\n"
    "              $CPUOS_SOCKET or " CLI_DEFAULT_SOCKET " if it exists; else\n"
    "              " CLI_DEFAULT_URL ")\n"
    "  --key KEY   API key (default $CPUOS_API_KEY); not needed on the socket\n";

static int cmd_version(struct cli *c, int argc, char **argv)
{
	(void)argv;
	struct apath p;
	json_t *h = NULL;
	struct api *a;
	if (argc > 1)
		return cli_usage_err(NULL, "version takes no arguments");
	printf("cpuos %s\n", CPUOS_VERSION);
	if (!(a = cli_api(c)))
		return EXIT_API;
	api_set_timeout(a, 5000);
	apath_init(&p, "/v1/health");
	if (api_json(a, "GET", &p, NULL, &h) < 0)
		printf("cpuosd: %s\n", api_error(a));
	else
		printf("cpuosd %s at %s\n", cli_str(h, "version"), api_url(a));
	json_decref(h);
	return 0;
}

static const struct command {
	const char *name;
	int (*fn)(struct cli *c, int argc, char **argv);
} commands[] = {
    {"up", cmd_up},	      {"create", cmd_create},
    {"exec", cmd_exec},	      {"shell", cmd_shell},	{"code", cmd_code},	{"cp", cmd_cp},
    {"ls", cmd_ls},	      {"kill", cmd_kill},
    {"keys", cmd_keys},	      {"templates", cmd_templates}, {"template", cmd_templates},
    {"pause", cmd_pause},     {"resume", cmd_resume},
    {"fork", cmd_fork},	      {"checkpoint", cmd_checkpoint},
    {"checkpoints", cmd_checkpoints}, {"checkpoint-rm", cmd_checkpoint_rm},
    {"usage", cmd_usage},     {"version", cmd_version},
    {"net", cmd_net},	      {"url", cmd_url},
    {"secret", cmd_secret},   {"nodes", cmd_nodes},
    {"mcp", cmd_mcp},
};

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"url", required_argument, 0, 'U'},
	    {"key", required_argument, 0, 'K'},
	    {"help", no_argument, 0, 'h'},
	    {"version", no_argument, 0, 'V'},
	    {0, 0, 0, 0},
	};
	struct cli c = {0};
	int o, ret;

	while ((o = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (o) {
		case 'U':
			c.url = optarg;
			break;
		case 'K':
			c.key = optarg;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		case 'V':
			printf("cpuos %s\n", CPUOS_VERSION);
			return 0;
		default:
			fputs(usage, stderr);
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		fputs(usage, stderr);
		return EXIT_USAGE;
	}
	const char *name = argv[optind];
	if (!strcmp(name, "help")) {
		if (optind + 1 >= argc) {
			fputs(usage, stdout);
			return 0;
		}
		/* "cpuos help exec" is "cpuos exec --help" */
		argv[optind] = argv[optind + 1];
		argv[optind + 1] = "--help";
		name = argv[optind];
	}
	const struct command *cmd = NULL;
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(commands[i].name, name))
			cmd = &commands[i];
	if (!cmd)
		return cli_usage_err(NULL, "unknown command '%s'", name);

	/* A closed pipe (cpuos ls | head) must fail a write, not kill us
	 * before an exit code is reported. */
	signal(SIGPIPE, SIG_IGN);
	/* Before any thread: curl_global_init is not thread-safe. */
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
		cli_err("cannot initialise libcurl");
		return EXIT_API;
	}
	ret = cmd->fn(&c, argc - optind, argv + optind);
	fflush(stdout);
	api_free(c.api);
	curl_global_cleanup();
	return ret;
}
