/*
 * sse: a parser of server-sent events (the WHATWG event stream format), as
 * OpenAI-compatible servers stream chat completions: "data:" lines make an
 * event's data, a blank line ends the event, ":" lines are comments. Pure:
 * bytes in, events out, in pieces of any size. The stream is hostile, so a
 * line or an event's data past the cap is an error, never a growing buffer.
 */
#ifndef CPUOS_GW_SSE_H
#define CPUOS_GW_SSE_H

#include "common/buf.h"

#include <stddef.h>

/* One event's data (the "data" lines joined by "\n", NUL-terminated; n
 * bytes, it may hold NUL bytes of its own): 0 to go on, anything else stops
 * the parse and is what sse_feed returns. */
typedef int (*sse_event_fn)(void *arg, const char *data, size_t n);

struct sse {
	struct buf line; /* the line being read, without its end */
	struct buf data; /* the event being read */
	int has_data;    /* a "data" field was seen (its value may be empty) */
	int cr;          /* the last byte was a CR: a LF right after it ends nothing */
};

/* Starts a parser whose lines and events hold at most max (> 0) bytes. */
void sse_init(struct sse *p, size_t max);
/* Frees what p holds; it may be initialised again. */
void sse_release(struct sse *p);
/* Parses n more bytes, calling fn for each event they complete: 0, what fn
 * returned when not 0, -EMSGSIZE past the cap, -ENOMEM. After an error the
 * parser is spent (release it). */
int sse_feed(struct sse *p, const char *buf, size_t n, sse_event_fn fn, void *arg);
/* The stream ended: an event cut off before its blank line is dropped, as
 * the format says. Returns 1 when bytes of an unfinished event were pending
 * (a stream that was cut, not ended), else 0. */
int sse_end(struct sse *p);

#endif
