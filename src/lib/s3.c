/*
 * s3: requests to an S3-compatible store over libcurl; see s3.h. One
 * request is a struct req (s3_impl.h): where its body comes from (a file
 * range or memory), where the answer goes (a file, memory, or the error
 * buffer) and the hashes fed on the way. s3__call() runs it with the
 * retries. The transfers built on it are in s3_xfer.c.
 */
#include "lib/s3_impl.h"

#include "common/errbuf.h"
#include "common/fs.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_ALL);
}

int s3_key_ok(const char *key)
{
	size_t n = key ? strlen(key) : 0;
	if (n == 0 || n > S3_KEY_MAX || key[0] == '/' || key[n - 1] == '/')
		return 0;
	const char *seg = key;
	for (size_t i = 0; i <= n; i++) {
		char ch = key[i];
		if (ch == '/' || ch == '\0') {
			size_t len = (size_t)(key + i - seg);
			if (len == 0 || (len == 1 && seg[0] == '.') ||
			    (len == 2 && seg[0] == '.' && seg[1] == '.'))
				return 0;
			seg = key + i + 1;
			continue;
		}
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
			return 0;
	}
	return 1;
}

static int bucket_ok(const char *b)
{
	size_t n = strlen(b);
	if (n < 3 || n > 63 || b[0] == '.' || b[0] == '-' || b[n - 1] == '.' || b[n - 1] == '-')
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '.' ||
		      b[i] == '-'))
			return 0;
	return 1;
}

/* http[s]://host[:port]: a host of [A-Za-z0-9.-] or a bracketed IPv6
 * address, no user, path, query or fragment. */
static int endpoint_ok(const char *e)
{
	const char *h = !strncmp(e, "http://", 7) ? e + 7 : !strncmp(e, "https://", 8) ? e + 8 : NULL;
	if (!h || !*h)
		return 0;
	if (*h == '[') {
		const char *end = strchr(h, ']');
		if (!end || end == h + 1 || strspn(h + 1, "0123456789abcdefABCDEF:.") != (size_t)(end - h - 1))
			return 0;
		h = end + 1;
	} else {
		size_t n = strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-");
		if (n == 0)
			return 0;
		h += n;
	}
	if (*h == ':') {
		size_t n = strspn(h + 1, "0123456789");
		if (n == 0 || n > 5 || atoi(h + 1) > 65535)
			return 0;
		h += 1 + n;
	}
	return *h == '\0';
}

int s3__text_ok(const char *s, size_t min)
{
	size_t n = strlen(s);
	if (n < min)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x21 || s[i] > 0x7e)
			return 0;
	return 1;
}

int s3_open(struct s3 **out, const struct s3_conf *c, char *err, size_t errlen)
{
	*out = NULL;
	if (!endpoint_ok(c->endpoint))
		return errbuf_set(err, errlen, -EINVAL,
				  "object store: endpoint '%.64s' is not http[s]://host[:port]",
				  c->endpoint);
	if (!bucket_ok(c->bucket))
		return errbuf_set(err, errlen, -EINVAL,
				  "object store: bucket '%.64s' is not 3 to 63 of a-z, 0-9, '.' and '-'",
				  c->bucket);
	if (!s3__text_ok(c->region, 1) || strchr(c->region, ':') || strlen(c->region) > 32)
		return errbuf_set(err, errlen, -EINVAL, "object store: region '%.32s' is not valid",
				  c->region);
	if (!s3__text_ok(c->access_key, 1) || !s3__text_ok(c->secret_key, 1))
		return errbuf_set(err, errlen, -EINVAL,
				  "object store: the access key and secret must be printable and not empty");
	if (c->part_size && c->part_size < S3_PART_MIN)
		return errbuf_set(err, errlen, -EINVAL, "object store: a part is at least %llu bytes",
				  (unsigned long long)S3_PART_MIN);
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK)
		return errbuf_set(err, errlen, -EIO, "object store: libcurl: %s",
				  curl_easy_strerror(curl_init_rc));
	struct s3 *s = calloc(1, sizeof(*s));
	if (!s || !(s->h = curl_easy_init())) {
		free(s);
		return errbuf_set(err, errlen, -ENOMEM, "object store: out of memory");
	}
	s->c = *c;
	if (!s->c.part_size)
		s->c.part_size = S3_PART_SIZE;
	snprintf(s->sigv4, sizeof(s->sigv4), "aws:amz:%s:s3", c->region);
	*out = s;
	return 0;
}

