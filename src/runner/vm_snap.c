/*
 * vm_snap: the VM as a snapshot: pause into the run directory, snapshots of
 * a running VM, and the restore half of vm_start and vm_attach (the files a
 * restore maps, the agent of a restored guest, P_RESTORED). The records
 * and file copies are snap.c's; the QMP steps migrate.c's.
 */
#include "runner/vm_impl.h"

#include "common/clock.h"
#include "common/crash.h"
#include "common/log.h"
#include "common/proto.h"
#include "runner/agentc.h"
#include "runner/migrate.h"
#include "common/fs.h"
#include "common/jail_spec.h"
#include "common/launch.h"
#include "runner/qemu.h"
#include "runner/qemu_build.h"
#include "runner/qmp.h"
#include "runner/ramdiff.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* How long a save or load may take: the state is KBs when RAM is a file,
 * but all of RAM when it is streamed. */
int vm__migrate_ms(const struct vm *vm)
{
	return 60000 + (int)(vm->env.memory_mb > 1000000 ? 1000000 : vm->env.memory_mb) * 20;
}

/* The guest after a restore: its clock is the pause behind, its RNG is a
 * copy of the one it was saved with (and of every other fork's), and a new
 * sandbox wants a name of its own. Sent first, so it comes before any
 * request. Without new identity only clock, entropy and generation. */
int vm__send_restored(struct vm *vm, const struct vm_config *cfg)
{
	uint8_t seed[64];
	if (getrandom(seed, sizeof(seed), 0) != (ssize_t)sizeof(seed))
		return -EIO;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct pbuf *b = agentc_begin(vm->agent, P_RESTORED, NULL, NULL, NULL);
	if (!b)
		return -ENOMEM;
	int r = proto_put_u64(b, A_TIME_NS, (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec);
	if (!r)
		r = proto_put(b, A_BYTES, seed, sizeof(seed));
	if (!r)
		r = proto_put_u32(b, A_GENERATION, cfg->generation);
	if (!r && cfg->new_identity) {
		uint8_t id[16];
		char hex[33];
		if (getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id))
			r = -EIO;
		for (int i = 0; !r && i < 16; i++)
			snprintf(hex + 2 * i, 3, "%02x", id[i]);
		if (!r)
			r = proto_put_str(b, A_MACHINE_ID, hex);
		if (!r && cfg->hostname)
			r = proto_put_str(b, A_HOSTNAME, cfg->hostname);
	}
	if (r < 0) {
		agentc_abort(vm->agent);
		return r;
	}
	return agentc_end(vm->agent);
}

/* Where a restore takes its files from, once its manifest is read: the
 * layer is copied unless the VM resumes in place; RAM maps the
 * snapshot's file copy-on-write, or its own file (in place), or a new
 * file of its own filled from the state (RAM that was streamed). */
