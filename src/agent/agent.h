/*
 * agent: the internal interfaces of cpuos-agent, the guest's PID 1 and the
 * host's way into the guest (docs/agent-protocol.md). One shared header: the
 * modules are small and share the connection and the process table.
 */
#ifndef CPUOS_AGENT_H
#define CPUOS_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/clock.h"
#include "common/fs.h"
#include "common/proto.h"

struct pollfd;

#define AGENT_VERSION "cpuos-agent 0.1.0"

/* Caps on what a (hostile) host can make us hold. */
#define MAX_OPS	       1024   /* live operations per connection */
#define MAX_PROCS      1024   /* processes not yet ended */
#define MAX_EXITED     256    /* ended processes kept until collected */
#define MAX_FWRITES    64     /* concurrent P_FWRITE */
#define MAX_ARGS       1024   /* A_ARG, and A_ENV separately */
#define MAX_LIST       100000 /* P_LIST entries */
#define MAX_LIST_DEPTH 64
#define MAX_GROUPS     64	  /* supplementary groups of a user */
#define RING_SIZE      (1u << 20) /* kept output per stream */
#define CMD_MAX	       4096	  /* A_CMD */

/* Out-queue watermarks: over HIGH we stop reading subscribed pipes and files
 * being read, and resume under LOW; over HARD we stop reading requests. */
#define OUT_HIGH  (4u << 20)
#define OUT_LOW	  (1u << 20)
#define OUT_HARD  (64u << 20)
#define STDIN_CAP (1u << 20) /* per process; over it we stop reading requests */

#define TICK_MS	 50  /* reconnect probe of the virtio port */
#define GRACE_MS 100 /* wait for pipes held by descendants after exit */

/* --- sys.c: logging, clock, small requests --- */

/* One short line on stderr (the console as PID 1), prefixed "cpuos-agent: ". */
void alog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* --- user.c: /etc/passwd and /etc/group, without NSS (static binary) --- */

struct user {
	uid_t uid;
	gid_t gid;
	char name[256];
	char home[PROTO_MAX_STR + 1];
	gid_t groups[MAX_GROUPS];
	int ngroups;
};

/* Looks up a user by name: 0, -ENOENT when unknown, -errno on read errors.
 * "root" always resolves (uid 0, /root) even without /etc/passwd. */
int user_lookup(const char *name, struct user *u);

/* --- conn.c: the channel, the operations table and the out queue --- */

enum op_kind { OP_EXEC, OP_ATTACH, OP_WAIT, OP_FWRITE, OP_FREAD };

struct proc;

/* A live operation: a request that has not yet sent its terminal frame. */
struct op {
	uint32_t id;
	enum op_kind kind;
	struct proc *proc; /* exec, attach, wait: holds one subscription */
	int fd;		   /* fwrite, fread: -1 when none */
	uint64_t size;	   /* bytes written or read so far */
	uint64_t limit;	   /* fread: st_size when opened */
	char *path, *tmp;  /* fwrite: target and temporary file */
	uint32_t mode;
	uid_t uid;
	gid_t gid;
	bool own; /* fwrite: fchown to uid:gid */
	/* Credit windows (docs/agent-protocol.md): bytes this operation may
	 * still send (exec, attach, fread), and input bytes taken but not yet
	 * credited back to the host (stdin, fwrite). */
	int64_t credit;
	uint64_t in_unacked;
};

struct conn {
	int fd;		/* channel, -1 when none */
	bool up;	/* a host is connected */
	bool broken;	/* drop the connection at the end of this loop turn */
	bool throttled; /* out queue went over OUT_HIGH, not yet under OUT_LOW */
	bool is_socket; /* --listen: close the fd on disconnect */
	struct pbuf in;
	struct pbuf out;
	size_t out_head; /* bytes of out already written */
	struct op *ops[MAX_OPS];
	int nops, nfwrite, nfread;
};

void conn_init(struct conn *c);
/* Starts a connection on fd (already nonblocking). */
void conn_open(struct conn *c, int fd);
/* Ends the connection: buffers cleared, every operation ended silently
 * (processes live on). Closes the fd only for sockets. */