void s3_close(struct s3 *s)
{
	if (!s)
		return;
	curl_easy_cleanup(s->h);
	explicit_bzero(s->c.secret_key, sizeof(s->c.secret_key));
	free(s);
}

static size_t on_read(char *p, size_t size, size_t nmemb, void *arg)
{
	struct req *r = arg;
	size_t want = size * nmemb;
	uint64_t left = r->in_len - r->in_done;
	if (want > left)
		want = (size_t)left;
	if (want == 0)
		return 0;
	if (r->in_mem) {
		memcpy(p, r->in_mem + r->in_done, want);
	} else {
		ssize_t n = pread(r->in_fd, p, want, (off_t)(r->in_off + r->in_done));
		if (n <= 0) { /* the file shrank under us, or cannot be read */
			r->write_err = n < 0 ? errno : EIO;
			return CURL_READFUNC_ABORT;
		}
		want = (size_t)n;
	}
	if (r->in_hash)
		EVP_DigestUpdate(r->in_hash, p, want);
	r->in_done += want;
	return want;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *arg)
{
	struct req *r = arg;
	size_t n = size * nmemb;
	if (r->status < 200 || r->status > 299) {
		/* An error's text: keep what fits, drop the rest. */
		size_t room = ERR_BODY_MAX > r->err.len ? ERR_BODY_MAX - r->err.len : 0;
		if (!room) {
			r->err_over = 1; /* enough to quote: the rest is not waited for */
			return 0;
		}
		buf_add(&r->err, p, n < room ? n : room);
		return n;
	}
	if (r->out_len + n > r->out_limit || r->out_len + n < r->out_len) {
		r->out_over = 1;
		return 0; /* aborts the transfer */
	}
	if (r->out_fd >= 0) {
		int e = fs_pwrite_sparse(r->out_fd, p, n, r->out_len);
		if (e < 0) {
			r->write_err = -e;
			return 0;
		}
	} else if (r->out_mem) {
		if (buf_add(r->out_mem, p, n) < 0) {
			r->out_over = 1;
			return 0;
		}
	} else if (r->sink) {
		int e = r->sink->write(r->sink->arg, p, n);
		if (e < 0) {
			r->write_err = -e;
			return 0;
		}
	}
	if (r->out_hash)
		EVP_DigestUpdate(r->out_hash, p, n);
	r->out_len += n;
	return n;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *arg)
{
	struct req *r = arg;
	size_t n = size * nmemb;
	if (n > 6 && !strncmp(p, "HTTP/", 5)) {
		/* A new answer (after a 100 Continue): forget the last. The
		 * status is needed now: on_write sends an error's body aside. */
		const char *sp = memchr(p, ' ', n);
		r->status = sp && (size_t)(sp - p) + 4 <= n ? strtol(sp + 1, NULL, 10) : 0;
		r->etag[0] = '\0';
		r->length = -1;
		return n;
	}
	const char *colon = memchr(p, ':', n);
	if (!colon)
		return n;
	size_t name = (size_t)(colon - p);
	const char *v = colon + 1, *end = p + n;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
		end--;
	size_t vn = (size_t)(end - v);
	if (name == 4 && !strncasecmp(p, "etag", 4)) {
		r->etag[0] = '\0';
		int ok = vn > 0 && vn < sizeof(r->etag);
		for (size_t i = 0; ok && i < vn; i++)
			ok = v[i] >= 0x21 && v[i] <= 0x7e && v[i] != '<' && v[i] != '>' && v[i] != '&';
		if (ok) {
			memcpy(r->etag, v, vn);
			r->etag[vn] = '\0';
		}
	} else if (name == 14 && !strncasecmp(p, "content-length", 14)) {
		char num[24];
		if (vn > 0 && vn < sizeof(num) && strspn(v, "0123456789") >= vn) {
			memcpy(num, v, vn);
			num[vn] = '\0';
			r->length = strtoll(num, NULL, 10);
		}
	}
	return n;
}

