/*
 * cmd_sbx: create, ls, kill and exec. exec starts the command as a
 * background process and reads its NDJSON output stream, so output shows as
 * it is produced and stdin can be fed while the command runs.
 */
#include "cli/cpuos/cmd_sbx.h"
#include "cli/cpuos/cli.h"
#include "cli/cpuos/cmd_files.h"
#include "cli/cpuos/cmd_net.h"
#include "cli/cpuos/http.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXIT_TIMEOUT 124
#define EXIT_CPUOS   125 /* like docker run and cpuos-vm: cpuos itself failed */
#define STDIN_CHUNK  (64u << 10)

static const char create_usage[] =
    "usage: cpuos create [options]\n"
    "Creates a sandbox and prints its id once it is ready.\n"
    "\n"
    "  -T, --template NAME     template (default base, or the checkpoint's; see\n"
    "                          cpuos templates)\n"
    "      --checkpoint CKP    start from a checkpoint (id or name; see cpuos\n"
    "                          checkpoints): its memory, disk and processes\n"
    "      --timeout DURATION  lifetime: 90s, 30m, 2h, 1h30m or seconds (default 5m)\n"
    "      --on-timeout WHAT   pause (the default) or kill the sandbox at its timeout\n"
    "      --vcpus N           virtual CPUs (1..16, default 1)\n"
    "      --memory MB         memory (128..65536, default 512)\n"
    "      --disk MB           writable disk (64..1048576, default 2048)\n"
    "  -e, --env K=V           environment of every command (repeatable)\n"
    "  -m, --metadata K=V      metadata, for cpuos ls -m (repeatable)\n"
    "      --network POLICY    egress: allow-all, deny-all or a JSON policy (default\n"
    "                          the daemon's; see cpuos net --help)\n"
    "      --secret NAME       give it the secret NAME's placeholder in $NAME (see\n"
    "                          cpuos secret --help; repeatable)\n"
    "      --json              print the whole sandbox object\n";

static const char ls_usage[] =
    "usage: cpuos ls [--state STATE] [-m K=V]... [--json]\n"
    "       cpuos ls [--depth N] [--json] SANDBOX:/PATH\n"
    "Lists sandboxes (newest first), or the files under PATH in a sandbox.\n"
    "\n"
    "      --state STATE       running, paused, stopped or lost\n"
    "  -m, --metadata K=V      only sandboxes with this metadata (repeatable)\n"
    "  -d, --depth N           levels of a file listing (1..16, default 1)\n"
    "      --json              print JSON instead of a table\n";

static const char kill_usage[] = "usage: cpuos kill SANDBOX...\n"
				 "Stops sandboxes and frees their resources.\n";

static const char exec_usage[] =
    "usage: cpuos exec [options] SANDBOX [--] COMMAND [ARG...]\n"
    "       cpuos exec [options] SANDBOX -c 'SHELL COMMAND'\n"
    "Runs COMMAND in SANDBOX, streams its output as it comes and exits with its\n"
    "exit code (128+N for death by signal N, 124 for --timeout, 125 when cpuos\n"
    "itself failed). Ctrl-C and SIGTERM are passed on to the command.\n"
    "\n"
    "  -c, --shell STRING      run STRING with /bin/sh -c\n"
    "  -e, --env K=V           environment variable (repeatable)\n"
    "  -w, --cwd DIR           working directory\n"
    "  -u, --user USER         user or root (default user)\n"
    "  -t, --timeout DURATION  kill the command after DURATION (30s, 2m, seconds)\n"
    "  -i, --stdin             forward standard input to the command\n";

/* ---- create ---- */

