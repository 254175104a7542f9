/*
 * agentc: the host end of the agent protocol. One connection to one guest's
 * agent; many operations in flight, each with a callback that receives every
 * frame of that operation. Single-threaded and non-blocking: the owner polls
 * agentc_fd() for agentc_events() and calls agentc_io().
 */
#ifndef CPUOS_AGENTC_H
#define CPUOS_AGENTC_H

#include <stddef.h>
#include <stdint.h>

#include "common/proto.h"

struct agentc;

/* Receives each frame of an operation; the last call is for its terminal
 * frame (P_OK, P_ERROR, P_EXIT), after which the operation is gone. If the
 * connection drops, pending operations get a P_ERROR with ECONNRESET. */
typedef void (*agentc_cb)(void *arg, const struct proto_frame *f);

/* Connects to the agent socket (retrying while it does not exist yet), says
 * P_HELLO and waits for the answer: the agent is then ready. 0 or -errno
 * (-ETIMEDOUT when nothing answered in time), with a reason in err. */
int agentc_connect(const char *path, int timeout_ms, struct agentc **out, char *err, size_t errlen);
/* The same without waiting for the answer: P_HELLO is queued first, so
 * requests begun now follow it; agentc_ready tells when it was answered
 * well. A wrong protocol version ends the connection. */
int agentc_open(const char *path, int timeout_ms, struct agentc **out, char *err, size_t errlen);
int agentc_ready(const struct agentc *c);
/* Closes the connection; pending operations get P_ERROR ECONNRESET first.
 * The agent keeps their processes running. */
void agentc_close(struct agentc *c);

int agentc_fd(const struct agentc *c);
/* POLLIN, plus POLLOUT while frames wait to be sent. */
short agentc_events(const struct agentc *c);
/* Reads (a bounded turn) and writes what it can and dispatches frames. 0,
 * or -errno once the connection is lost (every pending operation has been
 * told). */
int agentc_io(struct agentc *c, short revents);

/* Starts a request: returns the buffer to put attributes into (after the
 * header) and the new operation's id; finish with agentc_end. NULL on
 * allocation failure. cb may be NULL for fire-and-forget requests. */
struct pbuf *agentc_begin(struct agentc *c, uint16_t type, agentc_cb cb, void *arg, uint32_t *id);
/* Seals the request begun last: 0, or -errno and the operation is dropped
 * (its callback is never called). */
int agentc_end(struct agentc *c);
/* Drops the request begun last, unsent; its callback is never called. */
void agentc_abort(struct agentc *c);
/* Queues raw bytes (stdin, file content) for operation id. */
int agentc_data(struct agentc *c, uint32_t id, uint16_t flags, const void *p, size_t n);
/* Credit windows: by default an operation's output is credited back as its
 * callback takes it, fine for owners that consume at once. An owner that
 * queues output for a slower reader takes the returns over with
 * agentc_manual_credit and sends P_CREDIT itself with agentc_credit. */
void agentc_manual_credit(struct agentc *c, uint32_t id);
int agentc_credit(struct agentc *c, uint32_t id, uint32_t n);
/* Forgets operation id without calling its callback again: its late frames
 * are dropped. For an owner that ended the operation itself. */
void agentc_forget(struct agentc *c, uint32_t id);
/* Bytes queued but not yet written: writers of big streams wait while this
 * is high so memory stays bounded. */
size_t agentc_queued(const struct agentc *c);

/* Called for every P_NOTICE (id 0). */
void agentc_on_notice(struct agentc *c, agentc_cb cb, void *arg);

/* The agent's version string and its boot timings from P_HELLO, in ns of
 * guest CLOCK_BOOTTIME: when it started as PID 1, when it became ready (0
 * if the agent did not say). */
const char *agentc_version(const struct agentc *c);
void agentc_boot_times(const struct agentc *c, uint64_t *start_ns, uint64_t *ready_ns);

/* Pumps only this connection until *done becomes non-zero: 0, -ETIMEDOUT or
 * the connection's error. For simple callers; the VM runner has its own. */
int agentc_wait(struct agentc *c, const int *done, int timeout_ms);

/* An agent connection over fd, a connected, non-blocking stream socket,
 * without the P_HELLO handshake (tests and fuzzers that play the agent):
 * version and boot times stay empty. 0 with *out set, the connection then
 * owns fd (agentc_close closes it); -EBADF or -ENOMEM, fd left open. */
int agentc_new(int fd, struct agentc **out);

#endif