int vm__prepare_restore(struct vm *vm, const struct vm_config *cfg, struct snap_manifest *m,
			   char *mem, size_t memlen, char *err, size_t errlen)
{
	int r = snap_load(cfg->restore, m, 0, err, errlen);
	if (r < 0)
		return r;
	if (m->env.vcpus != (cfg->vcpus ? cfg->vcpus : 1) ||
	    m->env.memory_mb != (cfg->memory_mb ? cfg->memory_mb : 512)) {
		snprintf(err, errlen, "snapshot is %u vCPU %u MB, asked for %u vCPU %u MB",
			 m->env.vcpus, m->env.memory_mb, cfg->vcpus, cfg->memory_mb);
		return -EINVAL;
	}
	int in_place = !strcmp(cfg->restore, cfg->run_dir);
	char path[600];
	if (!in_place) {
		snprintf(path, sizeof(path), "%s/%s", cfg->restore, m->files[SNAP_DISK].name);
		char dst[300];
		snprintf(dst, sizeof(dst), "%s/scratch.qcow2", vm->run_dir);
		unlink(dst);
		if ((r = snap_copy(path, dst)) < 0) {
			snprintf(err, errlen, "cannot copy the snapshot's disk: %s", strerror(-r));
			return r;
		}
	}
	if (m->ram_diff) {
		/* Its pages over its base (vm__link_base links a snapshot's
		 * into the run directory). */
		if (strcmp(m->files[SNAP_BASE].name, JAIL_RAM_BASE)) {
			snprintf(err, errlen, "a snapshot of written pages has its base in '"
					      JAIL_RAM_BASE "'");
			return -EBADMSG;
		}
		snprintf(mem, memlen, "%s/" JAIL_RAM_BASE, in_place ? vm->run_dir : cfg->restore);
		snprintf(vm->ram_base, sizeof(vm->ram_base), "%s", mem);
		snprintf(vm->ram_base_sha, sizeof(vm->ram_base_sha), "%s",
			 m->files[SNAP_BASE].sha256);
		vm->ram_shared = 0;
	} else if (m->ram_in_file && !in_place) {
		snprintf(mem, memlen, "%s/%s", cfg->restore, m->files[SNAP_MEM].name);
		snprintf(vm->ram_base, sizeof(vm->ram_base), "%s", mem);
		snprintf(vm->ram_base_sha, sizeof(vm->ram_base_sha), "%s", m->files[SNAP_MEM].sha256);
		vm->ram_shared = 0;
	} else {
		snprintf(mem, memlen, "%s/mem", vm->run_dir);
		if (!m->ram_in_file)
			unlink(mem); /* filled from the state, page by page */
		vm->ram_shared = 1;
		/* RAM of its own from here on: a base left is of no use. */
		snprintf(path, sizeof(path), "%s/" JAIL_RAM_BASE, vm->run_dir);
		unlink(path);
	}
	return 0;
}

void vm__link_base(struct vm *vm, char *mem, size_t memlen)
{
	char base[300];
	snprintf(base, sizeof(base), "%s/" JAIL_RAM_BASE, vm->run_dir);
	if (!strcmp(mem, base))
		return;
	unlink(base);
	if (link(mem, base) < 0) {
		log_debug("%s: cannot link '%s' as its base (%s): its pauses stream the RAM",
			  vm->run_dir, mem, strerror(errno));
		return;
	}
	snprintf(mem, memlen, "%s", base);
	snprintf(vm->ram_base, sizeof(vm->ram_base), "%s", base);
}

int vm__load_pages(struct vm *vm, const char *dir, char *err, size_t errlen)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/pages", dir);
	const struct launch_ops *ops = vm->launch;
	struct ramdiff_block b[RAMDIFF_MAX_BLOCKS];
	int n, mem = -1, in = fs_open_file(path, O_RDONLY, 0);
	uint64_t pages = 0;
	double t0 = clock_ms_f();
	int r = in;
	if (in < 0)
		snprintf(err, errlen, "cannot open '%s': %s", path, strerror(-in));
	else
		r = ramdiff_blocks(vm->qmp, b, &n, ((uint64_t)vm->env.memory_mb + 64) << 20, err,
				   errlen);
	if (r >= 0)
		r = ops->mem_open(ops->ctx, vm->pid, vm->jail_uid, LAUNCH_MEM, &mem, err, errlen);
	if (r >= 0)
		r = ramdiff_load(mem, b, n, in, &pages, err, errlen);
	if (in >= 0)
		close(in);
	if (mem >= 0)
		close(mem);
	if (r >= 0)
		log_debug("%s: %llu pages written back in %.1f ms", vm->run_dir,
			  (unsigned long long)pages, clock_ms_f() - t0);
	return r < 0 ? r : 0;
}

/* The agent of a restored guest is up already, but it may not know that
 * the host it served is gone: QEMU tells the guest of a host that left
 * only if it sees the new one later, and a snapshot of a running VM
 * carries the old host's connection, maybe mid-frame. A host that is
 * not answered soon closes and connects again, which the guest sees. */
