/*
 * Unit tests for usage metering in the store (store_usage.c): events,
 * their integration over a window, the filters and the per-state counts;
 * also key lookup by id and the schema migration 1 -> 2 on a real
 * version-1 database. Each test has a fresh database: a file, and (the
 * pg_ cases) a database on a real PostgreSQL server this binary starts
 * (tests/lib/pgserver), where the same queries are PostgreSQL's words.
 */
#include "daemon/store/store.h"
#include "tests/lib/pgserver.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct tdb {
	char path[256]; /* a file's path or a PostgreSQL database's URL */
	struct store *s;
};

static int on_pg; /* this case runs on PostgreSQL */

/* A new empty file under /tmp, or database on the server (no store
 * opened on it yet). */
static int tdb_file(struct tdb *t)
{
	t->s = NULL;
	if (on_pg)
		return CHECK(pgserver_db(t->path, sizeof(t->path)) == 0) ? 0 : -1;
	snprintf(t->path, sizeof(t->path), "/tmp/cpuos-test-usage-XXXXXX");
	int fd = mkstemp(t->path);
	if (!CHECK(fd >= 0))
		return -1;
	close(fd);
	return 0;
}

static int tdb_open(struct tdb *t)
{
	if (tdb_file(t))
		return -1;
	char err[256] = "";
	int r = store_open(t->path, &t->s, err, sizeof(err));
	if (!CHECK(r == 0)) {
		t_note("store_open: %d %s", r, err);
		if (!on_pg)
			unlink(t->path);
		return -1;
	}
	return 0;
}

static void tdb_remove(struct tdb *t)
{
	char p[300];
	store_close(t->s);
	t->s = NULL;
	if (pgserver_is_url(t->path)) {
		pgserver_drop(t->path);
		return;
	}
	unlink(t->path);
	snprintf(p, sizeof(p), "%s-wal", t->path);
	unlink(p);
	snprintf(p, sizeof(p), "%s-shm", t->path);
	unlink(p);
}

/* Runs sql (one or more statements) on its own connection: 0 or -1. */
static int raw_exec(const char *path, const char *sql)
{
	if (pgserver_is_url(path))
		return pgserver_query(path, sql, NULL, 0);
	sqlite3 *db = NULL;
	char *msg = NULL;
	int r = -1;
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK)
		r = sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK ? 0 : -1;
	if (r)
		t_note("sqlite: %s", msg ? msg : db ? sqlite3_errmsg(db) : "cannot open");
	sqlite3_free(msg);
	sqlite3_close(db);
	return r;
}

/* The first column of the first row of sql as text into out ("" if none). */
static int raw_text(const char *path, const char *sql, char *out, size_t outlen)
{
	if (pgserver_is_url(path))
		return pgserver_query(path, sql, out, outlen);
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int r = -1;
	out[0] = '\0';
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
	    sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
		int rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			const unsigned char *v = sqlite3_column_text(st, 0);
			snprintf(out, outlen, "%s", v ? (const char *)v : "");
			r = 0;
		} else if (rc == SQLITE_DONE) {
			r = 0;
		}
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	return r;
}

/* ---- usage events and queries ---- */

#define T0  1700000000000LL /* unix ms */
#define SEC 1000LL
#define GIB (1LL << 30)

static int ev(struct store *s, const char *sbx, const char *account, const char *key,
	      const char *state, unsigned vcpus, unsigned memory_mb, long long storage,
	      long long at)
{
	struct store_usage_event e = {
	    .sbx_id = sbx,
	    .account = account,
	    .key_id = key,
	    .state = state,
	    .vcpus = vcpus,
	    .memory_mb = memory_mb,
	    .storage_bytes = storage,
	    .at_ms = at,
	};
	return store_usage_add(s, &e);
}

/*
 * The timeline every query test reads (times from T0, in seconds):
 *   sbx_a  alice key_a  2 vCPU 2 GiB  running 0, paused 10 (1 GiB kept),
 *                                     running 30, stopped 35
 *   sbx_b  alice key_a  1 vCPU 512 MiB  running 20, never stopped
 *   sbx_c  bob   key_b  4 vCPU 4 GiB  running 0, stopped 50
 *   sbx_d  alice key_c  1 vCPU 1 GiB  running 5, stopped 8
 *   sbx_e  alice key_a  1 vCPU 1 GiB  running 200, stopped 210
 *   sbx_f  carol (no key: the socket)  1 vCPU 1 GiB  running 0, stopped 1
 * The events of different sandboxes interleave, as they would live.
 */
