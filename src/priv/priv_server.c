/*
 * priv_server: the helper's start (its configuration read from the
 * socket), its loop and the jail's requests. One request at a time, in
 * the order they come; nothing in it is believed before priv_decode has
 * passed it. A request that fails there is one the daemon would never
 * send: the helper ends, and sends the daemon SIGTERM, having changed
 * nothing. One that passes and fails on the host (a file missing) is
 * answered with PR_ERROR.
 */
#include "priv/priv_impl.h"

#include "common/log.h"
#include "common/spawn.h"
#include "common/unixsock.h"
#include "image/image.h"
#include "jail/cgroup.h"
#include "jail/jail.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int spawn_jailed(struct privd *d, const struct priv_req *r, int logfd,
			struct privd_reply *out, char *err, size_t errlen)
{
	/* jail_prepare opens the run directory with no link on the way. */
	struct jail_spec s = {
		.name = r->name, .vcpus = r->vcpus, .memory_mb = r->memory_mb, .kvm = (int)r->kvm,
		.run_dir = r->run_dir, .binary = r->binary, .tap = r->tap, .own_netns = r->slot < 0,
		.ram_ro = r->ram_ro,
	};
	char dir[PATH_MAX];
	s.prefix = priv_kept_build(&d->b, r->binary, dir);
	memcpy(s.ro, r->ro, sizeof(s.ro));
	memcpy(s.rw, r->rw, sizeof(s.rw));
	struct jail_plan *plan;
	int rc = jail_prepare(d->jail, &s, &plan, err, errlen);
	if (rc < 0)
		return rc;
	char ns[64];
	if (r->slot >= 0)
		priv_ns_path(d->tag, r->slot, ns, sizeof(ns));
	static char *const no_env[] = { NULL };
	struct spawn_opts o = { .argv = (char *const *)r->argv, .fd = { -1, logfd, logfd },
				.new_session = 1, .netns = r->slot >= 0 ? ns : NULL, .envp = no_env,
				.pre_exec = jail_enter, .pre_exec_arg = plan };
	pid_t pid;
	uid_t uid = jail_plan_uid(plan);
	rc = spawn(&o, &pid);
	jail_plan_free(plan);
	if (rc < 0) {
		snprintf(err, errlen, "cannot run '%s': %s", r->argv[0], strerror(-rc));
		jail_release(d->jail, uid, r->name);
		return rc;
	}
	/* The daemon's way to see it exit: not its child, so no waitpid. */
	out->fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (out->fd < 0 || proto_put_u32(out->out, T_PID, (uint32_t)pid) < 0 ||
	    proto_put_u32(out->out, T_UID, uid) < 0) {
		snprintf(err, errlen, "cannot watch qemu: %s", strerror(errno));
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		jail_release(d->jail, uid, r->name);
		return -EIO;
	}
	return 0;
}

/* Only a QEMU: a process that runs as one of the jail's ids, checked
 * and signalled through a pidfd, so a pid used again meanwhile is not
 * the one signalled. */
static int kill_jailed(struct privd *d, const struct priv_req *r, char *err, size_t errlen)
{
	int pfd = (int)syscall(SYS_pidfd_open, r->pid, 0), rc = -EPERM;
	uid_t uid;
	if (pfd >= 0 && jail_proc_uid(r->pid, &uid) == 0 && jail_owns(d->jail, uid))
		rc = syscall(SYS_pidfd_send_signal, pfd, (int)r->signo, NULL, 0) < 0 ? -errno : 0;
	else
		snprintf(err, errlen, "pid %d does not run as a jail id", (int)r->pid);
	if (pfd >= 0)
		close(pfd);
	return rc;
}

/* A jailed QEMU's memory, for a pause that saves only the pages its
 * guest wrote (runner/ramdiff.h): the daemon drives that QEMU already,
 * and its memory is the guest's and QEMU's, no one else's. The file is
 * opened, then the pid checked through a pidfd taken before to run as
 * the jail id the daemon holds for it: a pid used again meanwhile (a
 * QEMU taken over is not the helper's child, and is reaped by no one)
 * fails that, since a held id is no other QEMU's. Opened by root, the
 * page map shows frame numbers too: the daemon learns where QEMU's pages
 * lie in the host's memory, which it has no use for. */
