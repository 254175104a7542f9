/*
 * config: cpuosd's defaults and its options table (lib/opts reads the
 * config files and the command line through it).
 */
#include "daemon/config.h"

#include "lib/opts.h"

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
	"  --image-max-mb N       the largest image a template is made of, unpacked\n"
	"                         (default 4096)\n"
	"  --template-quota-mb N  what an account's templates may hold in all, 0 for no\n"
	"                         limit (default 20480)\n"
	"  --insecure-registry HOST[:PORT],...  registries pulled from over plain HTTP (a\n"
	"                         local one); every other is HTTPS\n"
	"  --builder PATH         the cpuos CLI that runs Dockerfile builds for the API, a\n"
	"                         client of --listen (default: cpuos beside this binary;\n"
	"                         'none' for no builds)\n"
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
	"  --egress-ca DIR        the CA the guests trust for egress secrets and the key that\n"
	"                         seals the secrets (ca.pem, ca.key, seal.key; made there if\n"
	"                         missing): give every node of a cluster a copy of one, since\n"
	"                         snapshots trust it (default <cache-dir>/egress-ca)\n"
	"  --url-listen HOST:PORT where port URLs (sbx.url(port)) are served, or none\n"
	"                         (default 127.0.0.1:7071)\n"
	"  --url-domain NAME[:PORT]  a wildcard domain (*.NAME) pointed at --url-listen:\n"
	"                         URLs are http://<port>-<id>.NAME[:PORT]/ (default: none,\n"
	"                         URLs are http://<url-listen>/<id>/<port>/)\n"
	"  --url-public HOST:PORT the address path URLs name instead of --url-listen's: a\n"
	"                         cluster's, whose cpuos-api --url-listen passes them on\n"
	"  --jail on|off          each QEMU with a uid, a mount namespace and a cgroup of its\n"
	"                         own, no capabilities; cpuosd then gives up root to a helper\n"
	"                         (default on when run as root)\n"
	"  --jail-ids FIRST:COUNT ids the jails take: FIRST is the group they share and the\n"
	"                         uid cpuosd runs as, each QEMU one of the others as uid and\n"
	"                         gid (default: a block of 65536 of its own per state\n"
	"                         directory, from 1900000000:65536 up)\n"
	"  --cgroups on|off       each QEMU in a cgroup limiting its memory, processes and\n"
	"                         CPU time, on cgroup v1 or v2 (default on with --jail)\n"
	"  --database URL         keep the state in PostgreSQL: postgresql://USER@HOST[:PORT]/DB\n"
	"                         (libpq's URL or keywords; the password from PGPASSFILE or\n"
	"                         ~/.pgpass, or PGPASSWORD, never on the command line)\n"
	"                         (default: SQLite, <state-dir>/cpuos.db)\n"
	"  --copy-state-to URL    copy the state from <state-dir>/cpuos.db into this empty\n"
	"                         PostgreSQL database and exit (stop the daemon first; start\n"
	"                         it again with --database URL); with --node NAME, its\n"
	"                         sandboxes become that node's\n"
	"  --node NAME            one of several daemons sharing --database, each named: it\n"
	"                         owns what it runs, holds a lease it renews, and stops when\n"
	"                         the others declare it down (default: none, a single host)\n"
	"  --node-url URL         where an API reaches this node (default http://<--listen>)\n"
	"  --node-lease N         seconds a node is thought alive without renewing (default 60)\n"
	"  --cluster-secret FILE  a node's TCP listener serves only requests that carry this\n"
	"                         file's secret (cpuos-api, given the same file, sends it):\n"
	"                         one line of 32 or more characters, the file mode 0600\n"
	"  --s3-endpoint URL      an S3-compatible object store (http[s]://host[:port]) that\n"
	"                         keeps a copy of every pause, uploaded in the background,\n"
	"                         so a paused sandbox outlives this host's disk (default:\n"
	"                         none)\n"
	"  --s3-bucket NAME       its bucket (needed with --s3-endpoint)\n"
	"  --s3-region NAME       its region (default us-east-1)\n"
	"  --s3-credentials FILE  a file of two lines, the access key and the secret, that\n"
	"                         only its owner may read (default: the environment's\n"
	"                         CPUOS_S3_ACCESS_KEY and CPUOS_S3_SECRET_KEY)\n"
	"  --log-level LEVEL      error, warn, info or debug (default info)\n"
	"  --help                 this text\n"
	"Logs go to stderr, one JSON object per line unless stderr is a terminal.\n"
	"SIGTERM or SIGINT stops serving; running sandboxes keep running and the next\n"
	"cpuosd with the same --state-dir takes them over.\n";

