/*
 * sbx_snap: the sandbox transitions that go through snapshots: pause and
 * resume (in the sandbox's own run directory), fork (a snapshot restored N
 * times, then thrown away) and checkpoints (a sealed snapshot kept under a
 * name). Each is a transition of the state table (sbx_state.c) that the
 * thread making it owns from start to end, so a pause, a resume, a
 * snapshot and a kill of one sandbox never overlap.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/crash.h"
#include "common/errbuf.h"
#include "common/fs.h"
#include "common/log.h"
#include "runner/snap.h"
#include "runner/vm.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CLAIM_MS 60000
#define RESUME_DEFAULT_S 300 /* a sandbox paused by its timeout gets this again */

static long long now_s(void)
{
	return (long long)time(NULL);
}

long long sbx__paused_bytes(const char *run_dir)
{
	/* Not the base a pause of written pages links: the snapshot's, shared. */
	static const char *const files[] = { "mem", "state", "pages", "scratch.qcow2" };
	char path[300];
	long long n = 0;
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", run_dir, files[i]);
		n += snap_file_bytes(path);
	}
	return n;
}

static void count(struct sbx_mgr *m, unsigned long long *n, double *ms_sum, double ms)
{
	pthread_mutex_lock(&m->mu);
	(*n)++;
	*ms_sum += ms;
	pthread_mutex_unlock(&m->mu);
}

/* Why s (which settled in state now) cannot take a pause, a resume or a
 * snapshot: 0 when it is already where the caller wants it (want), -EBUSY
 * when another node has just taken it, else -ESHUTDOWN. */
static int refuse(struct sbx *s, enum sbx_state now, enum sbx_state want, char *err,
		  size_t errlen)
{
	if (now == want)
		return 0;
	if (now == SBX_MOVED) /* its row names the node that took it */
		return errbuf_set(err, errlen, -EBUSY,
				  "sandbox '%s' moved to another node just now; try again", s->id);
	snprintf(err, errlen, "sandbox '%s' is %s", s->id,
		 now == SBX_RUNNING || now == SBX_SNAPSHOTTING ? "running" : sbx_state_name(now));
	return -ESHUTDOWN;
}

/* The object of id for a transition, or -ENOENT/-ESHUTDOWN with err. */
static int object(struct sbx_mgr *m, const char *id, struct sbx **out, char *err, size_t errlen)
{
	if ((*out = sbx__get(m, id)))
		return 0;
	struct store_sbx row;
	if (store_sbx_get(m->store, id, &row) < 0) {
		snprintf(err, errlen, "no sandbox '%s'", id);
		return -ENOENT;
	}
	int r = sbx_elsewhere(m, &row, err, errlen);
	if (r == 0 && (*out = sbx__get(m, id))) { /* taken over: here now */
		store_sbx_release(&row);
		return 0;
	}
	if (r == 0)
		snprintf(err, errlen, "sandbox '%s' is %s", id, row.state);
	store_sbx_release(&row);
	return r < 0 ? r : -ESHUTDOWN;
}

/* Starts transition ev of s: 0, 1 when s is already in state want, or
 * -EBUSY/-ESHUTDOWN with err. */
static int start(struct sbx *s, enum sbx_event ev, enum sbx_state want, char *err,
		 size_t errlen)
{
	enum sbx_state now;
	int r = sbx__begin(s, ev, CLAIM_MS, &now);
	if (r == -EBUSY)
		snprintf(err, errlen, "sandbox '%s' is busy", s->id);
	else if (r == -EPERM && (r = refuse(s, now, want, err, errlen)) == 0)
		r = 1;
	return r;
}

int sbx_pause(struct sbx_mgr *m, const char *id, char *err, size_t errlen)
{
	return sbx__pause(m, id, "api", err, errlen);
}

