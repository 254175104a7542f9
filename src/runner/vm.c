/*
 * vm: one QEMU microvm and its three sockets. QEMU runs in its own session
 * so it can outlive its starter (the daemon re-attaches later); until then
 * the starter reaps it. The end state is decided from what was seen: the
 * host's own stop, the agent's poweroff notice, a panic on the console, or
 * QEMU's exit status.
 */
#include "runner/vm_impl.h"

#include "common/crash.h"
#include "common/fs.h"
#include "common/jail_spec.h"
#include "common/launch.h"
#include "common/netconst.h"
#include "common/proto.h"
#include "common/unixsock.h"
#include "runner/agentc.h"
#include "runner/console.h"
#include "runner/disk.h"
#include "runner/migrate.h"
#include "runner/qemu_build.h"
#include "runner/qmp.h"
#include "runner/snap.h"
#include "common/clock.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BACKOFF_MIN_MS 50   /* first reconnect of a lost agent connection */
#define BACKOFF_MAX_MS 5000 /* doubling up to this */

const char *vm_state_name(enum vm_state s)
{
	static const char *const names[] = {
		[VM_BOOTING] = "booting", [VM_RUNNING] = "running", [VM_STOPPED] = "stopped",
		[VM_POWEROFF] = "poweroff", [VM_REBOOT] = "reboot", [VM_PANIC] = "panic",
		[VM_CRASHED] = "crashed", [VM_PAUSED] = "paused",
	};
	return s <= VM_PAUSED ? names[s] : "?";
}

/* The last line of the run directory's qemu.log: QEMU's reason for
 * refusing to start or for dying. */
static void qemu_log_last_line(const struct vm *vm, char *out, size_t outlen)
{
	char path[300], line[200];
	snprintf(path, sizeof(path), "%s/qemu.log", vm->run_dir);
	fs_last_line(path, line, sizeof(line));
	snprintf(out, outlen, "%.180s", line);
}

/* QEMU has exited (status st): settle the end state. */
static void finish(struct vm *vm, int st)
{
	for (int i = 0; i < 64 && vm->con.fd >= 0; i++) /* the last words */
		console_drain(&vm->con);
	char panic[200];
	if (vm->pausing) {
		vm->state = VM_PAUSED;
		snprintf(vm->reason, sizeof(vm->reason), "paused");
	} else if (vm->stopping) {
		vm->state = VM_STOPPED;
		snprintf(vm->reason, sizeof(vm->reason), "stopped by the host");
	} else if (vm->notice == PN_POWEROFF) {
		vm->state = VM_POWEROFF;
		snprintf(vm->reason, sizeof(vm->reason), "the guest powered off");
	} else if (vm->notice == PN_REBOOT) {
		vm->state = VM_REBOOT;
		snprintf(vm->reason, sizeof(vm->reason), "the guest rebooted");
	} else if (console_panic(&vm->con, panic, sizeof(panic))) {
		vm->state = VM_PANIC;
		snprintf(vm->reason, sizeof(vm->reason), "%s", panic);
	} else {
		vm->state = VM_CRASHED;
		char last[200];
		qemu_log_last_line(vm, last, sizeof(last));
		if (WIFSIGNALED(st))
			snprintf(vm->reason, sizeof(vm->reason), "qemu killed by signal %d",
				 WTERMSIG(st));
		else if (WEXITSTATUS(st))
			snprintf(vm->reason, sizeof(vm->reason), "qemu exited with status %d: %s",
				 WEXITSTATUS(st), last);
		else
			snprintf(vm->reason, sizeof(vm->reason), "the guest reset without a word (%s)",
				 qmp_shutdown_reason(vm->qmp) ? qmp_shutdown_reason(vm->qmp) : "no event");
	}
	vm->pid = 0;
}

/* QEMU's wait status once it exited: 1, 0 while it runs, -errno. The
 * launch ops' child is theirs to reap (a jailed one is the helper's);
 * one taken over from an earlier daemon could only be our own. */
static int reap_now(struct vm *vm, int *st)
{
	const struct launch_ops *ops = vm->child ? vm->launch : &vm_launch_direct;
	return ops->reap(ops->ctx, vm->pid, st);
}

