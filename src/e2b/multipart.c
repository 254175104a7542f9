/* multipart: multipart/form-data bodies (multipart.h). */
#include "e2b/multipart.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

int multipart_boundary(const char *ct, char out[MP_BOUNDARY_MAX + 3])
{
	const char *b;
	size_t n;
	if (!ct || strncasecmp(ct, "multipart/form-data", 19) || !(b = strstr(ct, "boundary=")))
		return -EINVAL;
	b += 9;
	if (*b == '"') {
		const char *q = strchr(++b, '"');
		if (!q)
			return -EINVAL;
		n = (size_t)(q - b);
	} else {
		n = strcspn(b, "; \t");
	}
	if (!n || n > MP_BOUNDARY_MAX || memchr(b, '\r', n) || memchr(b, '\n', n))
		return -EINVAL;
	snprintf(out, MP_BOUNDARY_MAX + 3, "--%.*s", (int)n, b);
	return 0;
}

/* The filename="..." of a part's head (head[0..n)), if any. */
static int filename_of(const char *head, size_t n, struct mp_part *p)
{
	static const char key[] = "filename=\"";
	const char *end = head + n;
	for (const char *at = head; at + sizeof(key) - 1 <= end; at++) {
		if (strncasecmp(at, key, sizeof(key) - 1))
			continue;
		/* not filename*= nor a longer name ending in "filename" */
		if (at > head && (at[-1] == '*' || (at[-1] != ' ' && at[-1] != ';' && at[-1] != '\t')))
			continue;
		const char *v = at + sizeof(key) - 1;
		const char *q = memchr(v, '"', (size_t)(end - v));
		if (!q || (size_t)(q - v) >= sizeof(p->filename) || memchr(v, '\0', (size_t)(q - v)))
			return -EINVAL;
		memcpy(p->filename, v, (size_t)(q - v));
		p->filename[q - v] = '\0';
		p->has_filename = 1;
		return 0;
	}
	return 0;
}

int multipart_each(const char *body, size_t n, const char *delim,
		   int (*fn)(void *arg, const struct mp_part *p), void *arg)
{
	const char *end = body + n;
	size_t dl = strlen(delim);
	char crlf_delim[MP_BOUNDARY_MAX + 5];
	snprintf(crlf_delim, sizeof(crlf_delim), "\r\n%s", delim);
	size_t cl = strlen(crlf_delim);
	/* the preamble, then the first delimiter */
	const char *at = memmem(body, n, delim, dl);
	if (!at || (at != body && (at < body + 2 || memcmp(at - 2, "\r\n", 2))))
		return -EINVAL;
	for (;;) {
		const char *h = at + dl;
		if (end - h >= 2 && !memcmp(h, "--", 2))
			return 0; /* the closing delimiter: the epilogue is ignored */
		/* transport padding, then CRLF */
		while (h < end && (*h == ' ' || *h == '\t'))
			h++;
		if (end - h < 2 || memcmp(h, "\r\n", 2))
			return -EINVAL;
		h += 2;
		const char *blank = end - h >= 2 && !memcmp(h, "\r\n", 2)
					    ? h
					    : memmem(h, (size_t)(end - h), "\r\n\r\n", 4);
		if (!blank)
			return -EINVAL;
		const char *data = blank == h ? h + 2 : blank + 4;
		const char *next = memmem(data, (size_t)(end - data), crlf_delim, cl);
		if (!next)
			return -EINVAL;
		struct mp_part p = { .data = data, .len = (size_t)(next - data) };
		if (filename_of(h, (size_t)(blank - h), &p) < 0)
			return -EINVAL;
		int r = fn(arg, &p);
		if (r)
			return r;
		at = next + 2;
	}
}
