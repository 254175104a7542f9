/* db: see db.h. */
#include "lib/db.h"

#include "common/buf.h"
#include "common/errbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* ---- statements and transactions ---- */

int db_exec(sqlite3 *db, const char *sql)
{
	return sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -EIO;
}

int db_prep(sqlite3 *db, const char *sql, sqlite3_stmt **st)
{
	*st = NULL;
	return sqlite3_prepare_v2(db, sql, -1, st, NULL) == SQLITE_OK ? 0 : -EIO;
}

int db_begin(sqlite3 *db)
{
	/* IMMEDIATE takes the write lock now, so a transaction never fails
	 * half-way to upgrade it (the busy timeout covers other processes) */
	return db_exec(db, "BEGIN IMMEDIATE");
}

int db_commit(sqlite3 *db)
{
	return db_exec(db, "COMMIT");
}

void db_rollback(sqlite3 *db)
{
	/* some errors (SQLITE_FULL, IOERR) already rolled back */
	if (!sqlite3_get_autocommit(db))
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
}

int db_step_done(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);
	if (rc == SQLITE_DONE)
		return 0;
	if (sqlite3_extended_errcode(sqlite3_db_handle(st)) == SQLITE_CONSTRAINT_PRIMARYKEY)
		return -EEXIST;
	return -EIO;
}

int db_bind_text(sqlite3_stmt *st, int i, const char *s)
{
	return sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
}

int db_col_copy(sqlite3_stmt *st, int col, char *dst, size_t size)
{
	const unsigned char *t = sqlite3_column_text(st, col);
	int n = sqlite3_column_bytes(st, col);
	if (!t || n < 0 || (size_t)n >= size)
		return -EIO;
	memcpy(dst, t, (size_t)n);
	dst[n] = '\0';
	return 0;
}

int db_rows(sqlite3_stmt *st, struct buf *out, size_t size,
	    int (*fill)(sqlite3_stmt *st, void *rec))
{
	for (;;) {
		int rc = sqlite3_step(st);
		if (rc == SQLITE_DONE)
			return 0;
		if (rc != SQLITE_ROW)
			return -EIO;
		void *rec = buf_push(out, size);
		if (!rec)
			return -ENOMEM;
		int r = fill(st, rec);
		if (r) {
			out->len -= size;
			return r;
		}
	}
}

/* ---- open, migrate, close ---- */

static int pragma_text(sqlite3 *db, const char *sql, char *out, size_t outlen)
{
	sqlite3_stmt *st;
	int r = db_prep(db, sql, &st);
	if (r)
		return r;
	if (sqlite3_step(st) != SQLITE_ROW || db_col_copy(st, 0, out, outlen))
		r = -EIO;
	sqlite3_finalize(st);
	return r;
}

static int migrate(sqlite3 *db, const char *const *migrations, int n, const char *program,
		   char *err, size_t errlen)
{
	char v[32];
	int r = db_begin(db);
	/* read inside the write transaction: two processes opening one new
	 * file cannot both create the schema */
	if (!r)
		r = pragma_text(db, "PRAGMA user_version", v, sizeof(v));
	if (r) {
		errbuf_set(err, errlen, 0, "cannot read schema version: %s", sqlite3_errmsg(db));
		goto fail;
	}
	long version = strtol(v, NULL, 10);
	if (version < 0 || version > n) {
		r = errbuf_set(err, errlen, -EPROTO,
			       "unknown schema version %ld (this %s knows up to %d)", version,
			       program, n);
		goto fail;
	}
	if (version == n) {
		db_rollback(db);
		return 0;
	}
	for (long i = version; i < n; i++) {
		if ((r = db_exec(db, migrations[i]))) {
			errbuf_set(err, errlen, 0, "cannot migrate schema to version %ld: %s",
				   i + 1, sqlite3_errmsg(db));
			goto fail;
		}
	}
	char sql[64];
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", n);
	if ((r = db_exec(db, sql)) || (r = db_commit(db))) {
		errbuf_set(err, errlen, 0, "cannot record schema version: %s", sqlite3_errmsg(db));
		goto fail;
	}
	return 0;
fail:
	db_rollback(db);
	return r;
}

static int open_db(const char *path, const char *const *migrations, int n, const char *program,
		   sqlite3 **out, char *err, size_t errlen);

