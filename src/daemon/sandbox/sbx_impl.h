/*
 * sbx_impl: what the two halves of the sandbox manager share: the sandbox
 * and operation structs, the caps on what a guest may make us hold, and
 * two small helpers. sbx.c owns lifecycles (create, pump, kill, restore,
 * expiry); sbx_op.c the operations HTTP threads run on a sandbox.
 * Included by those two files only.
 */
#ifndef CPUOS_SBX_IMPL_H
#define CPUOS_SBX_IMPL_H

#include "daemon/sandbox/sbx.h"

#include "common/clock.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

/* Credit windows we give the agent (docs/agent-protocol.md). An attach
 * replays up to 2 MiB of kept output before live output, so it gets room
 * for all of it. */
#define SBX_WINDOW (1u << 20)
#define SBX_ATTACH_WINDOW (3u << 20)
/* Host caps on what one guest can make the daemon hold or do. */
#define SBX_MAX_OPS 1024             /* live operations per sandbox (the agent's cap) */
#define SBX_MAX_STREAMS 64           /* live SOP_QUEUE/SOP_NDJSON operations per sandbox */
#define SBX_MAX_ITEMS_BYTES (32u << 20) /* P_ENTRY text per operation */
#define SBX_MAX_SMALL_FRAMES 16      /* frames of a request that answers once */
#define SEND_HIGH (4u << 20)         /* bytes queued to the agent before writers wait */

struct sop {
	enum sop_mode mode;
	uint16_t type; /* the request */
	uint32_t id;   /* agent operation id */
	int live;      /* the agent operation has not ended */
	int done;
	struct sop_state st;
	size_t cap;    /* SOP_COLLECT: bytes kept per stream */
	struct pbuf out[2]; /* COLLECT: tails; QUEUE: bytes; NDJSON: records */
	uint64_t total[2];
	/* SOP_NDJSON: records are [u8 stream][u32 length][bytes]; the last
	 * one grows while frames of its stream follow. An unfinished UTF-8
	 * sequence waits in partial for the next bytes of its stream. */
	size_t last_rec;
	uint8_t partial[2][4];
	size_t npartial[2];
	int exit_sent;
	/* Output credit, at the agent's cost per frame: what we allowed (the
	 * window plus every P_CREDIT sent), what came, and what was consumed
	 * but not yet returned. */
	uint32_t window;
	uint64_t granted, received, unacked;
	/* Input credit: P_DATA bytes sent, and credited back by the agent. */
	uint64_t sent, acked;
	uint64_t frames;
	struct pbuf items; /* P_ENTRY objects, comma-separated */
	size_t nitems;
	json_t *entry;     /* P_OK attributes of a stat */
	char *base;        /* P_LIST: the listed directory */
	int kill_on_start; /* abandoned foreground exec: kill once it has a proc */
	int64_t t0;        /* when it began (clock_ms), for an exec's duration */
	struct sbx *owner;
	int abandoned;     /* its owner left: the pump frees it when it ends */
};

struct sbx {
	struct sbx_mgr *mgr;
	char id[32];
	char account[128];
	char *env_json;
	long long expires_at;
	int expiring; /* a killer thread has it (manager lock) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct vm *vm;
	int wakefd;
	pthread_t pump;
	int running; /* accepts operations */
	int stop;    /* the pump must return */
	int nops, nstreams;
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
