/*
 * cmd_snap: pause, resume, fork, checkpoint, checkpoints, checkpoint-rm and
 * usage. Each prints what a script needs next (a session id, sandbox ids, a
 * checkpoint id) alone on its line, or with --json the daemon's answer.
 */
#include "cli/cpuos/cmd_snap.h"
#include "cli/cpuos/cli.h"
#include "cli/cpuos/http.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char pause_usage[] =
    "usage: cpuos pause [--json] SANDBOX\n"
    "Pauses a sandbox: its VM stops, its memory, disk and processes are kept, and\n"
    "only storage is billed. Prints the session id to resume it by. Any later\n"
    "command on the sandbox (exec, cp, ls) resumes it too.\n";

static const char resume_usage[] =
    "usage: cpuos resume [--json] SANDBOX|SESSION\n"
    "Resumes a paused sandbox, by its id (sbx_...) or the session id that pause\n"
    "printed (ses_...), and prints the sandbox id. A running one is left as is.\n";

static const char fork_usage[] =
    "usage: cpuos fork [-n N] [--json] SANDBOX\n"
    "Makes N copies of a running sandbox (its memory, disk and processes as they\n"
    "are now) and prints their ids, one per line. The sandbox goes on running.\n"
    "\n"
    "  -n, --count N           how many (1..16, default 1)\n"
    "      --json              print the daemon's answer\n";

static const char checkpoint_usage[] =
    "usage: cpuos checkpoint [--json] SANDBOX NAME\n"
    "Saves a sandbox's memory, disk and processes as the checkpoint NAME (1..64 of\n"
    "A-Z a-z 0-9 . _ -, unique in the account) and prints its id. The sandbox goes\n"
    "on running; start sandboxes from it with cpuos create --checkpoint NAME.\n";

static const char checkpoints_usage[] = "usage: cpuos checkpoints [--json]\n"
					"Lists the account's checkpoints, newest first.\n";

static const char checkpoint_rm_usage[] = "usage: cpuos checkpoint-rm CHECKPOINT...\n"
					  "Deletes checkpoints, by id (ckp_...) or name.\n";

static const char usage_usage[] =
    "usage: cpuos usage [--from TIME] [--to TIME] [--key-id ID] [--json]\n"
    "Prints what the account ran from TIME to TIME and what it cost.\n"
    "\n"
    "      --from TIME         start, RFC 3339 (default 30 days ago)\n"
    "      --to TIME           end, RFC 3339 (default now)\n"
    "      --key-id ID         only what the API key ID (key_...) started\n"
    "      --json              print the daemon's answer\n";

/* Parses the options of a command that takes only --json and --help.
 * Returns the index of its first operand, or -1 with *ret the status to
 * exit with (0 after --help). */
static int plain_opts(int argc, char **argv, const char *usage, int *json, int *ret)
{
	static const struct option opts[] = {
	    {"json", no_argument, 0, 'j'},
	    {"help", no_argument, 0, 'h'},
	    {0, 0, 0, 0},
	};
	int o;
	optind = 0;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (o == 'j' && json) {
			*json = 1;
			continue;
		}
		*ret = o == 'h' ? 0 : EXIT_USAGE;
		fputs(usage, o == 'h' ? stdout : stderr);
		return -1;
	}
	return optind;
}

/* POST /v1/sandboxes/{id}{action} with body (may be NULL). 0 with *resp
 * (the caller frees it), or EXIT_API after printing why. */
static int sandbox_post(struct cli *c, const char *id, const char *action, json_t *body,
			json_t **resp)
{
	struct api *a;
	struct apath p;
	if (!(a = cli_api(c)))
		return EXIT_API;
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, id);
	apath_add(&p, action);
	if (api_json(a, "POST", &p, body, resp) < 0)
		return cli_api_fail(a);
	return 0;
}

/* Prints the string member key of o alone on its line (or all of o with
 * json); EXIT_API when the daemon left it out. */
static int print_field(struct cli *c, const json_t *o, const char *key, int json)
{
	const char *v = json_string_value(json_object_get(o, key));
	if (json) {
		cli_print_json(o);
		return 0;
	}
	if (!v || !*v) {
		cli_err("unexpected answer from cpuosd at %s: no %s", api_url(c->api), key);
		return EXIT_API;
	}
	printf("%s\n", v);
	return 0;
}

/* ---- pause, resume ---- */

