/*
 * cpuosd: the sandbox service. Reads its configuration (file, then flags),
 * opens the store, re-attaches the sandboxes a previous run left running,
 * serves the API until SIGTERM or SIGINT, then stops serving and leaves
 * the VMs running for the next start.
 */
#include "common/fs.h"
#include "common/log.h"
#include "common/tcp.h"
#include "daemon/api/api.h"
#include "daemon/config.h"
#include "daemon/http/http.h"
#include "daemon/net/net.h"
#include "daemon/net/netd.h"
#include "daemon/net/policy.h"
#include "daemon/ports/ports.h"
#include "daemon/sandbox/sbx.h"
#include "daemon/store/store.h"
#include "daemon/sysfilter.h"
#include "daemon/unroot.h"
#include "daemon/wipe.h"
#include "jail/jail.h"
#include "lib/s3.h"
#include "lib/sql.h"
#include "priv/priv.h"
#include "runner/qemu_build.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Port URLs reach the guests through the sandboxes. */
static void port_hangup(void *arg, const char *id)
{
	sbx_port_hangup(arg, id);
}

static int port_dial(void *arg, const char *id, const char *token, unsigned port, int *fd,
		     char *err, size_t errlen)
{
	return sbx_port_dial(arg, id, token, port, fd, err, errlen);
}

/* --egress-trust's certificates, read while the file may be root's
 * alone: a malloc'd PEM text, or NULL with errno. */
/* The URL a builder on this host reaches listen (HOST:PORT) at: an
 * address for every interface is reached on loopback. */
static void builder_url_of(const char *listen, char *out, size_t n)
{
	const char *colon = strrchr(listen, ':');
	size_t hl = colon ? (size_t)(colon - listen) : 0;
	if (!hl || (hl == 7 && !strncmp(listen, "0.0.0.0", 7)) || (hl == 1 && listen[0] == '*'))
		snprintf(out, n, "http://127.0.0.1%s", colon ? colon : ":7070");
	else if (hl == 4 && !strncmp(listen, "[::]", 4))
		snprintf(out, n, "http://[::1]%s", colon);
	else
		snprintf(out, n, "http://%s", listen);
}

static char *read_trust(const char *path)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	enum { MAX = 4 << 20 }; /* a bundle of every public root is 200 KiB */
	char *text = malloc(MAX + 1);
	size_t n = text ? fread(text, 1, MAX + 1, f) : 0;
	int bad = !text || ferror(f) || n > MAX;
	fclose(f);
	if (bad) {
		free(text);
		errno = text ? EFBIG : ENOMEM;
		return NULL;
	}
	text[n] = '\0';
	return text;
}

/* The object store of --s3-*, checked (lib/s3.h): 0 without one (c
 * untouched), 1 with c filled, -1 after saying what is wrong. The key and
 * secret come from --s3-credentials (two lines; a file only its owner
 * reads) or from the environment, which then forgets them. */
static int read_s3(const struct config *o, struct s3_conf *c)
{
	if (!o->s3_endpoint[0])
		return 0;
	memset(c, 0, sizeof(*c));
	snprintf(c->endpoint, sizeof(c->endpoint), "%s", o->s3_endpoint);
	snprintf(c->bucket, sizeof(c->bucket), "%s", o->s3_bucket);
	snprintf(c->region, sizeof(c->region), "%s", o->s3_region);
	if (o->s3_credentials[0]) {
		int fd = open(o->s3_credentials, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		struct stat st;
		char text[300];
		ssize_t n = -1;
		if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && !(st.st_mode & 077))
			n = read(fd, text, sizeof(text) - 1);
		else if (fd >= 0)
			errno = EPERM;
		if (fd >= 0)
			close(fd);
		char *nl = n > 0 ? (text[n] = '\0', strchr(text, '\n')) : NULL;
		if (!nl) {
			log_error("--s3-credentials '%s': %s", o->s3_credentials,
				  n < 0 ? (errno == EPERM ? "not a regular file only its owner may read"
							  : strerror(errno))
					: "not two lines (access key, secret)");
			explicit_bzero(text, sizeof(text));
			return -1;
		}
		*nl = '\0';
		text[strcspn(text, "\r")] = '\0'; /* CRLF lines too */
		nl[1 + strcspn(nl + 1, "\r\n")] = '\0';
		int fits = strlen(text) < sizeof(c->access_key) && strlen(nl + 1) < sizeof(c->secret_key);
		if (fits) {
			memcpy(c->access_key, text, strlen(text) + 1);
			memcpy(c->secret_key, nl + 1, strlen(nl + 1) + 1);
		}
		explicit_bzero(text, sizeof(text));
		if (!fits) {
			log_error("--s3-credentials '%s': a line is too long", o->s3_credentials);
			return -1;
		}
	} else {
		const char *a = getenv("CPUOS_S3_ACCESS_KEY"), *k = getenv("CPUOS_S3_SECRET_KEY");
		if ((a && strlen(a) >= sizeof(c->access_key)) ||
		    (k && strlen(k) >= sizeof(c->secret_key))) {
			log_error("CPUOS_S3_ACCESS_KEY or CPUOS_S3_SECRET_KEY is too long");
			return -1;
		}
		memcpy(c->access_key, a ? a : "", a ? strlen(a) + 1 : 1);
		memcpy(c->secret_key, k ? k : "", k ? strlen(k) + 1 : 1);
		unsetenv("CPUOS_S3_SECRET_KEY");
	}
	struct s3 *s3;
	char err[256];
	if (s3_open(&s3, c, err, sizeof(err)) < 0) {
		log_error("%s (--s3-endpoint, --s3-bucket, --s3-region, --s3-credentials)", err);
		return -1;
	}
	/* The bucket made if it is not there yet, which also says whether
	 * the store answers and knows us: a warning only, since a store away
	 * now may be back by the first pause. */
	if (s3_bucket_create(s3, err, sizeof(err)) < 0)
		log_warn("%s", err);
	s3_close(s3);
	return 1;
}

