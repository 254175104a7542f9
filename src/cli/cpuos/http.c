/*
 * http: libcurl under the cpuos CLI. Every request goes through one
 * perform(): the handle is reset and set up again, so options of one call
 * never leak into the next while the connection itself is kept alive.
 */
#include "cli/cpuos/http.h"

#include "common/buf.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef CPUOS_VERSION
#define CPUOS_VERSION "0.1.0"
#endif

#define MAX_JSON_ANSWER	 (64u << 20) /* an exec result is ~2 MiB of output, escaped */
#define MAX_ERROR_ANSWER (64u << 10)
#define MAX_LINE	 (16u << 20)

struct api {
	CURL *h;
	char *url;  /* as given */
	char *base; /* "http://host:port" or "http://localhost" on a socket */
	char *sock; /* Unix socket path or NULL */
	char *key;
	long timeout_ms;
	long status;
	char code[64];
	char error[768];
	char message[640]; /* the daemon's own message of its last error answer */
	char curl_err[CURL_ERROR_SIZE];
};

/* What one request does with its answer. */
struct req {
	struct api *a;
	struct buf body; /* a JSON answer, or an error answer */
	api_sink_fn sink;
	void *sink_arg;
	int sink_err; /* -errno a sink or line reader gave, or 1: stop asked */
	api_tick_fn tick;
	void *tick_arg;
	/* NDJSON */
	api_line_fn line_fn;
	void *line_arg;
	int tell_open; /* line_fn(NULL, 0) once a 2xx answer's head is in */
	struct buf line;
	/* upload: fd's bytes, or src's when it is set */
	int fd;
	api_source_fn src;
	void *src_arg;
};

int api_new(const char *url, const char *key, struct api **out)
{
	int r = -ENOMEM;
	struct api *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	if (!strncmp(url, "unix://", 7)) {
		if (url[7] != '/' || strlen(url + 7) >= 108) /* sun_path */
			goto invalid;
		a->sock = strdup(url + 7);
		a->base = strdup("http://localhost");
	} else if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) {
		a->base = strdup(url);
		if (a->base) {
			size_t n = strlen(a->base);
			while (n > 8 && a->base[n - 1] == '/') /* "http://h/" + "/v1/..." */
				a->base[--n] = '\0';
		}
	} else {
		goto invalid;
	}
	a->url = strdup(url);
	a->key = key && *key ? strdup(key) : NULL;
	a->h = curl_easy_init();
	if (!a->url || !a->base || (url[0] == 'u' && !a->sock) || (key && *key && !a->key) || !a->h)
		goto fail;
	*out = a;
	return 0;
invalid:
	r = -EINVAL;
fail:
	api_free(a);
	return r;
}

int api_dup(const struct api *a, struct api **out)
{
	int r = api_new(a->url, a->key, out);
	if (r == 0)
		(*out)->timeout_ms = a->timeout_ms;
	return r;
}

void api_free(struct api *a)
{
	if (!a)
		return;
	if (a->h)
		curl_easy_cleanup(a->h);
	free(a->url);
	free(a->base);
	free(a->sock);
	free(a->key);
	free(a);
}

void api_set_timeout(struct api *a, long ms)
{
	a->timeout_ms = ms;
}

const char *api_url(const struct api *a)
{
	return a->url;
}

int api_is_unix(const struct api *a)
{
	return a->sock != NULL;
}

long api_status(const struct api *a)
{
	return a->status;
}

const char *api_code(const struct api *a)
{
	return a->code;
}

const char *api_error(const struct api *a)
{
	return a->error;
}

const char *api_message(const struct api *a)
{
	return a->message[0] ? a->message : a->error;
}

static void apath_put(struct apath *p, const char *s, int encode)
{
	static const char hex[] = "0123456789ABCDEF";
	for (const unsigned char *c = (const unsigned char *)s; *c && !p->err; c++) {
		int keep = !encode || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
			   (*c >= '0' && *c <= '9') || strchr("-._~", *c);
		if (p->len + (keep ? 1 : 3) >= sizeof(p->s)) {
			p->err = -ENAMETOOLONG;
			break;
		}
		if (keep) {
			p->s[p->len++] = (char)*c;
		} else {
			p->s[p->len++] = '%';
			p->s[p->len++] = hex[*c >> 4];
			p->s[p->len++] = hex[*c & 15];
		}
	}
	p->s[p->len] = '\0';
}

void apath_init(struct apath *p, const char *raw)
{
	p->len = 0;
	p->nquery = 0;
	p->err = 0;
	apath_put(p, raw, 0);
}

void apath_add(struct apath *p, const char *raw)
{
	apath_put(p, raw, 0);
}

void apath_seg(struct apath *p, const char *seg)
{
	apath_put(p, "/", 0);
	apath_put(p, seg, 1);
}

