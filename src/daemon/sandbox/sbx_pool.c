/*
 * sbx_pool: template snapshots and warm pools. A template is booted once
 * per machine size, warmed (python's default code context imports numpy,
 * pandas and matplotlib, so a new sandbox's kernel has them) and snapshotted, sealed,
 * under the cache directory; creates of that size restore it. A pool keeps
 * VMs already restored from it, so a create of the default size only
 * claims one. One worker thread builds and fills, never past the pools'
 * memory budget or what the host has free. Nodes of a cluster share
 * template snapshots through the object store (sbx_blob.c): one is fetched
 * before it would be built, and one made here is stored once ready.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/fs.h"
#include "common/log.h"
#include "priv/priv.h"
#include "runner/agentc.h"
#include "runner/qemu_build.h"
#include "runner/snap.h"
#include "runner/vm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_SNAPS 32
#define MAX_POOLED 64
#define RETRY_S 600 /* a failed build is tried again after this */
/* The one size pools hold: the create defaults. */
#define POOL_VCPUS 1
#define POOL_MEMORY_MB SBX_POOL_MEMORY_MB
#define POOL_DISK_MB 2048

enum { SNAP_NONE, SNAP_WANTED, SNAP_BUILDING, SNAP_READY, SNAP_FAILED };

struct tsnap {
	char template[64];
	unsigned vcpus, memory_mb, disk_mb;
	char dir[512];
	int state;
	long long failed_at;
	/* in the object store for other nodes (sbx__blob_tsnap_share): done,
	 * or the next try */
	int shared;
	long long share_at;
};

struct pooled {
	struct vm *vm;
	int net_slot; /* under the default policy until taken */
	char id[32], run_dir[256], template[64];
};

struct sbx_pools {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct tsnap snaps[MAX_SNAPS];
	int nsnaps;
	struct pooled pool[MAX_POOLED];
	int npool;
	pthread_t worker;
	int quit, started;
	int cancel; /* stops a transfer to or from the object store: the daemon stops */
};

static const char *warm_command(const char *template)
{
	if (!strcmp(template, "node"))
		return "node -e 0";
	return "true";
}

/* The exec path run once (warm_command). A template imported from an
 * image may have no shell, where `true` exits 127: its exec path ran all
 * the same, and that is what warming is for. */
static int warm_exec(struct vm *vm, const char *template, int timeout_ms)
{
	int r = sbx__run(vm, warm_command(template), "user", NULL, timeout_ms);
	if (r == -EIO && strcmp(template, "base") && strcmp(template, "python") &&
	    strcmp(template, "node"))
		r = 0;
	return r;
}

/* What the python template's snapshot holds: its default code context (api_code.c) with the
 * imports a data analysis starts with already done, so a new sandbox's first call pays none. */
#define WARM_CODE "import numpy, pandas, matplotlib, matplotlib.pyplot"
/* What a warm VM of it runs once restored: a cell's path, its value's display included. */
#define WARM_CLAIM_CODE "1"

struct code_wait {
	int done, failed;
	char tail[256]; /* the last event bytes: an error's, if it failed */
};

static void code_cb(void *arg, const struct proto_frame *f)
{
	struct code_wait *w = arg;
	if (f->type == P_EVENT) {
		size_t n = f->len < sizeof(w->tail) - 1 ? f->len : sizeof(w->tail) - 1;
		memcpy(w->tail, f->payload + f->len - n, n);
		w->tail[n] = '\0';
		w->failed |= strstr(w->tail, "\"type\": \"error\"") != NULL;
	}
	if (f->type == P_OK || f->type == P_ERROR || f->type == P_EXIT) {
		w->done = 1;
		w->failed |= f->type != P_OK;
	}
}

/* Runs code in the default context of vm as the default user, as no cell of the sandbox's
 * (A_UNCOUNTED: its first cell is still number 1): 0 or -errno (-EIO when the code failed, its
 * last words in err). */
