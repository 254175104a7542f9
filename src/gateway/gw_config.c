/* gw_config: cpuos-gateway's defaults, its options table (lib/opts reads
 * the config files and the command line through it) and its secrets. */
#include "gateway/gw_config.h"

#include "lib/opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
	"usage: cpuos-gateway [serve] [options]\n"
	"       cpuos-gateway keys create --name NAME | keys list | keys delete ID [options]\n"
	"An OpenAI-compatible server (POST /v1/chat/completions, GET /v1/models) in front of\n"
	"an upstream model server, running the model's code-interpreter tool calls in cpuos\n"
	"sandboxes, one per conversation (docs/gateway.md).\n"
	"\n"
	"  --config FILE            read options from FILE first: one 'name = value' per line,\n"
	"                           names as the long options below, '#' starts a comment\n"
	"  --listen HOST:PORT       where it serves (default 127.0.0.1:7080)\n"
	"  --upstream-url URL       the upstream's OpenAI-compatible /v1 base URL (needed to serve)\n"
	"  --upstream-key-file FILE the upstream's API key (default $UPSTREAM_API_KEY; none: no\n"
	"                           Authorization header)\n"
	"  --upstream-timeout DUR   how long an upstream call may take, or a stream stay silent\n"
	"                           (default 5m)\n"
	"  --cpuos-url URL          cpuosd: http://HOST:PORT or unix:///PATH (default\n"
	"                           $CPUOS_API_URL, else unix:///run/cpuos/cpuosd.sock)\n"
	"  --cpuos-key-file FILE    cpuosd's API key (default $CPUOS_API_KEY; not needed on its\n"
	"                           Unix socket)\n"
	"  --state-dir DIR          its SQLite database: keys, conversations (default\n"
	"                           /var/lib/cpuos-gateway)\n"
	"  --template NAME          the sandboxes' template (default python)\n"
	"  --sandbox-timeout DUR    each sandbox's timeout in cpuosd (default 30m)\n"
	"  --code-timeout DUR       how long one tool call's code may run (default 2m)\n"
	"  --max-steps N            model calls per request before it stops (default 8, 1..64)\n"
	"  --tool-name NAME         the code tool's function name (default run_python)\n"
	"  --max-body-bytes N       largest request body (default 8388608)\n"
	"  --max-file-bytes N       largest file uploaded into a conversation (default 67108864)\n"
	"  --name NAME              keys create: the new key's name\n"
	"  --log-level LEVEL        error, warn, info or debug (default info)\n"
	"  --help                   this text\n"
	"Durations: 90s, 30m, 2h, 1h30m or seconds. SIGTERM or SIGINT stops serving.\n";

/* --tool-name: a function name as OpenAI takes it, 1..64 of a-z A-Z 0-9 _ -. */
static int set_tool_name(void *arg, const char *prog, const char *v)
{
	struct gw_config *o = arg;
	size_t len = strlen(v);
	if (len == 0 || len > 64 || strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					     "0123456789_-") != len) {
		fprintf(stderr, "%s: invalid --tool-name '%s' (1 to 64 of a-z A-Z 0-9 _ -)\n", prog,
			v);
		return -1;
	}
	snprintf(o->tool_name, sizeof(o->tool_name), "%s", v);
	return 0;
}

#define DAY (24 * 3600)

static const struct opt table[] = {
	OPT_TEXT_OF("listen", struct gw_config, listen),
	OPT_TEXT_OF("upstream-url", struct gw_config, upstream_url),
	OPT_TEXT_OF("upstream-key-file", struct gw_config, upstream_key_file),
	OPT_DURATION_OF("upstream-timeout", struct gw_config, upstream_timeout_s, 1, DAY),
	OPT_TEXT_OF("cpuos-url", struct gw_config, cpuos_url),
	OPT_TEXT_OF("cpuos-key-file", struct gw_config, cpuos_key_file),
	OPT_TEXT_OF("state-dir", struct gw_config, state_dir),
	OPT_TEXT_OF("template", struct gw_config, template_),
	OPT_DURATION_OF("sandbox-timeout", struct gw_config, sandbox_timeout_s, 1, DAY),
	OPT_DURATION_OF("code-timeout", struct gw_config, code_timeout_s, 1, DAY),
	OPT_INT_OF("max-steps", struct gw_config, max_steps, 1, 64),
	OPT_FN_OF("tool-name", set_tool_name),
	OPT_INT_OF("max-body-bytes", struct gw_config, max_body_bytes, 1024, 1LL << 30),
	OPT_INT_OF("max-file-bytes", struct gw_config, max_file_bytes, 1, 1LL << 30),
	OPT_TEXT_OF("name", struct gw_config, name),
	OPT_TEXT_OF("log-level", struct gw_config, log_level),
	{ 0 },
};

static const struct opts_spec spec = {
	.prog = "cpuos-gateway", .usage = usage, .opts = table, .args = 1
};

static void defaults(struct gw_config *o)
{
	memset(o, 0, sizeof(*o));
	snprintf(o->listen, sizeof(o->listen), "127.0.0.1:7080");
	const char *url = getenv("CPUOS_API_URL");
	snprintf(o->cpuos_url, sizeof(o->cpuos_url), "%s",
		 url && *url ? url : "unix:///run/cpuos/cpuosd.sock");
	snprintf(o->state_dir, sizeof(o->state_dir), "/var/lib/cpuos-gateway");
	snprintf(o->template_, sizeof(o->template_), "python");
	snprintf(o->tool_name, sizeof(o->tool_name), "run_python");
	snprintf(o->log_level, sizeof(o->log_level), "info");
	o->max_steps = 8; /* seed 003's MAX_STEPS */
	o->upstream_timeout_s = 300;
	o->sandbox_timeout_s = 30 * 60;
	o->code_timeout_s = 120;
	o->max_body_bytes = 8 << 20;
	o->max_file_bytes = 64 << 20;
}

int gw_config_parse(struct gw_config *o, int argc, char **argv)
{
	int first = argc;
	defaults(o);
	int r = opts_parse(&spec, o, argc, argv, &first);
	o->args = argv + first;
	o->nargs = argc - first;
	return r;
}

char *gw_config_secret(const char *file, const char *env)
{
	if (!file || !*file) {
		const char *v = getenv(env);
		return strdup(v ? v : "");
	}
	FILE *f = fopen(file, "re");
	if (!f) {
		fprintf(stderr, "cpuos-gateway: cannot read '%s': %s\n", file, strerror(errno));
		return NULL;
	}
	char line[1024] = "";
	if (!fgets(line, sizeof(line), f))
		line[0] = '\0';
	fclose(f);
	line[strcspn(line, "\r\n")] = '\0';
	char *s = strdup(line);
	explicit_bzero(line, sizeof(line));
	return s;
}