static int timeline(struct store *s)
{
	int r = 0;
	r |= ev(s, "sbx_a", "alice", "key_a", "running", 2, 2048, 0, T0);
	r |= ev(s, "sbx_c", "bob", "key_b", "running", 4, 4096, 0, T0);
	r |= ev(s, "sbx_f", "carol", NULL, "running", 1, 1024, 0, T0);
	r |= ev(s, "sbx_f", "carol", NULL, "stopped", 1, 1024, 0, T0 + 1 * SEC);
	r |= ev(s, "sbx_d", "alice", "key_c", "running", 1, 1024, 0, T0 + 5 * SEC);
	r |= ev(s, "sbx_d", "alice", "key_c", "stopped", 1, 1024, 0, T0 + 8 * SEC);
	r |= ev(s, "sbx_a", "alice", "key_a", "paused", 2, 2048, GIB, T0 + 10 * SEC);
	r |= ev(s, "sbx_b", "alice", "key_a", "running", 1, 512, 0, T0 + 20 * SEC);
	r |= ev(s, "sbx_a", "alice", "key_a", "running", 2, 2048, 0, T0 + 30 * SEC);
	r |= ev(s, "sbx_a", "alice", "key_a", "stopped", 2, 2048, 0, T0 + 35 * SEC);
	r |= ev(s, "sbx_c", "bob", "key_b", "stopped", 4, 4096, 0, T0 + 50 * SEC);
	r |= ev(s, "sbx_e", "alice", "key_a", "running", 1, 1024, 0, T0 + 200 * SEC);
	r |= ev(s, "sbx_e", "alice", "key_a", "stopped", 1, 1024, 0, T0 + 210 * SEC);
	return r;
}

/* Queries and compares every figure exactly: each is a sum of products of
 * small integers and halves, which doubles hold exactly. */
static int usage_is(struct store *s, const char *account, const char *key, long long from_s,
		    long long to_s, long long now_s, double running, double vcpu, double gib,
		    double paused, unsigned sandboxes)
{
	struct store_usage u;
	int r = store_usage_query(s, account, key, T0 + from_s * SEC, T0 + to_s * SEC,
				  T0 + now_s * SEC, &u);
	int ok = r == 0 && u.running_s == running && u.vcpu_s == vcpu && u.gib_s == gib &&
		 u.paused_gib_s == paused && u.sandboxes == sandboxes;
	if (!ok)
		t_note("%s/%s [%lld, %lld) now %lld: r %d, running %g vcpu %g gib %g paused %g "
		       "sandboxes %u",
		       account ? account : "*", key ? key : "*", from_s, to_s, now_s, r,
		       u.running_s, u.vcpu_s, u.gib_s, u.paused_gib_s, u.sandboxes);
	return ok;
}

static void test_usage_whole(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	CHECK(timeline(t.s) == 0);
	/* [-100, 100), now 60: sbx_b runs 20..60; sbx_e is after the window.
	 * alice: a runs 10 + 5 s (x2 vCPU, x2 GiB) and is paused 20 s with
	 * 1 GiB; b runs 40 s (x1, x0.5); d runs 3 s (x1, x1). */
	CHECK(usage_is(t.s, "alice", NULL, -100, 100, 60, 58, 73, 53, 20, 3));
	CHECK(usage_is(t.s, "alice", "key_a", -100, 100, 60, 55, 70, 50, 20, 2));
	CHECK(usage_is(t.s, "alice", "key_c", -100, 100, 60, 3, 3, 3, 0, 1));
	CHECK(usage_is(t.s, "bob", NULL, -100, 100, 60, 50, 200, 200, 0, 1));
	CHECK(usage_is(t.s, "carol", NULL, -100, 100, 60, 1, 1, 1, 0, 1));
	/* no key: "" is the socket's */
	CHECK(usage_is(t.s, "carol", "", -100, 100, 60, 1, 1, 1, 0, 1));
	CHECK(usage_is(t.s, NULL, "", -100, 100, 60, 1, 1, 1, 0, 1));
	/* every account */
	CHECK(usage_is(t.s, NULL, NULL, -100, 100, 60, 109, 274, 254, 20, 5));
	/* a key by itself, any account; one of another account is nothing */
	CHECK(usage_is(t.s, NULL, "key_b", -100, 100, 60, 50, 200, 200, 0, 1));
	CHECK(usage_is(t.s, "alice", "key_b", -100, 100, 60, 0, 0, 0, 0, 0));
	CHECK(usage_is(t.s, "nobody", NULL, -100, 100, 60, 0, 0, 0, 0, 0));
	CHECK(usage_is(t.s, "alice", "key_none", -100, 100, 60, 0, 0, 0, 0, 0));
	tdb_remove(&t);
}

