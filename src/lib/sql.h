/*
 * sql: one connection to a store's database, SQLite (a file, on lib/db:
 * WAL, 0600, foreign keys) or PostgreSQL (libpq), behind one set of calls
 * shaped like SQLite's own, so a store writes its queries once. Queries
 * number their parameters ?1, ?2, ...; on PostgreSQL they become $1, $2,
 * each sent with the type it was bound as (text, bigint; NULL as text).
 * What the two dialects do not share a store spells per sql_kind.
 *
 * Migrations are one list: step i takes the schema from version i to
 * i + 1 on either back end, each with its own text where they differ.
 * SQLite keeps the version in user_version; PostgreSQL in a table
 * cpuos_schema (one row per program), read and changed under an advisory
 * lock in the migrating transaction, so several processes starting at
 * once (API replicas) migrate once.
 *
 * Not thread-safe: one thread at a time per connection (the caller's
 * lock). A PostgreSQL connection that broke (the server restarted) is
 * made anew before the next statement; the statement that met the break
 * fails. Nothing here logs.
 */
#ifndef CPUOS_SQL_H
#define CPUOS_SQL_H

#include <stddef.h>

struct sql;
struct sql_stmt;

enum sql_kind { SQL_SQLITE, SQL_PG };

/* What the calls below answer (SQL_OK, SQL_ROW and SQL_DONE are
 * SQLite's numbers). */
#define SQL_OK	   0
#define SQL_ERROR  1
#define SQL_UNIQUE 19  /* a UNIQUE or PRIMARY KEY clash */
#define SQL_ROW	   100
#define SQL_DONE   101

struct sql_migration {
	const char *sqlite; /* SQLite's text */
	const char *pg;     /* PostgreSQL's; NULL: the same text; "": nothing */
};

/* 1 if target names a PostgreSQL database ("postgres://",
 * "postgresql://", or a libpq keyword string such as "host=... dbname=..."),
 * else it is a SQLite file's path. */
int sql_is_pg(const char *target);

/* Opens target (sql_is_pg) and brings its schema to version n with
 * migrations[0..n), refusing one newer than n (-EPROTO), named after
 * program in err. 0 with the connection in *out, or -errno with a reason
 * in err. */
int sql_open(const char *target, const struct sql_migration *migrations, int n,
	     const char *program, struct sql **out, char *err, size_t errlen);
void sql_close(struct sql *db);
enum sql_kind sql_kind(const struct sql *db);
/* The last error's text (valid until the next call on db). */
const char *sql_errmsg(struct sql *db);

/* Runs sql, statements that return no rows: 0 or -EIO. */
int sql_exec(struct sql *db, const char *sql);
/* Prepares sql into *st (NULL on failure): 0 or -EIO. */
int sql_prep(struct sql *db, const char *sql, struct sql_stmt **st);
/* Binds parameter i (from 1): SQL_OK, or SQL_ERROR (no such parameter,
 * no memory). Texts are copied. */
int sql_bind_text(struct sql_stmt *st, int i, const char *s);
int sql_bind_textn(struct sql_stmt *st, int i, const char *s, size_t n);
int sql_bind_int64(struct sql_stmt *st, int i, long long v);
int sql_bind_null(struct sql_stmt *st, int i);
/* The highest parameter number the statement names. */
int sql_param_count(struct sql_stmt *st);
/* Runs the statement the first time, then moves to its next row: SQL_ROW,
 * SQL_DONE, SQL_UNIQUE or SQL_ERROR. */
int sql_step(struct sql_stmt *st);
/* The current row's column col: its text (NULL for NULL), its length, as
 * a number (0 for NULL). */
const char *sql_col_text(struct sql_stmt *st, int col);
size_t sql_col_bytes(struct sql_stmt *st, int col);
long long sql_col_int64(struct sql_stmt *st, int col);
double sql_col_double(struct sql_stmt *st, int col);
/* Makes the statement run again on the next sql_step, bindings kept. */
void sql_reset(struct sql_stmt *st);
void sql_finalize(struct sql_stmt *st); /* NULL: nothing */
/* Rows the last statement to finish on db inserted, changed or deleted. */
long long sql_changes(struct sql *db);

/* PostgreSQL: runs claim, a SELECT of one boolean that takes a session
 * lock (pg_try_advisory_lock...), and runs it again on every new
 * connection made after a break; a connection that cannot take it again
 * does nothing more (every statement fails). 0, -EBUSY when the lock is
 * another's, -EIO. SQLite: 0. */
int sql_reclaim(struct sql *db, const char *claim);

/* A transaction: BEGIN IMMEDIATE on SQLite (the write lock now), BEGIN on
 * PostgreSQL. 0 or -EIO. */
int sql_begin(struct sql *db);
int sql_commit(struct sql *db);
/* Rolls back the open transaction, if there is one still. */
void sql_rollback(struct sql *db);

/* PostgreSQL's LISTEN, on a connection of its own that runs no statements:
 * how a process learns that rows it remembers changed elsewhere (NOTIFY).
 * Channels are plain identifiers. 0 with *out, -EINVAL (target is not
 * PostgreSQL, a bad channel), -errno with a reason in err. */
struct sql_listen;
int sql_listen_open(const char *target, const char *program, const char *const *channels,
		    int n, struct sql_listen **out, char *err, size_t errlen);
/* Waits up to ms for notifications and calls fn for each: how many came,
 * 0 when none did, -EIO when the connection broke (then open another: what
 * was announced meanwhile is lost, so assume everything changed). */
int sql_listen_wait(struct sql_listen *l, int ms,
		    void (*fn)(void *arg, const char *channel, const char *payload), void *arg);
void sql_listen_close(struct sql_listen *l);

#endif
