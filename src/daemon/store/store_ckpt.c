/*
 * store_ckpt: the checkpoints table (see store.c): a named snapshot of a
 * sandbox, owned by an account, found by id or by its name; and where one
 * is in the object store, with the trash of those deleted since.
 */
#include "daemon/store/store.h"
#include "daemon/store/store_impl.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CKPT_COLS                                                                                  \
	"id, name, account, sbx_id, template, vcpus, memory_mb, disk_mb, env, dir, size_bytes, "   \
	"created_at, stored"

void store_ckpt_release(struct store_ckpt *c)
{
	if (c) {
		free(c->env_json);
		c->env_json = NULL;
	}
}

void store_ckpt_free_list(struct store_ckpt *cs, size_t n)
{
	for (size_t i = 0; cs && i < n; i++)
		store_ckpt_release(&cs[i]);
	free(cs);
}

int store_ckpt_insert(struct store *s, const struct store_ckpt *c)
{
	if (!store__text_ok(c->id, sizeof(c->id), 1, 0) || !store__name_ok(c->name) ||
	    !store__name_ok(c->account) || !store__text_ok(c->dir, sizeof(c->dir), 1, 0))
		return -EINVAL;
	struct sql_stmt *st = NULL;
	pthread_mutex_lock(&s->lock);
	int r = store__begin(s);
	if (!r)
		r = store__node_alive(s); /* a node declared down records nothing */
	if (!r)
		r = store__ensure_account(s, c->account);
	if (!r)
		r = store__prep(s,
				"INSERT INTO checkpoints (" CKPT_COLS ", node) VALUES "
				"(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
				&st);
	if (!r) {
		if (store__bind_text(st, 1, c->id) != SQL_OK ||
		    store__bind_text(st, 2, c->name) != SQL_OK ||
		    store__bind_text(st, 3, c->account) != SQL_OK ||
		    store__bind_text(st, 4, c->sbx_id) != SQL_OK ||
		    store__bind_text(st, 5, c->template) != SQL_OK ||
		    sql_bind_int64(st, 6, c->vcpus) != SQL_OK ||
		    sql_bind_int64(st, 7, c->memory_mb) != SQL_OK ||
		    sql_bind_int64(st, 8, c->disk_mb) != SQL_OK ||
		    store__bind_text(st, 9, c->env_json ? c->env_json : "{}") != SQL_OK ||
		    store__bind_text(st, 10, c->dir) != SQL_OK ||
		    sql_bind_int64(st, 11, c->size_bytes) != SQL_OK ||
		    sql_bind_int64(st, 12, c->created_at) != SQL_OK ||
		    store__bind_text(st, 13, c->stored) != SQL_OK ||
		    store__bind_text(st, 14, s->node) != SQL_OK)
			r = -EIO;
		else
			r = store__step_done(st);
		/* UNIQUE (account, name) fails as a clash, like the key: -EEXIST */
	}
	sql_finalize(st);
	if (!r)
		r = store__commit(s);
	if (r)
		store__rollback(s);
	pthread_mutex_unlock(&s->lock);
	return r;
}

static int read_ckpt(struct sql_stmt *st, struct store_ckpt *c)
{
	memset(c, 0, sizeof(*c));
	if (store__col_copy(st, 0, c->id, sizeof(c->id)) ||
	    store__col_copy(st, 1, c->name, sizeof(c->name)) ||
	    store__col_copy(st, 2, c->account, sizeof(c->account)) ||
	    store__col_copy(st, 3, c->sbx_id, sizeof(c->sbx_id)) ||
	    store__col_copy(st, 4, c->template, sizeof(c->template)) ||
	    store__col_copy(st, 9, c->dir, sizeof(c->dir)) ||
	    store__col_copy(st, 12, c->stored, sizeof(c->stored)))
		return -EIO;
	long long v[3] = { sql_col_int64(st, 5), sql_col_int64(st, 6),
			       sql_col_int64(st, 7) };
	for (int i = 0; i < 3; i++)
		if (v[i] < 0 || v[i] > UINT_MAX)
			return -EIO;
	c->vcpus = (unsigned)v[0];
	c->memory_mb = (unsigned)v[1];
	c->disk_mb = (unsigned)v[2];
	c->size_bytes = sql_col_int64(st, 10);
	c->created_at = sql_col_int64(st, 11);
	const char *e = sql_col_text(st, 8);
	c->env_json = strdup(e ? e : "{}");
	return c->env_json ? 0 : -ENOMEM;
}

