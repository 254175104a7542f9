/*
 * pull: an image from an OCI registry (the distribution API, v2) into an
 * OCI image layout, which image_import then checks and unpacks as any
 * other. The registry is another party, hostile as an image is: https
 * only unless insecure is set, redirects bounded (to http and https only),
 * every body bounded (a manifest to MAX_MANIFEST, a blob to the image's
 * limit), every blob checked against its digest and size as it arrives.
 * Authentication as registries ask for it in WWW-Authenticate: Basic with
 * the credentials given, or Bearer, a token from the realm named (with
 * the credentials, or anonymous), as Docker Hub does.
 */
#include "image/image.h"
#include "image/image_impl.h"

#include "common/errbuf.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_MANIFEST (4 << 20)
#define MAX_TOKEN    (64 << 10)
#define MAX_LAYERS   256
#define DEFAULT_MAX  (4ULL << 30)
#define ACCEPT                                                                                      \
	"Accept: application/vnd.oci.image.index.v1+json, "                                          \
	"application/vnd.oci.image.manifest.v1+json, "                                               \
	"application/vnd.docker.distribution.manifest.list.v2+json, "                                \
	"application/vnd.docker.distribution.manifest.v2+json"

struct ref {
	char host[440], repo[440], tag[440]; /* tag: a tag or "sha256:<hex>" */
};

struct pull {
	struct ref ref;
	const struct image_pull_opts *o;
	char base[300];  /* scheme://host */
	char auth[MAX_TOKEN + 32]; /* the Authorization header, or "" */
	int tried_auth;
	char refused[80]; /* the address a public_only pull would not reach */
	char *err;
	size_t errlen;
};

/* The distribution spec's grammar. A host: labels of letters, digits
 * and inner '-', joined by '.', and a port. */
static int host_ok(const char *h)
{
	const char *colon = strchr(h, ':');
	size_t n = colon ? (size_t)(colon - h) : strlen(h);
	if (!n || n > 253 || (colon && (!colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1) ||
					 strlen(colon + 1) > 5)))
		return 0;
	for (size_t i = 0, label = 0; i <= n; i++) {
		char c = i < n ? h[i] : '.';
		if (c == '.') {
			if (!label || h[i - 1] == '-')
				return 0;
			label = 0;
		} else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			   (c == '-' && label)) {
			label++;
		} else {
			return 0;
		}
	}
	return 1;
}

/* A repository: components of [a-z0-9] runs joined by '.', '_', "__" or
 * dashes, separated by '/'. */
static int component_ok(const char *c, size_t n)
{
	size_t i = 0;
	for (;;) {
		size_t run = i;
		while (i < n && ((c[i] >= 'a' && c[i] <= 'z') || (c[i] >= '0' && c[i] <= '9')))
			i++;
		if (i == run)
			return 0;
		if (i == n)
			return 1;
		if (c[i] == '.')
			i++;
		else if (c[i] == '_')
			i += i + 1 < n && c[i + 1] == '_' ? 2 : 1;
		else if (c[i] == '-')
			while (i < n && c[i] == '-')
				i++;
		else
			return 0;
	}
}

static int repo_ok(const char *r)
{
	for (;;) {
		size_t n = strcspn(r, "/");
		if (!component_ok(r, n))
			return 0;
		if (!r[n])
			return 1;
		r += n + 1;
	}
}

/* A tag: a word character, then up to 127 of them, '.' and '-'; or a
 * digest (sha256:, 64 hex). */
static int tag_ok(const char *t)
{
	if (!strncmp(t, "sha256:", 7))
		return strlen(t + 7) == 64 && strspn(t + 7, "0123456789abcdef") == 64;
	size_t n = strlen(t);
	return n && n <= 128 && t[0] != '.' && t[0] != '-' &&
	       strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == n;
}