int sbx__pause(struct sbx_mgr *m, const char *id, const char *cause, char *err, size_t errlen)
{
	struct sbx *s;
	int r = object(m, id, &s, err, errlen);
	if (r < 0)
		return r;
	if ((r = start(s, SBX_EV_PAUSE, SBX_PAUSED, err, errlen)) != 0) {
		sbx_put(s);
		return r > 0 ? 0 : r;
	}
	double t0 = clock_ms_f();
	pthread_mutex_lock(&m->mu);
	long long left = s->expires_at - now_s();
	pthread_mutex_unlock(&m->mu);
	int slot;
	struct vm *vm = sbx__stop_vm(s, &slot);
	struct store_sbx row;
	int have_row = store_sbx_get(m->store, id, &row) == 0;
	char e2[256];
	r = vm ? vm_pause(vm, err, errlen) : -ESHUTDOWN;
	if (!vm)
		snprintf(err, errlen, "sandbox '%s' has no VM", id);
	if (r < 0 && (!vm || vm_state(vm) != VM_RUNNING || !have_row)) {
		/* QEMU is gone but the pause is not complete (its manifest
		 * could not be written): the files stay for a person to see. */
		log_error("sandbox %s: pause failed after QEMU ended: %s", id, err);
		if (vm)
			vm_free(vm, 1);
		sbx__net_down(m, slot);
		struct sbx_facts f = { .end_reason = "lost" };
		sbx__fire(s, SBX_EV_LOST, &f, SBX_FIRE_FORCE, e2, sizeof(e2));
		r = -EIO;
	} else if (r < 0) {
		/* It runs on, under a new pump. */
		log_error("sandbox %s did not pause: %s", id, err);
		if (sbx__run_vm(s, vm, slot) == 0) {
			sbx__fire(s, SBX_EV_FAILED, NULL, 0, e2, sizeof(e2));
		} else {
			vm_stop(vm, 0);
			vm_free(vm, 0);
			sbx__net_down(m, slot);
			sbx__fire(s, SBX_EV_LOST, &(struct sbx_facts){ .end_reason = "crashed" },
				  SBX_FIRE_FORCE, e2, sizeof(e2));
		}
		r = -EIO;
	} else {
		vm_free(vm, 1);
		sbx__net_down(m, slot);
		crash_point("pause.before_store");
		long long now = now_s();
		struct sbx_facts f = { .paused_at = now, .timeout_left_s = left > 0 ? left : 0,
				       .storage_bytes = sbx__paused_bytes(row.run_dir), .cause = cause };
		pthread_mutex_lock(&m->mu);
		s->paused_at = now;
		pthread_mutex_unlock(&m->mu);
		r = sbx__fire(s, SBX_EV_PAUSED, &f, SBX_FIRE_FORCE, err, errlen);
		sbx__blob_kick(m);
		count(m, &m->stats.pauses, &m->stats.pause_ms, clock_ms_f() - t0);
		log_info("sandbox %s paused in %.0f ms", id, clock_ms_f() - t0);
	}
	if (have_row)
		store_sbx_release(&row);
	sbx_put(s);
	return r;
}

