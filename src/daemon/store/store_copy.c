/*
 * store_copy: a whole store into another that is empty, table by table in
 * one transaction on each side: how a single host's SQLite state moves to
 * PostgreSQL (cpuosd --copy-state-to). Rows keep their ids, order and
 * values; usage events keep their numbers, and PostgreSQL's sequence goes
 * on after the last.
 */
#include "daemon/store/store.h"
#include "daemon/store/store_impl.h"

#include "common/errbuf.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* A table as copied: its columns, each text ('t') or a number ('i'), and
 * the order its rows go in, then by the order they were made in where
 * that is the table's own (by_made: SQLite's rowid, PostgreSQL's seq). */
struct table {
	const char *name, *cols, *kinds, *order;
	int by_made;
};

/* In the order foreign keys need: accounts before what names them. */
static const struct table tables[] = {
	{ "accounts", "name, created_at", "ti", "id", 0 },
	{ "keys", "id, name, account, sha256, created_at", "tttti", "created_at", 1 },
	{ "sandboxes",
	  "id, account, template, state, end_reason, vcpus, memory_mb, disk_mb, created_at, "
	  "expires_at, metadata, env, run_dir, qemu_pid, on_timeout, timeout_s, paused_at, parent, "
	  "key_id, generation, network, net_slot, public, traffic_token, secrets, transforms, stored, "
	  "idle_timeout_s",
	  "tttttiiiiitttitiittitiitttti", "created_at, id", 0 },
	{ "sandbox_meta", "sbx_id, key, value", "ttt", "sbx_id, key", 0 },
	{ "checkpoints",
	  "id, name, account, sbx_id, template, vcpus, memory_mb, disk_mb, env, dir, size_bytes, "
	  "created_at, stored",
	  "tttttiiittiit", "created_at, id", 0 },
	{ "checkpoint_trash", "stored", "t", "stored", 0 },
	{ "usage_events", "seq, sbx_id, account, key_id, state, vcpus, memory_mb, storage_bytes, at_ms",
	  "ittttiiii", "seq", 0 },
	{ "secrets", "account, name, value, hosts, placeholder, allow_http, created_at, updated_at, sealed",
	  "tttttiiii", "account, name", 0 },
	/* Webhooks, not the events: a week of history the next daemon starts
	 * without (their deliveries begin again at its first event). */
	{ "webhooks", "id, account, url, types, secret, created_ms", "ttttti", "created_ms, id", 0 },
	/* Templates: their files stay in this node's state directory. */
	{ "templates", "id, account, name, source, state, error, size_bytes, created_ms, node",
	  "ttttttiit", "created_ms, id", 0 },
};

/* Copies table t's rows from one connection to the other: how many, or
 * -errno with what failed in err. */
static long long copy_table(struct sql *from, struct sql *to, const struct table *t, char *err,
			    size_t errlen)
{
	char order[64], sel[1024], ins[1400];
	size_t ncols = strlen(t->kinds), commas = 0;
	for (const char *p = t->cols; *p; p++)
		commas += *p == ',';
	if (commas + 1 != ncols) /* the table above is wrong */
		return errbuf_set(err, errlen, -EINVAL, "%s: %zu columns, %zu kinds", t->name,
				  commas + 1, ncols);
	snprintf(order, sizeof(order), "%s%s", t->order,
		 !t->by_made ? "" : sql_kind(from) == SQL_SQLITE ? ", rowid" : ", seq");
	snprintf(sel, sizeof(sel), "SELECT %s FROM %s ORDER BY %s", t->cols, t->name, order);
	int len = snprintf(ins, sizeof(ins), "INSERT INTO %s (%s) VALUES (", t->name, t->cols);
	for (size_t i = 0; i < ncols; i++)
		len += snprintf(ins + len, sizeof(ins) - (size_t)len, "%s?%zu", i ? ", " : "", i + 1);
	snprintf(ins + len, sizeof(ins) - (size_t)len, ")");
	struct sql_stmt *a = NULL, *b = NULL;
	long long n = 0;
	int r = sql_prep(from, sel, &a);
	if (r == 0)
		r = sql_prep(to, ins, &b);
	if (r < 0)
		errbuf_set(err, errlen, r, "%s: %s", t->name, sql_errmsg(a ? to : from));
	while (r == 0) {
		int rc = sql_step(a);
		if (rc == SQL_DONE)
			break;
		if (rc != SQL_ROW) {
			r = errbuf_set(err, errlen, -EIO, "cannot read %s: %s", t->name,
				       sql_errmsg(from));
			break;
		}
		sql_reset(b);
		for (size_t i = 0; i < ncols && r == 0; i++) {
			const char *v = sql_col_text(a, (int)i);
			int bc = t->kinds[i] == 'i' ? sql_bind_int64(b, (int)i + 1, sql_col_int64(a, (int)i))
				 : v	    ? sql_bind_textn(b, (int)i + 1, v, sql_col_bytes(a, (int)i))
					    : SQL_ERROR; /* every text column is NOT NULL */
			if (bc != SQL_OK)
				r = errbuf_set(err, errlen, -EIO, "cannot copy a row of %s", t->name);
		}
		if (r == 0 && sql_step(b) != SQL_DONE)
			r = errbuf_set(err, errlen, -EIO, "cannot write %s: %s", t->name,
				       sql_errmsg(to));
		n++;
	}
	sql_finalize(a);
	sql_finalize(b);
	return r < 0 ? r : n;
}

