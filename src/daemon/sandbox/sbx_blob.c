/*
 * sbx_blob: every pause also kept in an object store (sbx_config.blob), so
 * a paused sandbox outlives the disk it was paused on. A pause stays
 * local and as fast as before; one worker thread then uploads it
 * (blob/snapblob.c: files, then the manifest) under a hold on the
 * sandbox, and records it in the store's row (stored: "<generation>
 * <manifest SHA-256>") only while the row is still paused at that
 * generation. Anyone who needs the sandbox meanwhile (a resume, a kill,
 * a command that resumes it) cancels the upload by waiting for the hold
 * (sbx_state.c), and the next pass uploads it again. The worker passes
 * over every paused sandbox after each pause and every BLOB_PASS_S, so a
 * failed upload (the store away) is retried, also after a restart; it
 * deletes what ended sandboxes left in the store.
 *
 * A resume that finds no whole pause in the run directory fetches the
 * stored one (checked byte for byte against the manifest the row names)
 * and resumes from it.
 *
 * Checkpoints go up the same way, under a key of their content (the
 * SHA-256 of their sealed manifest): they never change, so no hold is
 * needed, and a create from one this host does not hold whole fetches it.
 * A stored checkpoint deleted is in the store's trash until its objects
 * are gone.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/fs.h"
#include "common/log.h"
#include "daemon/blob/snapblob.h"
#include "lib/s3.h"
#include "runner/snap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOB_PASS_S   30
#define STORE_WAIT_MS (10 * 60 * 1000) /* for the worker's upload of the same pause */

struct sbx_blob {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int kicked, quit;
	int cancel; /* stops a checkpoint's upload: the daemon stops */
	pthread_t thread;
	struct s3 *s3; /* the worker's own connection */
};

/* The objects of a sandbox's pause at a generation. */
static void prefix_of(char *out, size_t n, const char *id, unsigned generation)
{
	snprintf(out, n, "pauses/%s/%u", id, generation);
}

/* Splits a stored record (store_stored_split): 0 or -EINVAL. */
static int parse_stored(const char *stored, unsigned *generation, char sha[65])
{
	char compat[24];
	return store_stored_split(stored, generation, sha, compat);
}

int sbx_pause_stored(const struct store_sbx *row)
{
	unsigned g;
	char sha[65];
	return row->stored[0] && parse_stored(row->stored, &g, sha) == 0 && g == row->generation;
}

/* Uploads the pause of sandbox id, if it is still paused and not stored,
 * over s3: under a hold (waited for up to hold_ms, an upload under way
 * waited out), so nothing moves it meanwhile but a waiter's cancel. 0 when
 * it is stored now (or was), -EAGAIN when there was nothing to upload
 * (gone, running, busy), or -errno with a reason. */