static int open_jailed(struct privd *d, const struct priv_req *r, struct privd_reply *out,
		       char *err, size_t errlen)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)r->pid,
		 r->type == PR_MEM ? "mem" : "pagemap");
	int pfd = (int)syscall(SYS_pidfd_open, r->pid, 0);
	int fd = pfd >= 0 ? open(path, (r->type == PR_MEM ? O_RDWR : O_RDONLY) | O_CLOEXEC) : -1;
	int e = errno;
	uid_t uid;
	if (fd >= 0 && jail_proc_uid(r->pid, &uid) == 0 && uid == r->uid &&
	    jail_owns(d->jail, uid) && syscall(SYS_pidfd_send_signal, pfd, 0, NULL, 0) == 0) {
		close(pfd);
		out->fd = fd;
		return 0;
	}
	if (fd >= 0) {
		snprintf(err, errlen, "pid %d does not run as jail id %u", (int)r->pid,
			 (unsigned)r->uid);
		e = EPERM;
		close(fd);
	} else {
		snprintf(err, errlen, "cannot open '%s': %s", path, strerror(e));
	}
	if (pfd >= 0)
		close(pfd);
	return -e;
}

static int jail_req(struct privd *d, const struct priv_req *r, int fd, struct privd_reply *out,
		    char *err, size_t errlen)
{
	uid_t uid;
	int st;
	pid_t w;
	if (!d->jail) {
		snprintf(err, errlen, "no jail here");
		return -EINVAL;
	}
	switch (r->type) {
	case PR_SPAWN:
		return spawn_jailed(d, r, fd, out, err, errlen);
	case PR_REAP:
		w = waitpid(r->pid, &st, WNOHANG);
		if (w < 0) {
			snprintf(err, errlen, "pid %d is not the helper's child", (int)r->pid);
			return -errno;
		}
		if (proto_put_u32(out->out, T_EXITED, w == r->pid) < 0 ||
		    proto_put_u32(out->out, T_STATUS, w == r->pid ? (uint32_t)st : 0) < 0)
			return -ENOMEM;
		return 0;
	case PR_KILL:
		return kill_jailed(d, r, err, errlen);
	case PR_HOLD:
		if (jail_proc_uid(r->pid, &uid) < 0 || jail_hold(d->jail, uid) < 0) {
			snprintf(err, errlen, "pid %d does not run as a jail id", (int)r->pid);
			return -EPERM;
		}
		return proto_put_u32(out->out, T_UID, uid) < 0 ? -ENOMEM : 0;
	case PR_RELEASE:
		jail_release(d->jail, r->uid, r->name);
		return 0;
	case PR_PAGEMAP:
	case PR_MEM:
		return open_jailed(d, r, out, err, errlen);
	}
	return -EINVAL;
}

/* What cpuos-netd may ask for: a socket to dial from a namespace, and
 * the addresses a name resolved to. */
static int netd_may(const struct priv_req *r)
{
	return r->type == PR_NS_RESOLVED || (r->type == PR_NS_SOCKET && r->kind == PRIV_SOCK_DIAL);
}

/* A template from the image the daemon opened (it could read it, so
 * the helper reads nothing the daemon could not): unpacked as root, for
 * its files' owners, in namespaces of its own (image.h), into the state
 * directory's templates/, reached with no symlink on the way. It runs
 * apart; the answer is a pipe that gives its one line when it ends. */
