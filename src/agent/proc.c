/*
 * proc: the process table. Spawns processes in their own session, process
 * group and cgroup (with the per-process limits of docs/agent-protocol.md),
 * keeps the last RING_SIZE bytes of each output stream, feeds stdin, enforces
 * timeouts, reaps, and decides when a process has ended.
 */
#include "agent/proc.h"

#include "agent/agent.h"
#include "agent/exec.h"
#include "agent/sys.h"
#include "agent/user.h"
#include "common/clock.h"
#include "common/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#define CGROUP_ROOT	  "/sys/fs/cgroup/cpuos"
#define MAX_STALE_CGROUPS 1024
/* Per process: a fork bomb stops at this many tasks, a quarter of the
 * sandbox's pids.max (init.c), so it cannot take every pid from the others. */
#define PROC_PIDS_MAX "1024"
/* After a SIGKILL (timeout or P_SIGNAL), P_EXIT waits this long for the
 * process to be reaped, then reports it killed anyway: a leader stuck in the
 * kernel, or one queued behind the deaths of a fork bomb's thousand
 * processes (1.3 s under TCG), must not hold the exec past its deadline. A
 * plain process is reaped within milliseconds of its SIGKILL. */
#define KILL_WAIT_MS 300
#define GRACE_MS     100 /* wait for pipes held by descendants after exit */
/* Children reaped per proc_reap call: orphans of a fork bomb (PID 1 adopts
 * them) can die faster than one loop turn reaps them, and the loop must
 * still get to its timers. */
#define REAP_BATCH 256

static struct proc *head, *tail;
static uint32_t last_id;
static int nlive;  /* not ended */
static int nended; /* ended, not collected */
static uint64_t end_seq;
static bool use_cgroups;
/* Cgroups whose rmdir failed (a descendant still lives): retried on SIGCHLD.
 * A process that ended before its timeout leaves its deadline here: what it
 * left behind in its cgroup is killed then (the timeout covers the tree). */
struct stale {
	char *path;
	int64_t deadline; /* monotonic ms, 0 = none */
};
static struct stale stale[MAX_STALE_CGROUPS];
static int nstale;
/* Empty cgroups kept for the next processes: making and removing a cgroup
 * waits for RCU grace periods (milliseconds under TCG, a third of an exec
 * of /bin/true), reusing an empty one costs nothing. */
#define SPARE_CGROUPS 8
static char *spare[SPARE_CGROUPS];
static int nspare;

extern char **environ;

void proc_init(bool cgroups)
{
	use_cgroups = cgroups;
}

struct proc *proc_next(struct proc *p)
{
	p = p ? p->next : head;
	while (p && p->dead)
		p = p->next;
	return p;
}

struct proc *proc_find(uint32_t id)
{
	for (struct proc *p = proc_next(NULL); p; p = proc_next(p))
		if (p->id == id)
			return p;
	return NULL;
}

/* --- ring buffers --- */

static void ring_append(struct proc_ring *r, const uint8_t *p, size_t n)
{
	if (!r->buf)
		r->buf = malloc(RING_SIZE);
	if (!r->buf) {
		r->total += n; /* out of memory: count the bytes, keep none */
		return;
	}
	if (n > RING_SIZE) {
		r->total += n - RING_SIZE;
		p += n - RING_SIZE;
		n = RING_SIZE;
	}
	size_t pos = (size_t)(r->total % RING_SIZE);
	size_t first = n < RING_SIZE - pos ? n : RING_SIZE - pos;
	memcpy(r->buf + pos, p, first);
	memcpy(r->buf, p + first, n - first);
	r->total += n;
}

void proc_ring_spans(const struct proc_ring *r, const uint8_t *span[2], size_t len[2])
{
	span[0] = span[1] = NULL;
	len[0] = len[1] = 0;
	if (!r->buf || r->total == 0)
		return;
	size_t have = r->total < RING_SIZE ? (size_t)r->total : RING_SIZE;
	size_t start = (size_t)((r->total - have) % RING_SIZE);
	span[0] = r->buf + start;
	len[0] = have < RING_SIZE - start ? have : RING_SIZE - start;
	span[1] = r->buf;
	len[1] = have - len[0];
}

/* --- cgroups --- */

