/*
 * multipart: a multipart/form-data body (RFC 7578), as E2B's SDKs upload
 * files: each part's filename (the file's path in the sandbox) and bytes.
 * Pure and bounded: the body is hostile, and read whole.
 */
#ifndef CPUOS_E2B_MULTIPART_H
#define CPUOS_E2B_MULTIPART_H

#include <stddef.h>

#define MP_BOUNDARY_MAX 70 /* RFC 2046's */
#define MP_NAME_MAX	4097

struct mp_part {
	char filename[MP_NAME_MAX]; /* "" when the part has none */
	int has_filename;
	const char *data; /* into the body */
	size_t len;
};

/* The boundary of a Content-Type "multipart/form-data; boundary=B" into
 * out, with the "--" a delimiter starts with: 0, or -EINVAL. */
int multipart_boundary(const char *content_type, char out[MP_BOUNDARY_MAX + 3]);
/* Calls fn for each part of body[0..n) in order: 0 after the closing
 * delimiter; -EINVAL for a body that is not one (no closing delimiter, a
 * part without its blank line, a filename too long or without its closing
 * quote); fn's non-zero return ends the walk and is returned. */
int multipart_each(const char *body, size_t n, const char *delim,
		   int (*fn)(void *arg, const struct mp_part *p), void *arg);

#endif
