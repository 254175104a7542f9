/*
 * connect: the Connect protocol's framing with the JSON codec, as envd's
 * clients speak it over HTTP/1.1 (connectrpc.com/docs/protocol): a unary
 * call is a JSON body both ways and an error is an HTTP status with
 * {"code": "not_found", "message": "..."}; a stream is a sequence of
 * envelopes (a flags byte, a 4-byte big-endian length, a JSON message),
 * the last with flag 0x02 carrying {} or {"error": {...}}. Pure: no I/O.
 */
#ifndef CPUOS_E2B_CONNECT_H
#define CPUOS_E2B_CONNECT_H

#include <stddef.h>

struct buf;

#define CONNECT_END	     0x02u /* the end-of-stream envelope */
#define CONNECT_COMPRESSED   0x01u /* a compressed message: never negotiated here */
#define CONNECT_MSG_MAX	     (4u << 20) /* the largest message taken */

/* The first envelope of p[0..n): 0 with its flags, its message at *msg
 * (*len bytes) and the envelope's size in *used; -EAGAIN when p holds
 * less than one; -EMSGSIZE when its length is over max. */
int connect_unframe(const char *p, size_t n, size_t max, unsigned *flags, const char **msg,
		    size_t *len, size_t *used);
/* Appends an envelope of flags around msg[0..n) to b: 0 or -ENOMEM. */
int connect_frame(struct buf *b, unsigned flags, const char *msg, size_t n);
/* Appends the end-of-stream envelope: {} when code is NULL, else
 * {"error": {"code": code, "message": msg}}. 0 or -ENOMEM. */
int connect_frame_end(struct buf *b, const char *code, const char *msg);

/* The Connect code of an HTTP status ("not_found" of 404), and the HTTP
 * status a unary error of a code is answered with. */
const char *connect_code_of(unsigned status);
unsigned connect_status_of(const char *code);

#endif
