/* duration: a strict parser; a user's typo must be an error, not 0. */
#include "common/duration.h"

#include <ctype.h>
#include <errno.h>

#define DURATION_MAX (10LL * 365 * 24 * 3600)

int duration_parse(const char *s, long long *seconds)
{
	long long total = 0;
	int parts = 0;
	char last_unit = 0;
	if (!s || !*s)
		return -EINVAL;
	while (*s) {
		if (!isdigit((unsigned char)*s))
			return -EINVAL;
		long long v = 0;
		while (isdigit((unsigned char)*s)) {
			v = v * 10 + (*s++ - '0');
			if (v > DURATION_MAX)
				return -EINVAL;
		}
		char unit = *s;
		long long mult;
		switch (unit) {
		case 'h': mult = 3600; break;
		case 'm': mult = 60; break;
		case 's': mult = 1; break;
		case '\0':
			if (parts) /* "1h30" is ambiguous */
				return -EINVAL;
			mult = 1;
			break;
		default: return -EINVAL;
		}
		/* Units must go down: "30m1h" is a typo. */
		if (last_unit && (unit == 'h' || (unit == 'm' && last_unit != 'h') ||
				  (unit == 's' && last_unit == 's')))
			return -EINVAL;
		if (unit)
			s++;
		last_unit = unit;
		total += v * mult;
		if (total > DURATION_MAX)
			return -EINVAL;
		parts++;
	}
	*seconds = total;
	return 0;
}