int sbx_resume(struct sbx_mgr *m, const char *id, char *err, size_t errlen)
{
	struct sbx *s;
	int r = object(m, id, &s, err, errlen);
	if (r < 0)
		return r;
	if ((r = start(s, SBX_EV_RESUME, SBX_RUNNING, err, errlen)) != 0) {
		sbx_put(s);
		return r > 0 ? 0 : r;
	}
	double t0 = clock_ms_f();
	char e2[256];
	struct store_sbx row;
	if ((r = store_sbx_get(m->store, id, &row)) < 0) {
		snprintf(err, errlen, "no sandbox '%s'", id);
		sbx__fire(s, SBX_EV_FAILED, NULL, 0, e2, sizeof(e2));
		sbx_put(s);
		return r;
	}
	int held = sbx__reserve(m, row.account, row.vcpus, row.memory_mb, err, errlen);
	if (held < 0) {
		r = held;
		goto out;
	}
	/* Its pause gone from this disk: the object store's copy. */
	if ((r = sbx__blob_fetch(m, &row, err, errlen)) < 0) {
		log_error("sandbox %s did not resume: %s", id, err);
		r = -EIO;
		sbx__unreserve(m, held);
		goto out;
	}
	const struct sbx_config *c = &m->cfg;
	char kernel[512], initrd[512], image[512];
	sbx__guest_paths(m, row.template, kernel, initrd, image, sizeof(image));
	struct vm_config vc = {
		.qemu = c->qemu, .qemu_build = c->qemu_build, .accel = c->accel,
		.vcpus = row.vcpus, .memory_mb = row.memory_mb,
		.disk_mb = row.disk_mb, .kernel = kernel, .initrd = initrd, .template = image,
		.run_dir = row.run_dir, .cache_dir = c->cache_dir, .hostname = row.id + 4,
		.restore = row.run_dir, .generation = row.generation + 1,
	};
	struct vm *vm;
	int slot;
	r = sbx__start(m, &vc, row.network_json, &slot, &vm, err, errlen);
	if (r < 0) {
		log_error("sandbox %s did not resume: %s", id, err);
		r = -EIO;
		sbx__unreserve(m, held);
		goto out;
	}
	long long left = row.timeout_left_s > 0 ? row.timeout_left_s : RESUME_DEFAULT_S;
	struct sbx_facts f = { .expires_at = now_s() + left, .qemu_pid = vm_pid(vm),
			       .generation = row.generation + 1, .net_slot = slot };
	pthread_mutex_lock(&m->mu);
	s->expires_at = f.expires_at;
	pthread_mutex_unlock(&m->mu);
	pthread_mutex_lock(&s->mu);
	s->generation = f.generation;
	pthread_mutex_unlock(&s->mu);
	crash_point("resume.before_store");
	/* The VM serves from the moment the row says it runs. */
	if ((r = sbx__run_vm(s, vm, slot)) == 0 &&
	    (r = sbx__fire(s, SBX_EV_RESUMED, &f, 0, err, errlen)) < 0)
		vm = sbx__stop_vm(s, &slot);
	if (r < 0) {
		/* Not lost: it pauses again, as it is now. */
		if (vm_pause(vm, e2, sizeof(e2)) < 0)
			log_error("sandbox %s could not pause again: %s", id, e2);
		vm_free(vm, 1);
		sbx__net_down(m, slot);
		r = -EIO;
	} else {
		count(m, &m->stats.resumes, &m->stats.resume_ms, clock_ms_f() - t0);
		log_info("sandbox %s resumed in %.0f ms", id, clock_ms_f() - t0);
	}
	sbx__unreserve(m, held);
out:
	if (r < 0)
		sbx__fire(s, SBX_EV_FAILED, NULL, 0, e2, sizeof(e2));
	store_sbx_release(&row);
	sbx_put(s);
	return r;
}

/* Takes a snapshot of running sandbox id into dir: its row in *row. */
static int snapshot(struct sbx_mgr *m, const char *id, const char *dir, int sealed,
		    struct store_sbx *row, char *err, size_t errlen)
{
	struct sbx *s;
	int r = object(m, id, &s, err, errlen);
	if (r < 0)
		return r;
	if ((r = start(s, SBX_EV_SNAPSHOT, SBX_NSTATES, err, errlen)) < 0) {
		sbx_put(s);
		return r;
	}
	char e2[256];
	if ((r = store_sbx_get(m->store, id, row)) < 0)
		snprintf(err, errlen, "no sandbox '%s'", id);
	if (r == 0) {
		char parent[300];
		snprintf(parent, sizeof(parent), "%s", dir);
		*strrchr(parent, '/') = '\0';
		fs_mkdir_p(parent, 0700, (uid_t)-1, (gid_t)-1);
		/* Under the sandbox lock the pump stays out of QMP while the
		 * snapshot drives it, and requests wait the few ms it stands
		 * still. */
		pthread_mutex_lock(&s->mu);
		if (!s->vm) {
			snprintf(err, errlen, "sandbox '%s' is not running", id);
			r = -ESHUTDOWN;
		} else {
			r = vm_snapshot(s->vm, dir, sealed, err, errlen);
		}
		pthread_mutex_unlock(&s->mu);
		if (r < 0)
			store_sbx_release(row);
	}
	struct sbx_facts f = { .event = r < 0 ? NULL : sealed ? "checkpointed" : "forked" };
	sbx__fire(s, SBX_EV_DONE, &f, 0, e2, sizeof(e2));
	sbx_put(s);
	return r;
}