int cmd_create(struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"template", required_argument, 0, 'T'}, {"timeout", required_argument, 0, 'O'},
	    {"vcpus", required_argument, 0, 'C'},    {"memory", required_argument, 0, 'M'},
	    {"disk", required_argument, 0, 'D'},     {"env", required_argument, 0, 'e'},
	    {"metadata", required_argument, 0, 'm'}, {"json", no_argument, 0, 'j'},
	    {"checkpoint", required_argument, 0, 'P'}, {"on-timeout", required_argument, 0, 'X'},
	    {"network", required_argument, 0, 'N'},  {"secret", required_argument, 0, 'S'},
	    {"help", no_argument, 0, 'h'},	     {0, 0, 0, 0},
	};
	json_t *body = json_object(), *env = json_object(), *meta = json_object(), *sbx = NULL;
	json_t *secrets = json_array();
	const char *template = NULL, *checkpoint = NULL;
	int json = 0, ret = EXIT_USAGE, o;
	unsigned long v;
	struct api *a;
	struct apath p;

	if (!body || !env || !meta || !secrets) {
		cli_err("out of memory");
		ret = EXIT_API;
		goto out;
	}
	optind = 0;
	while ((o = getopt_long(argc, argv, "+T:e:m:h", opts, NULL)) != -1) {
		const char *field = o == 'C' ? "vcpus" : o == 'M' ? "memory_mb" : "disk_mb";
		switch (o) {
		case 'T':
			template = optarg;
			break;
		case 'P':
			checkpoint = optarg;
			break;
		case 'X':
			/* pause or kill: the daemon's to judge, like every value. */
			if (json_object_set_new(body, "on_timeout", json_string(optarg)) < 0) {
				ret = cli_usage_err("create", "invalid --on-timeout '%s'", optarg);
				goto out;
			}
			break;
		case 'N':
			if (json_object_set_new(body, "network",
						cli_net_policy(optarg, "create", "--network")) < 0)
				goto out;
			break;
		case 'O':
			if (json_object_set_new(body, "timeout", cli_duration(optarg)) < 0) {
				ret = cli_usage_err("create", "invalid --timeout '%s'", optarg);
				goto out;
			}
			break;
		case 'C':
		case 'M':
		case 'D':
			/* Ranges are the daemon's to judge; only the form is checked here. */
			if (cli_uint(optarg, 1ul << 40, &v) < 0) {
				ret = cli_usage_err("create", "invalid number '%s'", optarg);
				goto out;
			}
			json_object_set_new(body, field, json_integer((json_int_t)v));
			break;
		case 'e':
			if (cli_kv(env, optarg, "--env") < 0)
				goto out;
			break;
		case 'm':
			if (cli_kv(meta, optarg, "--metadata") < 0)
				goto out;
			break;
		case 'S':
			json_array_append_new(secrets, json_string(optarg));
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			fputs(create_usage, stdout);
			ret = 0;
			goto out;
		default:
			fputs(create_usage, stderr);
			goto out;
		}
	}
	if (optind < argc) {
		ret = cli_usage_err("create", "unexpected argument '%s'", argv[optind]);
		goto out;
	}
	/* From a checkpoint the template is the checkpoint's unless given. */
	if (checkpoint && json_object_set_new(body, "checkpoint", json_string(checkpoint)) < 0) {
		ret = cli_usage_err("create", "invalid --checkpoint '%s'", checkpoint);
		goto out;
	}
	if (template || !checkpoint)
		json_object_set_new(body, "template", json_string(template ? template : "base"));
	if (json_object_size(env))
		json_object_set(body, "env", env);
	if (json_object_size(meta))
		json_object_set(body, "metadata", meta);
	if (json_array_size(secrets))
		json_object_set(body, "secrets", secrets);
	ret = EXIT_API;
	if (!(a = cli_api(c)))
		goto out;
	apath_init(&p, "/v1/sandboxes");
	if (api_json(a, "POST", &p, body, &sbx) < 0) {
		ret = cli_api_fail(a);
		goto out;
	}
	if (json)
		cli_print_json(sbx);
	else
		printf("%s\n", cli_str(sbx, "id"));
	ret = 0;
out:
	json_decref(sbx);
	json_decref(secrets);
	json_decref(meta);
	json_decref(env);
	json_decref(body);
	return ret;
}

/* ---- ls ---- */

/* Fetches every page of the listing into all (next_cursor until null). */
static int list_all(struct api *a, const char *state, json_t *filters, json_t *all)
{
	char cursor[512] = "";
	const char *k;
	json_t *v;
	struct apath p;
	for (int pages = 0; pages < 100000; pages++) {
		json_t *page = NULL;
		apath_init(&p, "/v1/sandboxes");
		apath_query(&p, "limit", "100");
		if (state)
			apath_query(&p, "state", state);
		json_object_foreach(filters, k, v)
		{
			char key[512];
			snprintf(key, sizeof(key), "metadata.%s", k);
			apath_query(&p, key, json_string_value(v));
		}
		if (cursor[0])
			apath_query(&p, "cursor", cursor);
		if (api_json(a, "GET", &p, NULL, &page) < 0)
			return cli_api_fail(a);
		json_array_extend(all, json_object_get(page, "sandboxes"));
		const char *next = json_string_value(json_object_get(page, "next_cursor"));
		int more = next && *next && strlen(next) < sizeof(cursor) && strcmp(next, cursor);
		if (more)
			snprintf(cursor, sizeof(cursor), "%s", next);
		json_decref(page);
		if (!more)
			return 0;
	}
	return 0;
}

