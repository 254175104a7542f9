/*
 * store_tpl: the templates table (see store.c): an image an account
 * imported or pulled through the API. Its id ("tpl_" and 16 hex) names
 * its files and is what its sandboxes record as their template; its name
 * is the account's own, unique in that account.
 */
#include "daemon/store/store.h"
#include "daemon/store/store_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TPL_COLS "id, account, name, source, state, error, size_bytes, created_ms, node"

static int tpl_ok(const struct store_tpl *t)
{
	return store__text_ok(t->id, sizeof(t->id), 5, 0) && store__name_ok(t->account) &&
	       store__text_ok(t->name, sizeof(t->name), 1, 0) &&
	       store__text_ok(t->source, sizeof(t->source), 1, 0) &&
	       (!strcmp(t->state, "building") || !strcmp(t->state, "ready") ||
		!strcmp(t->state, "failed"));
}

static int read_row(struct sql_stmt *st, struct store_tpl *t)
{
	memset(t, 0, sizeof(*t));
	if (store__col_copy(st, 0, t->id, sizeof(t->id)) < 0 ||
	    store__col_copy(st, 1, t->account, sizeof(t->account)) < 0 ||
	    store__col_copy(st, 2, t->name, sizeof(t->name)) < 0 ||
	    store__col_copy(st, 3, t->source, sizeof(t->source)) < 0 ||
	    store__col_copy(st, 4, t->state, sizeof(t->state)) < 0)
		return -EIO;
	const char *e = sql_col_text(st, 5);
	snprintf(t->error, sizeof(t->error), "%s", e ? e : "");
	t->size_bytes = sql_col_int64(st, 6);
	t->created_ms = sql_col_int64(st, 7);
	const char *node = sql_col_text(st, 8);
	snprintf(t->node, sizeof(t->node), "%s", node ? node : "");
	return 0;
}