static void test_usage_clipping(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	CHECK(timeline(t.s) == 0);
	/* [5, 32): a runs 5..10 and 30..32, paused 10..30; b runs 20..32; d
	 * runs 5..8 (starts exactly at from) */
	CHECK(usage_is(t.s, "alice", NULL, 5, 32, 60, 5 + 2 + 12 + 3, 14 + 12 + 3, 14 + 6 + 3, 20,
		       3));
	/* [15, 25): inside a's pause, and the start of b */
	CHECK(usage_is(t.s, "alice", NULL, 15, 25, 60, 5, 5, 2.5, 10, 2));
	CHECK(usage_is(t.s, "alice", "key_c", 15, 25, 60, 0, 0, 0, 0, 0));
	/* [8, 10): d stopped exactly at from, a ran: half-open at both ends */
	CHECK(usage_is(t.s, "alice", NULL, 8, 10, 60, 2, 4, 4, 0, 1));
	/* [10, 20): a is paused from exactly from; b starts exactly at to */
	CHECK(usage_is(t.s, "alice", NULL, 10, 20, 60, 0, 0, 0, 10, 1));
	/* before anything, after bob's sandbox stopped: nothing */
	CHECK(usage_is(t.s, NULL, NULL, -100, 0, 60, 0, 0, 0, 0, 0));
	CHECK(usage_is(t.s, "bob", NULL, 50, 100, 60, 0, 0, 0, 0, 0));
	/* an empty window */
	CHECK(usage_is(t.s, "alice", NULL, 30, 30, 60, 0, 0, 0, 0, 0));
	tdb_remove(&t);
}

static void test_usage_open_interval(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	CHECK(timeline(t.s) == 0);
	/* [20, 100) at now 45: b still runs, up to now; a's recorded
	 * intervals count in full: paused 20..30, running 30..35 */
	CHECK(usage_is(t.s, "alice", "key_a", 20, 100, 45, 5 + 25, 10 + 25, 10 + 12.5, 10, 2));
	/* [20, 40) at now 60: b up to the window's end */
	CHECK(usage_is(t.s, "alice", "key_a", 20, 40, 60, 5 + 20, 10 + 20, 10 + 10, 10, 2));
	/* [300, 400) at now 500: b alone, all along; e ended at 210 */
	CHECK(usage_is(t.s, "alice", NULL, 300, 400, 500, 100, 100, 50, 0, 1));
	/* a window that starts after now: nothing yet */
	CHECK(usage_is(t.s, "alice", NULL, 100, 200, 60, 0, 0, 0, 0, 0));
	/* the last event stopped: nothing after it however late now is */
	CHECK(usage_is(t.s, "bob", NULL, 0, 1000, 900, 50, 200, 200, 0, 1));
	tdb_remove(&t);
}

