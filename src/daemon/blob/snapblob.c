/*
 * snapblob: a snapshot directory to and from an object store; see
 * snapblob.h. What the store hands back is read like anything from
 * another host: the manifest bounded and parsed as hostile, each file
 * bounded by the size the manifest gives and checked against its
 * checksum, nothing kept from a snapshot that fails a check.
 */
#include "daemon/blob/snapblob.h"

#include "common/buf.h"
#include "common/errbuf.h"
#include "common/fs.h"
#include "lib/s3.h"
#include "runner/snap.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

/* The objects' names under a prefix, by enum snap_file. */
static const char *const kinds[SNAP_NFILES] = { "state", "mem", "disk", "pages", "base" };

static int key_of(char *out, size_t n, const char *prefix, const char *name, char *err,
		  size_t errlen)
{
	int len = snprintf(out, n, "%s/%s", prefix, name);
	if (len < 0 || (size_t)len >= n || !s3_key_ok(out))
		return errbuf_set(err, errlen, -EINVAL, "object store: prefix '%.64s' cannot name a snapshot",
				  prefix);
	return 0;
}

static void sha_hex(const void *p, size_t n, char out[65])
{
	unsigned char md[32];
	unsigned int mdlen = 0;
	EVP_Digest(p, n, md, &mdlen, EVP_sha256(), NULL);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static void digest_hex(EVP_MD_CTX *h, char out[65])
{
	unsigned char md[32];
	unsigned int mdlen = 0;
	EVP_DigestFinal_ex(h, md, &mdlen);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* A file read in order through zstd: what s3_put_source stores. */
struct zsrc {
	struct s3 *s3; /* whose cancel flag is looked at between chunks */
	int fd;
	uint64_t size, off;
	ZSTD_CCtx *z;
	EVP_MD_CTX *h;
	char *in;
	ZSTD_inBuffer ib;
	int ended;
};

#define ZCHUNK (1u << 20)

static ssize_t zsrc_read(void *arg, void *p, size_t n)
{
	struct zsrc *z = arg;
	ZSTD_outBuffer ob = { p, n, 0 };
	while (ob.pos < ob.size && !z->ended) {
		if (z->ib.pos == z->ib.size && z->off < z->size) {
			if (s3_cancelled(z->s3)) /* zeros compress: one call may read it all */
				return -ECANCELED;
			size_t want = z->size - z->off < ZCHUNK ? (size_t)(z->size - z->off) : ZCHUNK;
			ssize_t got = pread(z->fd, z->in, want, (off_t)z->off);
			if (got <= 0) /* it shrank under us */
				return got < 0 ? -errno : -EBADMSG;
			EVP_DigestUpdate(z->h, z->in, (size_t)got);
			z->ib = (ZSTD_inBuffer){ z->in, (size_t)got, 0 };
			z->off += (uint64_t)got;
		}
		int last = z->off == z->size && z->ib.pos == z->ib.size;
		size_t left = ZSTD_compressStream2(z->z, &ob, &z->ib, last ? ZSTD_e_end : ZSTD_e_continue);
		if (ZSTD_isError(left))
			return -EIO;
		if (last && left == 0)
			z->ended = 1;
	}
	return (ssize_t)ob.pos;
}

/* Stores size bytes of fd as key, compressed (zstd, level 1: RAM files
 * are mostly zeros), with the SHA-256 of what was read in sha. */
static int put_zstd(struct s3 *s, const char *key, int fd, uint64_t size, char sha[65], char *err,
		    size_t errlen)
{
	struct zsrc z = { .s3 = s, .fd = fd, .size = size, .z = ZSTD_createCCtx(), .h = EVP_MD_CTX_new(),
			  .in = malloc(ZCHUNK) };
	int r = -ENOMEM;
	if (z.z && z.h && z.in && !ZSTD_isError(ZSTD_CCtx_setParameter(z.z, ZSTD_c_compressionLevel, 1)) &&
	    EVP_DigestInit_ex(z.h, EVP_sha256(), NULL)) {
		struct s3_source src = { zsrc_read, &z };
		r = s3_put_source(s, key, &src, NULL, err, errlen);
		if (r == -EBADMSG)
			r = errbuf_set(err, errlen, r, "a snapshot file changed while it went up (%s)", key);
		else if (r == -ECANCELED)
			r = errbuf_set(err, errlen, r, "object store: %s: cancelled", key);
	} else {
		errbuf_set(err, errlen, r, "out of memory");
	}
	if (r == 0)
		digest_hex(z.h, sha);
	ZSTD_freeCCtx(z.z);
	EVP_MD_CTX_free(z.h);
	free(z.in);
	return r;
}

/* What comes down, decompressed into a file of at most limit bytes as it
 * arrives; its SHA-256 taken on the way. */
struct zsink {
	int fd;
	uint64_t limit, off;
	ZSTD_DCtx *z;
	EVP_MD_CTX *h;
	char *out;
	int frame_done;
};

static int zsink_write(void *arg, const void *p, size_t n)
{
	struct zsink *z = arg;
	ZSTD_inBuffer ib = { p, n, 0 };
	while (ib.pos < ib.size) {
		if (z->frame_done)
			return -EBADMSG; /* bytes after the one frame */
		ZSTD_outBuffer ob = { z->out, ZCHUNK, 0 };
		size_t left = ZSTD_decompressStream(z->z, &ob, &ib);
		if (ZSTD_isError(left))
			return -EBADMSG;
		if (ob.pos > z->limit - z->off)
			return -EFBIG;
		EVP_DigestUpdate(z->h, z->out, ob.pos);
		int e = fs_pwrite_sparse(z->fd, z->out, ob.pos, z->off);
		if (e < 0)
			return e;
		z->off += ob.pos;
		if (left == 0)
			z->frame_done = 1;
	}
	return 0;
}

static int zsink_reset(void *arg)
{
	struct zsink *z = arg;
	z->off = 0;
	z->frame_done = 0;
	ZSTD_DCtx_reset(z->z, ZSTD_reset_session_only);
	EVP_DigestInit_ex(z->h, EVP_sha256(), NULL);
	return ftruncate(z->fd, 0) < 0 ? -errno : 0;
}

/* Fetches key into fd, decompressed: 0 with its size and SHA-256, or
 * -EBADMSG (not one whole zstd frame), -EFBIG (more than limit), -errno. */
static int get_zstd(struct s3 *s, const char *key, int fd, uint64_t limit, uint64_t *size,
		    char sha[65], char *err, size_t errlen)
{
	struct zsink z = { .fd = fd, .limit = limit, .z = ZSTD_createDCtx(), .h = EVP_MD_CTX_new(),
			   .out = malloc(ZCHUNK) };
	int r = -ENOMEM;
	if (z.z && z.h && z.out) {
		struct s3_sink sink = { zsink_write, zsink_reset, &z };
		/* zstd's worst case for the bytes the manifest promises */
		r = s3_get_sink(s, key, ZSTD_compressBound((size_t)limit) + 4096, &sink, NULL, err,
				errlen);
		if (r == 0 && !z.frame_done)
			r = -EBADMSG; /* cut short */
		if (r == 0 && ftruncate(fd, (off_t)z.off) < 0) /* the holes at its end */
			r = errbuf_set(err, errlen, -errno, "cannot write: %s", strerror(errno));
	} else {
		errbuf_set(err, errlen, r, "out of memory");
	}
	if (r == 0) {
		digest_hex(z.h, sha);
		*size = z.off;
	}
	ZSTD_freeDCtx(z.z);
	EVP_MD_CTX_free(z.h);
	free(z.out);
	return r;
}

int snapblob_push(struct s3 *s, const char *dir, const char *prefix, char manifest_sha[65],
		  char *err, size_t errlen)
{
	struct snap_manifest m;
	char key[S3_KEY_MAX + 1], path[600], sha[65];
	int r = snap_load(dir, &m, 0, err, errlen);
	if (r < 0)
		return r;
	if ((r = key_of(key, sizeof(key), prefix, SNAP_MANIFEST, err, errlen)) < 0)
		return r;
	for (int i = 0; i < SNAP_NFILES; i++) {
		if (!m.files[i].name[0])
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, m.files[i].name);
		int fd = fs_open_file(path, O_RDONLY, 0);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0) {
			r = fd < 0 ? fd : -errno;
			if (fd >= 0)
				close(fd);
			return errbuf_set(err, errlen, r, "snapshot file '%s': %s", path, strerror(-r));
		}
		if (st.st_size != m.files[i].size) {
			close(fd);
			return errbuf_set(err, errlen, -EBADMSG,
					  "snapshot '%s' changed: '%s' is %lld bytes, its manifest says %lld",
					  dir, m.files[i].name, (long long)st.st_size, m.files[i].size);
		}
		if ((r = key_of(key, sizeof(key), prefix, kinds[i], err, errlen)) == 0)
			r = put_zstd(s, key, fd, (uint64_t)st.st_size, sha, err, errlen);
		close(fd);
		if (r < 0)
			return r;
		snprintf(m.files[i].encoding, sizeof(m.files[i].encoding), "zstd");
		if (m.files[i].sha256[0] && strcmp(m.files[i].sha256, sha))
			return errbuf_set(err, errlen, -EBADMSG,
					  "snapshot '%s' changed: '%s' does not match its checksum", dir,
					  m.files[i].name);
		memcpy(m.files[i].sha256, sha, sizeof(sha));
	}
	/* The stored manifest says every file's checksum: sealed. */
	m.sealed = 1;
	char *text = snap_manifest_json(&m);
	if (!text)
		return errbuf_set(err, errlen, -ENOMEM, "out of memory");
	sha_hex(text, strlen(text), manifest_sha);
	key_of(key, sizeof(key), prefix, SNAP_MANIFEST, err, errlen);
	r = s3_put_mem(s, key, text, strlen(text), err, errlen);
	free(text);
	return r;
}

