/*
 * mcp: cpuos as a Model Context Protocol server's tools (create, list,
 * pause, resume and kill sandboxes, run commands and code, read, write
 * and list files, port URLs), behind one JSON-RPC 2.0 message at a time.
 * Every tool is a call to cpuosd's API through a, with the caller's key:
 * what the key may not see (another account's sandbox) is refused there.
 * Shared by `cpuos mcp` (stdio) and cpuosd's POST /mcp (streamable HTTP).
 */
#ifndef CPUOS_MCP_H
#define CPUOS_MCP_H

#include <jansson.h>

struct api;

#define MCP_PROTOCOL "2025-06-18" /* the newest revision it speaks */

/* The answer to one message (a request: its result or error; a
 * notification or a client's answer: NULL, nothing to send). msg need not
 * be well-formed: a bad one gets its JSON-RPC error. A new reference;
 * NULL also when out of memory for a request (then an internal error is
 * the caller's to send, see mcp_error). */
json_t *mcp_handle(struct api *a, json_t *msg);
/* A JSON-RPC error answer to id (may be NULL: null). */
json_t *mcp_error(json_t *id, int code, const char *msg);

/* JSON-RPC's codes */
#define MCP_PARSE_ERROR	     -32700
#define MCP_INVALID_REQUEST  -32600
#define MCP_METHOD_NOT_FOUND -32601
#define MCP_INVALID_PARAMS   -32602
#define MCP_INTERNAL_ERROR   -32603

#endif