static void test_usage_bad_args(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	CHECK(ev(t.s, "sbx_x", "alice", "key_a", "lost", 1, 512, 0, T0) == -EINVAL);
	CHECK(ev(t.s, "sbx_x", "alice", "key_a", NULL, 1, 512, 0, T0) == -EINVAL);
	CHECK(ev(t.s, "", "alice", "key_a", "running", 1, 512, 0, T0) == -EINVAL);
	CHECK(ev(t.s, NULL, "alice", "key_a", "running", 1, 512, 0, T0) == -EINVAL);
	CHECK(ev(t.s, "sbx x", "alice", "key_a", "running", 1, 512, 0, T0) == -EINVAL);
	CHECK(ev(t.s, "sbx_x", "", "key_a", "running", 1, 512, 0, T0) == -EINVAL);
	CHECK(ev(t.s, "sbx_x", "alice", "key a", "running", 1, 512, 0, T0) == -EINVAL);
	CHECK(ev(t.s, "sbx_x", "alice", "key_a", "running", 1, 512, -1, T0) == -EINVAL);
	CHECK(ev(t.s, "sbx_x", "alice", "key_a", "running", 1, 512, 0, -1) == -EINVAL);
	CHECK(ev(t.s, "sbx_0123456789abcdef0123456789ab", "alice", NULL, "running", 1, 512, 0,
		 T0) == -EINVAL); /* 32 bytes: one over */
	CHECK(store_usage_add(t.s, NULL) == -EINVAL);
	char v[64];
	CHECK(raw_text(t.path, "SELECT count(*) FROM usage_events", v, sizeof(v)) == 0 &&
	      !strcmp(v, "0"));

	struct store_usage u;
	CHECK(store_usage_query(t.s, NULL, NULL, T0 + 1, T0, T0, &u) == -EINVAL);
	CHECK(store_usage_query(t.s, "", NULL, T0, T0 + 1, T0, &u) == -EINVAL);
	CHECK(store_usage_query(t.s, NULL, "key a", T0, T0 + 1, T0, &u) == -EINVAL);
	tdb_remove(&t);
}

/* ---- sandbox counts ---- */

static int insert_sbx(struct store *s, const char *id, const char *account)
{
	struct store_sbx x;
	memset(&x, 0, sizeof(x));
	snprintf(x.id, sizeof(x.id), "%s", id);
	snprintf(x.account, sizeof(x.account), "%s", account);
	snprintf(x.template, sizeof(x.template), "base");
	snprintf(x.state, sizeof(x.state), "running");
	x.vcpus = 1;
	x.memory_mb = 512;
	x.disk_mb = 2048;
	x.created_at = 1000;
	x.expires_at = 1300;
	return store_sbx_insert(s, &x, NULL);
}

/* A running sandbox moved to state (stopped or lost) with reason. */
static int move_to(struct store *s, const char *id, const char *state, const char *reason)
{
	struct store_sbx_move mv = { .id = id, .from = "running", .to = state, .end_reason = reason,
				     .net_slot = -1 };
	return store_sbx_move(s, &mv);
}

static void test_count_by_state(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	struct store_sbx_counts c;
	CHECK(store_sbx_count_by_state(t.s, NULL, &c) == 0 && c.running == 0 && c.paused == 0 &&
	      c.stopped == 0 && c.lost == 0);
	CHECK(insert_sbx(t.s, "sbx_1", "alice") == 0);
	CHECK(insert_sbx(t.s, "sbx_2", "alice") == 0);
	CHECK(insert_sbx(t.s, "sbx_3", "bob") == 0);
	CHECK(insert_sbx(t.s, "sbx_4", "bob") == 0);
	CHECK(insert_sbx(t.s, "sbx_5", "carol") == 0);
	CHECK(insert_sbx(t.s, "sbx_6", "carol") == 0);
	CHECK(move_to(t.s, "sbx_3", "stopped", "killed") == 0);
	CHECK(move_to(t.s, "sbx_4", "stopped", "timeout") == 0);
	CHECK(move_to(t.s, "sbx_5", "lost", "lost") == 0);
	/* paused straight in the table: that is the sandbox manager's
	 * business, not what is tested here */
	CHECK(raw_exec(t.path, "UPDATE sandboxes SET state = 'paused' WHERE id = 'sbx_6'") == 0);
	CHECK(store_sbx_count_by_state(t.s, NULL, &c) == 0);
	CHECK(c.running == 2 && c.paused == 1 && c.stopped == 2 && c.lost == 1);
	/* One account's alone. */
	CHECK(store_sbx_count_by_state(t.s, "carol", &c) == 0);
	CHECK(c.running == 0 && c.paused == 1 && c.stopped == 0 && c.lost == 1);
	CHECK(store_sbx_count_by_state(t.s, "dave", &c) == 0);
	CHECK(c.running == 0 && c.paused == 0 && c.stopped == 0 && c.lost == 0);
	tdb_remove(&t);
}

/* ---- key lookup with the key's id ---- */

