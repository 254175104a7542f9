/*
 * fuzz_proxy_head: libFuzzer target for the egress proxy's reading of an
 * HTTP/1 request head: the Host it judges a plain-HTTP connection by
 * (proxy_name without tls), the head's parse (http1.h), and the head it
 * sends on (proxy__head) with a sandbox's secrets and request
 * transformations put in. The first byte: bit 0, the request came over
 * TLS the proxy ended (proxy_tls.c); bit 1, secrets may be put in (the
 * name was looked up through the sandbox's resolver); bit 2, the sandbox
 * has secrets and rules. The rest: the guest's first bytes.
 * Checks: the name is the parsed Host, not empty; the head sent on
 * starts with the guest's request line, ends at its only blank line, has
 * one Connection (the proxy's), and holds no more of a secret's value
 * than the guest sent where the value may not go (no swap, another host,
 * plain HTTP for a TLS-only secret).
 */
#include "common/http1.h"
#include "common/log.h"
#include "daemon/net/proxy.h"
#include "daemon/net/proxy_impl.h"
#include "daemon/net/rules.h"
#include "daemon/net/secret.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define BUG(...)                                                                                   \
	do {                                                                                       \
		fprintf(stderr, "fuzz_proxy_head: " __VA_ARGS__);                                  \
		fputc('\n', stderr);                                                               \
		abort();                                                                           \
	} while (0)

#define PH_A "cpuos-secret-0123456789abcdef0123456789abcdef"
#define PH_B "cpuos-secret-ffffffffffffffffffffffffffffffff"
#define VALUE_A "sk-value-a-0123456789" /* api.example.com, over TLS only */
#define VALUE_B "ghp-value-b-9876"      /* *.example.org, plain HTTP too */

static const char secrets_json[] =
	"[{\"name\": \"A\", \"placeholder\": \"" PH_A "\", \"value\": \"" VALUE_A "\","
	"  \"hosts\": [\"api.example.com\"]},"
	" {\"name\": \"B\", \"placeholder\": \"" PH_B "\", \"value\": \"" VALUE_B "\","
	"  \"hosts\": [\"*.example.org\"], \"http\": true}]";
static const char rules_json[] =
	"[{\"match\": {\"host\": \"api.example.com\", \"path\": {\"startsWith\": \"/v1/\"},"
	"   \"method\": [\"POST\"], \"headers\": [{\"key\": {\"exact\": \"x-a\"},"
	"   \"value\": {\"regex\": \"^a+b\"}}]},"
	"  \"transform\": {\"headers\": {\"Authorization\": \"Bearer {{secret:A}}\"}}},"
	" {\"match\": {\"host\": \"*\", \"queryString\": [{\"key\": {\"exact\": \"k\"}}]},"
	"  \"transform\": {\"headers\": {\"x-api-key\": \"{{secret:B}}\", \"x-lit\": \"lit\"}}}]";

static struct secret_set *set;

static void load(void)
{
	static int loaded;
	if (loaded++)
		return;
	log_set_level(LOG_ERROR); /* proxy__head logs what it put in */
	char err[256];
	json_t *s = json_loads(secrets_json, 0, NULL), *r = json_loads(rules_json, 0, NULL), *rc;
	if (!s || !r || secret_set_parse(s, &set, err, sizeof(err)) < 0 ||
	    rules_check(r, &rc, err, sizeof(err)) < 0 || rules_parse(rc, &set->rules, err, sizeof(err)) < 0)
		BUG("secrets or rules: %s", err);
	json_decref(s);
	json_decref(r);
	json_decref(rc);
}

static size_t count(const char *buf, size_t len, const char *what)
{
	size_t n = 0, k = strlen(what);
	for (const char *p = buf; (p = memmem(p, len - (size_t)(p - buf), what, k)); p += k)
		n++;
	return n;
}

