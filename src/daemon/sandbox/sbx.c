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
#include "daemon/net/net.h"
#include "runner/agentc.h"
#include "runner/qemu.h"
#include "priv/priv.h"
#include "runner/snap.h"
#include "runner/vm.h"

#include <dirent.h>
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
	free(s->secrets_json);
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
int sbx__unlink(struct sbx_mgr *m, struct sbx *s)
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
struct vm *sbx__take_vm(struct sbx *s)
{
	struct vm *vm = s->vm;
	s->running = 0;
	if (vm)
		vm_drop_agent(vm);
	s->vm = NULL;
	pthread_cond_broadcast(&s->cv);
	return vm;
}

void sbx__usage(struct sbx_mgr *m, const struct store_sbx *row, const char *state,
		long long storage_bytes)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct store_usage_event e = {
		.sbx_id = row->id, .account = row->account, .key_id = row->key_id, .state = state,
		.vcpus = row->vcpus, .memory_mb = row->memory_mb, .storage_bytes = storage_bytes,
		.at_ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000,
	};
	int r = store_usage_add(m->store, &e);
	if (r < 0)
		log_error("cannot record usage of %s: %s", row->id, strerror(-r));
}

static void usage_stopped(const struct sbx *s)
{
	struct store_sbx row = { .vcpus = s->vcpus, .memory_mb = s->memory_mb };
	snprintf(row.id, sizeof(row.id), "%s", s->id);
	snprintf(row.account, sizeof(row.account), "%s", s->account);
	snprintf(row.key_id, sizeof(row.key_id), "%s", s->key_id);
	sbx__usage(s->mgr, &row, "stopped", 0);
}

/* The VM ended by itself: settle how, record it, let go of the sandbox. */
static void pump_ended(struct sbx *s)
{
	struct vm *vm = sbx__take_vm(s);
	int slot = s->net_slot; /* given up under the lock: sbx_net.c reads it */
	s->net_slot = NET_NO_SLOT;
	pthread_mutex_unlock(&s->mu);
	if (!vm_wait(vm, 3000))
		vm_stop(vm, 0); /* QMP gone but QEMU lingers: end it */
	enum vm_state st = vm_state(vm);
	log_info("vm ended: %s: %s", vm_state_name(st), vm_reason(vm));
	store_sbx_set_state(s->mgr->store, s->id, "stopped", end_reason(st));
	usage_stopped(s);
	vm_free(vm, 0);
	sbx__net_down(s->mgr, slot);
	/* Nobody will join us once we are out of the list. */
	if (sbx__unlink(s->mgr, s)) {
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

int sbx__add(struct sbx_mgr *m, const struct store_sbx *row, struct vm *vm)
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
	s->pause_on_timeout = strcmp(row->on_timeout, "kill") != 0;
	s->net_slot = row->net_slot;
	s->env_json = strdup(row->env_json ? row->env_json : "{}");
	s->secrets_json = strdup(row->secrets_json ? row->secrets_json : "[]");
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
	s->refs++; /* ours, while its secrets go to its network */
	pthread_mutex_unlock(&m->mu);
	/* Listed first: a secret that changes from now on reaches it
	 * (sbx_secrets_changed); both read the store under its lock. */
	pthread_mutex_lock(&s->mu);
	if (s->secrets_json)
		sbx__net_secrets(m, s->account, s->secrets_json, s->net_slot);
	pthread_mutex_unlock(&s->mu);
	sbx_put(s);
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

struct vm *sbx__detach(struct sbx_mgr *m, struct sbx *s)
{
	if (!sbx__unlink(m, s)) /* the pump or a kill got there first */
		return NULL;
	pthread_mutex_lock(&s->mu);
	s->running = 0;
	s->stop = 1;
	pthread_mutex_unlock(&s->mu);
	wake(s);
	pthread_join(s->pump, NULL);
	/* The pump is gone: operations end now; whatever the caller does
	 * with the VM runs unlocked. */
	pthread_mutex_lock(&s->mu);
	struct vm *vm = sbx__take_vm(s);
	pthread_mutex_unlock(&s->mu);
	/* The VM ended by itself just before: its pump settled that, but
	 * left the list's reference to whoever unlisted the sandbox. */
	if (!vm)
		sbx_put(s);
	return vm;
}

void sbx__done(struct sbx *s)
{
	sbx_put(s); /* ours */
	sbx_put(s); /* the list's */
}

/* A paused sandbox has no VM: its files go, its row says why. */
static int kill_paused(struct sbx_mgr *m, const char *id, const char *reason)
{
	struct store_sbx row;
	int r = store_sbx_get(m->store, id, &row);
	if (r < 0)
		return r;
	if (strcmp(row.state, "paused")) {
		store_sbx_release(&row);
		return -ENOENT;
	}
	vm_remove_files(row.run_dir);
	store_sbx_set_state(m->store, id, "stopped", reason);
	sbx__usage(m, &row, "stopped", 0);
	log_info("paused sandbox %s deleted: %s", id, reason);
	store_sbx_release(&row);
	return 0;
}

int sbx_kill(struct sbx_mgr *m, const char *id, const char *reason)
{
	if (sbx__claim(m, id, 60000) < 0)
		return -EBUSY;
	struct sbx *s = sbx_find(m, id, NULL);
	if (!s) {
		int r = kill_paused(m, id, reason);
		sbx__unclaim(m, id);
		return r;
	}
	struct vm *vm = sbx__detach(m, s);
	if (!vm) {
		sbx_put(s);
		sbx__unclaim(m, id);
		return 0;
	}
	/* A killed sandbox's disk is thrown away, so no graceful poweroff. */
	vm_stop(vm, 0);
	vm_free(vm, 0);
	sbx__net_down(m, sbx__take_slot(s));
	store_sbx_set_state(m->store, id, "stopped", reason);
	usage_stopped(s);
	log_info("sandbox %s stopped: %s", id, reason);
	sbx__done(s);
	sbx__unclaim(m, id);
	return 0;
}

int sbx__claim(struct sbx_mgr *m, const char *id, int timeout_ms)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&m->mu);
	for (;;) {
		int held = 0, free_slot = -1;
		for (int i = 0; i < MAX_BUSY; i++) {
			if (!m->busy[i][0])
				free_slot = free_slot < 0 ? i : free_slot;
			else if (!strcmp(m->busy[i], id))
				held = 1;
		}
		if (!held && free_slot >= 0) {
			snprintf(m->busy[free_slot], sizeof(m->busy[free_slot]), "%s", id);
			pthread_mutex_unlock(&m->mu);
			return 0;
		}
		if (pthread_cond_timedwait(&m->busy_cv, &m->mu, &until) == ETIMEDOUT) {
			pthread_mutex_unlock(&m->mu);
			return -EBUSY;
		}
	}
}