static int push_pause(struct sbx_mgr *m, struct s3 *s3, const char *id, int hold_ms, char *err,
		      size_t errlen)
{
	struct sbx *s = sbx__get(m, id);
	if (!s)
		return errbuf_set(err, errlen, -EAGAIN, "sandbox '%s' is not on this node", id);
	enum sbx_state now;
	if (sbx__hold_as(s, hold_ms, 0, &now) < 0) { /* busy: the next pass */
		sbx_put(s);
		return errbuf_set(err, errlen, -EAGAIN, "sandbox '%s' is busy or not paused", id);
	}
	struct store_sbx row;
	if (now != SBX_PAUSED || store_sbx_get(m->store, id, &row) < 0) {
		sbx__unhold(s);
		sbx_put(s);
		return errbuf_set(err, errlen, -EAGAIN, "sandbox '%s' is not paused", id);
	}
	if (sbx_pause_stored(&row) || strcmp(row.state, "paused")) {
		int r = sbx_pause_stored(&row) ? 0 : -EAGAIN;
		store_sbx_release(&row);
		sbx__unhold(s);
		sbx_put(s);
		return r < 0 ? errbuf_set(err, errlen, r, "sandbox '%s' is not paused", id) : 0;
	}
	/* Waiters for the hold wake to see it is an upload, and cancel it. */
	pthread_mutex_lock(&m->mu);
	s->storing = 1;
	/* A daemon stopping meanwhile found nothing to cancel yet. */
	__atomic_store_n(&s->store_cancel, m->quit, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&m->state_cv);
	pthread_mutex_unlock(&m->mu);
	s3_set_cancel(s3, &s->store_cancel);
	char prefix[128], sha[65], rec[sizeof(row.stored)];
	prefix_of(prefix, sizeof(prefix), id, row.generation);
	double t0 = clock_ms_f();
	int r = snapblob_push(s3, row.run_dir, prefix, sha, err, errlen);
	s3_set_cancel(s3, NULL);
	if (r == 0) {
		/* with what restores it: a node that cannot never takes it */
		char compat[24];
		sbx__compat(m, compat, sizeof(compat));
		snprintf(rec, sizeof(rec), "%u %s%s%s", row.generation, sha, compat[0] ? " " : "",
			 compat);
		r = store_sbx_set_stored(m->store, id, row.generation, rec);
		if (r < 0)
			snprintf(err, errlen, "cannot record it: %s", strerror(-r));
	}
	pthread_mutex_lock(&m->mu);
	s->storing = 0;
	pthread_mutex_unlock(&m->mu);
	sbx__unhold(s);
	sbx_put(s);
	if (r == 0) {
		log_info("sandbox %s: pause stored in the object store in %.0f ms", id,
			 clock_ms_f() - t0);
		/* The pause stored before this one is of no use now. */
		unsigned g;
		char old[65], e2[256];
		if (row.stored[0] && parse_stored(row.stored, &g, old) == 0 && g != row.generation) {
			prefix_of(prefix, sizeof(prefix), id, g);
			if (snapblob_delete(s3, prefix, e2, sizeof(e2)) < 0)
				log_warn("sandbox %s: an older pause stays in the object store: %s", id, e2);
		}
	} else {
		if (r == -ECANCELED) { /* said before the clean-up, which may wait on the store */
			snprintf(err, errlen, "the upload of its pause stopped: the sandbox is needed");
			log_info("sandbox %s: upload of its pause stopped: the sandbox is needed", id);
		}
		/* What went up of it is no use without its manifest. */
		char e2[256];
		snapblob_delete(s3, prefix, e2, sizeof(e2));
	}
	store_sbx_release(&row);
	return r;
}

/* The worker's upload of id's pause: logged, tried again on a later pass. */
static void upload(struct sbx_mgr *m, struct sbx_blob *b, const char *id)
{
	char err[512];
	int r = push_pause(m, b->s3, id, 0, err, sizeof(err));
	if (r < 0 && r != -EAGAIN && r != -ECANCELED) /* that one is said already */
		log_warn("sandbox %s: pause not stored in the object store (tried again later): %s",
			 id, err);
}

int sbx__blob_store(struct sbx_mgr *m, const char *id, char *err, size_t errlen)
{
	if (!m->cfg.blob)
		return errbuf_set(err, errlen, -ENOTSUP, "this node has no object store");
	struct s3 *s3;
	int r = s3_open(&s3, m->cfg.blob, err, errlen);
	if (r < 0)
		return r;
	r = push_pause(m, s3, id, STORE_WAIT_MS, err, errlen);
	s3_close(s3);
	return r;
}

/* The objects of a checkpoint, by its content key. */
static void ckpt_prefix_of(char *out, size_t n, const char *key)
{
	snprintf(out, n, "checkpoints/%s", key);
}

static int is_sha(const char *s)
{
	return strspn(s, "0123456789abcdef") == 64;
}

/* Splits a checkpoint's stored record "<key> <sha>": 0 or -EINVAL. */
static int parse_ckpt_stored(const char *stored, char key[65], char sha[65])
{
	if (strlen(stored) != 129 || stored[64] != ' ' || !is_sha(stored) || !is_sha(stored + 65))
		return -EINVAL;
	memcpy(key, stored, 64);
	key[64] = '\0';
	memcpy(sha, stored + 65, 65);
	return 0;
}

