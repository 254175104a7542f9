/*
 * gw_store: see gw_store.h. Opened and migrated by lib/db (append-only
 * migrations under BEGIN IMMEDIATE, as cpuosd's store, so two processes
 * opening a new file never both create the schema); keys made and found
 * by its helpers.
 */
#include "gateway/gw_store.h"

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

struct gw_store {
	pthread_mutex_t lock; /* serialises every use of db */
	sqlite3 *db;
};

/* migrations[v] takes user_version v to v + 1. Append only. */
static const char *const migrations[] = {
	/* 0 -> 1 */
	"CREATE TABLE keys ("
	" id TEXT PRIMARY KEY NOT NULL,"
	" name TEXT NOT NULL,"
	" sha256 TEXT NOT NULL UNIQUE CHECK (length(sha256) = 64),"
	" created_at INTEGER NOT NULL);"
	/* A conversation is its key's: another key's same id is another row. */
	"CREATE TABLE conversations ("
	" key_id TEXT NOT NULL REFERENCES keys(id) ON DELETE CASCADE,"
	" conv_id TEXT NOT NULL,"
	" sandbox_id TEXT NOT NULL,"
	" updated_at INTEGER NOT NULL,"
	" PRIMARY KEY (key_id, conv_id)) WITHOUT ROWID;",
};
#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

int gw_store_open(const char *path, struct gw_store **out, char *err, size_t errlen)
{
	struct gw_store *s = calloc(1, sizeof(*s));
	int r = s ? db_open(path, migrations, SCHEMA_VERSION, "cpuos-gateway", &s->lock, &s->db,
			    err, errlen)
		  : errbuf_set(err, errlen, -ENOMEM, "out of memory");
	if (r)
		free(s);
	*out = r ? NULL : s;
	return r;
}

void gw_store_close(struct gw_store *s)
{
	if (s)
		db_close(&s->lock, s->db);
	free(s);
}

/* Runs sql, which returns no rows, with the text parameters ?1.. (a
 * NULL-terminated list) and num as the one after them, if sql has it:
 * 0, -EEXIST on a primary key clash, -EIO. Caller holds the lock. */
static int run(struct gw_store *s, const char *sql, const char *const *params, long long num)
{
	sqlite3_stmt *st;
	int i = 1, r = db_prep(s->db, sql, &st);
	for (; !r && params[i - 1]; i++)
		if (db_bind_text(st, i, params[i - 1]) != SQLITE_OK)
			r = -EIO;
	if (!r && sqlite3_bind_parameter_count(st) >= i && sqlite3_bind_int64(st, i, num) != SQLITE_OK)
		r = -EIO;
	if (!r)
		r = db_step_done(st);
	sqlite3_finalize(st);
	return r;
}

/* The one text column of the one row sql (?1 and ?2 bound to a and b, b
 * may be NULL) finds, into out[size]: 0, -ENOENT, -EIO (caller locks). */
static int get_text(struct gw_store *s, const char *sql, const char *a, const char *b, char *out,
		    size_t size)
{
	sqlite3_stmt *st;
	int r = db_prep(s->db, sql, &st);
	if (!r && (db_bind_text(st, 1, a) != SQLITE_OK ||
		   (b && db_bind_text(st, 2, b) != SQLITE_OK)))
		r = -EIO;
	if (!r) {
		int rc = sqlite3_step(st);
		if (rc == SQLITE_ROW)
			r = db_col_copy(st, 0, out, size);
		else
			r = rc == SQLITE_DONE ? -ENOENT : -EIO;
	}
	sqlite3_finalize(st);
	return r;
}

int gw_key_create(struct gw_store *s, const char *name, char *secret, struct gw_key *out)
{
	if (!db_text_ok(name, 128, 1, 1))
		return -EINVAL;
	struct gw_key k = { .created_at = (long long)time(NULL) };
	snprintf(k.name, sizeof(k.name), "%s", name);
	char sec[GW_KEY_SECRET_LEN + 1], hash[DB_HASH_LEN];
	int r = db_token(GW_KEY_PREFIX, 32, sec, sizeof(sec));
	if (!r)
		r = db_key_hash(sec, hash);
	pthread_mutex_lock(&s->lock);
	/* a clash of random 64-bit ids is unlikely, and cheap to survive */
	for (int attempt = 0; !r && attempt < 4; attempt++) {
		if ((r = db_token("gwk_", 8, k.id, sizeof(k.id))))
			break;
		const char *p[] = { k.id, k.name, hash, NULL };
		r = run(s, "INSERT INTO keys (id, name, sha256, created_at) VALUES (?1, ?2, ?3, ?4)",
			p, k.created_at);
		if (r != -EEXIST)
			break;
	}
	pthread_mutex_unlock(&s->lock);
	if (!r) {
		memcpy(secret, sec, sizeof(sec));
		if (out)
			*out = k;
	}
	explicit_bzero(sec, sizeof(sec));
	return r;
}

