/*
 * s3: a client of an S3-compatible object store (AWS S3, Garage, Ceph RGW,
 * Swift's s3api), for snapshot bytes: objects of a few bytes to tens of
 * GiB, streamed between the store and a file descriptor, never held whole
 * in memory. Requests are signed with SigV4 by libcurl
 * (CURLOPT_AWS_SIGV4, access key and secret given apart, so a key with a
 * colon works), path-style (endpoint/bucket/key), payloads unsigned: what
 * a file holds is checked by its SHA-256, which every transfer computes as
 * the bytes pass.
 *
 * Each call retries what a store or a network may fail once (a transport
 * error, 5xx, 429), three attempts, backing off; then it fails with
 * -EAGAIN. Everything a store answers is bounded and checked: an error's
 * text is quoted only as printable ASCII, an object larger than its caller
 * allows is -EFBIG and not written further.
 *
 * One struct s3 holds one connection: use it from one thread at a time.
 * Errors are -errno with a reason in err[errlen]: -ENOENT no such object
 * (or bucket), -EACCES refused credentials, -EFBIG over the limit,
 * -EAGAIN the store did not answer well after the retries, -EINVAL a bad
 * name or setting, -ECANCELED (s3_set_cancel), -EIO anything else (an
 * unexpected answer).
 */
#ifndef CPUOS_S3_H
#define CPUOS_S3_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct buf;

struct s3_conf {
	char endpoint[256];   /* http[s]://host[:port], no path */
	char region[64];      /* e.g. us-east-1; what the store calls its location */
	char bucket[64];      /* 3..63 of [a-z0-9.-] */
	char access_key[128];
	char secret_key[128];
	uint64_t part_size;   /* a larger object goes up in parts of this size;
			       * 0: S3_PART_SIZE; at least S3_PART_MIN */
};

#define S3_PART_SIZE (64ull << 20)
#define S3_PART_MIN (5ull << 20)
/* The longest key: far under S3's 1024 bytes, so a prefix can be added. */
#define S3_KEY_MAX 512

struct s3;

/* Checks c and makes a client: 0 or -EINVAL/-ENOMEM. */
int s3_open(struct s3 **out, const struct s3_conf *c, char *err, size_t errlen);
void s3_close(struct s3 *s);

/* From now on a transfer stops soon after *flag becomes nonzero (another
 * thread sets it; read atomically) and its call fails with -ECANCELED,
 * never retried. NULL: none. */
void s3_set_cancel(struct s3 *s, const int *flag);
/* Whether that flag is set now: for a source that reads long. */
int s3_cancelled(const struct s3 *s);

/* 1 if key may name an object: 1..S3_KEY_MAX bytes of [A-Za-z0-9._-/],
 * segments between slashes neither empty nor "." or "..", no slash first
 * or last. Such a key needs no escaping in a URL. */
int s3_key_ok(const char *key);

/* Creates the bucket; 0 also when it is already the caller's. */
int s3_bucket_create(struct s3 *s, char *err, size_t errlen);

/* Stores size bytes of fd, read from offset 0 with pread, as key: one PUT
 * up to the part size, a multipart upload above it (aborted on failure).
 * With sha256 set, the bytes' SHA-256 in hex is written there. */
int s3_put_fd(struct s3 *s, const char *key, int fd, uint64_t size, char sha256[65], char *err,
	      size_t errlen);
/* Stores n bytes of p as key. */
int s3_put_mem(struct s3 *s, const char *key, const void *p, size_t n, char *err, size_t errlen);

/* Writes object key into fd from offset 0 (fd is truncated first; a
 * retry starts over), at most limit bytes: 0 with its size in *size and
 * with sha256 set its SHA-256, or -EFBIG past the limit. Each aligned
 * 4 KiB of zeros is left a hole: a RAM file takes on disk what it held. */
int s3_get_fd(struct s3 *s, const char *key, int fd, uint64_t limit, uint64_t *size,
	      char sha256[65], char *err, size_t errlen);
/* Appends object key to b, at most limit bytes. */
int s3_get_mem(struct s3 *s, const char *key, struct buf *b, size_t limit, char *err,
	       size_t errlen);

/* Bytes of unknown count, as they come: read fills p[0..n) and returns
 * how many (0 at the end) or -errno. */
struct s3_source {
	ssize_t (*read)(void *arg, void *p, size_t n);
	void *arg;
};
/* Stores what src gives as key, held a part (the part size) at a time in
 * memory: one PUT when it all fits in one, a multipart upload when not.
 * *size (if not NULL) gets the bytes stored. */
int s3_put_source(struct s3 *s, const char *key, const struct s3_source *src, uint64_t *size,
		  char *err, size_t errlen);

/* Where an object's bytes go as they come: write takes p[0..n) (0, or
 * -errno to stop the transfer, which the call then returns), reset (may
 * be NULL) starts over before each try. */
struct s3_sink {
	int (*write)(void *arg, const void *p, size_t n);
	int (*reset)(void *arg);
	void *arg;
};
/* Gives object key to sink, at most limit bytes (-EFBIG past it). */
int s3_get_sink(struct s3 *s, const char *key, uint64_t limit, const struct s3_sink *sink,
		uint64_t *size, char *err, size_t errlen);

/* The size of object key: 0, or -ENOENT when there is none. */
int s3_head(struct s3 *s, const char *key, uint64_t *size, char *err, size_t errlen);

/* Deletes object key; 0 also when there was none. */
int s3_delete(struct s3 *s, const char *key, char *err, size_t errlen);

/* Reads environment variables PREFIX_ENDPOINT, _REGION (default
 * us-east-1), _BUCKET, _ACCESS_KEY and _SECRET_KEY into c (part size 0):
 * 0, or -EINVAL naming the one missing or too long. */
int s3_conf_env(struct s3_conf *c, const char *prefix, char *err, size_t errlen);

#endif