/* QEMU with a pidfd: the pidfd says when it exited. r: what the reap
 * said. */
static int reap_pidfd(struct vm *vm, int wait_ms, int *st)
{
	struct pollfd p = { .fd = vm->pidfd, .events = POLLIN };
	int64_t deadline = clock_ms() + wait_ms;
	int n;
	while ((n = poll(&p, 1, wait_ms)) < 0 && errno == EINTR)
		wait_ms = deadline > clock_ms() ? (int)(deadline - clock_ms()) : 0;
	if (n != 1)
		return 0;
	return reap_now(vm, st); /* readable once it is a zombie, for its parent to reap */
}

/* QEMU without one (a kernel before 5.3, or out of descriptors): there
 * is nothing to wait on but time. Its launch ops' child is reaped as it
 * comes, one taken over (a daemon restarted) can only be watched, and a
 * jailed one runs as another uid: EPERM is alive. */
static int reap_polled(struct vm *vm, int wait_ms, int *st)
{
	double deadline = clock_ms_f() + wait_ms;
	for (;;) {
		int r = reap_now(vm, st);
		if (r > 0 || (r < 0 && kill(vm->pid, 0) < 0 && errno == ESRCH))
			return r;
		if (clock_ms_f() >= deadline)
			return 0;
		usleep(2000);
	}
}

int vm__reap(struct vm *vm, int wait_ms)
{
	if (vm->pid <= 0)
		return 1;
	int st = 0;
	int r = vm->pidfd >= 0 ? reap_pidfd(vm, wait_ms, &st) : reap_polled(vm, wait_ms, &st);
	if (r == 0)
		return 0;
	if (vm->qmp)
		qmp_poll_events(vm->qmp);
	if (vm->pidfd >= 0)
		close(vm->pidfd);
	vm->pidfd = -1;
	finish(vm, r > 0 ? st : 0); /* not its child: how it ended is unknown */
	return 1;
}

void vm__kill(struct vm *vm)
{
	if (vm->pid > 0)
		vm->launch->signal(vm->launch->ctx, vm->pid, SIGKILL);
}

static void notice_cb(void *arg, const struct proto_frame *f)
{
	struct vm *vm = arg;
	uint32_t kind;
	if (proto_check_attrs(f) == 0 && proto_get_u32(f, A_NOTICE, &kind) == 0 &&
	    (kind == PN_POWEROFF || kind == PN_REBOOT))
		vm->notice = (int)kind;
}

/* A cgroup leaf per run directory: its name, and a hash of the whole
 * path so two daemons' VMs of one name do not share a leaf. */
static void cgroup_name(const char *run_dir, char *out, size_t len)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (const char *p = run_dir; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	const char *base = strrchr(run_dir, '/');
	snprintf(out, len, "%.80s-%08x", base ? base + 1 : run_dir, h);
}

/* What QEMU's jail lets it see: the guest's kernel, initramfs and image
 * and the layer's base read-only, the run directory, and the snapshot's
 * RAM file a restore maps. base: room for the base's path. */
static int jail_spec(struct vm *vm, const struct vm_config *cfg, const struct qemu_config *qc,
		     struct jail_spec *s, char *base, size_t baselen, char *err, size_t errlen)
{
	int r = disk_layer_base(cfg->cache_dir, qc->scratch, base, baselen);
	if (r < 0) {
		snprintf(err, errlen, "the layer '%s' is backed by no base of '%s'", qc->scratch,
			 cfg->cache_dir);
		return r;
	}
	chmod(base, 0644); /* the cache's own empty filesystem (older cpuos made them 0600) */
	cgroup_name(vm->run_dir, vm->cgroup, sizeof(vm->cgroup));
	*s = (struct jail_spec){
		.name = vm->cgroup,
		.vcpus = qc->vcpus,
		.memory_mb = qc->memory_mb,
		.kvm = qc->accel == QEMU_ACCEL_KVM,
		.run_dir = vm->run_dir,
		.ro = { cfg->kernel, cfg->initrd, cfg->template, base },
		.tap = qc->tap,
		.own_netns = cfg->netns == NULL,
	};
	/* A QEMU of the caller's own (tests, --qemu) outside /usr, or a
	 * kept build (the helper binds its directory). */
	if (strchr(qc->binary, '/') && strncmp(qc->binary, "/usr/", 5))
		s->binary = qc->binary;
	/* A snapshot's RAM, mapped private: read-only where QEMU opens it
	 * so (rom=off), else QEMU opens it for writing. */
	if (!strcmp(qc->mem_path, vm->ram_base) && qc->mem_readonly)
		s->ram_ro = qc->mem_path; /* also the run directory's base */
	else if (strncmp(qc->mem_path, vm->run_dir, strlen(vm->run_dir)))
		s->rw[0] = qc->mem_path;
	return 0;
}

