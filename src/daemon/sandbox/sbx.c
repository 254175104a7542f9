/*
 * sbx: the sandbox manager's objects and lifecycles (pump, kill, expiry);
 * a create is in sbx_create.c, a daemon's start over what the last one
 * left in sbx_restore.c; pause, resume, fork and checkpoints are in sbx_snap.c,
 * operations in sbx_op.c, the state table in sbx_state.c. Every sandbox not
 * stopped or lost is one object in the manager's table, paused ones too.
 * Locking: the manager's mutex guards the table, every object's state and
 * references; each sandbox's mutex guards its VM, agent connection and
 * every sop bound to it. The pump thread holds the sandbox lock except
 * while it polls, so frame callbacks always run locked. Lock order: a
 * sandbox, then the manager, then the store.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/clock.h"
#include "common/crash.h"
#include "common/log.h"
#include "daemon/net/net.h"
#include "runner/agentc.h"
#include "runner/qemu.h"
#include "runner/vm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SETTLE_MS 60000 /* how long a caller waits for another transition */

static long long now_s(void)
{
	return (long long)time(NULL);
}

static const char *end_reason(enum vm_state st)
{
	switch (st) {
	case VM_STOPPED: return "killed";
	case VM_POWEROFF: return "poweroff";
	case VM_REBOOT: return "poweroff";
	case VM_PANIC: return "panic";
	default: return "crashed";
	}
}

/* ---- the objects ---- */

static void sbx_release(struct sbx *s)
{
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	if (s->wakefd >= 0)
		close(s->wakefd);
	free(s->ctls);
	free(s->samples);
	free(s->env_json);
	free(s->secrets_json);
	free(s->transforms_json);
	free(s);
}

void sbx_put(struct sbx *s)
{
	if (!s)
		return;
	struct sbx_mgr *m = s->mgr;
	pthread_mutex_lock(&m->mu);
	int last = --s->refs == 0;
	pthread_mutex_unlock(&m->mu);
	if (last)
		sbx_release(s);
}

static unsigned bucket(const char *id)
{
	unsigned h = 2166136261u; /* FNV-1a */
	for (; *id; id++)
		h = (h ^ (unsigned char)*id) * 16777619u;
	return h % SBX_BUCKETS;
}

/* With the manager locked: the object of id, or NULL. */
static struct sbx *lookup(struct sbx_mgr *m, const char *id)
{
	struct sbx *s = m->table[bucket(id)];
	while (s && strcmp(s->id, id))
		s = s->next;
	return s;
}

struct sbx *sbx__get(struct sbx_mgr *m, const char *id)
{
	pthread_mutex_lock(&m->mu);
	struct sbx *s = lookup(m, id);
	if (s)
		s->refs++;
	pthread_mutex_unlock(&m->mu);
	return s;
}

struct sbx *sbx_find(struct sbx_mgr *m, const char *id, const char *account)
{
	pthread_mutex_lock(&m->mu);
	struct sbx *s = lookup(m, id);
	if (s && ((account && strcmp(s->account, account)) ||
		  (s->state != SBX_RUNNING && s->state != SBX_SNAPSHOTTING)))
		s = NULL;
	if (s)
		s->refs++;
	pthread_mutex_unlock(&m->mu);
	return s;
}

size_t sbx__each(struct sbx_mgr *m, int (*want)(const struct sbx *s, const void *arg),
		 const void *arg, struct sbx ***out)
{
	pthread_mutex_lock(&m->mu);
	struct sbx **v = malloc((m->nsbx ? m->nsbx : 1) * sizeof(*v));
	size_t n = 0;
	for (unsigned b = 0; v && b < SBX_BUCKETS; b++)
		for (struct sbx *s = m->table[b]; s; s = s->next)
			if (!want || want(s, arg)) {
				s->refs++;
				v[n++] = s;
			}
	pthread_mutex_unlock(&m->mu);
	if (!v)
		log_error("out of memory: a pass over the sandboxes is skipped");
	*out = v;
	return n;
}

void sbx__put_all(struct sbx **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sbx_put(v[i]);
	free(v);
}

