/*
 * workers: a group of detached threads, bounded in number, that its owner
 * waits out on a condition variable (never by polling a count): the
 * resolver's queries, the proxies' connections, the gateway's background
 * work. The caller owns the struct (it is embedded in the owner's) and
 * stops making new workers before it drains them.
 */
#ifndef CPUOS_WORKERS_H
#define CPUOS_WORKERS_H

#include <pthread.h>
#include <stddef.h>

struct workers {
	pthread_mutex_t mu;
	pthread_cond_t idle; /* n went down; timed by CLOCK_MONOTONIC */
	unsigned n;          /* running now */
	unsigned max;        /* the most at once; 0: no bound */
	size_t stack;        /* each thread's stack size; 0: the default */
	char tag[32];        /* each thread's log tag (log.h); "": none */
};

/* Empties w for at most max threads at once (0: no bound), each with a
 * stack of stack bytes (0: the system's default) and the log tag tag
 * (NULL: none). 0 or -errno. */
int workers_init(struct workers *w, unsigned max, size_t stack, const char *tag);
/* Frees what w holds; no worker may be running (a drain returned 0). */
void workers_release(struct workers *w);

/* Runs fn(arg) in a new detached thread of w: 0; -EAGAIN when max run
 * already, or -errno when no thread could be made. On an error fn is
 * never called and arg stays the caller's. */
int workers_spawn(struct workers *w, void (*fn)(void *arg), void *arg);
/* How many run now (at once stale: for limits and logs). */
unsigned workers_count(struct workers *w);
/* Waits until none runs: 0, or -ETIMEDOUT after timeout_ms (< 0: no
 * limit) with some still running. A worker that has returned from fn
 * touches nothing of w's owner after its count went down, so the owner
 * may free what fn used once this returned 0. */
int workers_drain(struct workers *w, int timeout_ms);

#endif