/* pause and resume: one operand, POST to action, print field. */
static int pause_or_resume(struct cli *c, int argc, char **argv, const char *name,
			   const char *usage, const char *action, const char *field)
{
	json_t *sbx = NULL;
	int json = 0, ret, at;
	if ((at = plain_opts(argc, argv, usage, &json, &ret)) < 0)
		return ret;
	if (at >= argc)
		return cli_usage_err(name, "no sandbox given");
	if (at + 1 < argc)
		return cli_usage_err(name, "unexpected argument '%s'", argv[at + 1]);
	if ((ret = sandbox_post(c, argv[at], action, NULL, &sbx)) == 0)
		ret = print_field(c, sbx, field, json);
	json_decref(sbx);
	return ret;
}

int cmd_pause(struct cli *c, int argc, char **argv)
{
	return pause_or_resume(c, argc, argv, "pause", pause_usage, "/pause", "session_id");
}

int cmd_resume(struct cli *c, int argc, char **argv)
{
	return pause_or_resume(c, argc, argv, "resume", resume_usage, "/resume", "id");
}

/* ---- fork ---- */

int cmd_fork(struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"count", required_argument, 0, 'n'},
	    {"json", no_argument, 0, 'j'},
	    {"help", no_argument, 0, 'h'},
	    {0, 0, 0, 0},
	};
	unsigned long count = 1;
	json_t *body = NULL, *answer = NULL, *list, *s;
	int json = 0, ret, o;
	size_t i;

	optind = 0;
	while ((o = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			/* 1..16 is the daemon's to judge; only the form is checked here. */
			if (cli_uint(optarg, 1000, &count) < 0)
				return cli_usage_err("fork", "invalid count '%s'", optarg);
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			fputs(fork_usage, stdout);
			return 0;
		default:
			fputs(fork_usage, stderr);
			return EXIT_USAGE;
		}
	}
	if (optind >= argc)
		return cli_usage_err("fork", "no sandbox given");
	if (optind + 1 < argc)
		return cli_usage_err("fork", "unexpected argument '%s'", argv[optind + 1]);
	if (!(body = json_pack("{sI}", "count", (json_int_t)count))) {
		cli_err("out of memory");
		return EXIT_API;
	}
	if ((ret = sandbox_post(c, argv[optind], "/fork", body, &answer)))
		goto out;
	list = json_object_get(answer, "sandboxes");
	if (json) {
		cli_print_json(answer);
	} else if (!json_is_array(list)) {
		cli_err("unexpected answer from cpuosd at %s: no sandboxes", api_url(c->api));
		ret = EXIT_API;
	} else {
		json_array_foreach(list, i, s) printf("%s\n", cli_str(s, "id"));
	}
out:
	json_decref(answer);
	json_decref(body);
	return ret;
}

/* ---- checkpoint, checkpoints, checkpoint-rm ---- */

int cmd_checkpoint(struct cli *c, int argc, char **argv)
{
	json_t *body, *ckp = NULL;
	int json = 0, ret, at;
	if ((at = plain_opts(argc, argv, checkpoint_usage, &json, &ret)) < 0)
		return ret;
	if (argc - at != 2)
		return cli_usage_err("checkpoint", "expected SANDBOX NAME");
	/* The name's form is the daemon's to judge, as with every other value. */
	if (!(body = json_pack("{ss}", "name", argv[at + 1])))
		return cli_usage_err("checkpoint", "invalid name '%s'", argv[at + 1]);
	if ((ret = sandbox_post(c, argv[at], "/checkpoints", body, &ckp)) == 0)
		ret = print_field(c, ckp, "id", json);
	json_decref(ckp);
	json_decref(body);
	return ret;
}

