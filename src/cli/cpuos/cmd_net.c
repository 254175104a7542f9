/*
 * cmd_net: net, a sandbox's egress network policy: GET or PUT
 * /v1/sandboxes/{id}/network. It prints the policy one field a line (or
 * with --json the daemon's answer), the same after a change. url: the URL
 * of a sandbox's port, from its port_url and traffic_token.
 */
#include "cli/cpuos/cmd_net.h"
#include "cli/cpuos/cli.h"
#include "cli/cpuos/http.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char net_usage[] =
    "usage: cpuos net [--json] SANDBOX\n"
    "       cpuos net [--json] SANDBOX allow-all|deny-all|JSON [--deny-cidr CIDR]...\n"
    "       cpuos net [--json] SANDBOX [--mode MODE] [--allow-host HOST]...\n"
    "                 [--allow-cidr CIDR]... [--deny-cidr CIDR]...\n"
    "Prints a sandbox's egress network policy and, while it runs, how many packets\n"
    "it refused. With a policy, replaces it: at once while the sandbox runs, from\n"
    "its resume while it is paused. JSON is a whole policy as the API spells it,\n"
    "e.g. '{\"mode\": \"custom\", \"allowedHosts\": [\"pypi.org\"]}'.\n"
    "\n"
    "      --mode MODE         allow-all, deny-all or custom (custom is the default\n"
    "                          with --allow-host or --allow-cidr)\n"
    "      --allow-host HOST   a name it may reach, *.example.com for the names\n"
    "                          under it (repeatable; custom only)\n"
    "      --allow-cidr CIDR   addresses it may reach, e.g. 10.1.0.0/16; private\n"
    "                          ranges only this way (repeatable; custom only)\n"
    "      --deny-cidr CIDR    addresses it may not reach, over every allow\n"
    "                          (repeatable; any mode)\n"
    "      --json              print the daemon's answer\n";

json_t *cli_net_policy(const char *arg, const char *cmd, const char *opt)
{
	const char *s = arg + strspn(arg, " \t\n");
	json_error_t jerr;
	json_t *j;
	if (*s != '{') {
		/* A mode: allow-all, deny-all, or what the daemon will refuse. */
		if (!(j = *s ? json_pack("{ss}", "mode", arg) : NULL))
			cli_usage_err(cmd, "invalid %s '%s'", opt, arg);
		return j;
	}
	if (!(j = json_loads(s, 0, &jerr))) {
		cli_usage_err(cmd, "invalid %s '%s': %s", opt, arg, jerr.text);
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		cli_usage_err(cmd, "invalid %s '%s': not a JSON object", opt, arg);
		return NULL;
	}
	return j;
}

/* "allowed hosts    a.b, *.c.d" when list holds anything. */
static void print_list(const char *label, const json_t *list)
{
	const json_t *v;
	size_t i;
	if (!json_array_size(list))
		return;
	printf("%-17s", label);
	json_array_foreach(list, i, v)
	{
		const char *s = json_string_value(v);
		printf("%s%s", i ? ", " : "", s ? s : "-");
	}
	printf("\n");
}

/* The answer of GET or PUT: {"policy": {...} or null, "refused_packets": N}. */
static int print_net(struct cli *c, const json_t *answer)
{
	const json_t *pol = json_object_get(answer, "policy");
	const json_t *refused = json_object_get(answer, "refused_packets");
	if (json_is_null(pol)) {
		printf("mode             none (cpuosd runs without networks)\n");
	} else if (!json_is_object(pol)) {
		cli_err("unexpected answer from cpuosd at %s: no policy", api_url(c->api));
		return EXIT_API;
	} else {
		printf("mode             %s\n", cli_str(pol, "mode"));
		print_list("allowed hosts", json_object_get(pol, "allowedHosts"));
		print_list("allowed CIDRs", json_object_get(pol, "allowedCIDRs"));
		print_list("denied CIDRs", json_object_get(pol, "deniedCIDRs"));
	}
	if (json_is_integer(refused))
		printf("refused packets  %" JSON_INTEGER_FORMAT "\n", json_integer_value(refused));
	return 0;
}

/* The PUT body from the operand and options; NULL with *ret set when
 * there is none to send (*ret 0: show the policy) or they do not fit. */
static json_t *policy_body(const char *policy, const char *mode, json_t *hosts, json_t *allow,
			   json_t *deny, int *ret)
{
	int lists = json_array_size(hosts) || json_array_size(allow);
	json_t *body;
	*ret = 0;
	if (policy && *(policy + strspn(policy, " \t\n")) == '{') {
		if (mode || lists || json_array_size(deny)) {
			*ret = cli_usage_err("net", "a JSON policy takes no --mode, --allow-host, "
						    "--allow-cidr or --deny-cidr");
			return NULL;
		}
		if (!(body = cli_net_policy(policy, "net", "policy")))
			*ret = EXIT_USAGE;
		return body;
	}
	if (policy && mode) {
		*ret = cli_usage_err("net", "two modes: '%s' and --mode %s", policy, mode);
		return NULL;
	}
	if (!(mode = policy ? policy : mode) && lists)
		mode = "custom";
	if (!mode) {
		if (json_array_size(deny))
			*ret =
			    cli_usage_err("net", "--deny-cidr needs a mode (allow-all, deny-all, "
						 "or --allow-host or --allow-cidr for custom)");
		return NULL;
	}
	if (!(body = cli_net_policy(mode, "net", "mode"))) {
		*ret = EXIT_USAGE;
		return NULL;
	}
	if (json_array_size(hosts))
		json_object_set(body, "allowedHosts", hosts);
	if (json_array_size(allow))
		json_object_set(body, "allowedCIDRs", allow);
	if (json_array_size(deny))
		json_object_set(body, "deniedCIDRs", deny);
	return body;
}

