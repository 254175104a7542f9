/* place: see place.h. */
#include "api/place.h"

#include "api/capi.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* The one size warm pools and their template snapshots hold (sbx_pool.c):
 * the create defaults. */
#define POOL_VCPUS     1
#define POOL_MEMORY_MB 512

static unsigned long long rnd(void)
{
	unsigned long long v = 0;
	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (unsigned long long)capi_now_ms() * 0x9e3779b97f4a7c15ull;
	return v;
}

int place_offers(const char *list, const char *template)
{
	size_t n = strlen(template);
	for (const char *p = list; n && *p;) {
		size_t len = strcspn(p, ",");
		if (len >= n && !memcmp(p, template, n) && (len == n || p[n] == ':'))
			return len == n || strtoul(p + n + 1, NULL, 10) > 0;
		p += len + (p[len] == ',');
	}
	return 0;
}

/* Lower is better: the share of its memory it would hold, and half the
 * share of its CPUs its sandboxes have (overcommitted CPUs slow everyone
 * down, but memory is what refuses). A free warm VM of the template (a
 * create there only claims it) counts as two sandboxes fewer on that node,
 * its template snapshot held (a restore there, not a fetch) as half of one,
 * both of the pools' one size: a node with a warm VM wins over one a
 * sandbox less busy without, a held snapshot breaks ties, and neither
 * draws every create of a template to one node (the counts are up to a
 * third of a lease old). */
static double score(const struct store_load *l, const struct want *w)
{
	double m = l->memory_mb ? (double)(l->held_memory_mb + w->memory_mb) / (double)l->memory_mb
				: (double)l->running / 100.0;
	double c = l->vcpus ? (double)(l->held_vcpus + w->vcpus) / (double)l->vcpus : 0;
	double one = (l->memory_mb ? (double)w->memory_mb / (double)l->memory_mb : 0.01) +
		     (l->vcpus ? (double)w->vcpus / (double)l->vcpus / 2 : 0);
	double ready = 0;
	if (w->template[0] && w->vcpus == POOL_VCPUS && w->memory_mb == POOL_MEMORY_MB)
		ready = place_offers(l->warm, w->template)   ? 2
			: place_offers(l->held, w->template) ? 0.5
							     : 0;
	return m + c / 2 - ready * one;
}

enum fit { FITS, NO_ROOM, BUSY };

static enum fit fits(const struct capi *a, const struct store_load *l, const struct want *w)
{
	if (!store_load_room(l, w->memory_mb, w->disk_mb))
		return NO_ROOM;
	return a->max_starting && l->starting >= a->max_starting ? BUSY : FITS;
}

/* One round: the candidates among loads[0..n) (fit, not skipped), the
 * best of K sampled reserved; -ENOSPC when none could be, *busy set when
 * one could have but for the creates under way there. */
static int round_of(struct capi *a, const char *account, const struct want *w,
		    const char (*skip)[64], size_t nskip, const struct store_load *loads, size_t n,
		    long long now, int *busy, struct placed *out, char *err, size_t errlen)
{
	size_t *cand = calloc(n ? n : 1, sizeof(*cand)), nc = 0;
	if (!cand)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int skipped = 0;
		for (size_t k = 0; k < nskip; k++)
			skipped |= !strcmp(skip[k], loads[i].name);
		/* a checkpoint restores only where its node's snapshots do */
		if (w->compat[0] && loads[i].compat[0] && strcmp(w->compat, loads[i].compat))
			skipped = 1;
		enum fit f = skipped ? NO_ROOM : fits(a, &loads[i], w);
		*busy |= f == BUSY;
		if (f == FITS)
			cand[nc++] = i;
	}
	int r = -ENOSPC;
	while (nc > 0) {
		/* K sampled without repeats (the first K of a partial shuffle) */
		size_t k = a->sample < nc ? a->sample : nc, best = 0;
		for (size_t i = 0; i < k; i++) {
			size_t j = i + (size_t)(rnd() % (nc - i)), t = cand[i];
			cand[i] = cand[j];
			cand[j] = t;
			if (score(&loads[cand[i]], w) < score(&loads[cand[best]], w))
				best = i;
		}
		const struct store_load *l = &loads[cand[best]];
		struct store_rsv x = { .vcpus = w->vcpus, .memory_mb = w->memory_mb,
				       .disk_mb = store_disk_need(w->memory_mb, w->disk_mb),
				       .until_ms = now + a->hold_ms,
				       .max_starting = a->max_starting };
		snprintf(x.id, sizeof(x.id), "rsv_%016llx", rnd());
		snprintf(x.account, sizeof(x.account), "%s", account);
		snprintf(x.node, sizeof(x.node), "%s", l->name);
		char why[256];
		int e = store_reserve(capi_db(a), &x, &a->quota, now, why, sizeof(why));
		if (e == 0) {
			snprintf(out->node, sizeof(out->node), "%s", l->name);
			snprintf(out->url, sizeof(out->url), "%s", l->url);
			snprintf(out->rsv, sizeof(out->rsv), "%s", x.id);
			r = 0;
			break;
		}
		if (e != -EAGAIN && e != -ESTALE) {
			snprintf(err, errlen, "%s", why);
			r = e == -EDQUOT ? -EDQUOT : -EIO;
			break;
		}
		/* it filled up, got busy or left meanwhile: others' creates
		 * may end soon */
		*busy |= e == -EAGAIN;
		cand[best] = cand[--nc];
	}
	free(cand);
	return r;
}

int place(struct capi *a, const char *account, const struct want *w, const char (*skip)[64],
	  size_t nskip, struct placed *out, char *err, size_t errlen)
{
	long long until = capi_now_ms() + a->busy_wait_ms;
	int r = -ENOSPC, busy = 0;
	size_t ready = 0;
	for (unsigned pause_ms = 20;; pause_ms = pause_ms < 320 ? pause_ms * 2 : 500) {
		long long now = capi_now_ms();
		busy = 0;
		/* K nodes drawn by the database, their loads alone summed; all
		 * of them only when none of those has room (a cluster nearly
		 * full) */
		for (int all = 0; all < 2 && r == -ENOSPC; all++) {
			struct store_load *loads;
			size_t n;
			int e = store_node_loads(capi_db(a), now,
						 all ? 0 : a->sample + (unsigned)nskip, &loads, &n);
			if (e < 0) {
				snprintf(err, errlen, "cannot read the nodes: %s", strerror(-e));
				return -EIO;
			}
			r = round_of(a, account, w, skip, nskip, loads, n, now, &busy, out, err,
				     errlen);
			ready = n;
			free(loads);
		}
		/* Every node with room is starting its most: one ends soon. */
		if (r != -ENOSPC || !busy || now + pause_ms > until)
			break;
		struct timespec ts = { 0, (long)pause_ms * 1000000 };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	if (r == -ENOSPC && busy)
		snprintf(err, errlen,
			 "every node with room for a sandbox of %u MB is starting its most at once "
			 "(%u); try again",
			 w->memory_mb, a->max_starting);
	else if (r == -ENOSPC)
		snprintf(err, errlen,
			 "no node has room for a sandbox of %u MB of memory and %u MB of disk now "
			 "(%zu ready)",
			 w->memory_mb, w->disk_mb, ready);
	return r;
}