static int warm_code(struct vm *vm, const char *code, int timeout_ms, char *err, size_t errlen)
{
	struct code_wait w = { 0 };
	uint32_t id;
	struct pbuf *b = agentc_begin(vm_agent(vm), P_CODE, code_cb, &w, &id);
	if (!b)
		return -ENOTCONN;
	if (proto_put_str(b, A_CONTEXT, "default") < 0 || proto_put_str(b, A_LANGUAGE, "python") < 0 ||
	    proto_put(b, A_CODE, code, strlen(code)) < 0 || proto_put_str(b, A_USER, "user") < 0 ||
	    proto_put_u32(b, A_UNCOUNTED, 1) < 0) {
		agentc_abort(vm_agent(vm));
		return -ENOMEM;
	}
	int r = agentc_end(vm_agent(vm));
	if (r == 0)
		r = vm_run(vm, &w.done, timeout_ms);
	if (!w.done)
		agentc_forget(vm_agent(vm), id); /* w is this frame's */
	if (r == 0 && w.failed) {
		snprintf(err, errlen, "warming the python kernel failed: %s", w.tail);
		r = -EIO;
	} else if (r < 0) {
		snprintf(err, errlen, "warming the python kernel failed (%s)", strerror(-r));
	}
	return r;
}

/* An account's own templates get a snapshot, not warm VMs: there may be
 * many, each of them used by one account. */
static unsigned pool_size(const struct sbx_mgr *m, const char *template)
{
	if (!strncmp(template, SBX_TPL_PREFIX, strlen(SBX_TPL_PREFIX)))
		return 0;
	return !strcmp(template, "python") ? m->cfg.pool_python : m->cfg.pool_other;
}

/* The snapshot directory's name says what it was made from: a rebuilt
 * kernel, agent or image gives another name, and the old one is unused. */
static int snap_dir(struct sbx_mgr *m, const struct tsnap *t, char *out, size_t n)
{
	char kernel[512], initrd[512], image[512], err[256];
	sbx__guest_paths(m, t->template, kernel, initrd, image, sizeof(image));
	struct snap_env e = { 0 };
	if (snap_env_files(&e, kernel, initrd, image, err, sizeof(err)) < 0)
		return -ENOENT;
	uint64_t h = 1469598103934665603ull; /* FNV-1a: a cache key, not a checksum */
	/* A guest trusts the egress CA it was booted with (sbx_net.c). A
	 * template snapshot is made again for another QEMU build, though
	 * the old build, kept, would restore it: sandboxes start on the
	 * QEMU installed, pauses of theirs stay on theirs. */
	const char *parts[] = { e.kernel_sha, e.initrd_sha, e.template,
				m->cfg.net ? net_ca_id(m->cfg.net) : "",
				m->cfg.qemu_build ? m->cfg.qemu_build->id : "" };
	for (size_t i = 0; i < 5; i++)
		for (const char *p = parts[i]; *p; p++)
			h = (h ^ (uint8_t)*p) * 1099511628211ull;
	/* A VM with a NIC restores only where there is one (snap.h). */
	snprintf(out, n, "%s/snapshots/%s-%uc-%um-%ud%s-%016llx", m->cfg.cache_dir, t->template,
		 t->vcpus, t->memory_mb, t->disk_mb, m->cfg.net ? "-net" : "",
		 (unsigned long long)h);
	return 0;
}

struct exec_wait {
	int done, exit_code;
};

static void exec_cb(void *arg, const struct proto_frame *f)
{
	struct exec_wait *w = arg;
	uint32_t v;
	if (f->type != P_EXIT && f->type != P_ERROR)
		return;
	w->done = 1;
	if (f->type == P_EXIT && proto_check_attrs(f) == 0 && proto_get_u32(f, A_EXIT_CODE, &v) == 0)
		w->exit_code = (int)v;
}

int sbx__run(struct vm *vm, const char *shell, const char *user, const char *env, int timeout_ms)
{
	struct exec_wait w = { .exit_code = -1 };
	uint32_t id;
	struct pbuf *b = agentc_begin(vm_agent(vm), P_EXEC, exec_cb, &w, &id);
	if (!b)
		return -ENOTCONN;
	if (proto_put_str(b, A_SHELL, shell) < 0 || proto_put_str(b, A_USER, user) < 0 ||
	    (env && proto_put_str(b, A_ENV, env) < 0)) {
		agentc_abort(vm_agent(vm));
		return -ENOMEM;
	}
	int r = agentc_end(vm_agent(vm));
	if (r == 0)
		r = vm_run(vm, &w.done, timeout_ms);
	if (!w.done) /* timed out: w is this frame's, no later answer may reach it */
		agentc_forget(vm_agent(vm), id);
	return r < 0 ? r : w.exit_code == 0 ? 0 : -EIO;
}

