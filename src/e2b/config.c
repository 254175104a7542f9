/* config: cpuos-e2b's defaults and its options table (lib/opts reads the
 * config files and the command line through it). */
#include "e2b/config.h"

#include "e2b/e2b.h"
#include "lib/opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
	"usage: cpuos-e2b [options]\n"
	"E2B's API in front of cpuosd, for E2B's SDKs (e2b, e2b-code-interpreter) and any\n"
	"E2B-compatible client: set E2B_API_URL and E2B_SANDBOX_URL to its address and\n"
	"E2B_API_KEY to a cpuos API key (docs/e2b.md).\n"
	"\n"
	"  --config FILE            read options from FILE first: one 'name = value' per line,\n"
	"                           names as the long options below, '#' starts a comment\n"
	"  --listen HOST:PORT       where it serves both planes (default 127.0.0.1:3000)\n"
	"  --cpuos-url URL          cpuosd's API on TCP: http://HOST:PORT (default\n"
	"                           $CPUOS_API_URL, else http://127.0.0.1:7070)\n"
	"  --domain DOMAIN          sandboxes' hosts are <port>-<id>.DOMAIN, when a wildcard\n"
	"                           name points at the listener (default none: clients set\n"
	"                           E2B_SANDBOX_URL)\n"
	"  --state-dir DIR          where its secret is kept, which seals access tokens\n"
	"                           (default /var/lib/cpuos-e2b)\n"
	"  --template NAME          the template of a create that names none (default base)\n"
	"  --code-interpreter-template NAME\n"
	"                           the template E2B's 'code-interpreter-v1' stands for\n"
	"                           (default python)\n"
	"  --port-urls TEMPLATE     where a request for any other port of a sandbox is sent\n"
	"                           (307): cpuosd's port URL with {id} (the E2B id) and\n"
	"                           {port}, as http://127.0.0.1:7071/sbx_{id}/{port} for its\n"
	"                           --url-listen, or https://{port}-{id}.DOMAIN for its\n"
	"                           --url-domain (default none: such requests get 502)\n"
	"  --max-body-bytes N       largest JSON request body (default 1048576)\n"
	"  --max-file-bytes N       largest file upload (default 10737418240)\n"
	"  --log-level LEVEL        error, warn, info or debug (default info)\n"
	"  --help                   this text\n"
	"SIGTERM or SIGINT stops serving.\n";

static const struct opt table[] = {
	OPT_TEXT_OF("listen", struct e2b_config, listen),
	OPT_TEXT_OF("cpuos-url", struct e2b_config, cpuos_url),
	OPT_TEXT_OF("domain", struct e2b_config, domain),
	OPT_TEXT_OF("state-dir", struct e2b_config, state_dir),
	OPT_TEXT_OF("template", struct e2b_config, template_),
	OPT_TEXT_OF("code-interpreter-template", struct e2b_config, interp_template),
	OPT_TEXT_OF("port-urls", struct e2b_config, port_urls),
	OPT_INT_OF("max-body-bytes", struct e2b_config, max_body_bytes, 1024, 1LL << 30),
	OPT_INT_OF("max-file-bytes", struct e2b_config, max_file_bytes, 1, 1LL << 40),
	OPT_TEXT_OF("log-level", struct e2b_config, log_level),
	{ 0 },
};

static const struct opts_spec spec = { .prog = "cpuos-e2b", .usage = usage, .opts = table };

int e2b_config_parse(struct e2b_config *o, int argc, char **argv)
{
	memset(o, 0, sizeof(*o));
	snprintf(o->listen, sizeof(o->listen), "127.0.0.1:3000");
	const char *url = getenv("CPUOS_API_URL");
	snprintf(o->cpuos_url, sizeof(o->cpuos_url), "%s",
		 url && *url ? url : "http://127.0.0.1:7070");
	snprintf(o->state_dir, sizeof(o->state_dir), "/var/lib/cpuos-e2b");
	snprintf(o->template_, sizeof(o->template_), "base");
	snprintf(o->interp_template, sizeof(o->interp_template), "python");
	snprintf(o->log_level, sizeof(o->log_level), "info");
	o->max_body_bytes = 1 << 20;
	o->max_file_bytes = 10LL << 30;
	int r = opts_parse(&spec, o, argc, argv, NULL);
	if (r == 0 && o->port_urls[0] &&
	    (strncmp(o->port_urls, "http", 4) || !strstr(o->port_urls, "{id}") ||
	     !strstr(o->port_urls, "{port}"))) {
		fprintf(stderr, "cpuos-e2b: invalid --port-urls '%s' (an http(s) URL with {id} and "
				"{port})\n", o->port_urls);
		return -1;
	}
	return r;
}
