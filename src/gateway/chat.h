/*
 * chat: one POST /v1/chat/completions through the gateway. The request
 * goes upstream with the code tool added; each turn that calls only that
 * tool is run in the conversation's sandbox, its output appended, and the
 * model asked again, up to --max-steps turns; the last turn goes back with
 * the steps and figures in an extension object, "cpuos". A turn that calls
 * another of the caller's tools goes back as it is, as a plain proxy's.
 */
#ifndef CPUOS_GW_CHAT_H
#define CPUOS_GW_CHAT_H

#include "gateway/gw_store.h"

#include <jansson.h>
#include <stddef.h>

struct gw;

/* The text of a request that ran into the step cap, as seed 003 says it. */
#define CHAT_STOPPED_TEXT "Stopped after too many steps."
/* How long a request waits for another of its conversation to end. */
#define CHAT_CONV_WAIT_MS (30 * 1000)
#define CHAT_MAX_MESSAGES 4096

struct chat_req {
	json_t *body; /* the checked request body (chat_check); borrowed */
	char key_id[GW_KEY_ID_LEN];
	char conv[GW_CONV_MAX + 1]; /* "" for none */
	int stream;
};

/* Where a streamed answer goes, and how to tell that the client left. */
struct chat_io {
	/* The answer's status, once: 200 with body NULL starts the event
	 * stream, anything else is a whole error answer (JSON text). */
	int (*head)(void *arg, unsigned status, const char *body);
	/* Bytes of the event stream: 0, or -1 when the client is gone. */
	int (*data)(void *arg, const char *p, size_t n);
	/* 1 when the client is gone (checked between steps); may be NULL. */
	int (*gone)(void *arg);
	/* The answer is complete (the sandbox is paused after it); may be
	 * NULL. */
	void (*end)(void *arg);
	void *arg;
};

/* Checks a request body before anything runs (tool_name: the code tool's):
 * 0 with *stream set, or -EINVAL with what is wrong in why and the
 * offending field in *param. */
int chat_check(json_t *body, const char *tool_name, int *stream, char *why, size_t whylen,
	       const char **param);

/* Runs the request to its end. Without a stream (q->stream 0), *status and
 * *answer get the HTTP answer (a chat.completion or an error; the caller
 * frees it) and io may have head and data NULL. With one, everything goes
 * through io, and *answer stays NULL. */
void chat_run(struct gw *g, const struct chat_req *q, const struct chat_io *io,
	      unsigned *status, json_t **answer);

#endif
