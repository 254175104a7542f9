/*
 * fuzz_dns: libFuzzer target for the guests' resolver's reading of a
 * query (dns_query_read, src/daemon/net/dns.c): the datagram a guest
 * sends to port 53, judged under one of four fixed policies (the first
 * byte picks it). Checks: what is not dropped is a parsed query whose
 * name is lower case without a final dot; a name with a byte ldns
 * escapes is refused by every policy; deny-all refuses everything;
 * the custom policies let through only hostname-shaped names that match
 * an allowedHosts entry, and no DNS over HTTPS endpoint they do not name.
 */
#include "daemon/net/dns.h"
#include "daemon/net/policy.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define BUG(...)                                                                                   \
	do {                                                                                       \
		fprintf(stderr, "fuzz_dns: " __VA_ARGS__);                                         \
		fputc('\n', stderr);                                                               \
		abort();                                                                           \
	} while (0)

enum { ALLOW_ALL, DENY_ALL, HOSTS, STAR, NPOLICIES };

static const char *const policy_json[NPOLICIES] = {
	[ALLOW_ALL] = "{\"mode\": \"allow-all\"}",
	[DENY_ALL] = "{\"mode\": \"deny-all\"}",
	[HOSTS] = "{\"mode\": \"custom\", \"allowedHosts\": [\"api.example.com\", \"*.pypi.org\"]}",
	[STAR] = "{\"mode\": \"custom\", \"allowedHosts\": [\"*\", \"dns.google\"]}",
};

static struct net_policy policies[NPOLICIES];

static void load_policies(void)
{
	static int loaded;
	if (loaded++)
		return;
	for (int i = 0; i < NPOLICIES; i++) {
		char err[256];
		json_t *j = json_loads(policy_json[i], 0, NULL);
		if (!j || net_policy_parse(j, &policies[i], err, sizeof(err)) < 0)
			BUG("policy %d: %s", i, j ? err : "not JSON");
		json_decref(j);
	}
}

/* A name a lookup may go out for: labels of [a-z0-9_-], dot-separated. */
static int hostname(const char *n)
{
	size_t len = strlen(n);
	if (!len || n[0] == '.' || strstr(n, ".."))
		return 0;
	return strspn(n, "abcdefghijklmnopqrstuvwxyz0123456789-_.") == len;
}

static int ends_with(const char *n, const char *tail)
{
	size_t a = strlen(n), b = strlen(tail);
	return a > b && !strcmp(n + a - b, tail);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	load_policies();
	if (size < 1)
		return 0;
	int pi = data[0] % NPOLICIES;
	struct dns_query q;
	enum dns_verdict v = dns_query_read(data + 1, size - 1, &policies[pi], &q);
	if (v == DNS_DROP) {
		if (q.pkt || q.name)
			BUG("dropped, but the query is held");
		return 0;
	}
	if (!q.pkt)
		BUG("verdict %d with no packet", v);
	if (v != DNS_REFUSE && v != DNS_EMPTY && v != DNS_ASK)
		BUG("verdict %d", v);
	const char *n = q.name;
	if (n) {
		size_t len = strlen(n);
		for (size_t i = 0; i < len; i++)
			if (n[i] >= 'A' && n[i] <= 'Z')
				BUG("'%s' is not lower case", n);
		/* A byte ldns escaped (a dot or NUL inside a label: "a\.b")
		 * is in no hostname: every policy refuses it. Else the name
		 * ends in no dot (one escaped, "versio\.", is the label's). */
		if (strchr(n, '\\') && v != DNS_REFUSE)
			BUG("'%s' let through", n);
		if (!strchr(n, '\\') && len && n[len - 1] == '.')
			BUG("'%s' ends in a dot", n);
	}
	if (v != DNS_REFUSE) {
		if (!n)
			BUG("verdict %d with no name", v);
		if (pi == DENY_ALL)
			BUG("deny-all let '%s' through", n);
		if ((pi == HOSTS || pi == STAR) && !hostname(n))
			BUG("'%s' let through", n);
		if (pi == HOSTS && strcmp(n, "api.example.com") && !ends_with(n, ".pypi.org"))
			BUG("'%s' let through by api.example.com, *.pypi.org", n);
		if (pi == STAR && (!strcmp(n, "cloudflare-dns.com") || !strcmp(n, "dns.quad9.net")))
			BUG("a DNS over HTTPS endpoint let through: '%s'", n);
		if (v == DNS_EMPTY && q.type != 28 /* AAAA */ && q.cls == 1 /* IN */)
			BUG("an IN question of type %u answered empty", q.type);
		if (v == DNS_ASK && (q.type == 28 || q.cls != 1))
			BUG("type %u class %u asked of the upstream", q.type, q.cls);
	}
	dns_query_release(&q);
	if (q.pkt || q.name)
		BUG("release left the query held");
	return 0;
}