int cmd_checkpoints(struct cli *c, int argc, char **argv)
{
	static const char *const hdr[] = {"ID", "NAME", "SANDBOX", "TEMPLATE", "SIZE", "CREATED"};
	json_t *list = NULL, *rows = NULL, *k;
	int json = 0, ret, at;
	struct api *a;
	struct apath p;
	char size[32];
	size_t i;

	if ((at = plain_opts(argc, argv, checkpoints_usage, &json, &ret)) < 0)
		return ret;
	if (at < argc)
		return cli_usage_err("checkpoints", "unexpected argument '%s'", argv[at]);
	if (!(a = cli_api(c)))
		return EXIT_API;
	apath_init(&p, "/v1/checkpoints");
	if (api_json(a, "GET", &p, NULL, &list) < 0)
		return cli_api_fail(a);
	ret = 0;
	if (json) {
		cli_print_json(list);
		goto out;
	}
	if (!(rows = json_array())) {
		cli_err("out of memory");
		ret = EXIT_API;
		goto out;
	}
	json_array_foreach(json_object_get(list, "checkpoints"), i, k)
	{
		json_t *sz = json_object_get(k, "size_bytes");
		if (json_is_number(sz))
			cli_human_size(json_number_value(sz), size, sizeof(size));
		else
			snprintf(size, sizeof(size), "-");
		json_array_append_new(rows, json_pack("[ssssss]", cli_str(k, "id"),
						      cli_str(k, "name"), cli_str(k, "sandbox_id"),
						      cli_str(k, "template"), size,
						      cli_str(k, "created_at")));
	}
	cli_table(hdr, 6, rows);
out:
	json_decref(rows);
	json_decref(list);
	return ret;
}

int cmd_checkpoint_rm(struct cli *c, int argc, char **argv)
{
	int ret, at;
	struct api *a;
	struct apath p;
	if ((at = plain_opts(argc, argv, checkpoint_rm_usage, NULL, &ret)) < 0)
		return ret;
	if (at >= argc)
		return cli_usage_err("checkpoint-rm", "no checkpoint given");
	if (!(a = cli_api(c)))
		return EXIT_API;
	/* Goes on past a failure, so one bad name does not spare the others. */
	for (ret = 0; at < argc; at++) {
		apath_init(&p, "/v1/checkpoints");
		apath_seg(&p, argv[at]);
		if (api_json(a, "DELETE", &p, NULL, NULL) < 0)
			ret = cli_api_fail(a);
	}
	return ret;
}

/* ---- usage ---- */

/* A number member of o, 0 when missing (an older daemon's answer). */
static double num(const json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

static void print_usage(const json_t *u)
{
	const json_t *price = json_object_get(u, "price");
	printf("account             %s\n", cli_str(u, "account"));
	printf("from                %s\n", cli_str(u, "from"));
	printf("to                  %s\n", cli_str(u, "to"));
	printf("sandboxes           %.0f\n", num(u, "sandboxes"));
	printf("running seconds     %g\n", num(u, "running_seconds"));
	printf("vCPU seconds        %g\n", num(u, "vcpu_seconds"));
	printf("GiB seconds         %g\n", num(u, "gib_seconds"));
	printf("paused GiB seconds  %g\n", num(u, "paused_gib_seconds"));
	printf("cost                $%.4f", num(u, "cost_usd"));
	if (json_is_object(price))
		printf(" (at $%g per hour for %g vCPUs and %g GiB)", num(price, "usd_per_hour"),
		       num(price, "vcpus"), num(price, "memory_gib"));
	printf("\n");
}

int cmd_usage(struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"from", required_argument, 0, 'f'}, {"to", required_argument, 0, 't'},
	    {"key-id", required_argument, 0, 'k'}, {"json", no_argument, 0, 'j'},
	    {"help", no_argument, 0, 'h'},	   {0, 0, 0, 0},
	};
	const char *from = NULL, *to = NULL, *key = NULL;
	json_t *u = NULL;
	int json = 0, o;
	struct api *a;
	struct apath p;

	optind = 0;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'f':
			from = optarg;
			break;
		case 't':
			to = optarg;
			break;
		case 'k':
			key = optarg;
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			fputs(usage_usage, stdout);
			return 0;
		default:
			fputs(usage_usage, stderr);
			return EXIT_USAGE;
		}
	}
	if (optind < argc)
		return cli_usage_err("usage", "unexpected argument '%s'", argv[optind]);
	if (!(a = cli_api(c)))
		return EXIT_API;
	/* Times go as given: the daemon parses RFC 3339 and says what is wrong. */
	apath_init(&p, "/v1/usage");
	if (from)
		apath_query(&p, "from", from);
	if (to)
		apath_query(&p, "to", to);
	if (key)
		apath_query(&p, "key", key);
	if (api_json(a, "GET", &p, NULL, &u) < 0)
		return cli_api_fail(a);
	if (json)
		cli_print_json(u);
	else
		print_usage(u);
	json_decref(u);
	return 0;
}
