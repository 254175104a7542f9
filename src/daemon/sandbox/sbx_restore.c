/*
 * sbx_restore: a daemon's start over what the one before it left (sbx.h's
 * sbx_mgr_restore): its paused sandboxes loaded, its running ones taken
 * over with their QEMUs, or ended when those are gone, and the QEMUs of
 * this daemon's run directory that no sandbox claims killed.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/log.h"
#include "daemon/net/net.h"
#include "priv/priv.h"
#include "runner/snap.h"
#include "runner/vm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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
	/* Its end is waited for on a pidfd (taken before the signal, so the
	 * pid cannot be another process's by then); a kernel without pidfds
	 * gets the old poll. */
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	/* A jailed one runs as a jail id: the helper's to signal. */
	if (!m->cfg.priv || priv_kill(m->cfg.priv, pid, SIGKILL) < 0)
		kill(pid, SIGKILL);
	if (pfd >= 0) {
		struct pollfd p = { .fd = pfd, .events = POLLIN };
		while (poll(&p, 1, 5000) < 0 && errno == EINTR)
			;
		close(pfd);
		return;
	}
	for (int i = 0; i < 100 && is_our_qemu(pid, run_dir); i++)
		usleep(50000);
}

/* A row the store says is running, at the daemon's start: its QEMU taken
 * over, or its pause found whole, or lost. */
static void restore_running(struct sbx_mgr *m, struct store_sbx *row)
{
	struct sbx *s;
	if (sbx__new(m, row, SBX_RESTORING, &s) < 0) {
		log_error("sandbox %s: out of memory: left for the next start", row->id);
		return;
	}
	char err[256] = "", e2[256];
	struct vm *vm = NULL;
	int r = -ESRCH;
	if (is_our_qemu(row->qemu_pid, row->run_dir))
		r = vm_attach(row->run_dir, row->qemu_pid, priv_launch_ops(m->cfg.priv), &vm, err,
			      sizeof(err));
	if (r == 0 && sbx__run_vm(s, vm, row->net_slot) == 0) {
		sbx__fire(s, SBX_EV_ATTACHED, NULL, 0, e2, sizeof(e2));
		sbx__net_keep(m, row);
		log_info("sandbox %s re-attached (qemu pid %d)", row->id, row->qemu_pid);
		sbx_put(s);
		return;
	}
	if (r == 0)
		vm_free(vm, 1);
	else if (is_our_qemu(row->qemu_pid, row->run_dir)) {
		/* Not left to run beside the row: a guest that goes on writes
		 * to the files of a pause. */
		log_warn("sandbox %s: killing its QEMU (pid %d): %s", row->id, row->qemu_pid, err);
		sbx__kill_qemu(m, row->qemu_pid, row->run_dir);
	}
	/* Killed between the pause's seal and the row's update: the pause is
	 * complete if its manifest was written. */
	struct snap_manifest sm;
	char serr[256];
	if (snap_load(row->run_dir, &sm, 0, serr, sizeof(serr)) == 0) {
		long long now = (long long)time(NULL), left = row->expires_at - now;
		struct sbx_facts f = { .paused_at = now, .timeout_left_s = left > 0 ? left : 0,
				       .storage_bytes = sbx__paused_bytes(row->run_dir) };
		pthread_mutex_lock(&m->mu);
		s->paused_at = now;
		pthread_mutex_unlock(&m->mu);
		sbx__fire(s, SBX_EV_SEALED, &f, SBX_FIRE_FORCE, e2, sizeof(e2));
		log_info("sandbox %s was paused when the daemon stopped", row->id);
	} else {
		log_warn("sandbox %s lost: %s", row->id, err[0] ? err : "its QEMU is gone");
		struct sbx_facts f = { .end_reason = "lost" };
		sbx__fire(s, SBX_EV_LOST, &f, SBX_FIRE_FORCE, e2, sizeof(e2));
	}
	sbx_put(s);
}

int sbx__load_paused(struct sbx_mgr *m, const struct store_sbx *row)
{
	struct sbx *s;
	char err[256];
	if (sbx__new(m, row, SBX_RESTORING, &s) < 0)
		return -ENOMEM;
	sbx__fire(s, SBX_EV_LOADED, NULL, 0, err, sizeof(err));
	sbx_put(s);
	return 0;
}

void sbx_mgr_restore(struct sbx_mgr *m)
{
	struct store_sbx *rows;
	size_t n;
	/* Before any sandbox's proxy asks for them. */
	sbx__secrets_seal_old(m);
	/* Paused ones first: a running row may become paused below. */
	if (store_sbx_paused(m->store, &rows, &n) == 0) {
		for (size_t i = 0; i < n; i++)
			if (sbx__load_paused(m, &rows[i]) < 0)
				log_error("paused sandbox %s: cannot load it", rows[i].id);
		store_sbx_free_list(rows, n);
	}
	if (store_sbx_running(m->store, &rows, &n) == 0) {
		for (size_t i = 0; i < n; i++)
			restore_running(m, &rows[i]);
		store_sbx_free_list(rows, n);
	}
	if (m->cfg.net)
		net_sweep(m->cfg.net); /* the namespaces of VMs that are gone */
	sbx__snap_cleanup(m);
	sbx__builds_start(m); /* after the sandboxes its builders left are known */
	if (sbx__pools_start(m) < 0)
		log_error("template snapshots and warm pools could not start");
	char err[256];
	if (sbx__blob_start(m, err, sizeof(err)) < 0)
		log_error("pauses will not be kept in the object store: %s", err);
}
