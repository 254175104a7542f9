/* utf8: a validating decoder (RFC 3629: no overlongs, no surrogates). */
#include "common/utf8.h"

#include <string.h>

/* Length of the valid sequence at p (1..4), or 0 if invalid/incomplete. */
static size_t seq_len(const uint8_t *p, size_t n)
{
	uint8_t c = p[0];
	size_t len;
	uint32_t min, cp;
	if (c < 0x80)
		return 1;
	if ((c & 0xe0) == 0xc0)
		len = 2, min = 0x80, cp = c & 0x1f;
	else if ((c & 0xf0) == 0xe0)
		len = 3, min = 0x800, cp = c & 0x0f;
	else if ((c & 0xf8) == 0xf0)
		len = 4, min = 0x10000, cp = c & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

size_t utf8_sanitize(const uint8_t *p, size_t n, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i < n;) {
		size_t l = seq_len(p + i, n - i);
		if (l) {
			memcpy(out + o, p + i, l);
			o += l;
			i += l;
		} else {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	out[o] = '\0';
	return o;
}

size_t utf8_incomplete_tail(const uint8_t *p, size_t n)
{
	for (size_t back = 1; back <= 3 && back <= n; back++) {
		uint8_t c = p[n - back];
		if ((c & 0xc0) == 0x80)
			continue; /* a continuation byte: look further back */
		size_t need = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
		return need > back ? back : 0;
	}
	return 0;
}
