/*
 * cmd_admin: up, keys and templates. up starts cpuosd detached (its own
 * session, output to a log in its state directory) and waits for its
 * health answer on the Unix socket.
 */
#include "cli/cpuos/cmd_admin.h"
#include "cli/cpuos/cli.h"
#include "cli/cpuos/http.h"
#include "cli/cpuos/tplbuild.h"
#include "common/clock.h"
#include "common/fs.h"
#include "common/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_STATE_DIR "/var/lib/cpuos"
#define UP_WAIT_MS	  30000

static const char up_usage[] =
    "usage: cpuos up [--state-dir DIR] [--socket PATH] [--listen ADDR:PORT] [--guest-dir DIR]\n"
    "Starts cpuosd in the background unless it already answers on its socket,\n"
    "and waits up to 30 s for it. The options are passed on to cpuosd; its output\n"
    "goes to STATE-DIR/cpuosd.log (default " DEFAULT_STATE_DIR "). cpuosd is taken\n"
    "from beside this binary, else from PATH.\n";

static const char keys_usage[] =
    "usage: cpuos keys create --name NAME [--account ACCOUNT]\n"
    "       cpuos keys ls [--json]\n"
    "       cpuos keys rm ID...\n"
    "Manages API keys (on cpuosd's Unix socket only). create prints the new key\n"
    "once; only its hash is kept. ACCOUNT defaults to NAME.\n";

static const char nodes_usage[] =
    "usage: cpuos nodes [ls] [--json]\n"
    "       cpuos nodes drain NAME [--move]\n"
    "       cpuos nodes undrain NAME\n"
    "Lists the nodes that share cpuosd's database (cpuosd --node), or drains one\n"
    "(it takes no new sandboxes, also after a restart) or makes it ready again\n"
    "(on cpuosd's Unix socket only). With --move, the drained node's sandboxes go\n"
    "to the other nodes: each is paused, stored in the object store and resumed\n"
    "on the least loaded node (paused ones stay paused there); one line each.\n";

static const char templates_usage[] =
    "usage: cpuos templates [ls] [--json]\n"
    "       cpuos templates build NAME...\n"
    "       cpuos templates build NAME -f DOCKERFILE [CONTEXT] [--build-arg K=V]... [--no-cache]\n"
    "                             [--remote]\n"
    "                             [--start-cmd CMD] [--ready-port N | --ready-cmd CMD]\n"
    "       cpuos templates import NAME ARCHIVE [--max-size MB] [START]\n"
    "       cpuos templates pull NAME REFERENCE [--insecure] [--max-size MB] [START]\n"
    "  START: --start-cmd CMD | --start-image, then --ready-port PORT | --ready-cmd CMD\n"
    "Lists the daemon's templates, or builds template images from the recipes in\n"
    "guest/templates (no daemon needed; $CPUOS_GUEST_SRC, else ../../guest from\n"
    "this binary) into $CPUOS_GUEST_DIR/templates (default build/guest/templates\n"
    "of the same tree), with a progress bar on a terminal.\n"
    "import makes template NAME from an OCI image: a layout's directory, a tar of\n"
    "one, or what `docker save` wrote (plain or gzip); as root, no daemon needed.\n"
    "The image's layers, checked against their digests, are applied in a user\n"
    "namespace of their own; a 'user' account, /work and /tmp are added where it\n"
    "has none; ENV becomes the sandboxes' environment. --max-size: the unpacked\n"
    "limit (default 4096 MB). pull fetches [HOST/]NAME[:TAG][@sha256:...] (Docker\n"
    "Hub's without HOST) from its registry, linux/amd64, over the host's network,\n"
    "then imports it; --insecure for a plain-HTTP registry; credentials from\n"
    "$CPUOS_REGISTRY_USERNAME and $CPUOS_REGISTRY_PASSWORD. START: a command every\n"
    "sandbox of the template runs in the background from its boot (a shell string,\n"
    "or the image's ENTRYPOINT and CMD), ready once the port listens or the command\n"
    "exits 0; the template's snapshot is taken after, so sandboxes start with it up.\n"
    "build -f builds the account's template NAME from a Dockerfile through the API\n"
    "(FROM a template or an image reference, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER,\n"
    "CMD, ENTRYPOINT, EXPOSE, LABEL, HEALTHCHECK): each step runs in a sandbox and is\n"
    "checkpointed, so a later build starts after its last unchanged step. CMD is\n"
    "the template's start command when there is a ready check: --ready-*,\n"
    "HEALTHCHECK CMD, or the first EXPOSE port. CONTEXT may be a tar (plain, gzip\n"
    "or zstd), or - for one on stdin; -f then names the Dockerfile inside it.\n"
    "--remote sends the context to the daemon, which runs the build itself\n"
    "(POST /v1/templates/NAME/build), and shows its log as it comes.\n"
    "`cpuos template` is the same command.\n";

