/*
 * Unit tests for cpuos-api's placement (src/api/place.c) on a real store:
 * nodes joined to a SQLite file as daemons would, saying what they offer,
 * and the creates under way as reservations in it. What a node is asked
 * is the relay's, tested end to end (tests/e2e/test_cluster.py).
 */
#include "api/capi.h"
#include "api/place.h"
#include "daemon/store/store.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NODES 3

static struct capi api;
static struct store *node[NODES];
static char path[64];

struct store *capi_db(struct capi *a)
{
	return a->db[0];
}

/* Leases and reservations are on the wall clock: the real one. */
long long capi_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* node-a .. node-c joined, each of 2 CPUs and 4096 MB, with compat "c1"
 * and 50 GB of disk free, and a replica that compares all three. */
static int setup(void)
{
	snprintf(path, sizeof(path), "/tmp/cpuos-test-place-XXXXXX");
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	close(fd);
	char err[256];
	for (int i = 0; i < NODES; i++) {
		struct store_node n = { .lease_until_ms = capi_now_ms() + 3600 * 1000, .joined_at = 1,
					.vcpus = 2, .memory_mb = 4096 };
		long long epoch;
		snprintf(n.name, sizeof(n.name), "node-%c", 'a' + i);
		snprintf(n.url, sizeof(n.url), "http://%s.test:7070", n.name);
		if (store_open(path, &node[i], err, sizeof(err)) < 0 ||
		    store_node_join(node[i], &n, &epoch) < 0 ||
		    store_node_offers(node[i], "c1", "", "", 50000) < 0)
			return -1;
	}
	if (store_open(path, &api.db[0], err, sizeof(err)) < 0)
		return -1;
	api.ndb = 1;
	api.sample = NODES;
	api.create_tries = 3;
	api.hold_ms = 60 * 1000;
	api.quota = (struct store_quota){ .max_sandboxes = 100 };
	return 0;
}

static void teardown(void)
{
	for (int i = 0; i < NODES; i++)
		store_close(node[i]);
	store_close(api.db[0]);
	char p[80];
	unlink(path);
	snprintf(p, sizeof(p), "%s-wal", path);
	unlink(p);
	snprintf(p, sizeof(p), "%s-shm", path);
	unlink(p);
}

static struct want want(const char *template, unsigned memory_mb, unsigned disk_mb)
{
	struct want w = { .vcpus = 1, .memory_mb = memory_mb, .disk_mb = disk_mb };
	snprintf(w.template, sizeof(w.template), "%s", template);
	return w;
}

/* Places w for alice, skipping none: 0 with the node's name in name. */
static int place_one(const struct want *w, char *name, char *err, size_t errlen)
{
	struct placed p;
	int r = place(&api, "alice", w, NULL, 0, &p, err, errlen);
	if (r == 0) {
		snprintf(name, 64, "%s", p.node);
		store_unreserve(api.db[0], p.rsv);
	}
	return r;
}

/* A node with too little disk, one of other snapshots for a checkpoint's
 * create and one without the memory are never chosen; a node that has not
 * said what disk it has is not refused for it. */
static void test_filters(void)
{
	char name[64], err[512];
	/* node-a: 2 GB free, less than a 2048 MB disk and a 512 MB pause */
	CHECK(store_node_offers(node[0], "c1", "", "", 2000) == 0);
	struct want w = want("base", 512, 2048);
	for (int i = 0; i < 20; i++)
		if (CHECK(place_one(&w, name, err, sizeof(err)) == 0))
			CHECK(strcmp(name, "node-a") != 0);
	/* a smaller disk fits it */
	w = want("base", 512, 1024);
	int a = 0;
	for (int i = 0; i < 40 && !a; i++)
		a += place_one(&w, name, err, sizeof(err)) == 0 && !strcmp(name, "node-a");
	CHECK(a > 0);
	/* a checkpoint made on c2 goes only where c2 restores */
	CHECK(store_node_offers(node[2], "c2", "", "", -1) == 0);
	w = want("", 512, 2048);
	snprintf(w.compat, sizeof(w.compat), "c2");
	for (int i = 0; i < 10; i++)
		if (CHECK(place_one(&w, name, err, sizeof(err)) == 0))
			CHECK(!strcmp(name, "node-c"));
	/* more memory than any node has left */
	w = want("base", 8192, 2048);
	CHECK(place_one(&w, name, err, sizeof(err)) == -ENOSPC);
	CHECK(strstr(err, "no node has room") != NULL);
	t_note("%s", err);
	/* the account's quota is not a node's: 429, not 503 */
	api.quota.max_sandboxes = 1;
	struct placed held;
	w = want("base", 512, 1024);
	CHECK(place(&api, "alice", &w, NULL, 0, &held, err, sizeof(err)) == 0);
	CHECK(place_one(&w, name, err, sizeof(err)) == -EDQUOT);
	store_unreserve(api.db[0], held.rsv);
	api.quota.max_sandboxes = 100;
}

