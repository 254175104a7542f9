/*
 * sbx: the sandbox manager's lifecycles (create, pump, kill, restore,
 * expiry); operations are in sbx_op.c. Locking: the manager's mutex guards
 * its list; each sandbox's mutex guards its VM, agent connection and every
 * sop bound to it. The pump thread holds the sandbox lock except while it
 * polls, so frame callbacks always run locked. Lock order: manager, then
 * sandbox.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/log.h"
#include "runner/agentc.h"
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
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_STARTING 64 /* sandboxes booting at once, all accounts */
#define MAX_KILLERS 16  /* expiry kills running at once */

struct sbx_mgr {
	struct sbx_config cfg;
	struct store *store;
	pthread_mutex_t mu;
	struct sbx *list;
	pthread_t expiry;
	int quit;
	int killers; /* expiry kill threads alive */
	pthread_cond_t killers_cv;
	/* Accounts of the sandboxes still booting: they count against the
	 * quota before the store knows them, so parallel creates cannot
	 * overshoot it. */
	char starting[MAX_STARTING][128];
};

/* Reserves a quota slot for account: 0, or -EDQUOT. */
static int reserve(struct sbx_mgr *m, const char *account)
{
	pthread_mutex_lock(&m->mu);
	int n = store_sbx_count_running(m->store, account), slot = -1;
	for (int i = 0; i < MAX_STARTING; i++) {
		if (!m->starting[i][0])
			slot = slot < 0 ? i : slot;
		else if (!strcmp(m->starting[i], account))
			n++;
	}
	int ok = n >= 0 && n < m->cfg.max_sandboxes && slot >= 0;
	if (ok)
		snprintf(m->starting[slot], sizeof(m->starting[slot]), "%s", account);
	pthread_mutex_unlock(&m->mu);
	return ok ? 0 : -EDQUOT;
}

static void unreserve(struct sbx_mgr *m, const char *account)
{
	pthread_mutex_lock(&m->mu);
	for (int i = 0; i < MAX_STARTING; i++) {
		if (!strcmp(m->starting[i], account)) {
			m->starting[i][0] = '\0';
			break;
		}
	}
	pthread_mutex_unlock(&m->mu);
}

static long long now_s(void)
{
	return (long long)time(NULL);
}

/* ---- lifecycle ---- */

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

