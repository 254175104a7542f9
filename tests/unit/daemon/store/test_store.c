/*
 * Unit tests for the daemon's store, each on a fresh database: a SQLite
 * file, and (the pg_ cases) a database of its own on a real PostgreSQL
 * server this binary starts (tests/lib/pgserver), the same cases on both
 * back ends but those about SQLite's files.
 */
#include "daemon/store/store.h"
#include "tests/lib/pgserver.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct tdb {
	char path[256]; /* a file's path or a PostgreSQL database's URL */
	struct store *s;
};

static int on_pg; /* this case runs on PostgreSQL */

/* A new empty database (a file under /tmp, or on the server) and a store
 * opened on it. */
static int tdb_open(struct tdb *t)
{
	if (on_pg) {
		if (!CHECK(pgserver_db(t->path, sizeof(t->path)) == 0))
			return -1;
	} else {
		snprintf(t->path, sizeof(t->path), "/tmp/cpuos-test-store-XXXXXX");
		int fd = mkstemp(t->path);
		if (!CHECK(fd >= 0))
			return -1;
		close(fd);
	}
	char err[256] = "";
	int r = store_open(t->path, &t->s, err, sizeof(err));
	if (!CHECK(r == 0)) {
		t_note("store_open: %d %s", r, err);
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

static void mk_sbx(struct store_sbx *x, const char *id, const char *account, long long created_at,
		   const char *meta)
{
	memset(x, 0, sizeof(*x));
	snprintf(x->id, sizeof(x->id), "%s", id);
	snprintf(x->account, sizeof(x->account), "%s", account);
	snprintf(x->template, sizeof(x->template), "python");
	snprintf(x->state, sizeof(x->state), "running");
	x->vcpus = 2;
	x->memory_mb = 1024;
	x->disk_mb = 2048;
	x->created_at = created_at;
	x->expires_at = created_at + 300;
	x->metadata_json = (char *)meta; /* the store only reads it */
	x->env_json = NULL;
	snprintf(x->run_dir, sizeof(x->run_dir), "/run/cpuos/%s", id);
	x->qemu_pid = 4242;
}

static int insert(struct store *s, const char *id, const char *account, long long created_at,
		  const char *meta)
{
	struct store_sbx x;
	mk_sbx(&x, id, account, created_at, meta);
	return store_sbx_insert(s, &x, NULL);
}

/* Runs one query with the sqlite3 library (or libpq) directly, returns
 * its text. */
static int raw_query(const char *path, const char *sql, char *out, size_t outlen)
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

static void test_schema_and_reopen(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	char secret[STORE_KEY_SECRET_LEN + 1];
	struct store_key k;
	CHECK(store_key_create(t.s, "ci", "alice", secret, &k) == 0);
	CHECK(insert(t.s, "sbx_0000000000000001", "alice", 1000, "{\"user\":\"alice\"}") == 0);
	store_close(t.s);
	t.s = NULL;

	char v[64];
	CHECK(raw_query(t.path, "PRAGMA user_version", v, sizeof(v)) == 0 && !strcmp(v, "16"));
	CHECK(raw_query(t.path, "PRAGMA journal_mode", v, sizeof(v)) == 0 && !strcmp(v, "wal"));
	CHECK(raw_query(t.path,
			"SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
			"('accounts', 'keys', 'sandboxes', 'sandbox_meta')",
			v, sizeof(v)) == 0 &&
	      !strcmp(v, "4"));
	struct stat sb;
	CHECK(stat(t.path, &sb) == 0 && (sb.st_mode & 077) == 0);

	char err[256];
	if (!CHECK(store_open(t.path, &t.s, err, sizeof(err)) == 0))
		return;
	char account[128];
	CHECK(store_key_lookup(t.s, secret, account, sizeof(account)) == 0 &&
	      !strcmp(account, "alice"));
	struct store_sbx x;
	CHECK(store_sbx_get(t.s, "sbx_0000000000000001", &x) == 0 &&
	      !strcmp(x.metadata_json, "{\"user\":\"alice\"}") && x.created_at == 1000);
	store_sbx_release(&x);
	store_close(t.s);

	/* a schema from a later cpuosd is refused, not touched */
	CHECK(raw_query(t.path, "PRAGMA user_version = 17", v, sizeof(v)) == 0);
	t.s = NULL;
	err[0] = '\0';
	CHECK(store_open(t.path, &t.s, err, sizeof(err)) == -EPROTO && t.s == NULL);
	CHECK(strstr(err, "schema version 17") != NULL);
	tdb_remove(&t);
}

static int is_lower_hex(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
			return 0;
	return 1;
}

static void test_key_create_lookup(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	char secret[STORE_KEY_SECRET_LEN + 1], secret2[STORE_KEY_SECRET_LEN + 1];
	struct store_key k, k2;
	CHECK(store_key_create(t.s, "ci", "alice", secret, &k) == 0);
	CHECK(strlen(secret) == 70 && !strncmp(secret, "cpuos_", 6) &&
	      is_lower_hex(secret + 6, 64));
	CHECK(strlen(k.id) == 20 && !strncmp(k.id, "key_", 4) && is_lower_hex(k.id + 4, 16));
	CHECK(!strcmp(k.name, "ci") && !strcmp(k.account, "alice") && k.created_at > 0);
	CHECK(store_key_create(t.s, "laptop", "bob", secret2, &k2) == 0);
	CHECK(strcmp(secret, secret2) != 0 && strcmp(k.id, k2.id) != 0);

	char account[128];
	CHECK(store_key_lookup(t.s, secret, account, sizeof(account)) == 0 &&
	      !strcmp(account, "alice"));
	CHECK(store_key_lookup(t.s, secret2, account, sizeof(account)) == 0 &&
	      !strcmp(account, "bob"));

	/* wrong secrets */
	char wrong[STORE_KEY_SECRET_LEN + 1];
	memcpy(wrong, secret, sizeof(wrong));
	wrong[69] = wrong[69] == 'a' ? 'b' : 'a';
	CHECK(store_key_lookup(t.s, wrong, account, sizeof(account)) == -ENOENT);
	CHECK(store_key_lookup(t.s, "", account, sizeof(account)) == -ENOENT);
	CHECK(store_key_lookup(t.s, NULL, account, sizeof(account)) == -ENOENT);
	CHECK(store_key_lookup(t.s, secret + 6, account, sizeof(account)) == -ENOENT);
	char big[300];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	CHECK(store_key_lookup(t.s, big, account, sizeof(account)) == -ENOENT);
	char tiny[3];
	CHECK(store_key_lookup(t.s, secret, tiny, sizeof(tiny)) == -ERANGE);

	/* names and accounts: 1..127 printable bytes */
	char n127[128], n128[129];
	memset(n127, 'n', 127);
	n127[127] = '\0';
	memset(n128, 'n', 128);
	n128[128] = '\0';
	CHECK(store_key_create(t.s, n127, n127, secret, &k) == 0);
	CHECK(store_key_create(t.s, n128, "alice", secret, &k) == -EINVAL);
	CHECK(store_key_create(t.s, "ci", n128, secret, &k) == -EINVAL);
	CHECK(store_key_create(t.s, "", "alice", secret, &k) == -EINVAL);
	CHECK(store_key_create(t.s, "ci", "", secret, &k) == -EINVAL);
	CHECK(store_key_create(t.s, "c\ni", "alice", secret, &k) == -EINVAL);
	CHECK(store_key_create(t.s, "ci", "al\x7fice", secret, &k) == -EINVAL);
	CHECK(store_key_create(t.s, "ci", "al\xc3\xa9", secret, &k) == -EINVAL);
	struct store_key *ks;
	size_t n;
	CHECK(store_key_list(t.s, &ks, &n) == 0 && n == 3);
	free(ks);
	tdb_remove(&t);
}

static void test_key_list_delete(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	struct store_key *ks;
	size_t n = 99;
	CHECK(store_key_list(t.s, &ks, &n) == 0 && n == 0);
	free(ks);
	char sec[3][STORE_KEY_SECRET_LEN + 1];
	struct store_key k[3];
	const char *names[] = {"first", "second", "third"};
	for (int i = 0; i < 3; i++)
		CHECK(store_key_create(t.s, names[i], "alice", sec[i], &k[i]) == 0);
	CHECK(store_key_list(t.s, &ks, &n) == 0 && n == 3);
	for (size_t i = 0; i < n && i < 3; i++) /* oldest first */
		CHECK(!strcmp(ks[i].id, k[i].id) && !strcmp(ks[i].name, names[i]) &&
		      !strcmp(ks[i].account, "alice") && ks[i].created_at == k[i].created_at);
	free(ks);

	CHECK(store_key_delete(t.s, k[1].id) == 0);
	CHECK(store_key_delete(t.s, k[1].id) == -ENOENT);
	CHECK(store_key_delete(t.s, "key_0000000000000000") == -ENOENT);
	CHECK(store_key_delete(t.s, "") == -ENOENT);
	char account[128];
	CHECK(store_key_lookup(t.s, sec[1], account, sizeof(account)) == -ENOENT);
	CHECK(store_key_lookup(t.s, sec[0], account, sizeof(account)) == 0);
	CHECK(store_key_list(t.s, &ks, &n) == 0 && n == 2);
	if (n == 2)
		CHECK(!strcmp(ks[0].id, k[0].id) && !strcmp(ks[1].id, k[2].id));
	free(ks);
	tdb_remove(&t);
}

static int file_has(const char *path, const char *needle)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	size_t got;
	while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
		len += got;
		if (len == cap) {
			char *nb = realloc(buf, cap *= 2);
			if (!nb) {
				free(buf);
				buf = NULL;
			}
			buf = nb;
		}
	}
	fclose(f);
	int found = buf && memmem(buf, len, needle, strlen(needle)) != NULL;
	free(buf);
	return found;
}

static void test_secret_not_in_file(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	char secret[STORE_KEY_SECRET_LEN + 1];
	struct store_key k;
	CHECK(store_key_create(t.s, "ci", "alice", secret, &k) == 0);
	store_close(t.s);
	t.s = NULL;

	unsigned char md[32];
	unsigned int mdlen = 0;
	char hash[65];
	CHECK(EVP_Digest(secret, strlen(secret), md, &mdlen, EVP_sha256(), NULL) == 1);
	for (int i = 0; i < 32; i++)
		snprintf(hash + 2 * i, 3, "%02x", md[i]);
	char wal[300];
	snprintf(wal, sizeof(wal), "%s-wal", t.path);
	/* the hash is there (so this is the right file, fully read) ... */
	CHECK(file_has(t.path, hash) || file_has(wal, hash));
	CHECK(file_has(t.path, k.id) || file_has(wal, k.id));
	/* ... the secret, whole or its random part, is not */
	CHECK(!file_has(t.path, secret) && !file_has(wal, secret));
	CHECK(!file_has(t.path, secret + 6) && !file_has(wal, secret + 6));
	tdb_remove(&t);
}