static void test_key_lookup_id(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	char secret[STORE_KEY_SECRET_LEN + 1], account[128], id[32];
	struct store_key k;
	CHECK(store_key_create(t.s, "ci", "alice", secret, &k) == 0);
	CHECK(store_key_lookup_id(t.s, secret, account, sizeof(account), id, sizeof(id)) == 0 &&
	      !strcmp(account, "alice") && !strcmp(id, k.id));
	CHECK(store_key_lookup_id(t.s, secret, account, sizeof(account), NULL, 0) == 0);
	CHECK(store_key_lookup(t.s, secret, account, sizeof(account)) == 0 &&
	      !strcmp(account, "alice"));
	CHECK(store_key_lookup_id(t.s, secret, account, sizeof(account), id, 8) == -ERANGE);
	CHECK(store_key_lookup_id(t.s, secret, account, sizeof(account), id, 0) == -EINVAL);
	CHECK(store_key_lookup_id(t.s, "cpuos_nope", account, sizeof(account), id, sizeof(id)) ==
	      -ENOENT);
	CHECK(store_key_lookup_id(t.s, NULL, account, sizeof(account), id, sizeof(id)) == -ENOENT);
	tdb_remove(&t);
}

/* ---- migration 1 -> 2 ---- */

/* The schema as migration 0 -> 1 made it (store.c), for a database a
 * cpuosd of schema version 1 left behind. */
static const char schema_v1[] =
    "CREATE TABLE accounts ("
    " id INTEGER PRIMARY KEY,"
    " name TEXT NOT NULL UNIQUE,"
    " created_at INTEGER NOT NULL);"
    "CREATE TABLE keys ("
    " id TEXT PRIMARY KEY NOT NULL,"
    " name TEXT NOT NULL,"
    " account TEXT NOT NULL REFERENCES accounts(name),"
    " sha256 TEXT NOT NULL UNIQUE CHECK (length(sha256) = 64),"
    " created_at INTEGER NOT NULL);"
    "CREATE TABLE sandboxes ("
    " id TEXT PRIMARY KEY NOT NULL,"
    " account TEXT NOT NULL REFERENCES accounts(name),"
    " template TEXT NOT NULL,"
    " state TEXT NOT NULL CHECK (state IN ('running', 'stopped', 'lost')),"
    " end_reason TEXT NOT NULL DEFAULT '',"
    " vcpus INTEGER NOT NULL,"
    " memory_mb INTEGER NOT NULL,"
    " disk_mb INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL,"
    " expires_at INTEGER NOT NULL,"
    " metadata TEXT NOT NULL DEFAULT '{}',"
    " env TEXT NOT NULL DEFAULT '{}',"
    " run_dir TEXT NOT NULL DEFAULT '',"
    " qemu_pid INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX sandboxes_by_time ON sandboxes (created_at, id);"
    "CREATE INDEX sandboxes_by_account ON sandboxes (account, created_at, id);"
    "CREATE INDEX sandboxes_by_state ON sandboxes (state, account);"
    "CREATE TABLE sandbox_meta ("
    " sbx_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,"
    " key TEXT NOT NULL,"
    " value TEXT NOT NULL,"
    " PRIMARY KEY (sbx_id, key)) WITHOUT ROWID;"
    "CREATE INDEX sandbox_meta_by_pair ON sandbox_meta (key, value);"
    "PRAGMA user_version = 1;";