/* [host/]repo[:tag][@sha256:...]; Docker Hub's names as docker takes them. */
static int parse_ref(const char *s, struct ref *r)
{
	memset(r, 0, sizeof(*r));
	if (!*s || strlen(s) > 400)
		return -EINVAL;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      strchr("._-/:@", *p)))
			return -EINVAL;
	char buf[420];
	snprintf(buf, sizeof(buf), "%s", s);
	char *at = strchr(buf, '@');
	if (at) {
		*at = '\0';
		if (strncmp(at + 1, "sha256:", 7) || strlen(at + 8) != 64)
			return -EINVAL;
		snprintf(r->tag, sizeof(r->tag), "%s", at + 1);
	}
	char *name = buf, *slash = strchr(buf, '/');
	if (slash && (memchr(buf, '.', (size_t)(slash - buf)) || memchr(buf, ':', (size_t)(slash - buf)) ||
		      !strncmp(buf, "localhost/", 10))) {
		*slash = '\0';
		snprintf(r->host, sizeof(r->host), "%s", buf);
		name = slash + 1;
	} else {
		snprintf(r->host, sizeof(r->host), "registry-1.docker.io");
	}
	char *colon = strrchr(name, ':');
	if (colon) {
		if (!colon[1])
			return -EINVAL;
		*colon = '\0';
		if (!r->tag[0])
			snprintf(r->tag, sizeof(r->tag), "%s", colon + 1);
	}
	if (!r->tag[0])
		snprintf(r->tag, sizeof(r->tag), "latest");
	if (!host_ok(r->host) || !repo_ok(name) || !tag_ok(r->tag))
		return -EINVAL;
	if (!strcmp(r->host, "registry-1.docker.io") && !strchr(name, '/'))
		snprintf(r->repo, sizeof(r->repo), "library/%s", name);
	else
		snprintf(r->repo, sizeof(r->repo), "%s", name);
	return 0;
}

/* ---- one HTTP exchange ---- */

struct body {
	CURL *curl;         /* the transfer, while it runs */
	char *p;            /* in memory (a manifest, a token), or NULL */
	size_t len, max;
	int fd;             /* or to a file */
	unsigned long long got, fmax;
	EVP_MD_CTX *md;
	int over;
	char www[1024];     /* WWW-Authenticate */
	char type[160];     /* Content-Type */
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct body *b = arg;
	size_t len = size * n;
	if (b->fd >= 0) {
		/* Only a 200's body is the blob: a 401's or a redirect's is not
		 * counted, hashed or kept. */
		long status = 0;
		curl_easy_getinfo(b->curl, CURLINFO_RESPONSE_CODE, &status);
		if (status != 200)
			return len;
		if (b->got + len > b->fmax) {
			b->over = 1;
			return 0;
		}
		for (size_t off = 0; off < len;) {
			ssize_t w = write(b->fd, p + off, len - off);
			if (w <= 0)
				return 0;
			off += (size_t)w;
		}
		if (b->md)
			EVP_DigestUpdate(b->md, p, len);
		b->got += len;
		return len;
	}
	if (b->len + len > b->max) {
		b->over = 1;
		return 0;
	}
	char *q = realloc(b->p, b->len + len + 1);
	if (!q)
		return 0;
	memcpy(q + b->len, p, len);
	b->p = q;
	b->len += len;
	b->p[b->len] = '\0';
	return len;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	struct body *b = arg;
	size_t len = size * n;
	if (len > 17 && !strncasecmp(p, "WWW-Authenticate:", 17))
		snprintf(b->www, sizeof(b->www), "%.*s", (int)(len - 17), p + 17);
	else if (len > 13 && !strncasecmp(p, "Content-Type:", 13))
		snprintf(b->type, sizeof(b->type), "%.*s", (int)(len - 13), p + 13);
	return len;
}

static int inward4(const unsigned char *a)
{
	return a[0] == 127 || a[0] == 0 || a[0] == 10 || (a[0] == 172 && (a[1] & 0xf0) == 16) ||
	       (a[0] == 192 && a[1] == 168) || (a[0] == 169 && a[1] == 254) ||
	       (a[0] == 100 && (a[1] & 0xc0) == 64) || (a[0] == 192 && a[1] == 0 && a[2] == 0) ||
	       (a[0] == 198 && (a[1] & 0xfe) == 18) || a[0] >= 224;
}

int image__inward(const char *ip)
{
	unsigned char a[16];
	if (inet_pton(AF_INET, ip, a) == 1)
		return inward4(a);
	if (inet_pton(AF_INET6, ip, a) != 1)
		return 1; /* what is no address is refused too */
	/* v4 inside v6: mapped (::ffff:0:0/96), NAT64 (64:ff9b::/96), 6to4
	 * (2002::/16, its v4 in bytes 2-5); compatible (::/96) is refused whole. */
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	static const unsigned char nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };
	static const unsigned char zero[12] = { 0 };
	if (!memcmp(a, mapped, 12) || !memcmp(a, nat64, 12))
		return inward4(a + 12);
	if (a[0] == 0x20 && a[1] == 0x02)
		return inward4(a + 2);
	return !memcmp(a, zero, 12) || (a[0] & 0xfe) == 0xfc || (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) ||
	       a[0] == 0xff;
}

