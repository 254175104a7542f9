/* sql: see sql.h. */
#include "lib/sql.h"

#include "common/errbuf.h"
#include "lib/db.h"

#include <ctype.h>
#include <errno.h>
#include <libpq-fe.h>
#include <limits.h>
#include <poll.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PostgreSQL's type numbers (pg_type.oid) of what parameters are sent as. */
#define PG_TEXT 25
#define PG_INT8 20

/* The advisory lock migrations take: any number, the same in every
 * program that shares a database. */
#define PG_SCHEMA_LOCK 7306547811LL

struct sql {
	enum sql_kind kind;
	sqlite3 *lite;
	PGconn *pg;
	long long changes; /* PostgreSQL: of the last statement that finished */
	int in_tx;	   /* PostgreSQL: between BEGIN and COMMIT or ROLLBACK */
	/* PostgreSQL: what a new connection must claim again (sql_reclaim),
	 * and whether one could not: then nothing more is done */
	char reclaim[128];
	int lost;
	char msg[512];
};

struct sql_stmt {
	struct sql *db;
	sqlite3_stmt *lite;
	/* PostgreSQL: the text with $N, its parameters, and the result once
	 * run, walked row by row */
	char *text;
	int nparams;
	char **vals;
	Oid *types;
	PGresult *res;
	int row, nrows, ran, failed;
};

int sql_is_pg(const char *target)
{
	if (!target)
		return 0;
	if (!strncmp(target, "postgres://", 11) || !strncmp(target, "postgresql://", 13))
		return 1;
	/* "keyword=value ...": a word of letters and underscores, then '=' */
	size_t n = strspn(target, "abcdefghijklmnopqrstuvwxyz_");
	return n > 0 && target[n] == '=';
}

enum sql_kind sql_kind(const struct sql *db)
{
	return db->kind;
}

const char *sql_errmsg(struct sql *db)
{
	if (db->kind == SQL_SQLITE)
		return sqlite3_errmsg(db->lite);
	return db->msg;
}