/* A fork's snapshot directory is also the run directory of the VM that
 * moves its RAM into a file: both kinds of file go. */
static void remove_fork_dir(const char *dir)
{
	vm_remove_files(dir);
	snap_remove(dir);
}

/* A parent whose RAM is private (it was itself restored copy-on-write)
 * and streamed (its QEMU before 8.2, or CPUOS_STREAM_PAUSES) leaves a
 * snapshot with the RAM in its state, which every child would load page
 * by page. For several children it pays to load it once: into a memory
 * file of the snapshot's own, by a VM resumed in the snapshot directory
 * and paused again at once. The children then map that file
 * copy-on-write. On failure the snapshot is left as it was made. One of
 * written pages is left as it is: its children map the parent's base and
 * write only the parent's pages. */
static void to_file_snapshot(struct sbx_mgr *m, const struct store_sbx *parent, const char *dir,
			     const char *kernel, const char *initrd, const char *image)
{
	struct snap_manifest sm;
	char err[512], a[600], b[600];
	if (snap_load(dir, &sm, 0, err, sizeof(err)) < 0 || sm.ram_in_file || sm.ram_diff)
		return;
	/* In place, the layer has the run directory's name; the manifest
	 * names the other until the pause writes a new one. A copy (a
	 * reflink where the file system has them), not a link: the jail
	 * makes no file of two names the group's to write (jail.c). */
	snprintf(a, sizeof(a), "%s/disk.qcow2", dir);
	snprintf(b, sizeof(b), "%s/scratch.qcow2", dir);
	if (snap_copy(a, b) < 0)
		return;
	const struct sbx_config *c = &m->cfg;
	struct vm_config vc = {
		.qemu = c->qemu, .qemu_build = c->qemu_build, .accel = c->accel,
		.vcpus = parent->vcpus,
		.memory_mb = parent->memory_mb, .disk_mb = parent->disk_mb, .kernel = kernel,
		.initrd = initrd, .template = image, .run_dir = dir, .cache_dir = c->cache_dir,
		.restore = dir, .generation = parent->generation,
	};
	struct vm *vm;
	int slot;
	double t0 = clock_ms_f();
	int r = sbx__start(m, &vc, NET_DENY_ALL_TEXT, &slot, &vm, err, sizeof(err));
	if (r == 0) {
		crash_point("fork.moving_ram");
		r = vm_pause(vm, err, sizeof(err));
		vm_free(vm, 1);
		sbx__net_down(m, slot);
	}
	if (r < 0)
		log_warn("fork of %s: the snapshot keeps its RAM in its state: %s", parent->id, err);
	else
		log_info("fork of %s: RAM moved into a file of its own in %.0f ms", parent->id,
			 clock_ms_f() - t0);
}