int cmd_ls(struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"state", required_argument, 0, 'S'}, {"metadata", required_argument, 0, 'm'},
	    {"depth", required_argument, 0, 'd'}, {"json", no_argument, 0, 'j'},
	    {"help", no_argument, 0, 'h'},	  {0, 0, 0, 0},
	};
	json_t *filters = json_object(), *all = json_array(), *rows = json_array(), *s;
	const char *state = NULL, *path;
	unsigned long depth = 0;
	int json = 0, ret = EXIT_USAGE, o;
	char id[256];
	size_t i;
	struct api *a;

	if (!filters || !all || !rows) {
		cli_err("out of memory");
		ret = EXIT_API;
		goto out;
	}
	optind = 0;
	while ((o = getopt_long(argc, argv, "m:d:h", opts, NULL)) != -1) {
		switch (o) {
		case 'S':
			state = optarg;
			break;
		case 'm':
			if (cli_kv(filters, optarg, "--metadata") < 0)
				goto out;
			break;
		case 'd':
			if (cli_uint(optarg, 1000, &depth) < 0 || !depth) {
				ret = cli_usage_err("ls", "invalid --depth '%s'", optarg);
				goto out;
			}
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			fputs(ls_usage, stdout);
			ret = 0;
			goto out;
		default:
			fputs(ls_usage, stderr);
			goto out;
		}
	}
	if (optind < argc) {
		if (optind + 1 < argc || !cli_remote(argv[optind], id, sizeof(id), &path)) {
			ret = cli_usage_err("ls", "expected SANDBOX:/PATH, got '%s'", argv[optind]);
			goto out;
		}
		ret = files_ls(c, id, path, (unsigned)depth, json);
		goto out;
	}
	ret = EXIT_API;
	if (!(a = cli_api(c)))
		goto out;
	if ((ret = list_all(a, state, filters, all)))
		goto out;
	if (json) {
		json_t *o_ = json_pack("{sO}", "sandboxes", all);
		cli_print_json(o_);
		json_decref(o_);
		goto out;
	}
	json_array_foreach(all, i, s) json_array_append_new(
	    rows,
	    json_pack("[sssss]", cli_str(s, "id"), cli_str(s, "template"), cli_str(s, "state"),
		      cli_str(s, "created_at"), cli_str(s, "expires_at")));
	static const char *const hdr[] = {"ID", "TEMPLATE", "STATE", "CREATED", "EXPIRES"};
	cli_table(hdr, 5, rows);
out:
	json_decref(rows);
	json_decref(all);
	json_decref(filters);
	return ret;
}

/* ---- kill ---- */

int cmd_kill(struct cli *c, int argc, char **argv)
{
	int ret = 0, o;
	struct api *a;
	struct apath p;
	static const struct option opts[] = {{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	optind = 0;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (o == 'h') {
			fputs(kill_usage, stdout);
			return 0;
		}
		fputs(kill_usage, stderr);
		return EXIT_USAGE;
	}
	if (optind == argc)
		return cli_usage_err("kill", "no sandbox given");
	if (!(a = cli_api(c)))
		return EXIT_API;
	/* Goes on past a failure, so one bad id does not spare the others. */
	for (int i = optind; i < argc; i++) {
		apath_init(&p, "/v1/sandboxes");
		apath_seg(&p, argv[i]);
		if (api_json(a, "DELETE", &p, NULL, NULL) < 0)
			ret = cli_api_fail(a);
	}
	return ret;
}

/* ---- exec ---- */

static volatile sig_atomic_t pending_signal;

static void on_signal(int sig)
{
	pending_signal = sig;
}

struct exec_run {
	struct api *sig_api; /* a second handle: the first is busy streaming */
	struct apath proc;   /* /v1/sandboxes/ID/processes/PID */
	int done;
	int status;
	char error[256];
};

static void write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return; /* a closed stdout must not stop us from reporting the exit */
		p += w;
		n -= (size_t)w;
	}
}

/* The exit status of an exit line or exited process object. */
static int exit_status(const json_t *o)
{
	json_t *sig = json_object_get(o, "signal"), *code = json_object_get(o, "exit_code");
	if (json_is_true(json_object_get(o, "timed_out")))
		return EXIT_TIMEOUT;
	if (json_is_integer(sig))
		return 128 + (int)(json_integer_value(sig) & 0x7f);
	if (json_is_integer(code))
		return (int)(json_integer_value(code) & 0xff);
	return EXIT_CPUOS;
}

