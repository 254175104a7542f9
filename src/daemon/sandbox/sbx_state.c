/*
 * sbx_state: a sandbox's lifecycle as one state x event table, and the one
 * function that performs a transition (docs/architecture.md, "Sandbox
 * states"). A transition from a stable state enters a transitional one
 * that the caller then owns: nobody else moves the sandbox until the owner
 * fires the event that ends it. Where the end changes what the store
 * keeps, it is one conditional write (store_sbx_move: UPDATE ... WHERE
 * state = the one the store had), with the usage event that records it.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/clock.h"
#include "common/log.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* What the store keeps for each state: transitional states keep the
 * stable state they came from until they end. */
static const char *const stored_names[] = {
	[SBX_CREATING] = NULL,  [SBX_RESTORING] = "running", [SBX_RUNNING] = "running",
	[SBX_PAUSING] = "running", [SBX_PAUSED] = "paused",  [SBX_RESUMING] = "paused",
	[SBX_SNAPSHOTTING] = "running", [SBX_STOPPING] = NULL, [SBX_STOPPED] = "stopped",
	[SBX_LOST] = "lost",    [SBX_MOVING] = "paused",     [SBX_MOVED] = "paused",
};

static const char *const state_names[] = {
	[SBX_CREATING] = "creating", [SBX_RESTORING] = "restoring", [SBX_RUNNING] = "running",
	[SBX_PAUSING] = "pausing",   [SBX_PAUSED] = "paused",       [SBX_RESUMING] = "resuming",
	[SBX_SNAPSHOTTING] = "snapshotting", [SBX_STOPPING] = "stopping",
	[SBX_STOPPED] = "stopped",   [SBX_LOST] = "lost",           [SBX_MOVING] = "moving",
	[SBX_MOVED] = "moved",
};

static const char *const event_names[] = {
	[SBX_EV_STARTED] = "started",   [SBX_EV_FAILED] = "failed",   [SBX_EV_ATTACHED] = "attached",
	[SBX_EV_LOADED] = "loaded",     [SBX_EV_SEALED] = "sealed",   [SBX_EV_LOST] = "lost",
	[SBX_EV_PAUSE] = "pause",       [SBX_EV_PAUSED] = "paused",   [SBX_EV_RESUME] = "resume",
	[SBX_EV_RESUMED] = "resumed",   [SBX_EV_SNAPSHOT] = "snapshot", [SBX_EV_DONE] = "done",
	[SBX_EV_KILL] = "kill",         [SBX_EV_ENDED] = "ended",     [SBX_EV_STOPPED] = "stopped",
	[SBX_EV_MOVE] = "move",         [SBX_EV_MOVED] = "moved",
};

/* The table. to_store: the stored state the transition writes (a
 * conditional move from the stored state of `from`), NULL for none. The
 * stopping row's write depends on where the sandbox stopped from: the
 * stored state it had (running or paused). */