/* QEMU, started by the VM's launch ops (jailed when spec is given). */
static int spawn_qemu(struct vm *vm, char **argv, const struct vm_config *cfg,
		      const struct jail_spec *spec, char *err, size_t errlen)
{
	char log[300];
	snprintf(log, sizeof(log), "%s/qemu.log", vm->run_dir);
	unlink(log); /* whatever the jail left in its place */
	int logfd = fs_open_file(log, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (logfd < 0) {
		snprintf(err, errlen, "cannot create '%s': %s", log, strerror(-logfd));
		return logfd;
	}
	const struct launch_spec ls = { .argv = argv, .logfd = logfd, .netns = cfg->netns,
					.net_slot = cfg->netns ? cfg->net_slot : -1, .jail = spec };
	const struct launch_ops *ops = vm->launch;
	int r = ops->spawn(ops->ctx, &ls, &vm->pid, &vm->jail_uid, &vm->pidfd, err, errlen);
	close(logfd);
	if (r == 0)
		vm->child = 1;
	else if (ops->jails && r == -ENOENT)
		snprintf(err, errlen, "cannot find QEMU binary '%s' (apt-get install "
			 "qemu-system-x86)", argv[0]);
	else if (ops->jails && r != -EPIPE) {
		char last[200];
		qemu_log_last_line(vm, last, sizeof(last)); /* the jail's step, if it failed */
		if (last[0]) {
			size_t l = strlen(err);
			snprintf(err + l, errlen - l, ": %s", last);
		}
	}
	return r;
}

static int find_in_path(const char *name)
{
	if (strchr(name, '/'))
		return access(name, X_OK);
	const char *path = getenv("PATH");
	if (!path)
		path = "/usr/bin:/bin";
	char buf[4096];
	while (*path) {
		size_t n = strcspn(path, ":");
		if (snprintf(buf, sizeof(buf), "%.*s/%.200s", (int)n, path, name) < (int)sizeof(buf) &&
		    access(buf, X_OK) == 0)
			return 0;
		path += n + (path[n] == ':');
	}
	return -1;
}

/* A failure during start: if the VM died meanwhile, that is the news. */
static void start_failed(struct vm *vm, char *err, size_t errlen)
{
	if (vm__reap(vm, 200))
		snprintf(err, errlen, "vm ended during boot (%s): %s", vm_state_name(vm->state),
			 vm->reason);
}

/* The guest clock came from the RTC, to the second (or stood still while
 * the VM was stopped): set it exactly. Fire and forget. */
void vm__send_time(struct vm *vm)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct pbuf *b = agentc_begin(vm->agent, P_SETTIME, NULL, NULL, NULL);
	if (b && proto_put_u64(b, A_TIME_NS, (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec) == 0)
		agentc_end(vm->agent);
	else if (b)
		agentc_abort(vm->agent);
}

int vm_start(const struct vm_config *cfg, struct vm **out, char *err, size_t errlen)
{
	const char *qemu = cfg->qemu_build ? cfg->qemu_build->binary
			   : cfg->qemu	    ? cfg->qemu
					    : "qemu-system-x86_64";
	const struct { const char *what, *path; } files[] = {
		{ "kernel", cfg->kernel }, { "initramfs", cfg->initrd }, { "template", cfg->template },
	};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		if (!files[i].path || access(files[i].path, R_OK) < 0) {
			int e = files[i].path ? errno : EINVAL;
			snprintf(err, errlen, "cannot find %s '%s': %s", files[i].what,
				 files[i].path ? files[i].path : "", strerror(e));
			return -e;
		}
	}
	/* A jailed QEMU is the helper's to find: the path may be one only
	 * root reaches. */
	const struct launch_ops *launch = cfg->launch ? cfg->launch : &vm_launch_direct;
	if (!launch->jails && find_in_path(qemu) < 0) {
		snprintf(err, errlen, "cannot find QEMU binary '%s' (apt-get install qemu-system-x86)", qemu);
		return -ENOENT;
	}
	if (strlen(cfg->run_dir) > 80) { /* socket paths must fit sun_path */
		snprintf(err, errlen, "run directory path too long: '%s'", cfg->run_dir);
		return -ENAMETOOLONG;
	}

	struct vm *vm = calloc(1, sizeof(*vm));
	if (!vm)
		return -ENOMEM;
	vm->con.fd = vm->con.log = vm->pidfd = -1;
	vm->backoff_ms = BACKOFF_MIN_MS;
	vm->launch = launch;
	snprintf(vm->run_dir, sizeof(vm->run_dir), "%s", cfg->run_dir);
	char **argv = NULL;
	char path[600], scratch[300], mem[600];
	struct snap_manifest m;
	int r, ran = 0;
	int in_place = cfg->restore && !strcmp(cfg->restore, cfg->run_dir);

	if (mkdir(vm->run_dir, 0700) < 0 && errno != EEXIST) {
		r = -errno;
		snprintf(err, errlen, "cannot create '%s': %s", vm->run_dir, strerror(errno));
		goto fail;
	}
	enum qemu_accel accel = cfg->accel == QEMU_ACCEL_AUTO ? qemu_accel_probe() : cfg->accel;
	vm->env.vcpus = cfg->vcpus ? cfg->vcpus : 1;
	vm->env.memory_mb = cfg->memory_mb ? cfg->memory_mb : 512;
	vm->env.disk_mb = cfg->disk_mb ? cfg->disk_mb : 2048;
	vm->env.nic = cfg->netns != NULL;
	snprintf(vm->env.trust, sizeof(vm->env.trust), "%s", cfg->trust ? cfg->trust : "");
	snprintf(vm->env.accel, sizeof(vm->env.accel), "%s", qemu_accel_name(accel));
	if ((r = snap_env_files(&vm->env, cfg->kernel, cfg->initrd, cfg->template, err, errlen)) < 0)
		goto fail;
	snprintf(scratch, sizeof(scratch), "%s/scratch.qcow2", vm->run_dir);
	const struct qemu_build *build = cfg->qemu_build;
	struct qemu_build other;
	if (cfg->restore) {
		r = vm__prepare_restore(vm, cfg, &m, mem, sizeof(mem), err, errlen);
		/* On the build it was made with, if that is not this one and
		 * is kept (by id, or by version in a manifest without one). */
		if (r == 0 && build &&
		    (m.env.qemu_build[0] ? strcmp(m.env.qemu_build, build->id)
					 : strcmp(m.env.qemu, build->version)) &&
		    qemu_build_beside(build, m.env.qemu_build, m.env.qemu, &other) == 0) {
			build = &other;
			qemu = other.binary;
		}
		if (r == 0)
			r = snap_check(&m, &vm->env, err, errlen); /* QEMU's version is checked below */
		/* The guest trusts what it trusted when it was saved: a pause
		 * of it says no more than its snapshot did. */
		if (r == 0)
			snprintf(vm->env.trust, sizeof(vm->env.trust), "%s", m.env.trust);
	} else {
		snprintf(mem, sizeof(mem), "%s/mem", vm->run_dir);
		unlink(mem); /* a fresh RAM file, whatever an earlier VM left here */
		vm->ram_shared = 1;
		r = disk_scratch_create(cfg->cache_dir, vm->env.disk_mb, scratch, err, errlen);
	}
	if (r < 0)
		goto fail;
	int rom_off = build && qemu_build_has_rom_off(build);
	if (cfg->restore && !vm->ram_shared && rom_off)
		vm__link_base(vm, mem, sizeof(mem));
	struct qemu_config qc = {
		.binary = qemu,
		.accel = accel,
		.vcpus = vm->env.vcpus,
		.memory_mb = vm->env.memory_mb,
		.kernel = cfg->kernel,
		.initrd = cfg->initrd,
		.template = cfg->template,
		.scratch = scratch,
		.run_dir = vm->run_dir,
		.hostname = cfg->hostname,
		.extra_append = cfg->extra_append,
		.tsc_khz = qemu_host_tsc_khz(),
		.mem_path = mem,
		.mem_shared = vm->ram_shared,
		.mem_readonly = rom_off,
		.incoming = cfg->restore != NULL,
		.devices_only = cfg->restore && m.ram_diff,
		.no_config = cfg->restore && m.no_config,
		.tap = cfg->netns ? NET_TAP : NULL,
		.extra_args = cfg->extra_args,
	};
	vm->ram_readonly = qc.mem_readonly;
	vm->no_config = qc.no_config;
	/* Its pages go over a base that no QEMU may write to. */
	if (cfg->restore && m.ram_diff && (!qc.mem_readonly || !launch->mem_open)) {
		snprintf(err, errlen, "a pause of written pages resumes on a QEMU that maps its "
				      "base read-only (8.2 or later, kept) and through launch ops "
				      "that reach its memory");
		r = -EPROTO;
		goto fail;
	}
	r = qemu_argv(&qc, &argv);
	if (r < 0) {
		snprintf(err, errlen, "invalid VM configuration (vcpus 1..64, memory >= 64 MB, "
				      "no commas in paths)");
		goto fail;
	}
	/* Stale sockets from an earlier VM in this directory would be found
	 * before QEMU makes its own. */
	const char *socks[] = { QEMU_QMP_SOCK, QEMU_AGENT_SOCK, QEMU_CONSOLE_SOCK };
	for (size_t i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/%s", vm->run_dir, socks[i]);
		unlink(path);
	}

	struct jail_spec spec;
	char base[4096];
	if (launch->jails &&
	    (r = jail_spec(vm, cfg, &qc, &spec, base, sizeof(base), err, errlen)) < 0)
		goto fail;
	double t0 = clock_ms_f();
	r = spawn_qemu(vm, argv, cfg, launch->jails ? &spec : NULL, err, errlen);
	if (r < 0)
		goto fail;
	snprintf(path, sizeof(path), "%s/" QEMU_QMP_SOCK, vm->run_dir);
	r = qmp_connect(path, 10000, &vm->qmp, err, errlen);
	if (r < 0) {
		if (vm__reap(vm, 500)) {
			char last[200];
			qemu_log_last_line(vm, last, sizeof(last));
			snprintf(err, errlen, "qemu did not start: %s", last[0] ? last : vm->reason);
		}
		goto fail;
	}
	vm->t.qemu_ms = clock_ms_f() - t0;
	if ((r = migrate_qemu_version(vm->qmp, vm->env.qemu, sizeof(vm->env.qemu), err, errlen)) < 0)
		goto fail;
	snprintf(vm->env.qemu_build, sizeof(vm->env.qemu_build), "%s", build ? build->id : "");
	if (cfg->restore) {
		snprintf(path, sizeof(path), "%s/%s", cfg->restore, m.files[SNAP_STATE].name);
		if ((r = snap_check(&m, &vm->env, err, errlen)) < 0 && m.env.qemu_build[0] &&
		    strcmp(m.env.qemu_build, vm->env.qemu_build)) {
			size_t l = strlen(err);
			snprintf(err + l, errlen - l, " (its build %s is not kept beside '%s')",
				 m.env.qemu_build, build ? build->dir : qemu);
		}
		if (r == 0 && m.ram_diff && (r = vm__load_pages(vm, cfg->restore, err, errlen)) == 0)
			crash_point("resume.pages_written");
		if (r < 0 ||
		    (r = migrate_load(vm->qmp, path, m.ram_in_file, vm__migrate_ms(vm), err, errlen)) < 0)
			goto fail;
		vm->t.restore_ms = clock_ms_f() - t0;
		/* Resumed in place, the guest runs and writes its RAM file and
		 * disk: the saved device state no longer goes with them and a
		 * manifest beside them would be taken for a pause after a
		 * crash. Both go now; a resume that fails from here on pauses
		 * the VM anew. */
		if (in_place) {
			vm__drop_pause(vm);
			ran = 1;
		}
	}
	console_open(&vm->con, vm->run_dir, cfg->console_cap, cfg->restore != NULL, 2000);
	snprintf(path, sizeof(path), "%s/" QEMU_AGENT_SOCK, vm->run_dir);
	r = cfg->restore ? vm__connect_restored(vm, path, err, errlen)
			 : agentc_connect(path, cfg->boot_timeout_ms ? cfg->boot_timeout_ms : 60000,
					  &vm->agent, err, errlen);
	if (r < 0) {
		start_failed(vm, err, errlen);
		goto fail;
	}
	agentc_on_notice(vm->agent, notice_cb, vm);
	vm->t.total_ms = clock_ms_f() - t0;
	if (cfg->restore) {
		if ((r = vm__send_restored(vm, cfg)) < 0) {
			snprintf(err, errlen, "cannot tell the guest it was restored: %s", strerror(-r));
			goto fail;
		}
	} else {
		vm__send_time(vm);
		uint64_t boot_ns, ready_ns;
		agentc_boot_times(vm->agent, &boot_ns, &ready_ns);
		if (ready_ns) {
			vm->t.kernel_ms = (double)boot_ns / 1e6;
			vm->t.agent_ms = (double)(ready_ns - boot_ns) / 1e6;
		}
	}
	vm->state = VM_RUNNING;
	qemu_argv_free(argv);
	*out = vm;
	return 0;
fail:
	qemu_argv_free(argv);
	if (ran) { /* the guest ran: save it again, or the pause is gone */
		char e2[256];
		vm->state = VM_RUNNING;
		if (vm_pause(vm, e2, sizeof(e2)) < 0)
			log_error("resume of %s failed and it could not pause again: %s", vm->run_dir, e2);
	}
	/* A failed resume must not take the paused sandbox's files with it;
	 * a VM that was new leaves nothing behind. */
	vm_free(vm, in_place);
	return r;
}

