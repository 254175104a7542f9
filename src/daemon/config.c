/*
 * config: defaults, the config file and the command line of cpuosd.
 */
#include "daemon/config.h"

#include "common/conffile.h"

#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
	"usage: cpuosd [options]\n"
	"Serves the cpuos HTTP API (docs/api.md) and runs sandboxes as QEMU microVMs.\n"
	"\n"
	"  --config FILE          read options from FILE first: one 'name = value' per line,\n"
	"                         names as the long options below, '#' starts a comment\n"
	"  --state-dir DIR        state: SQLite database, VM run directories\n"
	"                         (default /var/lib/cpuos)\n"
	"  --socket PATH          Unix socket; whoever can open it is the administrator\n"
	"                         (default /run/cpuos/cpuosd.sock; 'none' to disable)\n"
	"  --listen HOST:PORT     TCP address, API keys required (default 127.0.0.1:7070;\n"
	"                         'none' to disable)\n"
	"  --guest-dir DIR        kernel, initramfs and templates/ (default: build/guest\n"
	"                         beside this binary)\n"
	"  --cache-dir DIR        cached writable-layer bases (default /var/cache/cpuos)\n"
	"  --qemu PATH            QEMU binary (default qemu-system-x86_64)\n"
	"  --accel auto|kvm|tcg   accelerator (default auto)\n"
	"  --max-sandboxes N      running sandboxes per account (default 20)\n"
	"  --account-max-vcpus N  vCPUs an account's running sandboxes may have in all\n"
	"                         (default 0: no limit beyond --max-sandboxes)\n"
	"  --account-max-memory-mb N  guest memory they may have in all (default 0: none)\n"
	"  --memory-overcommit RATIO  a start is refused when the guest memory of every\n"
	"                         running sandbox and warm VM would pass RATIO times the\n"
	"                         host's RAM (default 1.5; 0: never refused)\n"
	"  --max-json-bytes N     largest JSON request body (default 1048576)\n"
	"  --max-file-bytes N     largest file upload (default 10737418240)\n"
	"  --max-output-bytes N   output kept per stream of a foreground exec (default 1048576)\n"
	"  --max-conns-per-ip N   TCP connections from one address (default 128)\n"
	"  --conn-timeout SECONDS an idle connection is closed after this (default 60)\n"
	"  --answer-timeout SECONDS  how long a request that answers at once (stat, mkdir,\n"
	"                         a process list, a start) waits for the guest (default 60)\n"
	"  --price-per-hour USD   GET /v1/usage: the price of a running hour of the reference\n"
	"                         size (default 0.11); a sandbox pays it times the mean of\n"
	"                         its vCPU and memory ratios to that size\n"
	"  --price-vcpus N        vCPUs of the reference size (default 2)\n"
	"  --price-memory-gib N   memory of the reference size in GiB (default 4)\n"
	"  --price-storage-gib-month USD\n"
	"                         the price of a GiB a paused sandbox keeps for 30 days\n"
	"                         (default 0)\n"
	"  --paused-retention SECONDS  a paused sandbox is deleted this long after its\n"
	"                         pause (default 2592000: 30 days)\n"
	"  --template-snapshots on|off  boot each template once, warm it and snapshot it;\n"
	"                         creates restore the snapshot (default on)\n"
	"  --pool-python N        warm python VMs kept restored, so a create only claims one\n"
	"                         (default 2)\n"
	"  --pool-other N         the same for every other template (default 0)\n"
	"  --pool-max-mb N        guest memory all warm pools together may hold (default 4096)\n"
	"  --net on|off           a network per sandbox (default on; off: no NIC at all)\n"
	"  --net-range CIDR       IPv4 range for the sandboxes' host-side addresses, /16 to\n"
	"                         /24, one /30 each; give each daemon on a host its own\n"
	"                         (default 10.201.0.0/16)\n"
	"  --net-default POLICY   the egress policy of a sandbox that names none: allow-all,\n"
	"                         deny-all, or a policy as JSON (default allow-all)\n"
	"  --dns-upstream ADDR[:PORT]  where the guests' resolver asks (default: the\n"
	"                         nameservers of /etc/resolv.conf)\n"
	"  --egress-trust FILE    the CA certificates (PEM) servers that get egress secrets\n"
	"                         are checked by (default: the host's roots)\n"
	"  --url-listen HOST:PORT where port URLs (sbx.url(port)) are served, or none\n"
	"                         (default 127.0.0.1:7071)\n"
	"  --url-domain NAME[:PORT]  a wildcard domain (*.NAME) pointed at --url-listen:\n"
	"                         URLs are http://<port>-<id>.NAME[:PORT]/ (default: none,\n"
	"                         URLs are http://<url-listen>/<id>/<port>/)\n"
	"  --jail on|off          each QEMU with a uid, a mount namespace and a cgroup of its\n"
	"                         own, no capabilities; cpuosd then gives up root to a helper\n"
	"                         (default on when run as root)\n"
	"  --jail-ids FIRST:COUNT ids the jails take: FIRST is the group they share and the\n"
	"                         uid cpuosd runs as, each QEMU one of the others as uid and\n"
	"                         gid (default 1900000000:65536)\n"
	"  --cgroups on|off       each QEMU in a cgroup limiting its memory, processes and\n"
	"                         CPU time, on cgroup v1 or v2 (default on with --jail)\n"
	"  --log-level LEVEL      error, warn, info or debug (default info)\n"
	"  --help                 this text\n"
	"Logs go to stderr, one JSON object per line unless stderr is a terminal.\n"
	"SIGTERM or SIGINT stops serving; running sandboxes keep running and the next\n"
	"cpuosd with the same --state-dir takes them over.\n";

