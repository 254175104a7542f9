/*
 * turn: one answer of the model (an assistant turn), whole or assembled
 * from the chunks of a streamed answer: its text, its tool calls, why it
 * ended, the tokens it used. Pure JSON work, no I/O. Upstream answers are
 * hostile: shapes are checked and counts and sizes capped.
 */
#ifndef CPUOS_GW_TURN_H
#define CPUOS_GW_TURN_H

#include "common/buf.h"

#include <jansson.h>
#include <stddef.h>

#define TURN_MAX_CALLS 64 /* tool calls in one turn */

struct turn_call;

struct turn {
	json_t *message;  /* the assistant message, as the next request sends it back */
	struct buf content; /* streamed text so far; content.p NULL: none */
	struct turn_call *calls; /* streamed tool calls so far, by index */
	int ncalls;
	char finish_reason[32];
	json_t *usage;    /* the answer's usage object, or NULL */
	int last_index;   /* the index the last tool-call delta without one went to */
};

/* Empties t (it holds nothing); turn_release frees what it holds. */
void turn_init(struct turn *t);
void turn_release(struct turn *t);

/* A whole (not streamed) chat.completion: fills t from its first choice.
 * 0, or -EPROTO with a reason in why when it is not one. */
int turn_from_completion(struct turn *t, json_t *answer, char *why, size_t whylen);

/* One chat.completion.chunk of a stream: adds its first choice's delta to
 * t. *text and *text_len get the text it adds (within t->content.p, valid
 * until the next call; empty when none). A chunk without choices may carry
 * the usage. 0, -EPROTO with a reason (not a chunk, past the caps), or
 * -ENOMEM. */
int turn_add_chunk(struct turn *t, json_t *chunk, const char **text, size_t *text_len, char *why,
		   size_t whylen);
/* The stream ended: builds t->message from the pieces. 0 or -ENOMEM. */
int turn_finish(struct turn *t);

/* The tool calls of the finished turn (borrowed; NULL or an array). */
json_t *turn_tool_calls(const struct turn *t);

/* Adds usage (an answer's usage object, may be NULL) into *sum, field by
 * field for the integer fields of OpenAI's usage. */
void turn_usage_add(json_t **sum, json_t *usage);

#endif
