/*
 * http1: an HTTP/1 request head read as strictly as a proxy must, so that
 * what it reads (the target, Host, the body's length) is what the server
 * behind it reads: no folded lines, no space before a colon, no bare CR
 * or LF, one Host, one Content-Length (digits) and not with a
 * Transfer-Encoding, one Upgrade and only to websocket, on a GET without
 * a body.
 * Shared by the egress proxy and the port URLs.
 */
#ifndef CPUOS_HTTP1_H
#define CPUOS_HTTP1_H

#include <stddef.h>

struct http1_head {
	const char *buf;
	size_t len;            /* through the blank line */
	size_t method_len;
	const char *target;    /* origin form: starts with '/' */
	size_t target_len;
	const char *version;   /* "HTTP/1.1" or "HTTP/1.0" */
	const char *line2;     /* the first header line */
	char host[256];        /* the Host, lower case and without its port; "" */
	char host_raw[300];    /* as sent */
	long long body;        /* Content-Length, 0 without one */
	int chunked;           /* a Transfer-Encoding */
	int websocket;         /* Upgrade: websocket (a GET without a body) */
};

/* The length of the head at the start of buf[0..len) (through its blank
 * line), or 0 when it has not all come. */
size_t http1_head_len(const char *buf, size_t len);
/* Parses the head buf[0..len): 0, or -1 when it is not one as above. */
int http1_parse(const char *buf, size_t len, struct http1_head *h);
/* The header lines in turn: 1 with the line (through its CRLF) at *line,
 * *line_len, and its name and value (trimmed); 0 after the last. *at
 * starts NULL. */
int http1_next(const struct http1_head *h, const char **at, const char **line, size_t *line_len,
	       const char **name, size_t *name_len, const char **value, size_t *value_len);
/* Does the header line start with name (with its colon), in any case? */
int http1_is(const char *line, size_t line_len, const char *name);

/* Where a chunked body ends, found as its bytes pass through unchanged
 * (a relay that must not pass a byte of the next request). Zeroed to
 * start. */
struct http1_chunks {
	int state;
	int digits;
	unsigned long long left;
};
/* Takes p[0..n): how many of them are the body's (fewer once its end is
 * among them; *done is then set), or -1 when it is not chunked as HTTP/1.1
 * says (a size over 15 hex digits, a bare LF, no CRLF after a chunk). */
long long http1_chunks_feed(struct http1_chunks *c, const char *p, size_t n, int *done);

#endif
