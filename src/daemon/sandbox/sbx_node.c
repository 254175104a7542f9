/*
 * sbx_node: the sandbox layer's side of nodes that share one database
 * (store_node.c): whose a sandbox is; a paused one of a node declared down,
 * or one its node let go of, taken over here, to resume from its stored
 * pause; and one of this node's let go of (moved), its pause stored first.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/errbuf.h"
#include "common/log.h"
#include "runner/snap.h"
#include "runner/vm.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MOVE_SETTLE_MS 60000 /* for another transition to end */

/* Whether this node restores the stored pause of row: its record names
 * no compat (made before records did) or this node's. */
static int restores_here(struct sbx_mgr *m, const struct store_sbx *row)
{
	unsigned g;
	char sha[65], theirs[24], mine[24];
	if (store_stored_split(row->stored, &g, sha, theirs) < 0)
		return 0;
	sbx__compat(m, mine, sizeof(mine));
	return !theirs[0] || !mine[0] || !strcmp(theirs, mine);
}

/* A paused sandbox of a node declared down, its pause in the object
 * store: made this node's and loaded paused. 0, or -ESTALE when it cannot
 * be (its node lives, nothing is stored), -EXDEV when this node could not
 * restore its pause (another kernel, CPU model, accelerator or egress CA),
 * -errno. One at a time: a second request for it finds it here. */
static int take_over(struct sbx_mgr *m, const struct store_sbx *row)
{
	if (!m->cfg.blob || strcmp(row->state, "paused") || !sbx_pause_stored(row))
		return -ESTALE;
	if (!restores_here(m, row))
		return -EXDEV;
	/* Not by a node being drained. */
	struct store_node me;
	if (store_node_get(m->store, store_node_name(m->store), &me) < 0 || me.drained)
		return -ESTALE;
	pthread_mutex_lock(&m->take_mu);
	struct sbx *s = sbx__get(m, row->id);
	int r = 0;
	if (s) {
		sbx_put(s);
		goto out;
	}
	char run[sizeof(row->run_dir)];
	snprintf(run, sizeof(run), "%s/vms/%s", m->cfg.state_dir, row->id);
	struct store_sbx now;
	if ((r = store_sbx_take(m->store, row->id, row->stored, run)) < 0 ||
	    (r = store_sbx_get(m->store, row->id, &now)) < 0)
		goto out;
	/* What this node kept of it before another took it is older than the
	 * stored pause: the resume fetches that one. */
	vm_remove_files(run);
	r = sbx__load_paused(m, &now);
	if (r == 0)
		log_info("sandbox %s taken over from %s%s: its pause comes from the object store",
			 row->id, row->node[0] ? "node " : "the node that let go of it",
			 row->node[0] ? row->node : "");
	store_sbx_release(&now);
out:
	pthread_mutex_unlock(&m->take_mu);
	return r;
}

int sbx_elsewhere(struct sbx_mgr *m, const struct store_sbx *row, char *err, size_t errlen)
{
	const char *me = store_node_name(m->store);
	if (!me[0] || !strcmp(row->node, me) ||
	    (strcmp(row->state, "running") && strcmp(row->state, "paused")))
		return 0;
	int t = take_over(m, row);
	if (t == 0)
		return 0;
	if (t == -EXDEV)
		return errbuf_set(err, errlen, -EREMOTE,
				  "sandbox '%s' was paused on a node whose snapshots this one cannot "
				  "restore (another kernel, CPU model, accelerator or egress CA): a "
				  "node like that one resumes it",
				  row->id);
	if (!row->node[0]) /* let go of by its node, and not taken here: drained */
		return errbuf_set(err, errlen, -EBUSY,
				  "sandbox '%s' is moving to another node; try again", row->id);
	struct store_node owner;
	if (!strcmp(row->state, "paused") && !sbx_pause_stored(row) &&
	    store_node_get(m->store, row->node, &owner) == 0 && !strcmp(owner.state, "down"))
		return errbuf_set(err, errlen, -EBUSY,
				  "sandbox '%s' was paused on node '%s', which is down, before its "
				  "pause was in the object store: it resumes once that node is back",
				  row->id, row->node);
	snprintf(err, errlen, "sandbox '%s' is on node '%s', not this one", row->id, row->node);
	return -EREMOTE;
}