int snapblob_content_key(const char *dir, char key[65], char *err, size_t errlen)
{
	char path[600], text[SNAP_MANIFEST_MAX + 1];
	snprintf(path, sizeof(path), "%s/" SNAP_MANIFEST, dir);
	int fd = fs_open_file(path, O_RDONLY, 0);
	if (fd < 0)
		return errbuf_set(err, errlen, fd, "cannot open '%s': %s", path, strerror(-fd));
	size_t len = 0;
	int r = 0;
	for (;;) {
		ssize_t n = read(fd, text + len, sizeof(text) - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : 0;
			break;
		}
		if ((len += (size_t)n) == sizeof(text)) {
			r = -EFBIG; /* no manifest is this big */
			break;
		}
	}
	close(fd);
	if (r < 0)
		return errbuf_set(err, errlen, r, "cannot read '%s': %s", path, strerror(-r));
	sha_hex(text, len, key);
	return 0;
}

/* Removes what pull made of dir. */
static void pull_undo(const char *dir, const struct snap_manifest *m)
{
	char path[600];
	for (int i = 0; i < SNAP_NFILES; i++) {
		if (!m->files[i].name[0])
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, m->files[i].name);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/" SNAP_MANIFEST ".tmp", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/" SNAP_MANIFEST, dir);
	unlink(path);
	rmdir(dir);
}

