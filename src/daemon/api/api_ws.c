/*
 * api_ws: GET /v1/sandboxes/{id}/processes/{pid}/ws, a process's output
 * and input over a WebSocket (RFC 6455), for browsers: xterm.js's attach
 * addon speaks to it as it is. The server sends the process's output as
 * binary messages (its kept output first, as a stream's), then one text
 * message {"type": "exit", ...} and a close; what the client sends (text
 * or binary) is the process's input. A session is a thread of its own;
 * it reads the socket in slices, sending output in between, and ends when
 * the process ends, the client closes or breaks a rule of the protocol.
 * The process lives on when the client leaves, as with a stream.
 */
#include "daemon/api/api.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define WS_GUID	      "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define WS_MAX_FRAME  (1u << 20) /* a client's frame; larger closes with 1009 */
#define WS_POLL_MS    20	 /* output waits at most this long for input's turn */
#define WS_INPUT_WAIT 5000	 /* for the process to take its input */

enum { WS_CONT = 0, WS_TEXT = 1, WS_BINARY = 2, WS_CLOSE = 8, WS_PING = 9, WS_PONG = 10 };

struct ws {
	struct sbx *s;
	struct sop *op;
	uint32_t pid;
	int fd;
	uint8_t *in; /* bytes of frames not yet whole */
	size_t len, cap;
	char out[16384 * 3 + 64];
};

static void ws_drop(void *arg)
{
	struct ws *w = arg;
	sop_free(w->s, w->op);
	sbx_put(w->s);
	free(w->in);
	free(w);
}

static int send_all(int fd, const void *p, size_t n)
{
	const char *b = p;
	while (n) {
		ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

/* One unmasked frame, as a server sends. */
static int send_frame(int fd, int opcode, const void *p, size_t n)
{
	uint8_t h[10] = { (uint8_t)(0x80 | opcode) };
	size_t hl = 2;
	if (n < 126) {
		h[1] = (uint8_t)n;
	} else if (n < 65536) {
		h[1] = 126;
		h[2] = (uint8_t)(n >> 8);
		h[3] = (uint8_t)n;
		hl = 4;
	} else {
		h[1] = 127;
		for (int i = 0; i < 8; i++)
			h[2 + i] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
		hl = 10;
	}
	return send_all(fd, h, hl) < 0 || send_all(fd, p, n) < 0 ? -1 : 0;
}

static void send_close(int fd, unsigned code, const char *why)
{
	char b[125];
	size_t n = strlen(why) > sizeof(b) - 2 ? sizeof(b) - 2 : strlen(why);
	b[0] = (char)(code >> 8);
	b[1] = (char)code;
	memcpy(b + 2, why, n);
	send_frame(fd, WS_CLOSE, b, n + 2);
}

/* Handles the whole frames in w->in: 1 to go on, 0 when the session ends
 * (a close, a broken rule: answered). */
static int take_frames(struct ws *w)
{
	size_t at = 0;
	int go = 1;
	while (go && w->len - at >= 2) {
		const uint8_t *f = w->in + at;
		int op = f[0] & 0x0f, masked = f[1] & 0x80;
		uint64_t n = f[1] & 0x7f;
		size_t hl = 2;
		if (n == 126) {
			if (w->len - at < 4)
				break;
			n = (uint64_t)f[2] << 8 | f[3];
			hl = 4;
		} else if (n == 127) {
			if (w->len - at < 10)
				break;
			n = 0;
			for (int i = 0; i < 8; i++)
				n = n << 8 | f[2 + i];
			hl = 10;
		}
		if (!masked || (f[0] & 0x70)) {
			send_close(w->fd, 1002, "client frames must be masked, without extensions");
			return 0;
		}
		if (n > WS_MAX_FRAME) {
			send_close(w->fd, 1009, "frame too large");
			return 0;
		}
		if (w->len - at < hl + 4 + n)
			break;
		uint8_t *p = w->in + at + hl + 4;
		const uint8_t *mask = w->in + at + hl;
		for (uint64_t i = 0; i < n; i++)
			p[i] ^= mask[i & 3];
		switch (op) {
		case WS_CONT:
		case WS_TEXT:
		case WS_BINARY:
			/* Input as it comes: fragments are pieces of one stream. */
			if (n && sbx_stdin(w->s, w->pid, 0, p, (size_t)n, WS_INPUT_WAIT) < 0) {
				send_close(w->fd, 1011, "the process takes no more input");
				go = 0;
			}
			break;
		case WS_PING:
			send_frame(w->fd, WS_PONG, p, (size_t)n);
			break;
		case WS_PONG:
			break;
		case WS_CLOSE:
			send_close(w->fd, 1000, "");
			go = 0;
			break;
		default:
			send_close(w->fd, 1002, "unknown opcode");
			go = 0;
			break;
		}
		at += hl + 4 + (size_t)n;
	}
	memmove(w->in, w->in + at, w->len - at);
	w->len -= at;
	return go;
}

/* Sends what output waits: 1 to go on, 0 once the process ended (told). */
static int send_output(struct ws *w)
{
	for (;;) {
		struct sop_chunk c;
		int r = sop_next(w->s, w->op, &c, w->out, sizeof(w->out), 0);
		if (r == -ETIMEDOUT)
			return 1;
		if (r < 0 || r == 0) {
			send_close(w->fd, r == 0 ? 1000 : 1011, r == 0 ? "" : "the sandbox went away");
			return 0;
		}
		if (c.kind == SOP_CHUNK_OUT) {
			if (send_frame(w->fd, WS_BINARY, w->out, c.len) < 0)
				return 0;
		} else if (c.kind == SOP_CHUNK_END) {
			json_t *o = json_pack("{s:s,s:o,s:o,s:b}", "type", "exit", "exit_code",
					      c.st.exit_code >= 0 ? json_integer(c.st.exit_code) : json_null(),
					      "signal", c.st.signal >= 0 ? json_integer(c.st.signal) : json_null(),
					      "timed_out", c.st.timed_out > 0);
			char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
			json_decref(o);
			if (line)
				send_frame(w->fd, WS_TEXT, line, strlen(line));
			free(line);
			send_close(w->fd, 1000, "exited");
			return 0;
		}
	}
}

static int grow(struct ws *w, size_t more)
{
	if (w->len + more <= w->cap)
		return 0;
	size_t cap = w->cap ? w->cap : 65536;
	while (cap < w->len + more)
		cap *= 2;
	uint8_t *n = realloc(w->in, cap);
	if (!n)
		return -1;
	w->in = n;
	w->cap = cap;
	return 0;
}

static void ws_session(void *arg, int fd, const char *extra, size_t n)
{
	struct ws *w = arg;
	w->fd = fd;
	int go = 1;
	if (n && grow(w, n) == 0) {
		memcpy(w->in, extra, n);
		w->len = n;
		go = take_frames(w);
	}
	while (go && (go = send_output(w))) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, WS_POLL_MS) <= 0)
			continue;
		if (grow(w, 65536) < 0)
			break;
		ssize_t k = recv(fd, w->in + w->len, 65536, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break; /* the client left: the process lives on */
		w->len += (size_t)k;
		go = take_frames(w);
	}
	ws_drop(w);
}

