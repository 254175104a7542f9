/*
 * upstream: the gateway's client of the upstream model server, an
 * OpenAI-compatible /v1 API, over libcurl: chat completions whole or
 * streamed (server-sent events, assembled into a turn as they come) and
 * plain GETs. Its answers are hostile: bounded in size and time, checked
 * in shape. Its key goes into the Authorization header and nowhere else.
 * Thread-safe: each call takes a kept-alive handle from a small pool.
 */
#ifndef CPUOS_GW_UPSTREAM_H
#define CPUOS_GW_UPSTREAM_H

#include <jansson.h>
#include <stddef.h>

struct turn;
struct upstream;

#define UP_MAX_ANSWER (16u << 20) /* bytes of one answer, streamed or not */

/* How a call failed. */
enum up_fail {
	UP_OK = 0,
	UP_STATUS,	/* it answered with an error status (status, message) */
	UP_TIMEOUT,	/* no answer, or a stream silent, for the timeout */
	UP_UNREACHABLE, /* no connection, or it broke */
	UP_BAD_ANSWER,	/* not the API's answer, or over UP_MAX_ANSWER */
	UP_CANCELED,	/* the text callback asked to stop */
};

struct up_err {
	enum up_fail fail;
	long status;	   /* the HTTP status, 0 when none came */
	char message[640]; /* one line, lowercase, without the key */
};

/* base_url: "http://host:port/v1" (http or https); key: "" for none;
 * timeout_s: how long a call may wait for its answer, or a stream stay
 * silent. Both strings are copied. 0 or -ENOMEM; needs curl_global_init. */
int up_new(const char *base_url, const char *key, long timeout_s, struct upstream **out);
void up_free(struct upstream *u);

/* The text of a streamed turn, as it comes: 0 to go on, else the call
 * stops with UP_CANCELED. */
typedef int (*up_text_fn)(void *arg, const char *text, size_t n);

/* POST {base}/chat/completions with body. With text NULL the answer is
 * whole (body must not ask for a stream); else body has "stream": true and
 * text gets each piece of text as it arrives. t (turn_init'ed) gets the
 * turn. 0, or -1 with e filled. */
int up_chat(struct upstream *u, json_t *body, up_text_fn text, void *arg, struct turn *t,
	    struct up_err *e);

/* GET {base}{path}: 0 with *out the parsed JSON answer, or -1 with e. */
int up_get(struct upstream *u, const char *path, json_t **out, struct up_err *e);

#endif
