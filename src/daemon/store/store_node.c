/*
 * store_node: the nodes table (see store.c, schema 10): daemons that share
 * one database, each with a lease it renews and an epoch that fences it.
 * A node's epoch moves on when it joins and when it is declared down; the
 * rows of the sandboxes it owns carry the epoch at which it took them,
 * and every change it makes to one holds only while both still match
 * (store_sbx.c's OWNED). So a node declared down, which may still be
 * running somewhere, writes nothing more.
 */
#include "daemon/store/store.h"
#include "daemon/store/store_impl.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NODE_COLS                                                                          \
	"name, url, state, epoch, lease_until_ms, joined_at, vcpus, memory_mb, drained, ports_url, " \
	"compat, warm, held, disk_free_mb"

static int name_ok(const char *name)
{
	size_t n = strnlen(name, 64);
	return n > 0 && n < 64 &&
	       strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

/* The advisory lock a daemon holds on the database: any number, the same
 * in every cpuosd (lib/sql's migrations take another). */
#define CLAIM_LOCK "7306547812"

int store_claim(struct store *s, int shared)
{
	pthread_mutex_lock(&s->lock);
	/* Held as long as the connection; taken again on a new one. */
	int r = sql_reclaim(s->db, shared ? "SELECT pg_try_advisory_lock_shared(" CLAIM_LOCK ")"
					  : "SELECT pg_try_advisory_lock(" CLAIM_LOCK ")");
	pthread_mutex_unlock(&s->lock);
	return r;
}

const char *store_node_name(struct store *s)
{
	return s->node; /* set once, at the join, before any thread reads it */
}

/* Runs a statement of the open transaction with text ?1 and number ?2:
 * 0 or -EIO; the rows it changed in *changed (may be NULL). */
static int run(struct store *s, const char *sql, const char *t1, long long n2, long long *changed)
{
	struct sql_stmt *st;
	int r = store__prep(s, sql, &st);
	if (r)
		return r;
	if (store__bind_text(st, 1, t1) != SQL_OK ||
	    (sql_param_count(st) >= 2 && sql_bind_int64(st, 2, n2) != SQL_OK))
		r = -EIO;
	else
		r = store__step_done(st);
	sql_finalize(st);
	if (!r && changed)
		*changed = sql_changes(s->db);
	return r == -EEXIST ? -EIO : r;
}

int store_node_join(struct store *s, const struct store_node *n, long long *epoch)
{
	if (!name_ok(n->name) || !store__text_ok(n->url, sizeof(n->url), 0, 0) ||
	    !store__text_ok(n->ports_url, sizeof(n->ports_url), 0, 0) ||
	    !store__text_ok(n->compat, sizeof(n->compat), 0, 0) || n->lease_until_ms <= 0)
		return -EINVAL;
	struct sql_stmt *st = NULL;
	long long e = 0;
	pthread_mutex_lock(&s->lock);
	int r = store__begin(s);
	if (!r)
		r = store__prep(s,
				"INSERT INTO nodes (" NODE_COLS ") VALUES (?1, ?2, 'ready', 1, ?3, ?4, "
				"?5, ?6, 0, ?7, ?8, '', '', -1) ON CONFLICT (name) DO UPDATE SET "
				"url = excluded.url, ports_url = excluded.ports_url, "
				"compat = excluded.compat, warm = '', held = '', disk_free_mb = -1, "
				/* drained stays: a drain outlives restarts */
				"state = 'ready', epoch = nodes.epoch + 1, "
				"lease_until_ms = excluded.lease_until_ms, joined_at = excluded.joined_at, "
				"vcpus = excluded.vcpus, memory_mb = excluded.memory_mb",
				&st);
	if (!r) {
		if (store__bind_text(st, 1, n->name) != SQL_OK ||
		    store__bind_text(st, 2, n->url) != SQL_OK ||
		    sql_bind_int64(st, 3, n->lease_until_ms) != SQL_OK ||
		    sql_bind_int64(st, 4, n->joined_at) != SQL_OK ||
		    sql_bind_int64(st, 5, n->vcpus) != SQL_OK ||
		    sql_bind_int64(st, 6, (long long)n->memory_mb) != SQL_OK ||
		    store__bind_text(st, 7, n->ports_url) != SQL_OK ||
		    store__bind_text(st, 8, n->compat) != SQL_OK)
			r = -EIO;
		else
			r = store__step_done(st);
	}
	sql_finalize(st);
	st = NULL;
	if (!r)
		r = store__prep(s, "SELECT epoch FROM nodes WHERE name = ?1", &st);
	if (!r) {
		if (store__bind_text(st, 1, n->name) != SQL_OK || sql_step(st) != SQL_ROW)
			r = -EIO;
		else
			e = sql_col_int64(st, 0);
	}
	sql_finalize(st);
	/* What it owns it owns at this epoch: its own late writes from an
	 * incarnation before are fenced like anyone's. */
	if (!r)
		r = run(s, "UPDATE sandboxes SET node_epoch = ?2 WHERE node = ?1", n->name, e, NULL);
	if (!r)
		r = store__commit(s);
	if (r) {
		store__rollback(s);
	} else {
		snprintf(s->node, sizeof(s->node), "%s", n->name);
		s->node_epoch = e;
		*epoch = e;
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_node_renew(struct store *s, long long lease_until_ms)
{
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = s->node[0] ? store__prep(s,
					 "UPDATE nodes SET lease_until_ms = ?2 WHERE name = ?1 "
					 "AND epoch = ?3 AND state != 'down'",
					 &st)
			   : -EINVAL;
	if (!r) {
		if (store__bind_text(st, 1, s->node) != SQL_OK ||
		    sql_bind_int64(st, 2, lease_until_ms) != SQL_OK ||
		    sql_bind_int64(st, 3, s->node_epoch) != SQL_OK)
			r = -EIO;
		else if (!(r = store__step_done(st)) && sql_changes(s->db) == 0)
			r = -ESTALE;
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	return r == -EEXIST ? -EIO : r;
}

int store_node_offers(struct store *s, const char *compat, const char *warm, const char *held,
		      long long disk_free_mb)
{
	if (disk_free_mb < -1 ||
	    !store__text_ok(compat, sizeof(((struct store_node *)0)->compat), 0, 0) ||
	    !store__text_ok(warm, sizeof(((struct store_node *)0)->warm), 0, 0) ||
	    !store__text_ok(held, sizeof(((struct store_node *)0)->held), 0, 0))
		return -EINVAL;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = s->node[0] ? store__prep(s,
					 "UPDATE nodes SET warm = ?2, held = ?4, compat = ?5, "
					 "disk_free_mb = ?6 "
					 "WHERE name = ?1 AND epoch = ?3 AND state != 'down'",
					 &st)
			   : -EINVAL;
	if (!r) {
		if (store__bind_text(st, 1, s->node) != SQL_OK || store__bind_text(st, 2, warm) != SQL_OK ||
		    sql_bind_int64(st, 3, s->node_epoch) != SQL_OK ||
		    store__bind_text(st, 4, held) != SQL_OK ||
		    store__bind_text(st, 5, compat) != SQL_OK ||
		    sql_bind_int64(st, 6, disk_free_mb) != SQL_OK)
			r = -EIO;
		else if (!(r = store__step_done(st)) && sql_changes(s->db) == 0)
			r = -ESTALE;
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	return r == -EEXIST ? -EIO : r;
}

static int read_node(struct sql_stmt *st, struct store_node *n)
{
	memset(n, 0, sizeof(*n));
	if (store__col_copy(st, 0, n->name, sizeof(n->name)) ||
	    store__col_copy(st, 1, n->url, sizeof(n->url)) ||
	    store__col_copy(st, 2, n->state, sizeof(n->state)) ||
	    store__col_copy(st, 9, n->ports_url, sizeof(n->ports_url)) ||
	    store__col_copy(st, 10, n->compat, sizeof(n->compat)) ||
	    store__col_copy(st, 11, n->warm, sizeof(n->warm)) ||
	    store__col_copy(st, 12, n->held, sizeof(n->held)))
		return -EIO;
	n->drained = sql_col_int64(st, 8) != 0;
	if (n->drained && !strcmp(n->state, "ready"))
		snprintf(n->state, sizeof(n->state), "draining");
	n->epoch = sql_col_int64(st, 3);
	n->lease_until_ms = sql_col_int64(st, 4);
	n->joined_at = sql_col_int64(st, 5);
	n->disk_free_mb = sql_col_int64(st, 13);
	long long v = sql_col_int64(st, 6), m = sql_col_int64(st, 7);
	if (v < 0 || v > UINT_MAX || m < 0 || n->disk_free_mb < -1)
		return -EIO;
	n->vcpus = (unsigned)v;
	n->memory_mb = (unsigned long long)m;
	return 0;
}

int store_node_list(struct store *s, struct store_node **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	struct store_node *ns = NULL;
	size_t got = 0, cap = 0;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "SELECT " NODE_COLS " FROM nodes ORDER BY name", &st);
	while (!r) {
		int rc = sql_step(st);
		if (rc == SQL_DONE)
			break;
		if (rc != SQL_ROW) {
			r = -EIO;
			break;
		}
		if (got == cap) {
			struct store_node *nn = realloc(ns, (cap ? 2 * cap : 8) * sizeof(*nn));
			if (!nn) {
				r = -ENOMEM;
				break;
			}
			ns = nn;
			cap = cap ? 2 * cap : 8;
		}
		if (!(r = read_node(st, &ns[got])))
			got++;
	}
	sql_finalize(st);
	pthread_mutex_unlock(&s->lock);
	if (r) {
		free(ns);
		return r;
	}
	*out = ns;
	*n = got;
	return 0;
}

int store_node_get(struct store *s, const char *name, struct store_node *out)
{
	memset(out, 0, sizeof(*out));
	if (!name || !name_ok(name))
		return -ENOENT;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "SELECT " NODE_COLS " FROM nodes WHERE name = ?1", &st);
	if (!r) {
		int rc = store__bind_text(st, 1, name) == SQL_OK ? sql_step(st) : SQL_ERROR;
		r = rc == SQL_ROW ? read_node(st, out) : rc == SQL_DONE ? -ENOENT : -EIO;
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_node_drain(struct store *s, const char *name, int drain)
{
	if (!name || !name_ok(name))
		return -ENOENT;
	const char *texts[] = { name };
	return store__change(s,
			     drain ? "UPDATE nodes SET drained = 1 WHERE name = ?1"
				   : "UPDATE nodes SET drained = 0 WHERE name = ?1",
			     1, texts);
}

/* In the open transaction: the node this store writes as is still at its
 * epoch and not down, its row held (PostgreSQL: FOR SHARE) until the end,
 * so it is not declared down meanwhile. 0, -ESTALE, -EIO. */
int store__node_alive(struct store *s)
{
	if (!s->node[0])
		return 0;
	struct sql_stmt *st;
	int r = store__prep(s,
			    sql_kind(s->db) == SQL_PG
				? "SELECT 1 FROM nodes WHERE name = ?1 AND epoch = ?2 AND state != 'down' "
				  "FOR SHARE"
				: "SELECT 1 FROM nodes WHERE name = ?1 AND epoch = ?2 AND state != 'down'",
			    &st);
	if (r)
		return r;
	int rc = store__bind_text(st, 1, s->node) == SQL_OK &&
			 sql_bind_int64(st, 2, s->node_epoch) == SQL_OK
		     ? sql_step(st)
		     : SQL_ERROR;
	sql_finalize(st);
	return rc == SQL_ROW ? 0 : rc == SQL_DONE ? -ESTALE : -EIO;
}

int store_sbx_take(struct store *s, const char *id, const char *stored, const char *run_dir)
{
	if (!id || !stored || !stored[0] || !run_dir ||
	    !store__text_ok(run_dir, sizeof(((struct store_sbx *)0)->run_dir), 1, 1))
		return -EINVAL;
	int pg = 0;
	struct sql_stmt *st = NULL;
	char owner[64] = "";
	pthread_mutex_lock(&s->lock);
	int r = s->node[0] ? store__begin(s) : -EINVAL;
	pg = r == 0 && sql_kind(s->db) == SQL_PG;
	/* The row and its owner's held till the end: the owner cannot join
	 * again (and take its rows back) meanwhile, nor this node be declared
	 * down. */
	if (!r)
		r = store__prep(s,
				pg ? "SELECT node FROM sandboxes WHERE id = ?1 FOR UPDATE"
				   : "SELECT node FROM sandboxes WHERE id = ?1",
				&st);
	if (!r) {
		int rc = store__bind_text(st, 1, id) == SQL_OK ? sql_step(st) : SQL_ERROR;
		r = rc == SQL_ROW ? store__col_copy(st, 0, owner, sizeof(owner))
		    : rc == SQL_DONE ? -ESTALE
				     : -EIO;
	}
	sql_finalize(st);
	st = NULL;
	/* A row its node let go of (node ''), or one of a node declared down */
	if (!r && owner[0])
		r = store__prep(s,
				pg ? "SELECT 1 FROM nodes WHERE name = ?1 AND state = 'down' FOR SHARE"
				   : "SELECT 1 FROM nodes WHERE name = ?1 AND state = 'down'",
				&st);
	if (!r && owner[0]) {
		int rc = store__bind_text(st, 1, owner) == SQL_OK ? sql_step(st) : SQL_ERROR;
		r = rc == SQL_ROW ? 0 : rc == SQL_DONE ? -ESTALE : -EIO;
	}
	sql_finalize(st);
	st = NULL;
	if (!r)
		r = store__node_alive(s);
	if (!r)
		r = store__prep(s,
				"UPDATE sandboxes SET node = ?8, node_epoch = ?9, run_dir = ?3 "
				"WHERE id = ?1 AND state = 'paused' AND stored = ?2 AND node = ?4",
				&st);
	if (!r) {
		if (store__bind_text(st, 1, id) != SQL_OK || store__bind_text(st, 2, stored) != SQL_OK ||
		    store__bind_text(st, 3, run_dir) != SQL_OK ||
		    store__bind_text(st, 4, owner) != SQL_OK || store__bind_owner(s, st) != SQL_OK)
			r = -EIO;
		else if (!(r = store__step_done(st)) && sql_changes(s->db) == 0)
			r = -ESTALE;
	}
	sql_finalize(st);
	if (!r)
		r = store__commit(s);
	if (r)
		store__rollback(s);
	pthread_mutex_unlock(&s->lock);
	return r == -EEXIST ? -EIO : r;
}

int store_sbx_let_go(struct store *s, const char *id, const char *stored)
{
	if (!id || !stored || !stored[0])
		return -EINVAL;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = s->node[0] ? store__prep(s,
					 "UPDATE sandboxes SET node = '', node_epoch = 0 WHERE id = ?1 "
					 "AND state = 'paused' AND stored = ?2 AND node = ?8 "
					 "AND node_epoch = ?9",
					 &st)
			   : -EINVAL;
	if (!r) {
		if (store__bind_text(st, 1, id) != SQL_OK || store__bind_text(st, 2, stored) != SQL_OK ||
		    store__bind_owner(s, st) != SQL_OK)
			r = -EIO;
		else if (!(r = store__step_done(st)) && sql_changes(s->db) == 0)
			r = -ESTALE;
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	return r == -EEXIST ? -EIO : r;
}

int store_tsnap_get(struct store *s, const char *key, struct store_tsnap *out)
{
	memset(out, 0, sizeof(*out));
	if (!store__text_ok(key, sizeof(out->key), 1, 0))
		return -ENOENT;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "SELECT key, prefix, stored, node FROM template_snaps WHERE key = ?1",
			    &st);
	if (!r) {
		int rc = store__bind_text(st, 1, key) == SQL_OK ? sql_step(st) : SQL_ERROR;
		if (rc == SQL_DONE)
			r = -ENOENT;
		else if (rc != SQL_ROW || store__col_copy(st, 0, out->key, sizeof(out->key)) ||
			 store__col_copy(st, 1, out->prefix, sizeof(out->prefix)) ||
			 store__col_copy(st, 2, out->stored, sizeof(out->stored)) ||
			 store__col_copy(st, 3, out->node, sizeof(out->node)))
			r = -EIO;
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_tsnap_put(struct store *s, const struct store_tsnap *t)
{
	if (!store__text_ok(t->key, sizeof(t->key), 1, 0) ||
	    !store__text_ok(t->prefix, sizeof(t->prefix), 1, 0) || strlen(t->stored) != 64 ||
	    strspn(t->stored, "0123456789abcdef") != 64 || !s->node[0])
		return -EINVAL;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s,
			    "INSERT INTO template_snaps (key, prefix, stored, node, created_at) "
			    "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (key) DO NOTHING",
			    &st);
	if (!r) {
		if (store__bind_text(st, 1, t->key) != SQL_OK ||
		    store__bind_text(st, 2, t->prefix) != SQL_OK ||
		    store__bind_text(st, 3, t->stored) != SQL_OK ||
		    store__bind_text(st, 4, s->node) != SQL_OK ||
		    sql_bind_int64(st, 5, (long long)time(NULL)) != SQL_OK)
			r = -EIO;
		else if (!(r = store__step_done(st)) && sql_changes(s->db) == 0)
			r = -EEXIST;
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* Declares node name, at epoch, down if its lease still ran out before
 * now_ms: 1 if it did, 0 if not (renewed or reaped meanwhile), -errno. */
static int reap_one(struct store *s, const char *name, long long epoch, long long now_ms)
{
	struct sql_stmt *st = NULL;
	long long changed = 0;
	int r = store__begin(s);
	if (!r)
		r = store__prep(s,
				"UPDATE nodes SET state = 'down', epoch = epoch + 1 WHERE name = ?1 "
				"AND epoch = ?2 AND state != 'down' AND lease_until_ms < ?3",
				&st);
	if (!r) {
		if (store__bind_text(st, 1, name) != SQL_OK || sql_bind_int64(st, 2, epoch) != SQL_OK ||
		    sql_bind_int64(st, 3, now_ms) != SQL_OK)
			r = -EIO;
		else if (!(r = store__step_done(st)))
			changed = sql_changes(s->db);
	}
	sql_finalize(st);
	if (!r)
		r = store__commit(s);
	if (r)
		store__rollback(s);
	return r < 0 ? r : changed > 0;
}

/* What the nodes that are down still hold: every row of theirs moved to
 * their epoch now (out of their reach), first; then their running
 * sandboxes lost, their usage ending at now_ms. Each pass, so a row a
 * dying node changed while it was declared down is caught at the next. */
#define SWEEP_EPOCHS                                                                               \
	"UPDATE sandboxes SET node_epoch = n.epoch FROM nodes n WHERE n.name = sandboxes.node "   \
	"AND n.state = 'down' AND sandboxes.node_epoch != n.epoch AND ?1 = ?1"
static int sweep(struct store *s, long long now_ms)
{
	static const char *const lite[] = {
		SWEEP_EPOCHS,
		"INSERT INTO usage_events (sbx_id, account, key_id, state, vcpus, memory_mb, "
		"storage_bytes, at_ms) SELECT id, account, key_id, 'stopped', vcpus, memory_mb, 0, ?1 "
		"FROM sandboxes WHERE state = 'running' AND node IN "
		"(SELECT name FROM nodes WHERE state = 'down')",
		"UPDATE sandboxes SET state = 'lost', end_reason = 'node_lost', qemu_pid = 0, "
		"net_slot = -1 WHERE state = 'running' AND node IN "
		"(SELECT name FROM nodes WHERE state = 'down') AND ?1 = ?1",
	};
	/* PostgreSQL: the running ones lost and their usage ended in one
	 * statement, so no write of theirs falls between the two. */
	static const char *const pg[] = {
		SWEEP_EPOCHS,
		"WITH l AS (UPDATE sandboxes SET state = 'lost', end_reason = 'node_lost', "
		"qemu_pid = 0, net_slot = -1 WHERE state = 'running' AND node IN "
		"(SELECT name FROM nodes WHERE state = 'down') RETURNING id, account, key_id, vcpus, "
		"memory_mb) INSERT INTO usage_events (sbx_id, account, key_id, state, vcpus, memory_mb, "
		"storage_bytes, at_ms) SELECT id, account, key_id, 'stopped', vcpus, memory_mb, 0, ?1 "
		"FROM l",
	};
	int is_pg = sql_kind(s->db) == SQL_PG;
	const char *const *steps = is_pg ? pg : lite;
	size_t n = is_pg ? 2 : 3;
	int r = store__begin(s);
	for (size_t i = 0; !r && i < n; i++) {
		struct sql_stmt *st;
		if ((r = store__prep(s, steps[i], &st)) < 0)
			break;
		r = sql_bind_int64(st, 1, now_ms) == SQL_OK ? store__step_done(st) : -EIO;
		sql_finalize(st);
	}
	if (!r)
		r = store__commit(s);
	if (r)
		store__rollback(s);
	return r == -EEXIST ? -EIO : r;
}

int store_nodes_reap(struct store *s, long long now_ms)
{
	struct store_node *ns;
	size_t n;
	int r = store_node_list(s, &ns, &n);
	if (r)
		return r;
	int downed = 0;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n && r == 0; i++) {
		/* Not itself: a node whose own lease lapsed learns it from its
		 * renewal, and stops. */
		if (!strcmp(ns[i].state, "down") || ns[i].lease_until_ms >= now_ms ||
		    !strcmp(ns[i].name, s->node))
			continue;
		int d = reap_one(s, ns[i].name, ns[i].epoch, now_ms);
		if (d < 0)
			r = d;
		else
			downed += d;
	}
	if (r == 0)
		r = sweep(s, now_ms);
	pthread_mutex_unlock(&s->lock);
	free(ns);
	return r < 0 ? r : downed;
}