int sbx__new(struct sbx_mgr *m, const struct store_sbx *row, enum sbx_state state,
	     struct sbx **out)
{
	struct sbx *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->mgr = m;
	snprintf(s->id, sizeof(s->id), "%s", row->id);
	snprintf(s->account, sizeof(s->account), "%s", row->account);
	snprintf(s->key_id, sizeof(s->key_id), "%s", row->key_id);
	snprintf(s->template, sizeof(s->template), "%s", row->template);
	s->vcpus = row->vcpus;
	s->memory_mb = row->memory_mb;
	s->disk_mb = row->disk_mb;
	s->generation = row->generation;
	s->state = state;
	s->stored = state == SBX_CREATING ? NULL : !strcmp(row->state, "paused") ? "paused" : "running";
	s->pause_on_timeout = strcmp(row->on_timeout, "kill") != 0;
	s->expires_at = row->expires_at;
	s->paused_at = row->paused_at;
	s->idle_timeout_ms = row->idle_timeout_s * 1000;
	atomic_init(&s->active_ms, clock_ms());
	atomic_init(&s->busy, 0);
	atomic_init(&s->port_conns, 0);
	atomic_init(&s->cpu_busy, 0);
	atomic_init(&s->sampled_ms, 0);
	s->net_slot = NET_NO_SLOT;
	s->env_json = strdup(row->env_json ? row->env_json : "{}");
	sbx__template_defaults(m, row->template, s->def_user, sizeof(s->def_user), s->def_cwd,
			       sizeof(s->def_cwd));
	s->secrets_json = strdup(row->secrets_json ? row->secrets_json : "[]");
	s->transforms_json = strdup(row->transforms_json ? row->transforms_json : "[]");
	s->wakefd = -1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (!s->env_json || !s->secrets_json || !s->transforms_json) {
		sbx_release(s);
		return -ENOMEM;
	}
	pthread_mutex_lock(&m->mu);
	if (lookup(m, s->id)) {
		pthread_mutex_unlock(&m->mu);
		sbx_release(s);
		return -EEXIST;
	}
	unsigned b = bucket(s->id);
	s->next = m->table[b];
	m->table[b] = s;
	m->nsbx++;
	s->listed = 1;
	s->refs = 2; /* the table's and the caller's */
	pthread_mutex_unlock(&m->mu);
	*out = s;
	return 0;
}

void sbx__forget(struct sbx *s)
{
	struct sbx_mgr *m = s->mgr;
	pthread_mutex_lock(&m->mu);
	int was = s->listed;
	if (was) {
		for (struct sbx **pp = &m->table[bucket(s->id)]; *pp; pp = &(*pp)->next)
			if (*pp == s) {
				*pp = s->next;
				break;
			}
		s->listed = 0;
		m->nsbx--;
	}
	pthread_mutex_unlock(&m->mu);
	if (was)
		sbx_put(s); /* the table's */
}

/* ---- a running sandbox's VM and pump ---- */

/* With the sandbox locked: takes the VM away from the operations. Pending
 * ones hear ECONNRESET through their callbacks and every waiter wakes. */
static struct vm *take_vm(struct sbx *s)
{
	struct vm *vm = s->vm;
	s->running = 0;
	if (vm)
		vm_drop_agent(vm);
	s->vm = NULL;
	pthread_cond_broadcast(&s->cv);
	return vm;
}

/* The VM ended by itself (s locked, and locked again on return): once no
 * other transition owns the sandbox, it stops; one that pauses or kills it
 * has the VM already and joins us. 1 when the pump ended the sandbox and
 * must drop its reference once it let go of the lock. */