/* Template snapshot t made: 0 built here, 1 fetched from the object store,
 * or -errno with a reason. */
static int build(struct sbx_mgr *m, const struct tsnap *t, char *err, size_t errlen)
{
	const struct sbx_config *c = &m->cfg;
	char kernel[512], initrd[512], image[512], run[512], tmp[600], tag[32];
	sbx__guest_paths(m, t->template, kernel, initrd, image, sizeof(image));
	sbx__random_id(tag, sizeof(tag), "");
	snprintf(run, sizeof(run), "%s/snapshots/build-%s", c->cache_dir, tag);
	snprintf(tmp, sizeof(tmp), "%s.tmp-%s", t->dir, tag);
	/* another node's, of the same making, if the object store has it */
	int f = sbx__blob_tsnap_fetch(m, t->dir, &m->pools->cancel, err, errlen);
	if (f == 0)
		return 1;
	if (f != -ENOENT)
		log_warn("template %s snapshot not fetched, built here instead: %s", t->template, err);
	fs_mkdir_p(run, 0700, (uid_t)-1, (gid_t)-1);
	log_info("building the %s template snapshot (%u vCPU, %u MB): boot, warm, save; "
		 "creates boot until it is ready", t->template, t->vcpus, t->memory_mb);
	struct vm_config vc = {
		.qemu = c->qemu, .qemu_build = c->qemu_build, .accel = c->accel,
		.vcpus = t->vcpus, .memory_mb = t->memory_mb,
		.disk_mb = t->disk_mb, .kernel = kernel, .initrd = initrd, .template = image,
		.run_dir = run, .cache_dir = c->cache_dir, .hostname = "cpuos",
	};
	struct vm *vm;
	int slot;
	int r = sbx__start(m, &vc, NET_DENY_ALL_TEXT, &slot, &vm, err, errlen);
	if (r < 0)
		return r;
	double t0 = clock_ms_f();
	/* As the default user, so matplotlib's font cache lands in its home
	 * (on the snapshot's disk) as well as the imports in memory. An
	 * imported image's server first, so the snapshot has it running. */
	r = sbx__template_start(m, t->template, vm, err, errlen);
	if (r == 0 && !strcmp(t->template, "python"))
		r = warm_code(vm, WARM_CODE, 600000, err, errlen);
	else if (r == 0 && (r = warm_exec(vm, t->template, 600000)) < 0)
		snprintf(err, errlen, "warming '%s' failed (%s)", warm_command(t->template), strerror(-r));
	if (r == 0 && (r = vm_snapshot(vm, tmp, 1, err, errlen)) == 0 && rename(tmp, t->dir) < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot rename '%.300s': %s", tmp, strerror(errno));
		snap_remove(tmp);
	}
	log_info("template %s snapshot (%u vCPU, %u MB): warmed and saved in %.0f ms%s", t->template,
		 t->vcpus, t->memory_mb, clock_ms_f() - t0, r < 0 ? " (failed)" : "");
	vm_free(vm, 0);
	sbx__net_down(m, slot);
	return r;
}

static struct tsnap *find_snap(struct sbx_pools *p, const char *template, unsigned vcpus,
			       unsigned memory_mb, unsigned disk_mb)
{
	for (int i = 0; i < p->nsnaps; i++) {
		struct tsnap *t = &p->snaps[i];
		if (!strcmp(t->template, template) && t->vcpus == vcpus && t->memory_mb == memory_mb &&
		    t->disk_mb == disk_mb)
			return t;
	}
	return NULL;
}

/* Finds or adds the record of a template snapshot (pools locked). A
 * complete snapshot already on disk is taken after a full check. */
