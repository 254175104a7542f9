/*
 * sbx_hooks: webhook deliveries. A thread of their own posts each event this
 * node recorded to every webhook of its account that wants its type, one
 * webhook's events in order: an event that fails (no answer, not 2xx) is
 * tried again after 1, 2, 4 ... seconds (at most HOOK_MAX_BACKOFF_MS), and
 * the later ones wait behind it. Nothing here holds a sandbox. One thread
 * serves every webhook: a receiver that hangs costs the others at most
 * HOOK_TIMEOUT_S per attempt of its, and its attempts space out as they
 * fail. Every attempt is logged (store_webhook_done). A body is signed with the webhook's secret:
 * X-Cpuos-Signature is "sha256=" and the hex HMAC-SHA256 of
 * "<X-Cpuos-Timestamp>.<body>", so a receiver can refuse a replay.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/clock.h"
#include "common/log.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HOOK_BATCH	    50
#define HOOK_MAX_BACKOFF_MS (300 * 1000)
#define HOOK_TIMEOUT_S	    10

/* Where one webhook's deliveries stand, in memory: a restart tries at once. */
struct hook_try {
	char id[32];
	int attempt;	  /* failures of its next event in a row */
	long long next_ms; /* monotonic: not before */
};

struct hooks {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int woken, quit;
	struct hook_try *tries;
	size_t ntries;
};

static struct hook_try *try_of(struct hooks *h, const char *id)
{
	for (size_t i = 0; i < h->ntries; i++)
		if (!strcmp(h->tries[i].id, id))
			return &h->tries[i];
	struct hook_try *n = realloc(h->tries, (h->ntries + 1) * sizeof(*n));
	if (!n)
		return NULL;
	h->tries = n;
	struct hook_try *t = &h->tries[h->ntries++];
	*t = (struct hook_try){ .attempt = 0 };
	snprintf(t->id, sizeof(t->id), "%s", id);
	return t;
}

/* Whether webhook w wants events of type: its types, a JSON array, hold it
 * (or are empty: every type). */
static int wants(const struct store_webhook *w, const char *type)
{
	json_t *a = json_loads(w->types, 0, NULL);
	size_t i;
	json_t *v;
	int yes = !json_is_array(a) || json_array_size(a) == 0;
	json_array_foreach(a, i, v)
		if (json_is_string(v) && !strcmp(json_string_value(v), type))
			yes = 1;
	json_decref(a);
	return yes;
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
	(void)p;
	(void)arg;
	return size * n;
}

/* Posts event e to w: the HTTP status (0: none), the reason in err. */
static int post(const struct store_webhook *w, const struct store_event *e, char *err, size_t errlen)
{
	char at[64], id[40], ts[32];
	time_t t = (time_t)(e->at_ms / 1000);
	struct tm tm;
	gmtime_r(&t, &tm);
	snprintf(at, sizeof(at), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(e->at_ms % 1000));
	snprintf(id, sizeof(id), "evt_%lld", e->seq);
	json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:o}", "id", id, "type", e->type, "sandbox_id",
			      e->sbx_id, "account", e->account, "time", at, "cause",
			      e->cause[0] ? json_string(e->cause) : json_null());
	char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!body) {
		snprintf(err, errlen, "out of memory");
		return 0;
	}
	/* The signature covers the timestamp and the body. */
	snprintf(ts, sizeof(ts), "%lld", (long long)time(NULL));
	size_t blen = strlen(body), tlen = strlen(ts);
	char *signed_text = malloc(tlen + 1 + blen);
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned maclen = 0;
	char hex[2 * EVP_MAX_MD_SIZE + 1], sig[200], tsh[64], evh[64], idh[96];
	if (signed_text) {
		memcpy(signed_text, ts, tlen);
		signed_text[tlen] = '.';
		memcpy(signed_text + tlen + 1, body, blen);
		HMAC(EVP_sha256(), w->secret, (int)strlen(w->secret), (unsigned char *)signed_text,
		     tlen + 1 + blen, mac, &maclen);
		free(signed_text);
	}
	for (unsigned i = 0; i < maclen; i++)
		snprintf(hex + 2 * i, 3, "%02x", mac[i]);
	hex[2 * maclen] = '\0';
	snprintf(sig, sizeof(sig), "X-Cpuos-Signature: sha256=%s", hex);
	snprintf(tsh, sizeof(tsh), "X-Cpuos-Timestamp: %s", ts);
	snprintf(evh, sizeof(evh), "X-Cpuos-Event: %s", e->type);
	snprintf(idh, sizeof(idh), "X-Cpuos-Delivery: %s-%s", w->id, id);

	CURL *c = curl_easy_init();
	struct curl_slist *hdr = NULL;
	const char *lines[] = { "Content-Type: application/json", "User-Agent: cpuosd-webhooks",
				sig, tsh, evh, idh };
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
		hdr = curl_slist_append(hdr, lines[i]);
	long status = 0;
	if (c && hdr && maclen) {
		curl_easy_setopt(c, CURLOPT_URL, w->url);
		curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)blen);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
		curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)HOOK_TIMEOUT_S);
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 5L);
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
		CURLcode rc = curl_easy_perform(c);
		if (rc == CURLE_OK)
			curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		if (rc != CURLE_OK)
			snprintf(err, errlen, "%s", curl_easy_strerror(rc));
		else if (status < 200 || status > 299)
			snprintf(err, errlen, "HTTP %ld", status);
	} else {
		snprintf(err, errlen, "cannot set up the request");
	}
	curl_slist_free_all(hdr);
	curl_easy_cleanup(c);
	free(body);
	return (int)status;
}