/* ---- up ---- */

/* 1 when cpuosd answers its health check, 0 when nothing listens, -1 (after
 * printing why) when something answers but not as it should. */
static int health(struct api *a, int quiet)
{
	struct apath p;
	json_t *h = NULL;
	apath_init(&p, "/v1/health");
	int r = api_json(a, "GET", &p, NULL, &h);
	json_decref(h);
	if (r == 0)
		return 1;
	if (r == -ECONNREFUSED)
		return 0;
	if (!quiet)
		cli_api_fail(a);
	return -1;
}

/* A message from the detached child about its start. */
struct start_msg {
	int kind; /* 'p': pid of cpuosd, 'e': exec failed with errno val */
	int val;
};

/* Starts argv[0] (a path, or a name for PATH) in a new session, detached
 * from us (double fork: not our child, no controlling terminal), output
 * appended to log. 0 with *pid, or -errno. */
static int spawn_detached(char **argv, const char *log, pid_t *pid)
{
	int pfd[2], r;
	struct start_msg m = { 0, 0 };
	int out = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (out < 0)
		return -errno;
	if (pipe2(pfd, O_CLOEXEC) < 0) {
		r = -errno;
		close(out);
		return r;
	}
	pid_t c1 = fork();
	if (c1 == 0) {
		/* The middle child starts cpuosd and exits at once: init
		 * adopts cpuosd, which never becomes our child. */
		struct spawn_opts o = { .argv = argv, .fd = { -1, out, out }, .new_session = 1,
					.cwd = "/" };
		pid_t p;
		r = spawn(&o, &p);
		m = r < 0 ? (struct start_msg){ 'e', -r } : (struct start_msg){ 'p', p };
		_exit(write(pfd[1], &m, sizeof(m)) == sizeof(m) ? 0 : 1);
	}
	r = c1 < 0 ? -errno : 0;
	close(out);
	close(pfd[1]);
	if (c1 > 0) {
		waitpid(c1, NULL, 0);
		if (read(pfd[0], &m, sizeof(m)) != sizeof(m))
			r = -ECHILD;
		else if (m.kind == 'e')
			r = -m.val;
		else
			*pid = m.val;
	}
	close(pfd[0]);
	return r;
}