int db_open(const char *path, const char *const *migrations, int n, const char *program,
	    pthread_mutex_t *lock, sqlite3 **out, char *err, size_t errlen)
{
	*out = NULL;
	int e = lock ? pthread_mutex_init(lock, NULL) : 0;
	if (e)
		return errbuf_set(err, errlen, -e, "cannot create a mutex: %s", strerror(e));
	int r = open_db(path, migrations, n, program, out, err, errlen);
	if (r && lock)
		pthread_mutex_destroy(lock);
	return r;
}

static int open_db(const char *path, const char *const *migrations, int n, const char *program,
		   sqlite3 **out, char *err, size_t errlen)
{
	if (!path || !*path)
		return errbuf_set(err, errlen, -EINVAL, "empty database path");
	/* Created here, so it is 0600 whatever the umask: a store holds keys'
	 * hashes, sandboxes' environments, conversations. */
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		int e = errno;
		return errbuf_set(err, errlen, -e, "cannot open '%s': %s", path, strerror(e));
	}
	close(fd);
	sqlite3 *db = NULL;
	int r = -EIO;
	/* NOMUTEX: the caller's lock already serialises the connection */
	int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
	if (sqlite3_open_v2(path, &db, flags, NULL) != SQLITE_OK) {
		errbuf_set(err, errlen, 0, "cannot open '%s': %s", path,
			   db ? sqlite3_errmsg(db) : "out of memory");
		goto fail;
	}
	sqlite3_extended_result_codes(db, 1);
	sqlite3_busy_timeout(db, DB_BUSY_TIMEOUT_MS);
	char mode[16], fk[16];
	if (pragma_text(db, "PRAGMA journal_mode = WAL", mode, sizeof(mode)) ||
	    strcmp(mode, "wal")) {
		errbuf_set(err, errlen, 0, "cannot set WAL mode on '%s': %s", path,
			   sqlite3_errmsg(db));
		goto fail;
	}
	if (db_exec(db, "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL") ||
	    pragma_text(db, "PRAGMA foreign_keys", fk, sizeof(fk)) || strcmp(fk, "1")) {
		errbuf_set(err, errlen, 0, "cannot set pragmas on '%s': %s", path,
			   sqlite3_errmsg(db));
		goto fail;
	}
	if ((r = migrate(db, migrations, n, program, err, errlen)))
		goto fail;
	*out = db;
	return 0;
fail:
	sqlite3_close(db);
	return r;
}

void db_close(pthread_mutex_t *lock, sqlite3 *db)
{
	/* every statement is finalized before its function returns, so the
	 * close (and its final WAL checkpoint) cannot be refused as busy */
	sqlite3_close(db);
	if (lock)
		pthread_mutex_destroy(lock);
}

/* ---- text, tokens and keys ---- */

int db_text_ok(const char *s, size_t size, size_t min, int space)
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

void db_hex(char *out, const unsigned char *in, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

int db_token(const char *prefix, size_t nbytes, char *out, size_t outlen)
{
	unsigned char raw[64];
	size_t pl = strlen(prefix);
	if (nbytes > sizeof(raw) || pl + 2 * nbytes + 1 > outlen)
		return -ERANGE;
	for (size_t got = 0; got < nbytes;) {
		ssize_t r = getrandom(raw + got, nbytes - got, 0);
		if (r < 0 && errno != EINTR) {
			int e = errno;
			explicit_bzero(raw, sizeof(raw));
			return -e;
		}
		got += r > 0 ? (size_t)r : 0;
	}
	memcpy(out, prefix, pl);
	db_hex(out + pl, raw, nbytes);
	explicit_bzero(raw, sizeof(raw));
	return 0;
}

int db_key_hash(const char *secret, char *hash)
{
	size_t len = secret ? strnlen(secret, DB_SECRET_MAX + 1) : 0;
	if (len == 0 || len > DB_SECRET_MAX)
		return -ENOENT;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	if (EVP_Digest(secret, len, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
		return -EIO;
	db_hex(hash, md, 32);
	return 0;
}

int db_key_find(sqlite3 *db, const char *sql, const char *secret, sqlite3_stmt **st)
{
	char hash[DB_HASH_LEN];
	*st = NULL;
	int r = db_key_hash(secret, hash);
	if (r)
		return r;
	if ((r = db_prep(db, sql, st)))
		return r;
	if (db_bind_text(*st, 1, hash) != SQLITE_OK)
		return -EIO;
	int rc = sqlite3_step(*st);
	return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : -EIO;
}