/*
 * The text of the first <tag>...</tag> in xml into out[n]: the five XML
 * entities decoded, any other markup inside refused. 0, -ENOENT when the
 * element is absent, -EBADMSG when its text is not plain or does not fit.
 */
int s3__xml_text(const char *xml, size_t len, const char *tag, char *out, size_t n)
{
	char open[64], close[64];
	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	const char *a = memmem(xml, len, open, strlen(open));
	if (!a)
		return -ENOENT;
	a += strlen(open);
	const char *b = memmem(a, len - (size_t)(a - xml), close, strlen(close));
	if (!b)
		return -EBADMSG;
	static const struct {
		const char *ent;
		char ch;
	} ents[] = { { "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' }, { "&quot;", '"' },
		     { "&apos;", '\'' } };
	size_t o = 0;
	for (const char *p = a; p < b;) {
		char ch = *p;
		if (ch == '<')
			return -EBADMSG;
		if (ch == '&') {
			size_t i;
			for (i = 0; i < sizeof(ents) / sizeof(ents[0]); i++) {
				size_t el = strlen(ents[i].ent);
				if ((size_t)(b - p) >= el && !memcmp(p, ents[i].ent, el)) {
					ch = ents[i].ch;
					p += el;
					break;
				}
			}
			if (i == sizeof(ents) / sizeof(ents[0]))
				return -EBADMSG;
		} else {
			p++;
		}
		if (o + 1 >= n)
			return -EBADMSG;
		out[o++] = ch;
	}
	out[o] = '\0';
	return 0;
}

/* Keeps what an error quotes printable: a store is not trusted. */
void s3__printable(char *s)
{
	for (; *s; s++)
		if (*s < 0x20 || *s > 0x7e)
			*s = '?';
}

void s3__hash_reset(EVP_MD_CTX *h)
{
	if (h)
		EVP_DigestInit_ex(h, EVP_sha256(), NULL);
}

static void hex(const unsigned char *in, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", in[i]);
	out[2 * n] = '\0';
}

void s3__hash_hex(EVP_MD_CTX *h, char out[65])
{
	unsigned char md[32];
	unsigned int mdlen = 0;
	EVP_DigestFinal_ex(h, md, &mdlen);
	hex(md, 32, out);
}

void s3_set_cancel(struct s3 *s, const int *flag)
{
	s->cancel = flag;
}

int s3_cancelled(const struct s3 *s)
{
	return s->cancel && __atomic_load_n(s->cancel, __ATOMIC_RELAXED);
}

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	(void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
	const int *flag = arg;
	return __atomic_load_n(flag, __ATOMIC_RELAXED) != 0;
}

/* One attempt: 0 with r->status set, or a libcurl failure as -EAGAIN
 * (worth another try) / -EFBIG / -errno, with the reason in err. */
static int attempt(struct s3 *s, struct req *r, char *err, size_t errlen)
{
	char url[1024];
	int n = snprintf(url, sizeof(url), "%s/%s%s%s%s%s", s->c.endpoint, s->c.bucket,
			 r->key ? "/" : "", r->key ? r->key : "", r->query[0] ? "?" : "", r->query);
	if (n < 0 || (size_t)n >= sizeof(url))
		return errbuf_set(err, errlen, -EINVAL, "object store: the URL is too long");
	CURL *h = s->h;
	curl_easy_reset(h);
	r->status = 0;
	r->etag[0] = '\0';
	r->length = -1;
	r->in_done = 0;
	r->out_len = 0;
	r->out_over = 0;
	r->write_err = 0;
	r->err.len = 0;
	if (r->err.p)
		r->err.p[0] = '\0';
	r->err_over = 0;
	/* Only headers that are sent: libcurl signs every one in the list,
	 * so an "Expect:" that removes a header would be signed but absent. */
	struct curl_slist *hdrs = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
	if (!hdrs)
		return errbuf_set(err, errlen, -ENOMEM, "object store: out of memory");
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s->sigv4);
	curl_easy_setopt(h, CURLOPT_USERNAME, s->c.access_key);
	curl_easy_setopt(h, CURLOPT_PASSWORD, s->c.secret_key);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
	/* A stalled transfer, not a long one, is a failure. */
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L); /* under 1 KiB/s for 30 s */
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 30L);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
	if (s->cancel) {
		if (__atomic_load_n(s->cancel, __ATOMIC_RELAXED)) {
			curl_slist_free_all(hdrs);
			return errbuf_set(err, errlen, -ECANCELED, "object store: %s %s: cancelled",
					  r->method, r->key ? r->key : s->c.bucket);
		}
		curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)s->cancel);
	}
	if (!strcmp(r->method, "HEAD")) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (!strcmp(r->method, "PUT")) {
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->in_len);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, r);
	} else if (!strcmp(r->method, "POST")) {
		/* curl signs a POST's fields' hash; the header above says
		 * unsigned either way. */
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->in_len);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->in_mem ? r->in_mem : "");
	} else if (strcmp(r->method, "GET")) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
	}
	CURLcode rc = curl_easy_perform(h);
	curl_slist_free_all(hdrs);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
	if (r->out_over)
		return errbuf_set(err, errlen, -EFBIG,
				  "object store: %s %s: the object is larger than %llu bytes", r->method,
				  r->key ? r->key : s->c.bucket, (unsigned long long)r->out_limit);
	if (r->write_err)
		return errbuf_set(err, errlen, -r->write_err, "object store: %s %s: %s", r->method,
				  r->key ? r->key : s->c.bucket, strerror(r->write_err));
	if (rc == CURLE_WRITE_ERROR && r->err_over)
		rc = CURLE_OK; /* the status and the start of its text are what count */
	if (rc == CURLE_ABORTED_BY_CALLBACK)
		return errbuf_set(err, errlen, -ECANCELED, "object store: %s %s: cancelled",
				  r->method, r->key ? r->key : s->c.bucket);
	if (rc != CURLE_OK)
		return errbuf_set(err, errlen, -EAGAIN, "object store: %s %s: %s", r->method,
				  r->key ? r->key : s->c.bucket, curl_easy_strerror(rc));
	return 0;
}