static int ends_with(const char *n, const char *tail)
{
	size_t a = strlen(n), b = strlen(tail);
	return a > b && !strcmp(n + a - b, tail);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	load();
	if (size < 1)
		return 0;
	int tls = data[0] & 1, swap = !!(data[0] & 2), with = !!(data[0] & 4);
	const char *buf = (const char *)data + 1;
	size_t len = size - 1;
	char name[256];
	int r = proxy_name(0, (const unsigned char *)buf, len, name, sizeof(name));
	if (r < -1 || r > 1)
		BUG("proxy_name returned %d", r);
	size_t hl = http1_head_len(buf, len);
	struct http1_head h;
	int parsed = hl && http1_parse(buf, hl, &h) == 0;
	if (r == 0 && hl)
		BUG("a whole head, and the name asked for more");
	if (r == 1 && !name[0])
		BUG("an empty name found");
	if (!parsed) {
		if (r == 1)
			BUG("the name '%s' from a head that does not parse", name);
		return 0;
	}
	/* The name is the Host (lower case already) less a final dot, if
	 * that leaves a name. */
	char want[sizeof(h.host)];
	size_t wl = strlen(h.host);
	memcpy(want, h.host, wl + 1);
	if (wl && want[wl - 1] == '.')
		want[--wl] = '\0';
	if (r != (wl && want[wl - 1] != '.' ? 1 : -1) || (r == 1 && strcmp(name, want)))
		BUG("the name (%d, '%s') is not the head's Host '%s'", r, r == 1 ? name : "", h.host);
	if (h.target[0] != '/' || h.target + h.target_len > buf + hl || h.line2 > buf + hl ||
	    h.body < 0 || (h.websocket && (h.body || h.chunked)) || strlen(h.host) >= sizeof(h.host))
		BUG("a head parsed out of shape");
	const char *at = NULL, *line, *hn, *hv;
	size_t ll, nl, vl;
	while (http1_next(&h, &at, &line, &ll, &hn, &nl, &hv, &vl))
		if (line < h.line2 || line + ll > buf + hl - 2 || ll < 3 || memcmp(line + ll - 2, "\r\n", 2) ||
		    hn[nl] != ':' || hv + vl > line + ll - 2)
			BUG("a header line out of the head");
	/* The host proxy__head is told: the name the connection was let
	 * through for (the SNI over TLS, which the Host must equal). */
	const char *host = r == 1 ? name : h.host;
	size_t n = 0;
	char *out = proxy__head(&h, with ? set : NULL, host, swap, tls, &n);
	if (!out)
		return 0; /* out of memory, or a rule that cannot be put in */
	size_t first = (size_t)(h.line2 - buf);
	if (n < first + 4 || memcmp(out, buf, first) || memcmp(out + n - 4, "\r\n\r\n", 4))
		BUG("the head sent on does not keep the request line or its end");
	const char *blank = memmem(out, n, "\r\n\r\n", 4);
	if (blank != out + n - 4)
		BUG("a blank line inside the head sent on");
	/* One Connection, the proxy's (a rule's headers may come after it). */
	const char *conn = h.websocket ? "Connection: Upgrade\r\n" : "Connection: close\r\n";
	int conns = 0;
	for (const char *p = out + first; p < out + n - 2;) {
		const char *le = memmem(p, (size_t)(out + n - p), "\r\n", 2);
		if (!le)
			BUG("a header line with no end");
		if (!strncasecmp(p, "connection:", 11) &&
		    (conns++ || (size_t)(le + 2 - p) != strlen(conn) || memcmp(p, conn, strlen(conn))))
			BUG("a Connection of the guest's sent on");
		p = le + 2;
	}
	if (conns != 1)
		BUG("the head sent on has no Connection");
	/* Where a value may not go, the guest's own copies of it at most. */
	int a_ok = with && swap && tls && !strcmp(host, "api.example.com");
	int b_ok = with && swap && ends_with(host, ".example.org");
	if (!a_ok && count(out, n, VALUE_A) > count(buf, len, VALUE_A))
		BUG("secret A sent to '%s' (swap %d, tls %d)", host, swap, tls);
	if (!b_ok && count(out, n, VALUE_B) > count(buf, len, VALUE_B))
		BUG("secret B sent to '%s' (swap %d, tls %d)", host, swap, tls);
	proxy__wipe(out, n);
	return 0;
}
