/*
 * seal: the egress secrets' values as the store keeps them, sealed by
 * cpuos-netd (netd.h) with a key only it reads, so cpuosd, which keeps the
 * store, never holds a value it could read: an API that takes a value hands
 * it to netd and stores what comes back. AES-256-GCM (OpenSSL's), each
 * value under a random nonce, with what the value is bound to (its account,
 * name and hosts: netd.c) as associated data, so a sealed value moved to
 * another secret or given other hosts no longer opens.
 *
 * The key is SEAL_KEY_FILE in the egress CA's directory, which is root's
 * and closed to cpuosd (netd loads both as root, before it drops root):
 * 32 random bytes, made by the first netd that finds none. Daemons sharing
 * that directory share the key; a key lost loses every value sealed with
 * it (each is then set again).
 *
 * A sealed text is SEAL_PREFIX, then base64 of nonce (12 bytes), cipher
 * text and tag (16 bytes): printable, for a TEXT column.
 */
#ifndef CPUOS_NET_SEAL_H
#define CPUOS_NET_SEAL_H

#include <stddef.h>

#define SEAL_KEY_FILE "seal.key"
#define SEAL_PREFIX   "sealed1:"
/* A sealed text's most bytes for n bytes of value, its NUL counted. */
#define SEAL_TEXT_MAX(n) (sizeof(SEAL_PREFIX) + 4 * ((12 + (n) + 16 + 2) / 3))

struct seal;

/* The key in directory dir, made there (0600, this process's owner) when
 * absent: 0 with *out, or -errno with a reason. A key file that is not a
 * regular file of 32 bytes, not this user's or open to others is refused,
 * never replaced. */
int seal_load(const char *dir, struct seal **out, char *err, size_t errlen);
void seal_free(struct seal *s);

/* plain[0..n) sealed with aad (a text) bound: a malloc'd sealed text, or
 * NULL (no memory). */
char *seal_wrap(const struct seal *s, const char *aad, const void *plain, size_t n);
/* text opened: the value, malloc'd and NUL-terminated (wipe it, then
 * free), its length in *n; NULL when text is not sealed by this key with
 * aad, or was altered. */
char *seal_unwrap(const struct seal *s, const char *aad, const char *text, size_t *n);

#endif
