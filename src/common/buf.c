/* buf: see buf.h. */
#include "common/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_FIRST 64 /* the first allocation; each growth doubles */

void buf_init(struct buf *b, size_t max)
{
	*b = (struct buf){ .max = max };
}

void buf_release(struct buf *b)
{
	if (b->secret && b->p)
		explicit_bzero(b->p, b->cap);
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

void buf_wipe(struct buf *b)
{
	if (b->p)
		explicit_bzero(b->p, b->cap);
	buf_release(b);
}

int buf_reserve(struct buf *b, size_t n)
{
	if (n > SIZE_MAX / 2 - b->len || (b->max && b->len + n > b->max))
		return -EMSGSIZE;
	size_t need = b->len + n + 1; /* and the NUL */
	if (need <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : BUF_FIRST;
	while (cap < need)
		cap *= 2;
	/* A secret's bytes are copied by hand: realloc would free the old
	 * block as it is. */
	char *p = b->secret ? malloc(cap) : realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	if (b->secret && b->p) {
		memcpy(p, b->p, b->len + 1);
		explicit_bzero(b->p, b->cap);
		free(b->p);
	}
	b->p = p;
	b->cap = cap;
	return 0;
}

int buf_add(struct buf *b, const void *p, size_t n)
{
	int r = buf_reserve(b, n);
	if (r < 0)
		return r;
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

int buf_adds(struct buf *b, const char *s)
{
	return buf_add(b, s, strlen(s));
}

int buf_vaddf(struct buf *b, const char *fmt, va_list ap)
{
	va_list again;
	va_copy(again, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	int r = n < 0 ? -EINVAL : buf_reserve(b, (size_t)n);
	if (r == 0) {
		vsnprintf(b->p + b->len, (size_t)n + 1, fmt, again);
		b->len += (size_t)n;
	}
	va_end(again);
	return r;
}

int buf_addf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = buf_vaddf(b, fmt, ap);
	va_end(ap);
	return r;
}

void *buf_push(struct buf *b, size_t n)
{
	if (buf_reserve(b, n) < 0)
		return NULL;
	char *at = b->p + b->len;
	memset(at, 0, n + 1);
	b->len += n;
	return at;
}

char *buf_detach(struct buf *b, size_t *len)
{
	char *p = b->p;
	if (len)
		*len = b->len;
	b->p = NULL;
	b->len = b->cap = 0;
	return p;
}
