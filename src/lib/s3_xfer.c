/*
 * s3_xfer: lib/s3's transfers (see s3.h), each one or more requests run by
 * s3__call (s3.c): objects put from memory, from a file or a source (in
 * parts above the part size, a multipart upload aborted on failure) and
 * got into a file, memory or a sink, bounded and checksummed on the way.
 */
#include "lib/s3_impl.h"

#include "common/errbuf.h"
#include "common/fs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int s3_put_mem(struct s3 *s, const char *key, const void *p, size_t n, char *err, size_t errlen)
{
	int ret = s3__key_check(key, err, errlen);
	if (ret < 0)
		return ret;
	struct req r;
	s3__req_init(&r, "PUT", key, "");
	r.in_mem = n ? p : "";
	r.in_len = n;
	ret = s3__call(s, &r, err, errlen);
	buf_release(&r.err);
	return ret;
}

/* Escapes s for a query value (RFC 3986 unreserved kept). */
static int query_escape(const char *s, char *out, size_t n)
{
	size_t o = 0;
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		int keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			   (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' || ch == '~';
		if (o + (keep ? 1 : 3) >= n)
			return -ENAMETOOLONG;
		if (keep)
			out[o++] = (char)ch;
		else
			o += (size_t)sprintf(out + o, "%%%02X", ch);
	}
	out[o] = '\0';
	return 0;
}

/* Where the parts of a multipart upload come from: a file's range, or a
 * source read into memory a part at a time. */
struct parts {
	int fd; /* a file: [0, size) in parts of psize */
	uint64_t size, psize;
	EVP_MD_CTX *hash;
	const struct s3_source *src; /* else a source, into buf[cap] */
	char *buf;
	size_t len, cap;
	int eof;
	uint64_t total; /* bytes read from src so far */
};

/* Fills p->buf from the source: 0 (p->len bytes, p->eof at its end),
 * the source's -errno, or -ECANCELED (a source that compresses well may
 * read for long before a part is full). */
static int fill(struct parts *p, const int *cancel)
{
	p->len = 0;
	while (p->len < p->cap && !p->eof) {
		if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
			return -ECANCELED;
		ssize_t n = p->src->read(p->src->arg, p->buf + p->len, p->cap - p->len);
		if (n < 0)
			return (int)n;
		if (n == 0)
			p->eof = 1;
		p->len += (size_t)n;
		p->total += (uint64_t)n;
	}
	return 0;
}

/* Sets r's body to part i (0-based): 1 if there is one, 0 past the last,
 * or -errno. */
static int next_part(struct parts *p, uint64_t i, struct req *r, const int *cancel)
{
	if (!p->src) {
		if (i * p->psize >= p->size)
			return 0;
		r->in_fd = p->fd;
		r->in_off = i * p->psize;
		r->in_len = p->size - r->in_off < p->psize ? p->size - r->in_off : p->psize;
		r->in_hash = p->hash;
		return 1;
	}
	if (i > 0) { /* part 0 was read to choose between one PUT and parts */
		if (p->eof)
			return 0;
		int e = fill(p, cancel);
		if (e < 0)
			return e;
		if (p->len == 0)
			return 0;
	}
	r->in_mem = p->buf;
	r->in_len = p->len;
	return 1;
}