/* Runs r until it gets a 2xx, at most ATTEMPTS times: 0 or -errno. The
 * hashes are rewound to where they stood before each try. */
int s3__call(struct s3 *s, struct req *r, char *err, size_t errlen)
{
	EVP_MD_CTX *in_was = NULL;
	if (r->in_hash && (!(in_was = EVP_MD_CTX_new()) || !EVP_MD_CTX_copy_ex(in_was, r->in_hash))) {
		EVP_MD_CTX_free(in_was);
		return errbuf_set(err, errlen, -ENOMEM, "object store: out of memory");
	}
	int ret = -EAGAIN;
	for (int i = 0; i < ATTEMPTS; i++) {
		if (i > 0) {
			struct timespec ts = { 0, 100000000L << (2 * (i - 1)) }; /* 0.1 s, 0.4 s */
			nanosleep(&ts, NULL);
			if (in_was)
				EVP_MD_CTX_copy_ex(r->in_hash, in_was);
		}
		s3__hash_reset(r->out_hash);
		if (r->out_fd >= 0 && ftruncate(r->out_fd, 0) < 0) {
			ret = errbuf_set(err, errlen, -errno, "object store: cannot truncate: %s",
					 strerror(errno));
			break;
		}
		if (r->out_mem)
			r->out_mem->len = 0;
		if (r->out_mem && r->out_mem->p)
			r->out_mem->p[0] = '\0';
		if (r->sink && r->sink->reset && (ret = r->sink->reset(r->sink->arg)) < 0) {
			ret = errbuf_set(err, errlen, ret, "object store: %s: %s", r->key ? r->key : "",
					 strerror(-ret));
			break;
		}
		ret = attempt(s, r, err, errlen);
		if (ret == -EAGAIN)
			continue;
		if (ret < 0)
			break;
		if (r->status >= 200 && r->status <= 299) {
			ret = 0;
			break;
		}
		char code[64] = "", msg[160] = "";
		if (r->err.p) {
			s3__xml_text(r->err.p, r->err.len, "Code", code, sizeof(code));
			s3__xml_text(r->err.p, r->err.len, "Message", msg, sizeof(msg));
			s3__printable(code);
			s3__printable(msg);
		}
		const char *what = r->key ? r->key : s->c.bucket;
		int again = r->status >= 500 || r->status == 429 || r->status == 408;
		ret = errbuf_set(err, errlen,
				 again ? -EAGAIN
				 : r->status == 404 ? -ENOENT
				 : r->status == 403 || r->status == 401 ? -EACCES
				 : -EIO,
				 "object store: %s %s: HTTP %ld%s%s%s%s", r->method, what, r->status,
				 code[0] ? " " : "", code, msg[0] ? ": " : "", msg);
		if (!again)
			break;
	}
	EVP_MD_CTX_free(in_was);
	return ret;
}