static int exec_line(void *arg, const char *line, size_t n)
{
	struct exec_run *run = arg;
	json_t *j = json_loadb(line, n, JSON_ALLOW_NUL, NULL);
	const char *type = json_string_value(json_object_get(j, "type"));
	json_t *data = json_object_get(j, "data");
	int r = 0;
	if (!type) {
		snprintf(run->error, sizeof(run->error),
			 "unexpected line in the output stream: %.*s", (int)(n > 80 ? 80 : n),
			 line);
		r = -EIO;
	} else if (!strcmp(type, "stdout") || !strcmp(type, "stderr")) {
		/* json_string_length, not strlen: the data may hold NUL bytes. */
		write_all(type[3] == 'o' ? 1 : 2, json_string_value(data),
			  json_string_length(data));
	} else if (!strcmp(type, "exit")) {
		run->done = 1;
		run->status = exit_status(j);
		r = 1;
	} /* other types: a newer daemon's; skipped */
	json_decref(j);
	return r;
}

/* Passes a signal we received on to the process (best effort). */
static int exec_tick(void *arg)
{
	struct exec_run *run = arg;
	int sig = pending_signal;
	if (!sig)
		return 0;
	pending_signal = 0;
	struct apath p = run->proc;
	apath_add(&p, "/signal");
	json_t *body = json_pack("{si}", "signal", sig);
	if (api_json(run->sig_api, "POST", &p, body, NULL) < 0)
		cli_err("cannot pass on signal %d: %s", sig, api_error(run->sig_api));
	json_decref(body);
	return 0;
}

struct stdin_pump {
	struct api *a;
	struct apath path; /* .../stdin */
};

static atomic_int pump_busy;

/* Forwards our stdin a chunk per request, then closes the process's stdin.
 * Runs in its own thread so an interactive stdin never holds up output;
 * it is not joined (it may sit in read(0) forever): cmd_exec ends the
 * process without it. Owns and frees arg. */
static void *pump_stdin(void *arg)
{
	struct stdin_pump *pp = arg;
	char *buf = malloc(STDIN_CHUNK);
	struct apath eof = pp->path;
	apath_query(&eof, "eof", "true");
	for (;;) {
		ssize_t n = buf ? read(0, buf, STDIN_CHUNK) : 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (api_post_raw(pp->a, &pp->path, buf, (size_t)n) < 0)
			goto out; /* the process is gone or stopped reading */
	}
	api_post_raw(pp->a, &eof, NULL, 0);
out:
	free(buf);
	api_free(pp->a);
	free(pp);
	atomic_store(&pump_busy, 0);
	return NULL;
}

static int exec_parse(int argc, char **argv, json_t *body, int *use_stdin, int *ret)
{
	static const struct option opts[] = {
	    {"shell", required_argument, 0, 'c'},   {"env", required_argument, 0, 'e'},
	    {"cwd", required_argument, 0, 'w'},	    {"user", required_argument, 0, 'u'},
	    {"timeout", required_argument, 0, 't'}, {"stdin", no_argument, 0, 'i'},
	    {"help", no_argument, 0, 'h'},	    {0, 0, 0, 0},
	};
	json_t *env = json_object_get(body, "env");
	const char *shell = NULL;
	int o, sbx_at = -1;
	*ret = EXIT_USAGE;
	/* Two passes, both stopping at the first operand: options before the
	 * sandbox, then options after it up to "--" or the command, whose own
	 * options must never be taken for ours. */
	for (int pass = 0; pass < 2; pass++) {
		int base = pass ? sbx_at : 0;
		optind = 0;
		while ((o = getopt_long(argc - base, argv + base, "+c:e:w:u:t:ih", opts, NULL)) !=
		       -1) {
			switch (o) {
			case 'c':
				shell = optarg;
				break;
			case 'e':
				if (cli_kv(env, optarg, "--env") < 0)
					return -EINVAL;
				break;
			case 'w':
				json_object_set_new(body, "cwd", json_string(optarg));
				break;
			case 'u':
				json_object_set_new(body, "user", json_string(optarg));
				break;
			case 't':
				if (json_object_set_new(body, "timeout", cli_duration(optarg)) <
				    0) {
					*ret =
					    cli_usage_err("exec", "invalid --timeout '%s'", optarg);
					return -EINVAL;
				}
				break;
			case 'i':
				*use_stdin = 1;
				break;
			case 'h':
				fputs(exec_usage, stdout);
				*ret = 0;
				return -EINVAL;
			default:
				fputs(exec_usage, stderr);
				return -EINVAL;
			}
		}
		if (!pass) {
			if (optind >= argc) {
				*ret = cli_usage_err("exec", "no sandbox given");
				return -EINVAL;
			}
			sbx_at = optind;
		}
	}
	int cmd_at = sbx_at + optind;
	if (shell && cmd_at < argc) {
		*ret = cli_usage_err("exec", "both -c and a command given");
		return -EINVAL;
	}
	if (!shell && cmd_at >= argc) {
		*ret = cli_usage_err("exec", "no command given");
		return -EINVAL;
	}
	if (shell) {
		json_object_set_new(body, "cmd", json_string(shell));
	} else {
		json_t *args = json_array();
		for (int i = cmd_at; i < argc; i++)
			json_array_append_new(args, json_string(argv[i]));
		json_object_set_new(body, "argv", args);
	}
	if (!json_object_size(env))
		json_object_del(body, "env");
	json_object_set_new(body, "background", json_true());
	return sbx_at;
}