int cmd_up(struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"state-dir", required_argument, 0, 'S'},
	    {"socket", required_argument, 0, 's'},
	    {"listen", required_argument, 0, 'l'},
	    {"guest-dir", required_argument, 0, 'g'},
	    {"help", no_argument, 0, 'h'},
	    {0, 0, 0, 0},
	};
	const char *state = NULL, *sock = NULL, *listen_ = NULL, *guest = NULL;
	char bindir[PATH_MAX], exe[PATH_MAX + 16], log[PATH_MAX + 16], url[PATH_MAX + 8];
	char *args[16];
	int n = 0, o, r, ret = EXIT_API;
	struct api *a = NULL;
	pid_t pid = 0;
	(void)c; /* up always speaks to the socket it would start cpuosd on */

	optind = 0;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'S':
			state = optarg;
			break;
		case 's':
			sock = optarg;
			break;
		case 'l':
			listen_ = optarg;
			break;
		case 'g':
			guest = optarg;
			break;
		case 'h':
			fputs(up_usage, stdout);
			return 0;
		default:
			fputs(up_usage, stderr);
			return EXIT_USAGE;
		}
	}
	if (optind < argc)
		return cli_usage_err("up", "unexpected argument '%s'", argv[optind]);
	snprintf(url, sizeof(url), "unix://%s", sock ? sock : cli_socket_path());
	if (api_new(url, NULL, &a) < 0) {
		cli_err("invalid socket path '%s'", url + 7);
		return EXIT_USAGE;
	}
	api_set_timeout(a, 5000);
	if ((r = health(a, 0)) != 0) {
		if (r > 0) {
			printf("cpuosd is running\n");
			ret = 0;
		}
		goto out;
	}

	snprintf(exe, sizeof(exe), "cpuosd");
	if (cli_bindir(bindir, sizeof(bindir)) == 0) {
		snprintf(exe, sizeof(exe), "%s/cpuosd", bindir);
		if (access(exe, X_OK) < 0)
			snprintf(exe, sizeof(exe), "cpuosd");
	}
	args[n++] = exe;
	if (state) {
		args[n++] = "--state-dir";
		args[n++] = (char *)state;
	}
	if (sock) {
		args[n++] = "--socket";
		args[n++] = (char *)sock;
	}
	if (listen_) {
		args[n++] = "--listen";
		args[n++] = (char *)listen_;
	}
	if (guest) {
		args[n++] = "--guest-dir";
		args[n++] = (char *)guest;
	}
	args[n] = NULL;
	state = state ? state : DEFAULT_STATE_DIR;
	/* 0700: the state directory holds the key database. */
	if ((r = fs_mkdir_p(state, 0700, (uid_t)-1, (gid_t)-1)) < 0) {
		cli_err("cannot create '%s': %s", state, strerror(-r));
		goto out;
	}
	snprintf(log, sizeof(log), "%s/cpuosd.log", state);
	if ((r = spawn_detached(args, log, &pid)) < 0) {
		cli_err("cannot start '%s': %s", exe, strerror(-r));
		goto out;
	}
	/* Polls rather than reads the log: the health answer is the only
	 * sign that cpuosd serves requests. */
	long long deadline = clock_ms() + UP_WAIT_MS;
	api_set_timeout(a, 2000);
	while ((r = health(a, 1)) <= 0 && clock_ms() < deadline) {
		if (kill(pid, 0) < 0 && errno == ESRCH)
			break; /* it exited; its last words are in the log */
		usleep(100 * 1000);
	}
	if (r > 0) {
		printf("cpuosd started (pid %d) on %s, log %s\n", (int)pid, url, log);
		ret = 0;
	} else {
		char last[4200];
		if (fs_last_line(log, last, sizeof(last)) < 0)
			snprintf(last, sizeof(last), "(nothing in %s)", log);
		cli_err("cpuosd did not come up on %s: %s", url, last);
	}
out:
	api_free(a);
	return ret;
}

/* ---- keys ---- */

static int keys_fail(struct api *a)
{
	/* Over TCP the administrator's routes do not exist: say where they are. */
	if (!api_is_unix(a) && api_status(a) == 404) {
		cli_err("%s; keys and nodes are managed on cpuosd's Unix socket only (as the "
			"administrator, without --key or CPUOS_API_KEY)",
			api_error(a));
		return EXIT_API;
	}
	return cli_api_fail(a);
}

/* created_at as text, whether the daemon sends RFC 3339 or unix seconds. */
static void time_text(const json_t *v, char *out, size_t n)
{
	if (json_is_integer(v)) {
		clock_rfc3339((long long)json_integer_value(v), out, n);
	} else {
		snprintf(out, n, "%s", json_is_string(v) ? json_string_value(v) : "-");
	}
}

static int keys_create(struct api *a, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"name", required_argument, 0, 'n'},
	    {"account", required_argument, 0, 'a'},
	    {0, 0, 0, 0},
	};
	const char *name = NULL, *account = NULL;
	json_t *body, *key = NULL;
	struct apath p;
	int o, ret = EXIT_API;
	optind = 0;
	while ((o = getopt_long(argc, argv, "n:a:", opts, NULL)) != -1) {
		if (o == 'n')
			name = optarg;
		else if (o == 'a')
			account = optarg;
		else
			return cli_usage_err("keys", "bad option");
	}
	if (!name || optind < argc)
		return cli_usage_err("keys", "keys create needs --name NAME and nothing else");
	body = json_pack("{ss}", "name", name);
	if (account)
		json_object_set_new(body, "account", json_string(account));
	apath_init(&p, "/v1/keys");
	if (api_json(a, "POST", &p, body, &key) < 0) {
		ret = keys_fail(a);
	} else if (!json_is_string(json_object_get(key, "key"))) {
		cli_err("unexpected answer from cpuosd at %s: no key", api_url(a));
	} else {
		/* Alone on its line, so that key=$(cpuos keys create ...) works. */
		printf("%s\n", json_string_value(json_object_get(key, "key")));
		ret = 0;
	}
	json_decref(key);
	json_decref(body);
	return ret;
}

