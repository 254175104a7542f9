/* connect: Connect's envelopes and error codes (connect.h). */
#include "e2b/connect.h"

#include "common/buf.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>

int connect_unframe(const char *p, size_t n, size_t max, unsigned *flags, const char **msg,
		    size_t *len, size_t *used)
{
	if (n < 5)
		return -EAGAIN;
	const unsigned char *u = (const unsigned char *)p;
	size_t l = (size_t)u[1] << 24 | (size_t)u[2] << 16 | (size_t)u[3] << 8 | u[4];
	if (l > max)
		return -EMSGSIZE;
	if (n - 5 < l)
		return -EAGAIN;
	*flags = u[0];
	*msg = p + 5;
	*len = l;
	*used = 5 + l;
	return 0;
}

int connect_frame(struct buf *b, unsigned flags, const char *msg, size_t n)
{
	unsigned char h[5] = { (unsigned char)flags, (unsigned char)(n >> 24),
			       (unsigned char)(n >> 16), (unsigned char)(n >> 8), (unsigned char)n };
	if (n > 0xffffffffu || buf_add(b, h, sizeof(h)) < 0 || buf_add(b, msg, n) < 0)
		return -ENOMEM;
	return 0;
}

int connect_frame_end(struct buf *b, const char *code, const char *msg)
{
	json_t *j = code ? json_pack("{s:{s:s, s:s%}}", "error", "code", code, "message",
				     msg ? msg : "", msg ? strlen(msg) : 0)
			 : json_object();
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	int rc = s ? connect_frame(b, CONNECT_END, s, strlen(s)) : -ENOMEM;
	free(s);
	json_decref(j);
	return rc;
}

static const struct {
	const char *code;
	unsigned status;
} codes[] = {
	{ "invalid_argument", 400 },  { "unauthenticated", 401 },   { "permission_denied", 403 },
	{ "not_found", 404 },	      { "already_exists", 409 },    { "failed_precondition", 412 },
	{ "resource_exhausted", 429 }, { "canceled", 499 },	    { "unknown", 500 },
	{ "internal", 500 },	      { "unimplemented", 501 },     { "unavailable", 503 },
	{ "deadline_exceeded", 504 },  { "aborted", 409 },	    { "out_of_range", 400 },
};

const char *connect_code_of(unsigned status)
{
	switch (status) {
	case 400: case 405: case 411: case 413: case 422: return "invalid_argument";
	case 409: return "failed_precondition";
	case 415: return "internal";
	case 502: return "unavailable";
	default: break;
	}
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		if (codes[i].status == status)
			return codes[i].code;
	return status >= 500 ? "internal" : "unknown";
}

unsigned connect_status_of(const char *code)
{
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		if (!strcmp(codes[i].code, code))
			return codes[i].status;
	return 500;
}