int sbx_fork(struct sbx_mgr *m, const char *id, unsigned count_n, struct store_sbx *rows,
	     char *err, size_t errlen)
{
	double t0 = clock_ms_f();
	char dir[512], tag[32];
	sbx__random_id(tag, sizeof(tag), "fork-");
	snprintf(dir, sizeof(dir), "%s/snapshots/%s", m->cfg.state_dir, tag);
	struct store_sbx parent;
	int r = snapshot(m, id, dir, 0, &parent, err, errlen);
	if (r < 0)
		return r;
	/* The parent runs on: the rest is the children's. */
	crash_point("fork.after_snapshot");
	const struct sbx_config *c = &m->cfg;
	char kernel[512], initrd[512], image[512];
	sbx__guest_paths(m, parent.template, kernel, initrd, image, sizeof(image));
	if (count_n > 1)
		to_file_snapshot(m, &parent, dir, kernel, initrd, image);
	long long left = parent.expires_at - now_s();
	unsigned made = 0;
	for (; made < count_n; made++) {
		int slot = sbx__reserve(m, parent.account, parent.vcpus, parent.memory_mb, err, errlen);
		if (slot < 0) {
			r = slot;
			break;
		}
		struct store_sbx *row = &rows[made];
		memset(row, 0, sizeof(*row));
		sbx__random_id(row->id, sizeof(row->id), "sbx_");
		snprintf(row->run_dir, sizeof(row->run_dir), "%s/vms/%s", c->state_dir, row->id);
		struct vm_config vc = {
			.qemu = c->qemu, .qemu_build = c->qemu_build, .accel = c->accel,
			.vcpus = parent.vcpus,
			.memory_mb = parent.memory_mb, .disk_mb = parent.disk_mb, .kernel = kernel,
			.initrd = initrd, .template = image, .run_dir = row->run_dir,
			.cache_dir = c->cache_dir, .hostname = row->id + 4, .restore = dir,
			.new_identity = 1, .generation = parent.generation + 1,
		};
		struct vm *vm;
		/* A child has the parent's policy and a network of its own. */
		r = sbx__start(m, &vc, parent.network_json, &row->net_slot, &vm, err, errlen);
		if (r == 0) {
			snprintf(row->account, sizeof(row->account), "%s", parent.account);
			snprintf(row->key_id, sizeof(row->key_id), "%s", parent.key_id);
			snprintf(row->template, sizeof(row->template), "%s", parent.template);
			snprintf(row->on_timeout, sizeof(row->on_timeout), "%s", parent.on_timeout);
			row->idle_timeout_s = parent.idle_timeout_s;
			snprintf(row->parent, sizeof(row->parent), "%s", parent.id);
			row->vcpus = parent.vcpus;
			row->memory_mb = parent.memory_mb;
			row->disk_mb = parent.disk_mb;
			row->is_public = parent.is_public;
			row->generation = parent.generation + 1;
			row->created_at = now_s();
			row->expires_at = row->created_at + (left > 0 ? left : RESUME_DEFAULT_S);
			row->env_json = strdup(parent.env_json);
			row->metadata_json = strdup(parent.metadata_json);
			row->network_json = strdup(parent.network_json);
			row->secrets_json = strdup(parent.secrets_json);
			row->transforms_json = strdup(parent.transforms_json);
			r = row->env_json && row->metadata_json && row->network_json &&
					    row->secrets_json && row->transforms_json
				    ? sbx__publish(m, row, vm, err, errlen)
				    : -ENOMEM;
			if (r == -ENOMEM) {
				vm_free(vm, 0);
				sbx__net_down(m, row->net_slot);
			}
		}
		sbx__unreserve(m, slot);
		if (r < 0) {
			store_sbx_release(row);
			r = r == -EDQUOT ? r : -EIO;
			break;
		}
	}
	/* Every child maps the memory file copy-on-write and has its own
	 * disk: the open mappings keep the file's pages, the name can go. */
	remove_fork_dir(dir);
	if (r < 0) {
		for (unsigned i = 0; i < made; i++) {
			sbx_kill(m, rows[i].id, "killed");
			store_sbx_release(&rows[i]);
		}
	} else {
		count(m, &m->stats.forks, &m->stats.fork_ms, clock_ms_f() - t0);
		log_info("sandbox %s forked %u times in %.0f ms", id, count_n, clock_ms_f() - t0);
	}
	store_sbx_release(&parent);
	return r;
}

