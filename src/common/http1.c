/* http1: see http1.h. */
#include "common/http1.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

/* Header names and methods are tokens (RFC 9110). */
static int is_token(const char *s, size_t n)
{
	static const char ok[] = "!#$%&'*+-.^_`|~";
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr(ok, s[i]))
			return 0;
	return n > 0;
}

/* A field value: no control bytes but tab (no bare CR or LF, no NUL). */
static int is_value(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (((unsigned char)s[i] < ' ' && s[i] != '\t') || s[i] == 0x7f)
			return 0;
	return 1;
}

size_t http1_head_len(const char *buf, size_t len)
{
	const char *end = memmem(buf, len, "\r\n\r\n", 4);
	return end ? (size_t)(end - buf) + 4 : 0;
}

int http1_is(const char *line, size_t line_len, const char *name)
{
	size_t n = strlen(name);
	return line_len > n && line[n] == ':' && !strncasecmp(line, name, n);
}

int http1_next(const struct http1_head *h, const char **at, const char **line, size_t *line_len,
	       const char **name, size_t *name_len, const char **value, size_t *value_len)
{
	const char *l = *at ? *at : h->line2, *end = h->buf + h->len - 2;
	if (l >= end)
		return 0;
	const char *le = (const char *)memmem(l, (size_t)(end + 2 - l), "\r\n", 2) + 2;
	const char *colon = memchr(l, ':', (size_t)(le - l));
	const char *v = colon + 1, *ve = le - 2;
	while (v < ve && (*v == ' ' || *v == '\t'))
		v++;
	while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
		ve--;
	*line = l;
	*line_len = (size_t)(le - l);
	*name = l;
	*name_len = (size_t)(colon - l);
	*value = v;
	*value_len = (size_t)(ve - v);
	*at = le;
	return 1;
}

int http1_parse(const char *buf, size_t len, struct http1_head *h)
{
	memset(h, 0, sizeof(*h));
	h->buf = buf;
	h->len = len;
	const char *eol = memmem(buf, len, "\r\n", 2);
	if (!eol || !http1_head_len(buf, len))
		return -1;
	const char *sp1 = memchr(buf, ' ', (size_t)(eol - buf));
	const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
	if (!sp1 || !sp2 || !is_token(buf, (size_t)(sp1 - buf)) || sp1[1] != '/' ||
	    eol - sp2 - 1 != 8 || (memcmp(sp2 + 1, "HTTP/1.1", 8) && memcmp(sp2 + 1, "HTTP/1.0", 8)))
		return -1;
	h->method_len = (size_t)(sp1 - buf);
	h->target = sp1 + 1;
	h->target_len = (size_t)(sp2 - sp1 - 1);
	h->version = sp2 + 1;
	h->line2 = eol + 2;
	for (size_t i = 0; i < h->target_len; i++)
		if ((unsigned char)h->target[i] <= ' ' || h->target[i] == 0x7f)
			return -1;
	/* Each line has a colon after a token name, and a clean value. */
	for (const char *l = h->line2; l < buf + len - 2;) {
		const char *le = memmem(l, (size_t)(buf + len - l), "\r\n", 2);
		const char *colon = memchr(l, ':', (size_t)(le - l));
		if (!colon || !is_token(l, (size_t)(colon - l)) || !is_value(colon, (size_t)(le - colon)))
			return -1;
		l = le + 2;
	}
	int hosts = 0, lengths = 0, upgrades = 0;
	const char *at = NULL, *line, *name, *v;
	size_t ll, nl, vl;
	while (http1_next(h, &at, &line, &ll, &name, &nl, &v, &vl)) {
		if (http1_is(line, ll, "host")) {
			size_t k = 0;
			while (k < vl && v[k] != ':')
				k++;
			if (hosts++ || k >= sizeof(h->host) || vl >= sizeof(h->host_raw))
				return -1;
			/* A port is 1 to 5 digits: nothing else may ride after the
			 * name (a server may echo its Host into an answer). */
			if (k < vl && (vl - k - 1 < 1 || vl - k - 1 > 5 ||
				       strspn(v + k + 1, "0123456789") < vl - k - 1))
				return -1;
			for (size_t i = 0; i < k; i++)
				h->host[i] = (char)tolower((unsigned char)v[i]);
			memcpy(h->host_raw, v, vl);
		} else if (http1_is(line, ll, "upgrade")) {
			/* one, and only websocket: "h2c" would turn the connection
			 * into HTTP/2, with a Host per stream */
			if (upgrades++ || vl != 9 || strncasecmp(v, "websocket", 9))
				return -1;
			h->websocket = 1;
		} else if (http1_is(line, ll, "transfer-encoding")) {
			h->chunked = 1;
		} else if (http1_is(line, ll, "content-length")) {
			if (lengths++ || vl == 0 || vl > 15) /* digits only, below 10^15 */
				return -1;
			for (size_t i = 0; i < vl; i++) {
				if (!isdigit((unsigned char)v[i]))
					return -1;
				h->body = h->body * 10 + (v[i] - '0');
			}
		}
	}
	if (h->chunked && lengths) /* both: which framing would the server take? */
		return -1;
	/* A WebSocket handshake is a GET without a body. */
	return h->websocket && (h->chunked || h->body || h->method_len != 3 || memcmp(buf, "GET", 3))
		       ? -1
		       : 0;
}

