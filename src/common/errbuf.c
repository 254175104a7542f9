/* errbuf: see errbuf.h. */
#include "common/errbuf.h"

#include <stdarg.h>
#include <stdio.h>

int errbuf_set(char *err, size_t errlen, int code, const char *fmt, ...)
{
	if (!err || !errlen)
		return code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return code;
}
