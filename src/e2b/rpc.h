/*
 * rpc: what envd's Connect handlers share: the request's message (a JSON
 * body, or a stream's one envelope), answers and errors in Connect's
 * shapes, base64 for protobuf bytes fields, and pumps: a thread that
 * relays one of cpuosd's NDJSON streams into a Connect stream (or any
 * answer made as it comes) through a pipe the connection reads.
 */
#ifndef CPUOS_E2B_RPC_H
#define CPUOS_E2B_RPC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct api;
struct httpd_req;

/* The request's message: NULL after answering (a malformed envelope or
 * JSON). *stream tells a streaming call (application/connect+json). */
json_t *rpc_request(struct httpd_req *r, int *stream);
/* A unary answer (steals msg). */
int rpc_reply(struct httpd_req *r, json_t *msg);
/* An error: a unary call's is its HTTP status with {"code", "message"};
 * a streaming call's is a 200 whose one envelope ends the stream. */
int rpc_error(struct httpd_req *r, int stream, unsigned status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* A unary call's error by its Connect code ("already_exists"). */
int rpc_error_code(struct httpd_req *r, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* cpuosd's failure of a call made through a, as rpc_error. */
int rpc_api_error(struct httpd_req *r, int stream, struct api *a);

/* Bytes as base64 (malloc'd), NULL without memory. */
char *b64_encode(const void *p, size_t n);
/* Base64 (standard or URL-safe, padded or not) into out[max] and a NUL:
 * the length, or -1 for a malformed or too long one. */
long b64_decode(const char *s, char *out, size_t max);

/* Runs fn(fd, arg) in a thread of the server's, fd the write end of a
 * pipe whose read end answers r (status, content_type, a Content-Length of
 * size unless HTTPD_SIZE_UNKNOWN) as fn writes it; fd
 * is closed after fn. free_arg(arg) follows fn, or runs at once when no
 * thread could start (and then r has its error). 0 or -errno. */
int pump_start(struct httpd_req *r, unsigned status, const char *content_type, uint64_t size,
	       void (*fn)(int fd, void *arg), void (*free_arg)(void *arg), void *arg);
/* Writes all of p: 0, or -EPIPE when the client went away. */
int pump_put(int fd, const void *p, size_t n);
/* Writes msg as one envelope (steals msg): as pump_put. */
int pump_msg(int fd, json_t *msg);
/* Writes the end-of-stream envelope: {} when code is NULL. */
int pump_end(int fd, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
