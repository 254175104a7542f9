/*
 * store_sbx: the sandboxes table of the store (see store.c): insert, get,
 * the set_* updates, keyset-paginated listing with metadata filters, and the
 * running sandboxes the daemon recovers at start.
 */
#include "daemon/store/store.h"
#include "daemon/store/store_impl.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEX "0123456789abcdef"

#define MAX_META_FILTER 64 /* metadata pairs in one list filter */
#define MAX_LIST_LIMIT	100
/* A cursor is the hex of "<created_at>.<id>": at most 19 digits, a dot and
 * 31 bytes of id, so 102 hex characters; 128 bytes always hold one. */
#define CURSOR_RAW_MAX (19 + 1 + 31)

/*
 * Details the header leaves open (store.c lists the rest):
 *  - store_sbx_insert creates the account if new (as store_key_create does),
 *    rejects metadata/env that is not a JSON object of strings, and stores
 *    both in compact form (NULL means {}).
 *  - store_sbx_list: cursor and next_cursor may be one buffer; 128 bytes
 *    always hold a cursor (-ERANGE if cursorlen is too small); "" as an
 *    input cursor is -EINVAL. count_running returns the count.
 */

#define SBX_COLS                                                                                   \
	"id, account, template, state, end_reason, vcpus, memory_mb, disk_mb, created_at, "        \
	"expires_at, metadata, env, run_dir, qemu_pid, on_timeout, timeout_s, paused_at, parent, "  \
	"key_id, generation, network, net_slot, public, traffic_token, secrets, transforms, "       \
	"stored, node, node_epoch, idle_timeout_s"

/* What every write of a node's to a sandbox's row holds to: the row is
 * still its own, at its epoch (store_node_join). A node declared down
 * since, or a row another node took, changes nothing. In a single host's
 * store, node "" and epoch 0 on every side. */
#define OWNED " AND node = ?8 AND node_epoch = ?9"

/* Sandbox ids: 1..31 printable bytes, no space. */
static int sbx_id_ok(const char *s)
{
	return store__text_ok(s, sizeof(((struct store_sbx *)0)->id), 1, 0);
}

static int state_ok(const char *s)
{
	return s && (!strcmp(s, "running") || !strcmp(s, "paused") || !strcmp(s, "stopped") ||
		     !strcmp(s, "lost"));
}

static int col_unsigned(struct sql_stmt *st, int col, unsigned *out)
{
	long long v = sql_col_int64(st, col);
	if (v < 0 || v > UINT_MAX)
		return -EIO;
	*out = (unsigned)v;
	return 0;
}

/* ---- sandboxes ---- */

void store_sbx_release(struct store_sbx *x)
{
	if (!x)
		return;
	free(x->metadata_json);
	free(x->env_json);
	free(x->network_json);
	free(x->secrets_json);
	free(x->transforms_json);
	x->transforms_json = NULL;
	x->metadata_json = NULL;
	x->env_json = NULL;
	x->network_json = NULL;
	x->secrets_json = NULL;
}

void store_sbx_free_list(struct store_sbx *xs, size_t n)
{
	for (size_t i = 0; xs && i < n; i++)
		store_sbx_release(&xs[i]);
	free(xs);
}

/* Parses text (NULL means "{}") as a JSON object of strings. */
static int parse_strmap(const char *text, json_t **out)
{
	json_error_t je;
	json_t *o = json_loads(text ? text : "{}", JSON_REJECT_DUPLICATES, &je);
	*out = NULL;
	if (!o)
		return -EINVAL;
	const char *k;
	json_t *v;
	int ok = json_is_object(o);
	if (ok)
		json_object_foreach(o, k, v)
		{
			if (!json_is_string(v))
				ok = 0;
		}
	if (!ok) {
		json_decref(o);
		return -EINVAL;
	}
	*out = o;
	return 0;
}