static void sbx_release(struct sbx *s)
{
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	close(s->wakefd);
	free(s->ctls);
	free(s->env_json);
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

/* Removes s from the manager's list: 1 if this call did it. */
static int unlink_sbx(struct sbx_mgr *m, struct sbx *s)
{
	pthread_mutex_lock(&m->mu);
	int found = 0;
	for (struct sbx **pp = &m->list; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&m->mu);
	return found;
}

/* With the sandbox locked: takes the VM away from the operations. Pending
 * ones hear ECONNRESET through their callbacks, every waiter wakes, and
 * the caller stops and frees the VM without the lock (that takes seconds). */
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

/* The VM ended by itself: settle how, record it, let go of the sandbox. */
static void pump_ended(struct sbx *s)
{
	struct vm *vm = take_vm(s);
	pthread_mutex_unlock(&s->mu);
	if (!vm_wait(vm, 3000))
		vm_stop(vm, 0); /* QMP gone but QEMU lingers: end it */
	enum vm_state st = vm_state(vm);
	log_info("vm ended: %s: %s", vm_state_name(st), vm_reason(vm));
	store_sbx_set_state(s->mgr->store, s->id, "stopped", end_reason(st));
	vm_free(vm, 0);
	/* Nobody will join us once we are out of the list. */
	if (unlink_sbx(s->mgr, s)) {
		pthread_detach(pthread_self());
		sbx_put(s);
	}
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
		if (r == -ESHUTDOWN) {
			pump_ended(s); /* unlocks */
			return NULL;
		}
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static int add_sbx(struct sbx_mgr *m, const struct store_sbx *row, struct vm *vm)
{
	struct sbx *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->mgr = m;
	snprintf(s->id, sizeof(s->id), "%s", row->id);
	snprintf(s->account, sizeof(s->account), "%s", row->account);
	s->env_json = strdup(row->env_json ? row->env_json : "{}");
	s->expires_at = row->expires_at;
	s->vm = vm;
	s->running = 1;
	s->refs = 1; /* the list's */
	pthread_mutex_init(&s->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	s->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	/* Published only once its pump runs, so nobody finds a sandbox that
	 * may yet be freed here. The manager lock is held across: a pump that
	 * ends at once waits in unlink_sbx until the sandbox is listed. */
	pthread_mutex_lock(&m->mu);
	if (s->wakefd < 0 || pthread_create(&s->pump, NULL, pump_main, s) != 0) {
		pthread_mutex_unlock(&m->mu);
		log_error("cannot start the pump of %s", s->id);
		s->vm = NULL;
		sbx_release(s);
		return -EAGAIN;
	}
	s->next = m->list;
	m->list = s;
	pthread_mutex_unlock(&m->mu);
	return 0;
}

struct sbx *sbx_find(struct sbx_mgr *m, const char *id, const char *account)
{
	pthread_mutex_lock(&m->mu);
	struct sbx *s = m->list;
	while (s && strcmp(s->id, id))
		s = s->next;
	if (s && account && strcmp(s->account, account))
		s = NULL;
	if (s)
		s->refs++;
	pthread_mutex_unlock(&m->mu);
	return s;
}

const char *sbx_env_json(const struct sbx *s)
{
	return s->env_json;
}

int sbx_kill(struct sbx_mgr *m, const char *id, const char *reason)
{
	struct sbx *s = sbx_find(m, id, NULL);
	if (!s)
		return -ENOENT;
	if (!unlink_sbx(m, s)) { /* the pump or another kill got there first */
		sbx_put(s);
		return 0;
	}
	pthread_mutex_lock(&s->mu);
	s->running = 0;
	s->stop = 1;
	pthread_mutex_unlock(&s->mu);
	wake(s);
	pthread_join(s->pump, NULL);
	/* The pump is gone: operations end now, the stop runs unlocked. A
	 * killed sandbox's disk is thrown away, so no graceful poweroff. */
	pthread_mutex_lock(&s->mu);
	struct vm *vm = take_vm(s);
	pthread_mutex_unlock(&s->mu);
	if (vm) {
		vm_stop(vm, 0);
		vm_free(vm, 0);
	}
	store_sbx_set_state(m->store, id, "stopped", reason);
	log_info("sandbox %s stopped: %s", id, reason);
	sbx_put(s); /* ours */
	sbx_put(s); /* the list's */
	return 0;
}

/* ---- creation, restore, expiry ---- */

static void random_id(char *out, size_t n, const char *prefix)
{
	uint8_t b[8];
	if (getrandom(b, sizeof(b), 0) != sizeof(b))
		for (size_t i = 0; i < sizeof(b); i++) /* never in practice */
			b[i] = (uint8_t)(rand() ^ (int)time(NULL));
	snprintf(out, n, "%s%02x%02x%02x%02x%02x%02x%02x%02x", prefix, b[0], b[1], b[2], b[3], b[4],
		 b[5], b[6], b[7]);
}

/* The body of sbx_create once a quota slot is held. */
static int boot(struct sbx_mgr *m, const char *account, const struct sbx_params *p,
		const char *image, struct store_sbx *row, char *err, size_t errlen)
{
	const struct sbx_config *c = &m->cfg;
	char kernel[512], initrd[512], run[sizeof(row->run_dir)];
	snprintf(kernel, sizeof(kernel), "%s/bzImage", c->guest_dir);
	snprintf(initrd, sizeof(initrd), "%s/initramfs.cpio", c->guest_dir);
	memset(row, 0, sizeof(*row));
	random_id(row->id, sizeof(row->id), "sbx_");
	snprintf(run, sizeof(run), "%s/vms/%s", c->state_dir, row->id);
	snprintf(row->run_dir, sizeof(row->run_dir), "%s", run);
	struct vm_config vc = {
		.qemu = c->qemu, .accel = c->accel, .vcpus = p->vcpus, .memory_mb = p->memory_mb,
		.disk_mb = p->disk_mb, .kernel = kernel, .initrd = initrd, .template = image,
		.run_dir = run, .cache_dir = c->cache_dir, .hostname = row->id + 4,
	};
	struct vm *vm;
	int r = vm_start(&vc, &vm, err, errlen);
	if (r < 0) {
		log_error("sandbox %s did not start: %s", row->id, err);
		return -EIO;
	}
	snprintf(row->account, sizeof(row->account), "%s", account);
	snprintf(row->template, sizeof(row->template), "%s", p->template);
	snprintf(row->state, sizeof(row->state), "running");
	row->vcpus = p->vcpus;
	row->memory_mb = p->memory_mb;
	row->disk_mb = p->disk_mb;
	row->created_at = now_s();
	row->expires_at = row->created_at + p->timeout_s;
	row->metadata_json = strdup(p->metadata_json ? p->metadata_json : "{}");
	row->env_json = strdup(p->env_json ? p->env_json : "{}");
	row->qemu_pid = vm_pid(vm);
	r = store_sbx_insert(m->store, row);
	if (r == 0)
		r = add_sbx(m, row, vm);
	if (r < 0) {
		snprintf(err, errlen, "cannot record sandbox: %s", strerror(-r));
		vm_free(vm, 0);
		store_sbx_release(row);
		return -EIO;
	}
	log_info("sandbox %s started for '%s' (%s) in %.0f ms", row->id, account, p->template,
		 vm_timings(vm)->total_ms);
	return 0;
}

int sbx_create(struct sbx_mgr *m, const char *account, const struct sbx_params *p,
	       struct store_sbx *row, char *err, size_t errlen)
{
	const struct sbx_config *c = &m->cfg;
	char image[512];
	snprintf(image, sizeof(image), "%s/templates/%s.erofs", c->guest_dir, p->template);
	if (!*p->template || strchr(p->template, '/') || access(image, R_OK) < 0) {
		snprintf(err, errlen, "unknown template '%s'", p->template);
		return -ENOENT;
	}
	if (reserve(m, account) < 0) {
		snprintf(err, errlen, "account '%s' already runs or starts %d sandboxes (or %d start at once)",
			 account, c->max_sandboxes, MAX_STARTING);
		return -EDQUOT;
	}
	int r = boot(m, account, p, image, row, err, errlen);
	unreserve(m, account);
	return r;
}

/* Is pid a QEMU running from run_dir? Guards against a recycled pid. */
static int is_our_qemu(int pid, const char *run_dir)
{
	char path[64], cmd[8192];
	snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, cmd, sizeof(cmd) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	for (ssize_t i = 0; i < n; i++)
		if (!cmd[i])
			cmd[i] = ' ';
	cmd[n] = '\0';
	return strstr(cmd, run_dir) != NULL;
}

void sbx_mgr_restore(struct sbx_mgr *m)
{
	struct store_sbx *rows;
	size_t n;
	if (store_sbx_running(m->store, &rows, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct store_sbx *row = &rows[i];
		char err[256] = "";
		struct vm *vm = NULL;
		int r = -ESRCH;
		if (is_our_qemu(row->qemu_pid, row->run_dir))
			r = vm_attach(row->run_dir, row->qemu_pid, &vm, err, sizeof(err));
		if (r == 0 && add_sbx(m, row, vm) == 0) {
			log_info("sandbox %s re-attached (qemu pid %d)", row->id, row->qemu_pid);
			continue;
		}
		log_warn("sandbox %s lost: %s", row->id, err[0] ? err : "its QEMU is gone");
		if (r == 0)
			vm_free(vm, 1);
		store_sbx_set_state(m->store, row->id, "lost", "lost");
	}
	store_sbx_free_list(rows, n);
}

struct killer {
	struct sbx_mgr *m;
	char id[32];
};

static void *killer_main(void *arg)
{
	struct killer *k = arg;
	struct sbx_mgr *m = k->m;
	log_set_tag("expiry");
	sbx_kill(m, k->id, "timeout");
	free(k);
	pthread_mutex_lock(&m->mu);
	m->killers--;
	pthread_cond_broadcast(&m->killers_cv);
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

/* Kills the sandboxes whose time is up, each in a thread of its own: one
 * slow stop must not hold up the others. */
static void *expiry_main(void *arg)
{
	struct sbx_mgr *m = arg;
	log_set_tag("expiry");
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	for (;;) {
		pthread_mutex_lock(&m->mu);
		if (m->quit) {
			pthread_mutex_unlock(&m->mu);
			pthread_attr_destroy(&at);
			return NULL;
		}
		long long now = now_s();
		for (struct sbx *s = m->list; s && m->killers < MAX_KILLERS; s = s->next) {
			if (s->expires_at > now || s->expiring)
				continue;
			struct killer *k = malloc(sizeof(*k));
			pthread_t t;
			if (k) {
				*k = (struct killer){ .m = m };
				snprintf(k->id, sizeof(k->id), "%s", s->id);
			}
			if (k && pthread_create(&t, &at, killer_main, k) == 0) {
				s->expiring = 1;
				m->killers++;
			} else {
				free(k); /* tried again on the next turn */
			}
		}
		pthread_mutex_unlock(&m->mu);
		usleep(250000);
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

int sbx_mgr_new(const struct sbx_config *cfg, struct store *store, struct sbx_mgr **out)
{
	struct sbx_mgr *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->cfg = *cfg;
	m->store = store;
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->killers_cv, NULL);
	if (pthread_create(&m->expiry, NULL, expiry_main, m) != 0) {
		free(m);
		return -EAGAIN;
	}
	*out = m;
	return 0;
}

void sbx_mgr_stop(struct sbx_mgr *m)
{
	pthread_mutex_lock(&m->mu);
	if (m->quit) {
		pthread_mutex_unlock(&m->mu);
		return;
	}
	m->quit = 1;
	struct sbx *list = m->list;
	m->list = NULL;
	pthread_mutex_unlock(&m->mu);
	pthread_join(m->expiry, NULL);
	while (list) {
		struct sbx *s = list;
		list = s->next;
		pthread_mutex_lock(&s->mu);
		s->stop = 1;
		s->running = 0;
		pthread_mutex_unlock(&s->mu);
		wake(s);
		pthread_join(s->pump, NULL);
		/* Leave QEMU running for the next daemon: close our side only. */
		pthread_mutex_lock(&s->mu);
		vm_detach(s->vm);
		s->vm = NULL;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		sbx_put(s);
	}
	/* Kills in flight use m: they end before m may be freed. */
	pthread_mutex_lock(&m->mu);
	while (m->killers)
		pthread_cond_wait(&m->killers_cv, &m->mu);
	pthread_mutex_unlock(&m->mu);
}

void sbx_mgr_free(struct sbx_mgr *m)
{
	if (!m)
		return;
	sbx_mgr_stop(m);
	pthread_cond_destroy(&m->killers_cv);
	pthread_mutex_destroy(&m->mu);
	free(m);
}
