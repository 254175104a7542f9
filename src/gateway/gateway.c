/* gateway: the error bodies every part answers with, and its background
 * threads (see gateway.h). */
#include "gateway/gateway.h"

#include "common/log.h"
#include "gateway/upstream.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

json_t *gw_error(const char *type, const char *code, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_t *m = json_string(msg);
	if (!m) /* not UTF-8: a reason quoted from a hostile peer */
		m = json_string("(an error message that is not UTF-8)");
	return json_pack("{s:{s:o, s:s, s:n, s:s}}", "error", "message", m, "type", type, "param",
			 "code", code);
}

json_t *gw_upstream_error(const struct up_err *e, unsigned *status)
{
	long s = e->status;
	const char *type = "upstream_error", *code = "upstream_error";
	*status = 502;
	if (e->fail == UP_TIMEOUT) {
		*status = 504;
		code = "upstream_timeout";
	} else if (e->fail == UP_STATUS &&
		   (s == 400 || s == 404 || s == 413 || s == 422 || s == 429)) {
		*status = (unsigned)s;
		type = s == 429 ? "rate_limit_error" : "invalid_request_error";
		code = "upstream_refused";
	}
	if (*status >= 500)
		log_warn("%u %s: %s", *status, code, e->message);
	return gw_error(type, code, "%s", e->message);
}

struct spawned {
	struct gw *g;
	void (*fn)(void *arg);
	void *arg;
};

static void *trampoline(void *p)
{
	struct spawned s = *(struct spawned *)p;
	free(p);
	log_set_tag("gateway");
	s.fn(s.arg);
	atomic_fetch_sub(&s.g->background, 1);
	return NULL;
}

int gw_spawn(struct gw *g, void (*fn)(void *arg), void *arg)
{
	struct spawned *s = malloc(sizeof(*s));
	if (!s)
		return -ENOMEM;
	*s = (struct spawned){ g, fn, arg };
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	atomic_fetch_add(&g->background, 1);
	int e = pthread_create(&t, &attr, trampoline, s);
	pthread_attr_destroy(&attr);
	if (e) {
		atomic_fetch_sub(&g->background, 1);
		free(s);
	}
	return -e;
}