static int keys_ls(struct api *a, int json)
{
	json_t *list = NULL, *rows = json_array(), *k;
	struct apath p;
	char created[64];
	size_t i;
	int ret = 0;
	apath_init(&p, "/v1/keys");
	if (api_json(a, "GET", &p, NULL, &list) < 0) {
		ret = keys_fail(a);
	} else if (json) {
		cli_print_json(list);
	} else {
		json_array_foreach(json_object_get(list, "keys"), i, k)
		{
			time_text(json_object_get(k, "created_at"), created, sizeof(created));
			json_array_append_new(rows, json_pack("[ssss]", cli_str(k, "id"),
							      cli_str(k, "name"),
							      cli_str(k, "account"), created));
		}
		static const char *const hdr[] = {"ID", "NAME", "ACCOUNT", "CREATED"};
		cli_table(hdr, 4, rows);
	}
	json_decref(rows);
	json_decref(list);
	return ret;
}

int cmd_keys(struct cli *c, int argc, char **argv)
{
	struct api *a;
	struct apath p;
	int ret = 0;
	if (argc < 2)
		return cli_usage_err("keys", "keys needs create, ls or rm");
	const char *sub = argv[1];
	if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
		fputs(keys_usage, stdout);
		return 0;
	}
	if (strcmp(sub, "create") && strcmp(sub, "ls") && strcmp(sub, "rm"))
		return cli_usage_err("keys", "unknown keys command '%s'", sub);
	for (int i = 2; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(keys_usage, stdout);
			return 0;
		}
	if (!strcmp(sub, "ls") && argc > 2 && (argc > 3 || strcmp(argv[2], "--json")))
		return cli_usage_err("keys", "keys ls takes only --json");
	if (!strcmp(sub, "rm") && argc < 3)
		return cli_usage_err("keys", "keys rm needs a key id");
	if (!(a = cli_api(c)))
		return EXIT_API;
	if (!strcmp(sub, "create"))
		return keys_create(a, argc - 1, argv + 1);
	if (!strcmp(sub, "ls"))
		return keys_ls(a, argc > 2);
	for (int i = 2; i < argc; i++) {
		apath_init(&p, "/v1/keys");
		apath_seg(&p, argv[i]);
		if (api_json(a, "DELETE", &p, NULL, NULL) < 0)
			ret = keys_fail(a);
	}
	return ret;
}

/* ---- nodes ---- */

static int nodes_ls(struct api *a, int json)
{
	json_t *list = NULL, *rows = json_array(), *n;
	struct apath p;
	size_t i;
	int ret = 0;
	apath_init(&p, "/v1/nodes");
	if (api_json(a, "GET", &p, NULL, &list) < 0) {
		ret = keys_fail(a);
	} else if (json) {
		cli_print_json(list);
	} else {
		json_array_foreach(json_object_get(list, "nodes"), i, n)
		{
			char epoch[32];
			snprintf(epoch, sizeof(epoch), "%lld",
				 (long long)json_integer_value(json_object_get(n, "epoch")));
			json_array_append_new(rows, json_pack("[sssss]", cli_str(n, "name"),
							      cli_str(n, "state"), epoch,
							      cli_str(n, "lease_until"),
							      cli_str(n, "url")));
		}
		static const char *const hdr[] = {"NAME", "STATE", "EPOCH", "LEASE UNTIL", "URL"};
		cli_table(hdr, 5, rows);
	}
	json_decref(rows);
	json_decref(list);
	return ret;
}