int store_ckpt_compat(struct store *s, const char *account, const char *id_or_name,
		      char compat[24])
{
	compat[0] = '\0';
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s,
			    "SELECT n.compat FROM checkpoints c JOIN nodes n ON n.name = c.node "
			    "WHERE (c.id = ?1 OR c.name = ?1) AND c.account = ?2 "
			    "ORDER BY c.id = ?1 DESC LIMIT 1",
			    &st);
	if (!r) {
		int rc = store__bind_text(st, 1, id_or_name) == SQL_OK &&
				 store__bind_text(st, 2, account) == SQL_OK
			     ? sql_step(st)
			     : SQL_ERROR;
		r = rc == SQL_ROW ? store__col_copy(st, 0, compat, 24)
		    : rc == SQL_DONE ? -ENOENT
				     : -EIO;
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_ckpt_get(struct store *s, const char *account, const char *id_or_name,
		   struct store_ckpt *out)
{
	memset(out, 0, sizeof(*out));
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s,
			    "SELECT " CKPT_COLS " FROM checkpoints WHERE (id = ?1 OR name = ?1) "
			    "AND (?2 IS NULL OR account = ?2) ORDER BY id = ?1 DESC LIMIT 1",
			    &st);
	if (!r) {
		int b = store__bind_text(st, 1, id_or_name);
		if (b == SQL_OK)
			b = account ? store__bind_text(st, 2, account) : sql_bind_null(st, 2);
		if (b != SQL_OK) {
			r = -EIO;
		} else {
			int rc = sql_step(st);
			r = rc == SQL_ROW ? read_ckpt(st, out) : rc == SQL_DONE ? -ENOENT : -EIO;
		}
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* The checkpoints sql selects (CKPT_COLS); its ?1, if it has one, bound
 * to account or NULL. */
static int list(struct store *s, const char *sql, const char *account, struct store_ckpt **out,
		size_t *n)
{
	*out = NULL;
	*n = 0;
	struct store_ckpt *cs = NULL;
	size_t got = 0, cap = 0;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, sql, &st);
	if (!r && sql_param_count(st) > 0 &&
	    (account ? store__bind_text(st, 1, account) : sql_bind_null(st, 1)) != SQL_OK)
		r = -EIO;
	while (!r) {
		int rc = sql_step(st);
		if (rc == SQL_DONE)
			break;
		if (rc != SQL_ROW) {
			r = -EIO;
			break;
		}
		if (got == cap) {
			struct store_ckpt *nc = realloc(cs, (cap ? 2 * cap : 16) * sizeof(*nc));
			if (!nc) {
				r = -ENOMEM;
				break;
			}
			cs = nc;
			cap = cap ? 2 * cap : 16;
		}
		if (!(r = read_ckpt(st, &cs[got])))
			got++;
	}
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r) {
		store_ckpt_free_list(cs, got);
		return r;
	}
	*out = cs;
	*n = got;
	return 0;
}

int store_ckpt_list(struct store *s, const char *account, struct store_ckpt **out, size_t *n)
{
	return list(s,
		    "SELECT " CKPT_COLS " FROM checkpoints WHERE ?1 IS NULL OR account = ?1 "
		    "ORDER BY created_at DESC, id",
		    account, out, n);
}

int store_ckpt_unstored(struct store *s, struct store_ckpt **out, size_t *n)
{
	/* This node's: the others' are on their disks. */
	return list(s,
		    "SELECT " CKPT_COLS " FROM checkpoints WHERE stored = '' AND node = ?1 "
		    "ORDER BY created_at, id",
		    s->node, out, n);
}

int store_ckpt_delete(struct store *s, const char *id)
{
	if (!id || !store__text_ok(id, sizeof(((struct store_ckpt *)0)->id), 1, 0))
		return -ENOENT;
	struct sql_stmt *st = NULL;
	pthread_mutex_lock(&s->lock);
	int r = store__begin(s);
	if (!r)
		r = store__prep(s,
				"INSERT INTO checkpoint_trash (stored) SELECT stored FROM checkpoints "
				"WHERE id = ?1 AND stored != '' ON CONFLICT DO NOTHING",
				&st);
	if (!r)
		r = store__bind_text(st, 1, id) == SQL_OK ? store__step_done(st) : -EIO;
	sql_finalize(st);
	st = NULL;
	if (!r)
		r = store__prep(s, "DELETE FROM checkpoints WHERE id = ?1", &st);
	if (!r) {
		r = store__bind_text(st, 1, id) == SQL_OK ? store__step_done(st) : -EIO;
		if (!r && sql_changes(s->db) == 0)
			r = -ENOENT;
	}
	sql_finalize(st);
	if (!r)
		r = store__commit(s);
	if (r)
		store__rollback(s);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_ckpt_set_stored(struct store *s, const char *id, const char *stored)
{
	if (!stored || !store__text_ok(stored, sizeof(((struct store_ckpt *)0)->stored), 1, 1))
		return -EINVAL;
	const char *texts[] = { id, stored };
	return store__change(s, "UPDATE checkpoints SET stored = ?2 WHERE id = ?1 AND stored = ''",
			     2, texts);
}

int store_ckpt_trash(struct store *s, char ***out, size_t *n)
{
	*out = NULL;
	*n = 0;
	char **v = NULL;
	size_t got = 0, cap = 0;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "SELECT stored FROM checkpoint_trash ORDER BY stored", &st);
	while (!r) {
		int rc = sql_step(st);
		if (rc == SQL_DONE)
			break;
		const char *t = rc == SQL_ROW ? sql_col_text(st, 0) : NULL;
		if (!t) {
			r = -EIO;
			break;
		}
		if (got == cap) {
			char **nv = realloc(v, (cap ? 2 * cap : 8) * sizeof(*nv));
			if (!nv) {
				r = -ENOMEM;
				break;
			}
			v = nv;
			cap = cap ? 2 * cap : 8;
		}
		if (!(v[got] = strdup(t))) {
			r = -ENOMEM;
			break;
		}
		got++;
	}
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r) {
		while (got)
			free(v[--got]);
		free(v);
		return r;
	}
	*out = v;
	*n = got;
	return 0;
}

int store_ckpt_trash_done(struct store *s, const char *stored)
{
	return store__change(s, "DELETE FROM checkpoint_trash WHERE stored = ?1", 1, &stored);
}