/* A running sandbox moved to state (stopped or lost) with reason. */
static int move_to(struct store *s, const char *id, const char *state, const char *reason)
{
	struct store_sbx_move mv = { .id = id, .from = "running", .to = state, .end_reason = reason,
				     .net_slot = -1 };
	return store_sbx_move(s, &mv);
}

static void test_sbx_crud(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	struct store_sbx x, y;
	mk_sbx(&x, "sbx_3f9a0c1d2e4b5a69", "alice", 1764409318, "{ \"user\" : \"alice\" }");
	x.env_json = "{\"K\":\"V\"}";
	x.is_public = 1;
	snprintf(x.traffic_token, sizeof(x.traffic_token), "00112233445566778899aabbccddeeff");
	CHECK(store_sbx_insert(t.s, &x, NULL) == 0);
	CHECK(store_sbx_insert(t.s, &x, NULL) == -EEXIST);
	if (CHECK(store_sbx_get(t.s, x.id, &y) == 0)) {
		CHECK(!strcmp(y.id, x.id) && !strcmp(y.account, "alice") &&
		      !strcmp(y.template, "python") && !strcmp(y.state, "running") &&
		      !strcmp(y.end_reason, ""));
		CHECK(y.vcpus == 2 && y.memory_mb == 1024 && y.disk_mb == 2048);
		CHECK(y.created_at == 1764409318 && y.expires_at == 1764409618);
		CHECK(!strcmp(y.metadata_json, "{\"user\":\"alice\"}"));
		CHECK(!strcmp(y.env_json, "{\"K\":\"V\"}"));
		CHECK(!strcmp(y.run_dir, "/run/cpuos/sbx_3f9a0c1d2e4b5a69") && y.qemu_pid == 4242);
		CHECK(y.is_public == 1 && !strcmp(y.traffic_token, x.traffic_token));
		store_sbx_release(&y);
	}

	/* moves: conditional on the state the row is in, each with what goes with it */
	struct store_usage_event paused = { .sbx_id = x.id, .account = "alice", .state = "paused",
					    .storage_bytes = 1LL << 30, .at_ms = 1764412000000 };
	struct store_sbx_move mv = { .id = x.id, .from = "running", .to = "paused",
				     .paused_at = 1764412000, .timeout_left_s = 42, .usage = &paused };
	CHECK(store_sbx_move(t.s, &mv) == 0);
	paused.at_ms += 5000;
	CHECK(store_sbx_move(t.s, &mv) == -ESTALE); /* a race lost: nothing written */
	if (CHECK(store_sbx_get(t.s, x.id, &y) == 0)) {
		CHECK(!strcmp(y.state, "paused") && y.paused_at == 1764412000 &&
		      y.timeout_left_s == 42 && y.qemu_pid == 0 && y.net_slot == -1 &&
		      !strcmp(y.on_timeout, "pause"));
		store_sbx_release(&y);
	}
	struct store_usage_event resumed = { .sbx_id = x.id, .account = "alice", .state = "running",
					     .at_ms = 1764412010000 };
	mv = (struct store_sbx_move){ .id = x.id, .from = "paused", .to = "running",
				      .expires_at = 1764413000, .qemu_pid = 77, .generation = 3,
				      .net_slot = 7, .usage = &resumed };
	CHECK(store_sbx_move(t.s, &mv) == 0);
	/* paused from the first move's event to the resume's, 10 s of 1 GiB:
	 * the stale move's event was not written */
	struct store_usage u;
	CHECK(store_usage_query(t.s, "alice", NULL, 0, 1764412010000, 1764412010000, &u) == 0 &&
	      u.paused_gib_s > 9.99 && u.paused_gib_s < 10.01);
	if (CHECK(store_sbx_get(t.s, x.id, &y) == 0)) {
		CHECK(!strcmp(y.state, "running") && y.paused_at == 0 && y.expires_at == 1764413000 &&
		      y.qemu_pid == 77 && y.generation == 3 && y.net_slot == 7);
		store_sbx_release(&y);
	}
	mv.id = "sbx_nope";
	CHECK(store_sbx_move(t.s, &mv) == -ENOENT);
	mv.id = x.id;
	mv.to = "frozen";
	CHECK(store_sbx_move(t.s, &mv) == -EINVAL);
	mv = (struct store_sbx_move){ .id = x.id, .from = "running", .to = "lost",
				      .end_reason = "a reason that is far too long to fit" };
	CHECK(store_sbx_move(t.s, &mv) == -EINVAL);
	mv.net_slot = -2;
	mv.end_reason = "lost";
	CHECK(store_sbx_move(t.s, &mv) == -EINVAL);
	/* a move and its usage event go together, or neither */
	struct store_usage_event bad = { .sbx_id = x.id, .account = "", .state = "stopped" };
	mv = (struct store_sbx_move){ .id = x.id, .from = "running", .to = "stopped",
				      .end_reason = "killed", .usage = &bad };
	CHECK(store_sbx_move(t.s, &mv) == -EINVAL);
	struct store_usage_event good = { .sbx_id = x.id, .account = "alice", .state = "stopped",
					  .at_ms = 1764413001000 };
	mv.usage = &good;
	CHECK(store_sbx_move(t.s, &mv) == 0);
	CHECK(store_sbx_set_expiry(t.s, x.id, 1764412918) == 0);
	if (CHECK(store_sbx_get(t.s, x.id, &y) == 0)) {
		CHECK(!strcmp(y.state, "stopped") && !strcmp(y.end_reason, "killed"));
		CHECK(y.expires_at == 1764412918 && y.qemu_pid == 0 && y.net_slot == -1);
		store_sbx_release(&y);
	}
	/* running from the resume to the stop: 991 s */
	CHECK(store_usage_query(t.s, "alice", NULL, 0, 1764413002000, 1764413002000, &u) == 0 &&
	      u.running_s > 990.9 && u.running_s < 991.1);
	/* the policy ("" until set) */
	if (CHECK(store_sbx_get(t.s, x.id, &y) == 0)) {
		CHECK(!strcmp(y.network_json, ""));
		store_sbx_release(&y);
	}
	CHECK(store_sbx_set_policy(t.s, x.id, "{\"mode\":\"deny-all\"}") == 0);
	if (CHECK(store_sbx_get(t.s, x.id, &y) == 0)) {
		CHECK(!strcmp(y.network_json, "{\"mode\":\"deny-all\"}"));
		store_sbx_release(&y);
	}
	CHECK(store_sbx_set_policy(t.s, "sbx_nope", "") == -ENOENT);
	CHECK(store_sbx_set_policy(t.s, x.id, NULL) == -EINVAL);

	/* unknown ids */
	const char *unknown = "sbx_0000000000000000";
	CHECK(store_sbx_get(t.s, unknown, &y) == -ENOENT);
	CHECK(store_sbx_set_expiry(t.s, unknown, 1) == -ENOENT);
	CHECK(store_sbx_get(t.s, "", &y) == -ENOENT);

	/* invalid sandboxes are refused whole */
	struct store_sbx b;
	mk_sbx(&b, "sbx_bad", "alice", 1, "[\"not an object\"]");
	CHECK(store_sbx_insert(t.s, &b, NULL) == -EINVAL);
	b.metadata_json = "{\"n\": 1}";
	CHECK(store_sbx_insert(t.s, &b, NULL) == -EINVAL);
	b.metadata_json = "{\"a\": \"1\", \"a\": \"2\"}";
	CHECK(store_sbx_insert(t.s, &b, NULL) == -EINVAL);
	b.metadata_json = "{} trailing";
	CHECK(store_sbx_insert(t.s, &b, NULL) == -EINVAL);
	b.metadata_json = NULL;
	b.env_json = "{\"K\": null}";
	CHECK(store_sbx_insert(t.s, &b, NULL) == -EINVAL);
	b.env_json = NULL;
	memset(b.template, 'x', sizeof(b.template)); /* no terminating NUL */
	CHECK(store_sbx_insert(t.s, &b, NULL) == -EINVAL);
	mk_sbx(&b, "sbx_bad", "alice", 1, NULL);
	snprintf(b.state, sizeof(b.state), "bogus");
	CHECK(store_sbx_insert(t.s, &b, NULL) == -EINVAL);
	mk_sbx(&b, "sbx_bad", "", 1, NULL);
	CHECK(store_sbx_insert(t.s, &b, NULL) == -EINVAL);
	mk_sbx(&b, "sbx bad", "alice", 1, NULL);
	CHECK(store_sbx_insert(t.s, &b, NULL) == -EINVAL);
	CHECK(store_sbx_get(t.s, "sbx_bad", &y) == -ENOENT);

	/* NULL metadata and env are empty objects */
	mk_sbx(&b, "sbx_bad", "alice", 1, NULL);
	CHECK(store_sbx_insert(t.s, &b, NULL) == 0);
	if (CHECK(store_sbx_get(t.s, "sbx_bad", &y) == 0)) {
		CHECK(!strcmp(y.metadata_json, "{}") && !strcmp(y.env_json, "{}"));
		store_sbx_release(&y);
	}
	tdb_remove(&t);
}

static int sbx_newer(const struct store_sbx *a, const struct store_sbx *b)
{
	return a->created_at > b->created_at ||
	       (a->created_at == b->created_at && strcmp(a->id, b->id) > 0);
}

