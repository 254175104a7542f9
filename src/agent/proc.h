/*
 * proc: the process table. Processes run in their own session, process group
 * and cgroup; the table keeps their output, feeds their stdin, enforces
 * timeouts and decides when one has ended. Requests about them are exec's.
 */
#ifndef CPUOS_AGENT_PROC_H
#define CPUOS_AGENT_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/proto.h"

struct pollfd;
struct user;

/* Caps on what a (hostile) host can make us hold. */
#define MAX_PROCS  1024	      /* processes not yet ended */
#define MAX_EXITED 256	      /* ended processes kept until collected */
#define RING_SIZE  (1u << 20) /* kept output per stream */
#define STDIN_CAP  (1u << 20) /* per process; over it we stop reading requests */

struct proc_ring {
	uint8_t *buf;	/* RING_SIZE bytes, allocated on first output */
	uint64_t total; /* bytes ever written to the stream */
};

struct proc {
	struct proc *prev, *next;
	uint32_t id; /* A_PROC, never reused */
	pid_t pid;   /* also the process group id (setsid) */
	char *cmd;
	int out_fd[2]; /* stdout, stderr read ends; -1 once at EOF. On a
			* pseudo-terminal out_fd[0] reads its master, out_fd[1]
			* is -1 from the start (one stream) */
	int in_fd;     /* stdin write end, -1 when none or closed */
	int pty_fd;    /* the terminal's master, for resizing; -1 when none */
	struct pbuf in;
	size_t in_head;
	bool in_eof; /* close stdin once in is written */
	struct proc_ring ring[2];
	bool reaped, ended, dead, timed_out;
	bool background;    /* kept after its exit is told, until evicted */
	bool pty;	    /* runs on a pseudo-terminal */
	int status;	    /* wait status once reaped */
	int64_t deadline;   /* A_TIMEOUT_MS expiry (monotonic ms), 0 = none */
	int64_t grace;	    /* reaped with pipes open: stop waiting then */
	int64_t kill_by;    /* SIGKILL sent: reported killed by then if not reaped */
	uint64_t end_seq;   /* order of ending, for evicting the oldest */
	int nstream, nwait; /* subscribed operations */
	char *cgroup;	    /* our cgroup directory, or NULL */
};

struct proc_spawn_args {
	char **argv; /* NULL-terminated */
	char **env;
	const char *cwd;
	const struct user *user;
	bool setids; /* change uid/gid/groups in the child */
	bool want_stdin;
	/* On a new pseudo-terminal of this size (rows and cols not 0): the
	 * child's stdin, stdout and stderr and its controlling terminal. */
	uint16_t rows, cols;
	uint64_t timeout_ms;
	const char *cmd; /* for listings */
	/* A code kernel's channels (code.c): the child gets ctl[0] as its fd 3 and
	 * ctl[1] as its fd 4 (its stdin stays /dev/null). */
	bool has_ctl;
	int ctl[2];
};

/* Starts a process (own session, process group and cgroup): 0 with *out, or
 * -errno (-EAGAIN at MAX_PROCS). */
int proc_spawn(const struct proc_spawn_args *s, struct proc **out);
/* Sets the size of p's terminal (the kernel sends SIGWINCH to its
 * foreground group): 0, -ENOTTY when p has none, or -errno. */
int proc_resize(struct proc *p, uint16_t rows, uint16_t cols);
/* Live (not collected) process by agent id, or NULL. */
struct proc *proc_find(uint32_t id);
/* Iteration over live processes in creation order: proc_next(NULL) first. */
struct proc *proc_next(struct proc *p);
/* Signals the process group; SIGKILL also kills the cgroup: 0 or -errno. */
int proc_kill(struct proc *p, int sig);
/* Forgets an ended process (its P_EXIT reached someone). */
void proc_collect(struct proc *p);
/* Counts an operation that streams p's output (stream) or waits for its
 * exit; proc_unsubscribe undoes it. */
void proc_subscribe(struct proc *p, bool stream);
void proc_unsubscribe(struct proc *p, bool stream);
/* Queues stdin bytes; eof closes stdin once written. */
void proc_stdin(struct proc *p, const void *buf, size_t n, bool eof);
/* Whether a process has over STDIN_CAP stdin bytes queued. */
bool proc_stdin_full(void);
/* Reads what p's output pipes hold now, as far as its receivers' credit and
 * the out queue allow: 1 once both are empty or closed, 0 when there was more
 * than one turn's worth, -1 when held back (call again later). p may end in it
 * (exec_ended). */
int proc_drain(struct proc *p, bool throttled);
/* Returns the buffered bytes of a stream as up to two spans. */
void proc_ring_spans(const struct proc_ring *r, const uint8_t *span[2], size_t len[2]);

struct proc_tag {
	struct proc *p;
	int what; /* 0 stdout, 1 stderr, 2 stdin */
};
/* Fills pollfds for process pipes; returns how many. Output pipes someone
 * receives are left out when throttled (the out queue over OUT_HIGH) or a
 * receiver has no credit (exec_can_send). */
int proc_poll_fill(struct pollfd *pfd, struct proc_tag *tag, int max, bool throttled);
/* Reads the output pipe or writes the stdin pipe that t names; the
 * process may end in it (exec_ended). */
void proc_poll_event(const struct proc_tag *t, short revents);
/* Reaps exited children (SIGCHLD), a bounded batch per call: true when
 * more may be waiting (call again before sleeping). */
bool proc_reap(void);
/* Nearest timeout or grace expiry (monotonic ms), or 0 when none. */
int64_t proc_next_timer(void);
/* Acts on what is due at now: timeouts, kills not reaped in time, and
 * the end of the grace wait for pipes (throttled as in proc_poll_fill). */
void proc_timers(int64_t now, bool throttled);
/* Frees collected processes; call once per loop turn. */
void proc_sweep(void);
/* Kills every process group (listen mode exit). */
void proc_kill_all(void);
/* Whether the process table is using cgroups, decided at start. When it
 * is, every process gets its own cgroup under /sys/fs/cgroup/cpuos or does
 * not start. */
void proc_init(bool cgroups);
/* Writes val to the file knob of cgroup directory dir: 0 or -errno. */
int proc_cgroup_set(const char *dir, const char *knob, const char *val);

#endif