static const struct option longopts[] = {
	{ "config", required_argument, 0, 'c' },	{ "state-dir", required_argument, 0, 's' },
	{ "socket", required_argument, 0, 'S' },	{ "listen", required_argument, 0, 'l' },
	{ "guest-dir", required_argument, 0, 'g' },	{ "cache-dir", required_argument, 0, 'C' },
	{ "qemu", required_argument, 0, 'q' },		{ "accel", required_argument, 0, 'a' },
	{ "max-sandboxes", required_argument, 0, 'm' }, { "max-json-bytes", required_argument, 0, 'j' },
	{ "max-file-bytes", required_argument, 0, 'f' }, { "max-output-bytes", required_argument, 0, 'o' },
	{ "max-conns-per-ip", required_argument, 0, 'p' }, { "conn-timeout", required_argument, 0, 't' },
	{ "answer-timeout", required_argument, 0, 'A' },
	{ "price-per-hour", required_argument, 0, 'P' },
	{ "price-vcpus", required_argument, 0, 'V' },
	{ "price-memory-gib", required_argument, 0, 'M' },
	{ "price-storage-gib-month", required_argument, 0, 'G' },
	{ "paused-retention", required_argument, 0, 'R' },
	{ "template-snapshots", required_argument, 0, 'T' },
	{ "pool-python", required_argument, 0, 'Y' },
	{ "pool-other", required_argument, 0, 'O' },
	{ "pool-max-mb", required_argument, 0, 'X' },
	{ "net", required_argument, 0, 'N' },
	{ "net-range", required_argument, 0, 'r' },
	{ "net-default", required_argument, 0, 'D' },
	{ "dns-upstream", required_argument, 0, 'u' },
	{ "egress-trust", required_argument, 0, 'E' },
	{ "url-listen", required_argument, 0, 'U' },
	{ "url-domain", required_argument, 0, 'W' },
	{ "account-max-vcpus", required_argument, 0, 'v' },
	{ "account-max-memory-mb", required_argument, 0, 'e' },
	{ "memory-overcommit", required_argument, 0, 'x' },
	{ "jail", required_argument, 0, 'J' },
	{ "jail-ids", required_argument, 0, 'I' },
	{ "cgroups", required_argument, 0, 'K' },
	{ "log-level", required_argument, 0, 'L' },	{ "help", no_argument, 0, 'h' },
	{ 0, 0, 0, 0 },
};

static int set_number(const char *name, const char *v, long long min, long long *out)
{
	char *end;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	if (errno || !*v || *end || n < min) {
		fprintf(stderr, "cpuosd: invalid --%s '%s'\n", name, v);
		return -1;
	}
	*out = n;
	return 0;
}

/* A count that must also fit an unsigned field. */
static int set_bounded(const char *name, const char *v, long long min, long long max,
		       long long *out)
{
	long long n;
	if (set_number(name, v, min, &n) < 0)
		return -1;
	if (n > max) {
		fprintf(stderr, "cpuosd: --%s '%s' is over %lld\n", name, v, max);
		return -1;
	}
	*out = n;
	return 0;
}