void apath_query(struct apath *p, const char *key, const char *value)
{
	apath_put(p, p->nquery++ ? "&" : "?", 0);
	apath_put(p, key, 1);
	apath_put(p, "=", 0);
	apath_put(p, value, 1);
}

static int is_2xx(long status)
{
	return status >= 200 && status < 300;
}

/* Splits the stream into lines for the NDJSON reader. */
static int lines_feed(struct req *q, const char *p, size_t n)
{
	while (n) {
		const char *nl = memchr(p, '\n', n);
		size_t take = nl ? (size_t)(nl - p) : n;
		int r = buf_add(&q->line, p, take);
		if (r < 0)
			return r; /* -EMSGSIZE: a line that long is not the API */
		if (!nl)
			return 0;
		if (q->line.len) { /* blank lines are keep-alives */
			r = q->line_fn(q->line_arg, q->line.p, q->line.len);
			if (r)
				return r;
		}
		q->line.len = 0;
		p = nl + 1;
		n -= take + 1;
	}
	return 0;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *arg)
{
	struct req *q = arg;
	size_t n = size * nmemb;
	long status = 0;
	curl_easy_getinfo(q->a->h, CURLINFO_RESPONSE_CODE, &status);
	int r;
	if (!is_2xx(status)) {
		/* An error answer is small JSON; keep its start, drop the rest. */
		size_t keep = MAX_ERROR_ANSWER - 1;
		size_t room = keep > q->body.len ? keep - q->body.len : 0;
		buf_add(&q->body, p, n < room ? n : room);
		return n;
	}
	if (q->line_fn)
		r = lines_feed(q, p, n);
	else if (q->sink)
		r = q->sink(q->sink_arg, p, n);
	else if ((r = buf_add(&q->body, p, n)) == -EMSGSIZE)
		r = -EFBIG; /* the answer, not a line, is too long */
	if (r) {
		q->sink_err = r;
		return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
	}
	return n;
}

/* The end of the answer's head (its empty line): a stream that was asked
 * to is told it is open. */
static size_t on_header(char *p, size_t size, size_t nmemb, void *arg)
{
	struct req *q = arg;
	size_t n = size * nmemb;
	long st = 0;
	if ((n == 2 && p[0] == '\r' && p[1] == '\n') || (n == 1 && p[0] == '\n')) {
		curl_easy_getinfo(q->a->h, CURLINFO_RESPONSE_CODE, &st);
		if (st >= 200 && st < 300 && q->tell_open) {
			q->tell_open = 0;
			int r = q->line_fn(q->line_arg, NULL, 0);
			if (r) {
				q->sink_err = r;
				return 0; /* aborts the transfer */
			}
		}
	}
	return n;
}

static size_t on_read(char *p, size_t size, size_t nmemb, void *arg)
{
	struct req *q = arg;
	if (q->src) {
		ssize_t n = q->src(q->src_arg, p, size * nmemb);
		if (n >= 0)
			return (size_t)n;
		q->sink_err = (int)n;
		return CURL_READFUNC_ABORT;
	}
	for (;;) {
		ssize_t n = read(q->fd, p, size * nmemb);
		if (n >= 0)
			return (size_t)n;
		if (errno != EINTR) {
			q->sink_err = -errno;
			return CURL_READFUNC_ABORT;
		}
	}
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	(void)dt, (void)dn, (void)ut, (void)un;
	struct req *q = arg;
	int r = q->tick(q->tick_arg);
	if (r) {
		q->sink_err = r;
		return 1;
	}
	return 0;
}

/* Fills a->error from an error answer's {"error": {"code", "message"}}. */
static void take_error(struct api *a, const struct buf *b)
{
	json_t *j = b->len ? json_loadb(b->p, b->len, 0, NULL) : NULL;
	json_t *e = json_object_get(j, "error");
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *msg = json_string_value(json_object_get(e, "message"));
	snprintf(a->code, sizeof(a->code), "%s", code ? code : "");
	snprintf(a->message, sizeof(a->message), "%s", msg ? msg : "");
	if (msg)
		snprintf(a->error, sizeof(a->error), "%s (HTTP %ld %s)", msg, a->status, a->code);
	else
		snprintf(a->error, sizeof(a->error),
			 "unexpected answer from cpuosd at %s (HTTP %ld)", a->url, a->status);
	json_decref(j);
}