int sbx_checkpoint(struct sbx_mgr *m, const char *id, const char *name, struct store_ckpt *out,
		   char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	sbx__random_id(out->id, sizeof(out->id), "ckp_");
	snprintf(out->dir, sizeof(out->dir), "%s/checkpoints/%s", m->cfg.state_dir, out->id);
	struct store_sbx row;
	int r = snapshot(m, id, out->dir, 1, &row, err, errlen);
	if (r < 0)
		return r;
	crash_point("checkpoint.before_store");
	snprintf(out->name, sizeof(out->name), "%s", name);
	snprintf(out->account, sizeof(out->account), "%s", row.account);
	snprintf(out->sbx_id, sizeof(out->sbx_id), "%s", id);
	snprintf(out->template, sizeof(out->template), "%s", row.template);
	out->vcpus = row.vcpus;
	out->memory_mb = row.memory_mb;
	out->disk_mb = row.disk_mb;
	out->env_json = row.env_json;
	row.env_json = NULL;
	out->created_at = now_s();
	/* Not the base of written pages: the template's, shared. */
	static const char *const files[] = { "mem", "state", "pages", "disk.qcow2" };
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char path[600];
		snprintf(path, sizeof(path), "%s/%s", out->dir, files[i]);
		out->size_bytes += snap_file_bytes(path);
	}
	r = store_ckpt_insert(m->store, out);
	if (r < 0) {
		snap_remove(out->dir);
		store_ckpt_release(out);
		snprintf(err, errlen, r == -EEXIST ? "a checkpoint named '%s' exists" : "cannot record checkpoint '%s'", name);
	} else {
		sbx__blob_kick(m); /* its upload is due */
	}
	store_sbx_release(&row);
	return r;
}

int sbx_ckpt_delete(struct sbx_mgr *m, const struct store_ckpt *c)
{
	int r = store_ckpt_delete(m->store, c->id);
	if (r == 0) {
		snap_remove(c->dir); /* sandboxes made from it keep their mappings */
		if (c->stored[0])
			sbx__blob_kick(m); /* its objects go too */
	}
	return r;
}

static void kill_fork_vm(void *arg, int pid, const char *name)
{
	struct sbx_mgr *m = arg;
	char run[600];
	if (strncmp(name, "fork-", 5))
		return;
	snprintf(run, sizeof(run), "%s/snapshots/%s", m->cfg.state_dir, name);
	sbx__kill_qemu(m, pid, run);
}

/* Checkpoints the last daemon sealed but did not record: nothing can
 * name them. */
static void remove_unrecorded_checkpoints(struct sbx_mgr *m)
{
	char dir[512], path[800];
	snprintf(dir, sizeof(dir), "%s/checkpoints/", m->cfg.state_dir);
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		struct store_ckpt c;
		if (strncmp(e->d_name, "ckp_", 4))
			continue;
		/* Only a checkpoint the store says it has not: a store that
		 * does not answer now (PostgreSQL away) says nothing. */
		int r = store_ckpt_get(m->store, NULL, e->d_name, &c);
		if (r == 0)
			store_ckpt_release(&c);
		if (r != -ENOENT)
			continue;
		snprintf(path, sizeof(path), "%s%s", dir, e->d_name);
		log_info("removing checkpoint %s: it was never recorded", e->d_name);
		snap_remove(path);
	}
	if (d)
		closedir(d);
}

void sbx__snap_cleanup(struct sbx_mgr *m)
{
	remove_unrecorded_checkpoints(m);
	/* Forks the last daemon did not finish: nothing refers to them but
	 * perhaps the VM that was moving a fork's RAM into its file. */
	char dir[512], path[800];
	snprintf(dir, sizeof(dir), "%s/snapshots/", m->cfg.state_dir);
	sbx__each_qemu(dir, kill_fork_vm, m);
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, "fork-", 5))
			continue;
		snprintf(path, sizeof(path), "%s%s", dir, e->d_name);
		remove_fork_dir(path);
	}
	if (d)
		closedir(d);
}
