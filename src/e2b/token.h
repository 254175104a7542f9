/*
 * token: envd access tokens and signed file URLs. A token is the caller's
 * cpuos key sealed (AES-256-GCM) under cpuos-e2b's secret with the
 * sandbox's id as associated data: the data plane gets the key back from
 * it, for that sandbox alone, and cpuos-e2b stores no key. The nonce is
 * derived from the id and the key, so a sandbox's token is the same at
 * each create, get and connect (an SDK may hold any of them). The secret
 * gives the nonces' key and the sealing key apart (HMAC-SHA-256 of each's
 * name).
 */
#ifndef CPUOS_E2B_TOKEN_H
#define CPUOS_E2B_TOKEN_H

#include <stddef.h>

#define TOK_MAX 512 /* a token's bytes, NUL included: "e2bt_" + base64url */

struct tokens;

/* The token of (id, key) into out[TOK_MAX]: 0, or -EINVAL for a key
 * over 255 bytes, -EIO when OpenSSL fails. */
int tok_seal(const unsigned char secret[32], const char *id, const char *key, char out[TOK_MAX]);
/* The key a token of id holds into key[keylen]: 0, or -EACCES when it is
 * no token of id's under this secret. */
int tok_open(const unsigned char secret[32], const char *id, const char *token, char *key,
	     size_t keylen);

/* An envd signed URL's signature, "v1_" + base64 (no padding) of SHA-256
 * of "path:operation:user:token" and ":expiration" when expiration is not
 * 0, into out[64]. */
void tok_url_signature(const char *path, const char *op, const char *user, const char *token,
		       long long expiration, char out[64]);

/* The tokens seen lately, by sandbox (a sandbox may have several: one
 * per key that used it): a signed URL carries no token, only a signature
 * made with one. Bounded: the oldest go first. */
int tokens_new(struct tokens **out);
void tokens_free(struct tokens *t);
void tokens_put(struct tokens *t, const char *id, const char *token);
/* The first token of sandbox id (of any sandbox when id is NULL: a signed
 * URL on E2B_SANDBOX_URL's one address names none) that match(arg,
 * token) takes (non-zero): 0 with its sandbox into found[24] and the token
 * into out, or -ENOENT. */
int tokens_find(struct tokens *t, const char *id, int (*match)(void *arg, const char *token),
		void *arg, char found[24], char out[TOK_MAX]);

#endif