const struct sbx_transition sbx__table[] = {
	/* a create: boot, restore or pool claim; the row is inserted */
	{ SBX_CREATING, SBX_EV_STARTED, SBX_RUNNING, "running" },
	{ SBX_CREATING, SBX_EV_FAILED, SBX_STOPPED, NULL },
	/* a daemon's start, for each row it finds running or paused */
	{ SBX_RESTORING, SBX_EV_ATTACHED, SBX_RUNNING, NULL },
	{ SBX_RESTORING, SBX_EV_LOADED, SBX_PAUSED, NULL },
	{ SBX_RESTORING, SBX_EV_SEALED, SBX_PAUSED, "paused" }, /* killed mid-pause, pause whole */
	{ SBX_RESTORING, SBX_EV_LOST, SBX_LOST, "lost" },
	/* pause */
	{ SBX_RUNNING, SBX_EV_PAUSE, SBX_PAUSING, NULL },
	{ SBX_PAUSING, SBX_EV_PAUSED, SBX_PAUSED, "paused" },
	{ SBX_PAUSING, SBX_EV_FAILED, SBX_RUNNING, NULL }, /* it runs on */
	{ SBX_PAUSING, SBX_EV_LOST, SBX_LOST, "lost" },     /* QEMU gone, pause not whole */
	/* resume */
	{ SBX_PAUSED, SBX_EV_RESUME, SBX_RESUMING, NULL },
	{ SBX_RESUMING, SBX_EV_RESUMED, SBX_RUNNING, "running" },
	{ SBX_RESUMING, SBX_EV_FAILED, SBX_PAUSED, NULL },
	/* fork and checkpoint: the VM stands still while its state is copied */
	{ SBX_RUNNING, SBX_EV_SNAPSHOT, SBX_SNAPSHOTTING, NULL },
	{ SBX_SNAPSHOTTING, SBX_EV_DONE, SBX_RUNNING, NULL },
	/* kill, timeout, retention, and a VM that ended by itself */
	{ SBX_RUNNING, SBX_EV_KILL, SBX_STOPPING, NULL },
	{ SBX_PAUSED, SBX_EV_KILL, SBX_STOPPING, NULL },
	{ SBX_RUNNING, SBX_EV_ENDED, SBX_STOPPING, NULL },
	{ SBX_STOPPING, SBX_EV_STOPPED, SBX_STOPPED, "stopped" },
	/* to another node (sbx_node.c): the row lets go of its node, which
	 * store_sbx_let_go writes, since the state stays paused */
	{ SBX_PAUSED, SBX_EV_MOVE, SBX_MOVING, NULL },
	{ SBX_MOVING, SBX_EV_MOVED, SBX_MOVED, NULL },
	{ SBX_MOVING, SBX_EV_FAILED, SBX_PAUSED, NULL },
};
const size_t sbx__ntable = sizeof(sbx__table) / sizeof(sbx__table[0]);
/* How often each row was taken (under a manager's lock), for the tests
 * that check every transition is reached. */
unsigned long sbx__taken[sizeof(sbx__table) / sizeof(sbx__table[0])];

const char *sbx_state_name(enum sbx_state s)
{
	return (unsigned)s < SBX_NSTATES ? state_names[s] : "?";
}

const char *sbx__event_name(enum sbx_event e)
{
	return (unsigned)e < SBX_NEVENTS ? event_names[e] : "?";
}

const char *sbx__stored_name(enum sbx_state s)
{
	return (unsigned)s < SBX_NSTATES ? stored_names[s] : NULL;
}

int sbx__transitional(enum sbx_state s)
{
	return s == SBX_CREATING || s == SBX_RESTORING || s == SBX_PAUSING || s == SBX_RESUMING ||
	       s == SBX_SNAPSHOTTING || s == SBX_STOPPING || s == SBX_MOVING;
}

const struct sbx_transition *sbx__lookup(enum sbx_state from, enum sbx_event ev)
{
	for (size_t i = 0; i < sbx__ntable; i++)
		if (sbx__table[i].from == from && sbx__table[i].ev == ev)
			return &sbx__table[i];
	return NULL;
}

static int64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The store's move for transition t of s, with its usage event. */
static int write_move(struct sbx *s, const struct sbx_transition *t, const struct sbx_facts *f)
{
	struct sbx_mgr *m = s->mgr;
	const char *usage = !strcmp(t->to_store, "running") ? "running"
			    : !strcmp(t->to_store, "paused") ? "paused"
							     : "stopped";
	struct store_usage_event e = {
		.sbx_id = s->id, .account = s->account, .key_id = s->key_id, .state = usage,
		.vcpus = s->vcpus, .memory_mb = s->memory_mb,
		.storage_bytes = f ? f->storage_bytes : 0, .at_ms = now_ms(),
	};
	struct store_sbx_move mv = {
		.id = s->id, .from = s->stored, .to = t->to_store,
		.end_reason = f ? f->end_reason : NULL, .net_slot = NET_NO_SLOT, .usage = &e,
	};
	if (f) {
		mv.paused_at = f->paused_at;
		mv.timeout_left_s = f->timeout_left_s;
		mv.expires_at = f->expires_at;
		mv.qemu_pid = f->qemu_pid;
		mv.generation = f->generation;
		mv.net_slot = f->net_slot;
	}
	if (t->from == SBX_CREATING) /* the row's first write: all of it */
		return f && f->row ? store_sbx_insert(m->store, f->row, &e) : -EINVAL;
	return store_sbx_move(m->store, &mv);
}