static int header_has(struct req *r, const char *name, const char *token)
{
	const char *v = req_header(r, name);
	if (!v)
		return 0;
	/* A comma-separated list, tokens compared without case. */
	size_t t = strlen(token);
	for (const char *p = v; *p;) {
		while (*p == ' ' || *p == ',')
			p++;
		const char *e = p;
		while (*e && *e != ',')
			e++;
		const char *end = e;
		while (end > p && end[-1] == ' ')
			end--;
		if ((size_t)(end - p) == t && !strncasecmp(p, token, t))
			return 1;
		p = e;
	}
	return 0;
}

int api_proc_ws(struct req *r)
{
	char *end;
	unsigned long pid = strtoul(r->param[1], &end, 10);
	if (*end || pid == 0 || pid > UINT32_MAX)
		return reply_error(r, 404, "not_found", "no process '%s'", r->param[1]);
	const char *key = req_header(r, "Sec-WebSocket-Key");
	const char *version = req_header(r, "Sec-WebSocket-Version");
	if (!header_has(r, "Upgrade", "websocket") || !header_has(r, "Connection", "upgrade") || !key ||
	    strlen(key) != 24 || !version || strcmp(version, "13"))
		return reply_error(r, 400, "bad_request",
				   "a WebSocket handshake is needed here (Upgrade: websocket, "
				   "Sec-WebSocket-Version: 13, a Sec-WebSocket-Key)");
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop *op = sop_new(SOP_NDJSON, 0);
	struct sbx_request q = { .kind = SBX_ATTACH, .proc = (uint32_t)pid };
	if (api_send(r, s, op, &q, "the request is too large") < 0) {
		sop_free(s, op);
		sbx_put(s);
		return 0;
	}
	struct sop_state st = { 0 };
	int e = api_wait(r, s, op, 1, r->api->answer_ms, &st);
	if (e < 0 || !st.started) {
		if (e < 0)
			api_wait_error(r, e);
		else
			api_agent_error(r, &st);
		sop_free(s, op);
		sbx_put(s);
		return 0;
	}
	char text[64];
	unsigned char digest[SHA_DIGEST_LENGTH];
	char accept[64];
	snprintf(text, sizeof(text), "%s" WS_GUID, key);
	SHA1((const unsigned char *)text, strlen(text), digest);
	EVP_EncodeBlock((unsigned char *)accept, digest, SHA_DIGEST_LENGTH);
	struct ws *w = calloc(1, sizeof(*w));
	if (!w) {
		sop_free(s, op);
		sbx_put(s);
		return reply_error(r, 500, "internal", "out of memory");
	}
	*w = (struct ws){ .s = s, .op = op, .pid = (uint32_t)pid, .fd = -1 };
	/* (libmicrohttpd adds "Connection: Upgrade" itself) */
	const char *headers[] = { "Upgrade", "websocket", "Sec-WebSocket-Accept", accept, NULL };
	return reply_upgrade(r, headers, ws_session, ws_drop, w);
}
