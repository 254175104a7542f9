/*
 * main: entry and mode selection (PID 1 in the guest, --listen on a Unix
 * socket for tests, or poweroff/reboot/halt by argv[0]) and the event loop:
 * one poll over the channel, a signalfd and the process pipes.
 */
#include "agent/agent.h"

#include "agent/code.h"
#include "agent/conn.h"
#include "agent/init.h"
#include "agent/proc.h"
#include "agent/sys.h"
#include "agent/watch.h"
#include "agent/xfer.h"
#include "common/clock.h"
#include "common/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_POLL (3 * MAX_PROCS + 2 * MAX_CTX + MAX_WATCHES + 8)
#define TICK_MS	 50 /* reconnect probe of the virtio port */

struct agent agent;

static struct pollfd pfd[MAX_POLL];
static struct proc_tag ptag[MAX_POLL];
static struct code_tag ctag[MAX_POLL];
static struct watch_tag wtag[MAX_POLL];

static int usage(void)
{
	fprintf(stderr, "usage: cpuos-agent [--listen PATH | --version]\n");
	return 2;
}

/* poweroff, halt and reboot inside the guest: ask PID 1. */
static int multicall(const char *name)
{
	int sig = strcmp(name, "reboot") == 0 ? SIGTERM : SIGUSR2;
	if (kill(1, sig) < 0) {
		fprintf(stderr, "%s: cannot signal init: %s\n", name, strerror(errno));
		return 1;
	}
	return 0;
}

static int make_signalfd(void)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGUSR2);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	/* Blocked first, so nothing arrives between here and the loop. */
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

static int listen_on(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "cpuos-agent: socket path '%s' is too long\n", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	struct stat st;
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 8) < 0) {
		fprintf(stderr, "cpuos-agent: cannot listen on '%s': %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Reads the signalfd: notes SIGCHLD in *reap, asks for a shutdown otherwise. */
static void on_signals(int sfd, bool *reap)
{
	struct signalfd_siginfo si;
	while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGCHLD)
			*reap = true;
		else if (agent.shutdown == SHUT_NONE)
			agent.shutdown = si.ssi_signo == SIGUSR2 ? SHUT_POWEROFF : SHUT_REBOOT;
	}
}