static void lose_agent(struct vm *vm)
{
	agentc_close(vm->agent);
	vm->agent = NULL;
	vm->reconnect_at = clock_ms() + vm->backoff_ms;
	vm->backoff_ms = vm->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : vm->backoff_ms * 2;
}

static void try_reconnect(struct vm *vm)
{
	char path[300], err[256];
	snprintf(path, sizeof(path), "%s/" QEMU_AGENT_SOCK, vm->run_dir);
	/* One try, no wait: QEMU's socket accepts at once or not at all. */
	if (agentc_open(path, 0, &vm->agent, err, sizeof(err)) < 0) {
		vm->agent = NULL;
		lose_agent(vm);
		return;
	}
	agentc_on_notice(vm->agent, notice_cb, vm);
	vm->reconnects++;
}

int vm_timeout(const struct vm *vm)
{
	if (vm->state != VM_RUNNING || vm->agent || vm->reconnect_at == INT64_MAX)
		return -1;
	int64_t left = vm->reconnect_at - clock_ms();
	return left <= 0 ? 0 : (int)left;
}

unsigned vm_reconnects(const struct vm *vm)
{
	return vm->reconnects;
}

int vm_pollfds(struct vm *vm, struct pollfd *fds)
{
	int n = 0;
	if (vm->state != VM_RUNNING)
		return 0;
	if (vm->agent)
		fds[n++] = (struct pollfd){ .fd = agentc_fd(vm->agent), .events = agentc_events(vm->agent) };
	if (vm->qmp)
		fds[n++] = (struct pollfd){ .fd = qmp_fd(vm->qmp), .events = POLLIN };
	if (vm->con.fd >= 0)
		fds[n++] = (struct pollfd){ .fd = vm->con.fd, .events = POLLIN };
	return n;
}