/* Where each state directory's block of jail ids is recorded, and how
 * many 65536-id blocks there are (up to uid 1967108863 by default). */
#define JAIL_BLOCKS "/run/cpuos-jail-blocks"
#define JAIL_BLOCKS_MAX 1024u

/* What scripts/deps.sh saved of the QEMU an upgrade of it replaced
 * (<cache>/qemu-outgoing/<version>/usr/bin/...), kept as a build: the
 * pauses a cpuos before kept builds made resume on it, found by version. */
static void keep_outgoing(const char *cache_dir, const char *builds)
{
	char dir[PATH_MAX + 32], bin[PATH_MAX + 400], err[512];
	snprintf(dir, sizeof(dir), "%s/qemu-outgoing", cache_dir);
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		struct qemu_build b;
		if (e->d_name[0] == '.')
			continue;
		snprintf(bin, sizeof(bin), "%s/%.200s/usr/bin/qemu-system-x86_64", dir, e->d_name);
		if (qemu_build_keep(builds, bin, &b, err, sizeof(err)) < 0)
			log_warn("QEMU replaced by an upgrade not kept: %s", err);
		else
			log_info("QEMU %s, replaced by an upgrade: build %s", b.version, b.id);
	}
	closedir(d);
}

/* The privileged helper (priv.h), started while this process has no
 * thread yet: this binary again, holding what networks and QEMU's jail
 * need root for. */
static int open_priv(const struct config *o, int netd_sock, struct priv **priv)
{
	if (!o->net && !o->jail)
		return 0;
	if (geteuid() != 0) {
		log_error("%s needs root (or run with %s)", o->jail ? "--jail on" : "--net on",
			  o->jail ? "--jail off" : "--net off");
		return -EPERM;
	}
	char root[PATH_MAX + 8], tag[8], err[512];
	snprintf(root, sizeof(root), "%s/jail", o->state_dir);
	net_tag(o->state_dir, tag);
	struct priv_config pc = {
		.net_range = o->net ? o->net_range : NULL, .net_tag = tag,
		.jail = o->jail, .cgroups = o->cgroups,
		.jail_first = (unsigned)o->jail_first, .jail_count = (unsigned)o->jail_count,
		.jail_root = root, .jail_locks = "/run/cpuos-jail-ids",
		.state_dir = o->state_dir, .cache_dir = o->cache_dir, .guest_dir = o->guest_dir,
		.qemu = o->qemu[0] ? o->qemu : NULL, .netd_sock = netd_sock,
	};
	if (priv_start(&pc, priv, err, sizeof(err)) < 0) {
		log_error("%s (or run with %s)", err,
			  strstr(err, "cgroup") ? "--cgroups off" : o->jail ? "--jail off" : "--net off");
		return -EIO;
	}
	log_info("privileged helper (pid %d): %s", (int)priv_pid(*priv), priv_describe(*priv));
	return 0;
}

/* cpuos-netd (netd.h), started while root and after the helper, whose
 * second socket it gets: the resolver, the proxy, the CA and the secrets
 * in a process of their own. It becomes the last id of the daemon's block
 * (kept from the jail's), or stays root with no jail. */
