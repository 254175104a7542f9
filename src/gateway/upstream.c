/*
 * upstream: see upstream.h. One perform() per call: the handle is reset and
 * set up again, so nothing of one call leaks into the next while its
 * connection stays alive in the pool.
 */
#include "gateway/upstream.h"

#include "common/buf.h"
#include "gateway/sse.h"
#include "gateway/turn.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POOL_MAX	  16
#define MAX_ERROR_ANSWER  (64u << 10)
#define STREAM_MAX_S	  3600 /* a stream that keeps talking still ends */
#define CONNECT_TIMEOUT_MS 10000L

struct upstream {
	char *base;
	char *auth; /* "Authorization: Bearer ..." or NULL */
	long timeout_s;
	pthread_mutex_t lock;
	CURL *idle[POOL_MAX];
	int nidle;
};

/* One call's state, seen by the write callback. */
struct call {
	CURL *h;
	struct buf body; /* a whole answer, or an error answer's start */
	size_t total;
	int stream;
	struct sse sse;
	struct turn *t;
	up_text_fn text;
	void *arg;
	int done;     /* the stream said [DONE] */
	int stop;     /* why the write callback stopped the transfer */
	char why[400];
};

enum { STOP_NONE, STOP_CANCELED, STOP_TOO_BIG, STOP_BAD, STOP_ERROR_EVENT };

int up_new(const char *base_url, const char *key, long timeout_s, struct upstream **out)
{
	struct upstream *u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	pthread_mutex_init(&u->lock, NULL);
	u->timeout_s = timeout_s;
	u->base = strdup(base_url);
	if (key && *key && asprintf(&u->auth, "Authorization: Bearer %s", key) < 0)
		u->auth = NULL;
	if (!u->base || (key && *key && !u->auth)) {
		up_free(u);
		return -ENOMEM;
	}
	size_t n = strlen(u->base);
	while (n > 8 && u->base[n - 1] == '/') /* "http://h/v1/" + "/chat/..." */
		u->base[--n] = '\0';
	*out = u;
	return 0;
}

void up_free(struct upstream *u)
{
	if (!u)
		return;
	for (int i = 0; i < u->nidle; i++)
		curl_easy_cleanup(u->idle[i]);
	if (u->auth)
		explicit_bzero(u->auth, strlen(u->auth));
	free(u->auth);
	free(u->base);
	pthread_mutex_destroy(&u->lock);
	free(u);
}

static CURL *take(struct upstream *u)
{
	CURL *h = NULL;
	pthread_mutex_lock(&u->lock);
	if (u->nidle)
		h = u->idle[--u->nidle];
	pthread_mutex_unlock(&u->lock);
	return h ? h : curl_easy_init();
}