int vm_handle(struct vm *vm, const struct pollfd *fds, int n)
{
	if (vm->state != VM_RUNNING)
		return -ESHUTDOWN;
	int gone = 0;
	for (int i = 0; i < n; i++) {
		if (!fds[i].revents)
			continue;
		if (vm->con.fd >= 0 && fds[i].fd == vm->con.fd) {
			console_drain(&vm->con);
		} else if (vm->qmp && fds[i].fd == qmp_fd(vm->qmp)) {
			gone |= qmp_poll_events(vm->qmp) == -EPIPE;
		} else if (vm->agent && fds[i].fd == agentc_fd(vm->agent)) {
			if (agentc_io(vm->agent, fds[i].revents) < 0)
				lose_agent(vm);
			else if (agentc_ready(vm->agent))
				vm->backoff_ms = BACKOFF_MIN_MS;
		}
	}
	/* QEMU is going (or gone): the caller settles how with vm_wait. */
	if (gone || vm__reap(vm, 0))
		return -ESHUTDOWN;
	if (!vm->agent && clock_ms() >= vm->reconnect_at)
		try_reconnect(vm);
	return 0;
}

int vm_wait(struct vm *vm, int timeout_ms)
{
	if (vm->state != VM_RUNNING && vm->state != VM_BOOTING)
		return 1;
	if (vm__reap(vm, timeout_ms))
		return 1;
	return 0;
}

