/*
 * sbx_node: the sandbox layer's side of nodes that share one database
 * (store_node.c): whose a sandbox is, and a paused one of a node declared
 * down taken over here, to resume from its stored pause.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/log.h"
#include "runner/vm.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* A paused sandbox of a node declared down, its pause in the object
 * store: made this node's and loaded paused. 0, or -ESTALE when it cannot
 * be (its node lives, nothing is stored), -errno. One at a time: a second
 * request for it finds it here. */
static int take_over(struct sbx_mgr *m, const struct store_sbx *row)
{
	if (!m->cfg.blob || strcmp(row->state, "paused") || !sbx_pause_stored(row))
		return -ESTALE;
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
		log_info("sandbox %s taken over from node %s, which was declared down: its pause "
			 "comes from the object store",
			 row->id, row->node);
	store_sbx_release(&now);
out:
	pthread_mutex_unlock(&m->take_mu);
	return r;
}

int sbx_elsewhere(struct sbx_mgr *m, const struct store_sbx *row, char *err, size_t errlen)
{
	if (!row->node[0] || !strcmp(row->node, store_node_name(m->store)) ||
	    (strcmp(row->state, "running") && strcmp(row->state, "paused")))
		return 0;
	if (take_over(m, row) == 0)
		return 0;
	snprintf(err, errlen, "sandbox '%s' is on node '%s', not this one", row->id, row->node);
	return -EREMOTE;
}
