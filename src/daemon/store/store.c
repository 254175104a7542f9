/*
 * store: the daemon's state in one database, a SQLite file in WAL mode or
 * PostgreSQL (lib/sql). This file holds the schema's migrations for both,
 * the helpers shared with store_sbx.c and the others (on lib/sql, under
 * the store's lock), and the API keys (only the SHA-256 of each secret).
 */
#include "daemon/store/store.h"
#include "daemon/store/store_impl.h"

#include "common/buf.h"
#include "common/errbuf.h"
#include "lib/db.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * Details the header leaves open (store_sbx.c lists those of sandboxes):
 *  - store_key_lookup: -ERANGE when account[] cannot hold the account.
 *  - An id that cannot name a stored key or sandbox (NULL, empty, over-long)
 *    is -ENOENT in get, set_* and delete, like an unknown one.
 *  - Database failures are -EIO, nothing is logged.
 */

/*
 * PostgreSQL's schema, as SQLite's is at version 9, made in one step: the
 * PostgreSQL back end began there, so steps 1 to 8 do nothing on it. The
 * same tables, columns, checks and indexes; integers are BIGINT (SQLite's
 * are 64-bit), rows have no rowid, so keys keep their order by a sequence
 * (seq) and usage events number themselves with one.
 */
#define PG_SCHEMA                                                                                  \
	"CREATE TABLE accounts ("                                                                  \
	" id BIGSERIAL PRIMARY KEY,"                                                               \
	" name TEXT NOT NULL UNIQUE,"                                                              \
	" created_at BIGINT NOT NULL);"                                                            \
	"CREATE TABLE keys ("                                                                      \
	" id TEXT PRIMARY KEY NOT NULL,"                                                           \
	" name TEXT NOT NULL,"                                                                     \
	" account TEXT NOT NULL REFERENCES accounts(name),"                                        \
	" sha256 TEXT NOT NULL UNIQUE CHECK (length(sha256) = 64),"                                \
	" created_at BIGINT NOT NULL,"                                                             \
	" seq BIGSERIAL NOT NULL);"                                                                \
	"CREATE TABLE sandboxes ("                                                                 \
	" id TEXT PRIMARY KEY NOT NULL,"                                                           \
	" account TEXT NOT NULL REFERENCES accounts(name),"                                        \
	" template TEXT NOT NULL,"                                                                 \
	" state TEXT NOT NULL CHECK (state IN ('running', 'paused', 'stopped', 'lost')),"          \
	" end_reason TEXT NOT NULL DEFAULT '',"                                                    \
	" vcpus BIGINT NOT NULL,"                                                                  \
	" memory_mb BIGINT NOT NULL,"                                                              \
	" disk_mb BIGINT NOT NULL,"                                                                \
	" created_at BIGINT NOT NULL,"                                                             \
	" expires_at BIGINT NOT NULL,"                                                             \
	" metadata TEXT NOT NULL DEFAULT '{}',"                                                    \
	" env TEXT NOT NULL DEFAULT '{}',"                                                         \
	" run_dir TEXT NOT NULL DEFAULT '',"                                                       \
	" qemu_pid BIGINT NOT NULL DEFAULT 0,"                                                     \
	" on_timeout TEXT NOT NULL DEFAULT 'pause' CHECK (on_timeout IN ('pause', 'kill')),"       \
	" timeout_s BIGINT NOT NULL DEFAULT 0,"                                                    \
	" paused_at BIGINT NOT NULL DEFAULT 0,"                                                    \
	" parent TEXT NOT NULL DEFAULT '',"                                                        \
	" key_id TEXT NOT NULL DEFAULT '',"                                                        \
	" generation BIGINT NOT NULL DEFAULT 0,"                                                   \
	" network TEXT NOT NULL DEFAULT '',"                                                       \
	" net_slot BIGINT NOT NULL DEFAULT -1,"                                                    \
	" public BIGINT NOT NULL DEFAULT 0,"                                                       \
	" traffic_token TEXT NOT NULL DEFAULT '',"                                                 \
	" secrets TEXT NOT NULL DEFAULT '[]',"                                                     \
	" transforms TEXT NOT NULL DEFAULT '[]',"                                                  \
	" stored TEXT NOT NULL DEFAULT '');"                                                       \
	"CREATE INDEX sandboxes_by_time ON sandboxes (created_at, id);"                            \
	"CREATE INDEX sandboxes_by_account ON sandboxes (account, created_at, id);"                \
	"CREATE INDEX sandboxes_by_state ON sandboxes (state, account);"                           \
	"CREATE TABLE sandbox_meta ("                                                              \
	" sbx_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,"                        \
	" key TEXT NOT NULL,"                                                                      \
	" value TEXT NOT NULL,"                                                                    \
	" PRIMARY KEY (sbx_id, key));"                                                             \
	"CREATE INDEX sandbox_meta_by_pair ON sandbox_meta (key, value);"                          \
	"CREATE TABLE checkpoints ("                                                               \
	" id TEXT PRIMARY KEY NOT NULL,"                                                           \
	" name TEXT NOT NULL,"                                                                     \
	" account TEXT NOT NULL REFERENCES accounts(name),"                                        \
	" sbx_id TEXT NOT NULL,"                                                                   \
	" template TEXT NOT NULL,"                                                                 \
	" vcpus BIGINT NOT NULL,"                                                                  \
	" memory_mb BIGINT NOT NULL,"                                                              \
	" disk_mb BIGINT NOT NULL,"                                                                \
	" env TEXT NOT NULL DEFAULT '{}',"                                                         \
	" dir TEXT NOT NULL,"                                                                      \
	" size_bytes BIGINT NOT NULL DEFAULT 0,"                                                   \
	" created_at BIGINT NOT NULL,"                                                             \
	" stored TEXT NOT NULL DEFAULT '',"                                                        \
	" UNIQUE (account, name));"                                                                \
	"CREATE TABLE checkpoint_trash (stored TEXT PRIMARY KEY NOT NULL);"                        \
	"CREATE TABLE usage_events ("                                                              \
	" seq BIGSERIAL PRIMARY KEY,"                                                              \
	" sbx_id TEXT NOT NULL,"                                                                   \
	" account TEXT NOT NULL,"                                                                  \
	" key_id TEXT NOT NULL DEFAULT '',"                                                        \
	" state TEXT NOT NULL CHECK (state IN ('running', 'paused', 'stopped')),"                  \
	" vcpus BIGINT NOT NULL,"                                                                  \
	" memory_mb BIGINT NOT NULL,"                                                              \
	" storage_bytes BIGINT NOT NULL DEFAULT 0,"                                                \
	" at_ms BIGINT NOT NULL);"                                                                 \
	"CREATE INDEX usage_by_account ON usage_events (account, at_ms);"                          \
	"CREATE INDEX usage_by_sbx ON usage_events (sbx_id, seq);"                                 \
	"CREATE TABLE secrets ("                                                                   \
	" account TEXT NOT NULL REFERENCES accounts(name),"                                        \
	" name TEXT NOT NULL,"                                                                     \
	" value TEXT NOT NULL,"                                                                    \
	" hosts TEXT NOT NULL,"                                                                    \
	" placeholder TEXT NOT NULL UNIQUE,"                                                       \
	" allow_http BIGINT NOT NULL DEFAULT 0,"                                                   \
	" created_at BIGINT NOT NULL,"                                                             \
	" updated_at BIGINT NOT NULL,"                                                             \
	" sealed BIGINT NOT NULL DEFAULT 0,"                                                       \
	" PRIMARY KEY (account, name));"