/* The lifecycle event a transition to a stable state is (docs/api.md,
 * Events), with its cause: 0 when it is none (a daemon's own restart,
 * a failed transition, a move between nodes). */
static int life_event(const struct sbx_transition *t, const struct sbx_facts *f,
		      struct store_event *e)
{
	const char *type = NULL, *cause = f ? f->cause : NULL;
	const char *why = f && f->end_reason ? f->end_reason : "";
	switch (t->ev) {
	case SBX_EV_STARTED: type = "created"; break;
	case SBX_EV_PAUSED: type = "paused"; break;
	case SBX_EV_RESUMED: type = "resumed"; break;
	case SBX_EV_DONE: type = f ? f->event : NULL; break;
	case SBX_EV_LOST: type = "lost"; cause = why; break;
	case SBX_EV_STOPPED:
		/* killed (the API; retention), its timeout, or its VM ended
		 * by itself (poweroff, panic, crashed) */
		type = !strcmp(why, "timeout") ? "timeout"
		       : !strcmp(why, "killed") || !strcmp(why, "retention") ? "killed"
		       : !strcmp(why, "lost") || !strcmp(why, "node_lost") ? "lost" : "stopped";
		cause = !strcmp(why, "killed") ? "api" : why;
		break;
	default: break;
	}
	if (!type)
		return 0;
	snprintf(e->type, sizeof(e->type), "%s", type);
	snprintf(e->cause, sizeof(e->cause), "%s", cause ? cause : "");
	return 1;
}

int sbx__fire(struct sbx *s, enum sbx_event ev, const struct sbx_facts *f, int flags, char *err,
	      size_t errlen)
{
	struct sbx_mgr *m = s->mgr;
	pthread_mutex_lock(&m->mu);
	enum sbx_state from = s->state;
	const struct sbx_transition *t = sbx__lookup(from, ev);
	pthread_mutex_unlock(&m->mu);
	if (!t) {
		snprintf(err, errlen, "sandbox '%s' cannot take '%s' while %s", s->id,
			 sbx__event_name(ev), sbx_state_name(from));
		log_error("%s", err);
		return -EPERM;
	}
	/* Only the owner of a transitional state ends it, and entering one
	 * writes nothing: the store is written outside the lock. */
	int r = 0;
	if (t->to_store) {
		r = write_move(s, t, f);
		if (r < 0) {
			snprintf(err, errlen, "sandbox '%s': cannot record '%s' (%s -> %s): %s", s->id,
				 sbx__event_name(ev), sbx_state_name(from), sbx_state_name(t->to),
				 r == -ESTALE ? "the store's row is not in the state it was" : strerror(-r));
			log_error("%s", err);
			if (!(flags & SBX_FIRE_FORCE))
				return r;
		}
	}
	pthread_mutex_lock(&m->mu);
	if (s->state != from) { /* a bug: somebody moved a state this thread owned */
		pthread_mutex_unlock(&m->mu);
		snprintf(err, errlen, "sandbox '%s' moved from %s to %s during '%s'", s->id,
			 sbx_state_name(from), sbx_state_name(s->state), sbx__event_name(ev));
		log_error("%s", err);
		return -EPERM;
	}
	s->state = t->to;
	sbx__taken[t - sbx__table]++;
	if (t->to_store && (r == 0 || (flags & SBX_FIRE_FORCE)))
		s->stored = t->to_store;
	int gone = t->to == SBX_STOPPED || t->to == SBX_LOST || t->to == SBX_MOVED;
	pthread_cond_broadcast(&m->state_cv);
	pthread_mutex_unlock(&m->mu);
	struct store_event e = { .at_ms = (long long)(clock_realtime_ns() / 1000000) };
	if ((r == 0 || (flags & SBX_FIRE_FORCE)) && life_event(t, f, &e)) {
		snprintf(e.account, sizeof(e.account), "%s", s->account);
		snprintf(e.sbx_id, sizeof(e.sbx_id), "%s", s->id);
		if (store_event_add(m->store, &e) < 0)
			log_warn("sandbox %s: cannot record its '%s' event", s->id, e.type);
		else
			sbx__hooks_wake(m);
	}
	if (gone)
		sbx__forget(s);
	return r;
}