int cmd_exec(struct cli *c, int argc, char **argv)
{
	json_t *body = json_pack("{s{}}", "env"), *proc = NULL;
	struct exec_run run = {.status = EXIT_CPUOS};
	struct stdin_pump *pump = NULL;
	int use_stdin = 0, ret = EXIT_CPUOS, sbx_at, r;
	struct api *a;
	struct apath p;
	pthread_t t;

	if (!body) {
		cli_err("out of memory");
		return EXIT_CPUOS;
	}
	if ((sbx_at = exec_parse(argc, argv, body, &use_stdin, &ret)) < 0)
		goto out;
	ret = EXIT_CPUOS;
	if (!(a = cli_api(c)))
		goto out;
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, argv[sbx_at]);
	run.proc = p;
	apath_add(&p, "/exec");
	if (api_json(a, "POST", &p, body, &proc) < 0) {
		cli_api_fail(a);
		goto out;
	}
	json_t *pid = json_object_get(proc, "pid");
	if (!json_is_integer(pid)) {
		cli_err("unexpected answer from cpuosd at %s: no process id", api_url(a));
		goto out;
	}
	char pid_s[32];
	snprintf(pid_s, sizeof(pid_s), "%lld", (long long)json_integer_value(pid));
	apath_add(&run.proc, "/processes");
	apath_seg(&run.proc, pid_s);

	if ((r = api_dup(a, &run.sig_api)) < 0) {
		cli_err("cannot set up libcurl: %s", strerror(-r));
		goto out;
	}
	pump = calloc(1, sizeof(*pump));
	if (!pump || api_dup(a, &pump->a) < 0) {
		cli_err("out of memory");
		goto out;
	}
	pump->path = run.proc;
	apath_add(&pump->path, "/stdin");
	if (!use_stdin) {
		/* The process starts with stdin open; without -i it must see EOF
		 * at once (as under </dev/null) instead of waiting forever. */
		struct apath eof = pump->path;
		apath_query(&eof, "eof", "true");
		api_post_raw(pump->a, &eof, NULL, 0); /* fails only when it already exited */
	} else if (atomic_store(&pump_busy, 1), pthread_create(&t, NULL, pump_stdin, pump) == 0) {
		pthread_detach(t);
		pump = NULL; /* the thread's now, for as long as we run */
	} else {
		atomic_store(&pump_busy, 0);
		cli_err("cannot start the stdin thread");
	}

	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	p = run.proc;
	apath_add(&p, "/stream");
	r = api_lines(a, &p, exec_line, exec_tick, &run);
	if (run.done)
		ret = run.status;
	else if (run.error[0])
		cli_err("%s", run.error);
	else if (r < 0)
		cli_api_fail(a);
	else
		cli_err("the output stream of process %s ended before its exit", pid_s);
out:
	if (pump) {
		api_free(pump->a);
		free(pump);
	}
	api_free(run.sig_api);
	json_decref(proc);
	json_decref(body);
	if (atomic_load(&pump_busy)) {
		/* The stdin thread still reads or sends: libcurl must not be
		 * torn down under it, and there is nothing left to clean. */
		fflush(stdout);
		_exit(ret);
	}
	return ret;
}
