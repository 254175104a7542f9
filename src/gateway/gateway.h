/*
 * gateway: what every part of cpuos-gateway's service shares: its options,
 * its store, its upstream client, the conversations' locks and how to
 * reach cpuosd. Made by main, read-only after start but for stopping.
 */
#ifndef CPUOS_GW_GATEWAY_H
#define CPUOS_GW_GATEWAY_H

#include "gateway/sbxc.h"
#include "lib/workers.h"

#include <jansson.h>
#include <stdatomic.h>

struct gw_config;
struct gw_store;
struct upstream;
struct conv_locks;

struct gw {
	const struct gw_config *cfg;
	struct gw_store *store;
	struct upstream *up;
	struct conv_locks *locks;
	struct sbxc_cfg sbx;
	atomic_int stopping;       /* SIGTERM came: requests end at their next step */
	struct workers background; /* streams, and pauses of sandboxes after an answer */
};

/* An OpenAI-style error body: {"error": {"message", "type", "param": null,
 * "code"}}. A message that is not UTF-8 is replaced. New reference, or
 * NULL without memory. */
json_t *gw_error(const char *type, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* An upstream call's failure as the caller sees it: *status and the error
 * body. Errors of the request itself keep their status (a bad model name
 * is a 404 whoever says it, a rate limit a 429 so clients back off); the
 * rest are the upstream's fault: 504 for a timeout, else 502. */
struct up_err;
json_t *gw_upstream_error(const struct up_err *e, unsigned *status);

#endif
