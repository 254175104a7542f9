/*
 * store_events: the events, webhooks, webhook_cursors and deliveries
 * tables (see store.c). An event is one change of a sandbox's life as the
 * sandbox layer saw it, numbered by seq; a webhook is a URL an account's
 * events are posted to, with the secret they are signed with. Each node
 * delivers the events it recorded, in seq order, and keeps where it stands
 * per webhook in webhook_cursors; every attempt is a row of deliveries.
 */
#include "daemon/store/store.h"
#include "daemon/store/store_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define HOOK_COLS "id, account, url, types, secret, created_ms"

int store_event_add(struct store *s, const struct store_event *e)
{
	if (!store__name_ok(e->account) || !store__text_ok(e->sbx_id, sizeof(e->sbx_id), 1, 0) ||
	    !store__text_ok(e->type, sizeof(e->type), 1, 0) ||
	    !store__text_ok(e->cause, sizeof(e->cause), 0, 0))
		return -EINVAL;
	struct sql_stmt *st = NULL;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "INSERT INTO events (at_ms, account, sbx_id, type, cause, node) "
			       "VALUES (?1, ?2, ?3, ?4, ?5, ?6)", &st);
	if (!r && (sql_bind_int64(st, 1, e->at_ms) != SQL_OK ||
		   store__bind_text(st, 2, e->account) != SQL_OK ||
		   store__bind_text(st, 3, e->sbx_id) != SQL_OK ||
		   store__bind_text(st, 4, e->type) != SQL_OK ||
		   store__bind_text(st, 5, e->cause) != SQL_OK ||
		   store__bind_text(st, 6, s->node) != SQL_OK))
		r = -EIO;
	if (!r)
		r = store__step_done(st);
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	return r;
}

static int read_event(struct sql_stmt *st, struct store_event *e)
{
	memset(e, 0, sizeof(*e));
	e->seq = sql_col_int64(st, 0);
	e->at_ms = sql_col_int64(st, 1);
	if (store__col_copy(st, 2, e->account, sizeof(e->account)) ||
	    store__col_copy(st, 3, e->sbx_id, sizeof(e->sbx_id)) ||
	    store__col_copy(st, 4, e->type, sizeof(e->type)) ||
	    store__col_copy(st, 5, e->cause, sizeof(e->cause)))
		return -EIO;
	return 0;
}

/* Runs st (its parameters bound) and collects its events into *out. */
static int collect_events(struct sql_stmt *st, size_t limit, struct store_event **out, size_t *n)
{
	struct store_event *v = calloc(limit ? limit : 1, sizeof(*v));
	size_t k = 0;
	int r = v ? 0 : -ENOMEM;
	while (!r && k < limit) {
		int rc = sql_step(st);
		if (rc == SQL_DONE)
			break;
		if (rc != SQL_ROW || read_event(st, &v[k]) < 0) {
			r = -EIO;
			break;
		}
		k++;
	}
	if (r) {
		free(v);
		return r;
	}
	*out = v;
	*n = k;
	return 0;
}

