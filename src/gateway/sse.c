/* sse: see sse.h. Line ends are LF, CRLF or a lone CR, as the format allows. */
#include "gateway/sse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void sse_init(struct sse *p, size_t max)
{
	memset(p, 0, sizeof(*p));
	buf_init(&p->line, max);
	buf_init(&p->data, max);
}

void sse_release(struct sse *p)
{
	buf_release(&p->line);
	buf_release(&p->data);
	memset(p, 0, sizeof(*p));
}

/* One whole line: a field, a comment, or (empty) the end of an event. */
static int on_line(struct sse *p, sse_event_fn fn, void *arg)
{
	const char *l = p->line.p ? p->line.p : "";
	size_t n = p->line.len;
	p->line.len = 0;
	if (n == 0) {
		if (!p->has_data)
			return 0;
		p->has_data = 0;
		size_t len = p->data.len;
		p->data.len = 0;
		return fn(arg, p->data.p ? p->data.p : "", len);
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
		int r = buf_add(&p->data, "\n", 1);
		if (r)
			return r;
	}
	p->has_data = 1;
	return buf_add(&p->data, v, (size_t)(l + n - v));
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
		int r = buf_add(&p->line, buf, take);
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
	int pending = p->line.len > 0 || p->has_data;
	p->line.len = p->data.len = 0;
	p->has_data = 0;
	return pending;
}
