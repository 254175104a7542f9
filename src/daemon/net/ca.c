/*
 * ca: see ca.h. Everything cryptographic is OpenSSL's; this file only
 * says what goes into the certificates. Guests' TLS stacks may check
 * strictly (Python 3.13 does): the CA carries a critical basicConstraints
 * and keyUsage and a subject key id, each leaf an authority key id, a
 * subjectAltName and the serverAuth extended key usage.
 */
#include "daemon/net/ca.h"

#include "common/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LEAVES 64                 /* hosts whose certificates are kept */
#define LEAF_KEEP_S 86400         /* and for how long */
#define LEAF_DAYS 7
#define CA_DAYS 3650

struct leaf {
	char host[256];
	SSL_CTX *ctx;
	time_t made;
};

struct ca {
	X509 *cert;
	EVP_PKEY *key, *leaf_key; /* one key for every leaf, made at open */
	char *pem;
	char id[65];
	pthread_mutex_t mu;
	struct leaf leaves[LEAVES];
	unsigned next;
};

static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX v;
	X509V3_set_ctx_nodb(&v);
	X509V3_set_ctx(&v, issuer, cert, NULL, NULL, 0);
	X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v, nid, value);
	int ok = e && X509_add_ext(cert, e, -1);
	X509_EXTENSION_free(e);
	return ok ? 0 : -1;
}

/* A v3 certificate for subject name cn with key, valid from a day ago
 * for days, and a random serial. Signed later. */
static X509 *new_cert(const char *cn, EVP_PKEY *key, int days)
{
	X509 *x = X509_new();
	unsigned char serial[16];
	BIGNUM *bn = NULL;
	if (!x || RAND_bytes(serial, sizeof(serial)) != 1)
		goto fail;
	serial[0] &= 0x7f; /* positive */
	bn = BN_bin2bn(serial, sizeof(serial), NULL);
	X509_NAME *name = X509_get_subject_name(x);
	if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) || !X509_set_version(x, 2) ||
	    !X509_gmtime_adj(X509_getm_notBefore(x), -86400) ||
	    !X509_gmtime_adj(X509_getm_notAfter(x), (long)days * 86400) || !X509_set_pubkey(x, key) ||
	    !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0))
		goto fail;
	BN_free(bn);
	return x;
fail:
	BN_free(bn);
	X509_free(x);
	return NULL;
}

static int make_ca(const char *dir, char *err, size_t errlen)
{
	char cert_path[600], key_path[600], tmp[620];
	snprintf(cert_path, sizeof(cert_path), "%s/ca.pem", dir);
	snprintf(key_path, sizeof(key_path), "%s/ca.key", dir);
	EVP_PKEY *key = EVP_EC_gen("P-256");
	char cn[64];
	snprintf(cn, sizeof(cn), "cpuos egress CA %lld", (long long)time(NULL));
	X509 *x = key ? new_cert(cn, key, CA_DAYS) : NULL;
	int r = -EIO;
	if (!x || !X509_set_issuer_name(x, X509_get_subject_name(x)) ||
	    add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") < 0 ||
	    add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") < 0 ||
	    add_ext(x, x, NID_subject_key_identifier, "hash") < 0 || !X509_sign(x, key, EVP_sha256())) {
		snprintf(err, errlen, "cannot make the egress CA");
		goto out;
	}
	/* The key first, then the certificate: a certificate on disk always
	 * has its key. */
	snprintf(tmp, sizeof(tmp), "%s.tmp", key_path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	int ok = f && PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
	if (f ? fclose(f) != 0 : (fd >= 0 && close(fd) < 0))
		ok = 0;
	if (!ok || rename(tmp, key_path) < 0) {
		snprintf(err, errlen, "cannot write %s: %s", key_path, strerror(errno));
		unlink(tmp);
		goto out;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", cert_path);
	f = fopen(tmp, "we");
	ok = f && PEM_write_X509(f, x);
	if (f && fclose(f) != 0)
		ok = 0;
	if (!ok || rename(tmp, cert_path) < 0) {
		snprintf(err, errlen, "cannot write %s: %s", cert_path, strerror(errno));
		unlink(tmp);
		goto out;
	}
	r = 0;
out:
	X509_free(x);
	EVP_PKEY_free(key);
	return r;
}

static int load(struct ca *ca, const char *dir, char *err, size_t errlen)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/ca.pem", dir);
	FILE *f = fopen(path, "re");
	ca->cert = f ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "%s/ca.key", dir);
	f = fopen(path, "re");
	ca->key = f ? PEM_read_PrivateKey(f, NULL, NULL, NULL) : NULL;
	if (f)
		fclose(f);
	if (!ca->cert || !ca->key || X509_check_private_key(ca->cert, ca->key) != 1) {
		snprintf(err, errlen, "the egress CA in %s does not load (remove the directory "
				      "to make a new one)", dir);
		return -EIO;
	}
	BIO *b = BIO_new(BIO_s_mem());
	char *data;
	long n = b && PEM_write_bio_X509(b, ca->cert) ? BIO_get_mem_data(b, &data) : 0;
	ca->pem = n > 0 ? strndup(data, (size_t)n) : NULL;
	BIO_free(b);
	unsigned char md[32];
	unsigned mdlen = 0;
	if (!ca->pem || !X509_digest(ca->cert, EVP_sha256(), md, &mdlen) || mdlen != 32)
		return -ENOMEM;
	for (unsigned i = 0; i < 32; i++)
		snprintf(ca->id + 2 * i, 3, "%02x", md[i]);
	return 0;
}