static void give(struct upstream *u, CURL *h)
{
	pthread_mutex_lock(&u->lock);
	if (u->nidle < POOL_MAX) {
		u->idle[u->nidle++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&u->lock);
	if (h)
		curl_easy_cleanup(h);
}

/* The message of an upstream's error answer, in the shapes servers use:
 * {"error": {"message"}}, {"error": "..."}, {"message"}, {"detail"}; else
 * the start of its text. */
static void error_text(const char *body, size_t n, char *out, size_t outlen)
{
	json_t *j = n ? json_loadb(body, n, 0, NULL) : NULL;
	json_t *err = json_object_get(j, "error");
	const char *msg = json_string_value(json_object_get(err, "message"));
	if (!msg)
		msg = json_string_value(err);
	if (!msg)
		msg = json_string_value(json_object_get(j, "message"));
	if (!msg)
		msg = json_string_value(json_object_get(j, "detail"));
	if (msg) {
		snprintf(out, outlen, "%s", msg);
	} else {
		size_t i = 0;
		for (; i < n && i + 1 < outlen && i < 300; i++) /* printable ASCII, one line */
			out[i] = body[i] >= 0x20 && body[i] < 0x7f ? body[i] : ' ';
		out[i] = '\0';
	}
	json_decref(j);
	for (char *p = out; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
}

/* One event of a stream: a chunk, an error, or the end. */
static int on_event(void *arg, const char *data, size_t n)
{
	struct call *c = arg;
	if (c->done)
		return 0;
	if (n == 6 && !memcmp(data, "[DONE]", 6)) {
		c->done = 1;
		return 0;
	}
	json_error_t je;
	json_t *chunk = json_loadb(data, n, 0, &je);
	if (!chunk) {
		snprintf(c->why, sizeof(c->why), "a stream event that is not JSON: %s", je.text);
		return STOP_BAD;
	}
	json_t *err = json_object_get(chunk, "error");
	if (err && !json_is_null(err)) {
		error_text(data, n, c->why, sizeof(c->why));
		json_decref(chunk);
		return STOP_ERROR_EVENT;
	}
	const char *text;
	size_t len;
	int r = turn_add_chunk(c->t, chunk, &text, &len, c->why, sizeof(c->why));
	json_decref(chunk);
	if (r)
		return STOP_BAD;
	if (len && c->text(c->arg, text, len))
		return STOP_CANCELED;
	return 0;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *arg)
{
	struct call *c = arg;
	size_t n = size * nmemb;
	long status = 0;
	curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &status);
	c->total += n;
	if (status < 200 || status > 299) { /* keep an error answer's start */
		size_t keep = MAX_ERROR_ANSWER - 1;
		size_t room = keep > c->body.len ? keep - c->body.len : 0;
		buf_add(&c->body, p, n < room ? n : room);
		return n;
	}
	if (c->total > UP_MAX_ANSWER) {
		c->stop = STOP_TOO_BIG;
		return 0;
	}
	/* past the cap: the stream's own error, or a whole answer's -1 */
	int r = c->stream ? sse_feed(&c->sse, p, n, on_event, c)
			  : (buf_add(&c->body, p, n) ? -1 : 0);
	if (r) {
		c->stop = r == -EMSGSIZE ? STOP_TOO_BIG : r > 0 ? r : STOP_BAD;
		return 0; /* curl ends the transfer with CURLE_WRITE_ERROR */
	}
	return n;
}

static int fail(struct up_err *e, enum up_fail f, long status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(struct up_err *e, enum up_fail f, long status, const char *fmt, ...)
{
	e->fail = f;
	e->status = status;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return -1;
}

/* What a transfer that curl ended with code cc means. */
static int curl_fail(struct upstream *u, struct call *c, CURLcode cc, const char *cerr,
		     struct up_err *e)
{
	const char *why = cerr[0] ? cerr : curl_easy_strerror(cc);
	switch (c->stop) {
	case STOP_CANCELED: return fail(e, UP_CANCELED, 0, "the client went away");
	case STOP_TOO_BIG:
		return fail(e, UP_BAD_ANSWER, 200, "the upstream's answer is over %u bytes",
			    UP_MAX_ANSWER);
	case STOP_BAD: return fail(e, UP_BAD_ANSWER, 200, "the upstream's stream: %s", c->why);
	case STOP_ERROR_EVENT:
		return fail(e, UP_STATUS, 200, "the upstream's stream ended in an error: %s",
			    c->why);
	}
	switch (cc) {
	case CURLE_OPERATION_TIMEDOUT:
		return fail(e, UP_TIMEOUT, 0, "the upstream at %s did not answer within %lds",
			    u->base, u->timeout_s);
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
		return fail(e, UP_UNREACHABLE, 0, "cannot connect to the upstream at %s: %s",
			    u->base, why);
	default:
		return fail(e, UP_UNREACHABLE, 0, "the connection to the upstream at %s failed: %s",
			    u->base, why);
	}
}

/* One request: GET path, or POST path with body (JSON text). Fills c. */
static int perform(struct upstream *u, struct call *c, const char *path, const char *body,
		   struct up_err *e)
{
	char url[2048], cerr[CURL_ERROR_SIZE] = "";
	struct curl_slist *hdrs = NULL, *h;
	memset(e, 0, sizeof(*e));
	if ((size_t)snprintf(url, sizeof(url), "%s%s", u->base, path) >= sizeof(url))
		return fail(e, UP_UNREACHABLE, 0, "the upstream URL is too long");
	if (!(c->h = take(u)))
		return fail(e, UP_UNREACHABLE, 0, "out of memory");
	curl_easy_reset(c->h);
	const char *lines[] = { "Expect:", u->auth,
				body ? "Content-Type: application/json" : NULL,
				c->stream ? "Accept: text/event-stream" : "Accept: application/json" };
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
		if (lines[i] && (h = curl_slist_append(hdrs, lines[i])))
			hdrs = h;
	curl_easy_setopt(c->h, CURLOPT_URL, url);
	curl_easy_setopt(c->h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(c->h, CURLOPT_USERAGENT, "cpuos-gateway");
	curl_easy_setopt(c->h, CURLOPT_ERRORBUFFER, cerr);
	curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L); /* many threads call */
	curl_easy_setopt(c->h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
	if (c->stream) {
		/* silent for the timeout: no byte at all in that many seconds */
		curl_easy_setopt(c->h, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(c->h, CURLOPT_LOW_SPEED_TIME, u->timeout_s);
		curl_easy_setopt(c->h, CURLOPT_TIMEOUT_MS, STREAM_MAX_S * 1000L);
	} else {
		curl_easy_setopt(c->h, CURLOPT_TIMEOUT_MS, u->timeout_s * 1000L);
	}
	curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(c->h, CURLOPT_WRITEDATA, c);
	if (body) {
		curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
	}
	CURLcode cc = curl_easy_perform(c->h);
	long status = 0;
	curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hdrs);
	int r = 0;
	if (cc != CURLE_OK) {
		r = curl_fail(u, c, cc, cerr, e);
	} else if (status < 200 || status > 299) {
		char msg[400];
		error_text(c->body.p ? c->body.p : "", c->body.len, msg, sizeof(msg));
		r = fail(e, UP_STATUS, status, "the upstream answered %ld: %s", status,
			 msg[0] ? msg : "(no message)");
	}
	/* A transfer that failed may have left its connection in any state. */
	if (cc == CURLE_OK)
		give(u, c->h);
	else
		curl_easy_cleanup(c->h);
	c->h = NULL;
	return r;
}

int up_chat(struct upstream *u, json_t *body, up_text_fn text, void *arg, struct turn *t,
	    struct up_err *e)
{
	struct call c = { .stream = text != NULL, .t = t, .text = text, .arg = arg };
	buf_init(&c.body, UP_MAX_ANSWER - 1);
	char *json = json_dumps(body, JSON_COMPACT);
	if (!json)
		return fail(e, UP_UNREACHABLE, 0, "out of memory");
	if (c.stream)
		sse_init(&c.sse, UP_MAX_ANSWER);
	int r = perform(u, &c, "/chat/completions", json, e);
	free(json);
	if (!r && c.stream) {
		/* A stream that ends without [DONE] is whole only if it said
		 * why it finished; else it was cut. */
		if ((sse_end(&c.sse) && !c.done) || (!c.done && !t->finish_reason[0]))
			r = fail(e, UP_BAD_ANSWER, 200, "the upstream's stream ended before [DONE]");
		else if (turn_finish(t))
			r = fail(e, UP_UNREACHABLE, 0, "out of memory");
	} else if (!r) {
		json_error_t je;
		json_t *ans = json_loadb(c.body.p ? c.body.p : "", c.body.len, 0, &je);
		char why[200];
		if (!ans)
			r = fail(e, UP_BAD_ANSWER, 200, "the upstream's answer is not JSON: %s",
				 je.text);
		else if (turn_from_completion(t, ans, why, sizeof(why)))
			r = fail(e, UP_BAD_ANSWER, 200, "the upstream's answer: %s", why);
		json_decref(ans);
	}
	if (c.stream)
		sse_release(&c.sse);
	buf_release(&c.body);
	return r;
}

int up_get(struct upstream *u, const char *path, json_t **out, struct up_err *e)
{
	struct call c = { 0 };
	buf_init(&c.body, UP_MAX_ANSWER - 1);
	*out = NULL;
	int r = perform(u, &c, path, NULL, e);
	if (!r) {
		json_error_t je;
		if (!(*out = json_loadb(c.body.p ? c.body.p : "", c.body.len, 0, &je)))
			r = fail(e, UP_BAD_ANSWER, 200, "the upstream's answer is not JSON: %s",
				 je.text);
	}
	buf_release(&c.body);
	return r;
}