int store_tpl_insert(struct store *s, const struct store_tpl *t)
{
	if (!tpl_ok(t))
		return -EINVAL;
	struct sql_stmt *st = NULL;
	pthread_mutex_lock(&s->lock);
	int r = store__begin(s);
	/* A failed build under that name gives way to the new one. */
	if (!r)
		r = store__prep(s, "DELETE FROM templates WHERE account = ?1 AND name = ?2 "
				   "AND state = 'failed'", &st);
	if (!r && (store__bind_text(st, 1, t->account) != SQL_OK ||
		   store__bind_text(st, 2, t->name) != SQL_OK || store__step_done(st) < 0))
		r = -EIO;
	sql_finalize(st);
	st = NULL;
	if (!r)
		r = store__prep(s, "INSERT INTO templates (" TPL_COLS ") "
				   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)", &st);
	if (!r) {
		if (store__bind_text(st, 1, t->id) != SQL_OK ||
		    store__bind_text(st, 2, t->account) != SQL_OK ||
		    store__bind_text(st, 3, t->name) != SQL_OK ||
		    store__bind_text(st, 4, t->source) != SQL_OK ||
		    store__bind_text(st, 5, t->state) != SQL_OK ||
		    store__bind_text(st, 6, t->error) != SQL_OK ||
		    sql_bind_int64(st, 7, t->size_bytes) != SQL_OK ||
		    sql_bind_int64(st, 8, t->created_ms) != SQL_OK ||
		    store__bind_text(st, 9, s->node) != SQL_OK)
			r = -EIO;
		else
			r = store__step_done(st);
	}
	sql_finalize(st);
	if (!r)
		r = store__commit(s);
	else
		store__rollback(s);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_tpl_finish(struct store *s, const char *id, const char *state, const char *error,
		     long long size_bytes)
{
	if (strcmp(state, "ready") && strcmp(state, "failed"))
		return -EINVAL;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "UPDATE templates SET state = ?2, error = ?3, size_bytes = ?4 "
			       "WHERE id = ?1 AND state = 'building'", &st);
	if (!r) {
		if (store__bind_text(st, 1, id) != SQL_OK || store__bind_text(st, 2, state) != SQL_OK ||
		    store__bind_text(st, 3, error ? error : "") != SQL_OK ||
		    sql_bind_int64(st, 4, size_bytes) != SQL_OK)
			r = -EIO;
		else if (!(r = store__step_done(st)) && sql_changes(s->db) == 0)
			r = -ENOENT;
	}
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_tpl_fail_building(struct store *s, const char *error)
{
	const char *texts[] = { error, s->node };
	int r = store__change(s, "UPDATE templates SET state = 'failed', error = ?1 "
				 "WHERE state = 'building' AND node = ?2", 2, texts);
	return r == -ENOENT ? 0 : r;
}

int store_tpl_building(struct store *s, const char *account)
{
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "SELECT COUNT(*) FROM templates WHERE account = ?1 "
			       "AND state = 'building'", &st);
	if (!r && (store__bind_text(st, 1, account) != SQL_OK || sql_step(st) != SQL_ROW))
		r = -EIO;
	if (!r)
		r = (int)sql_col_int64(st, 0);
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* One row by where = ?1 (and account = ?2 when account is set). */
static int get_one(struct store *s, const char *where, const char *v, const char *account,
		   struct store_tpl *out)
{
	char sql[512];
	/* A reference pulled more than once: the ready one first, then one
	 * being built, then the newest failure. */
	snprintf(sql, sizeof(sql), "SELECT " TPL_COLS " FROM templates WHERE %s = ?1%s "
		 "ORDER BY CASE state WHEN 'ready' THEN 0 WHEN 'building' THEN 1 ELSE 2 END, "
		 "created_ms DESC", where, account ? " AND account = ?2" : "");
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, sql, &st);
	if (!r && (store__bind_text(st, 1, v) != SQL_OK ||
		   (account && store__bind_text(st, 2, account) != SQL_OK)))
		r = -EIO;
	if (!r) {
		int step = sql_step(st);
		r = step == SQL_ROW ? read_row(st, out) : step == SQL_DONE ? -ENOENT : -EIO;
	}
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_tpl_get(struct store *s, const char *id, struct store_tpl *out)
{
	return get_one(s, "id", id, NULL, out);
}

int store_tpl_by_name(struct store *s, const char *account, const char *name,
		      struct store_tpl *out)
{
	return get_one(s, "name", name, account, out);
}

int store_tpl_by_source(struct store *s, const char *account, const char *source,
			struct store_tpl *out)
{
	return get_one(s, "source", source, account, out);
}

int store_tpl_list(struct store *s, const char *account, struct store_tpl **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "SELECT " TPL_COLS " FROM templates WHERE account = ?1 "
			       "ORDER BY name", &st);
	if (!r && store__bind_text(st, 1, account) != SQL_OK)
		r = -EIO;
	size_t cap = 0;
	int step;
	while (!r && (step = sql_step(st)) == SQL_ROW) {
		if (*n == cap) {
			size_t nc = cap ? cap * 2 : 8;
			struct store_tpl *m = realloc(*out, nc * sizeof(**out));
			if (!m) {
				r = -ENOMEM;
				break;
			}
			*out = m;
			cap = nc;
		}
		if ((r = read_row(st, &(*out)[*n])) == 0)
			(*n)++;
	}
	if (!r && step != SQL_DONE)
		r = -EIO;
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r < 0) {
		free(*out);
		*out = NULL;
		*n = 0;
	}
	return r;
}

int store_tpl_usage(struct store *s, const char *account, long long *bytes)
{
	struct sql_stmt *st;
	*bytes = 0;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "SELECT COALESCE(SUM(size_bytes), 0) FROM templates "
			       "WHERE account = ?1 AND state = 'ready'", &st);
	if (!r && (store__bind_text(st, 1, account) != SQL_OK || sql_step(st) != SQL_ROW))
		r = -EIO;
	if (!r)
		*bytes = sql_col_int64(st, 0);
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_tpl_in_use(struct store *s, const char *id)
{
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "SELECT (SELECT COUNT(*) FROM sandboxes WHERE template = ?1 "
			       "AND state <> 'stopped') + (SELECT COUNT(*) FROM checkpoints "
			       "WHERE template = ?1)", &st);
	if (!r && (store__bind_text(st, 1, id) != SQL_OK || sql_step(st) != SQL_ROW))
		r = -EIO;
	if (!r)
		r = sql_col_int64(st, 0) > 0;
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_tpl_delete(struct store *s, const char *id)
{
	const char *texts[] = { id };
	return store__change(s, "DELETE FROM templates WHERE id = ?1", 1, texts);
}