int gw_key_lookup(struct gw_store *s, const char *secret, char *id)
{
	sqlite3_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = db_key_find(s->db, "SELECT id FROM keys WHERE sha256 = ?1", secret, &st);
	if (!r)
		r = db_col_copy(st, 0, id, GW_KEY_ID_LEN);
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->lock);
	return r;
}

static int key_row(sqlite3_stmt *st, void *rec)
{
	struct gw_key *k = rec;
	const char *id = (const char *)sqlite3_column_text(st, 0);
	const char *name = (const char *)sqlite3_column_text(st, 1);
	snprintf(k->id, sizeof(k->id), "%s", id ? id : "");
	snprintf(k->name, sizeof(k->name), "%s", name ? name : "");
	k->created_at = sqlite3_column_int64(st, 2);
	return 0;
}

static int sbx_row(sqlite3_stmt *st, void *rec)
{
	const char *v = (const char *)sqlite3_column_text(st, 0);
	snprintf(rec, GW_SBX_ID_LEN, "%s", v ? v : "");
	return 0;
}

/* The rows of sql (?1 bound to param unless NULL), each of size bytes
 * filled by fill, into *rows (empty after an error): 0 or -errno. */
static int list(struct gw_store *s, const char *sql, const char *param, size_t size,
		int (*fill)(sqlite3_stmt *st, void *rec), struct buf *rows)
{
	buf_init(rows, 0);
	sqlite3_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = db_prep(s->db, sql, &st);
	if (!r && param && db_bind_text(st, 1, param) != SQLITE_OK)
		r = -EIO;
	if (!r)
		r = db_rows(st, rows, size, fill);
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r)
		buf_release(rows);
	return r;
}

int gw_key_list(struct gw_store *s, struct gw_key **out, size_t *n)
{
	struct buf rows;
	int r = list(s, "SELECT id, name, created_at FROM keys ORDER BY created_at, rowid", NULL,
		     sizeof(**out), key_row, &rows);
	*n = rows.len / sizeof(**out);
	*out = (struct gw_key *)buf_detach(&rows, NULL);
	return r;
}

int gw_key_delete(struct gw_store *s, const char *id)
{
	const char *p[] = { id, NULL };
	pthread_mutex_lock(&s->lock);
	int r = run(s, "DELETE FROM keys WHERE id = ?1", p, 0);
	if (!r && sqlite3_changes(s->db) == 0)
		r = -ENOENT;
	pthread_mutex_unlock(&s->lock);
	return r;
}

int gw_conv_get(struct gw_store *s, const char *key_id, const char *conv, char *sbx)
{
	pthread_mutex_lock(&s->lock);
	int r = get_text(s,
			 "SELECT sandbox_id FROM conversations WHERE key_id = ?1 AND conv_id = ?2",
			 key_id, conv, sbx, GW_SBX_ID_LEN);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int gw_conv_set(struct gw_store *s, const char *key_id, const char *conv, const char *sbx)
{
	const char *p[] = { key_id, conv, sbx, NULL };
	pthread_mutex_lock(&s->lock);
	int r = run(s,
		    "INSERT INTO conversations (key_id, conv_id, sandbox_id, updated_at) "
		    "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (key_id, conv_id) DO UPDATE SET "
		    "sandbox_id = excluded.sandbox_id, updated_at = excluded.updated_at",
		    p, (long long)time(NULL));
	pthread_mutex_unlock(&s->lock);
	return r == -EEXIST ? -EIO : r; /* a key deleted meanwhile: nothing to keep */
}

int gw_conv_sandboxes(struct gw_store *s, const char *key_id, char (**out)[GW_SBX_ID_LEN],
		      size_t *n)
{
	struct buf rows;
	int r = list(s, "SELECT sandbox_id FROM conversations WHERE key_id = ?1", key_id,
		     sizeof(**out), sbx_row, &rows);
	*n = rows.len / sizeof(**out);
	*out = (char(*)[GW_SBX_ID_LEN])buf_detach(&rows, NULL);
	return r;
}
