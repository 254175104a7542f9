/*
 * store: the daemon's state in one SQLite database in WAL mode. This file
 * holds the schema's migrations (opened and migrated by lib/db), the
 * helpers shared with store_sbx.c and the others (lib/db's, under the
 * store's lock), and the API keys (only the SHA-256 of each secret).
 */
#include "daemon/store/store.h"
#include "daemon/store/store_impl.h"

#include "common/buf.h"
#include "common/errbuf.h"
#include "lib/db.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    /* 5 -> 6: request transformations (rules.h), a JSON array */
    "ALTER TABLE sandboxes ADD COLUMN transforms TEXT NOT NULL DEFAULT '[]';",
    /* 6 -> 7: values sealed by cpuos-netd (net/seal.h). Those stored
     * before are plaintext (0) until the daemon, at its start, has each
     * sealed and the old bytes scrubbed (store_secret_seal, store_scrub). */
    "ALTER TABLE secrets ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;",
    /* 7 -> 8: the pause kept in the object store, "<generation> <SHA-256
     * of its manifest>" ('': none), which outlives the host's disk */
    "ALTER TABLE sandboxes ADD COLUMN stored TEXT NOT NULL DEFAULT '';",
    /* 8 -> 9: checkpoints kept in the object store too ("<key> <SHA-256 of
     * the stored manifest>", '': not yet), and the stored checkpoints
     * whose rows are gone, until their objects are */
    "ALTER TABLE checkpoints ADD COLUMN stored TEXT NOT NULL DEFAULT '';"
    "CREATE TABLE checkpoint_trash (stored TEXT PRIMARY KEY NOT NULL) WITHOUT ROWID;",
};
#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

/* ---- helpers shared with store_*.c (store_impl.h) ---- */

int store__text_ok(const char *s, size_t size, size_t min, int space)
{
	return db_text_ok(s, size, min, space);
}

/* Key names and accounts: 1..127 printable bytes. */
int store__name_ok(const char *s)
{
	return db_text_ok(s, 128, 1, 1);
}

void store__hex(char *out, const unsigned char *in, size_t n)
{
	db_hex(out, in, n);
}

int store__col_copy(sqlite3_stmt *st, int col, char *dst, size_t size)
{
	return db_col_copy(st, col, dst, size);
}

int store__bind_text(sqlite3_stmt *st, int i, const char *s)
{
	return db_bind_text(st, i, s);
}

int store__prep(struct store *s, const char *sql, sqlite3_stmt **st)
{
	return db_prep(s->db, sql, st);
}

int store__begin(struct store *s)
{
	return db_begin(s->db);
}

int store__commit(struct store *s)
{
	return db_commit(s->db);
}

void store__rollback(struct store *s)
{
	db_rollback(s->db);
}

int store__step_done(sqlite3_stmt *st)
{
	return db_step_done(st);
}

int store__change(struct store *s, const char *sql, int n, const char *const *texts)
{
	sqlite3_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, sql, &st);
	for (int i = 0; !r && i < n; i++)
		if (store__bind_text(st, i + 1, texts[i]) != SQLITE_OK)
			r = -EIO;
	if (!r && !(r = store__step_done(st)) && sqlite3_changes(s->db) == 0)
		r = -ENOENT;
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->lock);
	return r;
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

int store_open(const char *path, struct store **out, char *err, size_t errlen)
{
	*out = NULL;
	struct store *s = calloc(1, sizeof(*s));
	if (!s)
		return errbuf_set(err, errlen, -ENOMEM, "out of memory");
	int r = db_open(path, migrations, SCHEMA_VERSION, "cpuosd", &s->lock, &s->db, err, errlen);
	/* What is deleted or overwritten is zeroed, not left in free pages:
	 * a secret's value from before it was sealed, an API key's hash. */
	if (r == 0 && db_exec(s->db, "PRAGMA secure_delete = ON")) {
		errbuf_set(err, errlen, -EIO, "cannot set secure_delete on '%s'", path);
		db_close(&s->lock, s->db);
		r = -EIO;
	}
	if (r)
		free(s);
	else
		*out = s;
	return r;
}

int store_scrub(struct store *s)
{
	pthread_mutex_lock(&s->lock);
	int r = db_exec(s->db, "VACUUM; PRAGMA wal_checkpoint(TRUNCATE)") ? -EIO : 0;
	pthread_mutex_unlock(&s->lock);
	return r;
}

void store_close(struct store *s)
{
	if (s)
		db_close(&s->lock, s->db);
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

	char sec[STORE_KEY_SECRET_LEN + 1], hash[DB_HASH_LEN];
	int r = db_token("cpuos_", 32, sec, sizeof(sec));
	if (r || (r = db_key_hash(sec, hash)))
		goto out;

	pthread_mutex_lock(&s->lock);
	/* a clash of 64-bit random ids is unlikely, but cheap to survive */
	for (int attempt = 0; attempt < 4; attempt++) {
		if ((r = db_token("key_", 8, k.id, sizeof(k.id))))
			break;
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
	if (!account || !accountlen || (key_id && !idlen))
		return -EINVAL;
	sqlite3_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = db_key_find(s->db, "SELECT account, id FROM keys WHERE sha256 = ?1", secret, &st);
	/* a buffer too small for the account or id: -ERANGE */
	if (!r && (store__col_copy(st, 0, account, accountlen) ||
		   (key_id && store__col_copy(st, 1, key_id, idlen))))
		r = -ERANGE;
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r == 0 && !strcmp(account, STORE_ADMIN_ACCOUNT))
		r = -ENOENT;
	return r;
}

int store_key_lookup(struct store *s, const char *secret, char *account, size_t accountlen)
{
	return store_key_lookup_id(s, secret, account, accountlen, NULL, 0);
}

static int key_row(sqlite3_stmt *st, void *rec)
{
	struct store_key *k = rec;
	if (store__col_copy(st, 0, k->id, sizeof(k->id)) ||
	    store__col_copy(st, 1, k->name, sizeof(k->name)) ||
	    store__col_copy(st, 2, k->account, sizeof(k->account)))
		return -EIO;
	k->created_at = sqlite3_column_int64(st, 3);
	return 0;
}

int store_key_list(struct store *s, struct store_key **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	struct buf ks;
	buf_init(&ks, 0);
	sqlite3_stmt *st;
	pthread_mutex_lock(&s->lock);
	/* Keys made in one second keep the order they were made in by
	 * SQLite's rowid; another back end needs a sequence of its own. */
	int r = store__prep(
	    s, "SELECT id, name, account, created_at FROM keys ORDER BY created_at, rowid", &st);
	if (!r)
		r = db_rows(st, &ks, sizeof(**out), key_row);
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r) {
		buf_release(&ks);
		return r;
	}
	*n = ks.len / sizeof(**out);
	*out = (struct store_key *)buf_detach(&ks, NULL);
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