int vm__connect_restored(struct vm *vm, const char *path, char *err, size_t errlen)
{
	int r = -ETIMEDOUT;
	/* 0.5 s is several times what an answer takes; patience grows in
	 * case the host is merely slow. 30 s in all. */
	for (int wait = 500, spent = 0; spent < 30000 && r < 0; spent += wait, wait = wait < 4000 ? wait * 2 : wait) {
		r = agentc_connect(path, wait, &vm->agent, err, errlen);
		if (r < 0 && vm__reap(vm, 0))
			return r;
	}
	return r;
}

/* A pause in the run directory is undone before the guest runs again and
 * writes to its RAM file and disk: a manifest beside them would be taken
 * for a complete pause after a crash. */
void vm__drop_pause(struct vm *vm)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/" SNAP_MANIFEST, vm->run_dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/state", vm->run_dir);
	unlink(path);
	/* The base stays: the RAM maps it, the next pause needs it. */
	snprintf(path, sizeof(path), "%s/pages", vm->run_dir);
	unlink(path);
}

static int query_status(struct vm *vm, char *status, size_t n, char *err, size_t errlen)
{
	json_t *st = NULL;
	if (qmp_command(vm->qmp, "query-status", NULL, 2000, &st, err, errlen) < 0)
		return -EIO;
	snprintf(status, n, "%s", json_string_value(json_object_get(st, "status")) ?: "");
	json_decref(st);
	return 0;
}

/* A daemon that died while a snapshot had the VM stopped left it stopped,
 * maybe with the save still being written (the VM is "paused" then, and a
 * cont would be undone when the save ends): once the save is over, the VM
 * goes on. One that died during a resume may leave QEMU waiting for, or
 * loading, the state: that is no VM to go on with, and its pause is
 * whole. */
int vm__go_on(struct vm *vm, char *err, size_t errlen)
{
	char status[32];
	if (query_status(vm, status, sizeof(status), err, errlen) < 0)
		return -EIO;
	if (!strcmp(status, "inmigrate")) {
		snprintf(err, errlen, "QEMU has not loaded the state of its resume");
		return -EAGAIN;
	}
	for (int i = 0; i < 200; i++) {
		json_t *mig = NULL;
		if (qmp_command(vm->qmp, "query-migrate", NULL, 2000, &mig, err, errlen) < 0)
			break;
		const char *ms = json_string_value(json_object_get(mig, "status"));
		int busy = ms && strcmp(ms, "completed") && strcmp(ms, "failed") && strcmp(ms, "cancelled");
		json_decref(mig);
		if (!busy)
			break;
		/* Polled: a save an earlier daemon began may run without
		 * MIGRATION events, and capabilities cannot change mid-way. */
		usleep(50000);
	}
	if (query_status(vm, status, sizeof(status), err, errlen) < 0)
		return -EIO;
	if (!strcmp(status, "running"))
		return 0;
	vm__drop_pause(vm); /* sealed, but the guest runs on after all */
	if (qmp_command(vm->qmp, "cont", NULL, 5000, NULL, err, errlen) < 0)
		return -EIO;
	return 0;
}

/* What a VM taken over from an earlier daemon was started with, read back
 * from QEMU's command line: what its snapshots depend on, and whether its
 * RAM is a file of its own. */