static void loop(int sfd, int lfd)
{
	struct conn *c = &agent.conn;
	int64_t next_probe = clock_ms(); /* never 0: 0 means no timer */
	/* Children may be waiting to be reaped. */
	bool reap = false;
	while (agent.shutdown == SHUT_NONE) {
		if (c->up && !c->throttled)
			xfer_fread_pump(c);
		code_pump(c);
		if (c->up)
			watch_pump(c->throttled);
		if (c->up && conn_pending(c))
			conn_flush(c);

		int n = 0, chan = -1, lis = -1;
		pfd[n++] = (struct pollfd){.fd = sfd, .events = POLLIN};
		if (c->up && !c->broken && !c->hup) {
			short ev = conn_want_read(c) ? POLLIN : 0;
			if (conn_pending(c))
				ev |= POLLOUT;
			chan = n;
			pfd[n++] = (struct pollfd){.fd = c->fd, .events = ev};
		} else if (lfd >= 0) {
			lis = n;
			pfd[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
		}
		int first_proc = n;
		n += proc_poll_fill(pfd + n, ptag + n, MAX_POLL - n, c->throttled);
		int first_code = n;
		n += code_poll_fill(pfd + n, ctag + n, MAX_POLL - n, c->throttled);
		int first_watch = n;
		n += watch_poll_fill(pfd + n, wtag + n, MAX_POLL - n, c->throttled || !c->up);

		int64_t now = clock_ms(), wake = proc_next_timer(), code_wake = code_next_timer();
		if (code_wake && (!wake || code_wake < wake))
			wake = code_wake;
		/* The virtio port reports POLLHUP for as long as no host is
		 * connected: probe it on a tick instead of polling it. */
		if ((!c->up || c->hup) && c->fd >= 0 && (!wake || next_probe < wake))
			wake = next_probe;
		int timeout = -1;
		if (wake)
			timeout = wake <= now ? 0 : (int)(wake - now < 60000 ? wake - now : 60000);
		if (c->up && !c->throttled && xfer_fread_ready(c))
			timeout = 0;
		if (c->up && watch_pending(c->throttled))
			timeout = 0;
		if (reap)
			timeout = 0;

		if (poll(pfd, (nfds_t)n, timeout) < 0 && errno != EINTR) {
			sys_log("poll: %s", strerror(errno));
			continue;
		}
		if (pfd[0].revents)
			on_signals(sfd, &reap);
		/* Signals coalesce: one SIGCHLD may stand for many children.
		 * A batch at a time, so a flood of dying orphans (a fork bomb's)
		 * cannot keep the loop from the channel and the timers. */
		if (reap)
			reap = proc_reap();
		if (chan >= 0 && pfd[chan].revents) {
			short re = pfd[chan].revents;
			if (re & POLLOUT)
				conn_flush(c);
			if (re & (POLLIN | POLLHUP | POLLERR))
				conn_read(c);
			/* Paused reading still learns of a hang-up. */
			if ((re & (POLLHUP | POLLERR | POLLNVAL)) && !(pfd[chan].events & POLLIN))
				conn_hangup(c);
		}
		if (lis >= 0 && (pfd[lis].revents & POLLIN)) {
			int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			if (fd >= 0)
				conn_open(c, fd);
		}
		for (int i = first_proc; i < first_code; i++)
			if (pfd[i].revents)
				proc_poll_event(&ptag[i], pfd[i].revents);
		for (int i = first_code; i < first_watch; i++)
			if (pfd[i].revents)
				code_poll_event(&ctag[i], pfd[i].revents);
		for (int i = first_watch; i < n; i++)
			if (pfd[i].revents)
				watch_poll_event(&wtag[i], pfd[i].revents);
		proc_timers(clock_ms(), c->throttled);
		code_timers(clock_ms());

		if (c->broken) {
			conn_drop(c);
			/* A host that stays connected after a bad frame gets a
			 * fresh stream only after a pause, not in a tight loop. */
			next_probe = clock_ms() + TICK_MS;
		}
		if ((!c->up || c->hup) && c->fd >= 0 && clock_ms() >= next_probe) {
			next_probe = clock_ms() + TICK_MS;
			bool host = init_port_ready(c->fd);
			if (host && c->hup)
				c->hup = false; /* the session goes on until a P_HELLO */
			else if (host)
				conn_open(c, c->fd);
		}
		if (c->up)
			conn_stdin_credit(c);
		proc_sweep();
	}
}

/* Boot timings reported in P_HELLO: the host splits its boot figure
 * into kernel and agent time with them. */
static uint64_t boottime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc < 1)
		return usage();
	const char *name = basename(argv[0]);
	if (!strcmp(name, "poweroff") || !strcmp(name, "halt") || !strcmp(name, "reboot"))
		return multicall(name);

	agent.pid1 = getpid() == 1;
	agent.boot_ns = boottime_ns();
	conn_init(&agent.conn);
	const char *listen_path = NULL;
	if (!agent.pid1) {
		if (argc == 2 && !strcmp(argv[1], "--version")) {
			printf("%s (protocol %d)\n", AGENT_VERSION, PROTO_VERSION);
			return 0;
		}
		if (argc != 3 || strcmp(argv[1], "--listen") != 0)
			return usage();
		listen_path = argv[2];
		/* Children get fds 0-2 from pipes; ours must not be free slots. */
		int fd;
		while ((fd = open("/dev/null", O_RDWR | O_CLOEXEC)) >= 0 && fd <= 2)
			fcntl(fd, F_SETFD, 0);
		if (fd > 2)
			close(fd);
	}

	int sfd = make_signalfd();
	int lfd = -1;
	if (agent.pid1) {
		int fd = init_boot();
		if (sfd < 0) {
			sys_log("cannot create signalfd: %s", strerror(errno));
			init_shutdown(&agent.conn, 0);
		}
		agent.conn.fd = fd; /* up once a host is seen (loop probe) */
		agent.run_dir = "/run/cpuos"; /* made by init_boot */
		agent.ready_ns = boottime_ns();
		sys_log("ready");
	} else {
		if (sfd < 0) {
			fprintf(stderr, "cpuos-agent: cannot create signalfd: %s\n",
				strerror(errno));
			return 1;
		}
		proc_init(access("/sys/fs/cgroup/cpuos/cgroup.procs", W_OK) == 0);
		agent.conn.is_socket = true;
		lfd = listen_on(listen_path);
		if (lfd < 0)
			return 1;
		/* Kernel scripts (code.c) go beside the socket. */
		static char run_dir[4200];
		snprintf(run_dir, sizeof(run_dir), "%s.d", listen_path);
		if (mkdir(run_dir, 0755) < 0 && errno != EEXIST) {
			fprintf(stderr, "cpuos-agent: cannot make '%s': %s\n", run_dir, strerror(errno));
			return 1;
		}
		agent.run_dir = run_dir;
	}

	loop(sfd, lfd);

	struct conn *c = &agent.conn;
	if (agent.pid1)
		init_shutdown(c, agent.shutdown == SHUT_POWEROFF ? PN_POWEROFF
				 : agent.shutdown == SHUT_REBOOT ? PN_REBOOT
								 : 0);
	/* --listen: answer flushed, processes killed, socket removed. */
	conn_flush_wait(c, 1000);
	proc_kill_all();
	unlink(listen_path);
	return 0;
}
