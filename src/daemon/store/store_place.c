/*
 * store_place: what an API replica (cpuos-api) reads and writes to place a
 * sandbox (schemas 11 and 13): the nodes that may take one with what they
 * hold, and reservations, each counted like a running sandbox against its
 * account's quotas and its node's memory until the node has made the
 * sandbox; meanwhile it is one of the node's creates under way, and holds
 * the disk the sandbox may write of what the node last said it had free.
 * A reservation is written in one transaction that holds the
 * account (an advisory lock on PostgreSQL; SQLite's write lock) and the
 * node's row, so parallel creates on several replicas cannot pass either.
 */
#include "daemon/store/store.h"
#include "daemon/store/store_impl.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a node holds: its running sandboxes and the live reservations on it
 * (its creates under way: their count and the disk they may write). */
#define HELD_BY_NODE                                                                           \
	"(SELECT count(*) FROM sandboxes WHERE node = n.name AND state = 'running'), "          \
	"(SELECT coalesce(sum(vcpus), 0) FROM sandboxes WHERE node = n.name AND "                \
	"state = 'running') + (SELECT coalesce(sum(vcpus), 0) FROM reservations WHERE "          \
	"node = n.name AND until_ms > ?1), "                                                     \
	"(SELECT coalesce(sum(memory_mb), 0) FROM sandboxes WHERE node = n.name AND "            \
	"state = 'running') + (SELECT coalesce(sum(memory_mb), 0) FROM reservations WHERE "      \
	"node = n.name AND until_ms > ?1), "                                                     \
	"(SELECT count(*) FROM reservations WHERE node = n.name AND until_ms > ?1), "            \
	"(SELECT coalesce(sum(disk_mb), 0) FROM reservations WHERE node = n.name AND "           \
	"until_ms > ?1)"

static int col_ull(struct sql_stmt *st, int col, unsigned long long *out)
{
	long long v = sql_col_int64(st, col);
	if (v < 0)
		return -EIO;
	*out = (unsigned long long)v;
	return 0;
}

int store_node_loads(struct store *s, long long now_ms, unsigned sample, struct store_load **out,
		     size_t *n)
{
	*out = NULL;
	*n = 0;
	struct sql_stmt *st;
	size_t cap = 0;
	pthread_mutex_lock(&s->lock);
	/* the sample drawn from the nodes' rows alone: only its loads are summed */
	int r = store__prep(s,
			    sample ? "SELECT n.name, n.url, n.vcpus, n.memory_mb, " HELD_BY_NODE
				     ", n.compat, n.warm, n.held, n.disk_free_mb FROM (SELECT name, "
				     "url, vcpus, memory_mb, compat, warm, held, disk_free_mb FROM "
				     "nodes WHERE state = 'ready' AND drained = 0 AND "
				     "lease_until_ms > ?1 ORDER BY random() LIMIT ?2) n ORDER BY n.name"
				   : "SELECT n.name, n.url, n.vcpus, n.memory_mb, " HELD_BY_NODE
				     ", n.compat, n.warm, n.held, n.disk_free_mb FROM nodes n WHERE "
				     "n.state = 'ready' "
				     "AND n.drained = 0 AND n.lease_until_ms > ?1 ORDER BY n.name",
			    &st);
	if (!r && (sql_bind_int64(st, 1, now_ms) != SQL_OK ||
		   (sample && sql_bind_int64(st, 2, sample) != SQL_OK)))
		r = -EIO;
	while (!r) {
		int step = sql_step(st);
		if (step == SQL_DONE)
			break;
		if (step != SQL_ROW) {
			r = -EIO;
			break;
		}
		if (*n == cap) {
			size_t nc = cap ? cap * 2 : 16;
			struct store_load *m = realloc(*out, nc * sizeof(**out));
			if (!m) {
				r = -ENOMEM;
				break;
			}
			*out = m;
			cap = nc;
		}
		struct store_load *l = &(*out)[*n];
		memset(l, 0, sizeof(*l));
		unsigned long long vc, running, starting;
		if (store__col_copy(st, 0, l->name, sizeof(l->name)) ||
		    store__col_copy(st, 1, l->url, sizeof(l->url)) || col_ull(st, 2, &vc) ||
		    col_ull(st, 3, &l->memory_mb) || col_ull(st, 4, &running) ||
		    col_ull(st, 5, &l->held_vcpus) || col_ull(st, 6, &l->held_memory_mb) ||
		    col_ull(st, 7, &starting) || col_ull(st, 8, &l->starting_disk_mb) ||
		    store__col_copy(st, 9, l->compat, sizeof(l->compat)) ||
		    store__col_copy(st, 10, l->warm, sizeof(l->warm)) ||
		    store__col_copy(st, 11, l->held, sizeof(l->held)) ||
		    (l->disk_free_mb = sql_col_int64(st, 12)) < -1 || vc > UINT_MAX ||
		    running > UINT_MAX || starting > UINT_MAX) {
			r = -EIO;
			break;
		}
		l->vcpus = (unsigned)vc;
		l->running = (unsigned)running;
		l->starting = (unsigned)starting;
		(*n)++;
	}
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r) {
		free(*out);
		*out = NULL;
		*n = 0;
	}
	return r;
}