int vm__env_from_cmdline(struct vm *vm, char *err, size_t errlen)
{
	char path[64], cmd[16384];
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)vm->pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, cmd, sizeof(cmd) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0) {
		snprintf(err, errlen, "cannot read qemu's command line");
		return -EIO;
	}
	cmd[n] = '\0';
	const char *kernel = NULL, *initrd = NULL;
	char tpl[512] = "";
	for (const char *a = cmd, *prev = ""; a < cmd + n; prev = a, a += strlen(a) + 1) {
		const char *f;
		if (!strcmp(prev, "-kernel"))
			kernel = a;
		else if (!strcmp(prev, "-initrd"))
			initrd = a;
		else if (!strcmp(prev, "-smp"))
			vm->env.vcpus = (unsigned)atoi(a);
		else if (!strcmp(prev, "-m"))
			vm->env.memory_mb = (unsigned)atoi(a);
		else if (!strcmp(prev, "-accel"))
			snprintf(vm->env.accel, sizeof(vm->env.accel), "%.3s", a);
		else if (!strcmp(prev, "-blockdev") && strstr(a, "node-name=tplfile,") &&
			 (f = strstr(a, "filename=")))
			snprintf(tpl, sizeof(tpl), "%.*s", (int)strcspn(f + 9, ","), f + 9);
		else if (!strcmp(prev, "-netdev"))
			vm->env.nic = 1;
		else if (!strcmp(prev, "-global") && !strcmp(a, MIGRATE_NO_CONFIG))
			vm->no_config = 1;
		else if (!strcmp(prev, "-object") && !strncmp(a, "memory-backend-file,", 20) &&
			 (f = strstr(a, "mem-path="))) {
			vm->ram_shared = strstr(a, "share=on") != NULL;
			vm->ram_readonly = strstr(a, ",readonly=on,rom=off") != NULL;
			snprintf(vm->ram_base, sizeof(vm->ram_base), "%.*s",
				 (int)strcspn(f + 9, ","), f + 9);
			if (vm->ram_shared)
				vm->ram_base[0] = '\0';
		}
	}
	if (!kernel || !initrd || !tpl[0]) {
		snprintf(err, errlen, "qemu's command line lacks kernel, initrd or template");
		return -EIO;
	}
	/* A kept build's binary is <builds>/<id>/bin/qemu-system-x86_64. */
	size_t l = strlen(cmd), bl = strlen("/" QEMU_BUILD_BIN);
	if (l > bl + QEMU_BUILD_ID_LEN && !strcmp(cmd + l - bl, "/" QEMU_BUILD_BIN) &&
	    cmd[l - bl - QEMU_BUILD_ID_LEN - 1] == '/') {
		char id[QEMU_BUILD_ID_LEN + 1];
		snprintf(id, sizeof(id), "%s", cmd + l - bl - QEMU_BUILD_ID_LEN);
		if (qemu_build_id_ok(id))
			snprintf(vm->env.qemu_build, sizeof(vm->env.qemu_build), "%s", id);
	}
	int r = snap_env_files(&vm->env, kernel, initrd, tpl, err, errlen);
	return r < 0 ? r : migrate_qemu_version(vm->qmp, vm->env.qemu, sizeof(vm->env.qemu), err, errlen);
}

/* The manifest of a snapshot of vm whose state is saved in dir. */
static void manifest_of(const struct vm *vm, struct snap_manifest *m, int sealed, int in_run_dir,
			int diff)
{
	memset(m, 0, sizeof(*m));
	m->env = vm->env;
	m->ram_in_file = vm->ram_shared;
	m->ram_diff = diff;
	m->no_config = diff || vm->no_config;
	m->sealed = sealed;
	snprintf(m->files[SNAP_STATE].name, sizeof(m->files[SNAP_STATE].name), "state");
	if (vm->ram_shared)
		snprintf(m->files[SNAP_MEM].name, sizeof(m->files[SNAP_MEM].name), "mem");
	if (diff) {
		snprintf(m->files[SNAP_PAGES].name, sizeof(m->files[SNAP_PAGES].name), "pages");
		snprintf(m->files[SNAP_BASE].name, sizeof(m->files[SNAP_BASE].name), JAIL_RAM_BASE);
		snprintf(m->files[SNAP_BASE].sha256, sizeof(m->files[SNAP_BASE].sha256), "%s",
			 vm->ram_base_sha);
	}
	snprintf(m->files[SNAP_DISK].name, sizeof(m->files[SNAP_DISK].name), "%s",
		 in_run_dir ? "scratch.qcow2" : "disk.qcow2");
}

