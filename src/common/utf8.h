/* utf8: making guest bytes safe for JSON strings. */
#ifndef CPUOS_UTF8_H
#define CPUOS_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Copies p[0..n) into out (room for 3 * n + 1 bytes), replacing every
 * invalid or truncated sequence with U+FFFD; returns the length written
 * (out is NUL-terminated). */
size_t utf8_sanitize(const uint8_t *p, size_t n, char *out);

/* How many bytes at the end of p[0..n) are the start of a sequence that
 * more bytes could complete (0..3): a stream keeps them for its next chunk
 * instead of breaking a character in two. */
size_t utf8_incomplete_tail(const uint8_t *p, size_t n);

#endif