/* A price: a finite decimal number >= 0. */
static int set_text(const char *name, const char *v, char *out, size_t n)
{
	if (strlen(v) >= n) {
		fprintf(stderr, "cpuosd: --%s is too long\n", name);
		return -1;
	}
	snprintf(out, n, "%s", v);
	return 0;
}

static int set_price(const char *name, const char *v, double *out)
{
	char *end;
	errno = 0;
	double d = strtod(v, &end);
	/* !(d >= 0) also refuses NaN; the cap refuses inf and typos alike */
	if (errno || !*v || *end || !(d >= 0) || d > 1e9) {
		fprintf(stderr, "cpuosd: invalid --%s '%s' (a price in USD, 0 to 1e9)\n", name, v);
		return -1;
	}
	*out = d;
	return 0;
}

static int set_on_off(const char *name, const char *v, int *out)
{
	if (strcmp(v, "on") && strcmp(v, "off")) {
		fprintf(stderr, "cpuosd: --%s must be on or off\n", name);
		return -1;
	}
	*out = !strcmp(v, "on");
	return 0;
}

/* Applies one option by its short letter: 0, or -1 after saying why. */
static int apply(struct config *o, int c, const char *v)
{
	switch (c) {
	case 's': snprintf(o->state_dir, sizeof(o->state_dir), "%s", v); return 0;
	case 'S': snprintf(o->socket, sizeof(o->socket), "%s", v); return 0;
	case 'l': snprintf(o->listen, sizeof(o->listen), "%s", v); return 0;
	case 'g': snprintf(o->guest_dir, sizeof(o->guest_dir), "%s", v); return 0;
	case 'C': snprintf(o->cache_dir, sizeof(o->cache_dir), "%s", v); return 0;
	case 'q': snprintf(o->qemu, sizeof(o->qemu), "%s", v); return 0;
	case 'a': snprintf(o->accel, sizeof(o->accel), "%s", v); return 0;
	case 'L': snprintf(o->log_level, sizeof(o->log_level), "%s", v); return 0;
	case 'm': return set_number("max-sandboxes", v, 1, &o->max_sandboxes);
	case 'j': return set_number("max-json-bytes", v, 1024, &o->max_json);
	case 'f': return set_number("max-file-bytes", v, 1, &o->max_file);
	case 'o': return set_number("max-output-bytes", v, 1024, &o->max_output);
	case 'p': return set_number("max-conns-per-ip", v, 1, &o->max_conns_per_ip);
	case 't': return set_number("conn-timeout", v, 1, &o->conn_timeout_s);
	case 'A': return set_number("answer-timeout", v, 1, &o->answer_timeout_s);
	case 'P': return set_price("price-per-hour", v, &o->price_per_hour);
	case 'V': return set_bounded("price-vcpus", v, 1, 1024, &o->price_vcpus);
	case 'M': return set_bounded("price-memory-gib", v, 1, 1 << 20, &o->price_memory_gib);
	case 'G': return set_price("price-storage-gib-month", v, &o->price_storage_gib_month);
	case 'R': return set_number("paused-retention", v, 1, &o->paused_retention_s);
	case 'T': return set_on_off("template-snapshots", v, &o->template_snapshots);
	case 'Y': return set_bounded("pool-python", v, 0, 64, &o->pool_python);
	case 'O': return set_bounded("pool-other", v, 0, 64, &o->pool_other);
	case 'X': return set_number("pool-max-mb", v, 0, &o->pool_max_mb);
	case 'N': return set_on_off("net", v, &o->net);
	case 'r': return set_text("net-range", v, o->net_range, sizeof(o->net_range));
	case 'u': return set_text("dns-upstream", v, o->dns_upstream, sizeof(o->dns_upstream));
	case 'E': return set_text("egress-trust", v, o->egress_trust, sizeof(o->egress_trust));
	case 'U': return set_text("url-listen", v, o->url_listen, sizeof(o->url_listen));
	case 'W': return set_text("url-domain", v, o->url_domain, sizeof(o->url_domain));
	case 'v': return set_bounded("account-max-vcpus", v, 0, 1 << 20, &o->account_vcpus);
	case 'e': return set_number("account-max-memory-mb", v, 0, &o->account_memory_mb);
	case 'x': {
		char *end;
		errno = 0;
		double d = strtod(v, &end);
		if (errno || !*v || *end || !(d >= 0) || d > 100) {
			fprintf(stderr, "cpuosd: invalid --memory-overcommit '%s' (0 to 100)\n", v);
			return -1;
		}
		o->overcommit = d;
		return 0;
	}
	case 'J': return set_on_off("jail", v, &o->jail);
	case 'K': return set_on_off("cgroups", v, &o->cgroups);
	case 'I': {
		char first[24], count[24], extra;
		long long f, n;
		if (sscanf(v, "%23[0-9]:%23[0-9]%c", first, count, &extra) != 2 ||
		    set_bounded("jail-ids", first, 1, 4000000000LL, &f) < 0 ||
		    set_bounded("jail-ids", count, 2, 1 << 24, &n) < 0 || f + n > 4294967294LL) {
			fprintf(stderr, "cpuosd: invalid --jail-ids '%s' (FIRST:COUNT, 2 ids or more "
					"below 4294967294)\n", v);
			return -1;
		}
		o->jail_first = f;
		o->jail_count = n;
		return 0;
	}
	case 'D':
		/* The two plain modes may be named; anything else is JSON,
		 * checked when the daemon starts. */
		if (!strcmp(v, "allow-all") || !strcmp(v, "deny-all"))
			snprintf(o->net_default, sizeof(o->net_default), "{\"mode\":\"%s\"}", v);
		else if (set_text("net-default", v, o->net_default, sizeof(o->net_default)) < 0)
			return -1;
		return 0;
	default: return -1;
	}
}

