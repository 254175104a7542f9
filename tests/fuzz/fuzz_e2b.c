/*
 * fuzz_e2b: libFuzzer target for what cpuos-e2b reads from its clients
 * before anything reaches cpuosd: the first byte picks the reader of the
 * rest: 0, a multipart/form-data body (delimiter "--b"); 1, a sequence of
 * Connect envelopes; 2, an envd access token (opened for a fixed sandbox
 * under a fixed secret); 3, a multipart Content-Type's boundary.
 */
#include "e2b/connect.h"
#include "e2b/multipart.h"
#include "e2b/token.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int part(void *arg, const struct mp_part *p)
{
	size_t *total = arg;
	*total += p->len + strlen(p->filename);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned char secret[32] = "fuzz-secret-fuzz-secret-fuzz-sec";
	if (size < 1)
		return 0;
	const char *p = (const char *)data + 1;
	size_t n = size - 1, total = 0;
	switch (data[0] & 3) {
	case 0:
		multipart_each(p, n, "--b", part, &total);
		break;
	case 1:
		for (;;) {
			unsigned flags;
			const char *msg;
			size_t len, used;
			if (connect_unframe(p, n, CONNECT_MSG_MAX, &flags, &msg, &len, &used) < 0)
				break;
			total += len;
			p += used, n -= used;
		}
		break;
	case 2: {
		char *tok = malloc(n + 1), key[256];
		if (!tok)
			return 0;
		memcpy(tok, p, n);
		tok[n] = '\0';
		tok_open(secret, "3f9a0c1d2e4b5a69", tok, key, sizeof(key));
		free(tok);
		break;
	}
	case 3: {
		char *ct = malloc(n + 1), delim[MP_BOUNDARY_MAX + 3];
		if (!ct)
			return 0;
		memcpy(ct, p, n);
		ct[n] = '\0';
		multipart_boundary(ct, delim);
		free(ct);
		break;
	}
	}
	return (int)(total & 0);
}