/* Keeps PostgreSQL's message of res (or of the connection), on one line. */
static void pg_msg(struct sql *db, const PGresult *res)
{
	const char *m = res ? PQresultErrorMessage(res) : NULL;
	if (!m || !*m)
		m = PQerrorMessage(db->pg);
	snprintf(db->msg, sizeof(db->msg), "%s", m && *m ? m : "no answer from PostgreSQL");
	for (char *p = db->msg; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = p[1] ? ' ' : '\0';
}

/* The connection, made anew if it broke: 0 or -EIO. Not inside a
 * transaction: the break ended it, and a statement on a new connection
 * would commit on its own what the caller thinks part of it. */
static int pg_ready(struct sql *db)
{
	if (db->lost) {
		snprintf(db->msg, sizeof(db->msg), "this process lost its claim on the database");
		return -EIO;
	}
	if (PQstatus(db->pg) == CONNECTION_OK)
		return 0;
	if (db->in_tx) {
		snprintf(db->msg, sizeof(db->msg), "the connection to PostgreSQL broke in a "
						   "transaction");
		return -EIO;
	}
	PQreset(db->pg);
	if (PQstatus(db->pg) != CONNECTION_OK) {
		pg_msg(db, NULL);
		return -EIO;
	}
	/* Session locks went with the old connection. */
	if (db->reclaim[0]) {
		PGresult *res = PQexec(db->pg, db->reclaim);
		db->lost = !res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
			   strcmp(PQgetvalue(res, 0, 0), "t");
		PQclear(res);
	}
	return db->lost ? -EIO : 0;
}

int sql_reclaim(struct sql *db, const char *claim)
{
	if (db->kind != SQL_PG)
		return 0;
	PGresult *res = PQexec(db->pg, claim);
	int ok = res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
	int got = ok && !strcmp(PQgetvalue(res, 0, 0), "t");
	if (!ok)
		pg_msg(db, res);
	PQclear(res);
	if (got)
		snprintf(db->reclaim, sizeof(db->reclaim), "%s", claim);
	return !ok ? -EIO : got ? 0 : -EBUSY;
}

/* Runs text, no parameters: 0 or -EIO; with *tag, the command's tag. */
static int pg_exec(struct sql *db, const char *text, char *tag, size_t taglen)
{
	if (pg_ready(db) < 0)
		return -EIO;
	PGresult *res = PQexec(db->pg, text);
	ExecStatusType s = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	int r = s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK ? 0 : -EIO;
	if (r)
		pg_msg(db, res);
	if (tag)
		snprintf(tag, taglen, "%s", res ? PQcmdStatus(res) : "");
	PQclear(res);
	return r;
}

int sql_exec(struct sql *db, const char *text)
{
	if (db->kind == SQL_SQLITE)
		return db_exec(db->lite, text);
	return pg_exec(db, text, NULL, 0);
}

int sql_begin(struct sql *db)
{
	if (db->kind == SQL_SQLITE)
		return db_begin(db->lite);
	int r = pg_exec(db, "BEGIN", NULL, 0);
	db->in_tx = r == 0;
	return r;
}

int sql_commit(struct sql *db)
{
	if (db->kind == SQL_SQLITE)
		return db_commit(db->lite);
	/* Only a transaction still whole commits: one that failed part-way
	 * "commits" as a rollback, one whose connection broke is gone. */
	char tag[32] = "";
	int r = PQtransactionStatus(db->pg) == PQTRANS_INTRANS
			? pg_exec(db, "COMMIT", tag, sizeof(tag))
			: -EIO;
	if (r == 0 && strcmp(tag, "COMMIT"))
		r = -EIO;
	if (r < 0 && !strcmp(tag, "ROLLBACK"))
		snprintf(db->msg, sizeof(db->msg), "the transaction was rolled back");
	db->in_tx = 0;
	if (r < 0)
		sql_rollback(db);
	return r;
}

void sql_rollback(struct sql *db)
{
	if (db->kind == SQL_SQLITE) {
		db_rollback(db->lite);
		return;
	}
	db->in_tx = 0;
	PGTransactionStatusType t = PQtransactionStatus(db->pg);
	if (t == PQTRANS_INTRANS || t == PQTRANS_INERROR)
		PQclear(PQexec(db->pg, "ROLLBACK"));
}

long long sql_changes(struct sql *db)
{
	return db->kind == SQL_SQLITE ? sqlite3_changes(db->lite) : db->changes;
}

/* ---- statements ---- */

/* text with each ?N as $N and each bare ? numbered (not inside '...'),
 * and the highest number. */
static char *pg_text(const char *text, int *nparams)
{
	size_t n = strlen(text), cap = 4 * n + 1, o = 0; /* "?" becomes at most "$999" */
	char *out = malloc(cap);
	if (!out)
		return NULL;
	int quoted = 0, max = 0;
	for (size_t i = 0; i <= n; i++) {
		char c = text[i];
		if (c == '\'')
			quoted = !quoted;
		if (c == '?' && !quoted && isdigit((unsigned char)text[i + 1])) {
			long v = strtol(text + i + 1, NULL, 10);
			if (v < 1 || v > 999) {
				free(out);
				return NULL;
			}
			max = v > max ? (int)v : max;
			c = '$';
		} else if (c == '?' && !quoted) {
			/* a bare '?' is one more than the largest so far, as in
			 * SQLite: its number written out in its place */
			if (++max > 999 || o + 5 > cap) {
				free(out);
				return NULL;
			}
			o += (size_t)sprintf(out + o, "$%d", max);
			continue;
		}
		out[o++] = c;
	}
	*nparams = max;
	return out;
}

int sql_prep(struct sql *db, const char *text, struct sql_stmt **out)
{
	*out = NULL;
	struct sql_stmt *st = calloc(1, sizeof(*st));
	if (!st)
		return -EIO;
	st->db = db;
	if (db->kind == SQL_SQLITE) {
		if (db_prep(db->lite, text, &st->lite) < 0) {
			free(st);
			return -EIO;
		}
		*out = st;
		return 0;
	}
	st->text = pg_text(text, &st->nparams);
	if (st->text && st->nparams) {
		st->vals = calloc((size_t)st->nparams, sizeof(*st->vals));
		st->types = calloc((size_t)st->nparams, sizeof(*st->types));
	}
	if (!st->text || (st->nparams && (!st->vals || !st->types))) {
		snprintf(db->msg, sizeof(db->msg), "cannot prepare a statement");
		sql_finalize(st);
		return -EIO;
	}
	for (int i = 0; i < st->nparams; i++)
		st->types[i] = PG_TEXT; /* unbound: NULL, as text */
	*out = st;
	return 0;
}

/* Sets PostgreSQL parameter i to v (taken), of type: SQL_OK or SQL_ERROR. */
static int pg_bind(struct sql_stmt *st, int i, char *v, Oid type, int have)
{
	if (i < 1 || i > st->nparams || (have && !v)) {
		free(v);
		return SQL_ERROR;
	}
	free(st->vals[i - 1]);
	st->vals[i - 1] = v;
	st->types[i - 1] = type;
	return SQL_OK;
}

int sql_bind_textn(struct sql_stmt *st, int i, const char *s, size_t n)
{
	if (st->lite)
		return n > INT_MAX ? SQL_ERROR
				   : sqlite3_bind_text(st->lite, i, s, (int)n, SQLITE_TRANSIENT);
	/* Text travels NUL-terminated: one with a NUL inside cannot. */
	if (memchr(s, '\0', n))
		return SQL_ERROR;
	char *v = malloc(n + 1);
	if (v) {
		memcpy(v, s, n);
		v[n] = '\0';
	}
	return pg_bind(st, i, v, PG_TEXT, 1);
}

int sql_bind_text(struct sql_stmt *st, int i, const char *s)
{
	if (!s)
		return sql_bind_null(st, i);
	return sql_bind_textn(st, i, s, strlen(s));
}

int sql_bind_int64(struct sql_stmt *st, int i, long long v)
{
	if (st->lite)
		return sqlite3_bind_int64(st->lite, i, v);
	char text[24];
	snprintf(text, sizeof(text), "%lld", v);
	return pg_bind(st, i, strdup(text), PG_INT8, 1);
}

int sql_bind_null(struct sql_stmt *st, int i)
{
	if (st->lite)
		return sqlite3_bind_null(st->lite, i);
	/* A NULL of type text, as unbound parameters are: "?1 IS NULL"
	 * alone gives PostgreSQL nothing to infer a type from. (So a NULL
	 * compared with a number fails: the store binds none.) */
	return pg_bind(st, i, NULL, PG_TEXT, 0);
}

int sql_param_count(struct sql_stmt *st)
{
	return st->lite ? sqlite3_bind_parameter_count(st->lite) : st->nparams;
}

static int lite_step(struct sql_stmt *st)
{
	int rc = sqlite3_step(st->lite);
	if (rc == SQLITE_ROW || rc == SQLITE_DONE)
		return rc == SQLITE_ROW ? SQL_ROW : SQL_DONE;
	int ext = sqlite3_extended_errcode(sqlite3_db_handle(st->lite));
	return ext == SQLITE_CONSTRAINT_PRIMARYKEY || ext == SQLITE_CONSTRAINT_UNIQUE ? SQL_UNIQUE
										       : SQL_ERROR;
}

int sql_step(struct sql_stmt *st)
{
	if (st->lite)
		return lite_step(st);
	struct sql *db = st->db;
	if (st->failed)
		return st->failed; /* as SQLite: an error is the answer again */
	if (!st->ran) {
		st->ran = 1;
		if (pg_ready(db) < 0)
			return st->failed = SQL_ERROR;
		st->res = PQexecParams(db->pg, st->text, st->nparams, st->types,
				       (const char *const *)st->vals, NULL, NULL, 0);
		ExecStatusType s = st->res ? PQresultStatus(st->res) : PGRES_FATAL_ERROR;
		if (s == PGRES_COMMAND_OK) {
			db->changes = strtoll(PQcmdTuples(st->res), NULL, 10);
			return SQL_DONE;
		}
		if (s != PGRES_TUPLES_OK) {
			pg_msg(db, st->res);
			const char *state =
			    st->res ? PQresultErrorField(st->res, PG_DIAG_SQLSTATE) : NULL;
			return st->failed = state && !strcmp(state, "23505") ? SQL_UNIQUE : SQL_ERROR;
		}
		st->nrows = PQntuples(st->res);
		st->row = -1;
	}
	if (!st->res || PQresultStatus(st->res) != PGRES_TUPLES_OK)
		return SQL_DONE;
	return ++st->row < st->nrows ? SQL_ROW : SQL_DONE;
}

/* 1 if col of the current row can be read. */
static int pg_cell(struct sql_stmt *st, int col)
{
	return st->res && st->row >= 0 && st->row < st->nrows && col >= 0 &&
	       col < PQnfields(st->res) && !PQgetisnull(st->res, st->row, col);
}

const char *sql_col_text(struct sql_stmt *st, int col)
{
	if (st->lite)
		return (const char *)sqlite3_column_text(st->lite, col);
	return pg_cell(st, col) ? PQgetvalue(st->res, st->row, col) : NULL;
}

size_t sql_col_bytes(struct sql_stmt *st, int col)
{
	if (st->lite) {
		int n = sqlite3_column_bytes(st->lite, col);
		return n > 0 ? (size_t)n : 0;
	}
	return pg_cell(st, col) ? (size_t)PQgetlength(st->res, st->row, col) : 0;
}

long long sql_col_int64(struct sql_stmt *st, int col)
{
	if (st->lite)
		return sqlite3_column_int64(st->lite, col);
	return pg_cell(st, col) ? strtoll(PQgetvalue(st->res, st->row, col), NULL, 10) : 0;
}

double sql_col_double(struct sql_stmt *st, int col)
{
	if (st->lite)
		return sqlite3_column_double(st->lite, col);
	return pg_cell(st, col) ? strtod(PQgetvalue(st->res, st->row, col), NULL) : 0;
}

void sql_reset(struct sql_stmt *st)
{
	if (st->lite) {
		sqlite3_reset(st->lite);
		return;
	}
	PQclear(st->res);
	st->res = NULL;
	st->ran = st->failed = 0;
	st->row = st->nrows = 0;
}

void sql_finalize(struct sql_stmt *st)
{
	if (!st)
		return;
	if (st->lite)
		sqlite3_finalize(st->lite);
	PQclear(st->res);
	for (int i = 0; st->vals && i < st->nparams; i++)
		free(st->vals[i]);
	free(st->vals);
	free(st->types);
	free(st->text);
	free(st);
}

/* ---- open, migrate, close ---- */

static void quiet(void *arg, const char *message)
{
	(void)arg; /* NOTICEs ("already exists, skipping") are not errors */
	(void)message;
}

/* The version of program's schema in db, -1 for none yet: 0 or -EIO. */
static int pg_version(struct sql *db, const char *program, long long *version)
{
	struct sql_stmt *st;
	int r = sql_prep(db, "SELECT version FROM cpuos_schema WHERE program = ?1", &st);
	if (r)
		return r;
	*version = -1;
	int rc = sql_bind_text(st, 1, program) == SQL_OK ? sql_step(st) : SQL_ERROR;
	if (rc == SQL_ROW)
		*version = sql_col_int64(st, 0);
	else if (rc != SQL_DONE)
		r = -EIO;
	sql_finalize(st);
	return r;
}

static int pg_migrate(struct sql *db, const struct sql_migration *m, int n, const char *program,
		      char *err, size_t errlen)
{
	char lock[96];
	snprintf(lock, sizeof(lock), "SELECT pg_advisory_xact_lock(%lld)", PG_SCHEMA_LOCK);
	long long v = 0;
	int r = sql_begin(db);
	/* read under the lock, inside the transaction that migrates */
	if (!r)
		r = pg_exec(db, lock, NULL, 0);
	if (!r)
		r = pg_exec(db,
			    "CREATE TABLE IF NOT EXISTS cpuos_schema (program TEXT PRIMARY KEY,"
			    " version BIGINT NOT NULL)",
			    NULL, 0);
	if (!r)
		r = pg_version(db, program, &v);
	if (r) {
		errbuf_set(err, errlen, 0, "cannot read schema version: %s", db->msg);
		goto fail;
	}
	if (v < 0)
		v = 0;
	if (v > n) {
		r = errbuf_set(err, errlen, -EPROTO,
			       "unknown schema version %lld (this %s knows up to %d)", v, program, n);
		goto fail;
	}
	for (long long i = v; i < n; i++) {
		const char *text = m[i].pg ? m[i].pg : m[i].sqlite;
		if (*text && (r = pg_exec(db, text, NULL, 0)) < 0) {
			errbuf_set(err, errlen, 0, "cannot migrate schema to version %lld: %s", i + 1,
				   db->msg);
			goto fail;
		}
	}
	struct sql_stmt *st = NULL;
	r = sql_prep(db,
		     "INSERT INTO cpuos_schema (program, version) VALUES (?1, ?2) "
		     "ON CONFLICT (program) DO UPDATE SET version = excluded.version",
		     &st);
	if (!r && (sql_bind_text(st, 1, program) != SQL_OK || sql_bind_int64(st, 2, n) != SQL_OK ||
		   sql_step(st) != SQL_DONE))
		r = -EIO;
	sql_finalize(st);
	if (!r)
		r = sql_commit(db);
	if (r) {
		errbuf_set(err, errlen, 0, "cannot record schema version: %s", db->msg);
		goto fail;
	}
	return 0;
fail:
	sql_rollback(db);
	return r;
}

static int pg_open(struct sql *db, const char *target, const struct sql_migration *m, int n,
		   const char *program, char *err, size_t errlen)
{
	/* A server that stops answering must not hold a store's lock for
	 * long: the connection gives up on unacknowledged data after 30 s
	 * and on a silent peer after 30 + 3 x 10 s, the server ends a
	 * statement after 30 s. The target's own settings, given after
	 * these, win. */
	const char *const keys[] = { "connect_timeout", "tcp_user_timeout", "keepalives_idle",
				     "keepalives_interval", "keepalives_count", "options",
				     "application_name", "dbname", NULL };
	const char *const vals[] = { "10", "30000", "30", "10", "3", "-c statement_timeout=30000",
				     program, target, NULL };
	db->pg = PQconnectdbParams(keys, vals, 1);
	if (!db->pg)
		return errbuf_set(err, errlen, -ENOMEM, "out of memory");
	if (PQstatus(db->pg) != CONNECTION_OK) {
		pg_msg(db, NULL);
		return errbuf_set(err, errlen, -EIO, "cannot connect to PostgreSQL: %s", db->msg);
	}
	PQsetNoticeProcessor(db->pg, quiet, NULL);
	return pg_migrate(db, m, n, program, err, errlen);
}

int sql_open(const char *target, const struct sql_migration *m, int n, const char *program,
	     struct sql **out, char *err, size_t errlen)
{
	*out = NULL;
	struct sql *db = calloc(1, sizeof(*db));
	if (!db)
		return errbuf_set(err, errlen, -ENOMEM, "out of memory");
	int r;
	if (sql_is_pg(target)) {
		db->kind = SQL_PG;
		r = pg_open(db, target, m, n, program, err, errlen);
	} else {
		db->kind = SQL_SQLITE;
		const char **texts = calloc((size_t)n + 1, sizeof(*texts));
		if (!texts) {
			free(db);
			return errbuf_set(err, errlen, -ENOMEM, "out of memory");
		}
		for (int i = 0; i < n; i++)
			texts[i] = m[i].sqlite;
		r = db_open(target, texts, n, program, NULL, &db->lite, err, errlen);
		free(texts);
	}
	if (r) {
		sql_close(db);
		return r;
	}
	*out = db;
	return 0;
}

void sql_close(struct sql *db)
{
	if (!db)
		return;
	if (db->lite)
		db_close(NULL, db->lite);
	if (db->pg)
		PQfinish(db->pg);
	free(db);
}

/* --- LISTEN ---------------------------------------------------------------------- */

struct sql_listen {
	PGconn *pg;
};

static int channel_ok(const char *c)
{
	size_t n = strlen(c);
	return n > 0 && n < 64 && strspn(c, "abcdefghijklmnopqrstuvwxyz_0123456789") == n &&
	       !isdigit((unsigned char)c[0]);
}

int sql_listen_open(const char *target, const char *program, const char *const *channels,
		    int n, struct sql_listen **out, char *err, size_t errlen)
{
	*out = NULL;
	if (!sql_is_pg(target))
		return errbuf_set(err, errlen, -EINVAL, "LISTEN needs PostgreSQL");
	for (int i = 0; i < n; i++)
		if (!channel_ok(channels[i]))
			return errbuf_set(err, errlen, -EINVAL, "not a channel name: '%s'", channels[i]);
	struct sql_listen *l = calloc(1, sizeof(*l));
	if (!l)
		return errbuf_set(err, errlen, -ENOMEM, "out of memory");
	/* as pg_open; a silent server is found out by the keepalives */
	const char *const keys[] = { "connect_timeout", "tcp_user_timeout", "keepalives_idle",
				     "keepalives_interval", "keepalives_count", "application_name",
				     "dbname", NULL };
	const char *const vals[] = { "10", "30000", "30", "10", "3", program, target, NULL };
	l->pg = PQconnectdbParams(keys, vals, 1);
	int r = 0;
	if (!l->pg) {
		r = errbuf_set(err, errlen, -ENOMEM, "out of memory");
	} else if (PQstatus(l->pg) != CONNECTION_OK) {
		r = errbuf_set(err, errlen, -EIO, "cannot connect to PostgreSQL: %s",
			       PQerrorMessage(l->pg));
	} else {
		PQsetNoticeProcessor(l->pg, quiet, NULL);
		for (int i = 0; !r && i < n; i++) {
			char q[80];
			snprintf(q, sizeof(q), "LISTEN %s", channels[i]);
			PGresult *res = PQexec(l->pg, q);
			if (PQresultStatus(res) != PGRES_COMMAND_OK)
				r = errbuf_set(err, errlen, -EIO, "LISTEN %s: %s", channels[i],
					       PQerrorMessage(l->pg));
			PQclear(res);
		}
	}
	if (r) {
		sql_listen_close(l);
		return r;
	}
	*out = l;
	return 0;
}

int sql_listen_wait(struct sql_listen *l, int ms,
		    void (*fn)(void *arg, const char *channel, const char *payload), void *arg)
{
	int got = 0;
	for (int waited = 0;; waited = 1) {
		if (!PQconsumeInput(l->pg) || PQstatus(l->pg) != CONNECTION_OK)
			return -EIO;
		PGnotify *nf;
		while ((nf = PQnotifies(l->pg))) {
			fn(arg, nf->relname, nf->extra ? nf->extra : "");
			PQfreemem(nf);
			got++;
		}
		if (got || waited)
			return got;
		struct pollfd p = { .fd = PQsocket(l->pg), .events = POLLIN };
		int r = poll(&p, 1, ms);
		if (r < 0 && errno != EINTR)
			return -EIO;
		if (r == 0)
			return 0;
	}
}

void sql_listen_close(struct sql_listen *l)
{
	if (!l)
		return;
	if (l->pg)
		PQfinish(l->pg);
	free(l);
}