static int open_netd(const struct config *o, const char *trust, int priv_sock, struct netd **out)
{
	char err[512], ca_dir[sizeof(o->cache_dir) + 16];
	/* The CA is the cache's by default, as the template snapshots that
	 * trust it are: daemons that share a cache share both. Nodes of a
	 * cluster, whose snapshots move between them, are given one. */
	if (o->egress_ca[0])
		snprintf(ca_dir, sizeof(ca_dir), "%s", o->egress_ca);
	else
		snprintf(ca_dir, sizeof(ca_dir), "%s/egress-ca", o->cache_dir);
	int nslots = net_slots(o->net_range, err, sizeof(err));
	struct netd_config nc = {
		.nslots = nslots, .ca_dir = ca_dir,
		.dns_upstream = o->dns_upstream[0] ? o->dns_upstream : NULL, .trust_pem = trust,
		.uid = o->jail && geteuid() == 0 ? (uid_t)(o->jail_first + o->jail_count) : 0,
		.priv_sock = priv_sock,
	};
	if (nslots < 0 || netd_start(&nc, out, err, sizeof(err)) < 0) {
		log_error("networks: %s (or run with --net off)", err);
		return -EIO;
	}
	log_info("cpuos-netd (pid %d) as uid %u: the guests' resolver and egress proxy",
		 (int)netd_pid(*out), (unsigned)(nc.uid ? nc.uid : geteuid()));
	return 0;
}

/* --copy-state-to: the state directory's SQLite store into an empty
 * PostgreSQL database. The exit status. */
static int copy_state(const struct config *o)
{
	char db[PATH_MAX + 16], err[512];
	snprintf(db, sizeof(db), "%s/cpuos.db", o->state_dir);
	if (access(db, R_OK) < 0) {
		fprintf(stderr, "cpuosd: no state to copy: %s: %s\n", db, strerror(errno));
		return 1;
	}
	struct store *from = NULL, *to = NULL;
	struct store_copied n;
	int r = store_open(db, &from, err, sizeof(err));
	if (r == 0)
		r = store_open(o->copy_state_to, &to, err, sizeof(err));
	if (r == 0)
		r = store_copy(from, to, o->node, &n, err, sizeof(err));
	store_close(to);
	store_close(from);
	/* Run as root, SQLite may leave its -wal and -shm as root's: the
	 * daemon, which is not, must still open them. */
	struct stat st;
	if (stat(db, &st) == 0) {
		const char *side[] = { "-wal", "-shm" };
		for (size_t i = 0; i < 2; i++) {
			char p[PATH_MAX + 24];
			snprintf(p, sizeof(p), "%s%s", db, side[i]);
			if (lchown(p, st.st_uid, st.st_gid) < 0 && errno != ENOENT)
				fprintf(stderr, "cpuosd: cannot give %s back: %s\n", p,
					strerror(errno));
		}
	}
	if (r < 0) {
		fprintf(stderr, "cpuosd: %s\n", err);
		return 1;
	}
	/* Set aside, so no daemon takes it for the state any more. */
	char aside[PATH_MAX + 32];
	snprintf(aside, sizeof(aside), "%s.copied", db);
	if (rename(db, aside) < 0) {
		fprintf(stderr, "cpuosd: copied, but cannot move %s aside: %s\n", db,
			strerror(errno));
		return 1;
	}
	printf("cpuosd: copied %lld accounts, %lld keys, %lld sandboxes, %lld checkpoints, "
	       "%lld usage events and %lld secrets from %s (now %s)\n",
	       n.accounts, n.keys, n.sandboxes, n.checkpoints, n.usage_events, n.secrets, db,
	       aside);
	return 0;
}

static long long mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* --node: this daemon joins the others on the database, owning the
 * sandboxes it runs from now on (and those it ran before, at a new
 * epoch): 0, or -1 after logging why. */
static int join_cluster(const struct config *o, struct store *store)
{
	struct store_node n = { .lease_until_ms = now_ms() + o->node_lease_s * 1000,
				.joined_at = (long long)time(NULL) };
	snprintf(n.name, sizeof(n.name), "%s", o->node);
	if (o->node_url[0])
		snprintf(n.url, sizeof(n.url), "%s", o->node_url);
	else
		snprintf(n.url, sizeof(n.url), "http://%.120s", o->listen);
	/* where a replica passes port URLs on: --url-listen, named by
	 * node-url's host when it listens on every address */
	if (strcmp(o->url_listen, "none")) {
		const char *port = strrchr(o->url_listen, ':');
		if (!strncmp(o->url_listen, "0.0.0.0:", 8) || !strncmp(o->url_listen, "[::]:", 5)) {
			const char *h = !strncmp(n.url, "http://", 7) ? n.url + 7 : n.url;
			snprintf(n.ports_url, sizeof(n.ports_url), "http://%.*s%s",
				 (int)strcspn(h, "/:"), h, port ? port : "");
		} else {
			snprintf(n.ports_url, sizeof(n.ports_url), "http://%.200s", o->url_listen);
		}
	}
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	struct sysinfo si;
	n.vcpus = cpus > 0 ? (unsigned)cpus : 0;
	/* what placement may give it: the guest memory its starts allow */
	if (sysinfo(&si) == 0)
		n.memory_mb = (unsigned long long)si.totalram * si.mem_unit >> 20;
	if (o->overcommit > 0)
		n.memory_mb = (unsigned long long)(o->overcommit * (double)n.memory_mb);
	else
		n.memory_mb = 0; /* no limit */
	long long epoch;
	int r = store_node_join(store, &n, &epoch);
	if (r < 0) {
		log_error("--node '%s': cannot join: %s", o->node,
			  r == -EINVAL ? "a name is 1..63 of A-Z a-z 0-9 . _ -" : strerror(-r));
		return -1;
	}
	log_info("node %s joined at epoch %lld (%s, lease %lld s)", n.name, epoch, n.url,
		 o->node_lease_s);
	return 0;
}