int cmd_net(struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"mode", required_argument, 0, 'M'},
	    {"allow-host", required_argument, 0, 'H'},
	    {"allow-cidr", required_argument, 0, 'A'},
	    {"deny-cidr", required_argument, 0, 'D'},
	    {"json", no_argument, 0, 'j'},
	    {"help", no_argument, 0, 'h'},
	    {0, 0, 0, 0},
	};
	json_t *hosts = json_array(), *allow = json_array(), *deny = json_array();
	json_t *body = NULL, *answer = NULL, *list;
	const char *mode = NULL, *opt;
	int json = 0, ret = EXIT_USAGE, o;
	struct api *a;
	struct apath p;

	if (!hosts || !allow || !deny) {
		cli_err("out of memory");
		ret = EXIT_API;
		goto out;
	}
	optind = 0;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'M':
			mode = optarg;
			break;
		case 'H':
		case 'A':
		case 'D':
			/* Names and CIDRs are the daemon's to judge, like every value. */
			list = o == 'H' ? hosts : o == 'A' ? allow : deny;
			opt = o == 'H' ? "--allow-host" : o == 'A' ? "--allow-cidr" : "--deny-cidr";
			if (json_array_append_new(list, json_string(optarg)) < 0) {
				ret = cli_usage_err("net", "invalid %s '%s'", opt, optarg);
				goto out;
			}
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			fputs(net_usage, stdout);
			ret = 0;
			goto out;
		default:
			fputs(net_usage, stderr);
			goto out;
		}
	}
	if (optind >= argc) {
		ret = cli_usage_err("net", "no sandbox given");
		goto out;
	}
	if (optind + 2 < argc) {
		ret = cli_usage_err("net", "unexpected argument '%s'", argv[optind + 2]);
		goto out;
	}
	body = policy_body(optind + 1 < argc ? argv[optind + 1] : NULL, mode, hosts, allow, deny,
			   &ret);
	if (!body && ret)
		goto out;
	ret = EXIT_API;
	if (!(a = cli_api(c)))
		goto out;
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, argv[optind]);
	apath_add(&p, "/network");
	if (api_json(a, body ? "PUT" : "GET", &p, body, &answer) < 0) {
		ret = cli_api_fail(a);
		goto out;
	}
	if (json) {
		cli_print_json(answer);
		ret = 0;
	} else {
		ret = print_net(c, answer);
	}
out:
	json_decref(answer);
	json_decref(body);
	json_decref(deny);
	json_decref(allow);
	json_decref(hosts);
	return ret;
}

static const char url_usage[] =
    "usage: cpuos url SANDBOX PORT\n"
    "Prints the URL at which cpuosd serves a port of the sandbox (HTTP and\n"
    "WebSocket; the server in it must listen on 0.0.0.0). Unless the sandbox is\n"
    "public the URL carries its traffic token. A request resumes a paused sandbox.\n";

int cmd_url(struct cli *c, int argc, char **argv)
{
	if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		fputs(url_usage, stdout);
		return 0;
	}
	if (argc < 3)
		return cli_usage_err("url", "a sandbox and a port are needed");
	if (argc > 3)
		return cli_usage_err("url", "unexpected argument '%s'", argv[3]);
	char *end;
	long port = strtol(argv[2], &end, 10);
	if (!*argv[2] || *end || port < 1 || port > 65535)
		return cli_usage_err("url", "invalid port '%s' (1 to 65535)", argv[2]);
	struct api *a = cli_api(c);
	if (!a)
		return EXIT_API;
	struct apath p;
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, argv[1]);
	json_t *answer = NULL;
	if (api_json(a, "GET", &p, NULL, &answer) < 0)
		return cli_api_fail(a);
	const char *pattern = json_string_value(json_object_get(answer, "port_url"));
	const char *token = json_string_value(json_object_get(answer, "traffic_token"));
	const char *at = pattern ? strstr(pattern, "{port}") : NULL;
	int ret = 0;
	if (!at) {
		cli_err("this cpuosd serves no port URLs (it runs with --url-listen none)");
		ret = EXIT_API;
	} else {
		printf("%.*s%ld%s", (int)(at - pattern), pattern, port, at + 6);
		if (!json_is_true(json_object_get(answer, "public")) && token)
			printf("?cpuos_token=%s", token);
		putchar('\n');
	}
	json_decref(answer);
	return ret;
}