static int curl_fail(struct api *a, CURLcode c)
{
	const char *why = a->curl_err[0] ? a->curl_err : curl_easy_strerror(c);
	long os_err = 0;
	switch (c) {
	case CURLE_COULDNT_CONNECT:
		/* curl's text names "localhost port 80" even on a Unix socket;
		 * the system's error is what the user can act on. */
		curl_easy_getinfo(a->h, CURLINFO_OS_ERRNO, &os_err);
		if (os_err)
			why = strerror((int)os_err);
		/* fall through */
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		snprintf(a->error, sizeof(a->error), "cannot connect to cpuosd at %s: %s", a->url,
			 why);
		return -ECONNREFUSED;
	case CURLE_OPERATION_TIMEDOUT:
		snprintf(a->error, sizeof(a->error), "cpuosd at %s: %s", a->url, why);
		return -ETIMEDOUT;
	case CURLE_OUT_OF_MEMORY:
		snprintf(a->error, sizeof(a->error), "out of memory");
		return -ENOMEM;
	default:
		snprintf(a->error, sizeof(a->error), "connection to cpuosd at %s failed: %s",
			 a->url, why);
		return -EIO;
	}
}

/* One request. ctype: body's Content-Type (NULL: none). With q->fd >= 0 the
 * body is streamed from it instead of (body, n). resp as in api_json. */
