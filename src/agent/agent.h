/*
 * agent: what main.c owns, the state of the one agent process: whether it is
 * PID 1, its boot timings, the shutdown the loop is asked for, and the
 * connection. Each module has its own header beside its .c.
 */
#ifndef CPUOS_AGENT_H
#define CPUOS_AGENT_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/conn.h"

#define AGENT_VERSION "cpuos-agent 0.1.0"

enum agent_shut { SHUT_NONE, SHUT_POWEROFF, SHUT_REBOOT, SHUT_REQUEST };

struct agent {
	bool pid1;
	uint64_t boot_ns, ready_ns; /* CLOCK_BOOTTIME at start and when serving */
	enum agent_shut shutdown;   /* set to stop the loop */
	const char *run_dir;	    /* ours to write: /run/cpuos, or beside --listen's socket */
	uint32_t restores;	    /* P_RESTORED seen: a new value means restored memory */
	struct conn conn;
};
/* The one agent, set up by main before the loop; every module reads it. */
extern struct agent agent;

#endif