/* Uploads checkpoint c, which never changes, and records it. */
static void upload_ckpt(struct sbx_mgr *m, struct sbx_blob *b, const struct store_ckpt *c)
{
	char key[65], prefix[128], sha[65], rec[sizeof(c->stored)], err[512];
	int r = snapblob_content_key(c->dir, key, err, sizeof(err));
	if (r < 0) {
		log_warn("checkpoint %s not stored in the object store (tried again later): %s",
			 c->id, err);
		return;
	}
	ckpt_prefix_of(prefix, sizeof(prefix), key);
	double t0 = clock_ms_f();
	s3_set_cancel(b->s3, &b->cancel);
	r = snapblob_push(b->s3, c->dir, prefix, sha, err, sizeof(err));
	s3_set_cancel(b->s3, NULL);
	int recorded = 0;
	if (r == 0) {
		snprintf(rec, sizeof(rec), "%s %s", key, sha);
		if ((r = store_ckpt_set_stored(m->store, c->id, rec)) < 0)
			snprintf(err, sizeof(err), "cannot record it: %s", strerror(-r));
		recorded = 1;
	}
	if (r == 0) {
		log_info("checkpoint %s stored in the object store in %.0f ms", c->id,
			 clock_ms_f() - t0);
		return;
	}
	if (r != -ECANCELED)
		log_warn("checkpoint %s not stored in the object store (tried again later): %s",
			 c->id, err);
	/* What went up half is of no use; what went up whole is deleted only
	 * once no row can name it: a record whose answer was lost may stand,
	 * and a checkpoint still there goes up again to the same key. */
	int gone = !recorded;
	if (recorded) {
		struct store_ckpt now;
		int g = store_ckpt_get(m->store, NULL, c->id, &now);
		if (g == 0)
			store_ckpt_release(&now);
		gone = g == -ENOENT;
	}
	char e2[256];
	if (gone)
		snapblob_delete(b->s3, prefix, e2, sizeof(e2));
}

/* Deletes the objects of deleted checkpoints, then forgets them. */
static void drain_ckpt_trash(struct sbx_mgr *m, struct sbx_blob *b, char *stored)
{
	char key[65], sha[65], prefix[128], err[256];
	int r = 0;
	if (parse_ckpt_stored(stored, key, sha) == 0) {
		ckpt_prefix_of(prefix, sizeof(prefix), key);
		r = snapblob_delete(b->s3, prefix, err, sizeof(err));
	}
	if (r < 0)
		log_warn("a deleted checkpoint stays in the object store for now: %s", err);
	else
		store_ckpt_trash_done(m->store, stored);
}

/* Deletes the stored pause of an ended sandbox, then forgets it. */
static void drop_ended(struct sbx_mgr *m, struct sbx_blob *b, const struct store_sbx *row)
{
	unsigned g;
	char sha[65], prefix[128], err[256];
	int r = 0;
	if (parse_stored(row->stored, &g, sha) == 0) {
		prefix_of(prefix, sizeof(prefix), row->id, g);
		r = snapblob_delete(b->s3, prefix, err, sizeof(err));
	}
	if (r < 0)
		log_warn("sandbox %s ended; its pause stays in the object store for now: %s",
			 row->id, err);
	else
		store_sbx_clear_stored(m->store, row->id, row->stored);
}

static int quitting(struct sbx_blob *b)
{
	pthread_mutex_lock(&b->mu);
	int q = b->quit;
	pthread_mutex_unlock(&b->mu);
	return q;
}

static void pass(struct sbx_mgr *m, struct sbx_blob *b)
{
	struct store_sbx *rows;
	size_t n;
	sbx__adopt_orphans(m);
	if (store_sbx_paused(m->store, &rows, &n) == 0) {
		for (size_t i = 0; i < n && !quitting(b); i++)
			if (!sbx_pause_stored(&rows[i]))
				upload(m, b, rows[i].id);
		store_sbx_free_list(rows, n);
	}
	if (store_sbx_stored_ended(m->store, &rows, &n) == 0) {
		for (size_t i = 0; i < n && !quitting(b); i++)
			drop_ended(m, b, &rows[i]);
		store_sbx_free_list(rows, n);
	}
	struct store_ckpt *cs;
	if (store_ckpt_unstored(m->store, &cs, &n) == 0) {
		for (size_t i = 0; i < n && !quitting(b); i++)
			upload_ckpt(m, b, &cs[i]);
		store_ckpt_free_list(cs, n);
	}
	char **trash;
	if (store_ckpt_trash(m->store, &trash, &n) == 0) {
		for (size_t i = 0; i < n; i++) {
			if (!quitting(b))
				drain_ckpt_trash(m, b, trash[i]);
			free(trash[i]);
		}
		free(trash);
	}
}

struct worker_arg {
	struct sbx_mgr *m;
	struct sbx_blob *b;
};