/* Delivers what w has waiting, in order, until one fails. */
static void deliver(struct sbx_mgr *m, const struct store_webhook *w, struct hook_try *t)
{
	struct store_event *ev;
	size_t n;
	if (store_webhook_pending(m->store, w, HOOK_BATCH, &ev, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		pthread_mutex_lock(&m->hooks->mu);
		int quit = m->hooks->quit;
		pthread_mutex_unlock(&m->hooks->mu);
		if (quit)
			break;
		char err[200] = "";
		int status = 200;
		if (wants(w, ev[i].type))
			status = post(w, &ev[i], err, sizeof(err));
		int ok = status >= 200 && status < 300;
		/* An event it does not want moves its cursor, unlogged (attempt 0). */
		long long now = (long long)(clock_realtime_ns() / 1000000);
		int attempt = wants(w, ev[i].type) ? t->attempt + 1 : 0;
		if (store_webhook_done(m->store, w->id, ev[i].seq, attempt, status, err, now) < 0)
			break;
		if (!ok) {
			long long wait = 1000LL << (t->attempt < 9 ? t->attempt : 9);
			t->attempt++;
			t->next_ms = clock_ms() + (wait < HOOK_MAX_BACKOFF_MS ? wait : HOOK_MAX_BACKOFF_MS);
			log_warn("webhook %s: event %lld to %s failed (%s): again in %lld ms", w->id,
				 ev[i].seq, w->url, err, t->next_ms - clock_ms());
			break;
		}
		t->attempt = 0;
	}
	free(ev);
}

static void *hooks_main(void *arg)
{
	struct sbx_mgr *m = arg;
	struct hooks *h = m->hooks;
	log_set_tag("webhooks");
	long long last_prune = 0;
	for (;;) {
		struct store_webhook *w;
		size_t n;
		long long wake = clock_ms() + 1000;
		if (store_webhook_list(m->store, NULL, &w, &n) == 0) {
			for (size_t i = 0; i < n; i++) {
				struct hook_try *t = try_of(h, w[i].id);
				if (!t)
					continue;
				if (clock_ms() >= t->next_ms)
					deliver(m, &w[i], t);
				if (t->attempt && t->next_ms < wake)
					wake = t->next_ms;
			}
			free(w);
		}
		/* A week of events and attempts is kept. */
		long long now_ms = (long long)(clock_realtime_ns() / 1000000);
		if (now_ms - last_prune > 3600 * 1000) {
			store_event_prune(m->store, now_ms - SBX_EVENT_KEEP_S * 1000LL);
			last_prune = now_ms;
		}
		struct timespec until;
		long long left = wake - clock_ms();
		clock_deadline(&until, left < 10 ? 10 : left > 1000 ? 1000 : (int)left);
		pthread_mutex_lock(&h->mu);
		while (!h->quit && !h->woken &&
		       pthread_cond_timedwait(&h->cv, &h->mu, &until) != ETIMEDOUT)
			;
		h->woken = 0;
		int quit = h->quit;
		pthread_mutex_unlock(&h->mu);
		if (quit)
			return NULL;
	}
}

int sbx__hooks_start(struct sbx_mgr *m)
{
	/* Thread-safe since libcurl 7.84 (Debian 12 has 7.88); once is enough. */
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return -EIO;
	struct hooks *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	pthread_mutex_init(&h->mu, NULL);
	clock_cond_init(&h->cv);
	m->hooks = h;
	if (pthread_create(&h->thread, NULL, hooks_main, m) != 0) {
		m->hooks = NULL;
		free(h);
		return -EAGAIN;
	}
	return 0;
}

void sbx__hooks_stop(struct sbx_mgr *m)
{
	struct hooks *h = m->hooks;
	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	h->quit = 1;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
	pthread_join(h->thread, NULL);
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->mu);
	free(h->tries);
	free(h);
	m->hooks = NULL;
}

void sbx__hooks_wake(struct sbx_mgr *m)
{
	struct hooks *h = m->hooks;
	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	h->woken = 1;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
}

void sbx_hooks_changed(struct sbx_mgr *m)
{
	sbx__hooks_wake(m);
}