static int import_req(struct privd *d, const struct priv_req *r, int srcfd,
		      struct privd_reply *out, char *err, size_t errlen)
{
	/* The state directory's path is the configuration's; what is in it
	 * the daemon's, so templates/ is taken beneath it, no symlink. */
	struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	int state = open(d->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int dirfd = state < 0 ? -1 : (int)syscall(SYS_openat2, state, "templates", &how, sizeof(how));
	if (dirfd < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot open '%.300s/templates': %s", d->state_dir, strerror(e));
		if (state >= 0)
			close(state);
		return -e;
	}
	close(state);
	struct image_limits lim = { .max_bytes = r->max_bytes };
	int rc = image_import_start(srcfd, dirfd, r->name, &lim, &out->fd, err, errlen);
	close(dirfd);
	return rc;
}

/* One request in, one answer out: 0, or -1 once the daemon (or netd, on
 * its socket) is gone. A request priv_decode refuses, or one netd may not
 * make, ends the helper and the daemon. */
static int serve_one(struct privd *d, int sock, int netd, struct priv_req *r, uint8_t *buf)
{
	int fds[4], nfds;
	ssize_t n = unix_recv_fds(sock, buf, PRIV_MAX_MSG + 1, fds, 4, &nfds);
	if (n == -EMSGSIZE)
		n = PRIV_MAX_MSG + 1;
	else if (n <= 0)
		return -1;
	char err[512] = "";
	struct pbuf out = { 0 };
	struct privd_reply rep = { .out = &out, .fd = -1 };
	int rc = n > PRIV_MAX_MSG ? -EMSGSIZE
		 : priv_decode(buf, (size_t)n, nfds, &d->b, r, err, sizeof(err));
	if (rc == 0 && netd && !netd_may(r)) {
		snprintf(err, sizeof(err), "request %u from cpuos-netd", r->type);
		rc = -EINVAL;
	}
	if (rc < 0) {
		if (rc == -EMSGSIZE)
			snprintf(err, sizeof(err), "%zd bytes, over %u", n, PRIV_MAX_MSG);
		log_error("a request the daemon would never send (%s): it is not to be trusted; "
			  "ending it and the helper", err);
		if (getppid() == d->daemon)
			kill(d->daemon, SIGTERM);
		_exit(3);
	}
	uint32_t id = r->id;
	if (proto_begin(&out, PR_OK, 0, id) < 0)
		rc = -ENOMEM;
	if (rc == 0)
		rc = r->type <= PR_NS_COUNTERS ? privd_net(d, r, nfds ? fds[0] : -1, &rep, err, sizeof(err))
		     : r->type == PR_IMPORT ? import_req(d, r, fds[0], &rep, err, sizeof(err))
					    : jail_req(d, r, nfds ? fds[0] : -1, &rep, err, sizeof(err));
	if (rc < 0) {
		if (!err[0])
			snprintf(err, sizeof(err), "%s", strerror(-rc));
		out.len = 0;
		if (rep.fd >= 0)
			close(rep.fd);
		rep.fd = -1;
		if (proto_begin(&out, PR_ERROR, 0, id) < 0 ||
		    proto_put_u32(&out, T_ERRNO, (uint32_t)-rc) < 0 ||
		    proto_put_str(&out, T_MESSAGE, err) < 0) {
			pbuf_release(&out);
			return -1;
		}
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	int sent = proto_end(&out) == 0 &&
		   unix_send_fds(sock, out.data, out.len, &rep.fd, rep.fd >= 0) == 0;
	if (rep.fd >= 0)
		close(rep.fd);
	pbuf_release(&out);
	return sent ? 0 : -1;
}

static int open_all(struct privd *d, const struct priv_config *c, char *err, size_t errlen)
{
	snprintf(d->dirs[0], sizeof(d->dirs[0]), "%s/vms", c->state_dir);
	snprintf(d->dirs[1], sizeof(d->dirs[1]), "%s/snapshots", c->state_dir);
	snprintf(d->dirs[2], sizeof(d->dirs[2]), "%s/snapshots", c->cache_dir);
	snprintf(d->dirs[3], sizeof(d->dirs[3]), "%s/checkpoints", c->state_dir);
	snprintf(d->dirs[4], sizeof(d->dirs[4]), "%s/" QEMU_BUILDS_DIR, c->cache_dir);
	snprintf(d->state_dir, sizeof(d->state_dir), "%s", c->state_dir);
	d->b = (struct priv_bounds){ .jail = c->jail, .jail_first = c->jail_first,
				     .jail_count = c->jail_count,
				     .run_parents = { d->dirs[0], d->dirs[1], d->dirs[2] },
				     .rw_dirs = { d->dirs[2], d->dirs[1], d->dirs[3] },
				     .ro_dirs = { c->guest_dir, c->cache_dir, c->state_dir },
				     .qemu = c->qemu, .qemu_builds = d->dirs[4] };
	int r;
	if (c->net_range && (r = privd_net_open(d, c->net_range, c->net_tag, err, errlen)) < 0)
		return r;
	if (!c->jail)
		return 0;
	if (c->cgroups &&
	    (r = cgroup_open("/sys/fs/cgroup", "/proc/self/cgroup", &d->cg, err, errlen)) < 0)
		return r;
	struct jail_config jc = { .first_id = c->jail_first, .count = c->jail_count,
				  .root_dir = c->jail_root, .lock_dir = c->jail_locks, .cg = d->cg };
	return jail_new(&jc, &d->jail, err, errlen);
}

static void serve(const struct priv_config *c, int sock)
{
	struct privd d = { .daemon = getppid() };
	char err[512] = "", what[512];
	int r = open_all(&d, c, err, sizeof(err));
	/* The ready line: '+' and what it holds, or '-' and why it cannot
	 * serve. */
	if (r == 0) {
		snprintf(what, sizeof(what), "+%s%s%s", c->net_range ? "networks " : "",
			 c->net_range ? c->net_range : "", c->net_range && d.jail ? ", " : "");
		if (d.jail) {
			size_t l = strlen(what);
			jail_describe(d.jail, what + l, sizeof(what) - l);
		}
	} else {
		snprintf(what, sizeof(what), "-%s", err);
	}
	if (unix_send_fds(sock, what, strlen(what) + 1, NULL, 0) < 0 || r < 0)
		_exit(1);
	static struct priv_req req;
	static uint8_t buf[PRIV_MAX_MSG + 1];
	/* The daemon's socket, and netd's: one request at a time from
	 * either. netd gone, the daemon is still served; the daemon gone,
	 * the helper ends. */
	struct pollfd pf[2] = { { .fd = sock, .events = POLLIN },
				{ .fd = c->netd_sock > 2 ? PRIV_NETD_FD : -1, .events = POLLIN } };
	for (;;) {
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[0].revents && serve_one(&d, sock, 0, &req, buf) < 0)
			break;
		if (pf[1].revents && serve_one(&d, pf[1].fd, 1, &req, buf) < 0) {
			close(pf[1].fd);
			pf[1].fd = -1;
		}
	}
	_exit(0);
}

/* The daemon's configuration, its first message: 0 with c (its strings
 * in strs[cap]), or -1. */
static int read_config(int sock, struct priv_config *c, char *strs, size_t cap)
{
	static uint8_t buf[PRIV_MAX_MSG];
	int fds[4], nfds;
	ssize_t n = unix_recv_fds(sock, buf, sizeof(buf), fds, 4, &nfds);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	struct proto_frame f;
	if (n <= 0 || nfds || proto_parse(buf, (size_t)n, &f) != n || f.type != PR_CONFIG ||
	    proto_check_attrs(&f) < 0)
		return -1;
	const struct {
		uint16_t tag;
		const char **to;
	} strs_of[] = {
		{ T_NET_RANGE, &c->net_range }, { T_NET_TAG, &c->net_tag },
		{ T_JAIL_ROOT, &c->jail_root }, { T_JAIL_LOCKS, &c->jail_locks },
		{ T_STATE_DIR, &c->state_dir }, { T_CACHE_DIR, &c->cache_dir },
		{ T_GUEST_DIR, &c->guest_dir }, { T_QEMU, &c->qemu },
	};
	size_t used = 0;
	for (size_t i = 0; i < sizeof(strs_of) / sizeof(strs_of[0]); i++) {
		int r = proto_get_str(&f, strs_of[i].tag, strs + used, cap - used);
		if (r == -ENOENT)
			continue;
		if (r < 0)
			return -1;
		*strs_of[i].to = strs + used;
		used += strlen(strs + used) + 1;
	}
	uint32_t jail = 0, cgroups = 0, level = LOG_INFO, netd = 0;
	if (proto_get_u32(&f, T_JAIL, &jail) < 0 || proto_get_u32(&f, T_CGROUPS, &cgroups) < 0 ||
	    proto_get_u32(&f, T_JAIL_FIRST, &c->jail_first) < 0 ||
	    proto_get_u32(&f, T_JAIL_COUNT, &c->jail_count) < 0 ||
	    proto_get_u32(&f, T_LOG_LEVEL, &level) < 0 || level > LOG_DEBUG)
		return -1;
	proto_get_u32(&f, T_NETD, &netd);
	c->jail = jail != 0;
	c->cgroups = cgroups != 0;
	c->netd_sock = netd ? PRIV_NETD_FD : 0;
	log_set_level((enum log_level)level);
	return 0;
}

void priv_helper_main(int argc, char **argv)
{
	if (argc != 2 || strcmp(argv[1], PRIV_HELPER_ARG))
		return;
	log_set_tag("cpuosd-priv");
	prctl(PR_SET_NAME, "cpuosd-priv");
	signal(SIGPIPE, SIG_IGN);
	/* SIGTERM and SIGINT stay blocked, as the daemon blocked them (the
	 * mask survives exec): a stop sent to the whole group must leave the
	 * helper to the daemon, which closes its socket last. */
	static char strs[PRIV_MAX_MSG];
	struct priv_config c = { 0 };
	if (read_config(PRIV_FD, &c, strs, sizeof(strs)) < 0) {
		log_error("no configuration from the daemon on descriptor %d: not started by "
			  "cpuosd?", PRIV_FD);
		_exit(2);
	}
	serve(&c, PRIV_FD);
}