int cmd_nodes(struct cli *c, int argc, char **argv)
{
	const char *sub = argc > 1 ? argv[1] : "ls";
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") ||
		    !strcmp(argv[i], "help")) {
			fputs(nodes_usage, stdout);
			return 0;
		}
	int json = 0;
	if (!strcmp(sub, "--json")) {
		sub = "ls";
		json = argc == 2;
		if (!json)
			return cli_usage_err("nodes", "nodes ls takes only --json");
	} else if (!strcmp(sub, "ls")) {
		if (argc > 3 || (argc == 3 && strcmp(argv[2], "--json")))
			return cli_usage_err("nodes", "nodes ls takes only --json");
		json = argc == 3;
	} else if (strcmp(sub, "drain") && strcmp(sub, "undrain")) {
		return cli_usage_err("nodes", "unknown nodes command '%s'", sub);
	}
	int move = !strcmp(sub, "drain") && argc == 4 && !strcmp(argv[3], "--move");
	if (strcmp(sub, "ls") && argc != 3 && !move)
		return cli_usage_err("nodes", "nodes %s needs one node name%s", sub,
				     strcmp(sub, "drain") ? "" : " (and --move)");
	struct api *a = cli_api(c);
	if (!a)
		return EXIT_API;
	if (!strcmp(sub, "ls"))
		return nodes_ls(a, json);
	struct apath p;
	json_t *node = NULL;
	apath_init(&p, "/v1/nodes");
	apath_seg(&p, argv[2]);
	apath_seg(&p, sub);
	json_t *body = move ? json_pack("{s:b}", "move", 1) : NULL;
	if (move)
		api_set_timeout(a, 0); /* each sandbox's pause, upload and resume */
	int e = api_json(a, "POST", &p, body, &node);
	json_decref(body);
	if (e < 0)
		return keys_fail(a);
	printf("%s %s\n", cli_str(node, "name"), cli_str(node, "state"));
	json_t *m;
	size_t i;
	int failed = 0;
	json_array_foreach(json_object_get(node, "moved"), i, m)
	{
		const char *err = json_string_value(json_object_get(m, "error"));
		const char *to = json_string_value(json_object_get(m, "node"));
		if (err)
			printf("%s stays: %s\n", cli_str(m, "id"), err);
		else if (to)
			printf("%s -> %s%s\n", cli_str(m, "id"), to,
			       json_is_true(json_object_get(m, "resumed")) ? " (resumed)" : " (paused)");
		else
			printf("%s let go of: %s\n", cli_str(m, "id"), cli_str(m, "note"));
		failed |= err != NULL;
	}
	json_decref(node);
	return failed ? EXIT_API : 0;
}

/* ---- templates ---- */

static int templates_ls(struct cli *c, int json)
{
	json_t *list = NULL, *rows = json_array(), *t;
	struct api *a;
	struct apath p;
	char size[32];
	size_t i;
	int ret = EXIT_API;
	if (!rows || !(a = cli_api(c)))
		goto out;
	apath_init(&p, "/v1/templates");
	if (api_json(a, "GET", &p, NULL, &list) < 0) {
		ret = cli_api_fail(a);
		goto out;
	}
	ret = 0;
	if (json) {
		cli_print_json(list);
		goto out;
	}
	json_array_foreach(json_object_get(list, "templates"), i, t)
	{
		json_t *sz = json_object_get(t, "size_bytes");
		if (json_is_number(sz))
			cli_human_size(json_number_value(sz), size, sizeof(size));
		else
			snprintf(size, sizeof(size), "-");
		json_array_append_new(
		    rows, json_pack("[ssss]", cli_str(t, "name"),
				    json_is_true(json_object_get(t, "ready")) ? "yes" : "no", size,
				    cli_str(t, "description")));
	}
	static const char *const hdr[] = {"NAME", "READY", "SIZE", "DESCRIPTION"};
	cli_table(hdr, 4, rows);
out:
	json_decref(list);
	json_decref(rows);
	return ret;
}

/* templates build NAME -f DOCKERFILE [CONTEXT] [--build-arg K=V]... [--no-cache] [START] */
static int build_dockerfile(struct cli *c, int argc, char **argv)
{
	const char *name = NULL, *file = NULL, *context = NULL;
	struct tpl_start st = { 0 };
	int no_cache = 0, remote = 0, r;
	json_t *args = json_object();
	for (int i = 2; i < argc; i++) {
		const char *next = i + 1 < argc ? argv[i + 1] : NULL;
		if ((!strcmp(argv[i], "-f") || !strcmp(argv[i], "--file")) && next) {
			file = argv[++i];
		} else if (!strcmp(argv[i], "--build-arg") && next) {
			if (cli_kv(args, argv[++i], "--build-arg") < 0) {
				json_decref(args);
				return EXIT_USAGE;
			}
		} else if (!strcmp(argv[i], "--no-cache")) {
			no_cache = 1;
		} else if (!strcmp(argv[i], "--remote")) {
			remote = 1;
		} else if (!strcmp(argv[i], "--start-cmd") && next && next[0]) {
			st.cmd = argv[++i];
		} else if (!strcmp(argv[i], "--ready-cmd") && next && next[0]) {
			st.ready_cmd = argv[++i];
		} else if (!strcmp(argv[i], "--ready-port") && next) {
			char *end;
			unsigned long port = strtoul(argv[++i], &end, 10);
			if (!port || port > 65535 || *end) {
				json_decref(args);
				return cli_usage_err("templates", "--ready-port needs a port (1 to 65535)");
			}
			st.ready_port = (unsigned)port;
		} else if ((argv[i][0] == '-' && argv[i][1]) || (name && context)) {
			json_decref(args);
			return cli_usage_err("templates", "unexpected argument '%s'", argv[i]);
		} else if (!name) {
			name = argv[i];
		} else {
			context = argv[i];
		}
	}
	if (!name || !file) {
		json_decref(args);
		return cli_usage_err("templates", "templates build -f needs NAME and a Dockerfile");
	}
	r = (remote ? tpl_dockerbuild_remote : tpl_dockerbuild)(c, name, file, context ? context : ".",
							       args, &st, no_cache);
	json_decref(args);
	return r;
}

