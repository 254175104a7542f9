/*
 * code: code contexts, each a long-lived interpreter (a kernel: src/agent/interp/) that runs
 * calls one at a time and keeps its state between them. The kernel is a process of the table
 * (proc) with two channels of its own: requests on its fd 3, results and the end of each call
 * as JSON lines on its fd 4. This module starts kernels, hands them calls, relays what they
 * produce on the call's operation and interrupts or kills them past a call's timeout.
 */
#ifndef CPUOS_AGENT_CODE_H
#define CPUOS_AGENT_CODE_H

#include <stdbool.h>
#include <stdint.h>

struct conn;
struct conn_op;
struct pollfd;
struct proc;
struct proto_frame;

#define MAX_CTX	     16	  /* contexts per guest */
#define CTX_NAME_MAX 64	  /* A_CONTEXT: 1 to 64 of [A-Za-z0-9._-] */
#define CODE_GRACE_MS 2000 /* an interrupted kernel that does not stop is killed then */

/* Request handlers: each sends a terminal frame or opens an operation. */
void code_run(struct conn *c, const struct proto_frame *f);
void code_ctx_create(struct conn *c, const struct proto_frame *f);
void code_ctx_list(struct conn *c, const struct proto_frame *f);
void code_ctx_restart(struct conn *c, const struct proto_frame *f);
void code_ctx_delete(struct conn *c, const struct proto_frame *f);

/* P_CANCEL of a call: the kernel is interrupted as at a timeout. */
void code_cancel(struct conn_op *op);
/* A call's operation ends (answered, cancelled, or its connection gone); the call itself
 * may go on in the kernel, its output unheard. */
void code_op_closed(struct conn_op *op);
/* Process p has ended: a call running in it ends as a dead kernel's, and a context whose
 * kernel it was starts a new one at its next call. */
void code_proc_ended(struct conn *c, struct proc *p);

struct code_tag {
	int ctx;
	int what; /* 0 events (read), 1 requests (write) */
};
/* Fills pollfds for the kernels' channels; returns how many. A call's events are not read
 * while the channel is throttled or the call has no credit. */
int code_poll_fill(struct pollfd *pfd, struct code_tag *tag, int max, bool throttled);
void code_poll_event(const struct code_tag *t, short revents);
/* Finishes calls whose kernel said they are over, once their output is read; once per loop
 * turn, before the poll. */
void code_pump(struct conn *c);
/* Nearest interrupt or kill (monotonic ms), 0 when none; and acting on them. */
int64_t code_next_timer(void);
void code_timers(int64_t now);

#endif
