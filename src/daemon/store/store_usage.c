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
#include <sqlite3.h>
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
	sqlite3_stmt *st;
	int r = store__prep(s,
			    "INSERT INTO usage_events (sbx_id, account, key_id, state, vcpus,"
			    " memory_mb, storage_bytes, at_ms)"
			    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
			    &st);
	if (!r) {
		if (store__bind_text(st, 1, e->sbx_id) != SQLITE_OK ||
		    store__bind_text(st, 2, e->account) != SQLITE_OK ||
		    store__bind_text(st, 3, e->key_id ? e->key_id : "") != SQLITE_OK ||
		    store__bind_text(st, 4, e->state) != SQLITE_OK ||
		    sqlite3_bind_int64(st, 5, e->vcpus) != SQLITE_OK ||
		    sqlite3_bind_int64(st, 6, e->memory_mb) != SQLITE_OK ||
		    sqlite3_bind_int64(st, 7, e->storage_bytes) != SQLITE_OK ||
		    sqlite3_bind_int64(st, 8, e->at_ms) != SQLITE_OK)
			r = -EIO;
		else
			r = store__step_done(st);
		sqlite3_finalize(st);
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
	char sql[1024];
	int len = snprintf(
	    sql, sizeof(sql), USAGE_SUMS " FROM (" USAGE_INTERVALS "%s%s LIMIT -1) WHERE d > 0",
	    account ? " AND e.account = ?4" : "", key_id ? " AND e.key_id = ?5" : "");
	if (len < 0 || (size_t)len >= sizeof(sql))
		return -EIO; /* cannot happen: constant fragments */

	sqlite3_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, sql, &st);
	if (!r) {
		int b = sqlite3_bind_int64(st, 1, from_ms);
		if (b == SQLITE_OK)
			b = sqlite3_bind_int64(st, 2, to_ms);
		if (b == SQLITE_OK)
			b = sqlite3_bind_int64(st, 3, open_end);
		if (b == SQLITE_OK && account)
			b = store__bind_text(st, 4, account);
		if (b == SQLITE_OK && key_id)
			b = store__bind_text(st, 5, key_id);
		if (b != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW) {
			r = -EIO;
		} else {
			sqlite3_int64 n = sqlite3_column_int64(st, 4);
			out->running_s = sqlite3_column_double(st, 0);
			out->vcpu_s = sqlite3_column_double(st, 1);
			out->gib_s = sqlite3_column_double(st, 2);
			out->paused_gib_s = sqlite3_column_double(st, 3);
			if (n < 0 || n > UINT_MAX)
				r = -EIO;
			else
				out->sandboxes = (unsigned)n;
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	if (r)
		memset(out, 0, sizeof(*out));
	return r;
}

int store_sbx_count_by_state(struct store *s, struct store_sbx_counts *out)
{
	memset(out, 0, sizeof(*out));
	sqlite3_stmt *st;
	pthread_mutex_lock(&s->lock);
	/* sandboxes_by_state covers this: no table rows are read */
	int r = store__prep(s, "SELECT state, count(*) FROM sandboxes GROUP BY state", &st);
	while (!r) {
		int rc = sqlite3_step(st);
		if (rc == SQLITE_DONE)
			break;
		if (rc != SQLITE_ROW) {
			r = -EIO;
			break;
		}
		const char *state = (const char *)sqlite3_column_text(st, 0);
		sqlite3_int64 c = sqlite3_column_int64(st, 1);
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
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r)
		memset(out, 0, sizeof(*out));
	return r;
}
