/*
 * db: what a program's SQLite store stands on. Opening: the file made 0600
 * by us (SQLite gives its -wal and -shm files the same mode), WAL, foreign
 * keys, a busy timeout, and the schema brought up to date from the
 * program's append-only table of migrations inside BEGIN IMMEDIATE (two
 * processes opening one new file never both create it). Statements: the
 * small helpers every store repeats. API keys: a secret is made from
 * random bytes, shown once and kept only as its SHA-256, looked up by that
 * hash. SQLite failures are -EIO; nothing here logs.
 */
#ifndef CPUOS_DB_H
#define CPUOS_DB_H

#include <pthread.h>
#include <sqlite3.h>
#include <stddef.h>

struct buf;

#define DB_HASH_LEN	 65  /* 64 hex and the NUL */
#define DB_SECRET_MAX	 256 /* a longer presented secret is no key of ours: not hashed */
#define DB_BUSY_TIMEOUT_MS 5000

/* Opens (creating it 0600 if needed) the database at path and migrates it:
 * migrations[v] takes user_version v to v + 1, and a file of a newer
 * version than n is refused (-EPROTO), named after program in err. 0 with
 * the connection in *out, or -errno with a reason in err. The connection
 * is opened NOMUTEX: its user serialises it, with *lock when lock is not
 * NULL (initialised here, and destroyed again on an error). */
int db_open(const char *path, const char *const *migrations, int n, const char *program,
	    pthread_mutex_t *lock, sqlite3 **out, char *err, size_t errlen);
/* Closes db (NULL: nothing), every statement of which must be finalized,
 * and destroys *lock unless lock is NULL. */
void db_close(pthread_mutex_t *lock, sqlite3 *db);

/* Runs sql (statements without rows): 0 or -EIO. */
int db_exec(sqlite3 *db, const char *sql);
/* Prepares sql into *st (NULL on failure): 0 or -EIO. */
int db_prep(sqlite3 *db, const char *sql, sqlite3_stmt **st);
/* Starts an IMMEDIATE (write-locked) transaction: 0 or -EIO. */
int db_begin(sqlite3 *db);
/* Commits the open transaction: 0 or -EIO. */
int db_commit(sqlite3 *db);
/* Rolls back the open transaction, if SQLite has not already done so. */
void db_rollback(sqlite3 *db);
/* Steps a statement that returns no rows: 0, -EEXIST on a primary key
 * clash, -EIO on anything else. */
int db_step_done(sqlite3_stmt *st);
/* Binds s (copied) to parameter i: an SQLite result code. */
int db_bind_text(sqlite3_stmt *st, int i, const char *s);
/* Copies text column col into dst[size]: 0, or -EIO if NULL or too long
 * (the row did not come from this store). */
int db_col_copy(sqlite3_stmt *st, int col, char *dst, size_t size);
/* Steps st to its end, adding a zeroed record of size bytes to *out for
 * each row and filling it with fill(st, record): 0; fill's nonzero
 * return, -ENOMEM or -EIO (out then holds the rows before). */
int db_rows(sqlite3_stmt *st, struct buf *out, size_t size,
	    int (*fill)(sqlite3_stmt *st, void *rec));

/* 1 if s holds min..size-1 bytes, each printable ASCII (space only when
 * space is set). */
int db_text_ok(const char *s, size_t size, size_t min, int space);
/* Writes the lowercase hex of in[0..n) and a NUL to out[2n + 1]. */
void db_hex(char *out, const unsigned char *in, size_t n);
/* out[outlen] = prefix and the hex of nbytes (at most 64) random bytes:
 * key secrets and row ids. 0, -ERANGE when it does not fit, -errno. */
int db_token(const char *prefix, size_t nbytes, char *out, size_t outlen);
/* hash[DB_HASH_LEN] = the hex SHA-256 of a presented secret: 0, -ENOENT
 * for one that no key of ours can be (NULL, empty, over DB_SECRET_MAX
 * bytes), -EIO. */
int db_key_hash(const char *secret, char *hash);
/* Finds the row of sql (a SELECT whose ?1 is a key's hash) for the
 * presented secret: 0 with st on that row (read its columns), -ENOENT for
 * no such key, -EIO. Finalize *st in every case. Compares hashes, never
 * secrets. */
int db_key_find(sqlite3 *db, const char *sql, const char *secret, sqlite3_stmt **st);

#endif