enum { CK_SIZE, CK_EXT, CK_SIZE_LF, CK_DATA, CK_DATA_CR, CK_DATA_LF, CK_LINE, CK_TRAILER,
       CK_TRAILER_LF, CK_END_LF, CK_DONE };

long long http1_chunks_feed(struct http1_chunks *c, const char *p, size_t n, int *done)
{
	size_t i = 0;
	*done = c->state == CK_DONE;
	while (i < n && c->state != CK_DONE) {
		char ch = p[i];
		switch (c->state) {
		case CK_SIZE:
			if (isxdigit((unsigned char)ch)) {
				if (++c->digits > 15)
					return -1;
				c->left = c->left * 16 +
					  (unsigned)(isdigit((unsigned char)ch) ? ch - '0'
										: (ch | 0x20) - 'a' + 10);
			} else if (!c->digits) {
				return -1;
			} else if (ch == ';' || ch == ' ' || ch == '\t') {
				c->state = CK_EXT;
			} else if (ch == '\r') {
				c->state = CK_SIZE_LF;
			} else {
				return -1;
			}
			i++;
			break;
		case CK_EXT:
			if (ch == '\n')
				return -1;
			if (ch == '\r')
				c->state = CK_SIZE_LF;
			i++;
			break;
		case CK_SIZE_LF:
			if (ch != '\n')
				return -1;
			c->state = c->left ? CK_DATA : CK_LINE;
			c->digits = 0;
			i++;
			break;
		case CK_DATA: {
			size_t take = n - i < c->left ? n - i : (size_t)c->left;
			c->left -= take;
			i += take;
			if (!c->left)
				c->state = CK_DATA_CR;
			break;
		}
		case CK_DATA_CR:
		case CK_DATA_LF:
			if (ch != (c->state == CK_DATA_CR ? '\r' : '\n'))
				return -1;
			c->state = c->state == CK_DATA_CR ? CK_DATA_LF : CK_SIZE;
			i++;
			break;
		case CK_LINE: /* a trailer line begins, or the blank line ends it all */
			c->state = ch == '\r' ? CK_END_LF : ch == '\n' ? -1 : CK_TRAILER;
			if (c->state < 0)
				return -1;
			i++;
			break;
		case CK_TRAILER:
			if (ch == '\n')
				return -1;
			if (ch == '\r')
				c->state = CK_TRAILER_LF;
			i++;
			break;
		case CK_TRAILER_LF:
		case CK_END_LF:
			if (ch != '\n')
				return -1;
			c->state = c->state == CK_END_LF ? CK_DONE : CK_LINE;
			i++;
			break;
		}
	}
	*done = c->state == CK_DONE;
	return (long long)i;
}