static void *worker(void *arg)
{
	struct worker_arg *wa = arg;
	struct sbx_mgr *m = wa->m;
	struct sbx_blob *b = wa->b;
	free(wa);
	pthread_mutex_lock(&b->mu);
	while (!b->quit) {
		b->kicked = 0;
		pthread_mutex_unlock(&b->mu);
		pass(m, b);
		pthread_mutex_lock(&b->mu);
		struct timespec until;
		clock_deadline(&until, BLOB_PASS_S * 1000);
		while (!b->quit && !b->kicked &&
		       pthread_cond_timedwait(&b->cv, &b->mu, &until) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

int sbx__blob_start(struct sbx_mgr *m, char *err, size_t errlen)
{
	if (!m->cfg.blob)
		return 0;
	struct sbx_blob *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	int r = s3_open(&b->s3, m->cfg.blob, err, errlen);
	if (r < 0) {
		free(b);
		return r;
	}
	struct worker_arg *wa = malloc(sizeof(*wa));
	if (!wa) {
		s3_close(b->s3);
		free(b);
		return -ENOMEM;
	}
	*wa = (struct worker_arg){ m, b };
	pthread_mutex_init(&b->mu, NULL);
	pthread_cond_init(&b->cv, NULL);
	if ((r = pthread_create(&b->thread, NULL, worker, wa)) != 0) {
		free(wa);
		pthread_mutex_destroy(&b->mu);
		pthread_cond_destroy(&b->cv);
		s3_close(b->s3);
		free(b);
		snprintf(err, errlen, "cannot start the object store's worker: %s", strerror(r));
		return -r;
	}
	pthread_mutex_lock(&m->mu);
	m->blob = b;
	pthread_mutex_unlock(&m->mu);
	return 0;
}

void sbx__blob_kick(struct sbx_mgr *m)
{
	/* Under m->mu: a kill still running as the daemon stops kicks a
	 * worker that sbx__blob_stop may be taking away. */
	pthread_mutex_lock(&m->mu);
	struct sbx_blob *b = m->blob;
	if (b) {
		pthread_mutex_lock(&b->mu);
		b->kicked = 1;
		pthread_cond_signal(&b->cv);
		pthread_mutex_unlock(&b->mu);
	}
	pthread_mutex_unlock(&m->mu);
}

void sbx__blob_stop(struct sbx_mgr *m)
{
	pthread_mutex_lock(&m->mu);
	struct sbx_blob *b = m->blob;
	pthread_mutex_unlock(&m->mu);
	if (!b)
		return;
	pthread_mutex_lock(&b->mu);
	b->quit = 1;
	pthread_cond_signal(&b->cv);
	pthread_mutex_unlock(&b->mu);
	/* An upload under way stops at once; the next daemon does it again. */
	__atomic_store_n(&b->cancel, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&m->mu);
	for (size_t i = 0; i < SBX_BUCKETS; i++)
		for (struct sbx *s = m->table[i]; s; s = s->next)
			if (s->storing)
				__atomic_store_n(&s->store_cancel, 1, __ATOMIC_RELAXED);
	m->blob = NULL; /* no kick reaches it from here on */
	pthread_mutex_unlock(&m->mu);
	pthread_join(b->thread, NULL);
	s3_close(b->s3);
	pthread_mutex_destroy(&b->mu);
	pthread_cond_destroy(&b->cv);
	free(b);
}

/* Removes dir and the files in it, whatever their names (a fetch cut
 * short leaves the names its manifest gave). */
static void remove_flat(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(dirfd(d), e->d_name, 0);
	if (d)
		closedir(d);
	rmdir(dir);
}

/* Moves the snapshot fetched into from over to dir, its manifest last. */
static int move_in(const char *from, const char *dir, char *err, size_t errlen)
{
	struct snap_manifest sm;
	int r = snap_load(from, &sm, 0, err, errlen);
	char a[600], b[600];
	for (int i = 0; r == 0 && i < SNAP_NFILES; i++) {
		if (!sm.files[i].name[0])
			continue;
		snprintf(a, sizeof(a), "%s/%s", from, sm.files[i].name);
		snprintf(b, sizeof(b), "%s/%s", dir, sm.files[i].name);
		if (rename(a, b) < 0)
			r = errbuf_set(err, errlen, -errno, "cannot move '%s': %s", a, strerror(errno));
	}
	snprintf(a, sizeof(a), "%s/" SNAP_MANIFEST, from);
	snprintf(b, sizeof(b), "%s/" SNAP_MANIFEST, dir);
	if (r == 0 && rename(a, b) < 0)
		r = errbuf_set(err, errlen, -errno, "cannot move '%s': %s", a, strerror(errno));
	if (r == 0) {
		int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			fsync(dfd);
			close(dfd);
		}
	}
	return r;
}

int sbx__blob_fetch(struct sbx_mgr *m, const struct store_sbx *row, char *err, size_t errlen)
{
	struct snap_manifest sm;
	char e2[256];
	if (!m->cfg.blob || snap_load(row->run_dir, &sm, 0, e2, sizeof(e2)) == 0)
		return 0; /* nothing to do: the pause is here, or there is no store */
	unsigned g;
	char sha[65], prefix[128], fetch[300], path[320];
	if (!sbx_pause_stored(row) || parse_stored(row->stored, &g, sha) < 0)
		return errbuf_set(err, errlen, -ENOENT,
				  "sandbox '%s' has no whole pause here (%s) and none in the object store",
				  row->id, e2);
	double t0 = clock_ms_f();
	int r = fs_mkdir_p(row->run_dir, 0700, (uid_t)-1, (gid_t)-1);
	if (r < 0)
		return errbuf_set(err, errlen, r, "cannot make '%s': %s", row->run_dir, strerror(-r));
	snprintf(fetch, sizeof(fetch), "%s/fetch", row->run_dir);
	remove_flat(fetch); /* what an earlier fetch left */
	struct s3 *s3;
	if ((r = s3_open(&s3, m->cfg.blob, err, errlen)) < 0)
		return r;
	prefix_of(prefix, sizeof(prefix), row->id, g);
	r = snapblob_pull(s3, prefix, sha, fetch, err, errlen);
	s3_close(s3);
	if (r == 0) {
		/* A manifest left of a damaged pause must not stand beside
		 * the files that replace it, even for a moment. */
		snprintf(path, sizeof(path), "%s/" SNAP_MANIFEST, row->run_dir);
		unlink(path);
		r = move_in(fetch, row->run_dir, err, errlen);
	}
	remove_flat(fetch);
	if (r == 0)
		log_info("sandbox %s: pause fetched from the object store in %.0f ms", row->id,
			 clock_ms_f() - t0);
	return r;
}

int sbx__blob_ckpt(struct sbx_mgr *m, struct store_ckpt *c, char *err, size_t errlen)
{
	char dir[sizeof(c->dir)], fetch[sizeof(c->dir) + 8], key[65], sha[65], prefix[128], e2[256];
	struct snap_manifest sm;
	/* Where this host keeps it, whichever host made it. */
	snprintf(dir, sizeof(dir), "%s/checkpoints/%s", m->cfg.state_dir, c->id);
	if (!m->cfg.blob || !c->stored[0] || parse_ckpt_stored(c->stored, key, sha) < 0)
		return 0; /* not stored: the restore says what is wrong, if anything */
	/* Here whole, as nearly always: no wait behind another's fetch (a
	 * fetched copy comes in by one rename, whole or not at all). */
	if (snap_load(dir, &sm, 0, e2, sizeof(e2)) == 0) {
		snprintf(c->dir, sizeof(c->dir), "%s", dir);
		return 0;
	}
	/* One fetch of a checkpoint at a time; the creates that waited for
	 * it find it whole. */
	pthread_mutex_lock(&m->ckpt_fetch_mu);
	int r = 0;
	if (snap_load(dir, &sm, 0, e2, sizeof(e2)) == 0)
		goto out; /* here whole */
	double t0 = clock_ms_f();
	snprintf(fetch, sizeof(fetch), "%s.fetch", dir);
	remove_flat(fetch); /* what an earlier fetch left */
	struct s3 *s3;
	if ((r = s3_open(&s3, m->cfg.blob, err, errlen)) < 0)
		goto out;
	ckpt_prefix_of(prefix, sizeof(prefix), key);
	r = snapblob_pull(s3, prefix, sha, fetch, err, errlen);
	s3_close(s3);
	if (r == 0) {
		snap_remove(dir); /* what is left of a damaged one */
		if (rename(fetch, dir) < 0)
			r = errbuf_set(err, errlen, -errno, "cannot move '%s': %s", fetch,
				       strerror(errno));
	}
	remove_flat(fetch);
	if (r == 0)
		log_info("checkpoint %s fetched from the object store in %.0f ms", c->id,
			 clock_ms_f() - t0);
out:
	if (r == 0)
		snprintf(c->dir, sizeof(c->dir), "%s", dir);
	pthread_mutex_unlock(&m->ckpt_fetch_mu);
	return r;
}

/* ---- template snapshots shared by the nodes ---- */

/* The key of template snapshot dir here: "" (-ENOENT) without a cluster. */
static int tsnap_key(struct sbx_mgr *m, const char *dir, char *key, size_t n)
{
	char compat[24];
	const char *base = strrchr(dir, '/');
	if (!m->cfg.blob || !store_node_name(m->store)[0])
		return -ENOENT;
	sbx__compat(m, compat, sizeof(compat));
	if (!compat[0])
		return -ENOENT;
	int w = snprintf(key, n, "%s-%s", base ? base + 1 : dir, compat);
	return w > 0 && (size_t)w < n ? 0 : -ENAMETOOLONG;
}

int sbx__blob_tsnap_fetch(struct sbx_mgr *m, const char *dir, const int *cancel, char *err,
			  size_t errlen)
{
	char key[sizeof(((struct store_tsnap *)0)->key)], fetch[600];
	struct store_tsnap t;
	int r = tsnap_key(m, dir, key, sizeof(key));
	if (r == 0)
		r = store_tsnap_get(m->store, key, &t);
	if (r < 0)
		return r == -ENOENT ? -ENOENT
				    : errbuf_set(err, errlen, r, "cannot look it up: %s", strerror(-r));
	double t0 = clock_ms_f();
	struct s3 *s3;
	if ((r = s3_open(&s3, m->cfg.blob, err, errlen)) < 0)
		return r;
	snprintf(fetch, sizeof(fetch), "%s.fetch", dir);
	snap_remove(fetch); /* what an earlier fetch left */
	s3_set_cancel(s3, cancel);
	r = snapblob_pull(s3, t.prefix, t.stored, fetch, err, errlen);
	s3_close(s3);
	struct snap_manifest sm;
	if (r == 0 && (r = snap_load(fetch, &sm, 1, err, errlen)) == 0 && rename(fetch, dir) < 0)
		r = errbuf_set(err, errlen, -errno, "cannot move '%s': %s", fetch, strerror(errno));
	if (r < 0)
		snap_remove(fetch);
	else
		log_info("template snapshot %s fetched from the object store (stored by node %s) in "
			 "%.0f ms",
			 key, t.node, clock_ms_f() - t0);
	return r;
}

int sbx__blob_tsnap_share(struct sbx_mgr *m, const char *dir, const int *cancel, char *err,
			  size_t errlen)
{
	struct store_tsnap t = { 0 };
	if (tsnap_key(m, dir, t.key, sizeof(t.key)) < 0)
		return 0;
	struct store_tsnap had;
	int r = store_tsnap_get(m->store, t.key, &had);
	if (r != -ENOENT)
		return r < 0 ? errbuf_set(err, errlen, r, "cannot look it up: %s", strerror(-r)) : 0;
	char tag[20];
	sbx__random_id(tag, sizeof(tag), "");
	/* a prefix of this upload's own: two nodes storing the same key at once
	 * do not mix their objects, and the first recorded wins */
	snprintf(t.prefix, sizeof(t.prefix), "templates/%.100s/%s", t.key, tag);
	double t0 = clock_ms_f();
	struct s3 *s3;
	if ((r = s3_open(&s3, m->cfg.blob, err, errlen)) < 0)
		return r;
	s3_set_cancel(s3, cancel); /* the clean-up below too: a daemon stopping leaves it */
	r = snapblob_push(s3, dir, t.prefix, t.stored, err, errlen);
	if (r == 0 && (r = store_tsnap_put(m->store, &t)) < 0 && r != -EEXIST)
		errbuf_set(err, errlen, r, "cannot record it: %s", strerror(-r));
	if (r < 0) { /* half up, not recorded, or another's was first */
		char e2[256];
		snapblob_delete(s3, t.prefix, e2, sizeof(e2));
	} else {
		log_info("template snapshot %s stored in the object store in %.0f ms", t.key,
			 clock_ms_f() - t0);
	}
	s3_close(s3);
	return r == -EEXIST ? 0 : r;
}
