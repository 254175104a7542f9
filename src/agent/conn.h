/*
 * conn: the channel to the host, the live operations of a connection and the
 * out queue with its watermarks. Every module answers requests through the
 * frame builders here; the request table that calls them is in conn.c.
 */
#ifndef CPUOS_AGENT_CONN_H
#define CPUOS_AGENT_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/proto.h"

struct proc;

#define MAX_OPS 1024 /* live operations per connection, a cap on the host */

/* Out-queue watermarks: over HIGH we stop reading subscribed pipes and files
 * being read, and resume under LOW; over HARD we stop reading requests. */
#define OUT_HIGH (4u << 20)
#define OUT_LOW	 (1u << 20)
#define OUT_HARD (64u << 20)

enum conn_op_kind { OP_EXEC, OP_ATTACH, OP_WAIT, OP_FWRITE, OP_FREAD, OP_CODE, OP_WATCH };

/* A live operation: a request that has not yet sent its terminal frame. */
struct conn_op {
	uint32_t id;
	enum conn_op_kind kind;
	struct proc *proc; /* exec, attach, wait, code: holds one subscription */
	int fd;		   /* fwrite, fread: -1 when none */
	uint64_t size;	   /* bytes written or read so far */
	uint64_t limit;	   /* fread: st_size when opened */
	char *path, *tmp;  /* fwrite: target and temporary file */
	uint32_t mode;
	uid_t uid;
	gid_t gid;
	bool own; /* fwrite: fchown to uid:gid */
	/* Credit windows (docs/agent-protocol.md): bytes this operation may
	 * still send (exec, attach, fread, code, watch), and input bytes taken but not yet
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
	bool hup;	/* the port has no host: no reading or writing until it has
			 * one again; the session lives on (conn_hangup) */
	size_t in_cut;	/* with hup: bytes of a frame half read when the host left */
	struct pbuf in;
	struct pbuf out;
	size_t out_head; /* bytes of out already written */
	struct conn_op *ops[MAX_OPS];
	int nops, nfwrite, nfread;
};

/* Empties c: no channel (fd -1), no host, no operation. */
void conn_init(struct conn *c);
/* Starts a connection on fd (already nonblocking). */
void conn_open(struct conn *c, int fd);
/* Ends the connection: buffers cleared, every operation ended silently
 * (processes live on). Closes the fd only for sockets. */
void conn_drop(struct conn *c);
/* The channel says no host is connected (EOF, POLLHUP): a socket's is final,
 * the port's only pauses the channel. */
void conn_hangup(struct conn *c);
/* Reads what the channel has and runs the complete frames. */
void conn_read(struct conn *c);
/* Writes what the channel takes without blocking. */
void conn_flush(struct conn *c);
/* Writes the out queue, waiting up to timeout_ms: 0 or -errno. */
int conn_flush_wait(struct conn *c, int timeout_ms);
/* Bytes of the out queue not yet written. */
size_t conn_pending(const struct conn *c);
/* Whether requests should be read now (not over OUT_HARD nor stdin caps). */
bool conn_want_read(const struct conn *c);

struct conn_op *conn_op_find(struct conn *c, uint32_t id);
/* Registers operation id of kind; NULL after sending P_ERROR (cap, memory). */
struct conn_op *conn_op_open(struct conn *c, uint32_t id, enum conn_op_kind kind);
/* The output credit a request asks for with A_WINDOW (clamped to the
 * protocol's range; the default when absent): 0, or -1 after P_ERROR. */
int conn_op_window(struct conn *c, const struct proto_frame *f, int64_t *credit);
/* Tells the host that n more input bytes of op were taken (batched). */
void conn_op_input_taken(struct conn *c, struct conn_op *op, size_t n);
/* Returns stdin credit of exec and attach operations whose process has
 * written its stdin down; call once per loop turn. */
void conn_stdin_credit(struct conn *c);
/* Forgets an operation after its terminal frame (or silently), releasing what
 * it holds: subscription, fwrite temporary file, fread descriptor. */
void conn_op_close(struct conn *c, struct conn_op *op);

/* Frame building on c->out: begin, proto_put_* on &c->out, then end with the
 * first error seen (an error drops the frame and breaks the connection). */
int conn_out_begin(struct conn *c, uint16_t type, uint16_t flags, uint32_t id);
void conn_out_end(struct conn *c, int r);
/* A frame whose payload is the n bytes at p (output and file data). */
void conn_send_raw(struct conn *c, uint16_t type, uint16_t flags, uint32_t id, const void *p,
		   size_t n);
/* An empty P_OK answering id. */
void conn_send_ok(struct conn *c, uint32_t id);
/* P_ERROR with A_ERRNO err (positive) and A_MESSAGE from fmt. */
void conn_send_error(struct conn *c, uint32_t id, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* P_ERROR for an attribute getter's result r (< 0) on attribute what. */
void conn_send_attr_error(struct conn *c, uint32_t id, int r, const char *what);

#endif
