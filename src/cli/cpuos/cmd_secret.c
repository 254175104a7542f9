/* cmd_secret: see cmd_secret.h. */
#include "cli/cpuos/cmd_secret.h"
#include "cli/cpuos/cli.h"
#include "cli/cpuos/http.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VALUE 8192

static const char secret_usage[] =
    "usage: cpuos secret set NAME --host HOST [--host HOST]... [--allow-http] < VALUE\n"
    "       cpuos secret ls [--json]\n"
    "       cpuos secret rm NAME...\n"
    "Egress secrets: a sandbox created with --secret NAME sees only a placeholder\n"
    "in $NAME; cpuosd's egress proxy puts the value in its place in request\n"
    "headers sent to the secret's hosts (HTTPS too), and nowhere else.\n"
    "\n"
    "  set     registers NAME (an environment variable's name) or replaces its\n"
    "          value and hosts; the value is read from stdin (a last newline is\n"
    "          dropped). Running sandboxes use the new value at once.\n"
    "  --host  a host the value may go to: api.example.com, or *.example.com for\n"
    "          every name under example.com (1 to 16)\n"
    "  --allow-http  in plain HTTP requests too (default: HTTPS only, to a server\n"
    "          whose certificate names the host)\n"
    "  ls      the account's secrets, their hosts and placeholders (never values)\n"
    "  rm      deletes secrets: no request gets their values from then on\n";

static int secret_set(struct api *a, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"host", required_argument, 0, 'H'}, {"allow-http", no_argument, 0, 'A'},
	    {"help", no_argument, 0, 'h'},	 {0, 0, 0, 0},
	};
	json_t *hosts = json_array(), *body = NULL, *answer = NULL;
	char *value = malloc(MAX_VALUE + 3);
	int o, ret = EXIT_USAGE, http = 0;
	optind = 0;
	while (hosts && value && (o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (o == 'H') {
			json_array_append_new(hosts, json_string(optarg));
			continue;
		}
		if (o == 'A') {
			http = 1;
			continue;
		}
		fputs(secret_usage, o == 'h' ? stdout : stderr);
		ret = o == 'h' ? 0 : EXIT_USAGE;
		goto out;
	}
	if (!hosts || !value) {
		cli_err("out of memory");
		ret = EXIT_API;
		goto out;
	}
	if (optind + 1 != argc) {
		ret = cli_usage_err("secret", optind < argc ? "one NAME only" : "secret set needs a NAME");
		goto out;
	}
	if (!json_array_size(hosts)) {
		ret = cli_usage_err("secret", "secret set needs --host");
		goto out;
	}
	/* One byte past the most a value and its newline take: a longer
	 * one is refused, not cut. */
	size_t n = fread(value, 1, MAX_VALUE + 3, stdin);
	if (n && value[n - 1] == '\n')
		n--;
	if (n && value[n - 1] == '\r')
		n--;
	if (n > MAX_VALUE || !n || memchr(value, '\0', n)) {
		ret = cli_usage_err("secret", "the value on stdin must be 1 to %d bytes of text",
				    MAX_VALUE);
		goto out;
	}
	value[n] = '\0';
	body = json_pack("{s:s, s:O, s:b}", "value", value, "hosts", hosts, "allow_http", http);
	if (!body) {
		ret = cli_usage_err("secret", "the value is not text");
		goto out;
	}
	struct apath p;
	apath_init(&p, "/v1/secrets");
	apath_seg(&p, argv[optind]);
	ret = api_json(a, "PUT", &p, body, &answer) < 0 ? cli_api_fail(a) : 0;
	if (!ret)
		printf("%s\n", cli_str(answer, "placeholder"));
out:
	if (value) {
		memset(value, 0, MAX_VALUE + 3);
		free(value);
	}
	json_decref(answer);
	json_decref(body);
	json_decref(hosts);
	return ret;
}

static int secret_ls(struct api *a, int json)
{
	static const char *const hdr[] = {"NAME", "HOSTS", "PLACEHOLDER", "UPDATED"};
	json_t *list = NULL, *rows = json_array(), *s, *h;
	struct apath p;
	size_t i, k;
	int ret = 0;
	apath_init(&p, "/v1/secrets");
	if (api_json(a, "GET", &p, NULL, &list) < 0) {
		json_decref(rows);
		return cli_api_fail(a);
	}
	if (json) {
		cli_print_json(list);
		goto out;
	}
	json_array_foreach(json_object_get(list, "secrets"), i, s)
	{
		char hosts[1024] = "";
		size_t at = 0;
		json_array_foreach(json_object_get(s, "hosts"), k, h)
			if (at < sizeof(hosts))
				at += (size_t)snprintf(hosts + at, sizeof(hosts) - at, "%s%s",
						       k ? "," : "", json_string_value(h));
		json_array_append_new(rows, json_pack("[ssss]", cli_str(s, "name"), hosts,
						      cli_str(s, "placeholder"),
						      cli_str(s, "updated_at")));
	}
	cli_table(hdr, 4, rows);
out:
	json_decref(rows);
	json_decref(list);
	return ret;
}

int cmd_secret(struct cli *c, int argc, char **argv)
{
	const char *sub = argc > 1 ? argv[1] : "";
	if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
		fputs(secret_usage, stdout);
		return 0;
	}
	if (argc < 2)
		return cli_usage_err("secret", "secret needs set, ls or rm");
	if (strcmp(sub, "set") && strcmp(sub, "ls") && strcmp(sub, "rm"))
		return cli_usage_err("secret", "unknown secret command '%s'", sub);
	if (!strcmp(sub, "ls") && argc > 2 && (argc > 3 || strcmp(argv[2], "--json")))
		return cli_usage_err("secret", "secret ls takes only --json");
	if (!strcmp(sub, "rm") && argc < 3)
		return cli_usage_err("secret", "secret rm needs a NAME");
	struct api *a = cli_api(c);
	if (!a)
		return EXIT_API;
	if (!strcmp(sub, "set"))
		return secret_set(a, argc - 1, argv + 1);
	if (!strcmp(sub, "ls"))
		return secret_ls(a, argc > 2);
	int ret = 0;
	for (int i = 2; i < argc; i++) {
		struct apath p;
		apath_init(&p, "/v1/secrets");
		apath_seg(&p, argv[i]);
		if (api_json(a, "DELETE", &p, NULL, NULL) < 0)
			ret = cli_api_fail(a);
	}
	return ret;
}
