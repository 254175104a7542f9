/*
 * rawagent: cpuos-agent in --listen mode for the tests that talk to it in raw
 * frames (test_agent, test_agent_code): the agent process ($CPUOS_AGENT, else
 * build/guest/cpuos-agent), a client that trusts nothing of the host-side
 * runner, and hand-made frames.
 */
#ifndef CPUOS_TESTS_RAWAGENT_H
#define CPUOS_TESTS_RAWAGENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/proto.h"

#define IO_TIMEOUT_S 3 /* per read: a hung agent fails fast */

extern pid_t agent_pid; /* the running case's agent */
extern int agent_status; /* wait status once reaped */
extern char sock_path[108], log_path[128];
extern uint32_t next_id;    /* the next operation id a case takes */
extern pid_t sleepers[8];   /* host pids the cases started, killed by agent_kill */
extern int nsleepers;

struct client {
	int fd;
	struct pbuf in;
	size_t used; /* bytes of in taken by the frame last returned */
};

/* Starts the agent, its stderr into log_path: 0 or -1 with a reason in err. */
int agent_start(char *err, size_t errlen);
/* Whether the agent still runs; reaps it (agent_status) when it does not. */
int agent_alive(void);
/* Kills the agent and the sleepers, removes its socket. */
void agent_kill(void);
/* t_fixture's hooks: each case gets an agent of its own, started before
 * it (0, or -1 with a note) and killed after it, with its sleepers; an
 * agent that died of a signal other than that SIGKILL fails the case, and
 * a failed case keeps the agent's log and names it. */
int agent_setup(void);
void agent_teardown(void);

/* A connection to the agent, reads bounded by a timeout: 0 or -errno. */
int cl_open(struct client *c);
void cl_close(struct client *c);
int cl_send(struct client *c, const void *p, size_t n);
/* Sends a frame built in b (then emptied). */
int cl_send_buf(struct client *c, struct pbuf *b);
/* Next frame from the agent, valid until the next call: 1, 0 at EOF (the
 * agent dropped us), -ETIMEDOUT, or -errno (-ECONNRESET also means dropped). */
int cl_recv(struct client *c, struct proto_frame *f);
/* Reads until the terminal frame of operation id, which it returns in f:
 * its type, or <= 0 as cl_recv. Frames of other operations are skipped. */
int cl_wait_end(struct client *c, uint32_t id, struct proto_frame *f);
/* Whether a frame type ends its operation. */
int terminal(uint16_t type);
/* A u32 attribute of f, or 0xffffffff when absent or malformed. */
uint32_t attr_u32(const struct proto_frame *f, uint16_t tag);
/* A request with no attributes: 0 or -errno. */
int cl_simple(struct client *c, uint16_t type, uint32_t id);
/* PING, HELLO: whether the agent answered as it should. */
int cl_ping(struct client *c);
int cl_hello(struct client *c);
/* A fresh connection that said hello and got a ping answered (CHECKed). */
int cl_ready(struct client *c);
/* Whether the agent dropped the connection without answering anything. */
int cl_dropped_silently(struct client *c);

/* Hand-made frames: a header, an attribute (len may lie about vlen). */
size_t put_hdr(uint8_t *p, uint32_t len, uint16_t type, uint16_t flags, uint32_t id);
size_t put_attr(uint8_t *p, uint16_t tag, uint32_t len, const void *v, uint32_t vlen);
/* Sends a frame with a hand-made payload (n bytes of pl): 0 or -EPIPE. */
int raw_request(struct client *c, uint16_t type, uint32_t id, const void *pl, uint32_t n);
/* Whether operation id ended in P_ERROR with errno err1 or err2. */
int expect_error(struct client *c, uint32_t id, uint32_t err1, uint32_t err2);

#endif