/* out[65]: the lowercase hex SHA-256 of s, as the store keeps keys. */
static void sha256_hex(const char *s, char *out)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	EVP_Digest(s, strlen(s), md, &n, EVP_sha256(), NULL);
	for (unsigned i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static void test_migration_v1(void)
{
	struct tdb t;
	if (tdb_file(&t))
		return;
	const char *secret =
	    "cpuos_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
	char hash[65], sql[1024];
	sha256_hex(secret, hash);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO accounts (name, created_at) VALUES ('alice', 100);"
		 "INSERT INTO keys VALUES ('key_00000000000000aa', 'ci', 'alice', '%s', 100);"
		 "INSERT INTO sandboxes (id, account, template, state, end_reason, vcpus,"
		 " memory_mb, disk_mb, created_at, expires_at, metadata, env, run_dir, qemu_pid)"
		 " VALUES ('sbx_00000000000000b1', 'alice', 'python', 'running', '', 2, 1024,"
		 " 2048, 1000, 1300, '{\"user\":\"alice\"}', '{\"K\":\"V\"}', '/run/x', 4242),"
		 " ('sbx_00000000000000b2', 'alice', 'base', 'stopped', 'killed', 1, 512,"
		 " 2048, 900, 1200, '{}', '{}', '', 0);"
		 "INSERT INTO sandbox_meta VALUES ('sbx_00000000000000b1', 'user', 'alice');",
		 hash);
	if (!CHECK(raw_exec(t.path, "PRAGMA foreign_keys = ON; PRAGMA journal_mode = WAL;") == 0) ||
	    !CHECK(raw_exec(t.path, schema_v1) == 0) || !CHECK(raw_exec(t.path, sql) == 0)) {
		tdb_remove(&t);
		return;
	}

	char err[256] = "", v[512];
	int r = store_open(t.path, &t.s, err, sizeof(err));
	if (!CHECK(r == 0)) {
		t_note("store_open: %d %s", r, err);
		tdb_remove(&t);
		return;
	}
	CHECK(raw_text(t.path, "PRAGMA user_version", v, sizeof(v)) == 0 && !strcmp(v, "16"));
	/* 4 -> 5: old sandboxes hold no secrets; the table is there, empty */
	CHECK(raw_text(t.path, "SELECT secrets FROM sandboxes WHERE id = 'sbx_00000000000000b1'", v,
		       sizeof(v)) == 0 && !strcmp(v, "[]"));
	struct store_secret *sec = NULL;
	size_t nsec = 9;
	CHECK(store_secret_list(t.s, "alice", NULL, &sec, &nsec) == 0 && nsec == 0);
	store_secret_free_list(sec, nsec);

	/* the sandboxes, their metadata and their defaults survive the rebuild */
	struct store_sbx x;
	if (CHECK(store_sbx_get(t.s, "sbx_00000000000000b1", &x) == 0)) {
		CHECK(!strcmp(x.account, "alice") && !strcmp(x.template, "python") &&
		      !strcmp(x.state, "running") && x.vcpus == 2 && x.memory_mb == 1024 &&
		      x.disk_mb == 2048 && x.created_at == 1000 && x.expires_at == 1300 &&
		      !strcmp(x.run_dir, "/run/x") && x.qemu_pid == 4242);
		CHECK(!strcmp(x.metadata_json, "{\"user\":\"alice\"}"));
		CHECK(!strcmp(x.env_json, "{\"K\":\"V\"}"));
		store_sbx_release(&x);
	}
	if (CHECK(store_sbx_get(t.s, "sbx_00000000000000b2", &x) == 0)) {
		CHECK(!strcmp(x.state, "stopped") && !strcmp(x.end_reason, "killed"));
		store_sbx_release(&x);
	}
	CHECK(raw_text(t.path,
		       "SELECT on_timeout || ',' || timeout_s || ',' || paused_at || ',' || parent"
		       " || ',' || key_id || ',' || generation FROM sandboxes"
		       " WHERE id = 'sbx_00000000000000b1'",
		       v, sizeof(v)) == 0 &&
	      !strcmp(v, "pause,0,0,,,0"));
	/* the metadata table, found by its filter */
	struct store_kv kv = {.key = "user", .value = "alice"};
	struct store_sbx *xs = NULL;
	size_t n = 0;
	char next[128];
	CHECK(store_sbx_list(t.s, "alice", NULL, &kv, 1, 10, NULL, &xs, &n, next, sizeof(next)) ==
		  0 &&
	      n == 1 && !strcmp(xs[0].id, "sbx_00000000000000b1"));
	store_sbx_free_list(xs, n);
	/* its foreign key names the rebuilt table, and still cascades */
	CHECK(raw_text(t.path, "SELECT sql FROM sqlite_master WHERE name = 'sandbox_meta'", v,
		       sizeof(v)) == 0 &&
	      strstr(v, "sandboxes") && !strstr(v, "sandboxes2"));
	CHECK(raw_text(t.path,
		       "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN"
		       " ('sandboxes_by_time', 'sandboxes_by_account', 'sandboxes_by_state',"
		       " 'sandbox_meta_by_pair', 'usage_by_account', 'usage_by_sbx')",
		       v, sizeof(v)) == 0 &&
	      !strcmp(v, "6"));
	CHECK(raw_exec(t.path, "PRAGMA foreign_keys = ON;"
			       " DELETE FROM sandboxes WHERE id = 'sbx_00000000000000b1'") == 0);
	CHECK(raw_text(t.path, "SELECT count(*) FROM sandbox_meta", v, sizeof(v)) == 0 &&
	      !strcmp(v, "0"));
	/* the new state is allowed now */
	CHECK(raw_exec(t.path, "UPDATE sandboxes SET state = 'paused'"
			       " WHERE id = 'sbx_00000000000000b2'") == 0);
	/* the key still opens its account, and tells its id */
	char account[128], id[32];
	CHECK(store_key_lookup_id(t.s, secret, account, sizeof(account), id, sizeof(id)) == 0 &&
	      !strcmp(account, "alice") && !strcmp(id, "key_00000000000000aa"));
	/* and the usage table works */
	CHECK(ev(t.s, "sbx_00000000000000b2", "alice", "key_00000000000000aa", "running", 1, 512, 0,
		 T0) == 0);
	CHECK(usage_is(t.s, "alice", NULL, 0, 10, 10, 10, 10, 5, 0, 1));

	/* opened again, nothing is migrated twice */
	store_close(t.s);
	t.s = NULL;
	CHECK(store_open(t.path, &t.s, err, sizeof(err)) == 0);
	CHECK(raw_text(t.path, "PRAGMA user_version", v, sizeof(v)) == 0 && !strcmp(v, "16"));
	/* 7 -> 8: no pause of before is in an object store */
	CHECK(raw_text(t.path, "SELECT stored FROM sandboxes WHERE id = 'sbx_00000000000000b1'", v,
		       sizeof(v)) == 0 && !strcmp(v, ""));
	/* 8 -> 9: nor a checkpoint, and none is in the trash */
	CHECK(raw_text(t.path, "SELECT count(*) FROM checkpoints WHERE stored != ''", v,
		       sizeof(v)) == 0 && !strcmp(v, "0"));
	CHECK(raw_text(t.path, "SELECT count(*) FROM checkpoint_trash", v, sizeof(v)) == 0 &&
	      !strcmp(v, "0"));
	tdb_remove(&t);
}

