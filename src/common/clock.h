/*
 * clock: the monotonic clock for durations and deadlines, and RFC 3339 text
 * for wall-clock times (the API's and the logs' format). Shared by every
 * program, the static guest agent included.
 */
#ifndef CPUOS_CLOCK_H
#define CPUOS_CLOCK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct timespec;

/* CLOCK_MONOTONIC in milliseconds. */
int64_t clock_ms(void);
/* The same with sub-millisecond precision, for measurements. */
double clock_ms_f(void);
/* Fills *ts with the CLOCK_MONOTONIC time ms from now (for timed waits on
 * condition variables set to that clock). */
void clock_deadline(struct timespec *ts, int ms);
/* Initialises *cv to time its waits by CLOCK_MONOTONIC, so deadlines from
 * clock_deadline hold when the wall clock jumps: 0 or an error number. */
int clock_cond_init(pthread_cond_t *cv);
/* CLOCK_REALTIME in nanoseconds. */
uint64_t clock_realtime_ns(void);

#define CLOCK_RFC3339_LEN 32
/* Unix seconds t as "2026-11-29T09:41:58Z" in buf (at least
 * CLOCK_RFC3339_LEN bytes); returns buf. */
char *clock_rfc3339(long long t, char *buf, size_t len);

#endif
