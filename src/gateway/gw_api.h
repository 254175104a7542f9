/*
 * gw_api: the gateway's routes (gw_routes, gw_http.h): POST
 * /v1/chat/completions, GET /v1/models, PUT
 * /v1/conversations/{conv}/files, GET /health. A streamed completion runs
 * in a thread of its own that writes the answer into a pipe, which the
 * connection's thread sends on as it comes.
 */
#ifndef CPUOS_GW_API_H
#define CPUOS_GW_API_H

#include <stddef.h>

/* A conversation id as the gateway takes it (the X-Conversation-Id header,
 * the request's "user", or the files route's path): 1..GW_CONV_MAX bytes of
 * UTF-8 without control characters. 1 if s[0..n) is one. */
int gw_conv_ok(const char *s, size_t n);

#endif
