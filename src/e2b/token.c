/* token: sealed envd access tokens, URL signatures, and the recent tokens
 * by sandbox (token.h). */
#include "e2b/token.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_PREFIX "e2bt_"
#define NONCE_LEN  12
#define TAG_LEN	   16
#define KEY_MAX	   255

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
static const char b64std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* n bytes as base64 without padding into out (room for 4n/3 + 2). */
static size_t b64(const char *alpha, const unsigned char *p, size_t n, char *out)
{
	size_t o = 0, i = 0;
	for (; i + 2 < n; i += 3) {
		unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
		out[o++] = alpha[v >> 18 & 63], out[o++] = alpha[v >> 12 & 63];
		out[o++] = alpha[v >> 6 & 63], out[o++] = alpha[v & 63];
	}
	if (i < n) {
		unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0);
		out[o++] = alpha[v >> 18 & 63], out[o++] = alpha[v >> 12 & 63];
		if (i + 1 < n)
			out[o++] = alpha[v >> 6 & 63];
	}
	out[o] = '\0';
	return o;
}

/* base64url without padding back into out[max]: its length, or -1. */
static long unb64url(const char *s, unsigned char *out, size_t max)
{
	size_t o = 0;
	unsigned v = 0, bits = 0;
	for (; *s; s++) {
		const char *at = strchr(b64url, *s);
		if (!at || !*s)
			return -1;
		v = v << 6 | (unsigned)(at - b64url);
		if ((bits += 6) >= 8) {
			bits -= 8;
			if (o == max)
				return -1;
			out[o++] = (unsigned char)(v >> bits);
		}
	}
	return (long)o;
}

static int gcm(int enc, const unsigned char secret[32], const unsigned char *nonce,
	       const char *aad, const unsigned char *in, int n, unsigned char *out,
	       unsigned char *tag)
{
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int len, ok = c && EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL, enc) == 1 &&
		      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, NONCE_LEN, NULL) == 1 &&
		      EVP_CipherInit_ex(c, NULL, NULL, secret, nonce, enc) == 1 &&
		      EVP_CipherUpdate(c, NULL, &len, (const unsigned char *)aad, (int)strlen(aad)) == 1 &&
		      EVP_CipherUpdate(c, out, &len, in, n) == 1;
	if (ok && !enc)
		ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG_LEN, tag) == 1;
	if (ok)
		ok = EVP_CipherFinal_ex(c, out + len, &len) == 1;
	if (ok && enc)
		ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG_LEN, tag) == 1;
	EVP_CIPHER_CTX_free(c);
	return ok ? 0 : -1;
}

/* The secret's two keys, apart: one for the nonces' HMAC, one for AES. */
static int subkey(const unsigned char secret[32], const char *use, unsigned char out[32])
{
	unsigned len = 0;
	return HMAC(EVP_sha256(), secret, 32, (const unsigned char *)use, strlen(use), out, &len) &&
			       len == 32
		       ? 0
		       : -1;
}

int tok_seal(const unsigned char secret[32], const char *id, const char *key, char out[TOK_MAX])
{
	unsigned char knonce[32], kseal[32];
	size_t n = strlen(key);
	unsigned char blob[NONCE_LEN + KEY_MAX + TAG_LEN], mac[EVP_MAX_MD_SIZE];
	unsigned maclen = 0;
	if (n > KEY_MAX)
		return -EINVAL;
	/* A synthetic nonce: HMAC of what is sealed, so one (id, key) always
	 * seals alike and two never share a nonce. */
	unsigned char in[64 + 1 + KEY_MAX];
	size_t il = strlen(id);
	if (il > 64)
		return -EINVAL;
	memcpy(in, id, il + 1);
	memcpy(in + il + 1, key, n);
	int ok = subkey(secret, "cpuos-e2b nonce", knonce) == 0 &&
		 subkey(secret, "cpuos-e2b seal", kseal) == 0 &&
		 HMAC(EVP_sha256(), knonce, 32, in, il + 1 + n, mac, &maclen) != NULL;
	explicit_bzero(in, sizeof(in));
	explicit_bzero(knonce, sizeof(knonce));
	if (ok) {
		memcpy(blob, mac, NONCE_LEN);
		ok = gcm(1, kseal, blob, id, (const unsigned char *)key, (int)n, blob + NONCE_LEN,
			 blob + NONCE_LEN + n) == 0;
	}
	explicit_bzero(kseal, sizeof(kseal));
	if (!ok)
		return -EIO;
	memcpy(out, TOK_PREFIX, sizeof(TOK_PREFIX));
	b64(b64url, blob, NONCE_LEN + n + TAG_LEN, out + sizeof(TOK_PREFIX) - 1);
	return 0;
}