/* Does the cgroup at dir hold no process? */
static bool cgroup_empty(const char *dir)
{
	char path[256], buf[256];
	snprintf(path, sizeof(path), "%s/cgroup.events", dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	return strstr(buf, "populated 0") != NULL;
}

int proc_cgroup_set(const char *dir, const char *knob, const char *val)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", dir, knob);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t n = strlen(val);
	int r = write(fd, val, n) == (ssize_t)n ? 0 : -errno;
	close(fd);
	return r;
}

/* Kills every task in dir and its descendants. The kernel counts kills
 * (kill_seq) before it signals, and a fork that started before the count
 * changed is killed as it completes: a fork bomb cannot outrun it, no need
 * to freeze first. (A fix of 2025 that Debian's 6.1.192, our kernel, has;
 * an older 6.1 could miss such a child.) */
static void cgroup_kill(const char *dir)
{
	int r = proc_cgroup_set(dir, "cgroup.kill", "1");
	if (r < 0 && r != -ENOENT)
		sys_log("cannot write '%s/cgroup.kill': %s", dir, strerror(-r));
}

/* Gives up a process's cgroup: kept as a spare if empty, else removed (or
 * retried later while a descendant lives, killed at deadline if not 0).
 * Takes over path. */
static void cgroup_rmdir(char *path, int64_t deadline)
{
	if (nspare < SPARE_CGROUPS && cgroup_empty(path)) {
		spare[nspare++] = path;
		return;
	}
	if (rmdir(path) == 0 || errno == ENOENT) {
		free(path);
		return;
	}
	if (nstale < MAX_STALE_CGROUPS) {
		stale[nstale++] = (struct stale){.path = path, .deadline = deadline};
		return;
	}
	if (deadline)
		cgroup_kill(path); /* no room to wait for its deadline */
	free(path);
}

static void cgroup_retry(void)
{
	for (int i = nstale - 1; i >= 0; i--) {
		if (rmdir(stale[i].path) == 0 || errno == ENOENT) {
			free(stale[i].path);
			stale[i] = stale[--nstale];
		}
	}
}

/* Kills the leftovers of ended processes whose timeout has come. */
static void cgroup_timers(int64_t now)
{
	for (int i = 0; i < nstale; i++) {
		if (stale[i].deadline && now >= stale[i].deadline) {
			stale[i].deadline = 0;
			cgroup_kill(stale[i].path);
		}
	}
}

/* --- lifecycle --- */

static void proc_free(struct proc *p)
{
	for (int i = 0; i < 2; i++) {
		if (p->out_fd[i] >= 0)
			close(p->out_fd[i]);
		free(p->ring[i].buf);
	}
	if (p->in_fd >= 0)
		close(p->in_fd);
	if (p->pty_fd >= 0)
		close(p->pty_fd);
	pbuf_release(&p->in);
	if (p->cgroup)
		cgroup_rmdir(p->cgroup, 0);
	free(p->cmd);
	free(p);
}

void proc_collect(struct proc *p)
{
	if (p->dead || !p->ended)
		return;
	p->dead = true;
	nended--;
}

void proc_sweep(void)
{
	struct proc *p = head;
	while (p) {
		struct proc *next = p->next;
		if (p->dead) {
			if (p->prev)
				p->prev->next = p->next;
			else
				head = p->next;
			if (p->next)
				p->next->prev = p->prev;
			else
				tail = p->prev;
			proc_free(p);
		}
		p = next;
	}
}

void proc_subscribe(struct proc *p, bool stream)
{
	if (stream)
		p->nstream++;
	else
		p->nwait++;
}

void proc_unsubscribe(struct proc *p, bool stream)
{
	if (stream)
		p->nstream--;
	else
		p->nwait--;
}

static void close_stdin(struct proc *p)
{
	if (p->in_fd >= 0)
		close(p->in_fd);
	p->in_fd = -1;
	pbuf_release(&p->in);
	p->in_head = 0;
	p->in_eof = false;
}

/* Keeps at most MAX_EXITED ended processes nobody collected: oldest go. */
static void evict_exited(void)
{
	while (nended > MAX_EXITED) {
		struct proc *old = NULL;
		for (struct proc *p = proc_next(NULL); p; p = proc_next(p))
			if (p->ended && (!old || p->end_seq < old->end_seq))
				old = p;
		if (!old)
			return;
		proc_collect(old);
	}
}