/* The lease's thread, from the join on (a start may take longer than a
 * lease): a round three times a lease; when the node was declared down,
 * or could not renew for a whole lease, the main thread is told to stop
 * (SIGTERM, read by its signalfd). */
struct lease {
	const struct config *o;
	struct store *store;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop, fenced;
	pthread_t thread;
	/* monotonic ms: the last renewal, and since when every one went */
	long long renewed, renewing_since;
	/* What the node offers placement comes from here, once it serves
	 * (set under mu, and only before lease_stop, which comes before the
	 * manager's end). */
	struct sbx_mgr *mgr;
};

static int node_round(struct lease *l);

static void *lease_main(void *arg)
{
	struct lease *l = arg;
	pthread_mutex_lock(&l->mu);
	while (!l->stop) {
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		long long ms = l->o->node_lease_s * 1000 / 3;
		until.tv_sec += ms / 1000;
		until.tv_nsec += (ms % 1000) * 1000000;
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		while (!l->stop && pthread_cond_timedwait(&l->cv, &l->mu, &until) != ETIMEDOUT)
			;
		if (l->stop)
			break;
		pthread_mutex_unlock(&l->mu);
		int r = node_round(l);
		pthread_mutex_lock(&l->mu);
		if (r < 0) {
			l->fenced = 1;
			kill(getpid(), SIGTERM);
			break;
		}
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

static int lease_start(struct lease *l, const struct config *o, struct store *store)
{
	long long now = mono_ms();
	*l = (struct lease){ .o = o, .store = store, .renewed = now, .renewing_since = now };
	pthread_mutex_init(&l->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&l->cv, &ca);
	pthread_condattr_destroy(&ca);
	int e = pthread_create(&l->thread, NULL, lease_main, l);
	if (e)
		log_error("cannot start the lease's thread: %s", strerror(e));
	return e ? -e : 0;
}

/* Stops the lease's thread: 1 if the node was fenced. */
static int lease_stop(struct lease *l)
{
	pthread_mutex_lock(&l->mu);
	l->stop = 1;
	pthread_cond_signal(&l->cv);
	pthread_mutex_unlock(&l->mu);
	pthread_join(l->thread, NULL);
	int fenced = l->fenced;
	pthread_cond_destroy(&l->cv);
	pthread_mutex_destroy(&l->mu);
	return fenced;
}

/* What its sandboxes may still write on its disk: the space free to them
 * in the state directory's file system, where their disks and pauses are
 * (-1: unknown). */
static long long disk_free_mb(const char *dir)
{
	struct statvfs v;
	if (statvfs(dir, &v) < 0)
		return -1;
	return (long long)((unsigned long long)v.f_bavail * v.f_frsize >> 20);
}

/* A node's round: its lease renewed, and the nodes whose leases ran out
 * declared down (any node may; each is declared once). -1 when this node
 * must stop: it was declared down, or it could not renew for a whole lease
 * (cut off from the database: the others will declare it down). */
static int node_round(struct lease *l)
{
	const struct config *o = l->o;
	long long lease_ms = o->node_lease_s * 1000, now = mono_ms();
	int r = store_node_renew(l->store, now_ms() + lease_ms);
	/* a database cut off answers nothing until TCP gives up (lib/sql's
	 * tcp_user_timeout, 30 s): judged by the time after the try */
	now = mono_ms();
	if (r == -ESTALE) {
		log_error("node %s was declared down (its lease ran out) or joined elsewhere: "
			  "stopping; what it ran is lost, and the next start kills it",
			  o->node);
		return -1;
	}
	if (r < 0) {
		l->renewing_since = 0;
		if (now - l->renewed >= lease_ms) {
			log_error("node %s could not renew its lease for %lld s (%s): stopping; "
				  "the next start joins again",
				  o->node, (now - l->renewed) / 1000, strerror(-r));
			return -1;
		}
		log_warn("node %s: cannot renew its lease: %s", o->node, strerror(-r));
		return 0;
	}
	l->renewed = now;
	if (!l->renewing_since)
		l->renewing_since = now;
	pthread_mutex_lock(&l->mu);
	struct sbx_mgr *mgr = l->mgr;
	pthread_mutex_unlock(&l->mu);
	if (mgr) {
		char compat[24], warm[256], held[256];
		sbx_offers(mgr, compat, sizeof(compat), warm, sizeof(warm), held, sizeof(held));
		int e = store_node_offers(l->store, compat, warm, held, disk_free_mb(o->state_dir));
		if (e < 0 && e != -ESTALE) /* fenced: the next renewal says so */
			log_warn("node %s: cannot record what it offers: %s", o->node, strerror(-e));
	}
	/* Others are judged only by a node that has renewed all along for a
	 * lease: after an outage of the database, each has a lease to renew
	 * before anyone is declared down. */
	if (now - l->renewing_since < lease_ms)
		return 0;
	int downed = store_nodes_reap(l->store, now_ms());
	if (downed > 0)
		log_warn("declared %d node%s down: their leases ran out", downed,
			 downed == 1 ? "" : "s");
	return 0;
}

int main(int argc, char **argv)
{
	if (wipe_install() < 0) {
		fprintf(stderr, "cpuosd: SQLite would not take an allocator that wipes\n");
		return 1;
	}
	priv_helper_main(argc, argv);
	netd_main(argc, argv);
	struct config o;
	int pr = config_parse(&o, argc, argv);
	if (pr != 0)
		return pr > 0 ? 0 : 2;
	enum log_level level;
	enum qemu_accel accel;
	if (log_level_parse(o.log_level, &level) < 0) {
		fprintf(stderr, "cpuosd: invalid --log-level '%s'\n", o.log_level);
		return 2;
	}
	if (qemu_accel_parse(o.accel, &accel) < 0) {
		fprintf(stderr, "cpuosd: invalid --accel '%s' (auto, kvm or tcg)\n", o.accel);
		return 2;
	}
	const char *pg = o.copy_state_to[0] ? o.copy_state_to : o.database;
	if (pg[0] && !sql_is_pg(pg)) {
		fprintf(stderr, "cpuosd: --%s '%.60s' is not a PostgreSQL URL "
				"(postgresql://USER@HOST/DB)\n",
			o.copy_state_to[0] ? "copy-state-to" : "database", pg);
		return 2;
	}
	if (o.copy_state_to[0])
		return copy_state(&o);
	if (o.node[0] && !o.database[0]) {
		fprintf(stderr, "cpuosd: --node needs --database: nodes share one PostgreSQL\n");
		return 2;
	}
	/* read while root: the file is root's, mode 0600 */
	static char cluster_secret[256];
	if (o.cluster_secret[0]) {
		char why[PATH_MAX + 128];
		if (!o.node[0]) {
			fprintf(stderr, "cpuosd: --cluster-secret is for a --node\n");
			return 2;
		}
		if (fs_read_secret(o.cluster_secret, cluster_secret, sizeof(cluster_secret), why,
				   sizeof(why)) < 0) {
			fprintf(stderr, "cpuosd: --cluster-secret: %s\n", why);
			return 2;
		}
	}
	if (o.egress_ca[0] && o.egress_ca[0] != '/') {
		fprintf(stderr, "cpuosd: --egress-ca '%s' is not an absolute path\n", o.egress_ca);
		return 2;
	}
	log_set_level(level);
	log_set_tag("cpuosd");
	signal(SIGPIPE, SIG_IGN);
	/* Signals become a descriptor, read by this thread alone. Blocked
	 * before any thread starts, since threads inherit the mask: one that
	 * did not block SIGTERM would take it and end the process uncleanly. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	char db[PATH_MAX + 16], vms[PATH_MAX + 8], err[512];
	snprintf(vms, sizeof(vms), "%s/vms", o.state_dir);
	if (fs_mkdir_p(vms, 0700, (uid_t)-1, (gid_t)-1) < 0) {
		log_error("cannot create state directory '%s': %s", o.state_dir, strerror(errno));
		return 1;
	}
	/* QEMU's jail binds each file at the path QEMU is given: the
	 * directories they are under as real paths, with no ".." (the
	 * default guest directory is "<bin>/../guest") or link on the way. */
	fs_mkdir_p(o.cache_dir, 0755, (uid_t)-1, (gid_t)-1);
	char *dirs[] = { o.state_dir, o.cache_dir, o.guest_dir };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		char real[PATH_MAX];
		if (realpath(dirs[i], real))
			snprintf(dirs[i], PATH_MAX, "%s", real);
	}
	/* Found while /dev/kvm (0660 root:kvm on most hosts) still opens. */
	if (accel == QEMU_ACCEL_AUTO)
		accel = qemu_accel_probe();
	char *trust = NULL;
	if (o.net && o.egress_trust[0] && !(trust = read_trust(o.egress_trust))) {
		log_error("--egress-trust '%s': %s", o.egress_trust, strerror(errno));
		return 1;
	}
	static struct s3_conf s3c;
	int have_s3 = read_s3(&o, &s3c);
	if (have_s3 < 0) {
		free(trust);
		return 1;
	}
	/* Each state directory its own ids: two daemons on a host then share
	 * neither a uid nor their QEMUs' group. */
	unsigned first;
	if (o.jail && !o.jail_ids_given && geteuid() == 0) {
		if (jail_block(JAIL_BLOCKS, o.state_dir, (unsigned)o.jail_first,
			       (unsigned)o.jail_count, JAIL_BLOCKS_MAX, &first, err,
			       sizeof(err)) < 0) {
			log_error("%s (or give --jail-ids)", err);
			free(trust);
			return 1;
		}
		/* What it writes in the cache is its first id's: a daemon of
		 * another block keeps its own there (block 0 the cache
		 * itself, as before blocks). */
		unsigned k = (first - (unsigned)o.jail_first) / (unsigned)o.jail_count;
		if (k > 0) {
			char sub[sizeof(o.cache_dir)];
			snprintf(sub, sizeof(sub), "%.*s/block-%u", (int)sizeof(o.cache_dir) - 24,
				 o.cache_dir, k);
			fs_mkdir_p(sub, 0755, (uid_t)-1, (gid_t)-1);
			snprintf(o.cache_dir, sizeof(o.cache_dir), "%s", sub);
		}
		o.jail_first = first;
	}
	/* The QEMU every VM runs on, kept by content (qemu_build.h) while
	 * root, so that the builds are root's, in the cache the helper is
	 * given (its block's): a pause resumes on the build that made it
	 * after the package changed. */
	static char qemu_builds[PATH_MAX + 8];
	static struct qemu_build qbuild;
	snprintf(qemu_builds, sizeof(qemu_builds), "%s/" QEMU_BUILDS_DIR, o.cache_dir);
	if (qemu_build_keep(qemu_builds, o.qemu[0] ? o.qemu : "qemu-system-x86_64", &qbuild, err,
			    sizeof(err)) < 0) {
		log_warn("QEMU not kept, run as it is (its VMs' pauses will not resume after it "
			 "changes): %s", err);
		qbuild.id[0] = '\0';
	} else {
		log_info("QEMU %s: build %s", qbuild.version, qbuild.id);
		keep_outgoing(o.cache_dir, qemu_builds);
	}
	/* The last id of the block is cpuos-netd's, never a QEMU's. */
	if (o.net && o.jail)
		o.jail_count--;
	/* The helper serves netd on a second socket. */
	int hn[2] = { -1, -1 };
	if (o.net && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, hn) < 0) {
		log_error("cannot make cpuos-netd's socket to the helper: %s", strerror(errno));
		free(trust);
		return 1;
	}
	struct priv *priv = NULL;
	struct netd *netd = NULL;
	pr = open_priv(&o, hn[1] > 2 ? hn[1] : 0, &priv);
	if (hn[1] >= 0)
		close(hn[1]);
	if (pr == 0 && o.net && open_netd(&o, trust, hn[0], &netd) < 0) {
		priv_close(priv);
		pr = -1;
	}
	if (hn[0] >= 0)
		close(hn[0]);
	free(trust); /* netd's now */
	trust = NULL;
	if (pr < 0)
		return 1;
	/* Watched to the end: a helper or netd that dies ends the daemon. */
	int priv_pfd = priv ? (int)syscall(SYS_pidfd_open, priv_pid(priv), 0) : -1;
	int netd_pfd = netd ? (int)syscall(SYS_pidfd_open, netd_pid(netd), 0) : -1;
	/* Bound while still root, so that a port below 1024 works, and after
	 * the helper started, which must not hold them. */
	int api_fd = -1, url_fd = -1;
	if ((strcmp(o.listen, "none") && (api_fd = tcp_listen(o.listen, err, sizeof(err))) < 0) ||
	    (strcmp(o.url_listen, "none") &&
	     (url_fd = ports_listen(o.url_listen, err, sizeof(err))) < 0)) {
		log_error("%s", err);
		netd_close(netd);
		priv_close(priv);
		return 1;
	}
	if (priv_jailed(priv) && unroot(&o) < 0) {
		netd_close(netd);
		priv_close(priv);
		return 1;
	}
	/* Without root, and before any thread: the calls it never makes
	 * kill it from now on (with root it runs QEMU itself, which has a
	 * filter of its own, so there is none). */
	if (priv_jailed(priv) && sysfilter_load(err, sizeof(err)) < 0) {
		log_error("%s", err);
		netd_close(netd);
		priv_close(priv);
		return 1;
	}
	snprintf(db, sizeof(db), "%s/cpuos.db", o.state_dir);
	/* A state directory of a single host's: its sandboxes are in that
	 * file, and a daemon on an empty database would orphan them. */
	struct stat dbst;
	if (o.database[0] && stat(db, &dbst) == 0 && dbst.st_size > 0) {
		log_error("%s holds this state directory's state: copy it with --copy-state-to "
			  "URL first (or remove it)", db);
		netd_close(netd);
		priv_close(priv);
		return 1;
	}
	struct store *store;
	if (store_open(o.database[0] ? o.database : db, &store, err, sizeof(err)) < 0) {
		log_error("%s", err);
		netd_close(netd);
		priv_close(priv);
		return 1;
	}
	/* One single host's daemon on a database, or only nodes. */
	int claimed = store_claim(store, o.node[0] != 0);
	if (claimed < 0) {
		log_error("%s", claimed == -EBUSY
				    ? "another cpuosd uses this database: daemons that share one "
				      "are each a --node with a name of its own"
				    : "cannot claim the database");
		store_close(store);
		netd_close(netd);
		priv_close(priv);
		return 1;
	}
	struct lease lease;
	if (o.node[0] && (join_cluster(&o, store) < 0 || lease_start(&lease, &o, store) < 0)) {
		store_close(store);
		netd_close(netd);
		priv_close(priv);
		return 1;
	}
	/* The default policy is checked now, not at the first create. */
	struct net_policy np;
	json_error_t je;
	json_t *nd = json_loads(o.net_default, 0, &je);
	if (!nd || net_policy_parse(nd, &np, err, sizeof(err)) < 0) {
		log_error("--net-default: %s", nd ? err : je.text);
		json_decref(nd);
		if (o.node[0])
			lease_stop(&lease);
		store_close(store);
		netd_close(netd);
		priv_close(priv);
		return 1;
	}
	json_decref(nd);
	net_policy_free(&np);
	struct net *net = NULL;
	if (o.net && net_open(o.net_range, o.state_dir, netd, priv, &net, err, sizeof(err)) < 0) {
		log_error("networks: %s (or run with --net off)", err);
		if (o.node[0])
			lease_stop(&lease);
		store_close(store);
		netd_close(netd);
		priv_close(priv);
		return 1;
	}
	/* Builds run by a client of the TCP listener, not of a gated one. */
	char builder_url[200] = "", builder[PATH_MAX] = "", self_url[200];
	builder_url_of(o.listen, self_url, sizeof(self_url));
	int builds = strcmp(o.builder, "none") && strcmp(o.listen, "none") && !cluster_secret[0] &&
		     realpath(o.builder, builder) && access(builder, X_OK) == 0;
	if (builds)
		builder_url_of(o.listen, builder_url, sizeof(builder_url));
	struct sbx_config sc = {
		.builder = builds ? builder : NULL, .builder_url = builds ? builder_url : NULL,
		.node = o.node,
		.state_dir = o.state_dir, .guest_dir = o.guest_dir, .cache_dir = o.cache_dir,
		.qemu = o.qemu[0] ? o.qemu : NULL, .qemu_build = qbuild.id[0] ? &qbuild : NULL,
		.accel = accel,
		.max_sandboxes = (int)o.max_sandboxes, .max_output = (size_t)o.max_output,
		.account_vcpus = (unsigned)o.account_vcpus,
		.account_memory_mb = (unsigned long long)o.account_memory_mb,
		.overcommit = o.overcommit,
		.paused_retention_s = o.paused_retention_s,
		.template_snapshots = o.template_snapshots,
		.pool_python = (unsigned)o.pool_python, .pool_other = (unsigned)o.pool_other,
		.pool_max_mb = (unsigned long long)o.pool_max_mb,
		.net = net, .net_default = o.net_default, .priv = priv_jailed(priv) ? priv : NULL,
		.importer = priv, .image_max_bytes = (unsigned long long)o.image_max_mb << 20,
		.template_quota_bytes = (unsigned long long)o.template_quota_mb << 20,
		.insecure_registries = o.insecure_registries,
		.blob = have_s3 ? &s3c : NULL,
	};
	struct sbx_mgr *mgr;
	if (sbx_mgr_new(&sc, store, &mgr) < 0) {
		log_error("cannot start the sandbox manager");
		netd_close(netd);
		priv_close(priv);
		net_close(net);
		if (o.node[0])
			lease_stop(&lease);
		store_close(store);
		return 1;
	}
	sbx_mgr_restore(mgr);
	struct ports *ports = NULL;
	struct ports_config pc = {
		.listen = o.url_listen, .fd = url_fd, .domain = o.url_domain[0] ? o.url_domain : NULL,
		.public_host = o.url_public[0] ? o.url_public : NULL,
		.no_ip_limit = cluster_secret[0] != 0,
		.dial = port_dial, .hangup = port_hangup, .arg = mgr,
	};
	if (strcmp(o.url_listen, "none") && ports_open(&pc, &ports, err, sizeof(err)) < 0) {
		log_error("%s (or run with --url-listen none)", err);
		sbx_mgr_free(mgr);
		netd_close(netd);
		priv_close(priv);
		net_close(net);
		if (o.node[0])
			lease_stop(&lease);
		store_close(store);
		return 1;
	}

	struct api_ctx api = {
		.store = store, .sbx = mgr, .guest_dir = o.guest_dir,
		.max_json_bytes = (size_t)o.max_json, .max_file_bytes = (uint64_t)o.max_file,
		.max_output_bytes = (size_t)o.max_output,
		.conn_timeout_s = (unsigned)o.conn_timeout_s,
		/* behind cpuos-api, every connection comes from its replicas */
		.max_conns_per_ip = cluster_secret[0] ? 0 : (unsigned)o.max_conns_per_ip,
		.cluster_secret = cluster_secret[0] ? cluster_secret : NULL,
		.answer_ms = (int)(o.answer_timeout_s > 3600 ? 3600000 : o.answer_timeout_s * 1000),
		.price_usd_per_hour = o.price_per_hour,
		.price_vcpus = (unsigned)o.price_vcpus,
		.price_memory_gib = (unsigned)o.price_memory_gib,
		.price_storage_usd_per_gib_month = o.price_storage_gib_month,
		.ports = ports, .tcp_fd = api_fd,
		/* A gated listener takes only the replicas' calls: no MCP there. */
		.self_url = strcmp(o.listen, "none") && !cluster_secret[0] ? self_url : NULL,
		.self_socket = strcmp(o.socket, "none") ? o.socket : NULL,
	};
	int no_sock = !strcmp(o.socket, "none"), no_tcp = !strcmp(o.listen, "none");
	if (!no_sock) {
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%s", o.socket);
		fs_mkdir_p(dirname(dir), 0700, (uid_t)-1, (gid_t)-1);
	}
	struct http *http;
	if (http_start(&api, no_tcp ? NULL : o.listen, no_sock ? NULL : o.socket, &http, err,
		       sizeof(err)) < 0) {
		log_error("%s", err);
		ports_close(ports);
		sbx_mgr_free(mgr);
		netd_close(netd);
		priv_close(priv);
		net_close(net);
		if (o.node[0])
			lease_stop(&lease);
		store_close(store);
		return 1;
	}
	if (o.node[0]) {
		pthread_mutex_lock(&lease.mu);
		lease.mgr = mgr;
		pthread_mutex_unlock(&lease.mu);
	}
	log_info("serving on %s%s%s (guest %s, accel %s)", no_tcp ? "" : o.listen,
		 !no_tcp && !no_sock ? " and " : "", no_sock ? "" : o.socket, o.guest_dir,
		 qemu_accel_name(accel));
	/* Until a signal, or the helper or cpuos-netd ends: without the one
	 * nothing starts or stops, without the other no guest resolves or
	 * reaches a proxied host, so the daemon ends for its supervisor to
	 * start all three anew (the VMs run on and are taken over). */
	int sfd = signalfd(-1, &set, SFD_CLOEXEC);
	struct pollfd pf[3] = { { .fd = sfd, .events = POLLIN }, { .fd = priv_pfd, .events = POLLIN },
				{ .fd = netd_pfd, .events = POLLIN } };
	while (sfd >= 0 && poll(pf, 3, -1) < 0 && errno == EINTR)
		;
	/* A node's lease is renewed no more: one that was fenced stops for
	 * its supervisor to start it again. */
	int fenced = o.node[0] && lease_stop(&lease);
	struct signalfd_siginfo si = { 0 };
	if (fenced) {
		log_info("shutting down: fenced");
	} else if (sfd < 0 || pf[0].revents) {
		while (sfd >= 0 && read(sfd, &si, sizeof(si)) < 0 && errno == EINTR)
			;
		log_info("signal %u: shutting down; sandboxes keep running", si.ssi_signo);
	} else {
		log_error("%s ended: shutting down; sandboxes keep running",
			  pf[1].revents ? "the privileged helper" : "cpuos-netd");
	}
	/* Let go of the VMs first: requests waiting on them then end, and the
	 * HTTP threads can be joined. */
	ports_stop(ports); /* first: a port request may resume a sandbox */
	sbx_mgr_stop(mgr);
	http_stop(http);
	ports_close(ports); /* after the API, whose answers name port URLs */
	sbx_mgr_free(mgr);
	netd_close(netd);
	priv_close(priv);
	net_close(net);
	store_close(store);
	if (priv_pfd >= 0)
		close(priv_pfd);
	if (netd_pfd >= 0)
		close(netd_pfd);
	return fenced ? 1 : 0;
}
