/* sse: see sse.h. Line ends are LF, CRLF or a lone CR, as the format allows. */
#include "gateway/sse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void sse_init(struct sse *p, size_t max)
{
	memset(p, 0, sizeof(*p));
	p->max = max;
}

void sse_release(struct sse *p)
{
	free(p->line);
	free(p->data);
	memset(p, 0, sizeof(*p));
}

/* Appends n bytes to *buf (room for a NUL kept), capped at max. */
static int grow(char **buf, size_t *len, size_t *cap, const char *s, size_t n, size_t max)
{
	if (*len + n > max)
		return -EMSGSIZE;
	if (*len + n + 1 > *cap) {
		size_t c = *cap ? *cap : 256;
		while (c < *len + n + 1)
			c *= 2;
		char *nb = realloc(*buf, c);
		if (!nb)
			return -ENOMEM;
		*buf = nb;
		*cap = c;
	}
	memcpy(*buf + *len, s, n);
	*len += n;
	(*buf)[*len] = '\0';
	return 0;
}

/* One whole line: a field, a comment, or (empty) the end of an event. */
static int on_line(struct sse *p, sse_event_fn fn, void *arg)
{
	const char *l = p->line ? p->line : "";
	size_t n = p->line_len;
	p->line_len = 0;
	if (n == 0) {
		if (!p->has_data)
			return 0;
		p->has_data = 0;
		size_t len = p->data_len;
		p->data_len = 0;
		return fn(arg, p->data ? p->data : "", len);
	}
	if (l[0] == ':')
		return 0;
	const char *colon = memchr(l, ':', n);
	size_t name_len = colon ? (size_t)(colon - l) : n;
	if (name_len != 4 || memcmp(l, "data", 4))
		return 0; /* event, id, retry: nothing an API stream needs */
	const char *v = colon ? colon + 1 : l + n;
	if (v < l + n && *v == ' ')
		v++;
	if (p->has_data) {
		int r = grow(&p->data, &p->data_len, &p->data_cap, "\n", 1, p->max);
		if (r)
			return r;
	}
	p->has_data = 1;
	return grow(&p->data, &p->data_len, &p->data_cap, v, (size_t)(l + n - v), p->max);
}

int sse_feed(struct sse *p, const char *buf, size_t n, sse_event_fn fn, void *arg)
{
	while (n) {
		if (p->cr && *buf == '\n') { /* the LF of a CRLF */
			p->cr = 0;
			buf++, n--;
			continue;
		}
		p->cr = 0;
		size_t take = 0;
		while (take < n && buf[take] != '\n' && buf[take] != '\r')
			take++;
		int r = grow(&p->line, &p->line_len, &p->line_cap, buf, take, p->max);
		if (r)
			return r;
		if (take == n)
			return 0;
		p->cr = buf[take] == '\r';
		buf += take + 1;
		n -= take + 1;
		if ((r = on_line(p, fn, arg)))
			return r;
	}
	return 0;
}

int sse_end(struct sse *p)
{
	int pending = p->line_len > 0 || p->has_data;
	p->line_len = p->data_len = 0;
	p->has_data = 0;
	return pending;
}