void vm_drop_agent(struct vm *vm)
{
	agentc_close(vm->agent);
	vm->agent = NULL;
	vm->reconnect_at = INT64_MAX;
}

int vm_attach(const char *run_dir, pid_t pid, const struct launch_ops *launch, struct vm **out,
	      char *err, size_t errlen)
{
	if (pid <= 0 || (kill(pid, 0) < 0 && errno == ESRCH)) {
		snprintf(err, errlen, "qemu (pid %d) is gone", (int)pid);
		return -ESRCH;
	}
	struct vm *vm = calloc(1, sizeof(*vm));
	if (!vm)
		return -ENOMEM;
	vm->con.fd = vm->con.log = vm->pidfd = -1;
	vm->backoff_ms = BACKOFF_MIN_MS;
	vm->launch = &vm_launch_direct;
	vm->pid = pid;
	/* Not our child, so no waitpid: its end is watched on a pidfd. */
	vm->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	snprintf(vm->run_dir, sizeof(vm->run_dir), "%s", run_dir);
	char path[300];
	snprintf(path, sizeof(path), "%s/" QEMU_QMP_SOCK, vm->run_dir);
	int r = qmp_connect(path, 5000, &vm->qmp, err, errlen);
	if (r < 0 || (r = vm__env_from_cmdline(vm, err, errlen)) < 0 ||
	    (r = vm__go_on(vm, err, errlen)) < 0)
		goto fail;
	snprintf(path, sizeof(path), "%s/state.tmp", vm->run_dir);
	unlink(path);
	console_open(&vm->con, vm->run_dir, 0, 1, 1000);
	snprintf(path, sizeof(path), "%s/" QEMU_AGENT_SOCK, vm->run_dir);
	r = vm__connect_restored(vm, path, err, errlen);
	if (r < 0)
		goto fail;
	agentc_on_notice(vm->agent, notice_cb, vm);
	vm->state = VM_RUNNING;
	/* Its id stays taken while it runs (a QEMU of an unjailed daemon
	 * runs as root: nothing to hold, and it is signalled directly). */
	if (launch && launch->hold && launch->hold(launch->ctx, pid, &vm->jail_uid) == 0) {
		vm->launch = launch;
		cgroup_name(vm->run_dir, vm->cgroup, sizeof(vm->cgroup));
	}
	*out = vm;
	return 0;
fail:
	vm->pid = 0; /* not ours to kill: the caller decides */
	vm_free(vm, 1);
	return r;
}

