/* gw_config: defaults, the config file and the command line of cpuos-gateway. */
#include "gateway/gw_config.h"

#include "common/conffile.h"
#include "common/duration.h"

#include <errno.h>
#include <getopt.h>
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

static const struct option longopts[] = {
	{ "config", required_argument, 0, 'c' },
	{ "listen", required_argument, 0, 'l' },
	{ "upstream-url", required_argument, 0, 'u' },
	{ "upstream-key-file", required_argument, 0, 'k' },
	{ "upstream-timeout", required_argument, 0, 'T' },
	{ "cpuos-url", required_argument, 0, 'C' },
	{ "cpuos-key-file", required_argument, 0, 'K' },
	{ "state-dir", required_argument, 0, 's' },
	{ "template", required_argument, 0, 't' },
	{ "sandbox-timeout", required_argument, 0, 'S' },
	{ "code-timeout", required_argument, 0, 'E' },
	{ "max-steps", required_argument, 0, 'm' },
	{ "tool-name", required_argument, 0, 'n' },
	{ "max-body-bytes", required_argument, 0, 'b' },
	{ "max-file-bytes", required_argument, 0, 'f' },
	{ "name", required_argument, 0, 'N' },
	{ "log-level", required_argument, 0, 'L' },
	{ "help", no_argument, 0, 'h' },
	{ 0, 0, 0, 0 },
};

static int set_text(const char *name, const char *v, char *out, size_t n)
{
	if (strlen(v) >= n) {
		fprintf(stderr, "cpuos-gateway: --%s is too long\n", name);
		return -1;
	}
	snprintf(out, n, "%s", v);
	return 0;
}

static int set_number(const char *name, const char *v, long long min, long long max,
		      long long *out)
{
	char *end;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	if (errno || !*v || *end || n < min || n > max) {
		fprintf(stderr, "cpuos-gateway: invalid --%s '%s' (%lld to %lld)\n", name, v, min,
			max);
		return -1;
	}
	*out = n;
	return 0;
}

static int set_duration(const char *name, const char *v, long long max, long long *out)
{
	long long s;
	if (duration_parse(v, &s) < 0 || s < 1 || s > max) {
		fprintf(stderr, "cpuos-gateway: invalid --%s '%s' (a duration such as 90s or 30m, "
				"at most %llds)\n", name, v, max);
		return -1;
	}
	*out = s;
	return 0;
}

/* A function name as OpenAI takes it: 1..64 of a-z A-Z 0-9 _ -. */
static int set_tool_name(const char *v, char *out, size_t n)
{
	size_t len = strlen(v);
	if (len == 0 || len > 64 || strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					     "0123456789_-") != len) {
		fprintf(stderr, "cpuos-gateway: invalid --tool-name '%s' (1 to 64 of a-z A-Z 0-9 _ -)\n",
			v);
		return -1;
	}
	snprintf(out, n, "%s", v);
	return 0;
}

/* Applies one option by its short letter: 0, or -1 after saying why. */
static int apply(struct gw_config *o, int c, const char *v)
{
	switch (c) {
	case 'l': return set_text("listen", v, o->listen, sizeof(o->listen));
	case 'u': return set_text("upstream-url", v, o->upstream_url, sizeof(o->upstream_url));
	case 'k':
		return set_text("upstream-key-file", v, o->upstream_key_file,
				sizeof(o->upstream_key_file));
	case 'T': return set_duration("upstream-timeout", v, 24 * 3600, &o->upstream_timeout_s);
	case 'C': return set_text("cpuos-url", v, o->cpuos_url, sizeof(o->cpuos_url));
	case 'K':
		return set_text("cpuos-key-file", v, o->cpuos_key_file, sizeof(o->cpuos_key_file));
	case 's': return set_text("state-dir", v, o->state_dir, sizeof(o->state_dir));
	case 't': return set_text("template", v, o->template_, sizeof(o->template_));
	case 'S': return set_duration("sandbox-timeout", v, 24 * 3600, &o->sandbox_timeout_s);
	case 'E': return set_duration("code-timeout", v, 24 * 3600, &o->code_timeout_s);
	case 'm': return set_number("max-steps", v, 1, 64, &o->max_steps);
	case 'n': return set_tool_name(v, o->tool_name, sizeof(o->tool_name));
	case 'b': return set_number("max-body-bytes", v, 1024, 1LL << 30, &o->max_body_bytes);
	case 'f': return set_number("max-file-bytes", v, 1, 1LL << 30, &o->max_file_bytes);
	case 'N': return set_text("name", v, o->name, sizeof(o->name));
	case 'L': return set_text("log-level", v, o->log_level, sizeof(o->log_level));
	default: return -1;
	}
}

static int apply_line(void *o, int val, const char *value)
{
	return apply(o, val, value);
}

static int read_config(struct gw_config *o, const char *path)
{
	return conf_read("cpuos-gateway", path, longopts, apply_line, o);
}

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
	defaults(o);
	for (int i = 1; i < argc; i++) {
		const char *v = !strcmp(argv[i], "--config") && i + 1 < argc ? argv[i + 1]
				: !strncmp(argv[i], "--config=", 9) ? argv[i] + 9 : NULL;
		if (v && read_config(o, v) < 0)
			return -1;
	}
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (c == 'h') {
			fputs(usage, stdout);
			return 1;
		}
		if (c == 'c')
			continue;
		if (c == '?' || apply(o, c, optarg) < 0) {
			fprintf(stderr, "cpuos-gateway: see cpuos-gateway --help\n");
			return -1;
		}
	}
	o->args = argv + optind;
	o->nargs = argc - optind;
	return 0;
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