/* A process has ended once reaped and both pipes are closed. */
static void check_end(struct proc *p)
{
	if (p->ended || !p->reaped || p->out_fd[0] >= 0 || p->out_fd[1] >= 0)
		return;
	p->ended = true;
	p->end_seq = ++end_seq;
	nlive--;
	nended++;
	close_stdin(p);
	if (p->pty_fd >= 0) {
		close(p->pty_fd); /* the terminal goes with its last user */
		p->pty_fd = -1;
	}
	if (p->cgroup) {
		/* Descendants still there keep the timeout the command had. */
		cgroup_rmdir(p->cgroup, p->deadline);
		p->cgroup = NULL;
	}
	p->deadline = 0;
	exec_ended(p);
	evict_exited();
}

/* Reads once from a pipe: returns bytes read, 0 at EOF (pipe closed), -1
 * when nothing is there. */
static ssize_t read_pipe(struct proc *p, int stream)
{
	static uint8_t buf[PROTO_DATA_CHUNK];
	ssize_t n = read(p->out_fd[stream], buf, sizeof(buf));
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return -1;
	if (n <= 0) {
		close(p->out_fd[stream]);
		p->out_fd[stream] = -1;
		return 0;
	}
	ring_append(&p->ring[stream], buf, (size_t)n);
	exec_output(p, stream, buf, (size_t)n);
	return n;
}

static void write_stdin(struct proc *p)
{
	while (p->in_fd >= 0 && p->in.len > p->in_head) {
		ssize_t n = write(p->in_fd, p->in.data + p->in_head, p->in.len - p->in_head);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				close_stdin(p); /* EPIPE: the reader is gone */
			return;
		}
		p->in_head += (size_t)n;
	}
	if (p->in_fd >= 0) {
		p->in.len = p->in_head = 0;
		if (p->in_eof)
			close_stdin(p);
	}
}

void proc_stdin(struct proc *p, const void *buf, size_t n, bool eof)
{
	if (p->in_fd < 0)
		return;
	if (n && pbuf_append(&p->in, buf, n) < 0) {
		close_stdin(p);
		return;
	}
	if (eof)
		p->in_eof = true;
	write_stdin(p);
}

bool proc_stdin_full(void)
{
	for (struct proc *p = proc_next(NULL); p; p = proc_next(p))
		if (p->in_fd >= 0 && p->in.len - p->in_head > STDIN_CAP)
			return true;
	return false;
}

int proc_kill(struct proc *p, int sig)
{
	if (sig == SIGKILL && !p->reaped && !p->kill_by)
		p->kill_by = clock_ms() + KILL_WAIT_MS;
	if (sig == SIGKILL && p->cgroup)
		cgroup_kill(p->cgroup);
	if (killpg(p->pid, sig) < 0) {
		/* The leader may have left the group; it alone may still be there. */
		if (!p->reaped && kill(p->pid, sig) == 0)
			return 0;
		return (sig == SIGKILL && p->cgroup) ? 0 : -errno;
	}
	return 0;
}

void proc_kill_all(void)
{
	for (struct proc *p = proc_next(NULL); p; p = proc_next(p))
		if (!p->ended)
			proc_kill(p, SIGKILL);
}

/* --- spawning --- */