int vm_pump(struct vm *vm, int timeout_ms)
{
	if (vm->state != VM_RUNNING)
		return -ESHUTDOWN;
	struct pollfd p[VM_MAX_FDS];
	int n = vm_pollfds(vm, p);
	int t = vm_timeout(vm);
	int r = poll(p, (nfds_t)n, t >= 0 && (t < timeout_ms || timeout_ms < 0) ? t : timeout_ms);
	if (r < 0)
		return errno == EINTR ? 0 : -errno;
	r = vm_handle(vm, p, n);
	if (r == -ESHUTDOWN && !vm_wait(vm, 3000)) {
		/* Its QMP socket closed, yet it runs: not a VM we can drive. */
		vm__kill(vm);
		vm__reap(vm, 5000);
	}
	return r;
}

int vm_run(struct vm *vm, const int *done, int timeout_ms)
{
	double deadline = clock_ms_f() + timeout_ms;
	while (!*done) {
		double left = deadline - clock_ms_f();
		if (left <= 0)
			return -ETIMEDOUT;
		int r = vm_pump(vm, (int)left + 1);
		if (r < 0)
			return r;
	}
	return 0;
}

static void ignore_cb(void *arg, const struct proto_frame *f)
{
	(void)arg;
	(void)f;
}

int vm_stop(struct vm *vm, int grace_ms)
{
	if (vm->state != VM_RUNNING && vm->state != VM_BOOTING)
		return 0;
	vm->stopping = 1;
	if (vm->agent && agentc_begin(vm->agent, P_POWEROFF, ignore_cb, NULL, NULL))
		agentc_end(vm->agent);
	double deadline = clock_ms_f() + grace_ms;
	while (vm->pid > 0 && clock_ms_f() < deadline)
		if (vm_pump(vm, 50) == -ESHUTDOWN || vm__reap(vm, 0))
			return 0;
	char err[128];
	if (vm->qmp && qmp_command(vm->qmp, "quit", NULL, 1000, NULL, err, sizeof(err)) == 0 &&
	    vm__reap(vm, 2000))
		return 0;
	vm__kill(vm);
	vm__reap(vm, 5000);
	return 0;
}