/* Of nodes alike, the one with a free warm VM of the template wins. */
static void test_warm_vm_wins(void)
{
	char name[64], err[512];
	CHECK(store_node_offers(node[1], "c1", "base:1", "base", 50000) == 0);
	struct want w = want("base", 512, 2048);
	for (int i = 0; i < 10; i++)
		if (CHECK(place_one(&w, name, err, sizeof(err)) == 0))
			CHECK(!strcmp(name, "node-b"));
	/* not for another size: the pools hold only the default one */
	w = want("base", 1024, 2048);
	int others = 0;
	for (int i = 0; i < 40 && !others; i++)
		others += place_one(&w, name, err, sizeof(err)) == 0 && strcmp(name, "node-b");
	CHECK(others > 0);
}

struct releaser {
	const char *rsv;
	int released;
};

static void *release_later(void *arg)
{
	struct releaser *r = arg;
	struct timespec ts = { 0, 300 * 1000000 };
	nanosleep(&ts, NULL);
	__atomic_store_n(&r->released, 1, __ATOMIC_SEQ_CST);
	store_unreserve(capi_db(&api), r->rsv);
	return NULL;
}

/* A node starts at most max_starting at once: one more create goes to
 * another node, and when all are that busy, waits for one (a while). */
static void test_creates_under_way(void)
{
	char err[512];
	api.max_starting = 1;
	api.busy_wait_ms = 5000;
	struct want w = want("base", 512, 2048);
	struct placed p[NODES + 1];
	int on[NODES] = { 0 };
	for (int i = 0; i < NODES; i++)
		if (CHECK(place(&api, "alice", &w, NULL, 0, &p[i], err, sizeof(err)) == 0))
			on[p[i].node[5] - 'a']++;
	CHECK(on[0] == 1 && on[1] == 1 && on[2] == 1); /* one each */
	/* all busy: the next waits until one of them is done */
	struct releaser rel = { .rsv = p[1].rsv };
	pthread_t t;
	if (!CHECK(pthread_create(&t, NULL, release_later, &rel) == 0))
		return;
	int r = place(&api, "alice", &w, NULL, 0, &p[NODES], err, sizeof(err));
	CHECK(r == 0 && __atomic_load_n(&rel.released, __ATOMIC_SEQ_CST) &&
	      !strcmp(p[NODES].node, p[1].node));
	pthread_join(t, NULL);
	/* and not forever: it says why */
	api.busy_wait_ms = 100;
	struct placed q;
	CHECK(place(&api, "alice", &w, NULL, 0, &q, err, sizeof(err)) == -ENOSPC);
	CHECK(strstr(err, "starting its most at once (1)") != NULL);
	t_note("%s", err);
	/* no limit: all take more */
	api.max_starting = 0;
	CHECK(place(&api, "alice", &w, NULL, 0, &q, err, sizeof(err)) == 0);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "place_filters", test_filters },
		{ "place_warm_vm_wins", test_warm_vm_wins },
		{ "place_creates_under_way", test_creates_under_way },
		{ 0, 0 },
	};
	t_fixture(setup, teardown);
	return t_main(argc, argv, cases);
}