void sbx__unclaim(struct sbx_mgr *m, const char *id)
{
	pthread_mutex_lock(&m->mu);
	for (int i = 0; i < MAX_BUSY; i++)
		if (!strcmp(m->busy[i], id))
			m->busy[i][0] = '\0';
	pthread_cond_broadcast(&m->busy_cv);
	pthread_mutex_unlock(&m->mu);
}

void sbx_mgr_stats(struct sbx_mgr *m, struct sbx_stats *out)
{
	pthread_mutex_lock(&m->mu);
	*out = m->stats;
	out->live = 0;
	for (struct sbx *s = m->list; s; s = s->next)
		out->live++;
	pthread_mutex_unlock(&m->mu);
	out->pool_depth = sbx__pool_depth(m);
	out->live += out->pool_depth;
}

/* ---- creation, restore, expiry ---- */

void sbx__random_id(char *out, size_t n, const char *prefix)
{
	uint8_t b[8];
	if (getrandom(b, sizeof(b), 0) != sizeof(b))
		for (size_t i = 0; i < sizeof(b); i++) /* never in practice */
			b[i] = (uint8_t)(rand() ^ (int)time(NULL));
	snprintf(out, n, "%s%02x%02x%02x%02x%02x%02x%02x%02x", prefix, b[0], b[1], b[2], b[3], b[4],
		 b[5], b[6], b[7]);
}

/* 128 random bits in hex: every new sandbox's traffic token. */
static void random_token(char *out, size_t n)
{
	char a[17], b[17];
	sbx__random_id(a, sizeof(a), "");
	sbx__random_id(b, sizeof(b), "");
	snprintf(out, n, "%s%s", a, b);
}

void sbx__guest_paths(const struct sbx_mgr *m, const char *template, char *kernel, char *initrd,
		      char *image, size_t n)
{
	snprintf(kernel, n, "%s/bzImage", m->cfg.guest_dir);
	snprintf(initrd, n, "%s/initramfs.cpio", m->cfg.guest_dir);
	snprintf(image, n, "%s/templates/%s.erofs", m->cfg.guest_dir, template);
}