void vm_free(struct vm *vm, int keep)
{
	if (!vm)
		return;
	if (vm->pid > 0) {
		vm__kill(vm);
		vm__reap(vm, 5000);
	}
	/* Its id goes to another QEMU only once this one is gone. */
	if (vm->launch->release && vm->jail_uid && vm->pid <= 0)
		vm->launch->release(vm->launch->ctx, vm->jail_uid, vm->cgroup);
	if (vm->pidfd >= 0)
		close(vm->pidfd);
	agentc_close(vm->agent);
	qmp_close(vm->qmp);
	console_close(&vm->con);
	if (!keep && vm->run_dir[0])
		vm_remove_files(vm->run_dir);
	free(vm);
}

void vm_remove_files(const char *run_dir)
{
	static const char *const files[] = { QEMU_QMP_SOCK, QEMU_AGENT_SOCK, QEMU_CONSOLE_SOCK,
					     "scratch.qcow2", "qemu.log", "console.log", "mem",
					     "state", "state.tmp", "state.dev", "pages", "pages.tmp",
					     JAIL_RAM_BASE, SNAP_MANIFEST, SNAP_MANIFEST ".tmp" };
	char path[300];
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", run_dir, files[i]);
		unlink(path);
	}
	rmdir(run_dir);
}

int vm_reconnect(struct vm *vm, char *err, size_t errlen)
{
	if (vm->state != VM_RUNNING) {
		snprintf(err, errlen, "vm is %s", vm_state_name(vm->state));
		return -ESHUTDOWN;
	}
	agentc_close(vm->agent);
	vm->agent = NULL;
	char path[300];
	snprintf(path, sizeof(path), "%s/" QEMU_AGENT_SOCK, vm->run_dir);
	int r = agentc_connect(path, 10000, &vm->agent, err, errlen);
	if (r == 0)
		agentc_on_notice(vm->agent, notice_cb, vm);
	return r;
}

void vm_detach(struct vm *vm)
{
	if (!vm)
		return;
	vm->pid = 0; /* QEMU lives on, with its id */
	vm->jail_uid = 0;
	vm_free(vm, 1);
}

struct agentc *vm_agent(struct vm *vm)
{
	return vm->agent;
}

enum vm_state vm_state(const struct vm *vm)
{
	return vm->state;
}

const char *vm_reason(const struct vm *vm)
{
	return vm->reason;
}

pid_t vm_pid(const struct vm *vm)
{
	return vm->pid;
}

const char *vm_run_dir(const struct vm *vm)
{
	return vm->run_dir;
}

const struct vm_timings *vm_timings(const struct vm *vm)
{
	return &vm->t;
}

const char *vm_console_tail(const struct vm *vm)
{
	return vm->con.tail;
}