static int sbx_insert_tx(struct store *s, const struct store_sbx *x, const char *meta_text,
			 const char *env_text, json_t *meta, const struct store_usage_event *usage)
{
	struct sql_stmt *st = NULL;
	int r = store__begin(s);
	if (!r)
		r = store__node_alive(s); /* and held so till the commit */
	if (!r)
		r = store__ensure_account(s, x->account);
	if (!r)
		r = store__prep(s,
				"INSERT INTO sandboxes (" SBX_COLS ") SELECT "
				"?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, "
				"?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30 "
				/* a node that is not fenced: its epoch still its own */
				"WHERE ?28 = '' OR EXISTS (SELECT 1 FROM nodes WHERE name = ?28 "
				"AND epoch = ?29 AND state != 'down')",
				&st);
	if (!r) {
		if (store__bind_text(st, 1, x->id) != SQL_OK ||
		    store__bind_text(st, 2, x->account) != SQL_OK ||
		    store__bind_text(st, 3, x->template) != SQL_OK ||
		    store__bind_text(st, 4, x->state) != SQL_OK ||
		    store__bind_text(st, 5, x->end_reason) != SQL_OK ||
		    sql_bind_int64(st, 6, x->vcpus) != SQL_OK ||
		    sql_bind_int64(st, 7, x->memory_mb) != SQL_OK ||
		    sql_bind_int64(st, 8, x->disk_mb) != SQL_OK ||
		    sql_bind_int64(st, 9, x->created_at) != SQL_OK ||
		    sql_bind_int64(st, 10, x->expires_at) != SQL_OK ||
		    store__bind_text(st, 11, meta_text) != SQL_OK ||
		    store__bind_text(st, 12, env_text) != SQL_OK ||
		    store__bind_text(st, 13, x->run_dir) != SQL_OK ||
		    sql_bind_int64(st, 14, x->qemu_pid) != SQL_OK ||
		    store__bind_text(st, 15, x->on_timeout[0] ? x->on_timeout : "pause") != SQL_OK ||
		    sql_bind_int64(st, 16, x->timeout_left_s) != SQL_OK ||
		    sql_bind_int64(st, 17, x->paused_at) != SQL_OK ||
		    store__bind_text(st, 18, x->parent) != SQL_OK ||
		    store__bind_text(st, 19, x->key_id) != SQL_OK ||
		    sql_bind_int64(st, 20, x->generation) != SQL_OK ||
		    store__bind_text(st, 21, x->network_json ? x->network_json : "") != SQL_OK ||
		    sql_bind_int64(st, 22, x->net_slot) != SQL_OK ||
		    sql_bind_int64(st, 23, x->is_public) != SQL_OK ||
		    store__bind_text(st, 24, x->traffic_token) != SQL_OK ||
		    store__bind_text(st, 25, x->secrets_json ? x->secrets_json : "[]") != SQL_OK ||
		    store__bind_text(st, 26, x->transforms_json ? x->transforms_json : "[]") !=
			    SQL_OK ||
		    store__bind_text(st, 27, x->stored) != SQL_OK ||
		    store__bind_text(st, 28, s->node) != SQL_OK ||
		    sql_bind_int64(st, 29, s->node_epoch) != SQL_OK ||
		    sql_bind_int64(st, 30, x->idle_timeout_s) != SQL_OK)
			r = -EIO;
		else if (!(r = store__step_done(st)) && sql_changes(s->db) == 0)
			r = -ESTALE;
	}
	sql_finalize(st);
	st = NULL;
	if (!r)
		r = store__prep(
		    s, "INSERT INTO sandbox_meta (sbx_id, key, value) VALUES (?1, ?2, ?3)", &st);
	const char *k;
	json_t *v;
	if (!r)
		json_object_foreach(meta, k, v)
		{
			sql_reset(st);
			if (store__bind_text(st, 1, x->id) != SQL_OK ||
			    store__bind_text(st, 2, k) != SQL_OK ||
			    sql_bind_textn(st, 3, json_string_value(v), json_string_length(v)) !=
				    SQL_OK ||
			    store__step_done(st)) {
				r = -EIO;
				break;
			}
		}
	sql_finalize(st);
	if (!r && usage)
		r = store__usage_insert(s, usage);
	if (!r)
		r = store__commit(s);
	if (r)
		store__rollback(s);
	return r;
}