/* Before each request, on its connection: a pull on an account's behalf
 * (public_only) never reaches the host's own services or its private
 * networks, whatever name, redirect or token realm led there. */
static int on_connected(void *arg, char *ip, char *local, int port, int lport)
{
	struct pull *pl = arg;
	(void)local;
	(void)lport;
	if (!pl->o->public_only || !image__inward(ip))
		return CURL_PREREQFUNC_OK;
	snprintf(pl->refused, sizeof(pl->refused), "%s port %d", ip, port);
	return CURL_PREREQFUNC_ABORT;
}

/* The caller's word to stop (its cancel flag set): a transfer ends. */
static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	const struct pull *pl = arg;
	(void)dt;
	(void)dn;
	(void)ut;
	(void)un;
	return pl->o->cancel && __atomic_load_n(pl->o->cancel, __ATOMIC_RELAXED);
}

/* GET url into b with headers: the HTTP status, or -errno with err set. */
static long get(struct pull *pl, const char *url, const char *auth, const char *accept,
		struct body *b)
{
	CURL *c = curl_easy_init();
	if (!c)
		return errbuf_set(pl->err, pl->errlen, -ENOMEM, "out of memory");
	struct curl_slist *h = NULL;
	if (accept)
		h = curl_slist_append(h, accept);
	if (auth && *auth)
		h = curl_slist_append(h, auth);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
	b->curl = c;
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, b);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
	/* A registry's blob may redirect to its storage: http and https only,
	 * and http only where the user said the registry may be plain. */
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, pl->o->insecure ? "http,https" : "https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, pl->o->insecure ? "http,https" : "https");
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "cpuos");
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, pl);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_PREREQFUNCTION, on_connected);
	curl_easy_setopt(c, CURLOPT_PREREQDATA, pl);
	pl->refused[0] = '\0';
	CURLcode rc = curl_easy_perform(c);
	long status = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	b->curl = NULL;
	if (b->over)
		return errbuf_set(pl->err, pl->errlen, -EFBIG, "the registry sent more than the limit for %s",
				  url);
	if (rc == CURLE_ABORTED_BY_CALLBACK && !pl->refused[0])
		return errbuf_set(pl->err, pl->errlen, -ECANCELED, "the pull was stopped");
	if (pl->refused[0])
		return errbuf_set(pl->err, pl->errlen, -EACCES,
				  "%s is at %s, an address of this host or a private network: not "
				  "pulled from (a registry the daemon's --insecure-registry names may be)",
				  url, pl->refused);
	if (rc != CURLE_OK)
		return errbuf_set(pl->err, pl->errlen, -EIO, "cannot reach %s: %s", url,
				  curl_easy_strerror(rc));
	return status;
}

/* A parameter of a WWW-Authenticate challenge: key="value". */
static int param(const char *www, const char *key, char *out, size_t n)
{
	size_t k = strlen(key);
	for (const char *p = www; (p = strstr(p, key)); p += k) {
		if ((p != www && p[-1] != ' ' && p[-1] != ',') || p[k] != '=' || p[k + 1] != '"')
			continue;
		const char *v = p + k + 2, *end = strchr(v, '"');
		if (!end || (size_t)(end - v) >= n)
			return -1;
		snprintf(out, n, "%.*s", (int)(end - v), v);
		return 0;
	}
	return -1;
}

/* The credentials as "user:password", base64. */
static void basic(const struct image_pull_opts *o, char *out, size_t n)
{
	char raw[600];
	int len = snprintf(raw, sizeof(raw), "%s:%s", o->username ? o->username : "",
			   o->password ? o->password : "");
	unsigned char enc[900];
	EVP_EncodeBlock(enc, (const unsigned char *)raw, len < (int)sizeof(raw) ? len : 0);
	snprintf(out, n, "%s", (char *)enc);
}