/* In the child: never returns. Only raw system calls and the error line. */
static __attribute__((noreturn)) void child(const struct proc_spawn_args *s, int fds[3], int cgfd)
{
	sigset_t none;
	sigemptyset(&none);
	/* The agent ignores SIGPIPE and blocks its signalfd signals; exec keeps
	 * both, and a shell pipeline would misbehave with them. */
	signal(SIGPIPE, SIG_DFL);
	/* An agent started in the background of a shell (--listen) ignores
	 * these: a kernel's interrupt (code.c) needs SIGINT. */
	signal(SIGINT, SIG_DFL);
	signal(SIGQUIT, SIG_DFL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();
	/* Join the cgroup before exec, so every descendant is inside it. A
	 * child left in the agent's cgroup would run with the agent's CPU
	 * weight and outside the sandbox's limits: it must not run at all. */
	if (cgfd >= 0 && write(cgfd, "0", 1) < 0) {
		dprintf(fds[2], "cpuos-agent: cannot join cgroup: %s\n", strerror(errno));
		_exit(127);
	}
	/* The agent's -1000 (init.c) is inherited: make the command an
	 * ordinary candidate for the OOM killer again. A sandbox made only of
	 * unkillable processes would leave a memory cgroup OOM no victim. */
	if (agent.pid1) {
		int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, "0", 1) != 1) {
			dprintf(fds[2], "cpuos-agent: cannot reset oom_score_adj: %s\n",
				strerror(errno));
			_exit(127);
		}
		close(fd);
	}
	for (int i = 0; i < 3; i++)
		if (dup2(fds[i], i) < 0)
			_exit(127);
	/* A new session has no controlling terminal: make the pty its own,
	 * so job control, ^C and SIGWINCH reach the foreground group. */
	if (s->rows && ioctl(0, TIOCSCTTY, 0) < 0) {
		dprintf(2, "cpuos-agent: cannot take the terminal: %s\n", strerror(errno));
		_exit(127);
	}
	if (s->has_ctl) {
		/* Out of the way of 3 and 4 first: either may be the other's number. */
		int req = fcntl(s->ctl[0], F_DUPFD_CLOEXEC, 5), ev = fcntl(s->ctl[1], F_DUPFD_CLOEXEC, 5);
		if (req < 0 || ev < 0 || dup2(req, 3) < 0 || dup2(ev, 4) < 0)
			_exit(127);
	}
	close_range(s->has_ctl ? 5 : 3, ~0u, 0);
	const char *err = NULL;
	if (s->setids) {
		const struct user *u = s->user;
		if (setgroups((size_t)u->ngroups, u->groups) < 0)
			err = "setgroups";
		else if (setgid(u->gid) < 0)
			err = "setgid";
		else if (setuid(u->uid) < 0)
			err = "setuid";
		if (err) {
			dprintf(2, "cpuos-agent: cannot %s for '%s': %s\n", err, u->name,
				strerror(errno));
			_exit(127);
		}
	}
	if (chdir(s->cwd) < 0) {
		dprintf(2, "cpuos-agent: cannot chdir to '%s': %s\n", s->cwd, strerror(errno));
		_exit(127);
	}
	/* execvp searches the PATH of environ: make it the child's. */
	environ = s->env;
	execvp(s->argv[0], s->argv);
	dprintf(2, "cpuos-agent: cannot run '%s': %s\n", s->argv[0], strerror(errno));
	_exit(127);
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

/* The per-process limits of a new cgroup: pids.max against fork bombs, and
 * memory.oom.group so that an OOM kills the whole command at once instead of
 * leaving it half alive. Missing knobs (a controller not enabled, as in
 * --listen on a host) are fine; a spare keeps its settings. */
static void limit_cgroup(const char *dir)
{
	static bool warned;
	int r = proc_cgroup_set(dir, "pids.max", PROC_PIDS_MAX);
	if (r == 0)
		r = proc_cgroup_set(dir, "memory.oom.group", "1");
	if (r < 0 && r != -ENOENT && !warned) {
		warned = true;
		sys_log("cannot set the limits of '%s': %s", dir, strerror(-r));
	}
}

static int make_cgroup(uint32_t id, char **dir, int *procs_fd)
{
	char path[256];
	char *d;
	if (nspare) {
		d = spare[--nspare];
	} else {
		snprintf(path, sizeof(path), CGROUP_ROOT "/p%u", id);
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return -errno;
		d = strdup(path);
		if (!d) {
			rmdir(path);
			return -ENOMEM;
		}
		limit_cgroup(d);
	}
	snprintf(path, sizeof(path), "%s/cgroup.procs", d);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		int r = -errno;
		rmdir(d);
		free(d);
		return r;
	}
	*dir = d;
	*procs_fd = fd;
	return 0;
}

int proc_resize(struct proc *p, uint16_t rows, uint16_t cols)
{
	if (p->pty_fd < 0)
		return p->ended ? -ESRCH : -ENOTTY;
	struct winsize ws = {.ws_row = rows, .ws_col = cols};
	return ioctl(p->pty_fd, TIOCSWINSZ, &ws) < 0 ? -errno : 0;
}

/* A new pseudo-terminal of the size s asks, in the layout of a pipe: its
 * master in m[0] (the agent's end: output, input, resizing), its slave in
 * m[1] (the child's stdin, stdout and stderr). 0 or -errno. */
static int open_pty(const struct proc_spawn_args *s, int m[2])
{
	char name[64];
	int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (master < 0)
		return -errno;
	struct winsize ws = {.ws_row = s->rows, .ws_col = s->cols};
	int r = 0;
	if (grantpt(master) < 0 || unlockpt(master) < 0 ||
	    ptsname_r(master, name, sizeof(name)) != 0 || ioctl(master, TIOCSWINSZ, &ws) < 0)
		r = -errno;
	int slave = r ? -1 : open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (!r && slave < 0)
		r = -errno;
	if (r) {
		close(master);
		return r;
	}
	m[0] = master;
	m[1] = slave;
	return 0;
}