int store_sbx_insert(struct store *s, const struct store_sbx *x,
		     const struct store_usage_event *usage)
{
	if (!x || !sbx_id_ok(x->id) || !store__name_ok(x->account) ||
	    !store__text_ok(x->template, sizeof(x->template), 1, 0) || !state_ok(x->state) ||
	    !store__text_ok(x->end_reason, sizeof(x->end_reason), 0, 0) ||
	    strnlen(x->run_dir, sizeof(x->run_dir)) >= sizeof(x->run_dir) || x->created_at < 0 ||
	    x->expires_at < 0 || x->qemu_pid < 0 || (usage && !store__usage_ok(usage)))
		return -EINVAL;
	json_t *meta = NULL, *env = NULL;
	char *meta_text = NULL, *env_text = NULL;
	int r = parse_strmap(x->metadata_json, &meta);
	if (!r)
		r = parse_strmap(x->env_json, &env);
	if (r)
		goto out;
	/* stored in one canonical form, the form store_sbx_get returns */
	meta_text = json_dumps(meta, JSON_COMPACT);
	env_text = json_dumps(env, JSON_COMPACT);
	if (!meta_text || !env_text) {
		r = -ENOMEM;
		goto out;
	}
	pthread_mutex_lock(&s->lock);
	r = sbx_insert_tx(s, x, meta_text, env_text, meta, usage);
	pthread_mutex_unlock(&s->lock);
out:
	free(meta_text);
	free(env_text);
	json_decref(meta);
	json_decref(env);
	return r;
}

/* Fills x from a row of SBX_COLS: 0, -EIO for a row this store did not
 * write, -ENOMEM. */
static int read_sbx(struct sql_stmt *st, struct store_sbx *x)
{
	memset(x, 0, sizeof(*x));
	if (store__col_copy(st, 0, x->id, sizeof(x->id)) ||
	    store__col_copy(st, 1, x->account, sizeof(x->account)) ||
	    store__col_copy(st, 2, x->template, sizeof(x->template)) ||
	    store__col_copy(st, 3, x->state, sizeof(x->state)) ||
	    store__col_copy(st, 4, x->end_reason, sizeof(x->end_reason)) ||
	    col_unsigned(st, 5, &x->vcpus) || col_unsigned(st, 6, &x->memory_mb) ||
	    col_unsigned(st, 7, &x->disk_mb) ||
	    store__col_copy(st, 12, x->run_dir, sizeof(x->run_dir)) ||
	    store__col_copy(st, 14, x->on_timeout, sizeof(x->on_timeout)) ||
	    store__col_copy(st, 17, x->parent, sizeof(x->parent)) ||
	    store__col_copy(st, 18, x->key_id, sizeof(x->key_id)) ||
	    store__col_copy(st, 23, x->traffic_token, sizeof(x->traffic_token)) ||
	    store__col_copy(st, 26, x->stored, sizeof(x->stored)) ||
	    store__col_copy(st, 27, x->node, sizeof(x->node)) ||
	    col_unsigned(st, 19, &x->generation))
		return -EIO;
	x->timeout_left_s = sql_col_int64(st, 15);
	x->idle_timeout_s = sql_col_int64(st, 29);
	x->paused_at = sql_col_int64(st, 16);
	x->created_at = sql_col_int64(st, 8);
	x->expires_at = sql_col_int64(st, 9);
	long long pid = sql_col_int64(st, 13);
	if (pid < 0 || pid > INT_MAX)
		return -EIO;
	x->qemu_pid = (int)pid;
	const char *m = sql_col_text(st, 10);
	const char *e = sql_col_text(st, 11);
	x->metadata_json = strdup(m ? m : "{}");
	x->env_json = strdup(e ? e : "{}");
	const char *nw = sql_col_text(st, 20);
	x->network_json = strdup(nw ? nw : "");
	x->net_slot = (int)sql_col_int64(st, 21);
	x->is_public = (int)sql_col_int64(st, 22) != 0;
	const char *sc = sql_col_text(st, 24);
	x->secrets_json = strdup(sc ? sc : "[]");
	const char *tf = sql_col_text(st, 25);
	x->transforms_json = strdup(tf ? tf : "[]");
	if (!x->metadata_json || !x->env_json || !x->network_json || !x->secrets_json ||
	    !x->transforms_json) {
		store_sbx_release(x);
		return -ENOMEM;
	}
	return 0;
}