static void test_list_pagination(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	/* seven sandboxes, pairs sharing a created_at so the id breaks ties */
	for (int i = 0; i < 7; i++) {
		char id[32];
		snprintf(id, sizeof(id), "sbx_%016d", i);
		CHECK(insert(t.s, id, "alice", 1000 + i / 2, NULL) == 0);
	}
	const char *want[] = {"sbx_0000000000000006", "sbx_0000000000000005",
			      "sbx_0000000000000004", "sbx_0000000000000003",
			      "sbx_0000000000000002", "sbx_0000000000000001",
			      "sbx_0000000000000000"};
	char cursor[128] = "";
	size_t sizes[3] = {0}, seen = 0;
	int pages = 0;
	struct store_sbx prev = {0};
	for (;;) {
		struct store_sbx *xs;
		size_t n;
		int r = store_sbx_list(t.s, NULL, NULL, NULL, 0, 3, pages ? cursor : NULL, &xs, &n,
				       cursor, sizeof(cursor));
		if (!CHECK(r == 0) || !CHECK(pages < 3))
			break;
		sizes[pages++] = n;
		for (size_t i = 0; i < n; i++, seen++) {
			CHECK(seen < 7 && !strcmp(xs[i].id, want[seen]));
			if (seen)
				CHECK(sbx_newer(&prev, &xs[i]));
			prev.created_at = xs[i].created_at;
			memcpy(prev.id, xs[i].id, sizeof(prev.id));
		}
		store_sbx_free_list(xs, n);
		if (!cursor[0])
			break;
		CHECK(strchr(cursor, '.') == NULL && strstr(cursor, "sbx_") == NULL);
	}
	CHECK(pages == 3 && sizes[0] == 3 && sizes[1] == 3 && sizes[2] == 1 && seen == 7);

	/* exactly a page's worth: no next page */
	struct store_sbx *xs;
	size_t n;
	CHECK(store_sbx_list(t.s, NULL, NULL, NULL, 0, 7, NULL, &xs, &n, cursor, sizeof(cursor)) ==
		  0 &&
	      n == 7 && cursor[0] == '\0');
	store_sbx_free_list(xs, n);
	tdb_remove(&t);
}

static int list_count(struct store *s, const char *account, const char *state,
		      const struct store_kv *meta, size_t nmeta, const char *only_account)
{
	struct store_sbx *xs;
	size_t n;
	char cursor[128];
	if (store_sbx_list(s, account, state, meta, nmeta, 100, NULL, &xs, &n, cursor,
			   sizeof(cursor)))
		return -1;
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		if (only_account && strcmp(xs[i].account, only_account))
			bad = 1;
		if (state && strcmp(xs[i].state, state))
			bad = 1;
	}
	store_sbx_free_list(xs, n);
	return bad ? -2 : (int)n;
}

static void test_list_account_isolation(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	CHECK(insert(t.s, "sbx_a1", "alice", 1, NULL) == 0);
	CHECK(insert(t.s, "sbx_a2", "alice", 2, NULL) == 0);
	CHECK(insert(t.s, "sbx_b1", "bob", 3, NULL) == 0);
	CHECK(insert(t.s, "sbx_b2", "bob", 4, NULL) == 0);
	CHECK(insert(t.s, "sbx_b3", "bob", 5, NULL) == 0);
	CHECK(list_count(t.s, "alice", NULL, NULL, 0, "alice") == 2);
	CHECK(list_count(t.s, "bob", NULL, NULL, 0, "bob") == 3);
	CHECK(list_count(t.s, "carol", NULL, NULL, 0, NULL) == 0);
	CHECK(list_count(t.s, NULL, NULL, NULL, 0, NULL) == 5);
	/* a cursor from bob's listing does not reveal alice's sandboxes */
	struct store_sbx *xs;
	size_t n;
	char cursor[128];
	CHECK(store_sbx_list(t.s, "bob", NULL, NULL, 0, 1, NULL, &xs, &n, cursor, sizeof(cursor)) ==
		  0 &&
	      n == 1 && cursor[0]);
	store_sbx_free_list(xs, n);
	CHECK(store_sbx_list(t.s, "bob", NULL, NULL, 0, 100, cursor, &xs, &n, cursor,
			     sizeof(cursor)) == 0 &&
	      n == 2 && !strcmp(xs[0].account, "bob") && !strcmp(xs[1].account, "bob") &&
	      cursor[0] == '\0');
	store_sbx_free_list(xs, n);
	tdb_remove(&t);
}

static void test_list_state_filter(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	CHECK(insert(t.s, "sbx_1", "alice", 1, NULL) == 0);
	CHECK(insert(t.s, "sbx_2", "alice", 2, NULL) == 0);
	CHECK(insert(t.s, "sbx_3", "alice", 3, NULL) == 0);
	CHECK(move_to(t.s, "sbx_2", "stopped", "timeout") == 0);
	CHECK(move_to(t.s, "sbx_3", "lost", "lost") == 0);
	CHECK(list_count(t.s, "alice", "running", NULL, 0, "alice") == 1);
	CHECK(list_count(t.s, "alice", "stopped", NULL, 0, "alice") == 1);
	CHECK(list_count(t.s, NULL, "lost", NULL, 0, NULL) == 1);
	CHECK(list_count(t.s, NULL, NULL, NULL, 0, NULL) == 3);
	CHECK(list_count(t.s, NULL, "paused", NULL, 0, NULL) == 0);
	CHECK(list_count(t.s, NULL, "frozen", NULL, 0, NULL) == -1);
	tdb_remove(&t);
}

static void test_list_metadata_filter(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	/* a key with a quote and a dot, which a JSON path would misread */
	CHECK(insert(t.s, "sbx_1", "alice", 1, "{\"a\\\"b.c\": \"x\", \"user\": \"alice\"}") == 0);
	CHECK(insert(t.s, "sbx_2", "alice", 2, "{\"a\\\"b.c\": \"y\", \"user\": \"alice\"}") == 0);
	CHECK(insert(t.s, "sbx_3", "alice", 3, "{\"a\": {\"b.c\": \"x\"}}") == -EINVAL);
	CHECK(insert(t.s, "sbx_3", "alice", 3, "{\"a\\\"b\": \"x\", \"c\": \"x\"}") == 0);
	CHECK(insert(t.s, "sbx_4", "alice", 4, "{\"user\": \"alice'); --\"}") == 0);

	struct store_kv q1[] = {{"a\"b.c", "x"}};
	struct store_sbx *xs;
	size_t n;
	char cursor[128];
	CHECK(store_sbx_list(t.s, NULL, NULL, q1, 1, 10, NULL, &xs, &n, cursor, sizeof(cursor)) ==
		  0 &&
	      n == 1 && !strcmp(xs[0].id, "sbx_1"));
	store_sbx_free_list(xs, n);

	struct store_kv q2[] = {{"user", "alice"}};
	CHECK(list_count(t.s, "alice", NULL, q2, 1, "alice") == 2);
	struct store_kv q3[] = {{"user", "alice"}, {"a\"b.c", "y"}};
	CHECK(store_sbx_list(t.s, NULL, NULL, q3, 2, 10, NULL, &xs, &n, cursor, sizeof(cursor)) ==
		  0 &&
	      n == 1 && !strcmp(xs[0].id, "sbx_2"));
	store_sbx_free_list(xs, n);
	struct store_kv q4[] = {{"user", "alice'); --"}};
	CHECK(store_sbx_list(t.s, NULL, NULL, q4, 1, 10, NULL, &xs, &n, cursor, sizeof(cursor)) ==
		  0 &&
	      n == 1 && !strcmp(xs[0].id, "sbx_4"));
	store_sbx_free_list(xs, n);
	struct store_kv q5[] = {{"a\"b.c", "X"}}; /* exact, case included */
	CHECK(list_count(t.s, NULL, NULL, q5, 1, NULL) == 0);
	struct store_kv q6[] = {{"a", "x"}};
	CHECK(list_count(t.s, NULL, NULL, q6, 1, NULL) == 0);
	CHECK(list_count(t.s, "bob", NULL, q2, 1, NULL) == 0);
	tdb_remove(&t);
}

static int hexof(const char *raw, char *out, size_t outlen)
{
	size_t n = strlen(raw);
	if (outlen < 2 * n + 1)
		return -1;
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", (unsigned char)raw[i]);
	return 0;
}