/* --jail-ids FIRST:COUNT */
static int set_jail_ids(void *arg, const char *prog, const char *v)
{
	struct config *o = arg;
	char first[24], count[24], extra;
	long long f = 0, n = 0;
	if (sscanf(v, "%23[0-9]:%23[0-9]%c", first, count, &extra) != 2 ||
	    (f = strtoll(first, NULL, 10)) < 1 || f > 4000000000LL ||
	    (n = strtoll(count, NULL, 10)) < 2 || n > 1 << 24 || f + n > 4294967294LL) {
		fprintf(stderr, "%s: invalid --jail-ids '%s' (FIRST:COUNT, 2 ids or more "
				"below 4294967294)\n", prog, v);
		return -1;
	}
	o->jail_first = f;
	o->jail_count = n;
	o->jail_ids_given = 1;
	return 0;
}

/* --net-default: the two plain modes may be named; anything else is JSON,
 * checked when the daemon starts. */
static int set_net_default(void *arg, const char *prog, const char *v)
{
	struct config *o = arg;
	if (!strcmp(v, "allow-all") || !strcmp(v, "deny-all")) {
		snprintf(o->net_default, sizeof(o->net_default), "{\"mode\":\"%s\"}", v);
	} else if (strlen(v) >= sizeof(o->net_default)) {
		fprintf(stderr, "%s: --net-default is too long\n", prog);
		return -1;
	} else {
		snprintf(o->net_default, sizeof(o->net_default), "%s", v);
	}
	return 0;
}

#define PRICE "a price in USD, 0 to 1e9"