static int put_multipart(struct s3 *s, const char *key, struct parts *p, char *err, size_t errlen)
{
	if (!p->src && (p->size + p->psize - 1) / p->psize > 10000)
		return errbuf_set(err, errlen, -EFBIG,
				  "object store: %s needs %llu parts of %llu bytes (at most 10000)", key,
				  (unsigned long long)((p->size + p->psize - 1) / p->psize),
				  (unsigned long long)p->psize);
	struct req r;
	struct buf answer, done;
	buf_init(&answer, ERR_BODY_MAX);
	buf_init(&done, 0);
	char upload[256], upload_q[800], query[900];
	s3__req_init(&r, "POST", key, "uploads=");
	r.out_mem = &answer;
	int ret = s3__call(s, &r, err, errlen);
	buf_release(&r.err);
	if (ret == 0 && (s3__xml_text(answer.p ? answer.p : "", answer.len, "UploadId", upload,
				  sizeof(upload)) < 0 ||
			 !s3__text_ok(upload, 1) || query_escape(upload, upload_q, sizeof(upload_q)) < 0))
		ret = errbuf_set(err, errlen, -EIO,
				 "object store: POST %s?uploads: the answer names no upload", key);
	buf_release(&answer);
	if (ret < 0)
		return ret;
	ret = buf_adds(&done, "<CompleteMultipartUpload>");
	for (uint64_t i = 0; ret == 0; i++) {
		snprintf(query, sizeof(query), "partNumber=%llu&uploadId=%s",
			 (unsigned long long)i + 1, upload_q);
		s3__req_init(&r, "PUT", key, query);
		int more = next_part(p, i, &r, s->cancel);
		if (more <= 0) {
			ret = more < 0 ? errbuf_set(err, errlen, more, "object store: %s: reading: %s",
						    key, strerror(-more))
				       : 0;
			buf_release(&r.err);
			break;
		}
		if (i == 10000)
			ret = errbuf_set(err, errlen, -EFBIG, "object store: %s: over 10000 parts", key);
		else
			ret = s3__call(s, &r, err, errlen);
		if (ret == 0 && !r.etag[0])
			ret = errbuf_set(err, errlen, -EIO,
					 "object store: part %llu of %s came back without an ETag",
					 (unsigned long long)i + 1, key);
		if (ret == 0)
			ret = buf_addf(&done, "<Part><PartNumber>%llu</PartNumber><ETag>%s</ETag></Part>",
				       (unsigned long long)i + 1, r.etag);
		buf_release(&r.err);
	}
	if (ret == 0)
		ret = buf_adds(&done, "</CompleteMultipartUpload>");
	if (ret == 0) {
		/* A completion may fail with 200 and an <Error> body: S3 says
		 * so; it is retried like a 5xx. */
		snprintf(query, sizeof(query), "uploadId=%s", upload_q);
		for (int i = 0; i < ATTEMPTS; i++) {
			buf_init(&answer, ERR_BODY_MAX);
			s3__req_init(&r, "POST", key, query);
			r.in_mem = done.p;
			r.in_len = done.len;
			r.out_mem = &answer;
			ret = s3__call(s, &r, err, errlen);
			int failed = ret == 0 && answer.p && strstr(answer.p, "<Error>");
			if (failed) {
				char code[64] = "";
				s3__xml_text(answer.p, answer.len, "Code", code, sizeof(code));
				s3__printable(code);
				ret = errbuf_set(err, errlen, -EAGAIN,
						 "object store: completing %s failed: %s", key, code);
			}
			buf_release(&r.err);
			buf_release(&answer);
			if (ret != -EAGAIN || !failed)
				break;
		}
	}
	buf_release(&done);
	if (ret < 0 && ret != -ECANCELED) {
		/* Leave no parts behind; a failure here is the store's to
		 * sweep. Not when cancelled: whoever cancelled is waiting, and
		 * a store that hangs would hold them (the parts are then the
		 * store's to expire, as S3's lifecycle rules do). */
		char e2[64];
		const int *cancel = s->cancel;
		s->cancel = NULL;
		snprintf(query, sizeof(query), "uploadId=%s", upload_q);
		s3__req_init(&r, "DELETE", key, query);
		s3__call(s, &r, e2, sizeof(e2));
		buf_release(&r.err);
		s->cancel = cancel;
	}
	return ret;
}

int s3_put_source(struct s3 *s, const char *key, const struct s3_source *src, uint64_t *size,
		  char *err, size_t errlen)
{
	int ret = s3__key_check(key, err, errlen);
	if (ret < 0)
		return ret;
	struct parts p = { .src = src, .cap = (size_t)s->c.part_size, .psize = s->c.part_size };
	if (!(p.buf = malloc(p.cap)))
		return errbuf_set(err, errlen, -ENOMEM, "object store: out of memory");
	if ((ret = fill(&p, s->cancel)) < 0) {
		ret = errbuf_set(err, errlen, ret, "object store: %s: reading: %s", key, strerror(-ret));
	} else if (p.eof) { /* all of it in one part: one PUT */
		struct req r;
		s3__req_init(&r, "PUT", key, "");
		r.in_mem = p.len ? p.buf : "";
		r.in_len = p.len;
		ret = s3__call(s, &r, err, errlen);
		buf_release(&r.err);
	} else {
		ret = put_multipart(s, key, &p, err, errlen);
	}
	free(p.buf);
	if (ret == 0 && size)
		*size = p.total;
	return ret;
}

