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
#include <sqlite3.h>
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
	sqlite3_stmt *st = NULL;
	pthread_mutex_lock(&s->lock);
	int r = store__begin(s);
	if (!r)
		r = store__ensure_account(s, c->account);
	if (!r)
		r = store__prep(s,
				"INSERT INTO checkpoints (" CKPT_COLS ") VALUES "
				"(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
				&st);
	if (!r) {
		if (store__bind_text(st, 1, c->id) != SQLITE_OK ||
		    store__bind_text(st, 2, c->name) != SQLITE_OK ||
		    store__bind_text(st, 3, c->account) != SQLITE_OK ||
		    store__bind_text(st, 4, c->sbx_id) != SQLITE_OK ||
		    store__bind_text(st, 5, c->template) != SQLITE_OK ||
		    sqlite3_bind_int64(st, 6, c->vcpus) != SQLITE_OK ||
		    sqlite3_bind_int64(st, 7, c->memory_mb) != SQLITE_OK ||
		    sqlite3_bind_int64(st, 8, c->disk_mb) != SQLITE_OK ||
		    store__bind_text(st, 9, c->env_json ? c->env_json : "{}") != SQLITE_OK ||
		    store__bind_text(st, 10, c->dir) != SQLITE_OK ||
		    sqlite3_bind_int64(st, 11, c->size_bytes) != SQLITE_OK ||
		    sqlite3_bind_int64(st, 12, c->created_at) != SQLITE_OK ||
		    store__bind_text(st, 13, c->stored) != SQLITE_OK)
			r = -EIO;
		else
			r = store__step_done(st);
		/* UNIQUE (account, name) fails as a constraint, like the key */
		if (r == -EIO && sqlite3_extended_errcode(s->db) == SQLITE_CONSTRAINT_UNIQUE)
			r = -EEXIST;
	}
	sqlite3_finalize(st);
	if (!r)
		r = store__commit(s);
	if (r)
		store__rollback(s);
	pthread_mutex_unlock(&s->lock);
	return r;
}

static int read_ckpt(sqlite3_stmt *st, struct store_ckpt *c)
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
	sqlite3_int64 v[3] = { sqlite3_column_int64(st, 5), sqlite3_column_int64(st, 6),
			       sqlite3_column_int64(st, 7) };
	for (int i = 0; i < 3; i++)
		if (v[i] < 0 || v[i] > UINT_MAX)
			return -EIO;
	c->vcpus = (unsigned)v[0];
	c->memory_mb = (unsigned)v[1];
	c->disk_mb = (unsigned)v[2];
	c->size_bytes = sqlite3_column_int64(st, 10);
	c->created_at = sqlite3_column_int64(st, 11);
	const char *e = (const char *)sqlite3_column_text(st, 8);
	c->env_json = strdup(e ? e : "{}");
	return c->env_json ? 0 : -ENOMEM;
}

int store_ckpt_get(struct store *s, const char *account, const char *id_or_name,
		   struct store_ckpt *out)
{
	memset(out, 0, sizeof(*out));
	sqlite3_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s,
			    "SELECT " CKPT_COLS " FROM checkpoints WHERE (id = ?1 OR name = ?1) "
			    "AND (?2 IS NULL OR account = ?2) ORDER BY id = ?1 DESC LIMIT 1",
			    &st);
	if (!r) {
		int b = store__bind_text(st, 1, id_or_name);
		if (b == SQLITE_OK)
			b = account ? store__bind_text(st, 2, account) : sqlite3_bind_null(st, 2);
		if (b != SQLITE_OK) {
			r = -EIO;
		} else {
			int rc = sqlite3_step(st);
			r = rc == SQLITE_ROW ? read_ckpt(st, out) : rc == SQLITE_DONE ? -ENOENT : -EIO;
		}
		sqlite3_finalize(st);
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
	sqlite3_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, sql, &st);
	if (!r && sqlite3_bind_parameter_count(st) > 0 &&
	    (account ? store__bind_text(st, 1, account) : sqlite3_bind_null(st, 1)) != SQLITE_OK)
		r = -EIO;
	while (!r) {
		int rc = sqlite3_step(st);
		if (rc == SQLITE_DONE)
			break;
		if (rc != SQLITE_ROW) {
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
	sqlite3_finalize(st);
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
	return list(s,
		    "SELECT " CKPT_COLS " FROM checkpoints WHERE stored = '' ORDER BY created_at, id",
		    NULL, out, n);
}

int store_ckpt_delete(struct store *s, const char *id)
{
	if (!id || !store__text_ok(id, sizeof(((struct store_ckpt *)0)->id), 1, 0))
		return -ENOENT;
	sqlite3_stmt *st = NULL;
	pthread_mutex_lock(&s->lock);
	int r = store__begin(s);
	if (!r)
		r = store__prep(s,
				"INSERT INTO checkpoint_trash (stored) SELECT stored FROM checkpoints "
				"WHERE id = ?1 AND stored != '' ON CONFLICT DO NOTHING",
				&st);
	if (!r)
		r = store__bind_text(st, 1, id) == SQLITE_OK ? store__step_done(st) : -EIO;
	sqlite3_finalize(st);
	st = NULL;
	if (!r)
		r = store__prep(s, "DELETE FROM checkpoints WHERE id = ?1", &st);
	if (!r) {
		r = store__bind_text(st, 1, id) == SQLITE_OK ? store__step_done(st) : -EIO;
		if (!r && sqlite3_changes(s->db) == 0)
			r = -ENOENT;
	}
	sqlite3_finalize(st);
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
	sqlite3_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "SELECT stored FROM checkpoint_trash ORDER BY stored", &st);
	while (!r) {
		int rc = sqlite3_step(st);
		if (rc == SQLITE_DONE)
			break;
		const char *t = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
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
	sqlite3_finalize(st);
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