static void test_list_bad_args(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	for (int i = 0; i < 3; i++) {
		char id[32];
		snprintf(id, sizeof(id), "sbx_%d", i);
		CHECK(insert(t.s, id, "alice", 100 + i, NULL) == 0);
	}
	struct store_sbx *xs;
	size_t n;
	char cursor[128], good[128];
	CHECK(store_sbx_list(t.s, NULL, NULL, NULL, 0, 0, NULL, &xs, &n, cursor, sizeof(cursor)) ==
	      -EINVAL);
	CHECK(store_sbx_list(t.s, NULL, NULL, NULL, 0, 101, NULL, &xs, &n, cursor,
			     sizeof(cursor)) == -EINVAL);
	CHECK(store_sbx_list(t.s, NULL, NULL, NULL, 0, 100, NULL, &xs, &n, cursor,
			     sizeof(cursor)) == 0 &&
	      n == 3);
	store_sbx_free_list(xs, n);

	CHECK(store_sbx_list(t.s, NULL, NULL, NULL, 0, 1, NULL, &xs, &n, good, sizeof(good)) == 0 &&
	      n == 1 && good[0]);
	store_sbx_free_list(xs, n);
	/* the cursor a call returned works */
	CHECK(store_sbx_list(t.s, NULL, NULL, NULL, 0, 5, good, &xs, &n, cursor, sizeof(cursor)) ==
		  0 &&
	      n == 2 && !strcmp(xs[0].id, "sbx_1"));
	store_sbx_free_list(xs, n);

	char h1[128], h2[128], h3[128], h4[128], h5[128], up[128], odd[160];
	hexof("0100.sbx_1", h1, sizeof(h1));		     /* leading zero */
	hexof("101.", h2, sizeof(h2));			     /* no id */
	hexof("101sbx_1", h3, sizeof(h3));		     /* no dot */
	hexof("-1.sbx_1", h4, sizeof(h4));		     /* negative */
	hexof("99999999999999999999.sbx_1", h5, sizeof(h5)); /* overflows */
	snprintf(up, sizeof(up), "%s", good);
	for (char *p = up; *p; p++)
		if (*p >= 'a' && *p <= 'f')
			*p = (char)(*p - 'a' + 'A');
	snprintf(odd, sizeof(odd), "%s0", good);
	char big[400];
	memset(big, '3', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	const char *bad[] = {"", "zz", "abc", "hello", h1, h2, h3, h4, h5, odd, big, "0031002e"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (!CHECK(store_sbx_list(t.s, NULL, NULL, NULL, 0, 10, bad[i], &xs, &n, cursor,
					  sizeof(cursor)) == -EINVAL))
			t_note("cursor %zu accepted: '%s'", i, bad[i]);
	}
	if (strcmp(up, good)) /* equal only if good had no a-f digit */
		CHECK(store_sbx_list(t.s, NULL, NULL, NULL, 0, 10, up, &xs, &n, cursor,
				     sizeof(cursor)) == -EINVAL);

	/* other bad arguments */
	struct store_kv nullkv[] = {{NULL, "x"}};
	CHECK(store_sbx_list(t.s, NULL, NULL, nullkv, 1, 10, NULL, &xs, &n, cursor,
			     sizeof(cursor)) == -EINVAL);
	CHECK(store_sbx_list(t.s, "", NULL, NULL, 0, 10, NULL, &xs, &n, cursor, sizeof(cursor)) ==
	      -EINVAL);
	/* a next_cursor buffer too small to hold the cursor */
	char small[8];
	CHECK(store_sbx_list(t.s, NULL, NULL, NULL, 0, 1, NULL, &xs, &n, small, sizeof(small)) ==
		  -ERANGE &&
	      xs == NULL && n == 0);
	tdb_remove(&t);
}

static void test_running(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	CHECK(insert(t.s, "sbx_a1", "alice", 1, NULL) == 0);
	CHECK(insert(t.s, "sbx_a2", "alice", 2, NULL) == 0);
	CHECK(insert(t.s, "sbx_a3", "alice", 3, NULL) == 0);
	CHECK(insert(t.s, "sbx_b1", "bob", 4, NULL) == 0);
	CHECK(store_sbx_count_running(t.s, "alice") == 3);
	CHECK(store_sbx_count_running(t.s, "bob") == 1);
	CHECK(store_sbx_count_running(t.s, "carol") == 0);
	CHECK(store_sbx_count_running(t.s, "") == -EINVAL);
	CHECK(move_to(t.s, "sbx_a2", "stopped", "killed") == 0);
	CHECK(store_sbx_count_running(t.s, "alice") == 2);

	struct store_sbx *xs;
	size_t n;
	CHECK(store_sbx_running(t.s, &xs, &n) == 0 && n == 3);
	int a1 = 0, a3 = 0, b1 = 0;
	for (size_t i = 0; i < n; i++) {
		CHECK(!strcmp(xs[i].state, "running"));
		a1 += !strcmp(xs[i].id, "sbx_a1");
		a3 += !strcmp(xs[i].id, "sbx_a3");
		b1 += !strcmp(xs[i].id, "sbx_b1");
	}
	CHECK(a1 == 1 && a3 == 1 && b1 == 1);
	store_sbx_free_list(xs, n);

	CHECK(move_to(t.s, "sbx_a1", "lost", "lost") == 0);
	CHECK(move_to(t.s, "sbx_a3", "stopped", "poweroff") == 0);
	CHECK(move_to(t.s, "sbx_b1", "stopped", "panic") == 0);
	CHECK(store_sbx_running(t.s, &xs, &n) == 0 && n == 0);
	store_sbx_free_list(xs, n);
	tdb_remove(&t);
}

#define THREADS		   4
#define INSERTS_PER_THREAD 200

struct worker {
	struct store *s;
	int no;
	int ok;
};

static void *insert_worker(void *arg)
{
	struct worker *w = arg;
	char account[16];
	snprintf(account, sizeof(account), "acct%d", w->no);
	for (int i = 0; i < INSERTS_PER_THREAD; i++) {
		char id[32];
		snprintf(id, sizeof(id), "sbx_%02d%014d", w->no, i);
		w->ok += insert(w->s, id, account, 1000 + i, "{\"k\":\"v\"}") == 0;
		/* reads interleaved with the writes */
		if (i % 50 == 0)
			w->ok -= store_sbx_count_running(w->s, account) < 0;
	}
	return NULL;
}

static void test_concurrent_inserts(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	pthread_t th[THREADS];
	struct worker w[THREADS];
	int started = 0;
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker){.s = t.s, .no = i};
		if (CHECK(pthread_create(&th[i], NULL, insert_worker, &w[i]) == 0))
			started++;
	}
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < THREADS; i++) {
		char account[16];
		snprintf(account, sizeof(account), "acct%d", i);
		CHECK(w[i].ok == INSERTS_PER_THREAD);
		CHECK(store_sbx_count_running(t.s, account) == INSERTS_PER_THREAD);
	}
	struct store_sbx *xs;
	size_t n;
	CHECK(store_sbx_running(t.s, &xs, &n) == 0 && n == THREADS * INSERTS_PER_THREAD);
	store_sbx_free_list(xs, n);
	struct store_kv kv[] = {{"k", "v"}};
	char cursor[128];
	CHECK(store_sbx_list(t.s, "acct2", NULL, kv, 1, 100, NULL, &xs, &n, cursor,
			     sizeof(cursor)) == 0 &&
	      n == 100 && cursor[0]);
	store_sbx_free_list(xs, n);
	store_close(t.s);
	t.s = NULL;
	char v[32];
	CHECK(raw_query(t.path, "SELECT count(*) FROM sandboxes", v, sizeof(v)) == 0 &&
	      atoi(v) == THREADS * INSERTS_PER_THREAD);
	CHECK(raw_query(t.path, "SELECT count(*) FROM sandbox_meta", v, sizeof(v)) == 0 &&
	      atoi(v) == THREADS * INSERTS_PER_THREAD);
	tdb_remove(&t);
}

/* Egress secrets: set, set again (the placeholder stays), per account,
 * deleted; a sandbox row keeps the names it holds. */
static void test_egress_secrets(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	struct store_secret x = { .account = "alice", .name = "API_KEY",
				  .placeholder = "cpuos-secret-00000000000000000000000000000001",
				  .value = "v1", .hosts_json = "[\"api.test\"]", .updated_at = 100 };
	int created = -1;
	CHECK(store_secret_put(t.s, &x, &created) == 0 && created == 1);
	snprintf(x.placeholder, sizeof(x.placeholder), "%s",
		 "cpuos-secret-00000000000000000000000000000002");
	x.value = "v2";
	x.allow_http = 1;
	x.updated_at = 200;
	CHECK(store_secret_put(t.s, &x, &created) == 0 && created == 0);
	snprintf(x.account, sizeof(x.account), "bob");
	snprintf(x.placeholder, sizeof(x.placeholder), "%s",
		 "cpuos-secret-00000000000000000000000000000001");
	CHECK(store_secret_put(t.s, &x, &created) < 0); /* a placeholder is one secret's */
	snprintf(x.placeholder, sizeof(x.placeholder), "%s",
		 "cpuos-secret-00000000000000000000000000000003");
	CHECK(store_secret_put(t.s, &x, &created) == 0 && created == 1);
	struct store_secret *xs = NULL;
	size_t n = 0;
	CHECK(store_secret_list(t.s, "alice", "API_KEY", &xs, &n) == 0 && n == 1 &&
	      !strcmp(xs[0].value, "v2") && xs[0].created_at == 100 && xs[0].updated_at == 200 &&
	      xs[0].allow_http == 1 &&
	      !strcmp(xs[0].placeholder, "cpuos-secret-00000000000000000000000000000001"));
	store_secret_free_list(xs, n);
	CHECK(store_secret_list(t.s, "alice", NULL, &xs, &n) == 0 && n == 1);
	store_secret_free_list(xs, n);
	struct store_secret one;
	CHECK(store_secret_get(t.s, "alice", "API_KEY", &one) == 0 && !strcmp(one.value, "v2"));
	store_secret_release(&one);
	CHECK(store_secret_get(t.s, "alice", "NOPE", &one) == -ENOENT);
	CHECK(store_secret_delete(t.s, "alice", "API_KEY") == 0);
	CHECK(store_secret_delete(t.s, "alice", "API_KEY") == -ENOENT);
	CHECK(store_secret_list(t.s, "alice", NULL, &xs, &n) == 0 && n == 0);
	store_secret_free_list(xs, n);
	CHECK(store_secret_list(t.s, "bob", NULL, &xs, &n) == 0 && n == 1); /* bob's stays */
	store_secret_free_list(xs, n);

	struct store_sbx row = { .id = "sbx_00000000000000aa", .account = "alice",
				 .template = "base", .state = "running", .vcpus = 1,
				 .memory_mb = 512, .disk_mb = 2048, .net_slot = -1,
				 .secrets_json = "[\"API_KEY\"]" };
	CHECK(store_sbx_insert(t.s, &row, NULL) == 0);
	struct store_sbx got;
	CHECK(store_sbx_get(t.s, row.id, &got) == 0 && !strcmp(got.secrets_json, "[\"API_KEY\"]"));
	store_sbx_release(&got);
	tdb_remove(&t);
}

/* A value a daemon from before stored plaintext is sealed in its row, once
 * (not over a value set again since), and after the scrub neither the
 * database nor its WAL holds the plaintext. */
static void test_old_secret_values_are_sealed_and_scrubbed(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	const char *plain = "sk-plaintext-from-an-older-daemon-0123456789";
	struct store_secret x = { .account = "alice", .name = "OLD",
				  .placeholder = "cpuos-secret-000000000000000000000000000000aa",
				  .value = (char *)plain, .hosts_json = "[\"api.test\"]",
				  .updated_at = 100 };
	CHECK(store_secret_put(t.s, &x, NULL) == 0);
	struct store_secret y = x;
	snprintf(y.name, sizeof(y.name), "NEW");
	snprintf(y.placeholder, sizeof(y.placeholder), "%s",
		 "cpuos-secret-000000000000000000000000000000bb");
	y.value = "sealed1:bmV3";
	y.sealed = 1;
	CHECK(store_secret_put(t.s, &y, NULL) == 0);
	struct store_secret *xs = NULL;
	size_t n = 0;
	CHECK(store_secret_list(t.s, NULL, NULL, &xs, &n) == 0 && n == 2 &&
	      !strcmp(xs[0].name, "NEW") && xs[0].sealed && !strcmp(xs[1].name, "OLD") &&
	      !xs[1].sealed && !strcmp(xs[1].value, plain));
	store_secret_free_list(xs, n);
	/* sealed once; a second time, or over another value, is -ENOENT */
	CHECK(store_secret_seal(t.s, "alice", "OLD", "other", "sealed1:eA==") == -ENOENT);
	CHECK(store_secret_seal(t.s, "alice", "OLD", plain, "sealed1:b2xk") == 0);
	CHECK(store_secret_seal(t.s, "alice", "OLD", plain, "sealed1:b2xk") == -ENOENT);
	CHECK(store_secret_seal(t.s, "alice", "NEW", "sealed1:bmV3", "sealed1:eA==") == -ENOENT);
	struct store_secret one;
	CHECK(store_secret_get(t.s, "alice", "OLD", &one) == 0 && one.sealed &&
	      !strcmp(one.value, "sealed1:b2xk") && one.updated_at == 100);
	store_secret_release(&one);
	/* Open still: the WAL keeps the frame the plaintext was written in,
	 * until the scrub. */
	char wal[300];
	snprintf(wal, sizeof(wal), "%s-wal", t.path);
	CHECK(file_has(t.path, plain) || file_has(wal, plain));
	CHECK(store_scrub(t.s) == 0);
	CHECK(file_has(t.path, "sealed1:b2xk") || file_has(wal, "sealed1:b2xk"));
	CHECK(!file_has(t.path, plain) && !file_has(wal, plain));
	store_close(t.s);
	t.s = NULL;
	tdb_remove(&t);
}