static int perform(struct req *q, const char *method, const struct apath *path, const char *ctype,
		   const void *body, size_t n, json_t **resp)
{
	struct api *a = q->a;
	struct curl_slist *hdrs = NULL, *h;
	char *url = NULL, auth[1024];
	int r = -ENOMEM;
	CURLcode c;

	a->status = 0;
	a->code[0] = a->error[0] = a->message[0] = a->curl_err[0] = '\0';
	buf_init(&q->body, MAX_JSON_ANSWER - 1);
	buf_init(&q->line, MAX_LINE - 1);
	if (resp)
		*resp = NULL;
	if (path->err) {
		snprintf(a->error, sizeof(a->error), "request path too long");
		r = path->err;
		goto out;
	}
	if (asprintf(&url, "%s%s", a->base, path->s) < 0) {
		url = NULL;
		goto out;
	}
	curl_easy_reset(a->h);
	/* Disables curl's "Expect: 100-continue": a small server may not
	 * implement it, and curl would then stall a second before each upload. */
	h = curl_slist_append(hdrs, "Expect:");
	if (h)
		hdrs = h;
	if (a->key) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", a->key);
		if ((h = curl_slist_append(hdrs, auth)))
			hdrs = h;
	}
	if (ctype) {
		snprintf(auth, sizeof(auth), "Content-Type: %s", ctype);
		if ((h = curl_slist_append(hdrs, auth)))
			hdrs = h;
	}
	if (!hdrs)
		goto out;
	curl_easy_setopt(a->h, CURLOPT_URL, url);
	if (a->sock)
		curl_easy_setopt(a->h, CURLOPT_UNIX_SOCKET_PATH, a->sock);
	curl_easy_setopt(a->h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(a->h, CURLOPT_USERAGENT, "cpuos/" CPUOS_VERSION);
	curl_easy_setopt(a->h, CURLOPT_ERRORBUFFER, a->curl_err);
	curl_easy_setopt(a->h, CURLOPT_NOSIGNAL, 1L); /* a second thread may run requests */
	curl_easy_setopt(a->h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
	curl_easy_setopt(a->h, CURLOPT_TIMEOUT_MS, a->timeout_ms);
	curl_easy_setopt(a->h, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(a->h, CURLOPT_WRITEDATA, q);
	curl_easy_setopt(a->h, CURLOPT_HEADERFUNCTION, q->tell_open ? on_header : NULL);
	curl_easy_setopt(a->h, CURLOPT_HEADERDATA, q->tell_open ? q : NULL);
	if (q->tick) {
		curl_easy_setopt(a->h, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(a->h, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(a->h, CURLOPT_XFERINFODATA, q);
	}
	if (q->fd >= 0 || q->src) {
		struct stat st;
		curl_easy_setopt(a->h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(a->h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(a->h, CURLOPT_READDATA, q);
		/* A regular file's length is known: send it, so the daemon can
		 * refuse an oversized file (413) before reading it. Else chunked. */
		off_t pos = lseek(q->fd, 0, SEEK_CUR);
		if (!q->src && fstat(q->fd, &st) == 0 && S_ISREG(st.st_mode) && pos >= 0)
			curl_easy_setopt(a->h, CURLOPT_INFILESIZE_LARGE,
					 (curl_off_t)(st.st_size - pos));
		if (strcmp(method, "PUT"))
			curl_easy_setopt(a->h, CURLOPT_CUSTOMREQUEST, method);
	} else if (!strcmp(method, "POST")) {
		curl_easy_setopt(a->h, CURLOPT_POSTFIELDS, body ? body : "");
		curl_easy_setopt(a->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? n : 0));
	} else if (strcmp(method, "GET")) {
		curl_easy_setopt(a->h, CURLOPT_CUSTOMREQUEST, method);
		if (body) {
			curl_easy_setopt(a->h, CURLOPT_POSTFIELDS, body);
			curl_easy_setopt(a->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)n);
		}
	}

	c = curl_easy_perform(a->h);
	curl_easy_getinfo(a->h, CURLINFO_RESPONSE_CODE, &a->status);
	if (q->sink_err == 1 && is_2xx(a->status)) { /* the line reader asked to stop */
		r = 0;
		goto out;
	}
	if (q->sink_err < 0) {
		r = q->sink_err;
		if (r == -EMSGSIZE || r == -EFBIG) {
			snprintf(a->error, sizeof(a->error),
				 "unexpected answer from cpuosd at %s (%s)", a->url,
				 r == -EFBIG ? "over 64 MiB" : "a line over 16 MiB");
			r = -EIO;
		}
		goto out;
	}
	if (c != CURLE_OK) {
		r = curl_fail(a, c);
		goto out;
	}
	if (!is_2xx(a->status)) {
		take_error(a, &q->body);
		r = -EPROTO;
		goto out;
	}
	if (q->line_fn && q->line.len) { /* a last line without its newline */
		r = q->line_fn(q->line_arg, q->line.p, q->line.len);
		if (r < 0)
			goto out;
	}
	r = 0;
	if (resp && q->body.len) {
		json_error_t je;
		*resp = json_loadb(q->body.p, q->body.len, 0, &je);
		if (!*resp) {
			snprintf(a->error, sizeof(a->error),
				 "unexpected answer from cpuosd at %s (HTTP %ld): %s", a->url,
				 a->status, je.text);
			r = -EIO;
		}
	}
out:
	if (r == -ENOMEM && !a->error[0])
		snprintf(a->error, sizeof(a->error), "out of memory");
	curl_slist_free_all(hdrs);
	free(url);
	buf_release(&q->body);
	buf_release(&q->line);
	return r;
}

int api_json(struct api *a, const char *method, const struct apath *path, json_t *body,
	     json_t **resp)
{
	struct req q = {.a = a, .fd = -1};
	char *text = NULL;
	if (body) {
		text = json_dumps(body, JSON_COMPACT);
		if (!text) {
			snprintf(a->error, sizeof(a->error), "out of memory");
			return -ENOMEM;
		}
	}
	int r = perform(&q, method, path, text ? "application/json" : NULL, text,
			text ? strlen(text) : 0, resp);
	free(text);
	return r;
}

int api_post_raw(struct api *a, const struct apath *path, const void *p, size_t n)
{
	struct req q = {.a = a, .fd = -1};
	return perform(&q, "POST", path, "application/octet-stream", p ? p : "", n, NULL);
}

int api_upload(struct api *a, const char *method, const struct apath *path, int fd, json_t **resp)
{
	struct req q = {.a = a, .fd = fd};
	int r = perform(&q, method, path, "application/octet-stream", NULL, 0, resp);
	if (r < 0 && !a->error[0])
		snprintf(a->error, sizeof(a->error), "cannot read the input: %s", strerror(-r));
	return r;
}

int api_upload_from(struct api *a, const char *method, const struct apath *path, api_source_fn src,
		    void *arg, json_t **resp)
{
	struct req q = {.a = a, .fd = -1, .src = src, .src_arg = arg};
	return perform(&q, method, path, "application/octet-stream", NULL, 0, resp);
}

int api_download(struct api *a, const struct apath *path, api_sink_fn sink, void *arg)
{
	struct req q = {.a = a, .fd = -1, .sink = sink, .sink_arg = arg};
	return perform(&q, "GET", path, NULL, NULL, 0, NULL);
}

int api_lines_open(struct api *a, const struct apath *path, api_line_fn fn, api_tick_fn tick,
		   void *arg)
{
	struct req q = {
	    .a = a, .fd = -1, .line_fn = fn, .line_arg = arg, .tick = tick, .tick_arg = arg,
	    .tell_open = 1};
	return perform(&q, "GET", path, NULL, NULL, 0, NULL);
}

int api_post_lines(struct api *a, const struct apath *path, json_t *body, api_line_fn fn,
		   api_tick_fn tick, void *arg)
{
	struct req q = {
	    .a = a, .fd = -1, .line_fn = fn, .line_arg = arg, .tick = tick, .tick_arg = arg,
	    .tell_open = 1};
	char *s = json_dumps(body, JSON_COMPACT);
	if (!s)
		return -ENOMEM;
	int r = perform(&q, "POST", path, "application/json", s, strlen(s), NULL);
	free(s);
	return r;
}

int api_lines(struct api *a, const struct apath *path, api_line_fn fn, api_tick_fn tick, void *arg)
{
	struct req q = {
	    .a = a, .fd = -1, .line_fn = fn, .line_arg = arg, .tick = tick, .tick_arg = arg};
	return perform(&q, "GET", path, NULL, NULL, 0, NULL);
}