int sbx__publish(struct sbx_mgr *m, struct store_sbx *row, struct vm *vm, char *err,
		 size_t errlen)
{
	snprintf(row->state, sizeof(row->state), "running");
	row->qemu_pid = vm_pid(vm);
	random_token(row->traffic_token, sizeof(row->traffic_token));
	int r = store_sbx_insert(m->store, row);
	int stored = r == 0;
	if (r == 0)
		r = sbx__add(m, row, vm);
	if (r < 0) {
		snprintf(err, errlen, "cannot record sandbox: %s", strerror(-r));
		vm_free(vm, 0);
		sbx__net_down(m, row->net_slot);
		if (stored)
			store_sbx_set_state(m->store, row->id, "stopped", "crashed");
		return -EIO;
	}
	sbx__usage(m, row, "running", 0);
	return 0;
}

/* The body of sbx_create once a quota slot is held: a claim from the warm
 * pool, a restore of a checkpoint or of the template's snapshot, or a
 * cold boot, whichever comes first. row's identity is filled already. */
static int boot(struct sbx_mgr *m, const struct sbx_params *p, const struct store_ckpt *ck,
		struct store_sbx *row, char *err, size_t errlen)
{
	const struct sbx_config *c = &m->cfg;
	double t0 = clock_ms_f();
	struct vm *vm = NULL;
	int how = 0; /* 0 cold, 1 restored, 2 pool */
	int r = 0;
	row->net_slot = NET_NO_SLOT;
	if (!ck && sbx__pool_take(m, row, &vm) == 0) {
		how = 2;
	} else {
		char kernel[512], initrd[512], image[512], run[sizeof(row->run_dir)];
		sbx__guest_paths(m, row->template, kernel, initrd, image, sizeof(image));
		sbx__random_id(row->id, sizeof(row->id), "sbx_");
		snprintf(run, sizeof(run), "%s/vms/%s", c->state_dir, row->id);
		char snap[512];
		const char *restore = ck ? ck->dir : NULL;
		if (!restore && sbx__template_snapshot(m, row, snap, sizeof(snap)) == 0)
			restore = snap;
		struct vm_config vc = {
			.qemu = c->qemu, .accel = c->accel, .vcpus = row->vcpus,
			.memory_mb = row->memory_mb, .disk_mb = row->disk_mb, .kernel = kernel,
			.initrd = initrd, .template = image, .run_dir = run, .cache_dir = c->cache_dir,
			.hostname = row->id + 4, .restore = restore, .new_identity = 1,
		};
		r = sbx__start(m, &vc, row->network_json, &row->net_slot, &vm, err, errlen);
		if (r < 0 && restore && !ck) {
			/* A template snapshot that does not restore must not stop
			 * creates; one that is damaged or foreign is rebuilt. */
			log_warn("template snapshot %s: %s; booting instead", restore, err);
			if (r == -EBADMSG || r == -EPROTO || r == -ENOENT)
				sbx__template_bad(m, restore);
			vc.restore = NULL;
			r = sbx__start(m, &vc, row->network_json, &row->net_slot, &vm, err, errlen);
		}
		if (r < 0) {
			log_error("sandbox %s did not start: %s", row->id, err);
			return -EIO;
		}
		how = vc.restore != NULL;
		snprintf(row->run_dir, sizeof(row->run_dir), "%s", run);
	}
	/* The user's own bound on the guest's processes, on the cgroup that
	 * holds all the agent starts (docs/agent-protocol.md, Limits); the
	 * guest's RAM keeps it through pauses and forks. It only ever
	 * lowers the agent's own, which leaves the agent room to fork. */
	if (p->max_processes) {
		char cmd[200];
		snprintf(cmd, sizeof(cmd),
			 "f=/sys/fs/cgroup/cpuos/pids.max; c=$(cat $f); "
			 "if [ \"$c\" = max ] || [ %u -lt \"$c\" ]; then echo %u > $f; fi",
			 p->max_processes, p->max_processes);
		if ((r = sbx__run(vm, cmd, "root", NULL, 30000)) < 0) {
			snprintf(err, errlen, "cannot set the guest's process limit: %s", strerror(-r));
			vm_free(vm, 0);
			sbx__net_down(m, row->net_slot);
			return -EIO;
		}
	}
	row->created_at = now_s();
	row->expires_at = row->created_at + p->timeout_s;
	if ((r = sbx__publish(m, row, vm, err, errlen)) < 0)
		return r;
	double ms = clock_ms_f() - t0;
	pthread_mutex_lock(&m->mu);
	m->stats.creates++;
	m->stats.create_ms += ms;
	if (how == 0)
		m->stats.cold_boots++;
	else if (how == 1)
		m->stats.restores++;
	else
		m->stats.pool_claims++;
	pthread_mutex_unlock(&m->mu);
	log_info("sandbox %s started for '%s' (%s, %s) in %.0f ms", row->id, row->account,
		 row->template, how == 2 ? "warm pool" : how ? "restored" : "booted", ms);
	return 0;
}