static struct tsnap *want_snap(struct sbx_mgr *m, const char *template, unsigned vcpus,
			       unsigned memory_mb, unsigned disk_mb)
{
	struct sbx_pools *p = m->pools;
	struct tsnap *t = find_snap(p, template, vcpus, memory_mb, disk_mb);
	if (t)
		return t;
	/* A place a deleted template's record left (sbx__pool_forget), or a new one. */
	for (int i = 0; i < p->nsnaps && !t; i++)
		if (!p->snaps[i].template[0] && p->snaps[i].state == SNAP_NONE)
			t = &p->snaps[i];
	if (!t && p->nsnaps == MAX_SNAPS)
		return NULL;
	int added = !t;
	if (!t)
		t = &p->snaps[p->nsnaps];
	*t = (struct tsnap){ .vcpus = vcpus, .memory_mb = memory_mb, .disk_mb = disk_mb };
	snprintf(t->template, sizeof(t->template), "%s", template);
	char dir[sizeof(t->dir)];
	if (snap_dir(m, t, dir, sizeof(dir)) < 0) {
		t->template[0] = '\0';
		return NULL;
	}
	memcpy(t->dir, dir, sizeof(dir));
	p->nsnaps += added;
	t->state = SNAP_WANTED;
	struct snap_manifest sm;
	char err[256];
	if (snap_load(t->dir, &sm, 1, err, sizeof(err)) == 0)
		t->state = SNAP_READY;
	else if (access(t->dir, F_OK) == 0)
		snap_remove(t->dir); /* damaged: built again */
	pthread_cond_broadcast(&p->cv);
	return t;
}

int sbx__template_snapshot(struct sbx_mgr *m, const struct store_sbx *row, char *dir, size_t n)
{
	struct sbx_pools *p = m->pools;
	if (!p)
		return -ENOENT;
	pthread_mutex_lock(&p->mu);
	struct tsnap *t = want_snap(m, row->template, row->vcpus, row->memory_mb, row->disk_mb);
	int r = t && t->state == SNAP_READY ? 0 : -ENOENT;
	if (r == 0)
		snprintf(dir, n, "%s", t->dir);
	pthread_mutex_unlock(&p->mu);
	return r;
}

void sbx__template_bad(struct sbx_mgr *m, const char *dir)
{
	struct sbx_pools *p = m->pools;
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->nsnaps; i++) {
		if (!strcmp(p->snaps[i].dir, dir) && p->snaps[i].state == SNAP_READY) {
			snap_remove(dir);
			p->snaps[i].state = SNAP_WANTED;
		}
	}
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

void sbx__pool_forget(struct sbx_mgr *m, const char *template)
{
	struct sbx_pools *p = m->pools;
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->nsnaps; i++) {
		struct tsnap *t = &p->snaps[i];
		/* One being built is the worker's till it ends: it stays, and
		 * its snapshot with it, of no use. */
		if (strcmp(t->template, template) || t->state == SNAP_BUILDING)
			continue;
		if (t->state == SNAP_READY)
			snap_remove(t->dir);
		t->template[0] = '\0';
		t->state = SNAP_NONE;
	}
	pthread_mutex_unlock(&p->mu);
}

int sbx__pool_take(struct sbx_mgr *m, struct store_sbx *row, struct vm **vm)
{
	struct sbx_pools *p = m->pools;
	if (!p || row->vcpus != POOL_VCPUS || row->memory_mb != POOL_MEMORY_MB ||
	    row->disk_mb != POOL_DISK_MB)
		return -ENOENT;
	pthread_mutex_lock(&p->mu);
	int r = -ENOENT;
	for (int i = 0; i < p->npool; i++) {
		struct pooled *e = &p->pool[i];
		if (strcmp(e->template, row->template))
			continue;
		*vm = e->vm;
		row->net_slot = e->net_slot;
		snprintf(row->id, sizeof(row->id), "%s", e->id);
		snprintf(row->run_dir, sizeof(row->run_dir), "%s", e->run_dir);
		p->pool[i] = p->pool[--p->npool];
		r = 0;
		break;
	}
	pthread_cond_broadcast(&p->cv); /* refill */
	pthread_mutex_unlock(&p->mu);
	/* Nobody pumped it while it waited: it may have died. It waited
	 * under the default policy; the sandbox may want another. */
	char err[256];
	if (r == 0 && (vm_wait(*vm, 0) || !vm_agent(*vm) ||
		       (row->network_json && row->network_json[0] &&
			sbx__net_set(m, row->net_slot, row->network_json, err, sizeof(err)) < 0))) {
		vm_free(*vm, 0);
		sbx__net_down(m, row->net_slot);
		row->net_slot = NET_NO_SLOT;
		return -ENOENT;
	}
	return r;
}

