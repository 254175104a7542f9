/*
 * store: the daemon's state in one SQLite database in WAL mode. This file
 * opens and closes it, migrates the schema and holds the helpers shared with
 * store_sbx.c; it also keeps the API keys (only the SHA-256 of each secret).
 */
#include "daemon/store/store.h"
#include "daemon/store/store_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define BUSY_TIMEOUT_MS 5000
#define MAX_SECRET_LEN	256 /* a longer presented secret is not ours: -ENOENT, unhashed */

/*
 * Details the header leaves open (store_sbx.c lists those of sandboxes):
 *  - store_key_lookup: -ERANGE when account[] cannot hold the account.
 *  - An id that cannot name a stored key or sandbox (NULL, empty, over-long)
 *    is -ENOENT in get, set_* and delete, like an unknown one.
 *  - SQLite failures are -EIO, nothing is logged.
 */

/* Schema steps: migrations[v] takes user_version v to v + 1. Append only. */
static const char *const migrations[] = {
    /* 0 -> 1 */
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
    /* metadata again, one row per pair, so filters are exact equality on
     * any key text (quotes, dots) with no JSON path syntax involved */
    "CREATE TABLE sandbox_meta ("
    " sbx_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,"
    " key TEXT NOT NULL,"
    " value TEXT NOT NULL,"
    " PRIMARY KEY (sbx_id, key)) WITHOUT ROWID;"
    "CREATE INDEX sandbox_meta_by_pair ON sandbox_meta (key, value);",
    /* 1 -> 2: pause (a new state and what it needs), checkpoints, usage.
     * A CHECK cannot be altered: both tables are rebuilt, the meta table
     * first so dropping the old sandboxes cascades into nothing. */
    "CREATE TABLE sandboxes2 ("
    " id TEXT PRIMARY KEY NOT NULL,"
    " account TEXT NOT NULL REFERENCES accounts(name),"
    " template TEXT NOT NULL,"
    " state TEXT NOT NULL CHECK (state IN ('running', 'paused', 'stopped', 'lost')),"
    " end_reason TEXT NOT NULL DEFAULT '',"
    " vcpus INTEGER NOT NULL,"
    " memory_mb INTEGER NOT NULL,"
    " disk_mb INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL,"
    " expires_at INTEGER NOT NULL,"
    " metadata TEXT NOT NULL DEFAULT '{}',"
    " env TEXT NOT NULL DEFAULT '{}',"
    " run_dir TEXT NOT NULL DEFAULT '',"
    " qemu_pid INTEGER NOT NULL DEFAULT 0,"
    " on_timeout TEXT NOT NULL DEFAULT 'pause' CHECK (on_timeout IN ('pause', 'kill')),"
    " timeout_s INTEGER NOT NULL DEFAULT 0,"  /* left when paused */
    " paused_at INTEGER NOT NULL DEFAULT 0,"
    " parent TEXT NOT NULL DEFAULT '',"        /* forked from, or a checkpoint */
    " key_id TEXT NOT NULL DEFAULT '',"        /* the key that created it */
    " generation INTEGER NOT NULL DEFAULT 0);" /* restores so far */
    "INSERT INTO sandboxes2 (id, account, template, state, end_reason, vcpus, memory_mb,"
    " disk_mb, created_at, expires_at, metadata, env, run_dir, qemu_pid)"
    " SELECT id, account, template, state, end_reason, vcpus, memory_mb, disk_mb,"
    " created_at, expires_at, metadata, env, run_dir, qemu_pid FROM sandboxes;"
    "CREATE TABLE sandbox_meta2 ("
    " sbx_id TEXT NOT NULL REFERENCES sandboxes2(id) ON DELETE CASCADE,"
    " key TEXT NOT NULL,"
    " value TEXT NOT NULL,"
    " PRIMARY KEY (sbx_id, key)) WITHOUT ROWID;"
    "INSERT INTO sandbox_meta2 SELECT sbx_id, key, value FROM sandbox_meta;"
    "DROP TABLE sandbox_meta;"
    "DROP TABLE sandboxes;"
    "ALTER TABLE sandboxes2 RENAME TO sandboxes;"
    "ALTER TABLE sandbox_meta2 RENAME TO sandbox_meta;"
    "CREATE INDEX sandboxes_by_time ON sandboxes (created_at, id);"
    "CREATE INDEX sandboxes_by_account ON sandboxes (account, created_at, id);"
    "CREATE INDEX sandboxes_by_state ON sandboxes (state, account);"
    "CREATE INDEX sandbox_meta_by_pair ON sandbox_meta (key, value);"
    "CREATE TABLE checkpoints ("
    " id TEXT PRIMARY KEY NOT NULL,"
    " name TEXT NOT NULL,"
    " account TEXT NOT NULL REFERENCES accounts(name),"
    " sbx_id TEXT NOT NULL,"
    " template TEXT NOT NULL,"
    " vcpus INTEGER NOT NULL,"
    " memory_mb INTEGER NOT NULL,"
    " disk_mb INTEGER NOT NULL,"
    " env TEXT NOT NULL DEFAULT '{}',"
    " dir TEXT NOT NULL,"
    " size_bytes INTEGER NOT NULL DEFAULT 0,"
    " created_at INTEGER NOT NULL,"
    " UNIQUE (account, name));"
    /* One row per state change of a sandbox; usage integrates between
     * them. storage_bytes: what a paused sandbox keeps on disk. */
    "CREATE TABLE usage_events ("
    " seq INTEGER PRIMARY KEY,"
    " sbx_id TEXT NOT NULL,"
    " account TEXT NOT NULL,"
    " key_id TEXT NOT NULL DEFAULT '',"
    " state TEXT NOT NULL CHECK (state IN ('running', 'paused', 'stopped')),"
    " vcpus INTEGER NOT NULL,"
    " memory_mb INTEGER NOT NULL,"
    " storage_bytes INTEGER NOT NULL DEFAULT 0,"
    " at_ms INTEGER NOT NULL);"
    "CREATE INDEX usage_by_account ON usage_events (account, at_ms);"
    "CREATE INDEX usage_by_sbx ON usage_events (sbx_id, seq);",
    /* 2 -> 3: networks. The egress policy as the API spells it ('' for
     * the daemon's default) and the host network slot of a running one. */
    "ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE sandboxes ADD COLUMN net_slot INTEGER NOT NULL DEFAULT -1;",
    /* 3 -> 4: port URLs. Open to all, or to whoever has the token ('':
     * none yet, the sandbox came from an older daemon: only public). */
    "ALTER TABLE sandboxes ADD COLUMN public INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE sandboxes ADD COLUMN traffic_token TEXT NOT NULL DEFAULT '';",
    /* 4 -> 5: egress secrets. A secret's value goes only to its hosts
     * (a JSON array of names), over checked TLS unless allow_http; a
     * sandbox lists the secrets it holds placeholders of (a JSON array of
     * names). */
    "CREATE TABLE secrets ("
    " account TEXT NOT NULL REFERENCES accounts(name),"
    " name TEXT NOT NULL,"
    " value TEXT NOT NULL,"
    " hosts TEXT NOT NULL,"
    " placeholder TEXT NOT NULL UNIQUE,"
    " allow_http INTEGER NOT NULL DEFAULT 0,"
    " created_at INTEGER NOT NULL,"
    " updated_at INTEGER NOT NULL,"
    " PRIMARY KEY (account, name)) WITHOUT ROWID;"
    "ALTER TABLE sandboxes ADD COLUMN secrets TEXT NOT NULL DEFAULT '[]';",
};
#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* ---- validation and small helpers ---- */