int sbx_create(struct sbx_mgr *m, const char *account, const struct sbx_params *p,
	       struct store_sbx *row, char *err, size_t errlen)
{
	struct store_ckpt ck;
	memset(row, 0, sizeof(*row));
	if (p->checkpoint) {
		if (store_ckpt_get(m->store, account, p->checkpoint, &ck) < 0) {
			snprintf(err, errlen, "no checkpoint '%s'", p->checkpoint);
			return -ENXIO;
		}
		snprintf(row->template, sizeof(row->template), "%s", ck.template);
		row->vcpus = ck.vcpus;
		row->memory_mb = ck.memory_mb;
		row->disk_mb = ck.disk_mb;
		snprintf(row->parent, sizeof(row->parent), "%s", ck.id);
	} else {
		snprintf(row->template, sizeof(row->template), "%s", p->template);
		row->vcpus = p->vcpus;
		row->memory_mb = p->memory_mb;
		row->disk_mb = p->disk_mb;
	}
	char kernel[512], initrd[512], image[512];
	sbx__guest_paths(m, row->template, kernel, initrd, image, sizeof(image));
	if (!row->template[0] || strchr(row->template, '/') || access(image, R_OK) < 0) {
		snprintf(err, errlen, "unknown template '%s'", row->template);
		if (p->checkpoint)
			store_ckpt_release(&ck);
		return -ENOENT;
	}
	snprintf(row->account, sizeof(row->account), "%s", account);
	snprintf(row->key_id, sizeof(row->key_id), "%s", p->key_id ? p->key_id : "");
	snprintf(row->on_timeout, sizeof(row->on_timeout), "%s", p->kill_on_timeout ? "kill" : "pause");
	row->is_public = p->is_public;
	/* A checkpoint's own environment comes with it; the create's wins. */
	row->env_json = strdup(p->env_json ? p->env_json : p->checkpoint && ck.env_json ? ck.env_json : "{}");
	row->metadata_json = strdup(p->metadata_json ? p->metadata_json : "{}");
	row->network_json = strdup(p->network_json ? p->network_json : "");
	int r = -ENOMEM;
	if (!row->env_json || !row->metadata_json || !row->network_json)
		goto out;
	if ((r = sbx__secret_env(m, account, p->secrets_json, row, err, errlen)) < 0)
		goto out;
	int slot = sbx__reserve(m, account, row->vcpus, row->memory_mb, err, errlen);
	if (slot < 0) {
		r = slot;
		goto out;
	}
	r = boot(m, p, p->checkpoint ? &ck : NULL, row, err, errlen);
	sbx__unreserve(m, slot);
out:
	if (r < 0)
		store_sbx_release(row);
	if (p->checkpoint)
		store_ckpt_release(&ck);
	return r;
}

/* pid's command line, its NULs made spaces; 0 if it is gone. */
static int read_cmdline(int pid, char *cmd, size_t len)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, cmd, len - 1);
	close(fd);
	if (n <= 0)
		return 0;
	for (ssize_t i = 0; i < n; i++)
		if (!cmd[i])
			cmd[i] = ' ';
	cmd[n] = '\0';
	return 1;
}

/* Is pid a QEMU running from run_dir? Guards against a recycled pid. */
static int is_our_qemu(int pid, const char *run_dir)
{
	char cmd[8192];
	return read_cmdline(pid, cmd, sizeof(cmd)) && strstr(cmd, run_dir) != NULL;
}

void sbx__each_qemu(const char *prefix, void (*fn)(void *arg, int pid, const char *name),
		    void *arg)
{
	char cmd[8192], run[512];
	size_t plen = strlen(prefix);
	DIR *d = opendir("/proc");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		int pid = atoi(e->d_name);
		if (pid <= 0 || !read_cmdline(pid, cmd, sizeof(cmd)) || !strstr(cmd, "qemu-system") ||
		    qemu_run_dir_of(cmd, run, sizeof(run)) < 0)
			continue;
		const char *name = run + plen;
		if (!strncmp(run, prefix, plen) && *name && !strchr(name, '/'))
			fn(arg, pid, name);
	}
	if (d)
		closedir(d);
}