/* ---- lifecycle events and webhooks ---- */

static struct store_event life(const char *account, const char *sbx, const char *type, long long at)
{
	struct store_event e = { .at_ms = at };
	snprintf(e.account, sizeof(e.account), "%s", account);
	snprintf(e.sbx_id, sizeof(e.sbx_id), "%s", sbx);
	snprintf(e.type, sizeof(e.type), "%s", type);
	return e;
}

/* Events list by account, sandbox and seq; a webhook gets its account's
 * events from its making on, its cursor moves on a 2xx only, an attempt 0
 * is not logged; pruning drops old events and attempts. */
static void test_events_and_webhooks(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	struct store_event e = life("alice", "sbx_1", "created", 1000);
	CHECK(store_event_add(t.s, &e) == 0);
	struct store_webhook w = { .created_ms = 1500 };
	snprintf(w.id, sizeof(w.id), "whk_1");
	snprintf(w.account, sizeof(w.account), "alice");
	snprintf(w.url, sizeof(w.url), "http://127.0.0.1:9/");
	snprintf(w.types, sizeof(w.types), "[]");
	snprintf(w.secret, sizeof(w.secret), "whsec_0123456789abcdef");
	CHECK(store_webhook_add(t.s, &w) == 0);
	CHECK(store_webhook_add(t.s, &w) == -EEXIST);
	const char *seq[][3] = { { "alice", "sbx_1", "paused" }, { "bob", "sbx_2", "created" },
				 { "alice", "sbx_1", "resumed" } };
	for (int i = 0; i < 3; i++) {
		e = life(seq[i][0], seq[i][1], seq[i][2], 2000 + i);
		CHECK(store_event_add(t.s, &e) == 0);
	}
	e = life("alice", "", "created", 1);
	CHECK(store_event_add(t.s, &e) == -EINVAL);
	struct store_event *v;
	size_t n;
	CHECK(store_event_list(t.s, "alice", NULL, 0, 100, &v, &n) == 0 && n == 3 &&
	      !strcmp(v[0].type, "created") && !strcmp(v[2].type, "resumed") && v[0].seq < v[1].seq);
	long long second = n == 3 ? v[1].seq : 0;
	free(v);
	CHECK(store_event_list(t.s, NULL, "sbx_2", 0, 100, &v, &n) == 0 && n == 1);
	free(v);
	CHECK(store_event_list(t.s, "alice", NULL, second, 100, &v, &n) == 0 && n == 1);
	free(v);
	CHECK(store_event_list(t.s, NULL, NULL, 0, 0, &v, &n) == -EINVAL);
	/* The webhook: alice's two events after its making (not "created"). */
	CHECK(store_webhook_pending(t.s, &w, 10, &v, &n) == 0 && n == 2 && !strcmp(v[0].type, "paused"));
	long long first = n ? v[0].seq : 0, last = n == 2 ? v[1].seq : 0;
	free(v);
	CHECK(store_webhook_done(t.s, "whk_1", first, 1, 0, "Connection refused", 2100) == 0);
	CHECK(store_webhook_pending(t.s, &w, 10, &v, &n) == 0 && n == 2); /* not moved */
	free(v);
	CHECK(store_webhook_done(t.s, "whk_1", first, 2, 204, "", 2200) == 0);
	CHECK(store_webhook_done(t.s, "whk_1", last, 0, 200, "", 2300) == 0); /* skipped */
	CHECK(store_webhook_pending(t.s, &w, 10, &v, &n) == 0 && n == 0);
	free(v);
	struct store_delivery *d;
	CHECK(store_delivery_list(t.s, "whk_1", 10, &d, &n) == 0 && n == 2 && d[0].status == 204 &&
	      d[1].status == 0 && !strcmp(d[1].error, "Connection refused"));
	free(d);
	struct store_webhook *ws;
	CHECK(store_webhook_list(t.s, "alice", &ws, &n) == 0 && n == 1 && !strcmp(ws[0].secret, w.secret));
	free(ws);
	CHECK(store_webhook_list(t.s, "bob", &ws, &n) == 0 && n == 0);
	free(ws);
	CHECK(store_event_prune(t.s, 2001) == 0);
	CHECK(store_event_list(t.s, NULL, NULL, 0, 100, &v, &n) == 0 && n == 2);
	free(v);
	CHECK(store_delivery_list(t.s, "whk_1", 10, &d, &n) == 0 && n == 2); /* at 2100, 2200 */
	free(d);
	CHECK(store_webhook_delete(t.s, "whk_1") == 0);
	CHECK(store_webhook_delete(t.s, "whk_1") == -ENOENT);
	CHECK(store_delivery_list(t.s, "whk_1", 10, &d, &n) == 0 && n == 0);
	free(d);
	tdb_remove(&t);
}