/* 1 if s holds min..size-1 bytes, each printable ASCII (space allowed only
 * when space is set). */
int store__text_ok(const char *s, size_t size, size_t min, int space)
{
	if (!s)
		return 0;
	size_t n = strnlen(s, size);
	if (n >= size || n < min)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c > 0x7e || c < (space ? 0x20 : 0x21))
			return 0;
	}
	return 1;
}

/* Key names and accounts: 1..127 printable bytes. */
int store__name_ok(const char *s)
{
	return store__text_ok(s, 128, 1, 1);
}

void store__hex(char *out, const unsigned char *in, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

static int random_bytes(unsigned char *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = getrandom(buf + got, n - got, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)r;
	}
	return 0;
}

/* out[65]: the lowercase hex SHA-256 of data. */
static int sha256_hex(const char *data, size_t len, char *out)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	if (EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
		return -EIO;
	store__hex(out, md, 32);
	return 0;
}

/* Copies a text column into a fixed buffer; -EIO if it is NULL or does not
 * fit (the row did not come from this store). */
int store__col_copy(sqlite3_stmt *st, int col, char *dst, size_t size)
{
	const unsigned char *t = sqlite3_column_text(st, col);
	int n = sqlite3_column_bytes(st, col);
	if (!t || n < 0 || (size_t)n >= size)
		return -EIO;
	memcpy(dst, t, (size_t)n);
	dst[n] = '\0';
	return 0;
}