void sbx__kill_qemu(struct sbx_mgr *m, int pid, const char *run_dir)
{
	if (!is_our_qemu(pid, run_dir))
		return;
	/* A jailed one runs as a jail id: the helper's to signal. */
	if (!m->cfg.priv || priv_kill(m->cfg.priv, pid, SIGKILL) < 0)
		kill(pid, SIGKILL);
	for (int i = 0; i < 100 && is_our_qemu(pid, run_dir); i++)
		usleep(50000);
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
			r = vm_attach(row->run_dir, row->qemu_pid, priv_launch_ops(m->cfg.priv), &vm, err,
				      sizeof(err));
		if (r == 0 && sbx__add(m, row, vm) == 0) {
			sbx__net_keep(m, row);
			log_info("sandbox %s re-attached (qemu pid %d)", row->id, row->qemu_pid);
			continue;
		}
		if (r == 0)
			vm_free(vm, 1);
		else if (is_our_qemu(row->qemu_pid, row->run_dir)) {
			/* Not left to run beside the row: a guest that goes
			 * on writes to the files of a pause. */
			log_warn("sandbox %s: killing its QEMU (pid %d): %s", row->id, row->qemu_pid, err);
			sbx__kill_qemu(m, row->qemu_pid, row->run_dir);
		}
		/* Killed between the pause's seal and the row's update: the
		 * pause is complete if its manifest was written. */
		struct snap_manifest sm;
		char serr[256];
		if (r != 0 && snap_load(row->run_dir, &sm, 0, serr, sizeof(serr)) == 0) {
			long long now = now_s(), left = row->expires_at - now;
			store_sbx_set_paused(m->store, row->id, now, left > 0 ? left : 0);
			store_sbx_set_network(m->store, row->id, NULL, NET_NO_SLOT);
			sbx__usage(m, row, "paused", sbx__paused_bytes(row->run_dir));
			log_info("sandbox %s was paused when the daemon stopped", row->id);
			continue;
		}
		log_warn("sandbox %s lost: %s", row->id, err[0] ? err : "its QEMU is gone");
		store_sbx_set_state(m->store, row->id, "lost", "lost");
		sbx__usage(m, row, "stopped", 0);
	}
	store_sbx_free_list(rows, n);
	if (m->cfg.net)
		net_sweep(m->cfg.net); /* the namespaces of VMs that are gone */
	sbx__snap_cleanup(m);
	if (sbx__pools_start(m) < 0)
		log_error("template snapshots and warm pools could not start");
}

struct killer {
	struct sbx_mgr *m;
	char id[32];
	int pause; /* on_timeout: pause */
};

/* Paused sandboxes older than the retention are deleted. */
static void expire_paused(struct sbx_mgr *m)
{
	struct store_sbx *rows;
	size_t n;
	if (store_sbx_paused(m->store, &rows, &n) < 0)
		return;
	long long now = now_s();
	for (size_t i = 0; i < n; i++) {
		/* A sandbox in a transition is left for the next turn: this
		 * thread also runs the timeouts. */
		if (rows[i].paused_at + m->cfg.paused_retention_s > now ||
		    sbx__claim(m, rows[i].id, 0) < 0)
			continue;
		kill_paused(m, rows[i].id, "retention"); /* checks it is still paused */
		sbx__unclaim(m, rows[i].id);
	}
	store_sbx_free_list(rows, n);
}

static void *killer_main(void *arg)
{
	struct killer *k = arg;
	struct sbx_mgr *m = k->m;
	log_set_tag("expiry");
	char err[256];
	if (!k->pause || sbx_pause(m, k->id, err, sizeof(err)) < 0) {
		if (k->pause)
			log_warn("sandbox %s did not pause at its timeout (%s): killed", k->id, err);
		sbx_kill(m, k->id, "timeout");
	}
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
	for (unsigned turn = 0;; ) {
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
				*k = (struct killer){ .m = m, .pause = s->pause_on_timeout };
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
		if (++turn % 20 == 0) /* every 5 s */
			expire_paused(m);
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
	pthread_cond_init(&m->busy_cv, NULL);
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
	sbx__pools_stop(m);
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
	sbx__pools_free(m);
	pthread_cond_destroy(&m->killers_cv);
	pthread_cond_destroy(&m->busy_cv);
	pthread_mutex_destroy(&m->mu);
	free(m);
}
