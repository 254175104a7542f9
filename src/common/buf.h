/*
 * buf: a growable byte buffer, kept NUL-terminated, with an optional cap
 * on its length. What a reader that gathers a body, a line or an event
 * into memory grows (after Redis's sds, but a plain struct the caller
 * owns: no header before the bytes). Also a growing array of records.
 */
#ifndef CPUOS_BUF_H
#define CPUOS_BUF_H

#include <stdarg.h>
#include <stddef.h>

/* A reader that has used what it gathered may set len back (to 0, say)
 * and keep the memory; the next append terminates it again. */
struct buf {
	char *p;    /* NULL until the first byte; then p[len] == '\0' */
	size_t len; /* bytes held, the NUL not counted */
	size_t cap; /* bytes allocated at p */
	size_t max; /* the most len may reach; 0: no cap */
	int secret; /* set by its owner: bytes overwritten when moved or freed */
};

/* An empty buffer that may hold up to max bytes (0: any number). */
void buf_init(struct buf *b, size_t max);
/* Frees what b holds and makes it empty (max and secret kept). */
void buf_release(struct buf *b);
/* The same, overwriting the bytes first: for secrets. */
void buf_wipe(struct buf *b);
/* Makes room for n more bytes (and the NUL): 0, -EMSGSIZE past b->max
 * (b unchanged), -ENOMEM. */
int buf_reserve(struct buf *b, size_t n);
/* Appends n bytes: 0, -EMSGSIZE past b->max (nothing appended),
 * -ENOMEM. */
int buf_add(struct buf *b, const void *p, size_t n);
/* Appends a NUL-terminated string. */
int buf_adds(struct buf *b, const char *s);
/* Appends printf-style text: 0, -EMSGSIZE, -ENOMEM. */
int buf_addf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vaddf(struct buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Appends n zeroed bytes (an array's next record) and returns where they
 * start, or NULL (past b->max or without memory). The pointer holds until
 * the next call that grows b. */
void *buf_push(struct buf *b, size_t n);
/* Hands over the bytes (malloc'd, NUL-terminated; NULL when b never held
 * any) with their length in *len if len is not NULL; b is empty after. */
char *buf_detach(struct buf *b, size_t *len);

#endif