unsigned long long store_disk_need(unsigned memory_mb, unsigned disk_mb)
{
	return (unsigned long long)disk_mb + memory_mb;
}

int store_load_room(const struct store_load *l, unsigned memory_mb, unsigned disk_mb)
{
	if (l->memory_mb && l->held_memory_mb + memory_mb > l->memory_mb)
		return 0;
	return l->disk_free_mb < 0 || l->starting_disk_mb + store_disk_need(memory_mb, disk_mb) <=
					      (unsigned long long)l->disk_free_mb;
}

/* One row of sums, bound ?1 (text) and ?2 (number), into v[0..4). */
static int sums(struct store *s, const char *sql, const char *t1, long long n2,
		unsigned long long v[4])
{
	struct sql_stmt *st;
	int r = store__prep(s, sql, &st);
	if (r)
		return r;
	if (store__bind_text(st, 1, t1) != SQL_OK || sql_bind_int64(st, 2, n2) != SQL_OK ||
	    sql_step(st) != SQL_ROW)
		r = -EIO;
	for (int i = 0; !r && i < 4; i++)
		r = col_ull(st, i, &v[i]);
	sql_finalize(st);
	return r;
}

/* Reservations past their time (their replica died): no longer counted
 * (the sums ask until_ms), dropped here, after a reservation's own
 * transaction and never waiting on rows another replica is dropping. */
static void drop_expired(struct store *s, long long now_ms)
{
	struct sql_stmt *st;
	if (store__prep(s,
			sql_kind(s->db) == SQL_PG
				? "DELETE FROM reservations WHERE id IN (SELECT id FROM reservations "
				  "WHERE until_ms <= ?1 LIMIT 100 FOR UPDATE SKIP LOCKED)"
				: "DELETE FROM reservations WHERE until_ms <= ?1",
			&st))
		return;
	if (sql_bind_int64(st, 1, now_ms) == SQL_OK)
		store__step_done(st);
	sql_finalize(st);
}

static int rsv_ok(const struct store_rsv *x)
{
	return store__text_ok(x->id, sizeof(x->id), 1, 0) && store__name_ok(x->account) &&
	       store__text_ok(x->node, sizeof(x->node), 1, 0) && x->until_ms > 0 &&
	       x->disk_mb <= (unsigned long long)LLONG_MAX;
}

