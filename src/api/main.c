/*
 * cpuos-api: see capi.h. Reads its options, opens its connections to
 * PostgreSQL (and the schema there, migrating it as any cpuosd would),
 * listens, and serves until SIGTERM or SIGINT.
 */
#include "api/capi.h"
#include "api/relay.h"
#include "api/routes.h"
#include "common/fs.h"
#include "common/log.h"
#include "lib/opts.h"
#include "lib/sql.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

struct options {
	char listen[128], database[1024], secret_file[4096], log_level[16];
	char url_listen[128], url_domain[256];
	long long db_conns, max_sandboxes, account_vcpus, account_memory_mb, sample, create_tries;
	long long node_max_starting;
};

static const char usage[] =
	"usage: cpuos-api --database URL --cluster-secret FILE [options]\n"
	"A stateless API replica in front of cpuosd nodes (cpuosd --node) sharing one\n"
	"PostgreSQL: places creates on the nodes and passes every other request to the\n"
	"node that owns its sandbox, streaming. Run any number behind HAProxy.\n"
	"  --listen HOST:PORT     where clients reach it (default 127.0.0.1:7090)\n"
	"  --database URL         the nodes' PostgreSQL (postgresql://USER@HOST[:PORT]/DB;\n"
	"                         the password from PGPASSFILE, ~/.pgpass or PGPASSWORD)\n"
	"  --cluster-secret FILE  the secret the nodes' listeners ask for (cpuosd\n"
	"                         --cluster-secret): one line of 32 or more characters,\n"
	"                         the file mode 0600\n"
	"  --url-listen HOST:PORT port URLs: each request goes to the port URL proxy of its\n"
	"                         sandbox's node (default: none; give the nodes\n"
	"                         --url-public with this address, or --url-domain)\n"
	"  --url-domain NAME[:PORT]  the nodes' --url-domain, when their URLs are\n"
	"                         http://<port>-<id>.NAME/ (pointed at --url-listen)\n"
	"  --db-conns N           connections to PostgreSQL (default 4)\n"
	"  --max-sandboxes N      sandboxes an account may run at once across the cluster\n"
	"                         (default 20)\n"
	"  --account-max-vcpus N  vCPUs an account's running sandboxes may have in all\n"
	"                         (default 0: no limit)\n"
	"  --account-max-memory-mb N  the same for their memory (default 0: no limit)\n"
	"  --placement-sample K   nodes compared for each create, sampled at random; the\n"
	"                         least loaded wins (default 2)\n"
	"  --create-tries N       nodes asked before a create fails (default 3)\n"
	"  --node-max-starting N  creates under way on one node at once, from all replicas;\n"
	"                         one more waits for a node (default 8; 0: no limit)\n"
	"  --log-level LEVEL      error, warn, info or debug (default info)\n"
	"  --config FILE          options from FILE, one 'name = value' a line\n";

static const struct opt opt_table[] = {
	OPT_TEXT_OF("listen", struct options, listen),
	OPT_TEXT_OF("database", struct options, database),
	OPT_TEXT_OF("cluster-secret", struct options, secret_file),
	OPT_TEXT_OF("log-level", struct options, log_level),
	OPT_TEXT_OF("url-listen", struct options, url_listen),
	OPT_TEXT_OF("url-domain", struct options, url_domain),
	OPT_INT_OF("db-conns", struct options, db_conns, 1, CAPI_DB_CONNS_MAX),
	OPT_INT_OF("max-sandboxes", struct options, max_sandboxes, 1, 1 << 20),
	OPT_INT_OF("account-max-vcpus", struct options, account_vcpus, 0, 1 << 20),
	OPT_INT_OF("account-max-memory-mb", struct options, account_memory_mb, 0, 1LL << 40),
	OPT_INT_OF("placement-sample", struct options, sample, 1, 64),
	OPT_INT_OF("create-tries", struct options, create_tries, 1, 8),
	OPT_INT_OF("node-max-starting", struct options, node_max_starting, 0, 1 << 20),
	{ 0 },
};