int store_event_list(struct store *s, const char *account, const char *sbx_id, long long after,
		     size_t limit, struct store_event **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (limit < 1 || limit > 1000)
		return -EINVAL;
	struct sql_stmt *st = NULL;
	pthread_mutex_lock(&s->lock);
	/* ?2 and ?3 may be NULL (no filter): bound as empty texts. */
	int r = store__prep(s, "SELECT seq, at_ms, account, sbx_id, type, cause FROM events "
			       "WHERE seq > ?1 AND (?2 = '' OR account = ?2) AND (?3 = '' OR sbx_id = ?3) "
			       "ORDER BY seq LIMIT ?4", &st);
	if (!r && (sql_bind_int64(st, 1, after) != SQL_OK ||
		   store__bind_text(st, 2, account ? account : "") != SQL_OK ||
		   store__bind_text(st, 3, sbx_id ? sbx_id : "") != SQL_OK ||
		   sql_bind_int64(st, 4, (long long)limit) != SQL_OK))
		r = -EIO;
	if (!r)
		r = collect_events(st, limit, out, n);
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_event_prune(struct store *s, long long before_ms)
{
	struct sql_stmt *st = NULL;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "DELETE FROM events WHERE at_ms < ?1", &st);
	if (!r && sql_bind_int64(st, 1, before_ms) != SQL_OK)
		r = -EIO;
	if (!r)
		r = store__step_done(st);
	sql_finalize(st);
	st = NULL;
	/* A week of attempts too. */
	if (!r)
		r = store__prep(s, "DELETE FROM deliveries WHERE at_ms < ?1", &st);
	if (!r && sql_bind_int64(st, 1, before_ms) != SQL_OK)
		r = -EIO;
	if (!r)
		r = store__step_done(st);
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* ---- webhooks ---- */

int store_webhook_add(struct store *s, const struct store_webhook *w)
{
	if (!store__text_ok(w->id, sizeof(w->id), 1, 0) || !store__name_ok(w->account) ||
	    !store__text_ok(w->url, sizeof(w->url), 1, 0) ||
	    !store__text_ok(w->types, sizeof(w->types), 2, 1) ||
	    !store__text_ok(w->secret, sizeof(w->secret), 16, 0))
		return -EINVAL;
	struct sql_stmt *st = NULL;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "INSERT INTO webhooks (" HOOK_COLS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
			    &st);
	if (!r && (store__bind_text(st, 1, w->id) != SQL_OK ||
		   store__bind_text(st, 2, w->account) != SQL_OK ||
		   store__bind_text(st, 3, w->url) != SQL_OK ||
		   store__bind_text(st, 4, w->types) != SQL_OK ||
		   store__bind_text(st, 5, w->secret) != SQL_OK ||
		   sql_bind_int64(st, 6, w->created_ms) != SQL_OK))
		r = -EIO;
	if (!r)
		r = store__step_done(st);
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_webhook_list(struct store *s, const char *account, struct store_webhook **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	struct sql_stmt *st = NULL;
	struct store_webhook *v = NULL;
	size_t k = 0, cap = 0;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "SELECT " HOOK_COLS " FROM webhooks WHERE ?1 = '' OR account = ?1 "
			       "ORDER BY created_ms, id", &st);
	if (!r && store__bind_text(st, 1, account ? account : "") != SQL_OK)
		r = -EIO;
	while (!r) {
		int rc = sql_step(st);
		if (rc == SQL_DONE)
			break;
		if (rc != SQL_ROW) {
			r = -EIO;
			break;
		}
		if (k == cap) {
			cap = cap ? 2 * cap : 8;
			struct store_webhook *nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				r = -ENOMEM;
				break;
			}
			v = nv;
		}
		struct store_webhook *w = &v[k];
		memset(w, 0, sizeof(*w));
		if (store__col_copy(st, 0, w->id, sizeof(w->id)) ||
		    store__col_copy(st, 1, w->account, sizeof(w->account)) ||
		    store__col_copy(st, 2, w->url, sizeof(w->url)) ||
		    store__col_copy(st, 3, w->types, sizeof(w->types)) ||
		    store__col_copy(st, 4, w->secret, sizeof(w->secret))) {
			r = -EIO;
			break;
		}
		w->created_ms = sql_col_int64(st, 5);
		k++;
	}
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r) {
		free(v);
		return r;
	}
	*out = v;
	*n = k;
	return 0;
}

int store_webhook_delete(struct store *s, const char *id)
{
	const char *texts[] = { id };
	int r = store__change(s, "DELETE FROM webhooks WHERE id = ?1", 1, texts);
	if (r == 0) {
		store__change(s, "DELETE FROM webhook_cursors WHERE webhook_id = ?1", 1, texts);
		store__change(s, "DELETE FROM deliveries WHERE webhook_id = ?1", 1, texts);
	}
	return r;
}