void conn_drop(struct conn *c);
/* Reads what the channel has and runs the complete frames. */
void conn_read(struct conn *c);
/* Writes what the channel takes without blocking. */
void conn_flush(struct conn *c);
/* Writes the out queue, waiting up to timeout_ms: 0 or -errno. */
int conn_flush_wait(struct conn *c, int timeout_ms);
size_t conn_pending(const struct conn *c);
/* Whether requests should be read now (not over OUT_HARD nor stdin caps). */
bool conn_want_read(const struct conn *c);

struct op *op_find(struct conn *c, uint32_t id);
/* Registers operation id of kind; NULL after sending P_ERROR (cap, memory). */
struct op *op_open(struct conn *c, uint32_t id, enum op_kind kind);
/* The output credit a request asks for with A_WINDOW (clamped to the
 * protocol's range; the default when absent): 0, or -1 after P_ERROR. */
int op_window(struct conn *c, const struct proto_frame *f, int64_t *credit);
/* Tells the host that n more input bytes of op were taken (batched). */
void op_input_taken(struct conn *c, struct op *op, size_t n);
/* Returns stdin credit of exec and attach operations whose process has
 * written its stdin down; call once per loop turn. */
void conn_stdin_credit(struct conn *c);
/* Forgets an operation after its terminal frame (or silently), releasing what
 * it holds: subscription, fwrite temporary file, fread descriptor. */
void op_close(struct conn *c, struct op *op);

/* Frame building on c->out: begin, proto_put_* on &c->out, then end with the
 * first error seen (an error drops the frame and breaks the connection). */