/* Steps st, appending up to max rows (0: no limit) to *xs; *more is set
 * when a further row exists. */
static int collect(struct sql_stmt *st, size_t max, struct store_sbx **xs, size_t *n, int *more)
{
	size_t cap = 0;
	*xs = NULL;
	*n = 0;
	*more = 0;
	for (;;) {
		int rc = sql_step(st);
		if (rc == SQL_DONE)
			return 0;
		if (rc != SQL_ROW)
			return -EIO;
		if (max && *n == max) {
			*more = 1;
			return 0;
		}
		if (*n == cap) {
			size_t ncap = cap ? 2 * cap : (max ? max : 16);
			struct store_sbx *nx = realloc(*xs, ncap * sizeof(*nx));
			if (!nx)
				return -ENOMEM;
			*xs = nx;
			cap = ncap;
		}
		int r = read_sbx(st, &(*xs)[*n]);
		if (r)
			return r;
		(*n)++;
	}
}

int store_sbx_get(struct store *s, const char *id, struct store_sbx *out)
{
	memset(out, 0, sizeof(*out));
	if (!sbx_id_ok(id)) /* cannot name a sandbox this store holds */
		return -ENOENT;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, "SELECT " SBX_COLS " FROM sandboxes WHERE id = ?1", &st);
	if (!r) {
		if (store__bind_text(st, 1, id) != SQL_OK) {
			r = -EIO;
		} else {
			int rc = sql_step(st);
			if (rc == SQL_ROW)
				r = read_sbx(st, out);
			else
				r = rc == SQL_DONE ? -ENOENT : -EIO;
		}
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* Runs an UPDATE whose ?1 is the sandbox id and ?2, ?3 are text (or,
 * when text2 is NULL, ?2 is num), and OWNED: 0, -ENOENT if no such
 * sandbox of this node's, -EIO. */
static int sbx_update(struct store *s, const char *sql, const char *id, const char *text2,
		      const char *text3, long long num)
{
	if (!sbx_id_ok(id))
		return -ENOENT;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, sql, &st);
	if (!r) {
		int b = store__bind_text(st, 1, id);
		if (b == SQL_OK)
			b = text2 ? store__bind_text(st, 2, text2) : sql_bind_int64(st, 2, num);
		if (b == SQL_OK && text3)
			b = store__bind_text(st, 3, text3);
		if (b == SQL_OK)
			b = store__bind_owner(s, st);
		if (b != SQL_OK)
			r = -EIO;
		else if (!(r = store__step_done(st)) && sql_changes(s->db) == 0)
			r = -ENOENT;
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	return r == -EEXIST ? -EIO : r;
}

int store_sbx_set_expiry(struct store *s, const char *id, long long expires_at)
{
	if (expires_at < 0)
		return -EINVAL;
	return sbx_update(s, "UPDATE sandboxes SET expires_at = ?2 WHERE id = ?1" OWNED, id, NULL,
			  NULL, expires_at);
}

int store_sbx_set_policy(struct store *s, const char *id, const char *network_json)
{
	if (!network_json)
		return -EINVAL;
	return sbx_update(s, "UPDATE sandboxes SET network = ?2 WHERE id = ?1" OWNED, id,
			  network_json, NULL, 0);
}

int store_sbx_set_transforms(struct store *s, const char *id, const char *transforms_json)
{
	if (!transforms_json)
		return -EINVAL;
	return sbx_update(s, "UPDATE sandboxes SET transforms = ?2 WHERE id = ?1" OWNED, id,
			  transforms_json, NULL, 0);
}

/* The UPDATE of each stored state a move can go to; ?1 is the id, ?2 the
 * state it must be in, and the row this node's (OWNED). */
static const char *move_sql(const char *to)
{
	if (!strcmp(to, "running"))
		return "UPDATE sandboxes SET state = 'running', paused_at = 0, timeout_s = 0, "
		       "expires_at = ?3, qemu_pid = ?4, generation = ?5, net_slot = ?6 "
		       "WHERE id = ?1 AND state = ?2" OWNED;
	if (!strcmp(to, "paused"))
		return "UPDATE sandboxes SET state = 'paused', qemu_pid = 0, net_slot = -1, "
		       "paused_at = ?3, timeout_s = ?4 WHERE id = ?1 AND state = ?2" OWNED;
	if (!strcmp(to, "stopped") || !strcmp(to, "lost"))
		return "UPDATE sandboxes SET state = ?3, end_reason = ?4, qemu_pid = 0, "
		       "net_slot = -1 WHERE id = ?1 AND state = ?2" OWNED;
	return NULL;
}

static int move_bind(struct sql_stmt *st, const struct store_sbx_move *mv)
{
	int b = store__bind_text(st, 1, mv->id);
	if (b == SQL_OK)
		b = store__bind_text(st, 2, mv->from);
	if (b != SQL_OK)
		return b;
	if (!strcmp(mv->to, "running")) {
		if ((b = sql_bind_int64(st, 3, mv->expires_at)) == SQL_OK &&
		    (b = sql_bind_int64(st, 4, mv->qemu_pid)) == SQL_OK &&
		    (b = sql_bind_int64(st, 5, mv->generation)) == SQL_OK)
			b = sql_bind_int64(st, 6, mv->net_slot);
	} else if (!strcmp(mv->to, "paused")) {
		if ((b = sql_bind_int64(st, 3, mv->paused_at)) == SQL_OK)
			b = sql_bind_int64(st, 4, mv->timeout_left_s);
	} else {
		if ((b = store__bind_text(st, 3, mv->to)) == SQL_OK)
			b = store__bind_text(st, 4, mv->end_reason ? mv->end_reason : "");
	}
	return b;
}

int store_sbx_move(struct store *s, const struct store_sbx_move *mv)
{
	const char *sql = mv && state_ok(mv->from) && state_ok(mv->to) ? move_sql(mv->to) : NULL;
	if (!sql || !sbx_id_ok(mv->id) || mv->expires_at < 0 || mv->qemu_pid < 0 ||
	    mv->paused_at < 0 || mv->timeout_left_s < 0 || mv->net_slot < -1 ||
	    !store__text_ok(mv->end_reason ? mv->end_reason : "",
			    sizeof(((struct store_sbx *)0)->end_reason), 0, 0) ||
	    (mv->usage && !store__usage_ok(mv->usage)))
		return -EINVAL;
	struct sql_stmt *st = NULL;
	pthread_mutex_lock(&s->lock);
	int r = store__begin(s);
	if (!r)
		r = store__prep(s, sql, &st);
	if (!r) {
		if (move_bind(st, mv) != SQL_OK || store__bind_owner(s, st) != SQL_OK)
			r = -EIO;
		else if (!(r = store__step_done(st)) && sql_changes(s->db) == 0)
			r = -ESTALE; /* told apart below from no such sandbox */
	}
	sql_finalize(st);
	if (r == -ESTALE) {
		st = NULL;
		if (store__prep(s, "SELECT 1 FROM sandboxes WHERE id = ?1", &st) == 0 &&
		    store__bind_text(st, 1, mv->id) == SQL_OK && sql_step(st) != SQL_ROW)
			r = -ENOENT;
		sql_finalize(st);
	}
	if (!r && mv->usage)
		r = store__usage_insert(s, mv->usage);
	if (!r)
		r = store__commit(s);
	if (r)
		store__rollback(s);
	pthread_mutex_unlock(&s->lock);
	return r == -EEXIST ? -EIO : r;
}

/* Cursor text: lowercase hex of "<created_at>.<id>", created_at in
 * canonical decimal. Anything else is -EINVAL. */
static int cursor_decode(const char *c, long long *created_at, char *id, size_t idlen)
{
	size_t len = strnlen(c, 2 * CURSOR_RAW_MAX + 1);
	if (len == 0 || len % 2 || len > 2 * CURSOR_RAW_MAX)
		return -EINVAL;
	char raw[CURSOR_RAW_MAX + 1];
	size_t n = len / 2;
	for (size_t i = 0; i < n; i++) {
		int v = 0;
		for (int j = 0; j < 2; j++) {
			char h = c[2 * i + (size_t)j];
			int d;
			if (h >= '0' && h <= '9')
				d = h - '0';
			else if (h >= 'a' && h <= 'f')
				d = h - 'a' + 10;
			else
				return -EINVAL;
			v = v * 16 + d;
		}
		raw[i] = (char)v;
	}
	raw[n] = '\0';
	char *dot = memchr(raw, '.', n);
	if (!dot || strlen(raw) != n)
		return -EINVAL;
	size_t digits = (size_t)(dot - raw);
	if (digits == 0 || digits > 19 || (raw[0] == '0' && digits > 1))
		return -EINVAL;
	long long t = 0;
	for (size_t i = 0; i < digits; i++) {
		if (raw[i] < '0' || raw[i] > '9')
			return -EINVAL;
		int d = raw[i] - '0';
		if (t > (LLONG_MAX - d) / 10)
			return -EINVAL;
		t = t * 10 + d;
	}
	if (!sbx_id_ok(dot + 1) || strlen(dot + 1) >= idlen)
		return -EINVAL;
	*created_at = t;
	strcpy(id, dot + 1);
	return 0;
}

static int cursor_encode(long long created_at, const char *id, char *out, size_t outlen)
{
	char raw[CURSOR_RAW_MAX + 16];
	int n = snprintf(raw, sizeof(raw), "%lld.%s", created_at, id);
	if (n < 0 || (size_t)n >= sizeof(raw))
		return -EIO;
	if (outlen < 2 * (size_t)n + 1)
		return -ERANGE;
	store__hex(out, (const unsigned char *)raw, (size_t)n);
	return 0;
}

/* Appends a constant SQL fragment (never a user value). */
static void sql_add(char *sql, size_t size, size_t *len, const char *frag)
{
	size_t f = strlen(frag);
	if (*len + f < size) {
		memcpy(sql + *len, frag, f + 1);
		*len += f;
	} else {
		*len = size; /* marks overflow */
	}
}

int store_sbx_list(struct store *s, const char *account, const char *state,
		   const struct store_kv *meta, size_t nmeta, size_t limit, const char *cursor,
		   struct store_sbx **out, size_t *n, char *next_cursor, size_t cursorlen)
{
	*out = NULL;
	*n = 0;
	if (!next_cursor || !cursorlen)
		return -EINVAL;
	int bad = limit < 1 || limit > MAX_LIST_LIMIT || nmeta > MAX_META_FILTER ||
		  (nmeta && !meta) || (account && !store__name_ok(account)) ||
		  (state && !state_ok(state));
	for (size_t i = 0; !bad && i < nmeta; i++)
		bad = !meta[i].key || !meta[i].value;
	long long after_t = 0;
	char after_id[sizeof(((struct store_sbx *)0)->id)];
	if (!bad && cursor)
		bad = cursor_decode(cursor, &after_t, after_id, sizeof(after_id)) != 0;
	/* only now: cursor and next_cursor may be one buffer */
	next_cursor[0] = '\0';
	if (bad)
		return -EINVAL;

	/* the shape of the query depends only on which filters are present;
	 * every value is bound, in the order its "?" appears */
	static const char meta_frag[] = " AND EXISTS (SELECT 1 FROM sandbox_meta m WHERE "
					"m.sbx_id = s.id AND m.key = ? AND m.value = ?)";
	char sql[512 + MAX_META_FILTER * sizeof(meta_frag)];
	size_t len = 0;
	sql_add(sql, sizeof(sql), &len, "SELECT " SBX_COLS " FROM sandboxes s WHERE true");
	if (account)
		sql_add(sql, sizeof(sql), &len, " AND s.account = ?");
	if (state)
		sql_add(sql, sizeof(sql), &len, " AND s.state = ?");
	if (cursor)
		sql_add(sql, sizeof(sql), &len, " AND (s.created_at, s.id) < (?, ?)");
	for (size_t i = 0; i < nmeta; i++)
		sql_add(sql, sizeof(sql), &len, meta_frag);
	sql_add(sql, sizeof(sql), &len, " ORDER BY s.created_at DESC, s.id DESC LIMIT ?");
	if (len >= sizeof(sql))
		return -EIO; /* cannot happen: sized for MAX_META_FILTER */

	struct store_sbx *xs = NULL;
	size_t got = 0;
	int more = 0;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, sql, &st);
	if (!r) {
		int i = 1, b = SQL_OK;
		if (account)
			b = store__bind_text(st, i++, account);
		if (state && b == SQL_OK)
			b = store__bind_text(st, i++, state);
		if (cursor && b == SQL_OK)
			b = sql_bind_int64(st, i++, after_t);
		if (cursor && b == SQL_OK)
			b = store__bind_text(st, i++, after_id);
		for (size_t j = 0; j < nmeta && b == SQL_OK; j++) {
			b = store__bind_text(st, i++, meta[j].key);
			if (b == SQL_OK)
				b = store__bind_text(st, i++, meta[j].value);
		}
		if (b == SQL_OK) /* one row more tells whether a next page exists */
			b = sql_bind_int64(st, i, (long long)limit + 1);
		r = b == SQL_OK ? collect(st, limit, &xs, &got, &more) : -EIO;
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	if (!r && more)
		r = cursor_encode(xs[got - 1].created_at, xs[got - 1].id, next_cursor, cursorlen);
	if (r) {
		store_sbx_free_list(xs, got);
		next_cursor[0] = '\0';
		return r;
	}
	*out = xs;
	*n = got;
	return 0;
}

int store_sbx_sum_running(struct store *s, const char *account, struct store_sbx_sum *out)
{
	if (account && !store__name_ok(account))
		return -EINVAL;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s,
			    "SELECT count(*), coalesce(sum(vcpus), 0), coalesce(sum(memory_mb), 0) "
			    "FROM sandboxes WHERE state = 'running' "
			    "AND (?1 IS NULL OR account = ?1) AND (?1 IS NOT NULL OR node = ?2)",
			    &st);
	if (!r) {
		if ((account ? store__bind_text(st, 1, account) : sql_bind_null(st, 1)) !=
			    SQL_OK ||
		    store__bind_text(st, 2, s->node) != SQL_OK || sql_step(st) != SQL_ROW) {
			r = -EIO;
		} else {
			long long c = sql_col_int64(st, 0), v = sql_col_int64(st, 1),
				      m = sql_col_int64(st, 2);
			if (c < 0 || c > INT_MAX || v < 0 || m < 0) {
				r = -EIO;
			} else {
				out->n = (unsigned)c;
				out->vcpus = (unsigned long long)v;
				out->memory_mb = (unsigned long long)m;
			}
		}
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

int store_sbx_count_running(struct store *s, const char *account)
{
	if (!account)
		return -EINVAL;
	struct store_sbx_sum sum;
	int r = store_sbx_sum_running(s, account, &sum);
	return r < 0 ? r : (int)sum.n;
}

static int by_state(struct store *s, const char *sql, struct store_sbx **out, size_t *n);
static int by_state_at(struct store *s, const char *sql, long long n2, struct store_sbx **out,
		       size_t *n);

int store_sbx_running(struct store *s, struct store_sbx **out, size_t *n)
{
	return by_state(s, "SELECT " SBX_COLS " FROM sandboxes WHERE state = 'running' "
			   "AND node = ?1 ORDER BY created_at, id", out, n);
}

int store_sbx_paused(struct store *s, struct store_sbx **out, size_t *n)
{
	return by_state(s, "SELECT " SBX_COLS " FROM sandboxes WHERE state = 'paused' "
			   "AND node = ?1 ORDER BY paused_at, id", out, n);
}

int store_sbx_orphans(struct store *s, long long paused_before, struct store_sbx **out,
		      size_t *n)
{
	return by_state_at(s, "SELECT " SBX_COLS " FROM sandboxes WHERE state = 'paused' AND "
			      "stored != '' AND paused_at <= ?2 AND node != ?1 AND (node = '' OR "
			      "node IN (SELECT name FROM nodes WHERE state = 'down')) "
			      "ORDER BY paused_at, id LIMIT 100",
			   paused_before, out, n);
}

int store_sbx_stored_ended(struct store *s, struct store_sbx **out, size_t *n)
{
	return by_state(s, "SELECT " SBX_COLS " FROM sandboxes WHERE state IN ('stopped', 'lost') "
			   "AND stored != '' AND node = ?1 ORDER BY created_at, id", out, n);
}

int store_sbx_set_stored(struct store *s, const char *id, unsigned generation, const char *stored)
{
	if (!sbx_id_ok(id))
		return -ENOENT;
	if (!stored || !store__text_ok(stored, sizeof(((struct store_sbx *)0)->stored), 1, 1))
		return -EINVAL;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s,
			    "UPDATE sandboxes SET stored = ?2 WHERE id = ?1 AND state = 'paused' "
			    "AND generation = ?3" OWNED,
			    &st);
	if (!r) {
		if (store__bind_text(st, 1, id) != SQL_OK ||
		    store__bind_text(st, 2, stored) != SQL_OK ||
		    sql_bind_int64(st, 3, generation) != SQL_OK ||
		    store__bind_owner(s, st) != SQL_OK)
			r = -EIO;
		else if (!(r = store__step_done(st)) && sql_changes(s->db) == 0)
			r = -ESTALE;
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	return r == -EEXIST ? -EIO : r;
}

int store_stored_split(const char *stored, unsigned *generation, char sha[65], char compat[24])
{
	char *end;
	unsigned long g = strtoul(stored, &end, 10);
	if (end == stored || *end != ' ' || g > 0xffffffffUL || strspn(end + 1, HEX) != 64)
		return -EINVAL;
	const char *c = end + 65;
	size_t cn = *c == ' ' ? strlen(c + 1) : 0;
	if ((*c && *c != ' ') || (*c == ' ' && (cn == 0 || cn > 23 || strspn(c + 1, HEX) != cn)))
		return -EINVAL;
	*generation = (unsigned)g;
	memcpy(sha, end + 1, 64);
	sha[64] = '\0';
	memcpy(compat, *c ? c + 1 : c, cn + 1);
	return 0;
}

int store_sbx_clear_stored(struct store *s, const char *id, const char *was)
{
	if (!sbx_id_ok(id))
		return -ENOENT;
	if (!was)
		return -EINVAL;
	const char *texts[] = { id, was };
	int r = store__change(s, "UPDATE sandboxes SET stored = '' WHERE id = ?1 AND stored = ?2",
			      2, texts);
	return r == -ENOENT ? -ESTALE : r == -EEXIST ? -EIO : r;
}

static int by_state(struct store *s, const char *sql, struct store_sbx **out, size_t *n)
{
	return by_state_at(s, sql, 0, out, n);
}

/* The rows sql selects, ?1 this store's node and ?2 (if it has one) n2. */
static int by_state_at(struct store *s, const char *sql, long long n2, struct store_sbx **out,
		       size_t *n)
{
	*out = NULL;
	*n = 0;
	struct store_sbx *xs = NULL;
	size_t got = 0;
	int more;
	struct sql_stmt *st;
	pthread_mutex_lock(&s->lock);
	int r = store__prep(s, sql, &st);
	if (!r) {
		r = store__bind_text(st, 1, s->node) == SQL_OK &&
				    (sql_param_count(st) < 2 || sql_bind_int64(st, 2, n2) == SQL_OK)
			    ? collect(st, 0, &xs, &got, &more)
			    : -EIO;
		sql_finalize(st);
	}
	pthread_mutex_unlock(&s->lock);
	if (r) {
		store_sbx_free_list(xs, got);
		return r;
	}
	*out = xs;
	*n = got;
	return 0;
}
