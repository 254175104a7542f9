/* rpc: Connect requests and answers, base64, pumps (rpc.h). */
#include "e2b/rpc.h"

#include "cli/cpuos/http.h"
#include "common/buf.h"
#include "e2b/connect.h"
#include "e2b/e2b.h"
#include "lib/httpd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CT_STREAM "application/connect+json"

json_t *rpc_request(struct httpd_req *r, int *stream)
{
	const char *ct = httpd_header(r, "Content-Type");
	const char *msg = r->body ? r->body : "";
	size_t len = r->len;
	*stream = ct && !strncmp(ct, CT_STREAM, strlen(CT_STREAM));
	if (ct && !*stream && strncmp(ct, "application/json", 16)) {
		rpc_error(r, 0, 415, "content type '%s': cpuos-e2b speaks Connect's JSON codec "
				     "(application/json, application/connect+json)", ct);
		return NULL;
	}
	if (*stream) {
		unsigned flags;
		size_t used;
		int rc = connect_unframe(r->body ? r->body : "", r->len, CONNECT_MSG_MAX, &flags,
					 &msg, &len, &used);
		if (rc < 0 || used != r->len || flags & CONNECT_COMPRESSED) {
			rpc_error(r, 1, 400, "%s", rc == -EMSGSIZE ? "message too large"
						  : flags & CONNECT_COMPRESSED && rc == 0
						      ? "compressed messages are not taken"
						      : "malformed envelope: one message expected");
			return NULL;
		}
	}
	if (!len)
		return json_object();
	json_error_t e;
	json_t *j = json_loadb(msg, len, 0, &e);
	if (!json_is_object(j)) {
		json_decref(j);
		rpc_error(r, *stream, 400, "the message is not a JSON object: %s", e.text);
		return NULL;
	}
	return j;
}

int rpc_reply(struct httpd_req *r, json_t *msg)
{
	char *s = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
	json_decref(msg);
	if (!s)
		return rpc_error(r, 0, 500, "out of memory");
	return httpd_reply_buffer(r, 200, "application/json", s, strlen(s));
}

static int verror(struct httpd_req *r, int stream, unsigned status, const char *code,
		  const char *fmt, va_list ap)
{
	char msg[768];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (!code)
		code = connect_code_of(status);
	if (stream) {
		struct buf b;
		buf_init(&b, 0);
		if (connect_frame_end(&b, code, msg) < 0) {
			buf_release(&b);
			return -ENOMEM;
		}
		size_t n;
		char *p = buf_detach(&b, &n);
		return httpd_reply_buffer(r, 200, CT_STREAM, p, n);
	}
	json_t *j = json_pack("{s:s, s:s%}", "code", code, "message", msg, strlen(msg));
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		return -ENOMEM;
	/* Connect's clients go by the code; the status is the HTTP one
	 * (415 for a codec it does not speak, as the protocol says). */
	return httpd_reply_buffer(r, status, "application/json", s, strlen(s));
}

int rpc_error(struct httpd_req *r, int stream, unsigned status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = verror(r, stream, status, NULL, fmt, ap);
	va_end(ap);
	return rc;
}

int rpc_error_code(struct httpd_req *r, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = verror(r, 0, connect_status_of(code), code, fmt, ap);
	va_end(ap);
	return rc;
}

int rpc_api_error(struct httpd_req *r, int stream, struct api *a)
{
	long st = api_status(a);
	if (st < 400 || st > 599)
		return rpc_error(r, stream, 503, "%s", api_error(a));
	return rpc_error(r, stream, (unsigned)st, "%s", api_message(a));
}

/* ---- base64 ---- */

static const char alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *b64_encode(const void *p, size_t n)
{
	const unsigned char *u = p;
	char *out = malloc(4 * ((n + 2) / 3) + 1), *o = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)u[i] << 16 | (i + 1 < n ? (unsigned)u[i + 1] << 8 : 0) |
			     (i + 2 < n ? u[i + 2] : 0);
		*o++ = alpha[v >> 18 & 63], *o++ = alpha[v >> 12 & 63];
		*o++ = i + 1 < n ? alpha[v >> 6 & 63] : '=';
		*o++ = i + 2 < n ? alpha[v & 63] : '=';
	}
	*o = '\0';
	return out;
}

long b64_decode(const char *s, char *out, size_t max)
{
	size_t o = 0;
	unsigned v = 0, bits = 0;
	for (; *s && *s != '='; s++) {
		int d;
		if (*s >= 'A' && *s <= 'Z')
			d = *s - 'A';
		else if (*s >= 'a' && *s <= 'z')
			d = *s - 'a' + 26;
		else if (*s >= '0' && *s <= '9')
			d = *s - '0' + 52;
		else if (*s == '+' || *s == '-')
			d = 62;
		else if (*s == '/' || *s == '_')
			d = 63;
		else
			return -1;
		v = (v << 6 | (unsigned)d) & 0xffffff;
		if ((bits += 6) >= 8) {
			bits -= 8;
			if (o + 1 >= max)
				return -1;
			out[o++] = (char)(v >> bits);
		}
	}
	while (*s == '=')
		s++;
	if (*s || !max)
		return -1;
	out[o] = '\0';
	return (long)o;
}

/* ---- pumps ---- */

struct pump {
	int fd;
	void (*fn)(int fd, void *arg);
	void (*free_arg)(void *arg);
	void *arg;
};

static void pump_run(void *arg)
{
	struct pump *p = arg;
	p->fn(p->fd, p->arg);
	close(p->fd);
	if (p->free_arg)
		p->free_arg(p->arg);
	free(p);
}

int pump_start(struct httpd_req *r, unsigned status, const char *content_type, uint64_t size,
	       void (*fn)(int fd, void *arg), void (*free_arg)(void *arg), void *arg)
{
	struct e2b *g = r->arg;
	struct pump *p = malloc(sizeof(*p));
	int fds[2] = { -1, -1 }, rc = -ENOMEM;
	if (!p || pipe2(fds, O_CLOEXEC) < 0) {
		rc = p ? -errno : -ENOMEM;
		goto fail;
	}
	*p = (struct pump){ .fd = fds[1], .fn = fn, .free_arg = free_arg, .arg = arg };
	if ((rc = workers_spawn(&g->pumps, pump_run, p)) < 0)
		goto fail;
	return httpd_reply_fd_sized(r, status, content_type, fds[0], size);
fail:
	if (fds[0] >= 0)
		close(fds[0]), close(fds[1]);
	free(p);
	if (free_arg)
		free_arg(arg);
	rpc_error(r, 0, 503, "cannot start a stream: %s", strerror(-rc));
	return rc;
}

int pump_put(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -EPIPE;
		c += w, n -= (size_t)w;
	}
	return 0;
}

int pump_msg(int fd, json_t *msg)
{
	char *s = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
	json_decref(msg);
	if (!s)
		return -ENOMEM;
	struct buf b;
	buf_init(&b, 0);
	int rc = connect_frame(&b, 0, s, strlen(s));
	free(s);
	if (rc == 0)
		rc = pump_put(fd, b.p, b.len);
	buf_release(&b);
	return rc;
}

int pump_end(int fd, const char *code, const char *fmt, ...)
{
	char msg[768] = "";
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
	}
	struct buf b;
	buf_init(&b, 0);
	int rc = connect_frame_end(&b, code, msg);
	if (rc == 0)
		rc = pump_put(fd, b.p, b.len);
	buf_release(&b);
	return rc;
}
