/* seal: see seal.h. The cipher is OpenSSL's; this file keeps the key. */
#include "daemon/net/seal.h"

#include "common/errbuf.h"
#include "common/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEY_LEN	  32
#define NONCE_LEN 12
#define TAG_LEN	  16

struct seal {
	unsigned char key[KEY_LEN];
};

/* The key file at dfd, checked: 0 with the key read, -ENOENT, or -errno
 * with a reason. */
static int read_key(int dfd, const char *dir, unsigned char *key, char *err, size_t errlen)
{
	int fd = openat(dfd, SEAL_KEY_FILE, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ENOENT
				       : errbuf_set(err, errlen, -errno, "cannot open %s/%s: %s",
						    dir, SEAL_KEY_FILE, strerror(errno));
	struct stat st;
	int r = 0;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != KEY_LEN ||
	    st.st_uid != geteuid() || (st.st_mode & 077))
		r = errbuf_set(err, errlen, -EPERM,
			       "%s/%s is not a key: a file of %d bytes, its owner's alone", dir,
			       SEAL_KEY_FILE, KEY_LEN);
	else if (pread(fd, key, KEY_LEN, 0) != KEY_LEN)
		r = errbuf_set(err, errlen, -EIO, "cannot read %s/%s", dir, SEAL_KEY_FILE);
	close(fd);
	return r;
}

/* A new key, written whole under a name of its own and then linked to
 * SEAL_KEY_FILE, so a netd starting beside this one reads either none or
 * all of it; when one was linked first, that one is read. */
static int make_key(int dfd, const char *dir, unsigned char *key, char *err, size_t errlen)
{
	char tmp[64];
	unsigned char rnd[8];
	if (RAND_bytes(key, KEY_LEN) != 1 || RAND_bytes(rnd, sizeof(rnd)) != 1)
		return errbuf_set(err, errlen, -EIO, "no randomness for a key");
	snprintf(tmp, sizeof(tmp), ".%s.%02x%02x%02x%02x%02x%02x%02x%02x", SEAL_KEY_FILE, rnd[0],
		 rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return errbuf_set(err, errlen, -errno, "cannot make a key in %s: %s", dir,
				  strerror(errno));
	int r = write(fd, key, KEY_LEN) == KEY_LEN && fsync(fd) == 0 ? 0 : -EIO;
	close(fd);
	if (r == 0 && linkat(dfd, tmp, dfd, SEAL_KEY_FILE, 0) < 0)
		r = errno == EEXIST ? -EEXIST : -errno;
	unlinkat(dfd, tmp, 0);
	if (r == -EEXIST)
		return read_key(dfd, dir, key, err, errlen);
	if (r < 0)
		return errbuf_set(err, errlen, r, "cannot write a key in %s: %s", dir,
				  strerror(-r));
	fsync(dfd);
	return 0;
}

int seal_load(const char *dir, struct seal **out, char *err, size_t errlen)
{
	struct seal *s = calloc(1, sizeof(*s));
	if (!s)
		return errbuf_set(err, errlen, -ENOMEM, "out of memory");
	int r = fs_mkdir_p(dir, 0700, (uid_t)-1, (gid_t)-1);
	int dfd = r < 0 ? -1 : open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		r = errbuf_set(err, errlen, r < 0 ? r : -errno, "cannot open %s: %s", dir,
			       strerror(r < 0 ? -r : errno));
	else if ((r = read_key(dfd, dir, s->key, err, errlen)) == -ENOENT)
		r = make_key(dfd, dir, s->key, err, errlen);
	if (dfd >= 0)
		close(dfd);
	if (r < 0) {
		seal_free(s);
		return r;
	}
	*out = s;
	return 0;
}

void seal_free(struct seal *s)
{
	if (!s)
		return;
	explicit_bzero(s, sizeof(*s));
	free(s);
}

/* Runs the cipher over in[0..n) to out, aad bound; the tag written to (or
 * checked against) tag. 1 on success. */
static int run_gcm(const struct seal *s, int enc, const char *aad, const unsigned char *nonce,
		   const unsigned char *in, size_t n, unsigned char *out, unsigned char *tag)
{
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int len = 0,
	    ok = c && n <= INT32_MAX &&
		 EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, s->key, nonce, enc) == 1 &&
		 EVP_CipherUpdate(c, NULL, &len, (const unsigned char *)aad, (int)strlen(aad)) ==
		     1 &&
		 (n == 0 || EVP_CipherUpdate(c, out, &len, in, (int)n) == 1) &&
		 (enc || EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG_LEN, tag) == 1) &&
		 EVP_CipherFinal_ex(c, out + len, &len) == 1 &&
		 (!enc || EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG_LEN, tag) == 1);
	EVP_CIPHER_CTX_free(c);
	return ok;
}

char *seal_wrap(const struct seal *s, const char *aad, const void *plain, size_t n)
{
	size_t blen = NONCE_LEN + n + TAG_LEN, plen = strlen(SEAL_PREFIX);
	unsigned char *b = malloc(blen);
	char *text = malloc(SEAL_TEXT_MAX(n));
	if (!b || !text || blen > INT32_MAX || RAND_bytes(b, NONCE_LEN) != 1 ||
	    !run_gcm(s, 1, aad, b, plain, n, b + NONCE_LEN, b + NONCE_LEN + n)) {
		free(b);
		free(text);
		return NULL;
	}
	memcpy(text, SEAL_PREFIX, plen);
	EVP_EncodeBlock((unsigned char *)text + plen, b, (int)blen);
	free(b); /* nonce, cipher text and tag: nothing to wipe */
	return text;
}

char *seal_unwrap(const struct seal *s, const char *aad, const char *text, size_t *n)
{
	size_t plen = strlen(SEAL_PREFIX), tlen = text ? strlen(text) : 0;
	if (tlen <= plen || strncmp(text, SEAL_PREFIX, plen) || (tlen - plen) % 4 ||
	    tlen - plen > INT32_MAX)
		return NULL;
	const char *b64 = text + plen;
	size_t blen = (tlen - plen) / 4 * 3;
	unsigned char *b = malloc(blen);
	/* EVP_DecodeBlock counts the padding's zero bytes as data. */
	int got = b ? EVP_DecodeBlock(b, (const unsigned char *)b64, (int)(tlen - plen)) : -1;
	if (got >= 0)
		got -= (b64[tlen - plen - 1] == '=') + (b64[tlen - plen - 2] == '=');
	if (got < NONCE_LEN + TAG_LEN) {
		free(b);
		return NULL;
	}
	size_t len = (size_t)got - NONCE_LEN - TAG_LEN;
	char *plain = malloc(len + 1);
	if (!plain || !run_gcm(s, 0, aad, b, b + NONCE_LEN, len, (unsigned char *)plain,
			       b + NONCE_LEN + len)) {
		if (plain)
			explicit_bzero(plain, len + 1);
		free(plain);
		free(b);
		return NULL;
	}
	free(b);
	plain[len] = '\0';
	*n = len;
	return plain;
}