void sbx__pool_offers(struct sbx_mgr *m, char *warm, size_t wn, char *held, size_t hn)
{
	struct sbx_pools *p = m->pools;
	size_t w = 0, h = 0;
	warm[0] = held[0] = '\0';
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->nsnaps; i++) {
		const struct tsnap *t = &p->snaps[i];
		if (t->vcpus != POOL_VCPUS || t->memory_mb != POOL_MEMORY_MB ||
		    t->disk_mb != POOL_DISK_MB || t->state != SNAP_READY)
			continue;
		unsigned free_vms = 0;
		for (int k = 0; k < p->npool; k++)
			free_vms += !strcmp(p->pool[k].template, t->template);
		/* whole entries only: one cut short would name another template */
		int n = snprintf(held + h, hn - h, "%s%s", h ? "," : "", t->template);
		if (n > 0 && (size_t)n < hn - h)
			h += (size_t)n;
		else
			held[h] = '\0';
		if (!free_vms)
			continue;
		n = snprintf(warm + w, wn - w, "%s%s:%u", w ? "," : "", t->template, free_vms);
		if (n > 0 && (size_t)n < wn - w)
			w += (size_t)n;
		else
			warm[w] = '\0';
	}
	pthread_mutex_unlock(&p->mu);
}

unsigned sbx__pool_depth(struct sbx_mgr *m)
{
	struct sbx_pools *p = m->pools;
	if (!p)
		return 0;
	pthread_mutex_lock(&p->mu);
	unsigned n = (unsigned)p->npool;
	pthread_mutex_unlock(&p->mu);
	return n;
}

/* One warm VM for template t, if the budget allows: 1 made, 0 not. */
static int fill_one(struct sbx_mgr *m, const struct tsnap *t)
{
	const struct sbx_config *c = &m->cfg;
	struct pooled e = { 0 };
	snprintf(e.template, sizeof(e.template), "%s", t->template);
	sbx__random_id(e.id, sizeof(e.id), "sbx_");
	snprintf(e.run_dir, sizeof(e.run_dir), "%s/vms/%s", c->state_dir, e.id);
	char kernel[512], initrd[512], image[512], err[512];
	sbx__guest_paths(m, t->template, kernel, initrd, image, sizeof(image));
	struct vm_config vc = {
		.qemu = c->qemu, .qemu_build = c->qemu_build, .accel = c->accel,
		.vcpus = t->vcpus, .memory_mb = t->memory_mb,
		.disk_mb = t->disk_mb, .kernel = kernel, .initrd = initrd, .template = image,
		.run_dir = e.run_dir, .cache_dir = c->cache_dir, .hostname = e.id + 4,
		.restore = t->dir, .new_identity = 1,
	};
	if (sbx__start(m, &vc, NULL, &e.net_slot, &e.vm, err, sizeof(err)) < 0) {
		log_warn("warm pool of %s: %s", t->template, err);
		return 0;
	}
	/* A restored VM starts with nothing translated (TCG) and its pages
	 * not yet faulted in: the exec path is run once now, and python's
	 * code path (a call of its default context that is no cell), so the
	 * first exec and run_code of the sandbox that claims it do not pay
	 * for that. */
	int r = warm_exec(e.vm, t->template, 60000);
	if (r == 0 && !strcmp(t->template, "python"))
		r = warm_code(e.vm, WARM_CLAIM_CODE, 60000, err, sizeof(err));
	else if (r < 0)
		snprintf(err, sizeof(err), "%s", strerror(-r));
	if (r < 0) {
		log_warn("warm pool of %s: a warm VM's first call failed (%s)", t->template, err);
		vm_free(e.vm, 0);
		sbx__net_down(m, e.net_slot);
		return 0;
	}
	pthread_mutex_lock(&m->pools->mu);
	if (m->pools->npool < MAX_POOLED && !m->pools->quit) {
		m->pools->pool[m->pools->npool++] = e;
		e.vm = NULL;
	}
	pthread_mutex_unlock(&m->pools->mu);
	if (e.vm) {
		vm_free(e.vm, 0);
		sbx__net_down(m, e.net_slot);
		return 0;
	}
	return 1;
}