static int apply_line(void *o, int val, const char *value)
{
	return apply(o, val, value);
}

static int read_config(struct config *o, const char *path)
{
	return conf_read("cpuosd", path, longopts, apply_line, o);
}

static void defaults(struct config *o)
{
	memset(o, 0, sizeof(*o));
	snprintf(o->state_dir, sizeof(o->state_dir), "/var/lib/cpuos");
	snprintf(o->socket, sizeof(o->socket), "/run/cpuos/cpuosd.sock");
	snprintf(o->listen, sizeof(o->listen), "127.0.0.1:7070");
	snprintf(o->cache_dir, sizeof(o->cache_dir), "/var/cache/cpuos");
	snprintf(o->accel, sizeof(o->accel), "auto");
	snprintf(o->log_level, sizeof(o->log_level), "info");
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		snprintf(o->guest_dir, sizeof(o->guest_dir), "%s/../guest", dirname(exe));
	}
	o->max_sandboxes = 20;
	o->overcommit = 1.5;
	o->max_json = 1 << 20;
	o->max_file = 10LL << 30;
	o->max_output = 1 << 20;
	o->max_conns_per_ip = 128;
	o->conn_timeout_s = 60;
	o->answer_timeout_s = 60;
	/* the product's seed price: $0.11 an hour for 2 vCPUs and 4 GiB;
	 * paused storage is nearly free */
	o->price_per_hour = 0.11;
	o->price_vcpus = 2;
	o->price_memory_gib = 4;
	o->price_storage_gib_month = 0;
	o->paused_retention_s = 30LL * 24 * 3600;
	o->template_snapshots = 1;
	o->pool_python = 2;
	o->pool_other = 0;
	o->pool_max_mb = 4096;
	o->net = 1;
	o->jail = o->cgroups = geteuid() == 0;
	o->jail_first = 1900000000;
	o->jail_count = 65536;
	snprintf(o->net_range, sizeof(o->net_range), "10.201.0.0/16");
	snprintf(o->url_listen, sizeof(o->url_listen), "127.0.0.1:7071");
	snprintf(o->net_default, sizeof(o->net_default), "{\"mode\":\"allow-all\"}");
}

int config_parse(struct config *o, int argc, char **argv)
{
	defaults(o);
	/* The config file first, so flags override it wherever it appears. */
	for (int i = 1; i < argc; i++) {
		const char *v = !strcmp(argv[i], "--config") && i + 1 < argc ? argv[i + 1]
				: !strncmp(argv[i], "--config=", 9) ? argv[i] + 9 : NULL;
		if (v && read_config(o, v) < 0)
			return -1;
	}
	int c;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (c == 'h') {
			fputs(usage, stdout);
			return 1;
		}
		if (c == 'c')
			continue;
		if (c == '?' || apply(o, c, optarg) < 0) {
			fprintf(stderr, "cpuosd: see cpuosd --help\n");
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "cpuosd: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	return 0;
}