int s3_put_fd(struct s3 *s, const char *key, int fd, uint64_t size, char sha256[65], char *err,
	      size_t errlen)
{
	int ret = s3__key_check(key, err, errlen);
	if (ret < 0)
		return ret;
	EVP_MD_CTX *hash = EVP_MD_CTX_new();
	if (!hash)
		return errbuf_set(err, errlen, -ENOMEM, "object store: out of memory");
	s3__hash_reset(hash);
	if (size > s->c.part_size) {
		struct parts p = { .fd = fd, .size = size, .psize = s->c.part_size, .hash = hash };
		ret = put_multipart(s, key, &p, err, errlen);
	} else {
		struct req r;
		s3__req_init(&r, "PUT", key, "");
		r.in_fd = fd;
		r.in_len = size;
		r.in_hash = hash;
		ret = s3__call(s, &r, err, errlen);
		buf_release(&r.err);
	}
	if (ret == 0 && sha256)
		s3__hash_hex(hash, sha256);
	EVP_MD_CTX_free(hash);
	return ret;
}

int s3_get_fd(struct s3 *s, const char *key, int fd, uint64_t limit, uint64_t *size,
	      char sha256[65], char *err, size_t errlen)
{
	int ret = s3__key_check(key, err, errlen);
	if (ret < 0)
		return ret;
	EVP_MD_CTX *hash = EVP_MD_CTX_new();
	if (!hash)
		return errbuf_set(err, errlen, -ENOMEM, "object store: out of memory");
	struct req r;
	s3__req_init(&r, "GET", key, "");
	r.out_fd = fd;
	r.out_limit = limit;
	r.out_hash = hash;
	ret = s3__call(s, &r, err, errlen);
	/* libcurl fails a body shorter than its Content-Length; a longer
	 * one it cuts, so compare. */
	if (ret == 0 && r.length >= 0 && (uint64_t)r.length != r.out_len)
		ret = errbuf_set(err, errlen, -EIO, "object store: GET %s: %llu bytes of %lld", key,
				 (unsigned long long)r.out_len, r.length);
	if (ret == 0 && ftruncate(fd, (off_t)r.out_len) < 0) /* the holes at the end */
		ret = errbuf_set(err, errlen, -errno, "object store: GET %s: %s", key, strerror(errno));
	if (ret == 0) {
		if (size)
			*size = r.out_len;
		if (sha256)
			s3__hash_hex(hash, sha256);
	}
	buf_release(&r.err);
	EVP_MD_CTX_free(hash);
	return ret;
}

int s3_get_mem(struct s3 *s, const char *key, struct buf *b, size_t limit, char *err,
	       size_t errlen)
{
	int ret = s3__key_check(key, err, errlen);
	if (ret < 0)
		return ret;
	size_t was = b->len;
	struct buf got;
	buf_init(&got, limit);
	struct req r;
	s3__req_init(&r, "GET", key, "");
	r.out_mem = &got;
	r.out_limit = limit;
	ret = s3__call(s, &r, err, errlen);
	if (ret == 0 && r.length >= 0 && (uint64_t)r.length != r.out_len)
		ret = errbuf_set(err, errlen, -EIO, "object store: GET %s: %llu bytes of %lld", key,
				 (unsigned long long)r.out_len, r.length);
	if (ret == 0 && got.len)
		ret = buf_add(b, got.p, got.len) < 0 ? errbuf_set(err, errlen, -EFBIG,
					"object store: GET %s: no room for %zu bytes", key, got.len) : 0;
	if (ret < 0)
		b->len = was;
	buf_release(&got);
	buf_release(&r.err);
	return ret;
}

int s3_get_sink(struct s3 *s, const char *key, uint64_t limit, const struct s3_sink *sink,
		uint64_t *size, char *err, size_t errlen)
{
	int ret = s3__key_check(key, err, errlen);
	if (ret < 0)
		return ret;
	struct req r;
	s3__req_init(&r, "GET", key, "");
	r.sink = sink;
	r.out_limit = limit;
	ret = s3__call(s, &r, err, errlen);
	if (ret == 0 && r.length >= 0 && (uint64_t)r.length != r.out_len)
		ret = errbuf_set(err, errlen, -EIO, "object store: GET %s: %llu bytes of %lld", key,
				 (unsigned long long)r.out_len, r.length);
	if (ret == 0 && size)
		*size = r.out_len;
	buf_release(&r.err);
	return ret;
}