int proc_spawn(const struct proc_spawn_args *s, struct proc **out)
{
	if (nlive >= MAX_PROCS)
		return -EAGAIN;
	int r = -ENOMEM;
	int opipe[2] = {-1, -1}, epipe[2] = {-1, -1}, ipipe[2] = {-1, -1};
	int cgfd = -1;
	struct proc *p = calloc(1, sizeof(*p));
	if (!p)
		goto fail;
	p->out_fd[0] = p->out_fd[1] = p->in_fd = p->pty_fd = -1;
	p->cmd = strdup(s->cmd);
	if (!p->cmd)
		goto fail;
	if (s->rows) {
		/* One terminal for all three: its master is read as stdout,
		 * written as stdin (two more descriptors of it, so closing
		 * either end alone leaves the other working). */
		if ((r = open_pty(s, opipe)) < 0)
			goto fail;
		p->pty = true;
		if ((ipipe[1] = fcntl(opipe[0], F_DUPFD_CLOEXEC, 0)) < 0 ||
		    (p->pty_fd = fcntl(opipe[0], F_DUPFD_CLOEXEC, 0)) < 0)
			goto fail_errno;
	} else if (pipe2(opipe, O_CLOEXEC) < 0 || pipe2(epipe, O_CLOEXEC) < 0) {
		goto fail_errno;
	}
	if (s->rows) {
		; /* stdin is the terminal */
	} else if (s->want_stdin) {
		if (pipe2(ipipe, O_CLOEXEC) < 0)
			goto fail_errno;
	} else {
		ipipe[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (ipipe[0] < 0)
			goto fail_errno;
	}
	if ((r = set_nonblock(opipe[0])) < 0 || (!s->rows && (r = set_nonblock(epipe[0])) < 0))
		goto fail;
	if (ipipe[1] >= 0 && (r = set_nonblock(ipipe[1])) < 0)
		goto fail;
	p->id = ++last_id;
	/* Where cgroups are in use a process without one would escape the
	 * limits (and a timeout could miss its descendants): refuse it. */
	if (use_cgroups && (r = make_cgroup(p->id, &p->cgroup, &cgfd)) < 0) {
		p->cgroup = NULL;
		goto fail;
	}

	pid_t pid = fork();
	if (pid < 0)
		goto fail_errno;
	if (pid == 0) {
		int fds[3] = {ipipe[0], opipe[1], epipe[1]};
		if (s->rows)
			fds[0] = fds[2] = opipe[1];
		child(s, fds, cgfd);
	}
	if (cgfd >= 0)
		close(cgfd);
	close(opipe[1]);
	if (epipe[1] >= 0)
		close(epipe[1]);
	if (ipipe[0] >= 0)
		close(ipipe[0]);
	p->pid = pid;
	p->out_fd[0] = opipe[0];
	p->out_fd[1] = epipe[0];
	p->in_fd = ipipe[1];
	if (s->timeout_ms) {
		uint64_t ms = s->timeout_ms > (uint64_t)INT32_MAX * 1000
				  ? (uint64_t)INT32_MAX * 1000
				  : s->timeout_ms;
		p->deadline = clock_ms() + (int64_t)ms;
	}
	p->prev = tail;
	if (tail)
		tail->next = p;
	else
		head = p;
	tail = p;
	nlive++;
	*out = p;
	return 0;

fail_errno:
	r = -errno;
fail:
	for (int i = 0; i < 2; i++) {
		if (opipe[i] >= 0)
			close(opipe[i]);
		if (epipe[i] >= 0)
			close(epipe[i]);
		if (ipipe[i] >= 0)
			close(ipipe[i]);
	}
	if (cgfd >= 0)
		close(cgfd);
	if (p) {
		if (p->pty_fd >= 0)
			close(p->pty_fd);
		if (p->cgroup) {
			rmdir(p->cgroup);
			free(p->cgroup);
		}
		free(p->cmd);
		free(p);
	}
	return r;
}

/* --- events --- */

int proc_poll_fill(struct pollfd *pfd, struct proc_tag *tag, int max, bool throttled)
{
	int n = 0;
	for (struct proc *p = proc_next(NULL); p; p = proc_next(p)) {
		if (p->ended)
			continue;
		/* Backpressure applies only to streams someone is receiving: the
		 * others always drain into the ring so their writers never block. */
		bool hold = (throttled && p->nstream > 0) || !exec_can_send(p);
		for (int i = 0; i < 2 && !hold; i++) {
			if (p->out_fd[i] < 0 || n >= max)
				continue;
			pfd[n] = (struct pollfd){.fd = p->out_fd[i], .events = POLLIN};
			tag[n++] = (struct proc_tag){.p = p, .what = i};
		}
		if (p->in_fd >= 0 && p->in.len > p->in_head && n < max) {
			pfd[n] = (struct pollfd){.fd = p->in_fd, .events = POLLOUT};
			tag[n++] = (struct proc_tag){.p = p, .what = 2};
		}
	}
	return n;
}

void proc_poll_event(const struct proc_tag *t, short revents)
{
	struct proc *p = t->p;
	if (p->dead || p->ended)
		return;
	if (t->what == 2) {
		if (revents & (POLLERR | POLLHUP | POLLNVAL))
			close_stdin(p);
		else if (p->in_fd >= 0)
			write_stdin(p);
		return;
	}
	if (p->out_fd[t->what] < 0)
		return;
	read_pipe(p, t->what);
	check_end(p);
}

int proc_drain(struct proc *p, bool throttled)
{
	for (int i = 0; i < 2; i++) {
		for (int k = 0; p->out_fd[i] >= 0; k++) {
			if (k == 16)
				return 0;
			if ((throttled && p->nstream > 0) || !exec_can_send(p))
				return -1;
			if (read_pipe(p, i) < 0)
				break; /* empty */
		}
	}
	check_end(p);
	return 1;
}

bool proc_reap(void)
{
	int status, n = 0;
	pid_t pid = 0;
	while (n++ < REAP_BATCH && (pid = waitpid(-1, &status, WNOHANG)) > 0) {
		struct proc *p;
		for (p = proc_next(NULL); p; p = proc_next(p))
			if (p->pid == pid && !p->reaped)
				break;
		if (!p)
			continue; /* an orphan we adopted as PID 1 */
		p->reaped = true;
		p->status = status;
		close_stdin(p);
		p->grace = clock_ms() + GRACE_MS;
		check_end(p);
	}
	cgroup_retry();
	return pid > 0;
}

int64_t proc_next_timer(void)
{
	int64_t t = 0;
	for (struct proc *p = proc_next(NULL); p; p = proc_next(p)) {
		if (p->ended)
			continue;
		if (p->deadline && (!t || p->deadline < t))
			t = p->deadline;
		if (p->kill_by && !p->reaped && (!t || p->kill_by < t))
			t = p->kill_by;
		if (p->reaped && (!t || p->grace < t))
			t = p->grace;
	}
	for (int i = 0; i < nstale; i++)
		if (stale[i].deadline && (!t || stale[i].deadline < t))
			t = stale[i].deadline;
	return t;
}

/* A leader that is still not reaped KILL_WAIT_MS after its SIGKILL is
 * reported as killed (it has a SIGKILL pending: it dies as soon as it
 * runs); its zombie, when it comes, is reaped as an orphan. */
static void give_up_waiting(struct proc *p, int64_t now)
{
	p->kill_by = 0;
	p->reaped = true;
	p->status = SIGKILL; /* a wait status: killed by SIGKILL */
	p->grace = now;
	close_stdin(p);
}

void proc_timers(int64_t now, bool throttled)
{
	cgroup_timers(now);
	for (struct proc *p = proc_next(NULL); p; p = proc_next(p)) {
		if (p->ended)
			continue;
		if (p->deadline && now >= p->deadline) {
			p->deadline = 0;
			p->timed_out = true;
			proc_kill(p, SIGKILL);
		}
		if (p->kill_by && !p->reaped && now >= p->kill_by)
			give_up_waiting(p, now);
		if (!p->reaped || now < p->grace)
			continue;
		/* Output the process itself wrote may still sit in a pipe we
		 * stopped reading for backpressure: wait for the host first. */
		if ((throttled && p->nstream > 0) || !exec_can_send(p)) {
			p->grace = now + GRACE_MS;
			continue;
		}
		/* A descendant still holds a pipe: take what is there, stop waiting. */
		for (int i = 0; i < 2; i++) {
			for (int k = 0; k < 16 && p->out_fd[i] >= 0; k++)
				if (read_pipe(p, i) <= 0)
					break;
			if (p->out_fd[i] >= 0) {
				close(p->out_fd[i]);
				p->out_fd[i] = -1;
			}
		}
		check_end(p);
	}
}