static const struct opt table[] = {
	OPT_TEXT_OF("state-dir", struct config, state_dir),
	OPT_TEXT_OF("socket", struct config, socket),
	OPT_TEXT_OF("listen", struct config, listen),
	OPT_TEXT_OF("guest-dir", struct config, guest_dir),
	OPT_TEXT_OF("cache-dir", struct config, cache_dir),
	OPT_TEXT_OF("qemu", struct config, qemu),
	OPT_TEXT_OF("accel", struct config, accel),
	OPT_INT_OF("max-sandboxes", struct config, max_sandboxes, 1, 0),
	OPT_INT_OF("max-json-bytes", struct config, max_json, 1024, 0),
	OPT_INT_OF("max-file-bytes", struct config, max_file, 1, 0),
	OPT_INT_OF("max-output-bytes", struct config, max_output, 1024, 0),
	OPT_INT_OF("max-conns-per-ip", struct config, max_conns_per_ip, 1, 0),
	OPT_INT_OF("conn-timeout", struct config, conn_timeout_s, 1, 0),
	OPT_INT_OF("answer-timeout", struct config, answer_timeout_s, 1, 0),
	OPT_REAL_OF("price-per-hour", struct config, price_per_hour, 0, 1e9, PRICE),
	OPT_INT_OF("price-vcpus", struct config, price_vcpus, 1, 1024),
	OPT_INT_OF("price-memory-gib", struct config, price_memory_gib, 1, 1 << 20),
	OPT_REAL_OF("price-storage-gib-month", struct config, price_storage_gib_month, 0, 1e9,
		    PRICE),
	OPT_INT_OF("paused-retention", struct config, paused_retention_s, 1, 0),
	OPT_ON_OFF_OF("template-snapshots", struct config, template_snapshots),
	OPT_INT_OF("pool-python", struct config, pool_python, 0, 64),
	OPT_INT_OF("pool-other", struct config, pool_other, 0, 64),
	OPT_INT_OF("pool-max-mb", struct config, pool_max_mb, 0, 0),
	OPT_INT_OF("image-max-mb", struct config, image_max_mb, 1, 1 << 20),
	OPT_INT_OF("template-quota-mb", struct config, template_quota_mb, 0, 0),
	OPT_TEXT_OF("insecure-registry", struct config, insecure_registries),
	OPT_TEXT_OF("builder", struct config, builder),
	OPT_ON_OFF_OF("net", struct config, net),
	OPT_TEXT_OF("net-range", struct config, net_range),
	OPT_FN_OF("net-default", set_net_default),
	OPT_TEXT_OF("dns-upstream", struct config, dns_upstream),
	OPT_TEXT_OF("egress-trust", struct config, egress_trust),
	OPT_TEXT_OF("egress-ca", struct config, egress_ca),
	OPT_TEXT_OF("url-listen", struct config, url_listen),
	OPT_TEXT_OF("url-domain", struct config, url_domain),
	OPT_TEXT_OF("url-public", struct config, url_public),
	OPT_INT_OF("account-max-vcpus", struct config, account_vcpus, 0, 1 << 20),
	OPT_INT_OF("account-max-memory-mb", struct config, account_memory_mb, 0, 0),
	OPT_REAL_OF("memory-overcommit", struct config, overcommit, 0, 100, NULL),
	OPT_ON_OFF_OF("jail", struct config, jail),
	OPT_FN_OF("jail-ids", set_jail_ids),
	OPT_ON_OFF_OF("cgroups", struct config, cgroups),
	OPT_TEXT_OF("database", struct config, database),
	OPT_TEXT_OF("copy-state-to", struct config, copy_state_to),
	OPT_TEXT_OF("node", struct config, node),
	OPT_TEXT_OF("node-url", struct config, node_url),
	OPT_TEXT_OF("cluster-secret", struct config, cluster_secret),
	OPT_INT_OF("node-lease", struct config, node_lease_s, 3, 3600),
	OPT_TEXT_OF("s3-endpoint", struct config, s3_endpoint),
	OPT_TEXT_OF("s3-bucket", struct config, s3_bucket),
	OPT_TEXT_OF("s3-region", struct config, s3_region),
	OPT_TEXT_OF("s3-credentials", struct config, s3_credentials),
	OPT_TEXT_OF("log-level", struct config, log_level),
	{ 0 },
};

static const struct opts_spec spec = { .prog = "cpuosd", .usage = usage, .opts = table };

static void defaults(struct config *o)
{
	memset(o, 0, sizeof(*o));
	snprintf(o->state_dir, sizeof(o->state_dir), "/var/lib/cpuos");
	snprintf(o->socket, sizeof(o->socket), "/run/cpuos/cpuosd.sock");
	snprintf(o->listen, sizeof(o->listen), "127.0.0.1:7070");
	snprintf(o->cache_dir, sizeof(o->cache_dir), "/var/cache/cpuos");
	snprintf(o->accel, sizeof(o->accel), "auto");
	snprintf(o->log_level, sizeof(o->log_level), "info");
	snprintf(o->s3_region, sizeof(o->s3_region), "us-east-1");
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		const char *dir = dirname(exe);
		snprintf(o->guest_dir, sizeof(o->guest_dir), "%s/../guest", dir);
		snprintf(o->builder, sizeof(o->builder), "%s/cpuos", dir);
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
	o->node_lease_s = 60;
	o->template_snapshots = 1;
	o->pool_python = 2;
	o->pool_other = 0;
	o->pool_max_mb = 4096;
	o->image_max_mb = 4096;
	o->template_quota_mb = 20480;
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
	return opts_parse(&spec, o, argc, argv, NULL);
}