static int pump_ended(struct sbx *s)
{
	struct sbx_mgr *m = s->mgr;
	for (;;) {
		enum sbx_state now;
		if (s->stop)
			return 0; /* an owner is taking the VM */
		int r = sbx__begin(s, SBX_EV_ENDED, 0, &now);
		if (r == 0)
			break;
		if (r == -EPERM || now == SBX_PAUSING || now == SBX_STOPPING)
			return 0;
		/* Created, resumed or snapshotted right now: its owner ends
		 * that first. */
		pthread_mutex_unlock(&s->mu);
		pthread_mutex_lock(&m->mu);
		struct timespec until;
		clock_deadline(&until, 1000);
		if (s->state == now)
			pthread_cond_timedwait(&m->state_cv, &m->mu, &until);
		pthread_mutex_unlock(&m->mu);
		pthread_mutex_lock(&s->mu);
	}
	struct vm *vm = take_vm(s);
	int slot = s->net_slot; /* given up under the lock: sbx_net.c reads it */
	s->net_slot = NET_NO_SLOT;
	s->pumping = 0; /* nobody joins us now */
	pthread_detach(pthread_self());
	pthread_mutex_unlock(&s->mu);
	if (!vm_wait(vm, 3000))
		vm_stop(vm, 0); /* QMP gone but QEMU lingers: end it */
	enum vm_state st = vm_state(vm);
	log_info("vm ended: %s: %s", vm_state_name(st), vm_reason(vm));
	sbx__keep_log(m, s->id, vm_run_dir(vm));
	vm_free(vm, 0);
	sbx__net_down(m, slot);
	struct sbx_facts f = { .end_reason = end_reason(st) };
	char err[256];
	sbx__fire(s, SBX_EV_STOPPED, &f, SBX_FIRE_FORCE, err, sizeof(err));
	pthread_mutex_lock(&s->mu);
	return 1;
}

