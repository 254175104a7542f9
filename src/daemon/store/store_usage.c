/*
 * store_usage: metering (see store.c for the rest of the store). The
 * sandbox manager appends one usage event per state change; queries
 * integrate between consecutive events of each sandbox inside SQLite, so a
 * long window is one aggregate, never a list of rows in memory. Also the
 * per-state sandbox counts behind GET /metrics.
 */
#include "daemon/store/store.h"
#include "daemon/store/store_impl.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/*
 * Details the header leaves open (store.c lists the rest):
 *  - store_usage_add: sbx_id 1..31 printable bytes without spaces, account a
 *    valid account, key_id NULL or "" (the socket) up to 31 such bytes,
 *    at_ms >= 0, storage_bytes >= 0; else -EINVAL. Events are not checked
 *    against each other: the timeline is their insertion order (seq).
 *  - store_usage_query: -EINVAL when from_ms > to_ms or a filter is not a
 *    valid account or key id; from_ms == to_ms is an empty window. The
 *    mutex is held for the whole aggregate.
 *  - store_sbx_count_by_state ignores a state it does not know.
 */

#define ID_SIZE sizeof(((struct store_sbx *)0)->id)

static int usage_state_ok(const char *s)
{
	return s && (!strcmp(s, "running") || !strcmp(s, "paused") || !strcmp(s, "stopped"));
}

int store__usage_ok(const struct store_usage_event *e)
{
	const char *key = e && e->key_id ? e->key_id : "";
	return e && store__text_ok(e->sbx_id, ID_SIZE, 1, 0) && store__name_ok(e->account) &&
	       store__text_ok(key, ID_SIZE, 0, 0) && usage_state_ok(e->state) && e->at_ms >= 0 &&
	       e->storage_bytes >= 0;
}

int store__usage_insert(struct store *s, const struct store_usage_event *e)
{
	struct sql_stmt *st;
	int r = store__prep(s,
			    "INSERT INTO usage_events (sbx_id, account, key_id, state, vcpus,"
			    " memory_mb, storage_bytes, at_ms)"
			    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
			    &st);
	if (!r) {
		if (store__bind_text(st, 1, e->sbx_id) != SQL_OK ||
		    store__bind_text(st, 2, e->account) != SQL_OK ||
		    store__bind_text(st, 3, e->key_id ? e->key_id : "") != SQL_OK ||
		    store__bind_text(st, 4, e->state) != SQL_OK ||
		    sql_bind_int64(st, 5, e->vcpus) != SQL_OK ||
		    sql_bind_int64(st, 6, e->memory_mb) != SQL_OK ||
		    sql_bind_int64(st, 7, e->storage_bytes) != SQL_OK ||
		    sql_bind_int64(st, 8, e->at_ms) != SQL_OK)
			r = -EIO;
		else
			r = store__step_done(st);
		sql_finalize(st);
	}
	/* seq is chosen by SQLite: a clash means a corrupt table */
	return r == -EEXIST ? -EIO : r;
}

int store_usage_add(struct store *s, const struct store_usage_event *e)
{
	if (!store__usage_ok(e))
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	int r = store__usage_insert(s, e);
	pthread_mutex_unlock(&s->lock);
	return r;
}

/*
 * Each running or paused event starts an interval that ends at the next
 * event of its sandbox, by seq (looked up through usage_by_sbx, whatever
 * the filters), or, for the last one, at min(to, now): ?3. The interval is
 * clipped to [?1, ?2) and d is what is left, in seconds. A stopped event
 * starts nothing, so it is no row here, only the end of the one before.
 * Events from ?2 on can start nothing inside the window: "at_ms < ?2"
 * bounds the scan (usage_by_account serves it with an account filter).
 * Arithmetic is REAL from d on: ms x bytes would overflow 64 bits.
 * "LIMIT -1" (no limit) keeps SQLite from flattening the intervals into
 * the aggregate, where it would look up the next event once for each use
 * of d; unflattened they stream from a co-routine, d computed once a row.
 */
#define USAGE_INTERVALS                                                                            \
	"SELECT e.sbx_id, e.state, e.vcpus, e.memory_mb, e.storage_bytes,"                         \
	" (min(coalesce((SELECT n.at_ms FROM usage_events n"                                       \
	"                WHERE n.sbx_id = e.sbx_id AND n.seq > e.seq"                              \
	"                ORDER BY n.seq LIMIT 1), ?3), ?2)"                                        \
	"  - max(e.at_ms, ?1)) / 1000.0 AS d"                                                      \
	" FROM usage_events e WHERE e.state != 'stopped' AND e.at_ms < ?2"

#define USAGE_SUMS                                                                                 \
	"SELECT total(CASE WHEN state = 'running' THEN d END),"                                    \
	" total(CASE WHEN state = 'running' THEN d * vcpus END),"                                  \
	" total(CASE WHEN state = 'running' THEN d * memory_mb / 1024.0 END),"                     \
	" total(CASE WHEN state = 'paused' THEN d * storage_bytes / 1073741824.0 END),"            \
	" count(DISTINCT sbx_id)"