int tok_open(const unsigned char secret[32], const char *id, const char *token, char *key,
	     size_t keylen)
{
	unsigned char blob[NONCE_LEN + KEY_MAX + TAG_LEN + 3];
	if (strncmp(token, TOK_PREFIX, sizeof(TOK_PREFIX) - 1) ||
	    strlen(token) >= TOK_MAX)
		return -EACCES;
	long n = unb64url(token + sizeof(TOK_PREFIX) - 1, blob, sizeof(blob));
	if (n < NONCE_LEN + TAG_LEN + 1 || (size_t)(n - NONCE_LEN - TAG_LEN) >= keylen)
		return -EACCES;
	size_t kn = (size_t)n - NONCE_LEN - TAG_LEN;
	/* One token, one spelling: the unused low bits of its last character
	 * are 0, as tok_seal writes them. */
	char again[TOK_MAX];
	b64(b64url, blob, (size_t)n, again);
	unsigned char kseal[32];
	int ok = !strcmp(again, token + sizeof(TOK_PREFIX) - 1) &&
		 subkey(secret, "cpuos-e2b seal", kseal) == 0 &&
		 gcm(0, kseal, blob, id, blob + NONCE_LEN, (int)kn, (unsigned char *)key,
		     blob + NONCE_LEN + kn) == 0;
	explicit_bzero(kseal, sizeof(kseal));
	if (!ok) {
		explicit_bzero(key, keylen);
		return -EACCES;
	}
	key[kn] = '\0';
	if (memchr(key, '\0', kn)) {
		explicit_bzero(key, keylen);
		return -EACCES;
	}
	return 0;
}

void tok_url_signature(const char *path, const char *op, const char *user, const char *token,
		       long long expiration, char out[64])
{
	unsigned char d[SHA256_DIGEST_LENGTH];
	char exp[32] = "";
	const char *parts[] = { path, ":", op, ":", user, ":", token, exp };
	unsigned dl = 0;
	if (expiration)
		snprintf(exp, sizeof(exp), ":%lld", expiration);
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1;
	for (size_t i = 0; ok && i < sizeof(parts) / sizeof(parts[0]); i++)
		ok = EVP_DigestUpdate(c, parts[i], strlen(parts[i])) == 1;
	ok = ok && EVP_DigestFinal_ex(c, d, &dl) == 1;
	EVP_MD_CTX_free(c);
	if (!ok) /* no signature matches "" */
		memset(d, 0, sizeof(d));
	memcpy(out, "v1_", 3);
	b64(b64std, d, sizeof(d), out + 3);
}

/* ---- recent tokens ---- */

#define TOKENS_MAX 4096

struct tokens {
	pthread_mutex_t mu;
	size_t next; /* the slot the next new id takes, round the ring */
	struct {
		char id[24];
		char token[TOK_MAX];
	} slot[TOKENS_MAX];
};

int tokens_new(struct tokens **out)
{
	struct tokens *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->mu, NULL);
	*out = t;
	return 0;
}

void tokens_free(struct tokens *t)
{
	if (!t)
		return;
	pthread_mutex_destroy(&t->mu);
	explicit_bzero(t, sizeof(*t));
	free(t);
}

void tokens_put(struct tokens *t, const char *id, const char *token)
{
	pthread_mutex_lock(&t->mu);
	size_t i = 0;
	while (i < TOKENS_MAX && (strcmp(t->slot[i].id, id) || strcmp(t->slot[i].token, token)))
		i++;
	if (i == TOKENS_MAX) { /* a new one takes the oldest's slot */
		i = t->next, t->next = (t->next + 1) % TOKENS_MAX;
		snprintf(t->slot[i].id, sizeof(t->slot[i].id), "%s", id);
		snprintf(t->slot[i].token, sizeof(t->slot[i].token), "%s", token);
	}
	pthread_mutex_unlock(&t->mu);
}

int tokens_find(struct tokens *t, const char *id, int (*match)(void *arg, const char *token),
		void *arg, char found[24], char out[TOK_MAX])
{
	int rc = -ENOENT;
	pthread_mutex_lock(&t->mu);
	for (size_t i = 0; i < TOKENS_MAX && rc; i++)
		if (t->slot[i].id[0] && (!id || !strcmp(t->slot[i].id, id)) &&
		    match(arg, t->slot[i].token)) {
			memcpy(found, t->slot[i].id, 24);
			memcpy(out, t->slot[i].token, TOK_MAX);
			rc = 0;
		}
	pthread_mutex_unlock(&t->mu);
	return rc;
}