int cmd_templates(struct cli *c, int argc, char **argv)
{
	int json = 0, i = 1;
	if (argc > 1 &&
	    (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help"))) {
		fputs(templates_usage, stdout);
		return 0;
	}
	int dockerfile_at = 0;
	for (i = 2; argc > 1 && !strcmp(argv[1], "build") && i < argc; i++)
		if (!strcmp(argv[i], "-f") || !strcmp(argv[i], "--file"))
			dockerfile_at = i;
	if (dockerfile_at)
		return build_dockerfile(c, argc, argv);
	i = 1;
	if (argc > 1 && !strcmp(argv[1], "build")) {
		if (argc < 3)
			return cli_usage_err("templates", "templates build needs a template name");
		for (i = 2; i < argc; i++) {
			if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
				fputs(templates_usage, stdout);
				return 0;
			}
			if (argv[i][0] == '-' || strchr(argv[i], '/') || !argv[i][0])
				return cli_usage_err("templates", "invalid template name '%s'",
						     argv[i]);
		}
		for (i = 2; i < argc; i++) {
			int r = tpl_build(argv[i]);
			if (r)
				return r;
		}
		return 0;
	}
	if (argc > 1 && (!strcmp(argv[1], "import") || !strcmp(argv[1], "pull"))) {
		int pull = !strcmp(argv[1], "pull"), insecure = 0;
		struct tpl_start st = { 0 };
		const char *pos[2] = { NULL, NULL };
		unsigned long long max_mb = 0;
		int npos = 0;
		for (i = 2; i < argc; i++) {
			if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
				fputs(templates_usage, stdout);
				return 0;
			}
			if (!strcmp(argv[i], "--max-size")) {
				char *end;
				if (i + 1 >= argc || (max_mb = strtoull(argv[i + 1], &end, 10)) == 0 ||
				    *end || max_mb > (1ULL << 24))
					return cli_usage_err("templates", "--max-size needs megabytes "
									  "(1 to 16777216)");
				i++;
			} else if (pull && !strcmp(argv[i], "--insecure")) {
				insecure = 1;
			} else if (!strcmp(argv[i], "--start-cmd") && i + 1 < argc && argv[i + 1][0]) {
				st.cmd = argv[++i];
			} else if (!strcmp(argv[i], "--start-image")) {
				st.image = 1;
			} else if (!strcmp(argv[i], "--ready-cmd") && i + 1 < argc && argv[i + 1][0]) {
				st.ready_cmd = argv[++i];
			} else if (!strcmp(argv[i], "--ready-port")) {
				char *end;
				unsigned long port = i + 1 < argc ? strtoul(argv[i + 1], &end, 10) : 0;
				if (!port || port > 65535 || *end)
					return cli_usage_err("templates", "--ready-port needs a port (1 to 65535)");
				st.ready_port = (unsigned)port;
				i++;
			} else if (argv[i][0] == '-' || npos == 2) {
				return cli_usage_err("templates", "unexpected argument '%s'", argv[i]);
			} else {
				pos[npos++] = argv[i];
			}
		}
		if (npos != 2)
			return cli_usage_err("templates", "templates %s needs NAME and %s", argv[1],
					     pull ? "REFERENCE" : "ARCHIVE");
		if ((st.cmd && st.image) || ((st.ready_port || st.ready_cmd) && !st.cmd && !st.image) ||
		    (st.ready_port && st.ready_cmd))
			return cli_usage_err("templates", "one of --start-cmd and --start-image, then at "
							  "most one of --ready-port and --ready-cmd");
		return pull ? tpl_pull(pos[0], pos[1], insecure, max_mb, &st)
			    : tpl_import(pos[0], pos[1], max_mb, &st);
	}
	if (argc > 1 && !strcmp(argv[1], "ls"))
		i = 2;
	for (; i < argc; i++) {
		if (strcmp(argv[i], "--json"))
			return cli_usage_err("templates", "unexpected argument '%s'", argv[i]);
		json = 1;
	}
	return templates_ls(c, json);
}