/* Answers a 401's challenge: 0 with pl->auth set, or -errno. */
static int authenticate(struct pull *pl, const char *www)
{
	if (pl->tried_auth++)
		return errbuf_set(pl->err, pl->errlen, -EACCES,
				  "the registry %s refused the credentials%s", pl->ref.host,
				  pl->o->username ? "" : " (none were given)");
	while (*www == ' ')
		www++;
	char creds[900];
	if (!strncasecmp(www, "Basic", 5)) {
		if (!pl->o->username)
			return errbuf_set(pl->err, pl->errlen, -EACCES,
					  "the registry %s wants a user name and password", pl->ref.host);
		basic(pl->o, creds, sizeof(creds));
		snprintf(pl->auth, sizeof(pl->auth), "Authorization: Basic %s", creds);
		return 0;
	}
	char realm[512], service[256] = "", scope[480] = "";
	if (strncasecmp(www, "Bearer", 6) || param(www, "realm", realm, sizeof(realm)) < 0)
		return errbuf_set(pl->err, pl->errlen, -EPROTO,
				  "the registry %s asks for an authentication cpuos does not speak", pl->ref.host);
	param(www, "service", service, sizeof(service));
	if (param(www, "scope", scope, sizeof(scope)) < 0)
		snprintf(scope, sizeof(scope), "repository:%s:pull", pl->ref.repo);
	CURL *c = curl_easy_init();
	char *es = c ? curl_easy_escape(c, service, 0) : NULL, *eq = c ? curl_easy_escape(c, scope, 0) : NULL;
	char url[1600];
	snprintf(url, sizeof(url), "%s%sservice=%s&scope=%s", realm, strchr(realm, '?') ? "&" : "?",
		 es ? es : "", eq ? eq : "");
	curl_free(es);
	curl_free(eq);
	if (c)
		curl_easy_cleanup(c);
	char hdr[1000] = "";
	if (pl->o->username) {
		basic(pl->o, creds, sizeof(creds));
		snprintf(hdr, sizeof(hdr), "Authorization: Basic %s", creds);
	}
	struct body b = { .fd = -1, .max = MAX_TOKEN };
	long st = get(pl, url, hdr, NULL, &b);
	json_t *j = st == 200 && b.p ? json_loads(b.p, 0, NULL) : NULL;
	free(b.p);
	const char *tok = json_string_value(json_object_get(j, "token"));
	if (!tok)
		tok = json_string_value(json_object_get(j, "access_token"));
	int r = 0;
	if (st < 0)
		r = (int)st;
	else if (!tok || !*tok || strlen(tok) > MAX_TOKEN || strpbrk(tok, "\r\n"))
		r = errbuf_set(pl->err, pl->errlen, -EACCES, "the registry's token service %s refused (%ld)",
			       realm, st);
	else
		snprintf(pl->auth, sizeof(pl->auth), "Authorization: Bearer %s", tok);
	json_decref(j);
	return r;
}

/* GET path of the registry (/v2/...), authenticating as asked. */
static long reg_get(struct pull *pl, const char *path, const char *accept, struct body *b)
{
	char url[1200];
	snprintf(url, sizeof(url), "%s%s", pl->base, path);
	/* A token may run out during a long pull: a 401 gets one new one,
	 * each request; a 401 right after it is a refusal. */
	pl->tried_auth = 0;
	for (;;) {
		long st = get(pl, url, pl->auth, accept, b);
		if (st != 401)
			return st;
		char www[sizeof(b->www)];
		snprintf(www, sizeof(www), "%s", b->www);
		/* Start the body again. */
		free(b->p);
		b->p = NULL;
		b->len = 0;
		b->www[0] = '\0';
		if (b->fd >= 0 && (ftruncate(b->fd, 0) < 0 || lseek(b->fd, 0, SEEK_SET) < 0))
			return -EIO;
		b->got = 0;
		if (b->md)
			EVP_DigestInit_ex(b->md, EVP_sha256(), NULL);
		int r = authenticate(pl, www);
		if (r < 0)
			return r;
	}
}

static void hex_of(EVP_MD_CTX *md, char hex[65])
{
	unsigned char d[32];
	unsigned n = 0;
	EVP_DigestFinal_ex(md, d, &n);
	for (int i = 0; i < 32; i++)
		sprintf(hex + 2 * i, "%02x", d[i]);
}