/* Waits (m->mu held) until s is stable and holds no hold, or until. A
 * hold that uploads the pause (sbx_blob.c) is asked to stop when cancel
 * is set: whoever waits needs the sandbox now, the upload can come again. */
static int settle_locked(struct sbx_mgr *m, struct sbx *s, const struct timespec *until,
			 int cancel)
{
	while (sbx__transitional(s->state) || s->held) {
		if (s->storing && cancel)
			__atomic_store_n(&s->store_cancel, 1, __ATOMIC_RELAXED);
		if (pthread_cond_timedwait(&m->state_cv, &m->mu, until) == ETIMEDOUT)
			return sbx__transitional(s->state) || s->held ? -EBUSY : 0;
	}
	return 0;
}

int sbx__begin(struct sbx *s, enum sbx_event ev, int timeout_ms, enum sbx_state *now)
{
	struct sbx_mgr *m = s->mgr;
	struct timespec until;
	clock_deadline(&until, timeout_ms);
	pthread_mutex_lock(&m->mu);
	int r = settle_locked(m, s, &until, 1);
	const struct sbx_transition *t = r == 0 ? sbx__lookup(s->state, ev) : NULL;
	if (now)
		*now = s->state;
	if (r == 0 && (!t || !sbx__transitional(t->to)))
		r = -EPERM; /* not from here: the caller tells why from *now */
	if (r == 0) {
		s->state = t->to;
		sbx__taken[t - sbx__table]++;
		pthread_cond_broadcast(&m->state_cv);
	}
	pthread_mutex_unlock(&m->mu);
	return r;
}

int sbx__hold(struct sbx *s, int timeout_ms, enum sbx_state *now)
{
	/* a try (no wait) is nobody in need */
	return sbx__hold_as(s, timeout_ms, timeout_ms > 0, now);
}

int sbx__hold_as(struct sbx *s, int timeout_ms, int cancel, enum sbx_state *now)
{
	struct sbx_mgr *m = s->mgr;
	struct timespec until;
	clock_deadline(&until, timeout_ms);
	pthread_mutex_lock(&m->mu);
	int r = settle_locked(m, s, &until, cancel);
	if (r == 0 && s->state != SBX_RUNNING && s->state != SBX_PAUSED)
		r = -EPERM;
	if (r == 0)
		s->held = 1;
	if (now)
		*now = s->state;
	pthread_mutex_unlock(&m->mu);
	return r;
}

void sbx__unhold(struct sbx *s)
{
	struct sbx_mgr *m = s->mgr;
	pthread_mutex_lock(&m->mu);
	s->held = 0;
	pthread_cond_broadcast(&m->state_cv);
	pthread_mutex_unlock(&m->mu);
}

int sbx__wait_state(struct sbx *s, enum sbx_state want, int timeout_ms)
{
	struct sbx_mgr *m = s->mgr;
	struct timespec until;
	clock_deadline(&until, timeout_ms);
	pthread_mutex_lock(&m->mu);
	while (s->state != want &&
	       pthread_cond_timedwait(&m->state_cv, &m->mu, &until) != ETIMEDOUT)
		;
	int r = s->state == want ? 0 : -ETIMEDOUT;
	pthread_mutex_unlock(&m->mu);
	return r;
}

enum sbx_state sbx__state(struct sbx *s)
{
	pthread_mutex_lock(&s->mgr->mu);
	enum sbx_state st = s->state;
	pthread_mutex_unlock(&s->mgr->mu);
	return st;
}
