/* gateway: the error bodies every part answers with (see gateway.h). */
#include "gateway/gateway.h"

#include "common/log.h"
#include "gateway/upstream.h"

#include <stdarg.h>
#include <stdio.h>

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