/* What the worker should do next (pools locked): a snapshot to build
 * (*fill 0), a template whose pool is short (1), or a ready snapshot to
 * store for the other nodes (2); NULL when nothing. */
static struct tsnap *next_job(struct sbx_mgr *m, int *fill)
{
	struct sbx_pools *p = m->pools;
	long long now = (long long)time(NULL);
	for (int i = 0; i < p->nsnaps; i++) {
		struct tsnap *t = &p->snaps[i];
		if (t->state == SNAP_FAILED && now - t->failed_at >= RETRY_S)
			t->state = SNAP_WANTED;
		if (t->state == SNAP_WANTED) {
			*fill = 0;
			return t;
		}
	}
	unsigned long long held = 0;
	for (int i = 0; i < p->npool; i++)
		held += POOL_MEMORY_MB;
	for (int i = 0; i < p->nsnaps; i++) {
		struct tsnap *t = &p->snaps[i];
		if (t->state != SNAP_READY || t->vcpus != POOL_VCPUS || t->memory_mb != POOL_MEMORY_MB ||
		    t->disk_mb != POOL_DISK_MB)
			continue;
		unsigned have = 0;
		for (int j = 0; j < p->npool; j++)
			have += !strcmp(p->pool[j].template, t->template);
		/* Never more than the budget, nor what would leave the host
		 * short: a pool is a convenience, not a reservation. */
		if (have < pool_size(m, t->template) && held + POOL_MEMORY_MB <= m->cfg.pool_max_mb &&
		    sbx__meminfo_mb("MemAvailable") >= 2ull * POOL_MEMORY_MB + 1024 &&
		    sbx__host_fits(m, held, POOL_MEMORY_MB)) {
			*fill = 1;
			return t;
		}
	}
	/* last, ready ones not yet offered to the other nodes */
	for (int i = 0; i < p->nsnaps; i++) {
		struct tsnap *t = &p->snaps[i];
		if (t->state == SNAP_READY && !t->shared && now >= t->share_at) {
			*fill = 2;
			return t;
		}
	}
	return NULL;
}