int store_webhook_pending(struct store *s, const struct store_webhook *w, size_t limit,
			  struct store_event **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	struct sql_stmt *st = NULL;
	pthread_mutex_lock(&s->lock);
	/* This node's events of the account since the webhook was made, past
	 * where this node's deliveries to it stand. */
	int r = store__prep(s, "SELECT seq, at_ms, account, sbx_id, type, cause FROM events "
			       "WHERE account = ?1 AND node = ?2 AND at_ms >= ?3 AND seq > coalesce("
			       "(SELECT seq FROM webhook_cursors WHERE webhook_id = ?4 AND node = ?2), 0) "
			       "ORDER BY seq LIMIT ?5", &st);
	if (!r && (store__bind_text(st, 1, w->account) != SQL_OK ||
		   store__bind_text(st, 2, s->node) != SQL_OK ||
		   sql_bind_int64(st, 3, w->created_ms) != SQL_OK ||
		   store__bind_text(st, 4, w->id) != SQL_OK ||
		   sql_bind_int64(st, 5, (long long)limit) != SQL_OK))
		r = -EIO;
	if (!r)
		r = collect_events(st, limit, out, n);
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_webhook_done(struct store *s, const char *id, long long seq, int attempt, int status,
		       const char *error, long long at_ms)
{
	struct sql_stmt *st = NULL;
	pthread_mutex_lock(&s->lock);
	int r = store__begin(s);
	if (!r && attempt > 0)
		r = store__prep(s, "INSERT INTO deliveries (webhook_id, event_seq, attempt, status, "
				   "error, at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)", &st);
	if (!r && st && (store__bind_text(st, 1, id) != SQL_OK || sql_bind_int64(st, 2, seq) != SQL_OK ||
			 sql_bind_int64(st, 3, attempt) != SQL_OK ||
			 sql_bind_int64(st, 4, status) != SQL_OK ||
			 store__bind_text(st, 5, error ? error : "") != SQL_OK ||
			 sql_bind_int64(st, 6, at_ms) != SQL_OK))
		r = -EIO;
	if (!r && st)
		r = store__step_done(st);
	sql_finalize(st);
	st = NULL;
	/* Delivered (2xx): the cursor moves past it. */
	if (!r && status >= 200 && status < 300)
		r = store__prep(s, "INSERT INTO webhook_cursors (webhook_id, node, seq) "
				   "VALUES (?1, ?2, ?3) ON CONFLICT (webhook_id, node) "
				   "DO UPDATE SET seq = ?3", &st);
	if (!r && st && (store__bind_text(st, 1, id) != SQL_OK ||
			 store__bind_text(st, 2, s->node) != SQL_OK ||
			 sql_bind_int64(st, 3, seq) != SQL_OK))
		r = -EIO;
	if (!r && st)
		r = store__step_done(st);
	sql_finalize(st);
	if (!r)
		r = store__commit(s);
	if (r)
		store__rollback(s);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_delivery_list(struct store *s, const char *id, size_t limit, struct store_delivery **out,
			size_t *n)
{
	*out = NULL;
	*n = 0;
	if (limit < 1 || limit > 1000)
		return -EINVAL;
	struct store_delivery *v = calloc(limit, sizeof(*v));
	struct sql_stmt *st = NULL;
	size_t k = 0;
	pthread_mutex_lock(&s->lock);
	int r = v ? store__prep(s, "SELECT event_seq, attempt, status, error, at_ms FROM deliveries "
				   "WHERE webhook_id = ?1 ORDER BY seq DESC LIMIT ?2", &st)
		  : -ENOMEM;
	if (!r && (store__bind_text(st, 1, id) != SQL_OK ||
		   sql_bind_int64(st, 2, (long long)limit) != SQL_OK))
		r = -EIO;
	while (!r && k < limit) {
		int rc = sql_step(st);
		if (rc == SQL_DONE)
			break;
		if (rc != SQL_ROW) {
			r = -EIO;
			break;
		}
		struct store_delivery *d = &v[k];
		d->event_seq = sql_col_int64(st, 0);
		d->attempt = (int)sql_col_int64(st, 1);
		d->status = (int)sql_col_int64(st, 2);
		if (store__col_copy(st, 3, d->error, sizeof(d->error))) {
			r = -EIO;
			break;
		}
		d->at_ms = sql_col_int64(st, 4);
		k++;
	}
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r) {
		free(v);
		return r;
	}
	*out = v;
	*n = k;
	return 0;
}
