/*
 * sbx_impl: what the two halves of the sandbox manager share: the sandbox
 * struct and two small helpers. sbx.c owns lifecycles (create, pump,
 * kill, restore, expiry); sbx_op.c the operations HTTP threads run on a
 * sandbox. Included by those two files only.
 */
#ifndef CPUOS_SBX_IMPL_H
#define CPUOS_SBX_IMPL_H

#include "daemon/sandbox/sbx.h"

#include "common/clock.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define QUEUE_HIGH (8u << 20) /* a reader this far behind stops the agent channel */
#define QUEUE_LOW (1u << 20)
#define SEND_HIGH (4u << 20)  /* bytes queued to the agent before writers wait */

struct sbx {
	struct sbx_mgr *mgr;
	char id[32];
	char account[128];
	char *env_json;
	long long expires_at;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct vm *vm;
	int wakefd;
	pthread_t pump;
	int running; /* accepts operations */
	int stop;    /* the pump must return */
	int stalled; /* readers behind: do not read the agent */
	int refs;
	struct sbx *next;
	/* Stdin channels: an attach operation per process written to, kept
	 * open because P_DATA must name a live operation. */
	struct ctl {
		uint32_t proc;
		struct sop *op;
	} *ctls;
	size_t nctls;
};

/* Wakes the sandbox's pump thread (it polls an eventfd). */
static inline void wake(struct sbx *s)
{
	uint64_t one = 1;
	if (write(s->wakefd, &one, sizeof(one)) < 0) {
		/* the counter is saturated: the pump is awake anyway */
	}
}

#endif
