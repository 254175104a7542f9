/*
 * s3_impl: what the two halves of lib/s3 share. s3.c holds the connection
 * and the signed request with its retries (s3__call); s3_xfer.c the
 * transfers built on it: objects put from memory, a file or a source
 * (multipart above a part's size) and got into a file, memory or a sink.
 */
#ifndef CPUOS_LIB_S3_IMPL_H
#define CPUOS_LIB_S3_IMPL_H

#include "common/buf.h"
#include "lib/s3.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <stddef.h>
#include <stdint.h>

#define ATTEMPTS 3        /* tries of a request, and of a multipart completion */
#define ERR_BODY_MAX 8192 /* an error's or a small answer's XML */
#define ETAG_MAX 128

struct s3 {
	struct s3_conf c;
	CURL *h;
	char sigv4[96];
	const int *cancel; /* s3_set_cancel's flag, or NULL */
};

struct req {
	const char *method; /* GET PUT POST DELETE HEAD */
	const char *key;    /* NULL: the bucket itself */
	const char *query;  /* "" or "a=b&c=d", already escaped */
	/* The body: from fd at [off, off + len), else mem[0..len). */
	int in_fd;
	const char *in_mem;
	uint64_t in_off, in_len, in_done;
	EVP_MD_CTX *in_hash;
	/* The answer's body: to out_fd, else to out_mem, else to sink
	 * (bounded either way). */
	int out_fd;
	struct buf *out_mem;
	const struct s3_sink *sink;
	uint64_t out_limit, out_len;
	int out_over;
	EVP_MD_CTX *out_hash;
	/* What came back. */
	long status;
	char etag[ETAG_MAX];
	long long length; /* Content-Length, -1 when not given */
	struct buf err;   /* a non-2xx answer's body */
	int err_over;     /* ... cut at ERR_BODY_MAX */
	int write_err;
};

/* A request of method on key (NULL: the bucket) with query ("" or
 * escaped pairs): no body, no answer kept but an error's (in r->err,
 * which the caller releases); the caller sets the rest. */
void s3__req_init(struct req *r, const char *method, const char *key, const char *query);
/* Runs r with the retries: 0 on 2xx, -errno with a reason in err. */
int s3__call(struct s3 *s, struct req *r, char *err, size_t errlen);
/* 0 when key can name an object, else -EINVAL with a reason. */
int s3__key_check(const char *key, char *err, size_t errlen);
/* Whether s is at least min printable ASCII characters, no spaces. */
int s3__text_ok(const char *s, size_t min);
/* The text of the first <tag>...</tag> in xml into out[n]: 0, -ENOENT,
 * -EBADMSG (see s3.c). */
int s3__xml_text(const char *xml, size_t len, const char *tag, char *out, size_t n);
/* Makes what an error quotes of the store's printable, in place. */
void s3__printable(char *s);
/* Starts h (if not NULL) anew as SHA-256; its digest as 64 hex digits. */
void s3__hash_reset(EVP_MD_CTX *h);
void s3__hash_hex(EVP_MD_CTX *h, char out[65]);

#endif
