/*
 * config: cpuosd's options, from a config file ('name = value' lines, names
 * as the long options) and then the command line, which wins.
 */
#ifndef CPUOS_CONFIG_H
#define CPUOS_CONFIG_H

#include <limits.h>

struct config {
	char state_dir[PATH_MAX], socket[PATH_MAX], listen[128], guest_dir[PATH_MAX];
	/* where the store is: "" for <state-dir>/cpuos.db (SQLite), or a
	 * PostgreSQL URL or conninfo (lib/sql.h) */
	char database[1024];
	/* copy the state (SQLite) into this PostgreSQL database and exit */
	char copy_state_to[1024];
	/* one of several daemons sharing --database: its name ("": a single
	 * host), where the API reaches it, and its lease in seconds */
	char node[64], node_url[256];
	char cluster_secret[PATH_MAX]; /* a file: what cpuos-api shows this node */
	long long node_lease_s;
	char cache_dir[PATH_MAX], qemu[PATH_MAX], accel[16], log_level[16];
	long long max_sandboxes, max_json, max_file, max_output;
	/* what an account's running sandboxes may hold in all (0: no
	 * limit), and how far guest memory may overcommit the host's */
	long long account_vcpus, account_memory_mb;
	double overcommit;
	long long max_conns_per_ip, conn_timeout_s, answer_timeout_s;
	/* usage pricing (GET /v1/usage): per running hour of a reference
	 * size, and per GiB-month of paused storage */
	double price_per_hour, price_storage_gib_month;
	long long price_vcpus, price_memory_gib;
	/* snapshots: retention of paused sandboxes, template snapshots and
	 * the warm pools made from them */
	long long paused_retention_s, pool_python, pool_other, pool_max_mb;
	int template_snapshots;
	/* networks: on or off, the range of the namespaces' outside
	 * addresses, the egress policy of a sandbox that names none */
	int net;
	char net_range[32], net_default[4000], dns_upstream[64];
	char egress_trust[512]; /* "": the host's roots */
	/* the egress CA and the secrets' seal key ("": <cache-dir>/egress-ca),
	 * one copy on every node of a cluster */
	char egress_ca[PATH_MAX];
	/* port URLs: where they are served ("none": nowhere), the wildcard
	 * domain they are under ("": path URLs) */
	char url_listen[128], url_domain[256], url_public[256];
	/* QEMU's jail: on or off (default: on when root), its ids
	 * (FIRST:COUNT) and whether it gets cgroups */
	int jail, cgroups;
	long long jail_first, jail_count;
	int jail_ids_given; /* --jail-ids: else each state directory gets a
			     * block of its own (jail_block) */
	/* an object store that keeps every pause ("" endpoint: none), and
	 * the file its access key and secret are read from */
	char s3_endpoint[256], s3_bucket[64], s3_region[64], s3_credentials[PATH_MAX];
	/* templates from images (POST /v1/templates): the largest image,
	 * unpacked; what an account's templates may hold; the registries
	 * that may speak plain HTTP (host[:port],...) */
	long long image_max_mb, template_quota_mb;
	char insecure_registries[1024];
	char builder[PATH_MAX]; /* the CLI that runs API builds; "none" */
};

/* Fills c from the defaults, then every --config file, then the flags.
 * 0 to run; 1 after printing --help (exit 0); -1 after saying what is wrong
 * on stderr (exit 2). */
int config_parse(struct config *c, int argc, char **argv);

#endif