int snapblob_pull(struct s3 *s, const char *prefix, const char *manifest_sha, const char *dir,
		  char *err, size_t errlen)
{
	char key[S3_KEY_MAX + 1], path[600], sha[65];
	struct snap_manifest m;
	struct buf text;
	memset(&m, 0, sizeof(m));
	buf_init(&text, 0);
	int r = key_of(key, sizeof(key), prefix, SNAP_MANIFEST, err, errlen);
	if (r == 0)
		r = s3_get_mem(s, key, &text, SNAP_MANIFEST_MAX, err, errlen);
	if (r == -EFBIG)
		r = errbuf_set(err, errlen, -EBADMSG,
			       "snapshot '%s' in the object store is damaged: the manifest is too big",
			       prefix);
	if (r < 0)
		goto out;
	if (manifest_sha) {
		sha_hex(text.p ? text.p : "", text.len, sha);
		if (strcmp(sha, manifest_sha)) {
			r = errbuf_set(err, errlen, -EBADMSG,
				       "snapshot '%s' in the object store is not the one recorded: its "
				       "manifest's checksum differs",
				       prefix);
			goto out;
		}
	}
	char what[S3_KEY_MAX + 32];
	snprintf(what, sizeof(what), "%s (object store)", prefix);
	if ((r = snap_manifest_parse(text.p ? text.p : "", text.len, what, &m, err, errlen)) < 0)
		goto out;
	for (int i = 0; i < SNAP_NFILES; i++) {
		if (m.files[i].name[0] && !m.files[i].sha256[0]) {
			r = errbuf_set(err, errlen, -EBADMSG,
				       "snapshot '%s' in the object store is damaged: '%s' has no checksum",
				       prefix, m.files[i].name);
			goto out;
		}
	}
	if (mkdir(dir, 0700) < 0) {
		r = errbuf_set(err, errlen, -errno, "cannot make '%s': %s", dir, strerror(errno));
		goto out;
	}
	for (int i = 0; i < SNAP_NFILES && r == 0; i++) {
		if (!m.files[i].name[0])
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, m.files[i].name);
		int fd = fs_open_file(path, O_RDWR | O_CREAT | O_EXCL, 0600);
		if (fd < 0) {
			r = errbuf_set(err, errlen, fd, "cannot make '%s': %s", path, strerror(-fd));
			break;
		}
		uint64_t size = 0;
		if ((r = key_of(key, sizeof(key), prefix, kinds[i], err, errlen)) == 0)
			r = m.files[i].encoding[0]
				? get_zstd(s, key, fd, (uint64_t)m.files[i].size, &size, sha, err, errlen)
				: s3_get_fd(s, key, fd, (uint64_t)m.files[i].size, &size, sha, err, errlen);
		if (r == -EBADMSG)
			r = errbuf_set(err, errlen, -EBADMSG,
				       "snapshot '%s' in the object store is damaged: '%s' is not the "
				       "compressed file its manifest says",
				       prefix, kinds[i]);
		else if (r == -EFBIG || (r == 0 && size != (uint64_t)m.files[i].size))
			r = errbuf_set(err, errlen, -EBADMSG,
				       "snapshot '%s' in the object store is damaged: '%s' is %s %lld "
				       "bytes its manifest says",
				       prefix, kinds[i], r == -EFBIG ? "over the" : "short of the",
				       m.files[i].size);
		else if (r == -ENOENT)
			r = errbuf_set(err, errlen, -EBADMSG,
				       "snapshot '%s' in the object store is damaged: '%s' is missing",
				       prefix, kinds[i]);
		else if (r == 0 && strcmp(sha, m.files[i].sha256))
			r = errbuf_set(err, errlen, -EBADMSG,
				       "snapshot '%s' in the object store is damaged: '%s' does not match "
				       "its checksum",
				       prefix, kinds[i]);
		if (r == 0 && fsync(fd) < 0)
			r = errbuf_set(err, errlen, -errno, "cannot write '%s': %s", path, strerror(errno));
		close(fd);
	}
	/* The manifest last, as a pause writes it: a directory with one is
	 * whole. Its files are as they are there, not compressed. */
	for (int i = 0; i < SNAP_NFILES; i++)
		m.files[i].encoding[0] = '\0';
	if (r == 0)
		r = snap_manifest_write(dir, &m, err, errlen);
	if (r < 0)
		pull_undo(dir, &m);
out:
	buf_release(&text);
	return r;
}

int snapblob_delete(struct s3 *s, const char *prefix, char *err, size_t errlen)
{
	char key[S3_KEY_MAX + 1];
	int r = key_of(key, sizeof(key), prefix, SNAP_MANIFEST, err, errlen);
	if (r == 0)
		r = s3_delete(s, key, err, errlen);
	for (int i = 0; i < SNAP_NFILES && r == 0; i++)
		if ((r = key_of(key, sizeof(key), prefix, kinds[i], err, errlen)) == 0)
			r = s3_delete(s, key, err, errlen);
	return r;
}