int ca_open(const char *dir, struct ca **out, char *err, size_t errlen)
{
	struct ca *ca = calloc(1, sizeof(*ca));
	if (!ca)
		return -ENOMEM;
	pthread_mutex_init(&ca->mu, NULL);
	char path[600];
	snprintf(path, sizeof(path), "%s/ca.pem", dir);
	int r = fs_mkdir_p(dir, 0700, (uid_t)-1, (gid_t)-1), lock = -1;
	if (r < 0)
		snprintf(err, errlen, "cannot make %s: %s", dir, strerror(-r));
	/* Daemons sharing a cache may start at once: one makes it, all load
	 * that one. */
	char lock_path[600];
	snprintf(lock_path, sizeof(lock_path), "%s/lock", dir);
	if (r == 0 && ((lock = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0 ||
		       flock(lock, LOCK_EX) < 0)) {
		r = -errno;
		snprintf(err, errlen, "cannot lock %s: %s", lock_path, strerror(errno));
	}
	if (r == 0 && access(path, F_OK) < 0)
		r = make_ca(dir, err, errlen);
	if (r == 0)
		r = load(ca, dir, err, errlen);
	if (lock >= 0)
		close(lock);
	if (r == 0 && !(ca->leaf_key = EVP_EC_gen("P-256"))) {
		snprintf(err, errlen, "cannot make a key");
		r = -EIO;
	}
	if (r < 0) {
		ca_close(ca);
		return r;
	}
	*out = ca;
	return 0;
}

void ca_close(struct ca *ca)
{
	if (!ca)
		return;
	for (int i = 0; i < LEAVES; i++)
		SSL_CTX_free(ca->leaves[i].ctx);
	X509_free(ca->cert);
	EVP_PKEY_free(ca->key);
	EVP_PKEY_free(ca->leaf_key);
	free(ca->pem);
	pthread_mutex_destroy(&ca->mu);
	free(ca);
}

const char *ca_pem(const struct ca *ca)
{
	return ca->pem;
}

const char *ca_id(const struct ca *ca)
{
	return ca->id;
}

/* Only HTTP/1.1 is spoken through the proxy: it reads request heads. */
static int pick_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		     const unsigned char *in, unsigned inlen, void *arg)
{
	(void)ssl;
	(void)arg;
	static const unsigned char h1[] = "\x08http/1.1";
	unsigned char *sel;
	if (SSL_select_next_proto(&sel, outlen, h1, sizeof(h1) - 1, in, inlen) !=
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK;
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

static SSL_CTX *make_leaf(struct ca *ca, const char *host)
{
	char san[300];
	snprintf(san, sizeof(san), "DNS:%s", host);
	X509 *x = new_cert(host, ca->leaf_key, LEAF_DAYS);
	SSL_CTX *ctx = NULL;
	if (!x || !X509_set_issuer_name(x, X509_get_subject_name(ca->cert)) ||
	    add_ext(x, ca->cert, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
	    add_ext(x, ca->cert, NID_key_usage, "critical,digitalSignature") < 0 ||
	    add_ext(x, ca->cert, NID_ext_key_usage, "serverAuth") < 0 ||
	    add_ext(x, ca->cert, NID_subject_alt_name, san) < 0 ||
	    add_ext(x, ca->cert, NID_subject_key_identifier, "hash") < 0 ||
	    add_ext(x, ca->cert, NID_authority_key_identifier, "keyid:always") < 0 ||
	    !X509_sign(x, ca->key, EVP_sha256()))
		goto out;
	ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx || !SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) ||
	    SSL_CTX_use_certificate(ctx, x) != 1 || SSL_CTX_use_PrivateKey(ctx, ca->leaf_key) != 1 ||
	    SSL_CTX_add1_chain_cert(ctx, ca->cert) != 1) {
		SSL_CTX_free(ctx);
		ctx = NULL;
		goto out;
	}
	SSL_CTX_set_alpn_select_cb(ctx, pick_alpn, NULL);
out:
	X509_free(x);
	return ctx;
}

SSL_CTX *ca_server_ctx(struct ca *ca, const char *host)
{
	time_t now = time(NULL);
	pthread_mutex_lock(&ca->mu);
	SSL_CTX *ctx = NULL;
	for (int i = 0; i < LEAVES && !ctx; i++) {
		struct leaf *l = &ca->leaves[i];
		if (l->ctx && !strcmp(l->host, host) && now - l->made < LEAF_KEEP_S)
			ctx = l->ctx;
	}
	if (!ctx && (ctx = make_leaf(ca, host))) {
		struct leaf *l = &ca->leaves[ca->next++ % LEAVES];
		SSL_CTX_free(l->ctx);
		snprintf(l->host, sizeof(l->host), "%s", host);
		l->ctx = ctx;
		l->made = now;
	}
	if (ctx)
		SSL_CTX_up_ref(ctx);
	pthread_mutex_unlock(&ca->mu);
	return ctx;
}