/* Schema steps: migrations[v] takes the schema from version v to v + 1,
 * on SQLite and on PostgreSQL (lib/sql.h). Append only. */
static const struct sql_migration migrations[] = {
    /* 0 -> 1 */
    { "CREATE TABLE accounts ("
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
      PG_SCHEMA },
    /* 1 -> 2: pause (a new state and what it needs), checkpoints, usage.
     * A CHECK cannot be altered: both tables are rebuilt, the meta table
     * first so dropping the old sandboxes cascades into nothing. */
    { "CREATE TABLE sandboxes2 ("
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
      "" },
    /* 2 -> 3: networks. The egress policy as the API spells it ('' for
     * the daemon's default) and the host network slot of a running one. */
    { "ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '';"
      "ALTER TABLE sandboxes ADD COLUMN net_slot INTEGER NOT NULL DEFAULT -1;",
      "" },
    /* 3 -> 4: port URLs. Open to all, or to whoever has the token ('':
     * none yet, the sandbox came from an older daemon: only public). */
    { "ALTER TABLE sandboxes ADD COLUMN public INTEGER NOT NULL DEFAULT 0;"
      "ALTER TABLE sandboxes ADD COLUMN traffic_token TEXT NOT NULL DEFAULT '';",
      "" },
    /* 4 -> 5: egress secrets. A secret's value goes only to its hosts
     * (a JSON array of names), over checked TLS unless allow_http; a
     * sandbox lists the secrets it holds placeholders of (a JSON array of
     * names). */
    { "CREATE TABLE secrets ("
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
      "" },
    /* 5 -> 6: request transformations (rules.h), a JSON array */
    { "ALTER TABLE sandboxes ADD COLUMN transforms TEXT NOT NULL DEFAULT '[]';",
      "" },
    /* 6 -> 7: values sealed by cpuos-netd (net/seal.h). Those stored
     * before are plaintext (0) until the daemon, at its start, has each
     * sealed and the old bytes scrubbed (store_secret_seal, store_scrub). */
    { "ALTER TABLE secrets ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;",
      "" },
    /* 7 -> 8: the pause kept in the object store, "<generation> <SHA-256
     * of its manifest>" ('': none), which outlives the host's disk */
    { "ALTER TABLE sandboxes ADD COLUMN stored TEXT NOT NULL DEFAULT '';",
      "" },
    /* 8 -> 9: checkpoints kept in the object store too ("<key> <SHA-256 of
     * the stored manifest>", '': not yet), and the stored checkpoints
     * whose rows are gone, until their objects are */
    { "ALTER TABLE checkpoints ADD COLUMN stored TEXT NOT NULL DEFAULT '';"
      "CREATE TABLE checkpoint_trash (stored TEXT PRIMARY KEY NOT NULL) WITHOUT ROWID;",
      "" },
    /* 9 -> 10: daemons sharing one database (cpuosd --node): each a row
     * with a lease it renews, an epoch, one more at each join and when it
     * is declared down, and whether it is drained; a sandbox's row names
     * the node that owns it and that node's epoch when it took it, a
     * checkpoint's the node whose disk holds it ('' on a single host) */
    { "CREATE TABLE nodes ("
      " name TEXT PRIMARY KEY NOT NULL,"
      " url TEXT NOT NULL DEFAULT '',"
      " state TEXT NOT NULL CHECK (state IN ('ready', 'down')),"
      " drained INTEGER NOT NULL DEFAULT 0,"
      " epoch INTEGER NOT NULL,"
      " lease_until_ms INTEGER NOT NULL,"
      " joined_at INTEGER NOT NULL,"
      " vcpus INTEGER NOT NULL DEFAULT 0,"
      " memory_mb INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;"
      "ALTER TABLE checkpoints ADD COLUMN node TEXT NOT NULL DEFAULT '';"
      "ALTER TABLE sandboxes ADD COLUMN node TEXT NOT NULL DEFAULT '';"
      "ALTER TABLE sandboxes ADD COLUMN node_epoch INTEGER NOT NULL DEFAULT 0;"
      "CREATE INDEX sandboxes_by_node ON sandboxes (node, state);",
      "CREATE TABLE nodes ("
      " name TEXT PRIMARY KEY NOT NULL,"
      " url TEXT NOT NULL DEFAULT '',"
      " state TEXT NOT NULL CHECK (state IN ('ready', 'down')),"
      " drained BIGINT NOT NULL DEFAULT 0,"
      " epoch BIGINT NOT NULL,"
      " lease_until_ms BIGINT NOT NULL,"
      " joined_at BIGINT NOT NULL,"
      " vcpus BIGINT NOT NULL DEFAULT 0,"
      " memory_mb BIGINT NOT NULL DEFAULT 0);"
      "ALTER TABLE checkpoints ADD COLUMN node TEXT NOT NULL DEFAULT '';"
      "ALTER TABLE sandboxes ADD COLUMN node TEXT NOT NULL DEFAULT '';"
      "ALTER TABLE sandboxes ADD COLUMN node_epoch BIGINT NOT NULL DEFAULT 0;"
      "CREATE INDEX sandboxes_by_node ON sandboxes (node, state);"
      /* a B-tree entry holds at most 2704 bytes, a metadata value 4096:
       * the pairs found by key and by a hash of the value instead */
      "DROP INDEX sandbox_meta_by_pair;"
      "CREATE INDEX sandbox_meta_by_key ON sandbox_meta (key);"
      "CREATE INDEX sandbox_meta_by_value ON sandbox_meta USING hash (value);" },
    /* 10 -> 11: API replicas (cpuos-api). Where one reaches a node's port
     * URLs' proxy. What a placement holds until the
     * node it chose has made the sandbox, counted with the running ones
     * against the account's quotas and the node's memory; until_ms ends
     * one whose replica died. On PostgreSQL, a sandbox's move to another
     * node and any change of a node but its lease are announced
     * (NOTIFY cpuos_route with the sandbox's id, cpuos_nodes with the
     * node's name), so replicas drop what they remembered of them. */
    { "CREATE TABLE reservations ("
      " id TEXT PRIMARY KEY NOT NULL,"
      " account TEXT NOT NULL,"
      " node TEXT NOT NULL,"
      " vcpus INTEGER NOT NULL,"
      " memory_mb INTEGER NOT NULL,"
      " until_ms INTEGER NOT NULL) WITHOUT ROWID;"
      "ALTER TABLE nodes ADD COLUMN ports_url TEXT NOT NULL DEFAULT '';",
      "CREATE TABLE reservations ("
      " id TEXT PRIMARY KEY NOT NULL,"
      " account TEXT NOT NULL,"
      " node TEXT NOT NULL,"
      " vcpus BIGINT NOT NULL,"
      " memory_mb BIGINT NOT NULL,"
      " until_ms BIGINT NOT NULL);"
      "ALTER TABLE nodes ADD COLUMN ports_url TEXT NOT NULL DEFAULT '';"
      "CREATE INDEX reservations_by_account ON reservations (account);"
      "CREATE INDEX reservations_by_node ON reservations (node);"
      "CREATE FUNCTION cpuos_route_moved() RETURNS trigger LANGUAGE plpgsql AS "
      "$$ BEGIN PERFORM pg_notify('cpuos_route', NEW.id); RETURN NULL; END $$;"
      "CREATE TRIGGER sandboxes_route AFTER UPDATE OF node ON sandboxes FOR EACH ROW "
      "WHEN (OLD.node IS DISTINCT FROM NEW.node) EXECUTE FUNCTION cpuos_route_moved();"
      "CREATE FUNCTION cpuos_node_changed() RETURNS trigger LANGUAGE plpgsql AS "
      "$$ BEGIN PERFORM pg_notify('cpuos_nodes', NEW.name); RETURN NULL; END $$;"
      "CREATE TRIGGER nodes_changed AFTER INSERT OR UPDATE OF url, ports_url, state, drained, epoch "
      "ON nodes FOR EACH ROW EXECUTE FUNCTION cpuos_node_changed();" },
    /* 11 -> 12: what placement weighs besides load, as each node says at
     * its lease's renewals: which snapshots it can restore (compat: a
     * digest of its accelerator, vCPU model, kernel, initramfs and egress
     * CA), its free warm-pool VMs ("base:2,python:1") and the template
     * snapshots it holds ("base,python"), both of the default size. And
     * template snapshots in the object store, by the key of what they
     * were made from: where (prefix) and the SHA-256 of their stored
     * manifest, the first node's to store one. */
    { "ALTER TABLE nodes ADD COLUMN compat TEXT NOT NULL DEFAULT '';"
      "ALTER TABLE nodes ADD COLUMN warm TEXT NOT NULL DEFAULT '';"
      "ALTER TABLE nodes ADD COLUMN held TEXT NOT NULL DEFAULT '';"
      "CREATE TABLE template_snaps ("
      " key TEXT PRIMARY KEY NOT NULL,"
      " prefix TEXT NOT NULL,"
      " stored TEXT NOT NULL,"
      " node TEXT NOT NULL,"
      " created_at INTEGER NOT NULL) WITHOUT ROWID;",
      "ALTER TABLE nodes ADD COLUMN compat TEXT NOT NULL DEFAULT '';"
      "ALTER TABLE nodes ADD COLUMN warm TEXT NOT NULL DEFAULT '';"
      "ALTER TABLE nodes ADD COLUMN held TEXT NOT NULL DEFAULT '';"
      "CREATE TABLE template_snaps ("
      " key TEXT PRIMARY KEY NOT NULL,"
      " prefix TEXT NOT NULL,"
      " stored TEXT NOT NULL,"
      " node TEXT NOT NULL,"
      " created_at BIGINT NOT NULL);" },
    /* 12 -> 13: the disk a node has free for sandboxes, as it says at its
     * lease's renewals (-1: it has not said), and what a placement
     * holds of it until the sandbox is made. */
    { "ALTER TABLE nodes ADD COLUMN disk_free_mb INTEGER NOT NULL DEFAULT -1;"
      "ALTER TABLE reservations ADD COLUMN disk_mb INTEGER NOT NULL DEFAULT 0;",
      "ALTER TABLE nodes ADD COLUMN disk_free_mb BIGINT NOT NULL DEFAULT -1;"
      "ALTER TABLE reservations ADD COLUMN disk_mb BIGINT NOT NULL DEFAULT 0;" },
    /* 13 -> 14: how long a sandbox may sit idle before it pauses itself
     * (0: never). */
    { "ALTER TABLE sandboxes ADD COLUMN idle_timeout_s INTEGER NOT NULL DEFAULT 0;",
      "ALTER TABLE sandboxes ADD COLUMN idle_timeout_s BIGINT NOT NULL DEFAULT 0;" },
    /* 14 -> 15: lifecycle events (kept a week) and the webhooks they go
     * to, each with where each node's deliveries stand and what they did
     * (store_events.c). */
    { "CREATE TABLE events ("
      " seq INTEGER PRIMARY KEY,"
      " at_ms INTEGER NOT NULL,"
      " account TEXT NOT NULL,"
      " sbx_id TEXT NOT NULL,"
      " type TEXT NOT NULL,"
      " cause TEXT NOT NULL DEFAULT '',"
      " node TEXT NOT NULL DEFAULT '');"
      "CREATE INDEX events_by_account ON events (account, seq);"
      "CREATE INDEX events_by_sbx ON events (sbx_id, seq);"
      "CREATE INDEX events_by_time ON events (at_ms);"
      "CREATE TABLE webhooks ("
      " id TEXT PRIMARY KEY NOT NULL,"
      " account TEXT NOT NULL,"
      " url TEXT NOT NULL,"
      " types TEXT NOT NULL,"
      " secret TEXT NOT NULL,"
      " created_ms INTEGER NOT NULL);"
      "CREATE TABLE webhook_cursors ("
      " webhook_id TEXT NOT NULL,"
      " node TEXT NOT NULL,"
      " seq INTEGER NOT NULL,"
      " PRIMARY KEY (webhook_id, node));"
      "CREATE TABLE deliveries ("
      " seq INTEGER PRIMARY KEY,"
      " webhook_id TEXT NOT NULL,"
      " event_seq INTEGER NOT NULL,"
      " attempt INTEGER NOT NULL,"
      " status INTEGER NOT NULL,"
      " error TEXT NOT NULL DEFAULT '',"
      " at_ms INTEGER NOT NULL);"
      "CREATE INDEX deliveries_by_hook ON deliveries (webhook_id, seq);",
      "CREATE TABLE events ("
      " seq BIGSERIAL PRIMARY KEY,"
      " at_ms BIGINT NOT NULL,"
      " account TEXT NOT NULL,"
      " sbx_id TEXT NOT NULL,"
      " type TEXT NOT NULL,"
      " cause TEXT NOT NULL DEFAULT '',"
      " node TEXT NOT NULL DEFAULT '');"
      "CREATE INDEX events_by_account ON events (account, seq);"
      "CREATE INDEX events_by_sbx ON events (sbx_id, seq);"
      "CREATE INDEX events_by_time ON events (at_ms);"
      "CREATE TABLE webhooks ("
      " id TEXT PRIMARY KEY NOT NULL,"
      " account TEXT NOT NULL,"
      " url TEXT NOT NULL,"
      " types TEXT NOT NULL,"
      " secret TEXT NOT NULL,"
      " created_ms BIGINT NOT NULL);"
      "CREATE TABLE webhook_cursors ("
      " webhook_id TEXT NOT NULL,"
      " node TEXT NOT NULL,"
      " seq BIGINT NOT NULL,"
      " PRIMARY KEY (webhook_id, node));"
      "CREATE TABLE deliveries ("
      " seq BIGSERIAL PRIMARY KEY,"
      " webhook_id TEXT NOT NULL,"
      " event_seq BIGINT NOT NULL,"
      " attempt BIGINT NOT NULL,"
      " status BIGINT NOT NULL,"
      " error TEXT NOT NULL DEFAULT '',"
      " at_ms BIGINT NOT NULL);"
      "CREATE INDEX deliveries_by_hook ON deliveries (webhook_id, seq);" },
    /* 15 -> 16: templates an account imported or pulled through the API
     * (store_tpl.c): its name for it, what it came from, where its build
     * stands, what it weighs, and the node whose files it is. */
    { "CREATE TABLE templates ("
      " id TEXT PRIMARY KEY NOT NULL,"
      " account TEXT NOT NULL,"
      " name TEXT NOT NULL,"
      " source TEXT NOT NULL,"
      " state TEXT NOT NULL CHECK (state IN ('building', 'ready', 'failed')),"
      " error TEXT NOT NULL DEFAULT '',"
      " size_bytes INTEGER NOT NULL DEFAULT 0,"
      " created_ms INTEGER NOT NULL,"
      " node TEXT NOT NULL DEFAULT '',"
      " UNIQUE (account, name));",
      "CREATE TABLE templates ("
      " id TEXT PRIMARY KEY NOT NULL,"
      " account TEXT NOT NULL,"
      " name TEXT NOT NULL,"
      " source TEXT NOT NULL,"
      " state TEXT NOT NULL CHECK (state IN ('building', 'ready', 'failed')),"
      " error TEXT NOT NULL DEFAULT '',"
      " size_bytes BIGINT NOT NULL DEFAULT 0,"
      " created_ms BIGINT NOT NULL,"
      " node TEXT NOT NULL DEFAULT '',"
      " UNIQUE (account, name));" },
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

int store__col_copy(struct sql_stmt *st, int col, char *dst, size_t size)
{
	const char *t = sql_col_text(st, col);
	size_t n = sql_col_bytes(st, col);
	if (!t || n >= size)
		return -EIO;
	memcpy(dst, t, n);
	dst[n] = '\0';
	return 0;
}

int store__bind_text(struct sql_stmt *st, int i, const char *s)
{
	return sql_bind_text(st, i, s);
}

int store__prep(struct store *s, const char *sql, struct sql_stmt **st)
{
	return sql_prep(s->db, sql, st);
}

int store__begin(struct store *s)
{
	return sql_begin(s->db);
}

int store__commit(struct store *s)
{
	return sql_commit(s->db);
}

void store__rollback(struct store *s)
{
	sql_rollback(s->db);
}

int store__step_done(struct sql_stmt *st)
{
	int rc = sql_step(st);
	return rc == SQL_DONE ? 0 : rc == SQL_UNIQUE ? -EEXIST : -EIO;
}

int store__change(struct store *s, const char *sql, int n, const char *const *texts)
{
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, sql, &st);
	for (int i = 0; !r && i < n; i++)
		if (store__bind_text(st, i + 1, texts[i]) != SQL_OK)
			r = -EIO;
	if (!r && !(r = store__step_done(st)) && sql_changes(s->db) == 0)
		r = -ENOENT;
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store__bind_owner(struct store *s, struct sql_stmt *st)
{
	int b = sql_bind_text(st, 8, s->node);
	return b == SQL_OK ? sql_bind_int64(st, 9, s->node_epoch) : b;
}

int store__ensure_account(struct store *s, const char *account)
{
	struct sql_stmt *st;
	int r = store__prep(s,
			    "INSERT INTO accounts (name, created_at) VALUES (?1, ?2) "
			    "ON CONFLICT (name) DO NOTHING",
			    &st);
	if (r)
		return r;
	if (store__bind_text(st, 1, account) != SQL_OK ||
	    sql_bind_int64(st, 2, (long long)time(NULL)) != SQL_OK)
		r = -EIO;
	else
		r = store__step_done(st);
	sql_finalize(st);
	return r == -EEXIST ? -EIO : r;
}

/* ---- open and close ---- */

int store_open(const char *path, struct store **out, char *err, size_t errlen)
{
	*out = NULL;
	struct store *s = calloc(1, sizeof(*s));
	if (!s)
		return errbuf_set(err, errlen, -ENOMEM, "out of memory");
	int e = pthread_mutex_init(&s->lock, NULL);
	if (e) {
		free(s);
		return errbuf_set(err, errlen, -e, "cannot create a mutex: %s", strerror(e));
	}
	int r = sql_open(path, migrations, SCHEMA_VERSION, "cpuosd", &s->db, err, errlen);
	/* What is deleted or overwritten is zeroed, not left in free pages:
	 * a secret's value from before it was sealed, an API key's hash. */
	if (r == 0 && sql_kind(s->db) == SQL_SQLITE &&
	    sql_exec(s->db, "PRAGMA secure_delete = ON")) {
		errbuf_set(err, errlen, -EIO, "cannot set secure_delete on '%s'", path);
		r = -EIO;
	}
	if (r) {
		sql_close(s->db);
		pthread_mutex_destroy(&s->lock);
		free(s);
	} else {
		*out = s;
	}
	return r;
}

int store_scrub(struct store *s)
{
	pthread_mutex_lock(&s->lock);
	/* PostgreSQL: the tables that held values rewritten, with no dead
	 * row versions; its own WAL files are the server's to recycle. */
	int r = sql_exec(s->db, sql_kind(s->db) == SQL_SQLITE
					? "VACUUM; PRAGMA wal_checkpoint(TRUNCATE)"
					: "VACUUM FULL secrets, keys")
		    ? -EIO
		    : 0;
	pthread_mutex_unlock(&s->lock);
	return r;
}

void store_close(struct store *s)
{
	if (!s)
		return;
	sql_close(s->db);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* ---- API keys ---- */

static int key_insert(struct store *s, const struct store_key *k, const char *hash)
{
	struct sql_stmt *st = NULL;
	int r = store__begin(s);
	if (!r)
		r = store__ensure_account(s, k->account);
	if (!r)
		r = store__prep(s,
				"INSERT INTO keys (id, name, account, sha256, created_at) "
				"VALUES (?1, ?2, ?3, ?4, ?5)",
				&st);
	if (!r) {
		if (store__bind_text(st, 1, k->id) != SQL_OK ||
		    store__bind_text(st, 2, k->name) != SQL_OK ||
		    store__bind_text(st, 3, k->account) != SQL_OK ||
		    store__bind_text(st, 4, hash) != SQL_OK ||
		    sql_bind_int64(st, 5, k->created_at) != SQL_OK)
			r = -EIO;
		else
			r = store__step_done(st);
	}
	sql_finalize(st);
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
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	char hash[DB_HASH_LEN];
	int r = db_key_hash(secret, hash);
	if (!r)
		r = store__prep(s, "SELECT account, id FROM keys WHERE sha256 = ?1", &st);
	if (!r) {
		int rc = store__bind_text(st, 1, hash) == SQL_OK ? sql_step(st) : SQL_ERROR;
		r = rc == SQL_ROW ? 0 : rc == SQL_DONE ? -ENOENT : -EIO;
		/* a buffer too small for the account or id: -ERANGE */
		if (!r && (store__col_copy(st, 0, account, accountlen) ||
			   (key_id && store__col_copy(st, 1, key_id, idlen))))
			r = -ERANGE;
		sql_finalize(st);
	}
	explicit_bzero(hash, sizeof(hash));
	pthread_mutex_unlock(&s->lock);
	if (r == 0 && !strcmp(account, STORE_ADMIN_ACCOUNT))
		r = -ENOENT;
	return r;
}

int store_key_lookup(struct store *s, const char *secret, char *account, size_t accountlen)
{
	return store_key_lookup_id(s, secret, account, accountlen, NULL, 0);
}

static int key_row(struct sql_stmt *st, struct store_key *k)
{
	if (store__col_copy(st, 0, k->id, sizeof(k->id)) ||
	    store__col_copy(st, 1, k->name, sizeof(k->name)) ||
	    store__col_copy(st, 2, k->account, sizeof(k->account)))
		return -EIO;
	k->created_at = sql_col_int64(st, 3);
	return 0;
}

int store_key_list(struct store *s, struct store_key **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	struct buf ks;
	buf_init(&ks, 0);
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	/* Keys made in one second keep the order they were made in: by
	 * SQLite's rowid, by PostgreSQL's sequence. */
	int r = store__prep(s,
			    sql_kind(s->db) == SQL_SQLITE
				? "SELECT id, name, account, created_at FROM keys "
				  "ORDER BY created_at, rowid"
				: "SELECT id, name, account, created_at FROM keys "
				  "ORDER BY created_at, seq",
			    &st);
	while (!r) {
		int rc = sql_step(st);
		if (rc == SQL_DONE)
			break;
		struct store_key *k = rc == SQL_ROW ? buf_push(&ks, sizeof(*k)) : NULL;
		if (!k) {
			r = rc == SQL_ROW ? -ENOMEM : -EIO;
			break;
		}
		memset(k, 0, sizeof(*k));
		if ((r = key_row(st, k)))
			ks.len -= sizeof(*k);
	}
	sql_finalize(st);
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
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "DELETE FROM keys WHERE id = ?1", &st);
	if (!r) {
		if (store__bind_text(st, 1, id) != SQL_OK)
			r = -EIO;
		else if (!(r = store__step_done(st)) && sql_changes(s->db) == 0)
			r = -ENOENT;
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	return r == -EEXIST ? -EIO : r;
}