/* A pause in the object store: recorded only while the row is paused at
 * that generation, forgotten only if unchanged, listed once ended. */
static void test_stored_pauses(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	const char *id = "sbx_00000000000000aa";
	CHECK(insert(t.s, id, "alice", 1000, "{}") == 0);
	const char *rec = "0 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	/* Running: nothing to record. */
	CHECK(store_sbx_set_stored(t.s, id, 0, rec) == -ESTALE);
	struct store_sbx_move mv = { .id = id, .from = "running", .to = "paused", .paused_at = 1001 };
	CHECK(store_sbx_move(t.s, &mv) == 0);
	CHECK(store_sbx_set_stored(t.s, id, 1, rec) == -ESTALE); /* another generation */
	CHECK(store_sbx_set_stored(t.s, id, 0, rec) == 0);
	CHECK(store_sbx_set_stored(t.s, "sbx_none", 0, rec) == -ESTALE);
	CHECK(store_sbx_set_stored(t.s, id, 0, "") == -EINVAL);
	CHECK(store_sbx_set_stored(t.s, id, 0, "a\nb") == -EINVAL);
	struct store_sbx y;
	if (CHECK(store_sbx_get(t.s, id, &y) == 0)) {
		CHECK(!strcmp(y.stored, rec));
		store_sbx_release(&y);
	}
	struct store_sbx *xs;
	size_t n;
	CHECK(store_sbx_stored_ended(t.s, &xs, &n) == 0 && n == 0);
	mv = (struct store_sbx_move){ .id = id, .from = "paused", .to = "stopped",
				      .end_reason = "killed" };
	CHECK(store_sbx_move(t.s, &mv) == 0);
	CHECK(store_sbx_stored_ended(t.s, &xs, &n) == 0 && n == 1 && !strcmp(xs[0].stored, rec));
	store_sbx_free_list(xs, n);
	CHECK(store_sbx_clear_stored(t.s, id, "1 other") == -ESTALE);
	CHECK(store_sbx_clear_stored(t.s, id, rec) == 0);
	CHECK(store_sbx_stored_ended(t.s, &xs, &n) == 0 && n == 0);
	/* a record with the compat of its node, and one without (older) */
	unsigned g;
	char sha[65], compat[24], r2[160];
	CHECK(store_stored_split(rec, &g, sha, compat) == 0 && g == 0 && !strcmp(sha, rec + 2) &&
	      !compat[0]);
	snprintf(r2, sizeof(r2), "17 %s 00112233aabbccdd", rec + 2);
	CHECK(store_stored_split(r2, &g, sha, compat) == 0 && g == 17 &&
	      !strcmp(compat, "00112233aabbccdd"));
	const char *bad[] = { "", "0", "x 0123", "0 0123456789abcdef" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(store_stored_split(bad[i], &g, sha, compat) == -EINVAL);
	/* after a good generation and SHA-256 */
	const char *tail[] = { " ", " XYZ", " 00112233aabbccdd00112233", "a", " 0011 22" };
	for (size_t i = 0; i < sizeof(tail) / sizeof(tail[0]); i++) {
		snprintf(r2, sizeof(r2), "%s%s", rec, tail[i]);
		if (!CHECK(store_stored_split(r2, &g, sha, compat) == -EINVAL))
			t_note("accepted '%s'", r2);
	}
	tdb_remove(&t);
}

static int ckpt_insert(struct store *s, const char *id, const char *name, long long at)
{
	struct store_ckpt c = { .vcpus = 1, .memory_mb = 512, .disk_mb = 2048, .created_at = at };
	snprintf(c.id, sizeof(c.id), "%s", id);
	snprintf(c.name, sizeof(c.name), "%s", name);
	snprintf(c.account, sizeof(c.account), "alice");
	snprintf(c.sbx_id, sizeof(c.sbx_id), "sbx_00000000000000aa");
	snprintf(c.template, sizeof(c.template), "base");
	snprintf(c.dir, sizeof(c.dir), "/state/checkpoints/%s", id);
	return store_ckpt_insert(s, &c);
}

/* A checkpoint in the object store: listed until stored, recorded once,
 * and a stored one deleted goes to the trash (one that was not does not)
 * until its objects are gone. */
static void test_stored_checkpoints(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	const char *a = "ckp_00000000000000aa", *b = "ckp_00000000000000bb";
	const char *rec = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef "
			  "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
	CHECK(ckpt_insert(t.s, a, "one", 1000) == 0 && ckpt_insert(t.s, b, "two", 1001) == 0);
	struct store_ckpt *cs;
	size_t n;
	CHECK(store_ckpt_unstored(t.s, &cs, &n) == 0 && n == 2 && !strcmp(cs[0].id, a) &&
	      !cs[0].stored[0]);
	store_ckpt_free_list(cs, n);
	CHECK(store_ckpt_set_stored(t.s, a, rec) == 0);
	CHECK(store_ckpt_set_stored(t.s, a, rec) == -ENOENT); /* once */
	CHECK(store_ckpt_set_stored(t.s, "ckp_none", rec) == -ENOENT);
	CHECK(store_ckpt_set_stored(t.s, b, "a\nb") == -EINVAL);
	CHECK(store_ckpt_unstored(t.s, &cs, &n) == 0 && n == 1 && !strcmp(cs[0].id, b));
	store_ckpt_free_list(cs, n);
	struct store_ckpt c;
	if (CHECK(store_ckpt_get(t.s, "alice", "one", &c) == 0)) {
		CHECK(!strcmp(c.stored, rec));
		store_ckpt_release(&c);
	}
	char **trash;
	CHECK(store_ckpt_trash(t.s, &trash, &n) == 0 && n == 0);
	free(trash);
	CHECK(store_ckpt_delete(t.s, b) == 0);
	CHECK(store_ckpt_trash(t.s, &trash, &n) == 0 && n == 0);
	free(trash);
	CHECK(store_ckpt_delete(t.s, a) == 0 && store_ckpt_delete(t.s, a) == -ENOENT);
	CHECK(store_ckpt_get(t.s, "alice", a, &c) == -ENOENT);
	CHECK(store_ckpt_trash(t.s, &trash, &n) == 0 && n == 1 && !strcmp(trash[0], rec));
	for (size_t i = 0; i < n; i++)
		free(trash[i]);
	free(trash);
	CHECK(store_ckpt_trash_done(t.s, rec) == 0 && store_ckpt_trash_done(t.s, rec) == -ENOENT);
	CHECK(store_ckpt_trash(t.s, &trash, &n) == 0 && n == 0);
	free(trash);
	tdb_remove(&t);
}

/* PostgreSQL's schema: made once, at the version SQLite's is at, kept on
 * reopening; a version from a later cpuosd is refused, not touched. */
static void test_pg_schema_and_reopen(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	char v[64], err[256];
	CHECK(raw_query(t.path, "SELECT version FROM cpuos_schema WHERE program = 'cpuosd'", v,
			sizeof(v)) == 0 &&
	      !strcmp(v, "16"));
	CHECK(insert(t.s, "sbx_0000000000000001", "alice", 1000, "{}") == 0);
	store_close(t.s);
	t.s = NULL;
	CHECK(store_open(t.path, &t.s, err, sizeof(err)) == 0);
	struct store_sbx x;
	CHECK(store_sbx_get(t.s, "sbx_0000000000000001", &x) == 0 && x.created_at == 1000);
	store_sbx_release(&x);
	store_close(t.s);
	t.s = NULL;
	CHECK(raw_query(t.path, "UPDATE cpuos_schema SET version = 17", v, sizeof(v)) == 0);
	err[0] = '\0';
	CHECK(store_open(t.path, &t.s, err, sizeof(err)) == -EPROTO && t.s == NULL);
	CHECK(strstr(err, "schema version 17") != NULL);
	tdb_remove(&t);
}

/* Processes that open one new PostgreSQL database at once (API replicas
 * starting together) migrate it once, and all of them open it. */
static void test_pg_parallel_first_opens(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	store_close(t.s);
	t.s = NULL;
	CHECK(raw_query(t.path, "DROP SCHEMA public CASCADE; CREATE SCHEMA public", NULL, 0) == 0);
	pid_t kids[4];
	for (int i = 0; i < 4; i++) {
		if ((kids[i] = fork()) == 0) {
			struct store *s;
			char err[256];
			_exit(store_open(t.path, &s, err, sizeof(err)) == 0 ? 0 : 1);
		}
	}
	for (int i = 0; i < 4; i++) {
		int status = -1;
		CHECK(kids[i] > 0 && waitpid(kids[i], &status, 0) == kids[i] &&
		      WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	char v[64];
	CHECK(raw_query(t.path, "SELECT count(*) FROM cpuos_schema", v, sizeof(v)) == 0 &&
	      !strcmp(v, "1"));
	tdb_remove(&t);
}

/* A single host's SQLite state copied whole into an empty PostgreSQL
 * database: keys (in the order made), sandboxes and their metadata,
 * checkpoints, the trash, usage (its numbers kept, the next one after
 * them) and secrets, all read back the same; a second copy is refused. */
static void test_copy_sqlite_to_pg(void)
{
	struct tdb a, b;
	if (tdb_open(&a))
		return;
	on_pg = 1;
	if (tdb_open(&b)) {
		tdb_remove(&a);
		return;
	}
	char secret[3][STORE_KEY_SECRET_LEN + 1];
	struct store_key k[3];
	const char *names[] = { "k1", "k2", "k3" };
	for (int i = 0; i < 3; i++)
		CHECK(store_key_create(a.s, names[i], "alice", secret[i], &k[i]) == 0);
	CHECK(insert(a.s, "sbx_0000000000000001", "alice", 1000, "{\"user\":\"x'y\"}") == 0);
	CHECK(insert(a.s, "sbx_0000000000000002", "bob", 1001, "{}") == 0);
	struct store_usage_event ev = { .sbx_id = "sbx_0000000000000001", .account = "alice",
					.state = "running", .vcpus = 2, .memory_mb = 1024,
					.at_ms = 1000000 };
	CHECK(store_usage_add(a.s, &ev) == 0);
	struct store_sbx_move mv = { .id = "sbx_0000000000000001", .from = "running",
				     .to = "paused", .paused_at = 1010, .timeout_left_s = 30 };
	struct store_usage_event pe = ev;
	pe.state = "paused";
	pe.storage_bytes = 1 << 30;
	pe.at_ms = 1010000;
	mv.usage = &pe;
	CHECK(store_sbx_move(a.s, &mv) == 0);
	CHECK(ckpt_insert(a.s, "ckp_00000000000000aa", "one", 1005) == 0);
	struct store_secret sx = { .account = "alice", .name = "TOKEN",
				   .placeholder = "cpuos-secret-00000000000000000000000000000009",
				   .value = "sealed1:dmFs", .hosts_json = "[\"api.test\"]",
				   .sealed = 1, .updated_at = 100 };
	CHECK(store_secret_put(a.s, &sx, NULL) == 0);

	struct store_copied n;
	char err[256];
	CHECK(store_copy(a.s, b.s, "node-1", &n, err, sizeof(err)) == 0);
	CHECK(n.accounts == 2 && n.keys == 3 && n.sandboxes == 2 && n.checkpoints == 1 &&
	      n.usage_events == 2 && n.secrets == 1);
	struct store_key *ks;
	size_t nk;
	CHECK(store_key_list(b.s, &ks, &nk) == 0 && nk == 3 && !strcmp(ks[0].name, "k1") &&
	      !strcmp(ks[2].name, "k3") && !strcmp(ks[1].id, k[1].id));
	free(ks);
	char account[128];
	CHECK(store_key_lookup(b.s, secret[2], account, sizeof(account)) == 0 &&
	      !strcmp(account, "alice"));
	struct store_sbx x;
	if (CHECK(store_sbx_get(b.s, "sbx_0000000000000001", &x) == 0)) {
		CHECK(!strcmp(x.state, "paused") && x.paused_at == 1010 && x.timeout_left_s == 30 &&
		      !strcmp(x.metadata_json, "{\"user\":\"x'y\"}") && x.vcpus == 2 &&
		      !strcmp(x.node, "node-1"));
		store_sbx_release(&x);
	}
	struct store_kv q[] = { { "user", "x'y" } };
	struct store_sbx *xs;
	size_t nx;
	char cursor[128];
	CHECK(store_sbx_list(b.s, NULL, NULL, q, 1, 10, NULL, &xs, &nx, cursor, sizeof(cursor)) == 0 &&
	      nx == 1);
	store_sbx_free_list(xs, nx);
	struct store_ckpt c;
	CHECK(store_ckpt_get(b.s, "alice", "one", &c) == 0);
	store_ckpt_release(&c);
	struct store_usage ua, ub;
	CHECK(store_usage_query(a.s, "alice", NULL, 0, 2000000, 2000000, &ua) == 0);
	CHECK(store_usage_query(b.s, "alice", NULL, 0, 2000000, 2000000, &ub) == 0);
	CHECK(ua.running_s == 10 && ub.running_s == ua.running_s && ub.vcpu_s == ua.vcpu_s &&
	      ub.paused_gib_s == ua.paused_gib_s && ub.sandboxes == 1);
	ev.at_ms = 1020000; /* numbered after the copied ones */
	CHECK(store_usage_add(b.s, &ev) == 0);
	struct store_secret sy;
	CHECK(store_secret_get(b.s, "alice", "TOKEN", &sy) == 0 && sy.sealed &&
	      !strcmp(sy.value, "sealed1:dmFs"));
	store_secret_release(&sy);
	CHECK(store_copy(a.s, b.s, NULL, &n, err, sizeof(err)) == -EEXIST && strstr(err, "already"));
	tdb_remove(&b);
	tdb_remove(&a);
}

/* A metadata value as long as the API takes (4096 bytes) is kept and
 * found, on either back end. */
static void test_long_metadata_value(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	static char value[4097], meta[4200];
	for (size_t i = 0; i < 4096; i++)
		value[i] = "0123456789abcdef"[(i * 7919 + i / 16) % 16];
	snprintf(meta, sizeof(meta), "{\"long\":\"%s\"}", value);
	CHECK(insert(t.s, "sbx_0000000000000001", "alice", 1000, meta) == 0);
	struct store_kv q[] = { { "long", value } };
	struct store_sbx *xs;
	size_t n;
	char cursor[128];
	CHECK(store_sbx_list(t.s, NULL, NULL, q, 1, 10, NULL, &xs, &n, cursor, sizeof(cursor)) == 0 &&
	      n == 1 && strlen(xs[0].metadata_json) == strlen(meta));
	store_sbx_free_list(xs, n);
	tdb_remove(&t);
}

static struct store *open_as(struct tdb *t, const char *node, long long lease_until_ms,
			     long long *epoch)
{
	struct store *s = NULL;
	char err[256];
	if (!CHECK(store_open(t->path, &s, err, sizeof(err)) == 0))
		return NULL;
	struct store_node n = { .lease_until_ms = lease_until_ms, .joined_at = 1, .vcpus = 2,
				.memory_mb = 4096 };
	snprintf(n.name, sizeof(n.name), "%s", node);
	snprintf(n.url, sizeof(n.url), "http://%s.test:7070", node);
	CHECK(store_node_join(s, &n, epoch) == 0);
	return s;
}

static int move(struct store *s, const char *id, const char *from, const char *to)
{
	struct store_sbx_move mv = { .id = id, .from = from, .to = to, .paused_at = 5,
				     .end_reason = "killed", .net_slot = -1 };
	return store_sbx_move(s, &mv);
}

/* Daemons sharing one database as nodes: each writes only the rows it
 * owns at its epoch; one whose lease ran out is declared down, its running
 * sandboxes lost, and what it still writes changes nothing; back, it
 * joins at a new epoch and owns its paused sandboxes again. */
static void test_nodes_and_fencing(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	long long ea, eb;
	struct store *a = open_as(&t, "node-a", 1000, &ea);
	struct store *b = open_as(&t, "node-b", 1000000, &eb);
	if (!a || !b)
		goto out;
	CHECK(ea == 1 && eb == 1 && !strcmp(store_node_name(a), "node-a"));
	CHECK(store_node_join(a, &(struct store_node){ .name = "bad name", .lease_until_ms = 1 },
			      &ea) == -EINVAL);
	CHECK(insert(a, "sbx_00000000000000a1", "alice", 100, "{}") == 0); /* runs */
	CHECK(insert(a, "sbx_00000000000000a2", "alice", 101, "{}") == 0);
	CHECK(move(a, "sbx_00000000000000a2", "running", "paused") == 0);
	const char *rec = "0 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	CHECK(store_sbx_set_stored(a, "sbx_00000000000000a2", 0, rec) == 0);
	CHECK(insert(a, "sbx_00000000000000a4", "alice", 101, "{}") == 0); /* paused, not stored */
	CHECK(move(a, "sbx_00000000000000a4", "running", "paused") == 0);
	CHECK(insert(a, "sbx_00000000000000a5", "alice", 101, "{}") == 0);
	CHECK(move(a, "sbx_00000000000000a5", "running", "paused") == 0);
	CHECK(insert(b, "sbx_00000000000000b1", "alice", 102, "{}") == 0);
	/* A's own while A lives, even paused and stored. */
	CHECK(store_sbx_take(b, "sbx_00000000000000a2", rec, "/b/vms/sbx_00000000000000a2") ==
	      -ESTALE);
	struct store_sbx x;
	if (CHECK(store_sbx_get(b, "sbx_00000000000000a1", &x) == 0)) {
		CHECK(!strcmp(x.node, "node-a"));
		store_sbx_release(&x);
	}
	/* Each sees its own at a restart, and changes only its own. */
	struct store_sbx *xs;
	size_t n;
	CHECK(store_sbx_running(b, &xs, &n) == 0 && n == 1 && !strcmp(xs[0].id, "sbx_00000000000000b1"));
	store_sbx_free_list(xs, n);
	CHECK(store_sbx_paused(b, &xs, &n) == 0 && n == 0);
	free(xs);
	CHECK(move(b, "sbx_00000000000000a1", "running", "stopped") == -ESTALE);
	CHECK(store_sbx_set_expiry(b, "sbx_00000000000000a1", 5) == -ENOENT);
	CHECK(store_node_renew(a, 2000) == 0);

	/* A's lease runs out: declared down once, by anyone but itself (it
	 * learns it from its renewal). */
	CHECK(store_nodes_reap(b, 1999) == 0);
	CHECK(store_nodes_reap(a, 2500) == 0);
	CHECK(store_nodes_reap(b, 2001) == 1 && store_nodes_reap(b, 2002) == 0);
	if (CHECK(store_sbx_get(b, "sbx_00000000000000a1", &x) == 0)) {
		CHECK(!strcmp(x.state, "lost") && !strcmp(x.end_reason, "node_lost"));
		store_sbx_release(&x);
	}
	if (CHECK(store_sbx_get(b, "sbx_00000000000000a2", &x) == 0)) {
		CHECK(!strcmp(x.state, "paused") && !strcmp(x.node, "node-a"));
		store_sbx_release(&x);
	}
	/* A row a dying node changed as it was declared down (resumed, here
	 * by hand) is caught at the next pass. */
	char v[32];
	CHECK(raw_query(t.path, "UPDATE sandboxes SET state = 'running' "
				"WHERE id = 'sbx_00000000000000a5'", v, sizeof(v)) == 0);
	CHECK(store_nodes_reap(b, 2003) == 0);
	if (CHECK(store_sbx_get(b, "sbx_00000000000000a5", &x) == 0)) {
		CHECK(!strcmp(x.state, "lost") && !strcmp(x.end_reason, "node_lost"));
		store_sbx_release(&x);
	}
	/* Fenced: A, still running somewhere, writes nothing. */
	CHECK(store_node_renew(a, 3000) == -ESTALE);
	CHECK(move(a, "sbx_00000000000000a2", "paused", "running") == -ESTALE);
	CHECK(store_sbx_set_expiry(a, "sbx_00000000000000a2", 5) == -ENOENT);
	CHECK(insert(a, "sbx_00000000000000a3", "alice", 103, "{}") == -ESTALE);
	struct store_node *ns;
	CHECK(store_node_list(b, &ns, &n) == 0 && n == 2 && !strcmp(ns[0].name, "node-a") &&
	      !strcmp(ns[0].state, "down") && ns[0].epoch == 2 && !strcmp(ns[1].state, "ready"));
	free(ns);
	/* A drain outlives being declared down and joining again. */
	CHECK(store_node_drain(b, "node-a", 1) == 0 && store_node_drain(b, "nowhere", 1) == -ENOENT);
	CHECK(store_node_list(b, &ns, &n) == 0 && n == 2 && ns[0].drained &&
	      !strcmp(ns[0].state, "down"));
	free(ns);

	/* A down, its stored pause is anyone's to take (once, as it was). */
	CHECK(store_sbx_take(b, "sbx_00000000000000a2", "1 other", "/b/vms/x") == -ESTALE);
	CHECK(store_sbx_take(b, "sbx_00000000000000a2", rec, "/b/vms/sbx_00000000000000a2") == 0);
	CHECK(store_sbx_take(b, "sbx_00000000000000a2", rec, "/b/vms/sbx_00000000000000a2") ==
	      -ESTALE);
	if (CHECK(store_sbx_get(b, "sbx_00000000000000a2", &x) == 0)) {
		CHECK(!strcmp(x.node, "node-b") && !strcmp(x.run_dir, "/b/vms/sbx_00000000000000a2"));
		store_sbx_release(&x);
	}

	/* Back: a new epoch; what it still owns is its own again, what was
	 * taken is not. */
	CHECK(insert(b, "sbx_00000000000000b2", "alice", 104, "{}") == 0);
	long long ea2;
	struct store *a2 = open_as(&t, "node-a", 5000, &ea2);
	if (a2) {
		CHECK(ea2 == 3);
		struct store_node me;
		CHECK(store_node_get(a2, "node-a", &me) == 0 && !strcmp(me.state, "draining"));
		CHECK(move(a2, "sbx_00000000000000a4", "paused", "running") == 0);
		CHECK(move(a2, "sbx_00000000000000a2", "paused", "running") == -ESTALE);
		CHECK(move(b, "sbx_00000000000000a2", "paused", "running") == 0);
		CHECK(move(a2, "sbx_00000000000000b2", "running", "stopped") == -ESTALE);
		CHECK(store_node_renew(a2, 6000) == 0);
		store_close(a2);
	}
	/* Usage: each lost one ran until it was declared lost (a1 at the
	 * first pass, a5 at the second), once. */
	CHECK(raw_query(t.path, "SELECT count(*) || ' ' || min(at_ms) || ' ' || max(at_ms) FROM "
				"usage_events WHERE state = 'stopped'",
			v, sizeof(v)) == 0 &&
	      !strcmp(v, "2 2001 2003"));
out:
	store_close(a);
	store_close(b);
	tdb_remove(&t);
}

static int reserve(struct store *s, const char *id, const char *account, const char *node,
		   unsigned vcpus, unsigned memory_mb, long long until_ms,
		   const struct store_quota *q, long long now_ms)
{
	struct store_rsv x = { .vcpus = vcpus, .memory_mb = memory_mb, .until_ms = until_ms };
	snprintf(x.id, sizeof(x.id), "%s", id);
	snprintf(x.account, sizeof(x.account), "%s", account);
	snprintf(x.node, sizeof(x.node), "%s", node);
	char err[256];
	return store_reserve(s, &x, q, now_ms, err, sizeof(err));
}

/* A create under way of 128 MB on node, that may write disk_mb there,
 * where max_starting may be under way at once. */
static int reserve_disk(struct store *s, const char *id, const char *node,
			unsigned long long disk_mb, unsigned max_starting)
{
	struct store_rsv x = { .vcpus = 1, .memory_mb = 128, .disk_mb = disk_mb,
			       .until_ms = 5000, .max_starting = max_starting };
	snprintf(x.id, sizeof(x.id), "%s", id);
	snprintf(x.account, sizeof(x.account), "erin");
	snprintf(x.node, sizeof(x.node), "%s", node);
	struct store_quota q = { .max_sandboxes = 100 };
	char err[256];
	int r = store_reserve(s, &x, &q, 1000, err, sizeof(err));
	if (r == -EAGAIN && !strstr(err, node))
		fprintf(stderr, "# the refusal does not name the node: %s\n", err);
	return r;
}

/* What an API replica places by: the nodes that may take a sandbox with
 * what they hold, and reservations counted with running sandboxes against
 * an account's quotas and a node's memory; dropped when released or past
 * their time. */
static void test_placement(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	long long ea, eb;
	struct store *a = open_as(&t, "node-a", 1000000, &ea);
	struct store *b = open_as(&t, "node-b", 1000000, &eb);
	struct store *api = NULL;
	char err[256], v[64];
	if (!a || !b || !CHECK(store_open(t.path, &api, err, sizeof(err)) == 0))
		goto out;
	CHECK(raw_query(t.path, "UPDATE nodes SET memory_mb = 2048 WHERE name = 'node-b'", v,
			sizeof(v)) == 0);
	CHECK(insert(a, "sbx_00000000000000a1", "alice", 100, "{}") == 0); /* 2 vCPUs, 1024 MB */
	/* what a node offers: written by it alone, at its epoch; read with
	 * its load and in its row */
	CHECK(store_node_offers(a, "00112233aabbccdd", "base:2,python:1", "base,python", 9000) == 0);
	CHECK(store_node_offers(api, "", "", "", -1) == -EINVAL); /* no node */
	CHECK(store_node_offers(a, "", "bad text\n", "", -1) == -EINVAL);
	CHECK(store_node_offers(a, "", "", "", -2) == -EINVAL);
	struct store_node row;
	if (CHECK(store_node_get(api, "node-b", &row) == 0))
		CHECK(!row.compat[0] && !row.warm[0] && !row.held[0] && row.disk_free_mb == -1);
	if (CHECK(store_node_get(api, "node-a", &row) == 0))
		CHECK(row.disk_free_mb == 9000);
	struct store_load *l;
	size_t n;
	if (CHECK(store_node_loads(api, 1000, 0, &l, &n) == 0 && n == 2)) {
		CHECK(!strcmp(l[0].compat, "00112233aabbccdd") && !strcmp(l[0].warm, "base:2,python:1") &&
		      !strcmp(l[0].held, "base,python") && !l[1].warm[0]);
		CHECK(!strcmp(l[0].name, "node-a") && l[0].running == 1 && l[0].held_vcpus == 2 &&
		      l[0].held_memory_mb == 1024 && l[0].memory_mb == 4096 &&
		      !strcmp(l[0].url, "http://node-a.test:7070"));
		CHECK(!strcmp(l[1].name, "node-b") && l[1].running == 0 && l[1].held_memory_mb == 0);
		CHECK(l[0].disk_free_mb == 9000 && l[1].disk_free_mb == -1 && l[0].starting == 0 &&
		      l[0].starting_disk_mb == 0);
		free(l);
	}
	/* a sample: that many nodes, each with its loads */
	for (int i = 0; i < 8; i++)
		if (CHECK(store_node_loads(api, 1000, 1, &l, &n) == 0 && n == 1)) {
			CHECK(!strcmp(l[0].name, "node-a") ? l[0].running == 1 : l[0].running == 0);
			free(l);
		}
	struct store_quota q = { .max_sandboxes = 2 };
	/* alice: one running, one reserved, and no more */
	CHECK(reserve(api, "rsv_1", "alice", "node-a", 1, 512, 5000, &q, 1000) == 0);
	CHECK(reserve(api, "rsv_2", "alice", "node-b", 1, 512, 5000, &q, 1000) == -EDQUOT);
	if (CHECK(store_node_loads(api, 1000, 0, &l, &n) == 0 && n == 2)) {
		CHECK(l[0].held_vcpus == 3 && l[0].held_memory_mb == 1536 && l[0].running == 1);
		free(l);
	}
	/* released: room again; a clash of ids is refused */
	CHECK(store_unreserve(api, "rsv_1") == 0 && store_unreserve(api, "rsv_1") == 0);
	CHECK(reserve(api, "rsv_2", "alice", "node-b", 1, 512, 5000, &q, 1000) == 0);
	CHECK(reserve(api, "rsv_2", "bob", "node-b", 1, 512, 5000, &q, 1000) == -EEXIST);
	/* a node's memory: bob fits node-b's 2048 MB once (512 held by alice) */
	CHECK(reserve(api, "rsv_3", "bob", "node-b", 1, 1536, 5000, &q, 1000) == 0);
	CHECK(reserve(api, "rsv_4", "bob", "node-b", 1, 128, 5000, &q, 1000) == -EAGAIN);
	/* the account's vCPUs and memory */
	struct store_quota small = { .max_sandboxes = 10, .vcpus = 2, .memory_mb = 4096 };
	CHECK(reserve(api, "rsv_5", "carol", "node-a", 3, 128, 5000, &small, 1000) == -EDQUOT);
	CHECK(reserve(api, "rsv_5", "carol", "node-a", 1, 8192, 5000, &small, 1000) == -EDQUOT);
	/* a node's free disk, less what its creates under way may write,
	 * and how many it may start at once */
	CHECK(reserve_disk(api, "rsv_d1", "node-a", 5000, 0) == 0);
	CHECK(reserve_disk(api, "rsv_d2", "node-a", 4001, 0) == -EAGAIN);
	CHECK(reserve_disk(api, "rsv_d2", "node-a", 4000, 2) == 0);
	CHECK(reserve_disk(api, "rsv_d3", "node-a", 0, 2) == -EAGAIN); /* two under way */
	CHECK(reserve_disk(api, "rsv_d3", "node-a", 0, 3) == 0);
	if (CHECK(store_node_loads(api, 1000, 0, &l, &n) == 0 && n == 2)) {
		CHECK(l[0].starting == 3 && l[0].starting_disk_mb == 9000);
		CHECK(l[1].starting == 2 && l[1].starting_disk_mb == 0); /* rsv_2, rsv_3 */
		free(l);
	}
	CHECK(store_unreserve(api, "rsv_d1") == 0);
	CHECK(reserve_disk(api, "rsv_d4", "node-a", 5000, 3) == 0);
	for (int i = 2; i <= 4; i++) {
		char id[16];
		snprintf(id, sizeof(id), "rsv_d%d", i);
		CHECK(store_unreserve(api, id) == 0);
	}
	/* past their time, reservations count no more and are dropped */
	CHECK(reserve(api, "rsv_6", "bob", "node-b", 1, 128, 6000, &q, 5000) == 0);
	CHECK(raw_query(t.path, "SELECT count(*) FROM reservations", v, sizeof(v)) == 0 &&
	      !strcmp(v, "1"));
	/* a node drained, down or past its lease takes none */
	CHECK(store_node_drain(api, "node-b", 1) == 0);
	CHECK(reserve(api, "rsv_7", "dave", "node-b", 1, 128, 9000, &q, 5000) == -ESTALE);
	if (CHECK(store_node_loads(api, 5000, 0, &l, &n) == 0 && n == 1)) {
		CHECK(!strcmp(l[0].name, "node-a"));
		free(l);
	}
	CHECK(reserve(api, "rsv_7", "dave", "node-a", 1, 128, 2000000, &q, 1000001) == -ESTALE);
	CHECK(reserve(api, "rsv_7", "dave", "nowhere", 1, 128, 9000, &q, 5000) == -ESTALE);
	CHECK(reserve(api, "", "dave", "node-a", 1, 128, 9000, &q, 5000) == -EINVAL);
	/* a checkpoint needs what its node restores */
	char compat[24];
	CHECK(ckpt_insert(a, "ckp_00000000000000c1", "c1", 5) == 0);
	CHECK(store_ckpt_compat(api, "alice", "c1", compat) == 0 &&
	      !strcmp(compat, "00112233aabbccdd"));
	CHECK(store_ckpt_compat(api, "bob", "c1", compat) == -ENOENT); /* another's */
	CHECK(store_ckpt_compat(api, "alice", "nope", compat) == -ENOENT && !compat[0]);
	/* a join starts what it offers anew; a fenced node writes nothing */
	if (CHECK(store_node_get(api, "node-a", &row) == 0))
		CHECK(!strcmp(row.compat, "00112233aabbccdd") && !strcmp(row.held, "base,python"));
	long long e2;
	struct store *a2 = open_as(&t, "node-a", 1000000, &e2);
	if (a2 && CHECK(store_node_get(api, "node-a", &row) == 0))
		CHECK(!row.compat[0] && !row.warm[0] && !row.held[0]);
	CHECK(store_node_offers(a, "x", "", "", 1) == -ESTALE);
	store_close(a2);
out:
	store_close(api);
	store_close(a);
	store_close(b);
	tdb_remove(&t);
}

/* An account's templates: names unique per account, a failed build
 * giving way, the finish of a build, the bytes held, what uses one. */
static void test_templates(void)
{
	struct tdb t;
	if (tdb_open(&t))
		return;
	struct store_tpl a = { .id = "tpl_00000000000000aa", .account = "alice", .name = "web",
			       .source = "127.0.0.1:5000/web:1", .state = "building",
			       .created_ms = 1000 };
	struct store_tpl b = a, got;
	CHECK(store_tpl_insert(t.s, &a) == 0);
	snprintf(b.id, sizeof(b.id), "tpl_00000000000000bb");
	CHECK(store_tpl_insert(t.s, &b) == -EEXIST); /* alice's "web" is taken */
	snprintf(b.account, sizeof(b.account), "bob");
	CHECK(store_tpl_insert(t.s, &b) == 0); /* bob's is his own */
	struct store_tpl bad = a;
	snprintf(bad.state, sizeof(bad.state), "odd");
	CHECK(store_tpl_insert(t.s, &bad) == -EINVAL);
	CHECK(store_tpl_by_name(t.s, "alice", "web", &got) == 0 && !strcmp(got.id, a.id));
	CHECK(store_tpl_by_name(t.s, "carol", "web", &got) == -ENOENT);
	CHECK(store_tpl_by_source(t.s, "bob", "127.0.0.1:5000/web:1", &got) == 0 &&
	      !strcmp(got.id, b.id));
	/* of two pulls of one reference, the one building (then ready), though older */
	struct store_tpl a2 = a;
	snprintf(a2.id, sizeof(a2.id), "tpl_00000000000000a2");
	snprintf(a2.name, sizeof(a2.name), "web-again");
	a2.created_ms = 2000;
	CHECK(store_tpl_insert(t.s, &a2) == 0 && store_tpl_finish(t.s, a2.id, "failed", "x", 0) == 0);
	CHECK(store_tpl_by_source(t.s, "alice", a.source, &got) == 0 && !strcmp(got.id, a.id));
	CHECK(store_tpl_finish(t.s, a.id, "ready", NULL, 5 << 20) == 0);
	CHECK(store_tpl_by_source(t.s, "alice", a.source, &got) == 0 && !strcmp(got.id, a.id));
	CHECK(store_tpl_delete(t.s, a2.id) == 0);
	CHECK(store_tpl_finish(t.s, a.id, "failed", "again", 0) == -ENOENT); /* not building */
	CHECK(store_tpl_finish(t.s, b.id, "failed", "no such image", 0) == 0);
	long long used = -1;
	CHECK(store_tpl_usage(t.s, "alice", &used) == 0 && used == 5 << 20);
	CHECK(store_tpl_usage(t.s, "bob", &used) == 0 && used == 0);
	CHECK(store_tpl_get(t.s, b.id, &got) == 0 && !strcmp(got.state, "failed") &&
	      !strcmp(got.error, "no such image"));
	/* bob's failed one gives way to a new build of that name */
	struct store_tpl c = b;
	snprintf(c.id, sizeof(c.id), "tpl_00000000000000cc");
	CHECK(store_tpl_insert(t.s, &c) == 0 && store_tpl_get(t.s, b.id, &got) == -ENOENT);
	CHECK(store_tpl_building(t.s, "bob") == 1 && store_tpl_building(t.s, "alice") == 0);
	/* a daemon's restart fails what was building */
	CHECK(store_tpl_fail_building(t.s, "restarted") == 0);
	CHECK(store_tpl_get(t.s, c.id, &got) == 0 && !strcmp(got.state, "failed"));
	/* in use while a sandbox not stopped has it */
	CHECK(store_tpl_in_use(t.s, a.id) == 0);
	struct store_sbx x;
	mk_sbx(&x, "sbx_00000000000000t1", "alice", 1000, "{}");
	snprintf(x.template, sizeof(x.template), "%s", a.id);
	CHECK(store_sbx_insert(t.s, &x, NULL) == 0);
	CHECK(store_tpl_in_use(t.s, a.id) == 1);
	struct store_tpl *l;
	size_t n;
	CHECK(store_tpl_list(t.s, "alice", &l, &n) == 0 && n == 1 && !strcmp(l[0].name, "web"));
	free(l);
	CHECK(store_tpl_delete(t.s, a.id) == 0 && store_tpl_delete(t.s, a.id) == -ENOENT);
	tdb_remove(&t);
}

#define ON_PG(fn)                                                                                  \
	static void pg_##fn(void)                                                                  \
	{                                                                                          \
		on_pg = 1;                                                                         \
		fn();                                                                              \
	}
ON_PG(test_key_create_lookup)
ON_PG(test_templates)
ON_PG(test_key_list_delete)
ON_PG(test_sbx_crud)
ON_PG(test_list_pagination)
ON_PG(test_list_account_isolation)
ON_PG(test_list_state_filter)
ON_PG(test_list_metadata_filter)
ON_PG(test_list_bad_args)
ON_PG(test_running)
ON_PG(test_concurrent_inserts)
ON_PG(test_egress_secrets)
ON_PG(test_stored_pauses)
ON_PG(test_stored_checkpoints)
ON_PG(test_pg_schema_and_reopen)
ON_PG(test_pg_parallel_first_opens)
ON_PG(test_nodes_and_fencing)
ON_PG(test_placement)
ON_PG(test_long_metadata_value)

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
	    {"store_schema_and_reopen", test_schema_and_reopen},
	    {"store_key_create_lookup", test_key_create_lookup},
	    {"store_key_list_delete", test_key_list_delete},
	    {"store_secret_not_in_file", test_secret_not_in_file},
	    {"store_sbx_crud", test_sbx_crud},
	    {"store_list_pagination", test_list_pagination},
	    {"store_list_account_isolation", test_list_account_isolation},
	    {"store_list_state_filter", test_list_state_filter},
	    {"store_list_metadata_filter", test_list_metadata_filter},
	    {"store_list_bad_args", test_list_bad_args},
	    {"store_running", test_running},
	    {"store_concurrent_inserts", test_concurrent_inserts},
	    {"store_egress_secrets", test_egress_secrets},
	    {"store_old_secret_values_are_sealed_and_scrubbed",
	     test_old_secret_values_are_sealed_and_scrubbed},
	    {"store_stored_pauses", test_stored_pauses},
	    {"store_stored_checkpoints", test_stored_checkpoints},
	    {"store_long_metadata_value", test_long_metadata_value},
	    {"pg_store_long_metadata_value", pg_test_long_metadata_value},
	    {"store_nodes_and_fencing", test_nodes_and_fencing},
	    {"pg_store_nodes_and_fencing", pg_test_nodes_and_fencing},
	    {"store_placement", test_placement},
	    {"pg_store_placement", pg_test_placement},
	    {"pg_store_copy_from_sqlite", test_copy_sqlite_to_pg},
	    {"pg_store_key_create_lookup", pg_test_key_create_lookup},
	    {"pg_store_key_list_delete", pg_test_key_list_delete},
	    {"pg_store_sbx_crud", pg_test_sbx_crud},
	    {"pg_store_list_pagination", pg_test_list_pagination},
	    {"pg_store_list_account_isolation", pg_test_list_account_isolation},
	    {"pg_store_list_state_filter", pg_test_list_state_filter},
	    {"pg_store_list_metadata_filter", pg_test_list_metadata_filter},
	    {"pg_store_list_bad_args", pg_test_list_bad_args},
	    {"pg_store_running", pg_test_running},
	    {"pg_store_concurrent_inserts", pg_test_concurrent_inserts},
	    {"pg_store_egress_secrets", pg_test_egress_secrets},
	    {"pg_store_stored_pauses", pg_test_stored_pauses},
	    {"pg_store_stored_checkpoints", pg_test_stored_checkpoints},
	    {"store_templates", test_templates},
	    {"pg_store_templates", pg_test_templates},
	    {"pg_store_schema_and_reopen", pg_test_pg_schema_and_reopen},
	    {"pg_store_parallel_first_opens", pg_test_pg_parallel_first_opens},
	    {0, 0},
	};
	/* One server for every pg_ case; without it they fail, each saying
	 * so, and the SQLite cases run all the same. */
	char dir[] = "/tmp/cpuos-test-store-pg-XXXXXX";
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