void sbx__adopt_orphans(struct sbx_mgr *m)
{
	struct store_sbx *rows;
	size_t n;
	long long before = (long long)time(NULL) - m->cfg.paused_retention_s;
	if (!store_node_name(m->store)[0] || store_sbx_orphans(m->store, before, &rows, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++)
		if (take_over(m, &rows[i]) == 0)
			log_info("sandbox %s was paused past the retention with no node of its own: "
				 "this node deletes it",
				 rows[i].id);
	store_sbx_free_list(rows, n);
}

int sbx_take(struct sbx_mgr *m, const char *id, char *err, size_t errlen)
{
	struct sbx *s = sbx__get(m, id);
	if (s) { /* this node's already */
		sbx_put(s);
		return 0;
	}
	struct store_sbx row;
	if (store_sbx_get(m->store, id, &row) < 0)
		return errbuf_set(err, errlen, -ENOENT, "no sandbox '%s'", id);
	int r = take_over(m, &row);
	if (r == -EXDEV)
		errbuf_set(err, errlen, r,
			   "sandbox '%s' cannot be taken here: this node cannot restore its pause "
			   "(another kernel, CPU model, accelerator or egress CA)",
			   id);
	else if (r < 0)
		errbuf_set(err, errlen, r,
			   "sandbox '%s' cannot be taken here: it is %s on node '%s'%s", id,
			   row.state, row.node[0] ? row.node : "(none)",
			   sbx_pause_stored(&row) ? "" : ", its pause not in the object store");
	store_sbx_release(&row);
	return r;
}

int sbx__let_go(struct sbx_mgr *m, struct sbx *s, char *err, size_t errlen)
{
	enum sbx_state now;
	int r = sbx__begin(s, SBX_EV_MOVE, MOVE_SETTLE_MS, &now);
	if (r < 0)
		return errbuf_set(err, errlen, -EBUSY, "sandbox '%s' is %s: it stays here", s->id,
				  r == -EBUSY ? "busy" : sbx_state_name(now));
	struct store_sbx row;
	char e2[256];
	memset(&row, 0, sizeof(row));
	r = store_sbx_get(m->store, s->id, &row);
	if (r < 0)
		errbuf_set(err, errlen, r, "sandbox '%s' cannot be read: %s", s->id, strerror(-r));
	else if (!sbx_pause_stored(&row))
		r = errbuf_set(err, errlen, -EAGAIN,
			       "sandbox '%s' has no stored pause (paused again meanwhile?): it "
			       "stays here",
			       s->id);
	else if ((r = store_sbx_let_go(m->store, s->id, row.stored)) < 0)
		errbuf_set(err, errlen, r, "sandbox '%s' cannot be let go of: %s", s->id,
			   r == -ESTALE ? "its row changed" : strerror(-r));
	if (r < 0) {
		sbx__fire(s, SBX_EV_FAILED, NULL, 0, e2, sizeof(e2));
	} else {
		/* Whoever takes it fetches the stored pause. */
		vm_remove_files(row.run_dir);
		sbx__fire(s, SBX_EV_MOVED, NULL, 0, e2, sizeof(e2));
		log_info("sandbox %s let go of: its pause is in the object store for another node",
			 s->id);
	}
	if (row.id[0])
		store_sbx_release(&row);
	return r;
}

int sbx_move(struct sbx_mgr *m, const char *id, int *was_running, char *err, size_t errlen)
{
	*was_running = 0;
	if (!m->cfg.blob || !store_node_name(m->store)[0])
		return errbuf_set(err, errlen, -ENOTSUP,
				  "only a node with an object store moves sandboxes");
	struct sbx *s = sbx__get(m, id);
	if (!s)
		return errbuf_set(err, errlen, -ENOENT, "sandbox '%s' is not on this node", id);
	int r = 0;
	if (sbx__state(s) != SBX_PAUSED) {
		*was_running = 1;
		r = sbx_pause(m, id, err, errlen);
	}
	/* Stored now, whatever the uploader was doing; then let go of while
	 * nobody else can move it. */
	if (r == 0)
		r = sbx__blob_store(m, id, err, errlen);
	if (r == 0)
		r = sbx__let_go(m, s, err, errlen);
	sbx_put(s);
	return r;
}

void sbx__compat(struct sbx_mgr *m, char *compat, size_t cn)
{
	char kernel[512], initrd[512], image[512], err[256];
	struct snap_env e = { 0 };
	snprintf(e.accel, sizeof(e.accel), "%s", m->cfg.accel == QEMU_ACCEL_KVM ? "kvm" : "tcg");
	sbx__guest_paths(m, "base", kernel, initrd, image, sizeof(image));
	compat[0] = '\0';
	if (snap_env_files(&e, kernel, initrd, image, err, sizeof(err)) == 0) {
		uint64_t h = 1469598103934665603ull; /* FNV-1a: equal or not, no secret */
		const char *parts[] = { e.accel, e.cpu, e.kernel_sha, e.initrd_sha,
					m->cfg.net ? net_ca_id(m->cfg.net) : "" };
		for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
			for (const char *p = parts[i]; *p; p++)
				h = (h ^ (uint8_t)*p) * 1099511628211ull;
			h = (h ^ 0xff) * 1099511628211ull; /* a field's end */
		}
		snprintf(compat, cn, "%016llx", (unsigned long long)h);
	}
}

void sbx_offers(struct sbx_mgr *m, char *compat, size_t cn, char *warm, size_t wn, char *held,
		size_t hn)
{
	sbx__compat(m, compat, cn);
	sbx__pool_offers(m, warm, wn, held, hn);
}
