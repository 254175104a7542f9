/*
 * gw_store: see gw_store.h. Migrations are append-only and run under
 * BEGIN IMMEDIATE, as cpuosd's store does, so two processes opening a new
 * file never both create the schema.
 */
#include "gateway/gw_store.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define BUSY_TIMEOUT_MS 5000
#define MAX_SECRET_LEN	256 /* a longer presented secret is not ours, unhashed */

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

static int exec_sql(struct gw_store *s, const char *sql)
{
	return sqlite3_exec(s->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -EIO;
}

static void rollback(struct gw_store *s)
{
	if (!sqlite3_get_autocommit(s->db))
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

static int migrate(struct gw_store *s, char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int r = exec_sql(s, "BEGIN IMMEDIATE");
	if (!r && sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
		r = -EIO;
	int version = !r && sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
	sqlite3_finalize(st);
	if (r || version < 0 || version > SCHEMA_VERSION) {
		snprintf(err, errlen, "cannot read schema version %d: %s", version,
			 sqlite3_errmsg(s->db));
		rollback(s);
		return -EIO;
	}
	for (int v = version; v < SCHEMA_VERSION; v++) {
		if (exec_sql(s, migrations[v])) {
			snprintf(err, errlen, "cannot migrate schema to version %d: %s", v + 1,
				 sqlite3_errmsg(s->db));
			rollback(s);
			return -EIO;
		}
	}
	char sql[64];
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", SCHEMA_VERSION);
	if (exec_sql(s, sql) || exec_sql(s, "COMMIT")) {
		snprintf(err, errlen, "cannot record schema version: %s", sqlite3_errmsg(s->db));
		rollback(s);
		return -EIO;
	}
	return 0;
}

int gw_store_open(const char *path, struct gw_store **out, char *err, size_t errlen)
{
	*out = NULL;
	/* Made here so it is 0600: it maps conversations to sandboxes. */
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot open '%s': %s", path, strerror(e));
		return -e;
	}
	close(fd);
	struct gw_store *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pthread_mutex_init(&s->lock, NULL);
	int r = -EIO;
	if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
	    SQLITE_OK) {
		snprintf(err, errlen, "cannot open '%s': %s", path,
			 s->db ? sqlite3_errmsg(s->db) : "out of memory");
		goto fail;
	}
	sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS);
	if (exec_sql(s, "PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON; "
			"PRAGMA synchronous = NORMAL")) {
		snprintf(err, errlen, "cannot set up '%s': %s", path, sqlite3_errmsg(s->db));
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

void gw_store_close(struct gw_store *s)
{
	if (!s)
		return;
	sqlite3_close(s->db);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static void hex(char *out, const unsigned char *in, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

/* out[65]: the hex SHA-256 of s[0..n). */
static int sha256_hex(const char *s, size_t n, char *out)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	if (EVP_Digest(s, n, md, &len, EVP_sha256(), NULL) != 1 || len != 32)
		return -EIO;
	hex(out, md, 32);
	return 0;
}

static int random_hex(char *out, size_t nbytes)
{
	unsigned char raw[32];
	if (nbytes > sizeof(raw) || getrandom(raw, nbytes, 0) != (ssize_t)nbytes)
		return -EIO;
	hex(out, raw, nbytes);
	explicit_bzero(raw, sizeof(raw));
	return 0;
}

/* Runs sql, which returns no rows, with the text parameters ?1.. (a
 * NULL-terminated list) and num as the one after them, if sql has it:
 * 0, -EEXIST on a constraint's refusal, -EIO. Caller holds the lock. */
static int run(struct gw_store *s, const char *sql, const char *const *params, long long num)
{
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	int i = 1, r = 0;
	for (; params[i - 1]; i++)
		if (sqlite3_bind_text(st, i, params[i - 1], -1, SQLITE_TRANSIENT) != SQLITE_OK)
			r = -EIO;
	if (!r && sqlite3_bind_parameter_count(st) >= i && sqlite3_bind_int64(st, i, num) != SQLITE_OK)
		r = -EIO;
	if (!r) {
		int rc = sqlite3_step(st);
		r = rc == SQLITE_DONE ? 0 : (rc & 0xff) == SQLITE_CONSTRAINT ? -EEXIST : -EIO;
	}
	sqlite3_finalize(st);
	return r;
}

static int name_ok(const char *s)
{
	size_t n = strnlen(s, 128);
	if (n == 0 || n >= 128)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
			return 0;
	return 1;
}

int gw_key_create(struct gw_store *s, const char *name, char *secret, struct gw_key *out)
{
	if (!name || !name_ok(name))
		return -EINVAL;
	struct gw_key k = { .created_at = (long long)time(NULL) };
	snprintf(k.name, sizeof(k.name), "%s", name);
	char sec[GW_KEY_SECRET_LEN + 1], hash[65];
	memcpy(sec, GW_KEY_PREFIX, 4);
	int r = random_hex(sec + 4, 32);
	if (!r)
		r = sha256_hex(sec, GW_KEY_SECRET_LEN, hash);
	pthread_mutex_lock(&s->lock);
	/* a clash of random 64-bit ids is unlikely, and cheap to survive */
	for (int attempt = 0; !r && attempt < 4; attempt++) {
		memcpy(k.id, "gwk_", 4);
		if ((r = random_hex(k.id + 4, 8)))
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
	size_t n = secret ? strnlen(secret, MAX_SECRET_LEN + 1) : 0;
	char hash[65];
	if (n == 0 || n > MAX_SECRET_LEN || sha256_hex(secret, n, hash))
		return -ENOENT;
	sqlite3_stmt *st;
	int r = -EIO;
	pthread_mutex_lock(&s->lock);
	if (sqlite3_prepare_v2(s->db, "SELECT id FROM keys WHERE sha256 = ?1", -1, &st, NULL) ==
	    SQLITE_OK) {
		if (sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC) == SQLITE_OK) {
			int rc = sqlite3_step(st);
			const char *v = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
			if (v && strlen(v) < GW_KEY_ID_LEN) {
				memcpy(id, v, strlen(v) + 1);
				r = 0;
			} else if (rc == SQLITE_DONE) {
				r = -ENOENT;
			}
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

int gw_key_list(struct gw_store *s, struct gw_key **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	sqlite3_stmt *st;
	int r = 0;
	pthread_mutex_lock(&s->lock);
	if (sqlite3_prepare_v2(s->db, "SELECT id, name, created_at FROM keys ORDER BY created_at, rowid",
			       -1, &st, NULL) != SQLITE_OK) {
		pthread_mutex_unlock(&s->lock);
		return -EIO;
	}
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct gw_key *nk = realloc(*out, (*n + 1) * sizeof(**out));
		if (!nk) {
			r = -ENOMEM;
			break;
		}
		*out = nk;
		struct gw_key *k = &nk[(*n)++];
		const char *id = (const char *)sqlite3_column_text(st, 0);
		const char *name = (const char *)sqlite3_column_text(st, 1);
		snprintf(k->id, sizeof(k->id), "%s", id ? id : "");
		snprintf(k->name, sizeof(k->name), "%s", name ? name : "");
		k->created_at = sqlite3_column_int64(st, 2);
	}
	if (!r && rc != SQLITE_DONE)
		r = -EIO;
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r) {
		free(*out);
		*out = NULL;
		*n = 0;
	}
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
	sqlite3_stmt *st;
	int r = -EIO;
	pthread_mutex_lock(&s->lock);
	if (sqlite3_prepare_v2(s->db,
			       "SELECT sandbox_id FROM conversations WHERE key_id = ?1 AND conv_id = ?2",
			       -1, &st, NULL) == SQLITE_OK) {
		if (sqlite3_bind_text(st, 1, key_id, -1, SQLITE_STATIC) == SQLITE_OK &&
		    sqlite3_bind_text(st, 2, conv, -1, SQLITE_STATIC) == SQLITE_OK) {
			int rc = sqlite3_step(st);
			const char *v = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
			if (v && strlen(v) < GW_SBX_ID_LEN) {
				memcpy(sbx, v, strlen(v) + 1);
				r = 0;
			} else if (rc == SQLITE_DONE) {
				r = -ENOENT;
			}
		}
		sqlite3_finalize(st);
	}
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
	*out = NULL;
	*n = 0;
	sqlite3_stmt *st;
	int r = 0, rc = SQLITE_DONE;
	pthread_mutex_lock(&s->lock);
	if (sqlite3_prepare_v2(s->db, "SELECT sandbox_id FROM conversations WHERE key_id = ?1", -1,
			       &st, NULL) != SQLITE_OK) {
		pthread_mutex_unlock(&s->lock);
		return -EIO;
	}
	if (sqlite3_bind_text(st, 1, key_id, -1, SQLITE_STATIC) != SQLITE_OK)
		r = -EIO;
	while (!r && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		char(*nx)[GW_SBX_ID_LEN] = realloc(*out, (*n + 1) * sizeof(**out));
		if (!nx) {
			r = -ENOMEM;
			break;
		}
		*out = nx;
		const char *v = (const char *)sqlite3_column_text(st, 0);
		snprintf(nx[(*n)++], GW_SBX_ID_LEN, "%s", v ? v : "");
	}
	if (!r && rc != SQLITE_DONE)
		r = -EIO;
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r) {
		free(*out);
		*out = NULL;
		*n = 0;
	}
	return r;
}