static int write_blob(int blobs, const char *hex, const void *p, size_t n)
{
	int fd = openat(blobs, hex, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -errno;
	int r = fchmod(fd, 0644) == 0 && write(fd, p, n) == (ssize_t)n ? 0 : -EIO;
	close(fd);
	return r;
}

/* A manifest (or index) by tag or digest: its body in *out, its sha256 in hex. */
static int get_manifest(struct pull *pl, const char *ref, int blobs, json_t **out, char hex[65])
{
	char path[700];
	snprintf(path, sizeof(path), "/v2/%s/manifests/%s", pl->ref.repo, ref);
	struct body b = { .fd = -1, .max = MAX_MANIFEST };
	long st = reg_get(pl, path, ACCEPT, &b);
	if (st != 200) {
		free(b.p);
		if (st < 0)
			return (int)st;
		return errbuf_set(pl->err, pl->errlen, st == 404 ? -ENOENT : -EIO,
				  "the registry %s has no manifest %s:%s (HTTP %ld)", pl->ref.host,
				  pl->ref.repo, ref, st);
	}
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	EVP_DigestUpdate(md, b.p ? b.p : "", b.len);
	hex_of(md, hex);
	EVP_MD_CTX_free(md);
	if (!strncmp(ref, "sha256:", 7) && strcmp(ref + 7, hex)) {
		free(b.p);
		return errbuf_set(pl->err, pl->errlen, -EINVAL,
				  "the registry sent a manifest whose digest is not %.19s...", ref);
	}
	*out = b.p ? json_loadb(b.p, b.len, 0, NULL) : NULL;
	int r = *out && json_is_object(*out) ? write_blob(blobs, hex, b.p, b.len) : -EINVAL;
	free(b.p);
	if (r == -EINVAL)
		return errbuf_set(pl->err, pl->errlen, -EINVAL, "the registry sent a manifest that is not JSON");
	return r < 0 ? errbuf_set(pl->err, pl->errlen, r, "cannot keep the manifest: %s", strerror(-r)) : 0;
}

/* A blob of a descriptor, checked against its digest and size as it comes. */
static int get_blob(struct pull *pl, json_t *desc, int blobs, unsigned long long *budget)
{
	const char *digest = json_string_value(json_object_get(desc, "digest"));
	json_int_t size = json_integer_value(json_object_get(desc, "size"));
	if (!digest || strncmp(digest, "sha256:", 7) || strlen(digest) != 71 || strspn(digest + 7, "0123456789abcdef") != 64 ||
	    size < 0)
		return errbuf_set(pl->err, pl->errlen, -EINVAL, "a descriptor has no sha256 digest and size");
	if ((unsigned long long)size > *budget)
		return errbuf_set(pl->err, pl->errlen, -EFBIG, "the image is larger than the limit");
	*budget -= (unsigned long long)size;
	char path[700];
	snprintf(path, sizeof(path), "/v2/%s/blobs/%s", pl->ref.repo, digest);
	int fd = openat(blobs, digest + 7, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd >= 0 && fchmod(fd, 0644) < 0) {
		close(fd);
		fd = -1;
	}
	if (fd < 0)
		return errbuf_set(pl->err, pl->errlen, -errno, "cannot write a blob: %s", strerror(errno));
	struct body b = { .fd = fd, .fmax = (unsigned long long)size, .md = EVP_MD_CTX_new() };
	EVP_DigestInit_ex(b.md, EVP_sha256(), NULL);
	long st = reg_get(pl, path, NULL, &b);
	close(fd);
	char hex[65];
	hex_of(b.md, hex);
	EVP_MD_CTX_free(b.md);
	if (st == -EFBIG)
		return errbuf_set(pl->err, pl->errlen, -EINVAL, "the registry sent more than %lld bytes for %.19s...",
				  (long long)size, digest);
	if (st < 0)
		return (int)st;
	if (st != 200)
		return errbuf_set(pl->err, pl->errlen, -EIO, "the registry has no blob %.19s... (HTTP %ld)",
				  digest, st);
	if (b.got != (unsigned long long)size || strcmp(hex, digest + 7))
		return errbuf_set(pl->err, pl->errlen, -EINVAL,
				  "the blob %.19s... that came is not it (%llu bytes, sha256:%.12s...)", digest,
				  b.got, hex);
	return 0;
}

static int platform_ok(json_t *d)
{
	json_t *p = json_object_get(d, "platform");
	const char *os = json_string_value(json_object_get(p, "os"));
	const char *arch = json_string_value(json_object_get(p, "architecture"));
	return (!os || !strcmp(os, "linux")) && (!arch || !strcmp(arch, "amd64"));
}

int image_pull(const char *reference, const char *layout, const struct image_pull_opts *o,
	       char *err, size_t errlen)
{
	struct pull *pl = calloc(1, sizeof(*pl));
	if (!pl)
		return errbuf_set(err, errlen, -ENOMEM, "out of memory");
	pl->o = o;
	pl->err = err;
	pl->errlen = errlen;
	int r;
	if (parse_ref(reference, &pl->ref) < 0) {
		r = errbuf_set(err, errlen, -EINVAL, "'%s' is not an image reference ([HOST/]NAME[:TAG][@sha256:...])",
			       reference);
		goto out;
	}
	snprintf(pl->base, sizeof(pl->base), "%s://%s", o->insecure ? "http" : "https", pl->ref.host);
	char bpath[PATH_MAX], mid[PATH_MAX];
	snprintf(bpath, sizeof(bpath), "%s/blobs/sha256", layout);
	snprintf(mid, sizeof(mid), "%s/blobs", layout);
	int blobs = -1;
	/* Open to others, whatever the umask: the import reads it as an
	 * unprivileged id of its own namespace. */
	if (mkdir(layout, 0755) < 0 || chmod(layout, 0755) < 0 || mkdir(mid, 0755) < 0 ||
	    chmod(mid, 0755) < 0 || mkdir(bpath, 0755) < 0 || chmod(bpath, 0755) < 0 ||
	    (blobs = open(bpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		r = errbuf_set(err, errlen, -errno, "cannot make '%s': %s", layout, strerror(errno));
		goto out;
	}
	json_t *m = NULL;
	char hex[65];
	if ((r = get_manifest(pl, pl->ref.tag, blobs, &m, hex)) < 0)
		goto done;
	if (json_object_get(m, "manifests")) { /* an index: linux/amd64's */
		size_t i;
		json_t *d, *pick = NULL;
		json_array_foreach(json_object_get(m, "manifests"), i, d) {
			if (!pick && platform_ok(d))
				pick = d;
		}
		const char *dg = json_string_value(json_object_get(pick, "digest"));
		if (!dg || strncmp(dg, "sha256:", 7) || strlen(dg) != 71) {
			r = errbuf_set(err, errlen, -EINVAL, "%s has no linux/amd64 image", reference);
			goto done;
		}
		char want[72];
		snprintf(want, sizeof(want), "%s", dg);
		json_decref(m);
		m = NULL;
		if ((r = get_manifest(pl, want, blobs, &m, hex)) < 0)
			goto done;
	}
	json_t *layers = json_object_get(m, "layers");
	if (!json_is_object(json_object_get(m, "config")) || !json_is_array(layers) ||
	    json_array_size(layers) > MAX_LAYERS) {
		r = errbuf_set(err, errlen, -EINVAL, "the manifest of %s has no config or layers", reference);
		goto done;
	}
	unsigned long long budget = o->max_bytes ? o->max_bytes : DEFAULT_MAX;
	if ((r = get_blob(pl, json_object_get(m, "config"), blobs, &budget)) < 0)
		goto done;
	size_t i;
	json_t *l;
	json_array_foreach(layers, i, l) {
		if ((r = get_blob(pl, l, blobs, &budget)) < 0)
			goto done;
	}
	/* The layout's index: the one manifest, with its platform. */
	char path[PATH_MAX + 96];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", bpath, hex);
	json_t *index = json_pack("{s:i,s:[{s:s,s:s+,s:I,s:{s:s,s:s}}]}", "schemaVersion", 2, "manifests",
				  "mediaType", "application/vnd.oci.image.manifest.v1+json", "digest",
				  "sha256:", hex, "size", (json_int_t)(stat(path, &st) == 0 ? st.st_size : 0),
				  "platform", "os", "linux", "architecture", "amd64");
	snprintf(path, sizeof(path), "%s/index.json", layout);
	if (!index || json_dump_file(index, path, 0) < 0 || chmod(path, 0644) < 0)
		r = errbuf_set(err, errlen, -EIO, "cannot write '%s'", path);
	json_decref(index);
done:
	json_decref(m);
	if (blobs >= 0)
		close(blobs);
out:
	free(pl);
	return r;
}
