/*
 * fuzz_proxy_sni: libFuzzer target for the egress proxy's reading of a
 * TLS ClientHello (proxy_name with tls, src/daemon/net/proxy.c: OpenSSL
 * parses it as a server would, stopped at its servername callback), fed
 * the first bytes of a guest's connection to port 443 as the proxy reads
 * them: the whole input, then a few of its prefixes (a read may end
 * anywhere, and the proxy asks again after each). The first byte is the
 * size of the name's buffer, less one (the proxy's is 256).
 * Checks: 1, 0 or -1 only; a name found is non-empty, NUL-terminated in
 * its buffer, lower case and without a final dot.
 */
#include "daemon/net/proxy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define BUG(...)                                                                                   \
	do {                                                                                       \
		fprintf(stderr, "fuzz_proxy_sni: " __VA_ARGS__);                                   \
		fputc('\n', stderr);                                                               \
		abort();                                                                           \
	} while (0)

static void one(const uint8_t *buf, size_t len, size_t n)
{
	char out[256];
	memset(out, 'X', sizeof(out));
	int r = proxy_name(1, buf, len, out, n);
	if (r < -1 || r > 1)
		BUG("returned %d", r);
	if (r != 1)
		return;
	const char *end = memchr(out, 0, n);
	if (!end)
		BUG("the name is not terminated in its %zu bytes", n);
	size_t k = (size_t)(end - out);
	if (!k)
		BUG("an empty name found");
	if (out[k - 1] == '.')
		BUG("'%s' ends in a dot", out);
	for (size_t i = 0; i < k; i++)
		if (out[i] >= 'A' && out[i] <= 'Z')
			BUG("'%s' is not lower case", out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t n = (size_t)data[0] + 1;
	data++;
	size--;
	one(data, size, n);
	/* A record header alone, and pieces of the hello. */
	size_t cuts[] = { 5, size / 3, size / 2, size - 1 };
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++)
		if (cuts[i] && cuts[i] < size)
			one(data, cuts[i], n);
	return 0;
}