#define ON_PG(fn)                                                                                  \
	static void pg_##fn(void)                                                                  \
	{                                                                                          \
		on_pg = 1;                                                                         \
		fn();                                                                              \
	}
ON_PG(test_usage_whole)
ON_PG(test_usage_clipping)
ON_PG(test_usage_open_interval)
ON_PG(test_usage_bad_args)
ON_PG(test_count_by_state)
ON_PG(test_key_lookup_id)
ON_PG(test_events_and_webhooks)

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
	    {"usage_whole", test_usage_whole},
	    {"usage_clipping", test_usage_clipping},
	    {"usage_open_interval", test_usage_open_interval},
	    {"usage_bad_args", test_usage_bad_args},
	    {"usage_count_by_state", test_count_by_state},
	    {"usage_key_lookup_id", test_key_lookup_id},
	    {"usage_migration_v1", test_migration_v1},
	    {"usage_events_and_webhooks", test_events_and_webhooks},
	    {"pg_usage_whole", pg_test_usage_whole},
	    {"pg_usage_clipping", pg_test_usage_clipping},
	    {"pg_usage_open_interval", pg_test_usage_open_interval},
	    {"pg_usage_bad_args", pg_test_usage_bad_args},
	    {"pg_usage_count_by_state", pg_test_count_by_state},
	    {"pg_usage_key_lookup_id", pg_test_key_lookup_id},
	    {"pg_usage_events_and_webhooks", pg_test_events_and_webhooks},
	    {0, 0},
	};
	char dir[] = "/tmp/cpuos-test-usage-pg-XXXXXX";
	if (mkdtemp(dir))
		pgserver_up(dir);
	int rc = t_main(argc, argv, cases);
	pgserver_down();
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
	return rc;
}