static void *pump_main(void *arg)
{
	struct sbx *s = arg;
	char tag[48];
	snprintf(tag, sizeof(tag), "sbx/%s", s->id);
	log_set_tag(tag);
	pthread_mutex_lock(&s->mu);
	while (!s->stop) {
		struct pollfd fds[VM_MAX_FDS + 1];
		int n = vm_pollfds(s->vm, fds);
		int t = vm_timeout(s->vm);
		fds[n] = (struct pollfd){ .fd = s->wakefd, .events = POLLIN };
		pthread_mutex_unlock(&s->mu);
		int r = poll(fds, (nfds_t)n + 1, t >= 0 && t < 1000 ? t : 1000);
		pthread_mutex_lock(&s->mu);
		if (r < 0)
			continue;
		if (fds[n].revents) {
			uint64_t v;
			if (read(s->wakefd, &v, sizeof(v)) < 0) {
				/* nothing to drain */
			}
		}
		if (s->stop)
			break;
		r = vm_handle(s->vm, fds, n);
		pthread_cond_broadcast(&s->cv);
		if (r == -ESHUTDOWN && pump_ended(s)) {
			pthread_mutex_unlock(&s->mu);
			sbx_put(s); /* the pump's */
			return NULL;
		}
		if (r == -ESHUTDOWN)
			break;
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int sbx__run_vm(struct sbx *s, struct vm *vm, int net_slot)
{
	struct sbx_mgr *m = s->mgr;
	if (s->wakefd < 0 && (s->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		return -errno;
	pthread_mutex_lock(&s->mu);
	s->vm = vm;
	s->net_slot = net_slot;
	s->running = 1;
	atomic_store(&s->active_ms, clock_ms()); /* a fresh start of its idle time */
	sbx__metrics_baseline(s, (int)vm_pid(vm));
	s->stop = 0;
	pthread_mutex_lock(&m->mu);
	s->refs++; /* the pump's, dropped when it ends the sandbox */
	pthread_mutex_unlock(&m->mu);
	int r = pthread_create(&s->pump, NULL, pump_main, s);
	if (r == 0)
		s->pumping = 1;
	else {
		s->vm = NULL;
		s->running = 0;
		s->net_slot = NET_NO_SLOT;
	}
	pthread_mutex_unlock(&s->mu);
	if (r != 0) {
		log_error("cannot start the pump of %s", s->id);
		sbx_put(s);
		return -EAGAIN;
	}
	/* A secret that changes from now on reaches it (sbx_secrets_changed):
	 * both read the store under its lock. */
	pthread_mutex_lock(&s->mu);
	sbx__net_secrets(m, s->account, s->secrets_json, s->transforms_json, s->net_slot);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

struct vm *sbx__stop_vm(struct sbx *s, int *net_slot)
{
	pthread_mutex_lock(&s->mu);
	s->running = 0;
	s->stop = 1;
	int join = s->pumping;
	s->pumping = 0;
	pthread_mutex_unlock(&s->mu);
	if (join) {
		wake(s);
		pthread_join(s->pump, NULL);
		sbx_put(s); /* the pump's */
	}
	/* The pump is gone: operations end now; whatever the caller does
	 * with the VM runs unlocked. */
	pthread_mutex_lock(&s->mu);
	struct vm *vm = take_vm(s);
	*net_slot = s->net_slot;
	s->net_slot = NET_NO_SLOT;
	pthread_mutex_unlock(&s->mu);
	return vm;
}

const char *sbx_env_json(const struct sbx *s)
{
	return s->env_json;
}

/* ---- kill ---- */

int sbx_kill(struct sbx_mgr *m, const char *id, const char *reason)
{
	struct sbx *s = sbx__get(m, id);
	if (!s)
		return -ENOENT; /* stopped already, or never */
	enum sbx_state now;
	int r = sbx__begin(s, SBX_EV_KILL, SETTLE_MS, &now);
	if (r < 0) {
		sbx_put(s);
		/* moved: the node that took it kills it (the caller says try again) */
		return r == -EBUSY || now == SBX_MOVED ? -EBUSY : -ENOENT;
	}
	char err[256];
	if (now == SBX_PAUSED) { /* no VM: its files go */
		struct store_sbx row;
		if (store_sbx_get(m->store, id, &row) == 0) {
			sbx__keep_log(m, id, row.run_dir);
			vm_remove_files(row.run_dir);
			store_sbx_release(&row);
		}
		log_info("paused sandbox %s deleted: %s", id, reason);
	} else {
		int slot;
		struct vm *vm = sbx__stop_vm(s, &slot);
		/* A killed sandbox's disk is thrown away, so no graceful poweroff. */
		if (vm) {
			vm_stop(vm, 0);
			sbx__keep_log(m, id, vm_run_dir(vm));
			vm_free(vm, 0);
		}
		sbx__net_down(m, slot);
		log_info("sandbox %s stopped: %s", id, reason);
	}
	crash_point("kill.before_store");
	struct sbx_facts f = { .end_reason = reason };
	sbx__fire(s, SBX_EV_STOPPED, &f, SBX_FIRE_FORCE, err, sizeof(err));
	if (now == SBX_PAUSED)
		sbx__blob_kick(m); /* its stored pause, if any, goes too */
	sbx_put(s);
	return 0;
}

/* ---- the way in ---- */

/* Why id has no object: not there (or another account's), or it ended. */
/* Why there is no sandbox id for account here: -ENOENT, -ESHUTDOWN (it
 * ended), -EREMOTE (another node's), or 1 when it was just taken over
 * from a node that is down and is here now. */
static int gone(struct sbx_mgr *m, const char *id, const char *account, char *err, size_t errlen)
{
	struct store_sbx row;
	if (store_sbx_get(m->store, id, &row) < 0 || (account && strcmp(row.account, account))) {
		if (row.id[0])
			store_sbx_release(&row);
		snprintf(err, errlen, "no sandbox '%s'", id);
		return -ENOENT;
	}
	int r = sbx_elsewhere(m, &row, err, errlen);
	if (r < 0) {
		store_sbx_release(&row);
		return r;
	}
	/* Taken over from a node that is down: here now, paused. */
	struct sbx *here = sbx__get(m, id);
	if (here) {
		sbx_put(here);
		store_sbx_release(&row);
		return 1;
	}
	snprintf(err, errlen, "sandbox '%s' is not running (%s%s%s)", id, row.state,
		 row.end_reason[0] ? ": " : "", row.end_reason);
	store_sbx_release(&row);
	return -ESHUTDOWN;
}

int sbx_acquire(struct sbx_mgr *m, const char *id, const char *account, int flags,
		struct sbx **out, char *err, size_t errlen)
{
	*out = NULL;
	for (int tries = 0; tries < 8; tries++) {
		struct sbx *s = sbx__get(m, id);
		if (!s || (account && strcmp(s->account, account))) {
			if (s && account) { /* another account's: as if none */
				sbx_put(s);
				snprintf(err, errlen, "no sandbox '%s'", id);
				return -ENOENT;
			}
			int g = gone(m, id, account, err, errlen);
			if (g > 0)
				continue;
			return g;
		}
		struct timespec until;
		clock_deadline(&until, SETTLE_MS);
		pthread_mutex_lock(&m->mu);
		while ((sbx__transitional(s->state) && s->state != SBX_SNAPSHOTTING) &&
		       pthread_cond_timedwait(&m->state_cv, &m->mu, &until) != ETIMEDOUT)
			;
		enum sbx_state now = s->state;
		pthread_mutex_unlock(&m->mu);
		if (now == SBX_RUNNING || now == SBX_SNAPSHOTTING) {
			if (flags & SBX_RESUME) /* a caller's: the API's, a port's */
				atomic_store(&s->active_ms, clock_ms());
			*out = s;
			return 0;
		}
		sbx_put(s);
		if (sbx__transitional(now)) {
			snprintf(err, errlen, "sandbox '%s' is busy (%s)", id, sbx_state_name(now));
			return -EBUSY;
		}
		if (now != SBX_PAUSED) {
			int g = gone(m, id, account, err, errlen);
			if (g > 0)
				continue;
			return g;
		}
		if (!(flags & SBX_RESUME)) {
			snprintf(err, errlen, "sandbox '%s' is paused", id);
			return -EAGAIN;
		}
		/* A paused sandbox comes back for whatever is asked of it; a
		 * resume under way meanwhile is waited for there. */
		int r = sbx_resume(m, id, err, errlen);
		if (r < 0)
			return r;
	}
	snprintf(err, errlen, "sandbox '%s' paused again each time it was resumed", id);
	return -EBUSY;
}

void sbx_mgr_stats(struct sbx_mgr *m, struct sbx_stats *out)
{
	pthread_mutex_lock(&m->mu);
	*out = m->stats;
	out->live = 0;
	for (unsigned b = 0; b < SBX_BUCKETS; b++)
		for (struct sbx *s = m->table[b]; s; s = s->next)
			out->live += s->state == SBX_RUNNING || s->state == SBX_SNAPSHOTTING;
	pthread_mutex_unlock(&m->mu);
	out->pool_depth = sbx__pool_depth(m);
	out->live += out->pool_depth;
}

/* ---- expiry ---- */

struct killer {
	struct sbx_mgr *m;
	char id[32];
	int pause; /* on_timeout: pause */
	int idle;  /* it sat idle: pause, never kill */
};

static void *killer_main(void *arg)
{
	struct killer *k = arg;
	struct sbx_mgr *m = k->m;
	log_set_tag("expiry");
	char err[256];
	if (k->idle) {
		if (sbx__pause(m, k->id, "idle", err, sizeof(err)) == 0) {
			log_info("sandbox %s paused: idle", k->id);
		} else {
			/* Tried again after another whole idle period, not at once. */
			struct sbx *s = sbx__get(m, k->id);
			if (s)
				atomic_store(&s->active_ms, clock_ms());
			sbx_put(s);
			log_warn("sandbox %s did not pause when idle: %s", k->id, err);
		}
	} else if (!k->pause || sbx__pause(m, k->id, "timeout", err, sizeof(err)) < 0) {
		if (k->pause)
			log_warn("sandbox %s did not pause at its timeout (%s): killed", k->id, err);
		sbx_kill(m, k->id, "timeout");
	}
	struct sbx *s = sbx__get(m, k->id);
	if (s) {
		pthread_mutex_lock(&m->mu);
		s->expiring = 0;
		pthread_mutex_unlock(&m->mu);
		sbx_put(s);
	}
	free(k);
	pthread_mutex_lock(&m->mu);
	m->killers--;
	pthread_cond_broadcast(&m->killers_cv);
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

/* Whether running s sat idle for its idle timeout: no call, stream or
 * port connection open, none for that long, nor CPU use by a sample that
 * is recent (a sampler held up by slow agents pauses nothing). */
static int idle(const struct sbx *s)
{
	long long now = clock_ms();
	return s->idle_timeout_ms > 0 && atomic_load(&s->busy) == 0 &&
	       atomic_load(&s->port_conns) == 0 && !atomic_load(&s->cpu_busy) &&
	       now - atomic_load(&s->sampled_ms) <= 3 * SBX_METRICS_MS &&
	       now - atomic_load(&s->active_ms) >= s->idle_timeout_ms;
}

/* A sandbox whose time is up or that sat idle, or a paused one older than
 * the retention. */
static int due(const struct sbx *s, const void *arg)
{
	const struct sbx_mgr *m = s->mgr;
	long long now = *(const long long *)arg;
	if (s->state == SBX_RUNNING)
		return (s->expires_at <= now || idle(s)) && !s->expiring;
	return s->state == SBX_PAUSED && s->paused_at + m->cfg.paused_retention_s <= now;
}

/* Kills or pauses the sandboxes whose time is up, each in a thread of its
 * own: one slow stop must not hold up the others. Paused sandboxes older
 * than the retention are deleted here (quick: their files), and, hourly,
 * the console logs kept of stopped ones past theirs. */
static void *expiry_main(void *arg)
{
	struct sbx_mgr *m = arg;
	log_set_tag("expiry");
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	long long next_sweep = 0;
	for (;;) {
		long long now = now_s();
		if (now >= next_sweep) {
			sbx__sweep_logs(m);
			next_sweep = now + 3600;
		}
		struct sbx **v;
		size_t n = sbx__each(m, due, &now, &v);
		for (size_t i = 0; i < n; i++) {
			struct sbx *s = v[i];
			pthread_mutex_lock(&m->mu);
			int running = s->state == SBX_RUNNING, go = m->killers < MAX_KILLERS &&
								   !s->expiring;
			if (running && go) {
				s->expiring = 1;
				m->killers++;
			}
			pthread_mutex_unlock(&m->mu);
			if (!running) {
				/* A sandbox in a transition is left for the next turn. */
				enum sbx_state st;
				if (sbx__begin(s, SBX_EV_KILL, 0, &st) == 0) {
					char err[256];
					struct store_sbx row;
					if (store_sbx_get(m->store, s->id, &row) == 0) {
						sbx__keep_log(m, s->id, row.run_dir);
						vm_remove_files(row.run_dir);
						store_sbx_release(&row);
					}
					struct sbx_facts f = { .end_reason = "retention" };
					sbx__fire(s, SBX_EV_STOPPED, &f, SBX_FIRE_FORCE, err, sizeof(err));
					log_info("paused sandbox %s deleted: retention", s->id);
				}
				continue;
			}
			if (!go)
				continue; /* tried again on the next turn */
			struct killer *k = malloc(sizeof(*k));
			pthread_t t;
			if (k) {
				*k = (struct killer){ .m = m, .pause = s->pause_on_timeout,
						      .idle = s->expires_at > now };
				snprintf(k->id, sizeof(k->id), "%s", s->id);
			}
			if (!k || pthread_create(&t, &at, killer_main, k) != 0) {
				free(k);
				pthread_mutex_lock(&m->mu);
				s->expiring = 0;
				m->killers--;
				pthread_mutex_unlock(&m->mu);
			}
		}
		sbx__put_all(v, n);
		/* A turn each 250 ms, at once when the manager stops. */
		struct timespec until;
		clock_deadline(&until, 250);
		pthread_mutex_lock(&m->mu);
		while (!m->quit && pthread_cond_timedwait(&m->quit_cv, &m->mu, &until) != ETIMEDOUT)
			;
		int quit = m->quit;
		pthread_mutex_unlock(&m->mu);
		if (quit) {
			pthread_attr_destroy(&at);
			return NULL;
		}
	}
}

int sbx_set_expiry(struct sbx_mgr *m, const char *id, long long expires_at)
{
	struct sbx *s = sbx_find(m, id, NULL);
	if (!s)
		return -ENOENT;
	pthread_mutex_lock(&m->mu);
	s->expires_at = expires_at;
	pthread_mutex_unlock(&m->mu);
	sbx_put(s);
	return store_sbx_set_expiry(m->store, id, expires_at);
}

static void cond_init_mono(pthread_cond_t *cv)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
}

int sbx_mgr_new(const struct sbx_config *cfg, struct store *store, struct sbx_mgr **out)
{
	struct sbx_mgr *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->cfg = *cfg;
	m->store = store;
	pthread_mutex_init(&m->mu, NULL);
	pthread_mutex_init(&m->ckpt_fetch_mu, NULL);
	pthread_mutex_init(&m->take_mu, NULL);
	pthread_mutex_init(&m->builds_mu, NULL);
	cond_init_mono(&m->state_cv);
	cond_init_mono(&m->quit_cv);
	pthread_cond_init(&m->killers_cv, NULL);
	sbx__tpl_start(m);
	if (pthread_create(&m->expiry, NULL, expiry_main, m) != 0) {
		free(m);
		return -EAGAIN;
	}
	int sampling = sbx__metrics_start(m) == 0;
	if (!sampling || sbx__hooks_start(m) < 0) {
		pthread_mutex_lock(&m->mu);
		m->quit = 1;
		pthread_cond_broadcast(&m->quit_cv);
		pthread_mutex_unlock(&m->mu);
		pthread_join(m->expiry, NULL);
		if (sampling)
			sbx__metrics_join(m);
		free(m);
		return -EAGAIN;
	}
	*out = m;
	return 0;
}

static int pumped(const struct sbx *s, const void *arg)
{
	(void)arg;
	return s->state == SBX_RUNNING;
}

void sbx_mgr_stop(struct sbx_mgr *m)
{
	pthread_mutex_lock(&m->mu);
	if (m->quit) {
		pthread_mutex_unlock(&m->mu);
		return;
	}
	m->quit = 1;
	pthread_cond_broadcast(&m->quit_cv);
	pthread_mutex_unlock(&m->mu);
	sbx__pools_stop(m);
	sbx__blob_stop(m);
	pthread_join(m->expiry, NULL);
	sbx__metrics_join(m);
	sbx__hooks_stop(m);
	struct sbx **v;
	size_t n = sbx__each(m, pumped, NULL, &v);
	for (size_t i = 0; i < n; i++) {
		/* Leave QEMU running for the next daemon: close our side only. */
		int slot;
		struct vm *vm = sbx__stop_vm(v[i], &slot);
		if (vm)
			vm_detach(vm);
	}
	sbx__put_all(v, n);
	/* Kills in flight use m: they end before m may be freed. So do
	 * template builds, given a while (a pull or an import may take
	 * minutes: the process is ending, and the next daemon fails it). */
	pthread_mutex_lock(&m->mu);
	while (m->killers)
		pthread_cond_wait(&m->killers_cv, &m->mu);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 30;
	while (m->tpl_builds &&
	       pthread_cond_timedwait(&m->killers_cv, &m->mu, &until) != ETIMEDOUT)
		;
	if (m->tpl_builds)
		log_warn("%d template builds still running at the stop", m->tpl_builds);
	pthread_mutex_unlock(&m->mu);
}

void sbx_mgr_free(struct sbx_mgr *m)
{
	if (!m)
		return;
	sbx_mgr_stop(m);
	/* A template build that outlived the stop's wait still uses m: it is
	 * left to the process's end rather than freed under it. */
	pthread_mutex_lock(&m->mu);
	int builds = m->tpl_builds;
	pthread_mutex_unlock(&m->mu);
	if (builds)
		return;
	sbx__pools_free(m);
	for (unsigned b = 0; b < SBX_BUCKETS; b++)
		while (m->table[b])
			sbx__forget(m->table[b]);
	pthread_cond_destroy(&m->killers_cv);
	pthread_cond_destroy(&m->state_cv);
	pthread_cond_destroy(&m->quit_cv);
	pthread_mutex_destroy(&m->ckpt_fetch_mu);
	pthread_mutex_destroy(&m->take_mu);
	sbx__builds_free(m);
	pthread_mutex_destroy(&m->builds_mu);
	pthread_mutex_destroy(&m->mu);
	free(m);
}