int store__bind_text(sqlite3_stmt *st, int i, const char *s)
{
	return sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
}

/* ---- statements and transactions (callers hold s->lock) ---- */

int store__prep(struct store *s, const char *sql, sqlite3_stmt **st)
{
	*st = NULL;
	return sqlite3_prepare_v2(s->db, sql, -1, st, NULL) == SQLITE_OK ? 0 : -EIO;
}

static int exec(struct store *s, const char *sql)
{
	return sqlite3_exec(s->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -EIO;
}

int store__begin(struct store *s)
{
	/* IMMEDIATE takes the write lock now, so a transaction never fails
	 * half-way to upgrade it (the busy timeout covers other processes) */
	return exec(s, "BEGIN IMMEDIATE");
}

int store__commit(struct store *s)
{
	return exec(s, "COMMIT");
}

void store__rollback(struct store *s)
{
	/* some errors (SQLITE_FULL, IOERR) already rolled back */
	if (!sqlite3_get_autocommit(s->db))
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* Runs a statement that returns no rows: 0, -EEXIST on a primary key
 * clash, -EIO. */
int store__step_done(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);
	if (rc == SQLITE_DONE)
		return 0;
	if (sqlite3_extended_errcode(sqlite3_db_handle(st)) == SQLITE_CONSTRAINT_PRIMARYKEY)
		return -EEXIST;
	return -EIO;
}

int store__ensure_account(struct store *s, const char *account)
{
	sqlite3_stmt *st;
	int r = store__prep(s,
			    "INSERT INTO accounts (name, created_at) VALUES (?1, ?2) "
			    "ON CONFLICT (name) DO NOTHING",
			    &st);
	if (r)
		return r;
	if (store__bind_text(st, 1, account) != SQLITE_OK ||
	    sqlite3_bind_int64(st, 2, (sqlite3_int64)time(NULL)) != SQLITE_OK)
		r = -EIO;
	else
		r = store__step_done(st);
	sqlite3_finalize(st);
	return r == -EEXIST ? -EIO : r;
}

/* ---- open and close ---- */

static int pragma_text(struct store *s, const char *sql, char *out, size_t outlen)
{
	sqlite3_stmt *st;
	int r = store__prep(s, sql, &st);
	if (r)
		return r;
	if (sqlite3_step(st) != SQLITE_ROW || store__col_copy(st, 0, out, outlen))
		r = -EIO;
	sqlite3_finalize(st);
	return r;
}

static int migrate(struct store *s, char *err, size_t errlen)
{
	char v[32];
	int r = store__begin(s);
	/* read inside the write transaction: two daemons opening one new
	 * file cannot both create the schema */
	if (!r)
		r = pragma_text(s, "PRAGMA user_version", v, sizeof(v));
	if (r) {
		set_err(err, errlen, "cannot read schema version: %s", sqlite3_errmsg(s->db));
		goto fail;
	}
	long version = strtol(v, NULL, 10);
	if (version < 0 || version > SCHEMA_VERSION) {
		set_err(err, errlen, "unknown schema version %ld (this cpuosd knows up to %d)",
			version, SCHEMA_VERSION);
		r = -EPROTO;
		goto fail;
	}
	if (version == SCHEMA_VERSION) {
		store__rollback(s);
		return 0;
	}
	for (long i = version; i < SCHEMA_VERSION; i++) {
		if ((r = exec(s, migrations[i]))) {
			set_err(err, errlen, "cannot migrate schema to version %ld: %s", i + 1,
				sqlite3_errmsg(s->db));
			goto fail;
		}
	}
	char sql[64];
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", SCHEMA_VERSION);
	if ((r = exec(s, sql)) || (r = store__commit(s))) {
		set_err(err, errlen, "cannot record schema version: %s", sqlite3_errmsg(s->db));
		goto fail;
	}
	return 0;
fail:
	store__rollback(s);
	return r;
}

int store_open(const char *path, struct store **out, char *err, size_t errlen)
{
	*out = NULL;
	if (!path || !*path) {
		set_err(err, errlen, "empty database path");
		return -EINVAL;
	}
	/* Create the file ourselves so it is 0600: it holds sandbox env
	 * values, and SQLite gives the -wal and -shm files the same mode. */
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		int e = errno;
		set_err(err, errlen, "cannot open '%s': %s", path, strerror(e));
		return -e;
	}
	close(fd);

	struct store *s = calloc(1, sizeof(*s));
	if (!s) {
		set_err(err, errlen, "out of memory");
		return -ENOMEM;
	}
	int r = pthread_mutex_init(&s->lock, NULL);
	if (r) {
		free(s);
		set_err(err, errlen, "cannot create mutex: %s", strerror(r));
		return -r;
	}
	/* NOMUTEX: s->lock already serialises the connection */
	if (sqlite3_open_v2(path, &s->db,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
			    NULL) != SQLITE_OK) {
		set_err(err, errlen, "cannot open '%s': %s", path,
			s->db ? sqlite3_errmsg(s->db) : "out of memory");
		r = -EIO;
		goto fail;
	}
	sqlite3_extended_result_codes(s->db, 1);
	sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS);

	char mode[16];
	if (pragma_text(s, "PRAGMA journal_mode = WAL", mode, sizeof(mode)) ||
	    strcmp(mode, "wal")) {
		set_err(err, errlen, "cannot set WAL mode on '%s': %s", path,
			sqlite3_errmsg(s->db));
		r = -EIO;
		goto fail;
	}
	char fk[16];
	if (exec(s, "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL") ||
	    pragma_text(s, "PRAGMA foreign_keys", fk, sizeof(fk)) || strcmp(fk, "1")) {
		set_err(err, errlen, "cannot set pragmas on '%s': %s", path, sqlite3_errmsg(s->db));
		r = -EIO;
		goto fail;
	}
	if ((r = migrate(s, err, errlen)))
		goto fail;
	*out = s;
	return 0;