/* 1 if the store holds nothing yet, 0 if it does, -EIO. */
static int empty(struct sql *db)
{
	struct sql_stmt *st;
	if (sql_prep(db,
		     "SELECT (SELECT count(*) FROM accounts) + (SELECT count(*) FROM sandboxes) + "
		     "(SELECT count(*) FROM usage_events) + (SELECT count(*) FROM secrets)",
		     &st) < 0)
		return -EIO;
	int r = sql_step(st) == SQL_ROW ? sql_col_int64(st, 0) == 0 : -EIO;
	sql_finalize(st);
	return r;
}

int store_copy(struct store *from, struct store *to, const char *node, struct store_copied *out,
	       char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	err[0] = '\0';
	pthread_mutex_lock(&from->lock);
	pthread_mutex_lock(&to->lock);
	/* Both in a transaction: what is read is one moment's state (a
	 * daemon on the source waits), and what is written all or nothing. */
	int r = sql_begin(from->db) < 0 || sql_begin(to->db) < 0 ? -EIO : 0;
	if (r < 0)
		errbuf_set(err, errlen, r, "cannot begin: %s", sql_errmsg(from->db));
	int e = r == 0 ? empty(to->db) : 0;
	if (r == 0 && e != 1)
		r = errbuf_set(err, errlen, e < 0 ? -EIO : -EEXIST,
			       e < 0 ? "cannot read the target: %s"
				     : "the target already holds a cpuosd's state%s",
			       e < 0 ? sql_errmsg(to->db) : "");
	long long counts[sizeof(tables) / sizeof(tables[0])];
	for (size_t i = 0; r == 0 && i < sizeof(tables) / sizeof(tables[0]); i++) {
		long long n = copy_table(from->db, to->db, &tables[i], err, errlen);
		if (n < 0)
			r = (int)n;
		else
			counts[i] = n;
	}
	/* The host's sandboxes become its node's, taken at its first join. */
	if (r == 0 && node && node[0]) {
		struct sql_stmt *st = NULL;
		static const char *const give[] = { "UPDATE sandboxes SET node = ?1, node_epoch = 0",
						    "UPDATE checkpoints SET node = ?1" };
		for (size_t i = 0; r == 0 && i < 2; i++) {
			if (sql_prep(to->db, give[i], &st) < 0 || sql_bind_text(st, 1, node) != SQL_OK ||
			    sql_step(st) != SQL_DONE)
				r = errbuf_set(err, errlen, -EIO, "cannot give what it holds to node %s: %s",
					       node, sql_errmsg(to->db));
			sql_finalize(st);
			st = NULL;
		}
	}
	/* PostgreSQL numbers the next usage event after the last copied. */
	if (r == 0 && sql_kind(to->db) == SQL_PG &&
	    sql_exec(to->db, "SELECT setval(pg_get_serial_sequence('usage_events', 'seq'),"
			     " (SELECT coalesce(max(seq), 0) + 1 FROM usage_events), false)") < 0)
		r = errbuf_set(err, errlen, -EIO, "cannot set the usage sequence: %s",
			       sql_errmsg(to->db));
	if (r == 0 && sql_commit(to->db) < 0)
		r = errbuf_set(err, errlen, -EIO, "cannot commit: %s", sql_errmsg(to->db));
	if (r < 0)
		sql_rollback(to->db);
	sql_rollback(from->db); /* it only read */
	pthread_mutex_unlock(&to->lock);
	pthread_mutex_unlock(&from->lock);
	if (r == 0) {
		out->accounts = counts[0];
		out->keys = counts[1];
		out->sandboxes = counts[2];
		out->checkpoints = counts[4];
		out->usage_events = counts[6];
		out->secrets = counts[7];
		out->webhooks = counts[8];
	}
	return r;
}