int store_reserve(struct store *s, const struct store_rsv *x, const struct store_quota *q,
		  long long now_ms, char *err, size_t errlen)
{
	if (!rsv_ok(x))
		return -EINVAL;
	int pg = sql_kind(s->db) == SQL_PG;
	unsigned long long acct[4], node[4], cap = 0;
	long long disk = -1;
	struct sql_stmt *st = NULL;
	err[0] = '\0';
	pthread_mutex_lock(&s->lock);
	int r = store__begin(s);
	if (r)
		goto out;
	/* the account first, then the node: always in that order */
	if (pg) {
		r = store__prep(s, "SELECT pg_advisory_xact_lock(('x' || substr(md5(?1), 1, 16))"
				   "::bit(64)::bigint)", &st);
		if (!r && (store__bind_text(st, 1, x->account) != SQL_OK || sql_step(st) != SQL_ROW))
			r = -EIO;
		sql_finalize(st);
		st = NULL;
		if (r)
			goto fail;
	}
	r = store__prep(s,
			pg ? "SELECT memory_mb, disk_free_mb FROM nodes WHERE name = ?1 AND "
			     "state = 'ready' AND drained = 0 AND lease_until_ms > ?2 FOR UPDATE"
			   : "SELECT memory_mb, disk_free_mb FROM nodes WHERE name = ?1 AND "
			     "state = 'ready' AND drained = 0 AND lease_until_ms > ?2",
			&st);
	if (r)
		goto fail;
	int step = SQL_ERROR;
	if (store__bind_text(st, 1, x->node) != SQL_OK || sql_bind_int64(st, 2, now_ms) != SQL_OK ||
	    ((step = sql_step(st)) != SQL_ROW && step != SQL_DONE))
		r = -EIO;
	else if (step == SQL_DONE)
		r = -ESTALE;
	else if (!(r = col_ull(st, 0, &cap)) && (disk = sql_col_int64(st, 1)) < -1)
		r = -EIO;
	sql_finalize(st);
	st = NULL;
	if (r) {
		if (r == -ESTALE)
			snprintf(err, errlen, "node '%s' takes no sandboxes now", x->node);
		goto fail;
	}
	r = sums(s,
			 "SELECT (SELECT count(*) FROM sandboxes WHERE account = ?1 AND state = "
			 "'running') + (SELECT count(*) FROM reservations WHERE account = ?1 AND "
			 "until_ms > ?2), (SELECT coalesce(sum(vcpus), 0) FROM sandboxes WHERE account = "
			 "?1 AND state = 'running') + (SELECT coalesce(sum(vcpus), 0) FROM reservations "
			 "WHERE account = ?1 AND until_ms > ?2), (SELECT coalesce(sum(memory_mb), 0) FROM "
			 "sandboxes WHERE account = ?1 AND state = 'running') + (SELECT "
			 "coalesce(sum(memory_mb), 0) FROM reservations WHERE account = ?1 AND until_ms > "
			 "?2), 0",
			 x->account, now_ms, acct);
	if (!r)
		r = sums(s,
			 "SELECT (SELECT count(*) FROM reservations WHERE node = ?1 AND until_ms > ?2), "
			 "(SELECT coalesce(sum(vcpus), 0) FROM sandboxes WHERE node = ?1 AND "
			 "state = 'running') + (SELECT coalesce(sum(vcpus), 0) FROM reservations WHERE "
			 "node = ?1 AND until_ms > ?2), (SELECT coalesce(sum(memory_mb), 0) FROM sandboxes "
			 "WHERE node = ?1 AND state = 'running') + (SELECT coalesce(sum(memory_mb), 0) "
			 "FROM reservations WHERE node = ?1 AND until_ms > ?2), (SELECT "
			 "coalesce(sum(disk_mb), 0) FROM reservations WHERE node = ?1 AND until_ms > ?2)",
			 x->node, now_ms, node);
	if (r)
		goto fail;
	if (q->max_sandboxes && acct[0] + 1 > q->max_sandboxes) {
		snprintf(err, errlen, "account '%s' already runs or starts %u sandboxes", x->account,
			 q->max_sandboxes);
		r = -EDQUOT;
	} else if (q->vcpus && acct[1] + x->vcpus > q->vcpus) {
		snprintf(err, errlen, "account '%s' would run %llu vCPUs, over its %u", x->account,
			 acct[1] + x->vcpus, q->vcpus);
		r = -EDQUOT;
	} else if (q->memory_mb && acct[2] + x->memory_mb > q->memory_mb) {
		snprintf(err, errlen, "account '%s' would hold %llu MB of guest memory, over its %llu MB",
			 x->account, acct[2] + x->memory_mb, q->memory_mb);
		r = -EDQUOT;
	} else if (cap && node[2] + x->memory_mb > cap) {
		snprintf(err, errlen, "node '%s' has no memory for %u MB more: it holds %llu MB of %llu MB",
			 x->node, x->memory_mb, node[2], cap);
		r = -EAGAIN;
	} else if (disk >= 0 && node[3] + x->disk_mb > (unsigned long long)disk) {
		snprintf(err, errlen,
			 "node '%s' has no disk for %llu MB more: %lld MB free, %llu MB of it held by "
			 "creates under way",
			 x->node, x->disk_mb, disk, node[3]);
		r = -EAGAIN;
	} else if (x->max_starting && node[0] + 1 > x->max_starting) {
		snprintf(err, errlen, "node '%s' is starting %llu sandboxes, its most at once",
			 x->node, node[0]);
		r = -EAGAIN;
	}
	if (r)
		goto fail;
	r = store__prep(s,
			"INSERT INTO reservations (id, account, node, vcpus, memory_mb, until_ms, "
			"disk_mb) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
			&st);
	if (!r && (store__bind_text(st, 1, x->id) != SQL_OK ||
		   store__bind_text(st, 2, x->account) != SQL_OK ||
		   store__bind_text(st, 3, x->node) != SQL_OK ||
		   sql_bind_int64(st, 4, x->vcpus) != SQL_OK ||
		   sql_bind_int64(st, 5, x->memory_mb) != SQL_OK ||
		   sql_bind_int64(st, 6, x->until_ms) != SQL_OK ||
		   sql_bind_int64(st, 7, (long long)x->disk_mb) != SQL_OK))
		r = -EIO;
	if (!r)
		r = store__step_done(st);
	sql_finalize(st);
	if (!r)
		r = store__commit(s);
	if (!r) {
		drop_expired(s, now_ms);
		goto out;
	}
fail:
	store__rollback(s);
out:
	if (r == -EIO && err[0] == '\0')
		snprintf(err, errlen, "the database did not answer: %s", sql_errmsg(s->db));
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_unreserve(struct store *s, const char *id)
{
	const char *t[] = { id };
	int r = store__change(s, "DELETE FROM reservations WHERE id = ?1", 1, t);
	return r == -ENOENT ? 0 : r;
}