/* The device state QEMU wrote at dev, with MIGRATE_DEVICES_TAIL, as a
 * new file at path, fsync'ed. dev is the jail's (QEMU wrote it): no link
 * followed, and no bigger than a device state is. */
static int seal_devices(const char *dev, const char *path, char *err, size_t errlen)
{
	enum { MAX = 64 << 20 };
	int in = fs_open_file(dev, O_RDONLY, 0), out = -1, r = 0;
	struct stat st;
	char *buf = NULL;
	if (in < 0 || fstat(in, &st) < 0 || st.st_size <= 0 || st.st_size > MAX ||
	    !(buf = malloc((size_t)st.st_size + MIGRATE_DEVICES_TAIL_LEN)) ||
	    read(in, buf, (size_t)st.st_size) != (ssize_t)st.st_size) {
		snprintf(err, errlen, "QEMU's device state '%s' cannot be read whole", dev);
		r = -EIO;
	}
	if (r == 0) {
		memcpy(buf + st.st_size, MIGRATE_DEVICES_TAIL, MIGRATE_DEVICES_TAIL_LEN);
		unlink(path);
		out = fs_open_file(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
		size_t n = (size_t)st.st_size + MIGRATE_DEVICES_TAIL_LEN;
		ssize_t w = out < 0 ? out : write(out, buf, n);
		if (out < 0)
			r = out;
		else if (w < 0 || fsync(out) < 0)
			r = -errno;
		else if (w != (ssize_t)n)
			r = -EIO;
		if (r < 0)
			snprintf(err, errlen, "cannot write '%s': %s", path, strerror(-r));
	}
	free(buf);
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	unlink(dev);
	return r;
}

/* Whether vm's RAM is saved as the pages its guest wrote: RAM that maps
 * a snapshot's file copy-on-write through its link in the run directory
 * (vm__link_base: the very file, whatever became of the snapshot),
 * opened read-only by QEMU (one that could write it must not map it
 * from a run directory or a checkpoint), launch ops that reach QEMU's
 * memory, and no CPUOS_STREAM_PAUSES in the environment (the RAM
 * streamed, as before: a fallback, and the baseline of bench_snap). */
static int saves_pages(const struct vm *vm)
{
	char base[300];
	snprintf(base, sizeof(base), "%s/" JAIL_RAM_BASE, vm->run_dir);
	return !vm->ram_shared && !strcmp(vm->ram_base, base) && vm->ram_readonly &&
	       vm->launch->mem_open && !getenv("CPUOS_STREAM_PAUSES");
}

/* Saves vm, whose RAM maps a snapshot's file copy-on-write, into dir as
 * what its guest changed: the pages pagemap shows written ("pages"), the
 * device state without RAM ("state", written by QEMU into the run
 * directory, which its jail sees, and copied), and the file as "base":
 * in the run directory it is there already; elsewhere (a checkpoint, a
 * fork) a hard link to it, made first, that keeps it as long as dir.
 * The VM is stopped before the pages are read, so pages and devices are
 * of one moment; it stays stopped. The files are fsync'ed and renamed
 * into place before the caller seals the manifest that makes them whole;
 * on failure dir has none of them but the run directory's base. */
static int save_pages(struct vm *vm, const char *dir, char *err, size_t errlen)
{
	char pages[600], tmp[600], dev[300], state_tmp[600], state[600], base[600];
	snprintf(pages, sizeof(pages), "%s/pages", dir);
	snprintf(tmp, sizeof(tmp), "%s/pages.tmp", dir);
	snprintf(dev, sizeof(dev), "%s/state.dev", vm->run_dir);
	snprintf(state_tmp, sizeof(state_tmp), "%s/state.tmp", dir);
	snprintf(state, sizeof(state), "%s/state", dir);
	snprintf(base, sizeof(base), "%s/" JAIL_RAM_BASE, dir);
	const struct launch_ops *ops = vm->launch;
	struct ramdiff_block b[RAMDIFF_MAX_BLOCKS];
	int n, pm = -1, mem = -1, out = -1;
	uint64_t npages = 0;
	double t0 = clock_ms_f();
	int r = 0, linked = strcmp(vm->ram_base, base) != 0;
	if (linked) {
		unlink(base);
		if (link(vm->ram_base, base) < 0) {
			r = -errno;
			snprintf(err, errlen, "cannot link '%s' to '%s': %s", base, vm->ram_base,
				 strerror(errno));
			linked = 0;
		}
	}
	if (r == 0)
		r = qmp_command(vm->qmp, "stop", NULL, 5000, NULL, err, errlen);
	if (r == 0)
		r = ops->mem_open(ops->ctx, vm->pid, vm->jail_uid, LAUNCH_PAGEMAP, &pm, err, errlen);
	if (r == 0)
		r = ops->mem_open(ops->ctx, vm->pid, vm->jail_uid, LAUNCH_MEM, &mem, err, errlen);
	if (r == 0)
		r = ramdiff_blocks(vm->qmp, b, &n, ((uint64_t)vm->env.memory_mb + 64) << 20, err,
				   errlen);
	if (r == 0) {
		unlink(tmp);
		if ((out = fs_open_file(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600)) < 0) {
			r = out;
			snprintf(err, errlen, "cannot create '%s': %s", tmp, strerror(-r));
		}
	}
	if (r == 0)
		r = ramdiff_save(pm, mem, b, n, QEMU_RAM_ID, out, &npages, err, errlen);
	if (r == 0 && fsync(out) < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot write '%s': %s", tmp, strerror(errno));
	}
	if (pm >= 0)
		close(pm);
	if (mem >= 0)
		close(mem);
	if (out >= 0)
		close(out);
	double t1 = clock_ms_f();
	if (r == 0) {
		unlink(dev);
		r = migrate_save_devices(vm->qmp, dev, err, errlen);
	}
	if (r == 0)
		r = seal_devices(dev, state_tmp, err, errlen);
	if (r == 0 && (rename(tmp, pages) < 0 || rename(state_tmp, state) < 0)) {
		r = -errno;
		snprintf(err, errlen, "cannot rename the saved pages and state: %s", strerror(errno));
	}
	if (r < 0) {
		unlink(tmp);
		unlink(state_tmp);
		unlink(dev);
		unlink(pages);
		if (linked)
			unlink(base);
		return r;
	}
	log_debug("%s: %llu pages saved in %.1f ms, devices in %.1f ms", dir,
		  (unsigned long long)npages, t1 - t0, clock_ms_f() - t1);
	return 0;
}

/* Saves vm's state into dir: the pages its guest wrote where it can
 * (saves_pages), else, or if that fails, QEMU's migration stream into
 * stream, with the RAM in it unless RAM is a file of its own. 1 with the
 * pages saved, 0 streamed, or -errno with a reason. */
static int save_state(struct vm *vm, const char *dir, const char *stream, char *err,
		      size_t errlen)
{
	if (saves_pages(vm)) {
		if (save_pages(vm, dir, err, errlen) == 0)
			return 1;
		log_warn("%s: saving the pages written failed, streaming the RAM: %s", vm->run_dir,
			 err);
	}
	int r = migrate_save(vm->qmp, stream, vm->ram_shared, vm__migrate_ms(vm), err, errlen);
	return r < 0 ? r : 0;
}

int vm_pause(struct vm *vm, char *err, size_t errlen)
{
	if (vm->state != VM_RUNNING || !vm->qmp) {
		snprintf(err, errlen, "vm is %s", vm_state_name(vm->state));
		return -ESHUTDOWN;
	}
	char tmp[300], path[300];
	snprintf(tmp, sizeof(tmp), "%s/state.tmp", vm->run_dir);
	snprintf(path, sizeof(path), "%s/state", vm->run_dir);
	/* The guest must not be mid-request when it is saved: the agent
	 * sees the host leave, and finds a new one after the resume. Two
	 * QMP round trips let QEMU's main loop see the close (and queue the
	 * news to the guest) before the stop. */
	vm_drop_agent(vm);
	for (int i = 0; i < 2; i++)
		qmp_command(vm->qmp, "query-status", NULL, 2000, NULL, err, errlen);
	int diff = save_state(vm, vm->run_dir, tmp, err, errlen), r = diff < 0 ? diff : 0;
	if (diff == 0 && rename(tmp, path) < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot rename '%s': %s", tmp, strerror(errno));
	}
	diff = diff > 0;
	/* The VM is stopped and its disk flushed by the migration: its files
	 * are final. The pause is sealed while QEMU still holds the VM, so a
	 * daemon killed at any point finds either a QEMU to go on with or a
	 * complete pause, never QEMU gone and no manifest. */
	if (diff)
		crash_point("pause.pages_saved");
	struct snap_manifest m;
	manifest_of(vm, &m, 0, 1, diff);
	if (r == 0)
		r = snap_seal(vm->run_dir, &m, err, errlen);
	char e2[64];
	if (r < 0) {
		unlink(tmp);
		vm__drop_pause(vm);
		qmp_command(vm->qmp, "cont", NULL, 2000, NULL, e2, sizeof(e2));
		vm->reconnect_at = clock_ms(); /* and talk to the agent again */
		return r;
	}
	crash_point("pause.after_manifest");
	vm->pausing = 1;
	if (qmp_command(vm->qmp, "quit", NULL, 2000, NULL, e2, sizeof(e2)) < 0 || !vm__reap(vm, 5000)) {
		vm__kill(vm);
		vm__reap(vm, 5000);
	}
	return 0;
}

int vm_snapshot(struct vm *vm, const char *dir, int sealed, char *err, size_t errlen)
{
	if (vm->state != VM_RUNNING || !vm->qmp) {
		snprintf(err, errlen, "vm is %s", vm_state_name(vm->state));
		return -ESHUTDOWN;
	}
	if (mkdir(dir, 0700) < 0) {
		snprintf(err, errlen, "cannot create '%s': %s", dir, strerror(errno));
		return -errno;
	}
	char path[600], src[300];
	snprintf(path, sizeof(path), "%s/state", dir);
	int diff = save_state(vm, dir, path, err, errlen), r = diff < 0 ? diff : 0;
	diff = diff > 0;
	/* Stopped, its disk flushed by the migration: copy what changes. */
	const char *copies[][2] = { { "mem", "mem" }, { "scratch.qcow2", "disk.qcow2" } };
	for (size_t i = vm->ram_shared ? 0 : 1; r == 0 && i < 2; i++) {
		snprintf(src, sizeof(src), "%s/%s", vm->run_dir, copies[i][0]);
		snprintf(path, sizeof(path), "%s/%s", dir, copies[i][1]);
		if ((r = snap_copy(src, path)) < 0)
			snprintf(err, errlen, "cannot copy '%s': %s", src, strerror(-r));
	}
	char e2[128];
	if (qmp_command(vm->qmp, "cont", NULL, 5000, NULL, e2, sizeof(e2)) < 0 && r == 0) {
		snprintf(err, errlen, "the VM did not go on after its snapshot: %s", e2);
		r = -EIO;
	}
	if (vm->agent)
		vm__send_time(vm); /* it stood still meanwhile */
	if (r == 0) {
		struct snap_manifest m;
		manifest_of(vm, &m, sealed, 0, diff);
		r = snap_seal(dir, &m, err, errlen);
	}
	if (r < 0)
		snap_remove(dir);
	return r;
}