struct store *capi_db(struct capi *a)
{
	return a->db[atomic_fetch_add(&a->next_db, 1) % a->ndb];
}

long long capi_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
	struct options o = { .db_conns = 4, .max_sandboxes = 20, .sample = 2, .create_tries = 3,
			     .node_max_starting = 8 };
	snprintf(o.listen, sizeof(o.listen), "127.0.0.1:7090");
	snprintf(o.log_level, sizeof(o.log_level), "info");
	const struct opts_spec spec = { "cpuos-api", usage, opt_table, 0 };
	int p = opts_parse(&spec, &o, argc, argv, NULL);
	if (p)
		return p > 0 ? 0 : 2;
	enum log_level level;
	if (log_level_parse(o.log_level, &level) < 0) {
		fprintf(stderr, "cpuos-api: invalid --log-level '%s'\n", o.log_level);
		return 2;
	}
	if (!o.database[0] || !sql_is_pg(o.database)) {
		fprintf(stderr, "cpuos-api: --database needs a PostgreSQL URL "
				"(postgresql://USER@HOST/DB)\n");
		return 2;
	}
	static struct capi a;
	char err[4096 + 256];
	if (!o.secret_file[0]) {
		fprintf(stderr, "cpuos-api: --cluster-secret FILE is needed (the nodes' own)\n");
		return 2;
	}
	if (fs_read_secret(o.secret_file, a.secret, sizeof(a.secret), err, sizeof(err)) < 0) {
		fprintf(stderr, "cpuos-api: --cluster-secret: %s\n", err);
		return 2;
	}
	a.quota = (struct store_quota){ .max_sandboxes = (unsigned)o.max_sandboxes,
					.vcpus = (unsigned)o.account_vcpus,
					.memory_mb = (unsigned long long)o.account_memory_mb };
	a.sample = (unsigned)o.sample;
	a.create_tries = (unsigned)o.create_tries;
	a.hold_ms = 15 * 60 * 1000; /* longer than any create */
	a.max_starting = (unsigned)o.node_max_starting;
	a.busy_wait_ms = 30 * 1000;
	snprintf(a.url_domain, sizeof(a.url_domain), "%.*s", (int)strcspn(o.url_domain, ":"),
		 o.url_domain);
	for (char *s = a.url_domain; *s; s++)
		*s = (char)tolower((unsigned char)*s);
	log_set_level(level);
	log_set_tag("cpuos-api");
	signal(SIGPIPE, SIG_IGN);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	int sfd = signalfd(-1, &set, SFD_CLOEXEC);
	int rc = 1;
	struct relay *relay = NULL, *ports = NULL;
	for (a.ndb = 0; a.ndb < (unsigned)o.db_conns; a.ndb++)
		if (store_open(o.database, &a.db[a.ndb], err, sizeof(err)) < 0) {
			log_error("%s", err);
			goto out;
		}
	if (routes_open(&a, o.database, &a.routes, err, sizeof(err)) < 0 ||
	    relay_open(&a, o.listen, 0, &relay, err, sizeof(err)) < 0 ||
	    (o.url_listen[0] && relay_open(&a, o.url_listen, 1, &ports, err, sizeof(err)) < 0)) {
		log_error("%s", err);
		goto out;
	}
	log_info("serving on %s (%u database connections, K = %u)", o.listen, a.ndb, a.sample);
	struct signalfd_siginfo si;
	while (read(sfd, &si, sizeof(si)) < 0 && errno == EINTR)
		;
	log_info("stopping");
	rc = 0;
out:
	if ((relay_close(ports) | relay_close(relay)) < 0)
		_exit(rc); /* threads still use the stores: leave them be */
	routes_close(a.routes);
	for (unsigned i = 0; i < a.ndb; i++)
		store_close(a.db[i]);
	explicit_bzero(a.secret, sizeof(a.secret));
	return rc;
}
