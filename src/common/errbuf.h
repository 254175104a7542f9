/*
 * errbuf: the reason a call failed, written into the caller's buffer
 * (char *err, size_t errlen: readable text, no allocation, as Redis's
 * anet does). Every layer takes the pair and fills it with one call.
 */
#ifndef CPUOS_ERRBUF_H
#define CPUOS_ERRBUF_H

#include <stddef.h>

/* Writes the printf-style reason into err[errlen] (cut to fit; nothing
 * when err is NULL or errlen 0) and returns code, so a failure is one
 * statement: return errbuf_set(err, errlen, -EINVAL, "bad '%s'", s); */
int errbuf_set(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