void s3__req_init(struct req *r, const char *method, const char *key, const char *query)
{
	memset(r, 0, sizeof(*r));
	r->method = method;
	r->key = key;
	r->query = query;
	r->in_fd = -1;
	r->out_fd = -1;
	r->out_limit = ERR_BODY_MAX;
	buf_init(&r->err, ERR_BODY_MAX + 1);
}

int s3__key_check(const char *key, char *err, size_t errlen)
{
	if (s3_key_ok(key))
		return 0;
	return errbuf_set(err, errlen, -EINVAL, "object store: '%.64s' cannot name an object",
			  key ? key : "(null)");
}

int s3_bucket_create(struct s3 *s, char *err, size_t errlen)
{
	struct req r;
	s3__req_init(&r, "PUT", NULL, "");
	int ret = s3__call(s, &r, err, errlen);
	/* S3 says 409 BucketAlreadyOwnedByYou; some stores answer 202/200. */
	if (ret == -EIO && r.status == 409 && r.err.p && strstr(r.err.p, "BucketAlreadyOwnedByYou"))
		ret = 0;
	buf_release(&r.err);
	return ret;
}


int s3_head(struct s3 *s, const char *key, uint64_t *size, char *err, size_t errlen)
{
	int ret = s3__key_check(key, err, errlen);
	if (ret < 0)
		return ret;
	struct req r;
	s3__req_init(&r, "HEAD", key, "");
	ret = s3__call(s, &r, err, errlen);
	if (ret == 0 && r.length < 0)
		ret = errbuf_set(err, errlen, -EIO, "object store: HEAD %s: no Content-Length", key);
	if (ret == 0 && size)
		*size = (uint64_t)r.length;
	buf_release(&r.err);
	return ret;
}

int s3_delete(struct s3 *s, const char *key, char *err, size_t errlen)
{
	int ret = s3__key_check(key, err, errlen);
	if (ret < 0)
		return ret;
	struct req r;
	s3__req_init(&r, "DELETE", key, "");
	ret = s3__call(s, &r, err, errlen);
	buf_release(&r.err);
	return ret == -ENOENT ? 0 : ret;
}

static int env_copy(char *dst, size_t n, const char *prefix, const char *name, const char *dflt,
		    char *err, size_t errlen)
{
	char var[96];
	snprintf(var, sizeof(var), "%s_%s", prefix, name);
	const char *v = getenv(var);
	if (!v || !*v)
		v = dflt;
	if (!v)
		return errbuf_set(err, errlen, -EINVAL, "object store: %s is not set", var);
	if (strlen(v) >= n)
		return errbuf_set(err, errlen, -EINVAL, "object store: %s is too long", var);
	snprintf(dst, n, "%s", v);
	return 0;
}

int s3_conf_env(struct s3_conf *c, const char *prefix, char *err, size_t errlen)
{
	memset(c, 0, sizeof(*c));
	int r;
	if ((r = env_copy(c->endpoint, sizeof(c->endpoint), prefix, "ENDPOINT", NULL, err, errlen)) < 0 ||
	    (r = env_copy(c->region, sizeof(c->region), prefix, "REGION", "us-east-1", err, errlen)) < 0 ||
	    (r = env_copy(c->bucket, sizeof(c->bucket), prefix, "BUCKET", NULL, err, errlen)) < 0 ||
	    (r = env_copy(c->access_key, sizeof(c->access_key), prefix, "ACCESS_KEY", NULL, err, errlen)) < 0 ||
	    (r = env_copy(c->secret_key, sizeof(c->secret_key), prefix, "SECRET_KEY", NULL, err, errlen)) < 0)
		return r;
	return 0;
}