fail:
	sqlite3_close(s->db);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return r;
}

void store_close(struct store *s)
{
	if (!s)
		return;
	/* every statement is finalized before its function returns, so the
	 * close (and its final WAL checkpoint) cannot be refused as busy */
	sqlite3_close(s->db);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* ---- API keys ---- */

static int key_insert(struct store *s, const struct store_key *k, const char *hash)
{
	sqlite3_stmt *st = NULL;
	int r = store__begin(s);
	if (!r)
		r = store__ensure_account(s, k->account);
	if (!r)
		r = store__prep(s,
				"INSERT INTO keys (id, name, account, sha256, created_at) "
				"VALUES (?1, ?2, ?3, ?4, ?5)",
				&st);
	if (!r) {
		if (store__bind_text(st, 1, k->id) != SQLITE_OK ||
		    store__bind_text(st, 2, k->name) != SQLITE_OK ||
		    store__bind_text(st, 3, k->account) != SQLITE_OK ||
		    store__bind_text(st, 4, hash) != SQLITE_OK ||
		    sqlite3_bind_int64(st, 5, k->created_at) != SQLITE_OK)
			r = -EIO;
		else
			r = store__step_done(st);
	}
	sqlite3_finalize(st);
	if (!r)
		r = store__commit(s);
	if (r)
		store__rollback(s);
	return r;
}

int store_key_create(struct store *s, const char *name, const char *account, char *secret,
		     struct store_key *out)
{
	if (!store__name_ok(name) || !store__name_ok(account) || !secret)
		return -EINVAL;
	if (!strcmp(account, STORE_ADMIN_ACCOUNT))
		return -EPERM;
	struct store_key k = {.created_at = (long long)time(NULL)};
	memcpy(k.name, name, strlen(name) + 1);
	memcpy(k.account, account, strlen(account) + 1);

	unsigned char raw[32];
	char sec[STORE_KEY_SECRET_LEN + 1], hash[65];
	int r = random_bytes(raw, sizeof(raw));
	if (r)
		return r;
	memcpy(sec, "cpuos_", 6);
	store__hex(sec + 6, raw, sizeof(raw));
	explicit_bzero(raw, sizeof(raw));
	if ((r = sha256_hex(sec, STORE_KEY_SECRET_LEN, hash)))
		goto out;

	pthread_mutex_lock(&s->lock);
	/* a clash of 64-bit random ids is unlikely, but cheap to survive */
	for (int attempt = 0; attempt < 4; attempt++) {
		unsigned char idraw[8];
		if ((r = random_bytes(idraw, sizeof(idraw))))
			break;
		memcpy(k.id, "key_", 4);
		store__hex(k.id + 4, idraw, sizeof(idraw));
		if ((r = key_insert(s, &k, hash)) != -EEXIST)
			break;
	}
	pthread_mutex_unlock(&s->lock);
	if (r)
		goto out;
	memcpy(secret, sec, sizeof(sec));
	if (out)
		*out = k;
out:
	explicit_bzero(sec, sizeof(sec));
	return r;
}

int store_key_lookup_id(struct store *s, const char *secret, char *account, size_t accountlen,
			char *key_id, size_t idlen)
{
	if (!secret)
		return -ENOENT;
	size_t len = strnlen(secret, MAX_SECRET_LEN + 1);
	if (len == 0 || len > MAX_SECRET_LEN)
		return -ENOENT;
	if (!account || !accountlen || (key_id && !idlen))
		return -EINVAL;
	char hash[65];
	int r = sha256_hex(secret, len, hash);
	if (r)
		return r;

	sqlite3_stmt *st;
	pthread_mutex_lock(&s->lock);
	if (!(r = store__prep(s, "SELECT account, id FROM keys WHERE sha256 = ?1", &st))) {
		if (store__bind_text(st, 1, hash) != SQLITE_OK) {
			r = -EIO;
		} else {
			int rc = sqlite3_step(st);
			if (rc == SQLITE_ROW)
				/* a buffer too small for the account or id: -ERANGE */
				r = store__col_copy(st, 0, account, accountlen) ||
					    (key_id && store__col_copy(st, 1, key_id, idlen))
					? -ERANGE
					: 0;
			else
				r = rc == SQLITE_DONE ? -ENOENT : -EIO;
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	if (r == 0 && !strcmp(account, STORE_ADMIN_ACCOUNT))
		r = -ENOENT;
	return r;
}

int store_key_lookup(struct store *s, const char *secret, char *account, size_t accountlen)
{
	return store_key_lookup_id(s, secret, account, accountlen, NULL, 0);
}

int store_key_list(struct store *s, struct store_key **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	struct store_key *ks = NULL;
	size_t len = 0, cap = 0;
	sqlite3_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(
	    s, "SELECT id, name, account, created_at FROM keys ORDER BY created_at, rowid", &st);
	while (!r) {
		int rc = sqlite3_step(st);
		if (rc == SQLITE_DONE)
			break;
		if (rc != SQLITE_ROW) {
			r = -EIO;
			break;
		}
		if (len == cap) {
			size_t ncap = cap ? 2 * cap : 16;
			struct store_key *nk = realloc(ks, ncap * sizeof(*nk));
			if (!nk) {
				r = -ENOMEM;
				break;
			}
			ks = nk;
			cap = ncap;
		}
		struct store_key *k = &ks[len];
		memset(k, 0, sizeof(*k));
		if (store__col_copy(st, 0, k->id, sizeof(k->id)) ||
		    store__col_copy(st, 1, k->name, sizeof(k->name)) ||
		    store__col_copy(st, 2, k->account, sizeof(k->account))) {
			r = -EIO;
			break;
		}
		k->created_at = sqlite3_column_int64(st, 3);
		len++;
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r) {
		free(ks);
		return r;
	}
	*out = ks;
	*n = len;
	return 0;
}

int store_key_delete(struct store *s, const char *id)
{
	if (!store__text_ok(id, sizeof(((struct store_key *)0)->id), 1, 0))
		return -ENOENT;
	sqlite3_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "DELETE FROM keys WHERE id = ?1", &st);
	if (!r) {
		if (store__bind_text(st, 1, id) != SQLITE_OK)
			r = -EIO;
		else if (!(r = store__step_done(st)) && sqlite3_changes(s->db) == 0)
			r = -ENOENT;
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	return r == -EEXIST ? -EIO : r;
}
