/*
 * sbx_limits: what a start may take. Every start (a create, a resume, a
 * fork's child) first reserves its vCPUs and memory against its account's
 * totals and against the host's memory times the overcommit ratio, so that
 * parallel starts cannot overshoot either; once it runs, the store counts
 * it. A host that would be overcommitted refuses the start rather than
 * leaving the OOM killer to choose a victim later.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "daemon/store/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned long long sbx__meminfo_mb(const char *field)
{
	FILE *f = fopen("/proc/meminfo", "re");
	char line[128];
	size_t n = strlen(field);
	unsigned long long kb = 0;
	while (f && fgets(line, sizeof(line), f)) {
		if (!strncmp(line, field, n) && line[n] == ':') {
			kb = strtoull(line + n + 1, NULL, 10);
			break;
		}
	}
	if (f)
		fclose(f);
	return kb / 1024;
}

/* The guest memory every sandbox and warm VM may hold: the ratio times the
 * host's RAM; 0 when there is no limit. */
static unsigned long long allowed_mb(const struct sbx_config *c)
{
	return c->overcommit > 0 ? (unsigned long long)(c->overcommit * (double)sbx__meminfo_mb("MemTotal"))
				 : 0;
}

int sbx__reserve(struct sbx_mgr *m, const char *account, unsigned vcpus, unsigned memory_mb,
		 char *err, size_t errlen)
{
	const struct sbx_config *c = &m->cfg;
	/* Asked before the lock: the pools take their own. A create that
	 * the pool will serve is counted beside the warm VM it takes, so
	 * near the limit it may be refused one VM early: the safe side. */
	unsigned long long pools = (unsigned long long)sbx__pool_depth(m) * SBX_POOL_MEMORY_MB;
	unsigned long long allowed = allowed_mb(c);
	struct store_sbx_sum mine, all;
	pthread_mutex_lock(&m->mu);
	int r = store_sbx_sum_running(m->store, account, &mine);
	if (r == 0)
		r = store_sbx_sum_running(m->store, NULL, &all);
	if (r < 0) {
		snprintf(err, errlen, "cannot count the running sandboxes: %s", strerror(-r));
		r = -EIO;
		goto out;
	}
	int slot = -1;
	for (int i = 0; i < MAX_STARTING; i++) {
		const struct sbx_start *s = &m->starting[i];
		if (!s->account[0]) {
			slot = slot < 0 ? i : slot;
			continue;
		}
		all.n++;
		all.vcpus += s->vcpus;
		all.memory_mb += s->memory_mb;
		if (!strcmp(s->account, account)) {
			mine.n++;
			mine.vcpus += s->vcpus;
			mine.memory_mb += s->memory_mb;
		}
	}
	r = -EDQUOT;
	if (slot < 0 || mine.n >= (unsigned)c->max_sandboxes) {
		snprintf(err, errlen, "account '%s' already runs or starts %d sandboxes (or %d start at once)",
			 account, c->max_sandboxes, MAX_STARTING);
	} else if (c->account_vcpus && mine.vcpus + vcpus > c->account_vcpus) {
		snprintf(err, errlen, "account '%s' would run %llu vCPUs, over its %u", account,
			 mine.vcpus + vcpus, c->account_vcpus);
	} else if (c->account_memory_mb && mine.memory_mb + memory_mb > c->account_memory_mb) {
		snprintf(err, errlen, "account '%s' would hold %llu MB of guest memory, over its %llu MB",
			 account, mine.memory_mb + memory_mb, c->account_memory_mb);
	} else if (allowed && all.memory_mb + pools + memory_mb > allowed) {
		snprintf(err, errlen,
			 "the host has no memory for %u MB more: sandboxes hold %llu MB and warm pools "
			 "%llu MB of the %llu MB allowed (%.2f x its RAM)",
			 memory_mb, all.memory_mb, pools, allowed, c->overcommit);
		r = -EAGAIN;
	} else {
		struct sbx_start *s = &m->starting[slot];
		snprintf(s->account, sizeof(s->account), "%s", account);
		s->vcpus = vcpus;
		s->memory_mb = memory_mb;
		r = slot;
	}
out:
	pthread_mutex_unlock(&m->mu);
	return r;
}

int sbx__host_fits(struct sbx_mgr *m, unsigned long long pools_mb, unsigned long long more_mb)
{
	unsigned long long allowed = allowed_mb(&m->cfg);
	struct store_sbx_sum all;
	if (!allowed)
		return 1;
	if (store_sbx_sum_running(m->store, NULL, &all) < 0)
		return 0;
	return all.memory_mb + pools_mb + more_mb <= allowed;
}

void sbx__unreserve(struct sbx_mgr *m, int slot)
{
	if (slot < 0 || slot >= MAX_STARTING)
		return;
	pthread_mutex_lock(&m->mu);
	memset(&m->starting[slot], 0, sizeof(m->starting[slot]));
	pthread_mutex_unlock(&m->mu);
}