int out_begin(struct conn *c, uint16_t type, uint16_t flags, uint32_t id);
void out_end(struct conn *c, int r);
void send_raw(struct conn *c, uint16_t type, uint16_t flags, uint32_t id, const void *p, size_t n);
void send_ok(struct conn *c, uint32_t id);
/* P_ERROR with A_ERRNO err (positive) and A_MESSAGE from fmt. */
void send_error(struct conn *c, uint32_t id, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* P_ERROR for an attribute getter's result r (< 0) on attribute what. */
void send_attr_error(struct conn *c, uint32_t id, int r, const char *what);

/* Request handlers: each sends a terminal frame or opens an operation. */
void req_exec(struct conn *c, const struct proto_frame *f);
void req_attach(struct conn *c, const struct proto_frame *f);
void req_wait(struct conn *c, const struct proto_frame *f);
void req_signal(struct conn *c, const struct proto_frame *f);
void req_ps(struct conn *c, const struct proto_frame *f);
void req_fwrite(struct conn *c, const struct proto_frame *f);
void req_fread(struct conn *c, const struct proto_frame *f);
void req_stat(struct conn *c, const struct proto_frame *f);
void req_list(struct conn *c, const struct proto_frame *f);
void req_mkdir(struct conn *c, const struct proto_frame *f);
void req_remove(struct conn *c, const struct proto_frame *f);
void req_rename(struct conn *c, const struct proto_frame *f);
void req_settime(struct conn *c, const struct proto_frame *f);
void req_entropy(struct conn *c, const struct proto_frame *f);
void req_poweroff(struct conn *c, const struct proto_frame *f);

/* --- files.c (metadata) and xfer.c (content): file operations --- */

/* P_DATA on an fwrite operation. */
void fwrite_data(struct conn *c, struct op *op, const struct proto_frame *f);
/* Releases an fwrite: closes and removes the temporary file. */
void fwrite_release(struct op *op);
/* Reads the next chunks of open freads while the out queue has room. */
void fread_pump(struct conn *c);
/* Whether an fread has credit to send (the loop must not sleep then). */
bool fread_ready(const struct conn *c);
/* Gets absolute path attribute tag into buf[PROTO_MAX_STR + 1]: 0, or -1
 * after sending P_ERROR. */
int get_abs_path(struct conn *c, const struct proto_frame *f, uint16_t tag, char *buf,
		 const char *what);
/* Optional A_USER: fills *u (root when absent) and *given: 0, or -1 after
 * sending P_ERROR. */
int get_user(struct conn *c, const struct proto_frame *f, struct user *u, bool *given);

/* --- proc.c: processes --- */

struct ring {
	uint8_t *buf;	/* RING_SIZE bytes, allocated on first output */
	uint64_t total; /* bytes ever written to the stream */
};

struct proc {
	struct proc *prev, *next;
	uint32_t id; /* A_PROC, never reused */
	pid_t pid;   /* also the process group id (setsid) */
	char *cmd;
	int out_fd[2]; /* stdout, stderr read ends; -1 once at EOF */
	int in_fd;     /* stdin write end, -1 when none or closed */
	struct pbuf in;
	size_t in_head;
	bool in_eof; /* close stdin once in is written */
	struct ring ring[2];
	bool reaped, ended, dead, timed_out;
	bool background; /* kept after its exit is told, until evicted */
	int status;	    /* wait status once reaped */
	int64_t deadline;   /* A_TIMEOUT_MS expiry (monotonic ms), 0 = none */
	int64_t grace;	    /* reaped with pipes open: stop waiting then */
	int64_t kill_by;    /* SIGKILL sent: reported killed by then if not reaped */
	uint64_t end_seq;   /* order of ending, for evicting the oldest */
	int nstream, nwait; /* subscribed operations */
	char *cgroup;	    /* our cgroup directory, or NULL */
};

struct spawn {
	char **argv; /* NULL-terminated */
	char **env;
	const char *cwd;
	const struct user *user;
	bool setids; /* change uid/gid/groups in the child */
	bool want_stdin;
	uint64_t timeout_ms;
	const char *cmd; /* for listings */
};

/* Starts a process (own session, process group and cgroup): 0 with *out, or
 * -errno (-EAGAIN at MAX_PROCS). */
int proc_spawn(const struct spawn *s, struct proc **out);
/* Live (not collected) process by agent id, or NULL. */
struct proc *proc_find(uint32_t id);
/* Iteration over live processes in creation order: proc_next(NULL) first. */
struct proc *proc_next(struct proc *p);
/* Signals the process group; SIGKILL also kills the cgroup: 0 or -errno. */
int proc_kill(struct proc *p, int sig);
/* Forgets an ended process (its P_EXIT reached someone). */
void proc_collect(struct proc *p);
void proc_subscribe(struct proc *p, bool stream);
void proc_unsubscribe(struct proc *p, bool stream);
/* Queues stdin bytes; eof closes stdin once written. */
void proc_stdin(struct proc *p, const void *buf, size_t n, bool eof);
bool proc_stdin_full(void);
/* Returns the buffered bytes of a stream as up to two spans. */
void ring_spans(const struct ring *r, const uint8_t *span[2], size_t len[2]);

struct ptag {
	struct proc *p;
	int what; /* 0 stdout, 1 stderr, 2 stdin */
};
/* Fills pollfds for process pipes; returns how many. */
int proc_poll_fill(struct pollfd *pfd, struct ptag *tag, int max, bool throttled);
void proc_poll_event(const struct ptag *t, short revents);
/* Reaps exited children (SIGCHLD), a bounded batch per call: true when
 * more may be waiting (call again before sleeping). */
bool proc_reap(void);
/* Nearest timeout or grace expiry (monotonic ms), or 0 when none. */
int64_t proc_next_timer(void);
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
int cgroup_set(const char *dir, const char *knob, const char *val);

/* --- exec.c: process requests and delivery to subscribers --- */

/* New output of p read from a pipe (stream 0 stdout, 1 stderr). */
void exec_output(struct proc *p, int stream, const uint8_t *buf, size_t n);
/* p has ended: P_EXIT to every subscriber, then collect if any. */
void exec_ended(struct proc *p);
/* Whether every operation streaming p's output has credit: else its pipes
 * are not read, so the process waits for that reader alone. */
bool exec_can_send(const struct proc *p);

/* --- init.c: PID 1 duties --- */

/* Mounts, root overlay, switch root, hostname, loopback, self-install; on
 * failure it logs one line and resets the VM. Returns the channel fd. */
int init_boot(void);
/* Stops everything and resets the VM; notice is PN_POWEROFF, PN_REBOOT or 0
 * (none, the host asked). Never returns. */
__attribute__((noreturn)) void init_shutdown(struct conn *c, int notice);
/* Re-checks the port after a disconnect: true when a host is there. */
bool init_port_ready(int fd);

/* --- main.c --- */

enum shut { SHUT_NONE, SHUT_POWEROFF, SHUT_REBOOT, SHUT_REQUEST };

struct agent {
	bool pid1;
	uint64_t boot_ns, ready_ns; /* CLOCK_BOOTTIME at start and when serving */
	enum shut shutdown; /* set to stop the loop */
	struct conn conn;
};
extern struct agent agent;

#endif