static void *worker_main(void *arg)
{
	struct sbx_mgr *m = arg;
	struct sbx_pools *p = m->pools;
	log_set_tag("pool");
	pthread_mutex_lock(&p->mu);
	while (!p->quit) {
		int fill = 0;
		struct tsnap *t = next_job(m, &fill);
		if (!t) {
			struct timespec until;
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += 5;
			pthread_cond_timedwait(&p->cv, &p->mu, &until);
			continue;
		}
		struct tsnap copy = *t;
		if (!fill)
			t->state = SNAP_BUILDING;
		pthread_mutex_unlock(&p->mu);
		char err[512] = "";
		int r = fill == 2   ? sbx__blob_tsnap_share(m, copy.dir, &p->cancel, err, sizeof(err))
			: fill == 1 ? (fill_one(m, &copy) ? 0 : -EAGAIN)
				    : build(m, &copy, err, sizeof(err));
		pthread_mutex_lock(&p->mu);
		if (fill == 2) {
			t->shared = r == 0;
			t->share_at = (long long)time(NULL) + RETRY_S;
			if (r < 0)
				log_warn("template %s snapshot not stored in the object store (tried "
					 "again later): %s", copy.template, err);
		} else if (!fill) {
			t->shared = r == 1; /* fetched: stored already */
			r = r > 0 ? 0 : r;
			t->state = r == 0 ? SNAP_READY : SNAP_FAILED;
			t->failed_at = (long long)time(NULL);
			if (r < 0)
				log_error("template %s snapshot not built: %s", copy.template, err);
		} else if (r < 0) {
			/* Could not restore: wait before the next try. */
			struct timespec until;
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += 10;
			pthread_cond_timedwait(&p->cv, &p->mu, &until);
		}
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* QEMUs a killed daemon left behind, running from vms/<id>: a warm VM (no
 * row for <id>) is killed; one whose resume was cut short (its row says
 * paused) is paused again, as it is now, so the pause stays whole. */
static void pause_again(struct sbx_mgr *m, const char *id, int pid)
{
	char run[600], err[256];
	snprintf(run, sizeof(run), "%s/vms/%s", m->cfg.state_dir, id);
	struct vm *vm;
	int r = vm_attach(run, pid, priv_launch_ops(m->cfg.priv), &vm, err, sizeof(err));
	if (r == 0) {
		r = vm_pause(vm, err, sizeof(err));
		vm_free(vm, 1);
	} else {
		sbx__kill_qemu(m, pid, run);
	}
	log_warn("paused sandbox %s had a QEMU running (a cut-short resume): %s%s", id,
		 r == 0 ? "paused again" : "killed: ", r == 0 ? "" : err);
}

static void orphan(void *arg, int pid, const char *id)
{
	struct sbx_mgr *m = arg;
	if (strncmp(id, "sbx_", 4))
		return;
	struct store_sbx row;
	const char *why = "a warm VM";
	int r = store_sbx_get(m->store, id, &row);
	if (r == 0) {
		int paused = !strcmp(row.state, "paused"), running = !strcmp(row.state, "running");
		int mine = !strcmp(row.node, store_node_name(m->store));
		store_sbx_release(&row);
		if (paused && mine)
			pause_again(m, id, pid);
		if ((paused || running) && mine)
			return;
		why = mine ? "its sandbox ended while it ran (its node was declared down)"
			   : "its sandbox is another node's now";
	} else if (r != -ENOENT) {
		return; /* the store cannot say now: left for the next start */
	}
	char run[600];
	log_info("killing QEMU %d of %s, left by an earlier daemon: %s", pid, id, why);
	snprintf(run, sizeof(run), "%s/vms/%s", m->cfg.state_dir, id);
	sbx__kill_qemu(m, pid, run);
	vm_remove_files(run);
}

static void sweep_orphans(struct sbx_mgr *m)
{
	char prefix[600];
	snprintf(prefix, sizeof(prefix), "%s/vms/", m->cfg.state_dir);
	sbx__each_qemu(prefix, orphan, m);
}

int sbx__pools_start(struct sbx_mgr *m)
{
	sweep_orphans(m);
	if (!m->cfg.template_snapshots)
		return 0;
	struct sbx_pools *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	m->pools = p;
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/snapshots", m->cfg.cache_dir);
	fs_mkdir_p(dir, 0700, (uid_t)-1, (gid_t)-1);
	/* Every template of the default size, python first: it is the one
	 * whose imports take seconds. */
	pthread_mutex_lock(&p->mu);
	want_snap(m, "python", POOL_VCPUS, POOL_MEMORY_MB, POOL_DISK_MB);
	snprintf(dir, sizeof(dir), "%s/templates", m->cfg.guest_dir);
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char name[64];
		size_t len = strlen(e->d_name);
		if (len < 7 || len - 6 >= sizeof(name) || strcmp(e->d_name + len - 6, ".erofs"))
			continue;
		snprintf(name, sizeof(name), "%.*s", (int)(len - 6), e->d_name);
		want_snap(m, name, POOL_VCPUS, POOL_MEMORY_MB, POOL_DISK_MB);
	}
	if (d)
		closedir(d);
	pthread_mutex_unlock(&p->mu);
	if (pthread_create(&p->worker, NULL, worker_main, m) != 0)
		return -EAGAIN;
	p->started = 1;
	return 0;
}

void sbx__pools_stop(struct sbx_mgr *m)
{
	struct sbx_pools *p = m->pools;
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->quit = 1;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	__atomic_store_n(&p->cancel, 1, __ATOMIC_RELAXED);
	if (p->started)
		pthread_join(p->worker, NULL);
	/* Warm VMs belong to no sandbox: they go with the daemon. The
	 * struct stays until sbx__pools_free: HTTP threads may still ask. */
	pthread_mutex_lock(&p->mu);
	int n = p->npool;
	p->npool = 0;
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < n; i++) {
		vm_free(p->pool[i].vm, 0);
		sbx__net_down(m, p->pool[i].net_slot);
	}
}

void sbx__pools_free(struct sbx_mgr *m)
{
	struct sbx_pools *p = m->pools;
	if (!p)
		return;
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
	m->pools = NULL;
}
