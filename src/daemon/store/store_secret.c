/*
 * store_secret: the secrets table (see store.c): a value an account keeps
 * for its sandboxes' egress, with the hosts it may go to and the
 * placeholder its sandboxes see instead. The value is kept sealed by
 * cpuos-netd (net/seal.h), which alone opens it, to put it in requests
 * (net/secret.h); it never leaves through the API.
 */
#include "daemon/store/store.h"
#include "daemon/store/store_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SECRET_COLS \
	"account, name, value, hosts, placeholder, created_at, updated_at, allow_http, sealed"

void store_secret_release(struct store_secret *x)
{
	if (!x)
		return;
	if (x->value) /* sealed, but a row from before may hold plaintext */
		explicit_bzero(x->value, strlen(x->value));
	free(x->value);
	free(x->hosts_json);
	x->value = x->hosts_json = NULL;
}

void store_secret_free_list(struct store_secret *xs, size_t n)
{
	for (size_t i = 0; xs && i < n; i++)
		store_secret_release(&xs[i]);
	free(xs);
}

int store_secret_put(struct store *s, const struct store_secret *x, int *created)
{
	if (!store__name_ok(x->account) || !store__text_ok(x->name, sizeof(x->name), 1, 0) ||
	    !store__text_ok(x->placeholder, sizeof(x->placeholder), 1, 0) || !x->value ||
	    !x->hosts_json)
		return -EINVAL;
	struct sql_stmt *st = NULL;
	pthread_mutex_lock(&s->lock);
	int r = store__begin(s);
	if (!r)
		r = store__ensure_account(s, x->account);
	/* A secret set again keeps its placeholder: the sandboxes that hold
	 * it go on working with the new value. */
	if (!r)
		r = store__prep(s,
				"INSERT INTO secrets (" SECRET_COLS ") "
				"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8) "
				"ON CONFLICT (account, name) DO UPDATE SET value = ?3, hosts = ?4, "
				"updated_at = ?6, allow_http = ?7, sealed = ?8",
				&st);
	if (!r) {
		if (store__bind_text(st, 1, x->account) != SQL_OK ||
		    store__bind_text(st, 2, x->name) != SQL_OK ||
		    store__bind_text(st, 3, x->value) != SQL_OK ||
		    store__bind_text(st, 4, x->hosts_json) != SQL_OK ||
		    store__bind_text(st, 5, x->placeholder) != SQL_OK ||
		    sql_bind_int64(st, 6, x->updated_at) != SQL_OK ||
		    sql_bind_int64(st, 7, x->allow_http != 0) != SQL_OK ||
		    sql_bind_int64(st, 8, x->sealed != 0) != SQL_OK)
			r = -EIO;
		else
			r = store__step_done(st);
	}
	sql_finalize(st);
	st = NULL;
	/* Created when the placeholder is ours: an update keeps the old. */
	if (!r && created)
		r = store__prep(s, "SELECT placeholder FROM secrets WHERE account = ?1 AND name = ?2",
				&st);
	if (!r && created) {
		if (store__bind_text(st, 1, x->account) != SQL_OK ||
		    store__bind_text(st, 2, x->name) != SQL_OK || sql_step(st) != SQL_ROW)
			r = -EIO;
		else
			*created = !strcmp(sql_col_text(st, 0), x->placeholder);
	}
	sql_finalize(st);
	if (!r)
		r = store__commit(s);
	if (r)
		store__rollback(s);
	pthread_mutex_unlock(&s->lock);
	return r;
}

static int read_secret(struct sql_stmt *st, struct store_secret *x)
{
	memset(x, 0, sizeof(*x));
	if (store__col_copy(st, 0, x->account, sizeof(x->account)) ||
	    store__col_copy(st, 1, x->name, sizeof(x->name)) ||
	    store__col_copy(st, 4, x->placeholder, sizeof(x->placeholder)))
		return -EIO;
	const char *v = sql_col_text(st, 2);
	const char *h = sql_col_text(st, 3);
	x->value = strdup(v ? v : "");
	x->hosts_json = strdup(h ? h : "[]");
	x->created_at = sql_col_int64(st, 5);
	x->updated_at = sql_col_int64(st, 6);
	x->allow_http = (int)sql_col_int64(st, 7) != 0;
	x->sealed = (int)sql_col_int64(st, 8) != 0;
	if (!x->value || !x->hosts_json) {
		store_secret_release(x);
		return -ENOMEM;
	}
	return 0;
}

int store_secret_list(struct store *s, const char *account, const char *name,
		      struct store_secret **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	struct store_secret *xs = NULL;
	size_t got = 0, cap = 0;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s,
			    "SELECT " SECRET_COLS " FROM secrets WHERE (?1 IS NULL OR account = ?1) "
			    "AND (?2 IS NULL OR name = ?2) ORDER BY account, name",
			    &st);
	if (!r && ((account ? store__bind_text(st, 1, account) : sql_bind_null(st, 1)) !=
			   SQL_OK ||
		   (name ? store__bind_text(st, 2, name) : sql_bind_null(st, 2)) != SQL_OK))
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
			struct store_secret *nx = realloc(xs, (cap ? 2 * cap : 8) * sizeof(*nx));
			if (!nx) {
				r = -ENOMEM;
				break;
			}
			xs = nx;
			cap = cap ? 2 * cap : 8;
		}
		if (!(r = read_secret(st, &xs[got])))
			got++;
	}
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r) {
		store_secret_free_list(xs, got);
		return r;
	}
	*out = xs;
	*n = got;
	return 0;
}

int store_secret_get(struct store *s, const char *account, const char *name,
		     struct store_secret *out)
{
	struct store_secret *xs = NULL;
	size_t n = 0;
	int r = store_secret_list(s, account, name, &xs, &n);
	if (r == 0 && n == 1) {
		*out = xs[0];
		free(xs);
		return 0;
	}
	store_secret_free_list(xs, n);
	return r < 0 ? r : -ENOENT;
}

int store_secret_delete(struct store *s, const char *account, const char *name)
{
	const char *v[] = { account, name };
	return store__change(s, "DELETE FROM secrets WHERE account = ?1 AND name = ?2", 2, v);
}

int store_secret_seal(struct store *s, const char *account, const char *name, const char *was,
		      const char *sealed)
{
	const char *v[] = { account, name, was, sealed };
	return store__change(s,
			     "UPDATE secrets SET value = ?4, sealed = 1 WHERE account = ?1 AND "
			     "name = ?2 AND value = ?3 AND sealed = 0",
			     4, v);
}