/* The same in PostgreSQL's words: LEAST and GREATEST, a sum of none is
 * NULL, and a subquery in FROM needs a name. */
#define PG_USAGE_INTERVALS                                                                         \
	"SELECT e.sbx_id, e.state, e.vcpus, e.memory_mb, e.storage_bytes,"                         \
	" (LEAST(coalesce((SELECT n.at_ms FROM usage_events n"                                     \
	"                  WHERE n.sbx_id = e.sbx_id AND n.seq > e.seq"                            \
	"                  ORDER BY n.seq LIMIT 1), ?3), ?2)"                                      \
	"  - GREATEST(e.at_ms, ?1)) / 1000.0 AS d"                                                 \
	" FROM usage_events e WHERE e.state != 'stopped' AND e.at_ms < ?2"

#define PG_USAGE_SUMS                                                                              \
	"SELECT coalesce(sum(CASE WHEN state = 'running' THEN d END), 0),"                         \
	" coalesce(sum(CASE WHEN state = 'running' THEN d * vcpus END), 0),"                       \
	" coalesce(sum(CASE WHEN state = 'running' THEN d * memory_mb / 1024.0 END), 0),"          \
	" coalesce(sum(CASE WHEN state = 'paused' THEN d * storage_bytes / 1073741824.0 END), 0)," \
	" count(DISTINCT sbx_id)"

int store_usage_query(struct store *s, const char *account, const char *key_id, long long from_ms,
		      long long to_ms, long long now_ms, struct store_usage *out)
{
	memset(out, 0, sizeof(*out));
	if (from_ms > to_ms || (account && !store__name_ok(account)) ||
	    (key_id && !store__text_ok(key_id, ID_SIZE, 0, 0)))
		return -EINVAL;
	long long open_end = now_ms < to_ms ? now_ms : to_ms;

	/* the shape depends only on which filters are present; every value
	 * is bound */
	char sql[1400];
	int len = snprintf(sql, sizeof(sql),
			   sql_kind(s->db) == SQL_SQLITE
			       ? USAGE_SUMS " FROM (" USAGE_INTERVALS "%s%s LIMIT -1) "
					    "WHERE d > 0"
			       : PG_USAGE_SUMS " FROM (" PG_USAGE_INTERVALS "%s%s) AS i "
					       "WHERE d > 0",
			   account ? " AND e.account = ?4" : "", key_id ? " AND e.key_id = ?5" : "");
	if (len < 0 || (size_t)len >= sizeof(sql))
		return -EIO; /* cannot happen: constant fragments */

	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, sql, &st);
	if (!r) {
		int b = sql_bind_int64(st, 1, from_ms);
		if (b == SQL_OK)
			b = sql_bind_int64(st, 2, to_ms);
		if (b == SQL_OK)
			b = sql_bind_int64(st, 3, open_end);
		if (b == SQL_OK && account)
			b = store__bind_text(st, 4, account);
		if (b == SQL_OK && key_id)
			b = store__bind_text(st, 5, key_id);
		if (b != SQL_OK || sql_step(st) != SQL_ROW) {
			r = -EIO;
		} else {
			long long n = sql_col_int64(st, 4);
			out->running_s = sql_col_double(st, 0);
			out->vcpu_s = sql_col_double(st, 1);
			out->gib_s = sql_col_double(st, 2);
			out->paused_gib_s = sql_col_double(st, 3);
			if (n < 0 || n > UINT_MAX)
				r = -EIO;
			else
				out->sandboxes = (unsigned)n;
		}
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	if (r)
		memset(out, 0, sizeof(*out));
	return r;
}

int store_sbx_count_by_state(struct store *s, const char *account, struct store_sbx_counts *out)
{
	memset(out, 0, sizeof(*out));
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	/* sandboxes_by_state covers the first: no table rows are read */
	int r = account ? store__prep(s, "SELECT state, count(*) FROM sandboxes WHERE account = ?1 "
					 "GROUP BY state", &st)
			: store__prep(s, "SELECT state, count(*) FROM sandboxes GROUP BY state", &st);
	if (!r && account && store__bind_text(st, 1, account) != SQL_OK)
		r = -EIO;
	while (!r) {
		int rc = sql_step(st);
		if (rc == SQL_DONE)
			break;
		if (rc != SQL_ROW) {
			r = -EIO;
			break;
		}
		const char *state = sql_col_text(st, 0);
		long long c = sql_col_int64(st, 1);
		if (!state || c < 0 || c > UINT_MAX) {
			r = -EIO;
			break;
		}
		unsigned *slot = !strcmp(state, "running")   ? &out->running
				 : !strcmp(state, "paused")  ? &out->paused
				 : !strcmp(state, "stopped") ? &out->stopped
				 : !strcmp(state, "lost")    ? &out->lost
							     : NULL;
		if (slot)
			*slot = (unsigned)c;
	}
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r)
		memset(out, 0, sizeof(*out));
	return r;
}
