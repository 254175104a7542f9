/* Unit tests for the network policy: parsing, names, CIDRs, verdicts. */
#include "daemon/net/policy.h"
#include "tests/lib/tap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Parses the JSON text js into p; a text that is no JSON fails the check. */
static int parse(const char *js, struct net_policy *p, char *err, size_t errlen)
{
	json_error_t je;
	json_t *j = json_loads(js, JSON_ALLOW_NUL, &je);
	if (!CHECK(j)) {
		t_note("bad test JSON: %s: %s", js, je.text);
		memset(p, 0, sizeof(*p));
		return -1000;
	}
	err[0] = '\0';
	int r = net_policy_parse(j, p, err, errlen);
	json_decref(j);
	return r;
}

/* Parses js, which must be accepted. */
static int parse_ok(const char *js, struct net_policy *p)
{
	char err[256];
	int r = parse(js, p, err, sizeof(err));
	if (!CHECK(r == 0))
		t_note("%s: %d %s", js, r, err);
	return r == 0;
}

static int zeroed(const struct net_policy *p)
{
	return p->mode == 0 && !p->hosts && !p->nhosts && !p->allow && !p->nallow && !p->deny &&
	       !p->ndeny;
}

/* js must be refused with -EINVAL, an error on one line that holds want,
 * and *out left zeroed. */
static void refused(const char *js, const char *want)
{
	struct net_policy p;
	char err[256];
	memset(&p, 0x5a, sizeof(p)); /* parse must not rely on a zeroed *out */
	int r = parse(js, &p, err, sizeof(err));
	if (!CHECK(r == -EINVAL) || !CHECK(strstr(err, want)) || !CHECK(!strchr(err, '\n')))
		t_note("%s: %d '%s', wanted '%s'", js, r, err, want);
	CHECK(zeroed(&p));
	net_policy_free(&p);
}

/* An address in text, for the verdict functions. */
struct ip {
	int family;
	uint8_t a[16];
};

static struct ip ip(const char *s)
{
	struct ip x = { AF_INET, { 0 } };
	if (inet_pton(AF_INET, s, x.a) != 1) {
		x.family = AF_INET6;
		if (!CHECK(inet_pton(AF_INET6, s, x.a) == 1))
			t_note("bad test address %s", s);
	}
	return x;
}

static int addr_ok(const struct net_policy *p, const char *s)
{
	struct ip x = ip(s);
	return net_policy_addr_allowed(p, x.family, x.a);
}

static int resolved_ok(const struct net_policy *p, const char *s)
{
	struct ip x = ip(s);
	return net_policy_resolved_allowed(p, x.family, x.a);
}

static void test_modes(void)
{
	struct net_policy p;
	if (parse_ok("{\"mode\": \"allow-all\"}", &p))
		CHECK(p.mode == NET_ALLOW_ALL && !p.nhosts && !p.nallow && !p.ndeny);
	net_policy_free(&p);
	if (parse_ok("{\"mode\": \"deny-all\", \"deniedCIDRs\": [\"1.2.3.0/24\"]}", &p))
		CHECK(p.mode == NET_DENY_ALL && p.ndeny == 1 && p.deny[0].prefix == 24);
	net_policy_free(&p);
	if (parse_ok("{\"mode\": \"allow-all\", \"deniedCIDRs\": [\"1.2.3.4\"]}", &p))
		CHECK(p.mode == NET_ALLOW_ALL && p.ndeny == 1 && p.deny[0].prefix == 32);
	net_policy_free(&p);
	if (parse_ok("{\"mode\": \"custom\", \"allowedHosts\": [\"a.com\"]}", &p))
		CHECK(p.mode == NET_CUSTOM && p.nhosts == 1 && !strcmp(p.hosts[0], "a.com"));
	net_policy_free(&p);
	if (parse_ok("{\"mode\": \"custom\", \"allowedCIDRs\": [\"2001:db8::/32\"]}", &p))
		CHECK(p.mode == NET_CUSTOM && p.nallow == 1 && p.allow[0].family == AF_INET6);
	net_policy_free(&p);
	CHECK(zeroed(&p));
}

static void test_bad_policies(void)
{
	refused("[]", "network: must be an object");
	refused("{}", "network.mode: required");
	refused("{\"mode\": 1}", "network.mode: required");
	refused("{\"mode\": \"open\"}",
		"network.mode: 'open' is not allow-all, deny-all or custom");
	refused("{\"mode\": \"Allow-All\"}", "'Allow-All'");
	refused("{\"mode\": \"allow-all\", \"allowHosts\": []}",
		"network: unknown key 'allowHosts'");
	refused("{\"mode\": \"allow-all\", \"allowedHosts\": [\"a.com\"]}",
		"network.allowedHosts: only with mode custom");
	refused("{\"mode\": \"allow-all\", \"allowedHosts\": []}", "only with mode custom");
	refused("{\"mode\": \"deny-all\", \"allowedCIDRs\": [\"1.2.3.4\"]}",
		"network.allowedCIDRs: only with mode custom");
	refused("{\"mode\": \"custom\"}", "a custom policy must allow at least one host or CIDR");
	refused("{\"mode\": \"custom\", \"allowedHosts\": [], \"deniedCIDRs\": [\"1.2.3.4\"]}",
		"a custom policy must allow at least one host or CIDR");
	refused("{\"mode\": \"custom\", \"allowedHosts\": \"a.com\"}",
		"network.allowedHosts: must be an array of strings");
	refused("{\"mode\": \"custom\", \"allowedHosts\": [\"a.com\", 7]}",
		"network.allowedHosts[1]: must be a string");
	refused("{\"mode\": \"custom\", \"allowedHosts\": [\"a.com\\u0000.evil.org\"]}",
		"network.allowedHosts[0]: must be a string");
	refused("{\"mode\": \"custom\", \"allowedCIDRs\": [\"10.0.0.0/8\", \"nope\"]}",
		"network.allowedCIDRs[1]: 'nope' is not a CIDR");
	refused("{\"mode\": \"allow-all\", \"deniedCIDRs\": [\"10.0.0.1/8\"]}",
		"network.deniedCIDRs[0]: '10.0.0.1/8' is not a CIDR");
	refused("{\"mode\": \"allow-all\", \"deniedCIDRs\": null}",
		"network.deniedCIDRs: must be an array");
	/* A failure after some entries were kept frees them (LSan sees). */
	refused("{\"mode\": \"custom\", \"allowedHosts\": [\"a.com\", \"b.com\"],"
		" \"allowedCIDRs\": [\"10.0.0.0/8\"], \"deniedCIDRs\": [\"x\"]}",
		"network.deniedCIDRs[0]");
}

static void test_host_parse(void)
{
	struct net_policy p;
	if (parse_ok("{\"mode\": \"custom\", \"allowedHosts\": [\"Example.COM.\", \"*.Foo.org\","
		     " \"*\", \"_dmarc.x-y.com\", \"a.com\", \"a.com.\", \"A.COM\"]}",
		     &p) &&
	    CHECK(p.nhosts == 5)) {
		CHECK(!strcmp(p.hosts[0], "example.com"));
		CHECK(!strcmp(p.hosts[1], "*.foo.org"));
		CHECK(!strcmp(p.hosts[2], "*"));
		CHECK(!strcmp(p.hosts[3], "_dmarc.x-y.com"));
		CHECK(!strcmp(p.hosts[4], "a.com"));
	}
	net_policy_free(&p);

	char label63[64], name253[254], js[400];
	memset(label63, 'a', 63);
	label63[63] = '\0';
	/* 63 + 1 + 63 + 1 + 63 + 1 + 61 = 253 */
	snprintf(name253, sizeof(name253), "%s.%s.%s.%.61s", label63, label63, label63, label63);
	CHECK(strlen(name253) == 253);
	snprintf(js, sizeof(js), "{\"mode\": \"custom\", \"allowedHosts\": [\"%s.com\", \"%s\"]}",
		 label63, name253);
	if (parse_ok(js, &p))
		CHECK(p.nhosts == 2);
	net_policy_free(&p);

	refused("{\"mode\": \"custom\", \"allowedHosts\": [\"ok.com\", \"a..b\"]}",
		"network.allowedHosts[1]: 'a..b' is not a host name or *.domain pattern");
	static const char *const bad[] = {
		"", ".", "-a.com", "a-.com", "a.-b.com", "a b.com", "exa$mple.com", "*.*.com",
		"a.*.com", "*com", "**", "*a.com", ".a.com", "a.com..", "[a.com]", "\xc3\xbc.com",
		"a/b.com",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(js, sizeof(js), "{\"mode\": \"custom\", \"allowedHosts\": [\"%s\"]}",
			 bad[i]);
		refused(js, "is not a host name or *.domain pattern");
	}
	snprintf(js, sizeof(js), "{\"mode\": \"custom\", \"allowedHosts\": [\"%sa.com\"]}",
		 label63);
	refused(js, "is not a host name"); /* a 64-byte label */
	snprintf(js, sizeof(js), "{\"mode\": \"custom\", \"allowedHosts\": [\"a%s\"]}", name253);
	refused(js, "is not a host name"); /* 254 bytes */

	refused("{\"mode\": \"custom\", \"allowedHosts\": [\"1.2.3.4\"]}",
		"network.allowedHosts[0]: '1.2.3.4' is an IP address: use allowedCIDRs");
	refused("{\"mode\": \"custom\", \"allowedHosts\": [\"::1\"]}", "use allowedCIDRs");
	refused("{\"mode\": \"custom\", \"allowedHosts\": [\"2001:DB8::1\"]}", "use allowedCIDRs");
	refused("{\"mode\": \"custom\", \"allowedHosts\": [\"10.0.0.0/8\"]}", "use allowedCIDRs");
	refused("{\"mode\": \"custom\", \"allowedHosts\": [\"127.1\"]}", "use allowedCIDRs");

	/* What a client sent is shown tamed: no control bytes, cut short. */
	refused("{\"mode\": \"custom\", \"allowedHosts\": [\"a\\nb\"]}", "'a?b' is not");
	char longname[301];
	memset(longname, 'x', 300);
	longname[300] = '\0';
	snprintf(js, sizeof(js), "{\"mode\": \"custom\", \"allowedHosts\": [\"%s\"]}", longname);
	refused(js, "xxx...' is not a host name");
}

static void test_wildcards(void)
{
	struct net_policy p;
	if (parse_ok("{\"mode\": \"custom\", \"allowedHosts\": [\"*.example.com\","
		     " \"api.openai.com\"]}",
		     &p)) {
		CHECK(net_policy_host_allowed(&p, "a.example.com"));
		CHECK(net_policy_host_allowed(&p, "A.B.Example.COM."));
		CHECK(!net_policy_host_allowed(&p, "example.com"));
		CHECK(!net_policy_host_allowed(&p, "example.com."));
		CHECK(!net_policy_host_allowed(&p, "badexample.com"));
		CHECK(!net_policy_host_allowed(&p, ".example.com"));
		CHECK(!net_policy_host_allowed(&p, "example.com.evil.org"));
		CHECK(!net_policy_host_allowed(&p, "a.example.com.."));
		CHECK(net_policy_host_allowed(&p, "API.openai.com."));
		CHECK(!net_policy_host_allowed(&p, "x.api.openai.com"));
		CHECK(!net_policy_host_allowed(&p, "openai.com"));
		CHECK(!net_policy_host_allowed(&p, "api.openai.co"));
		CHECK(!net_policy_host_allowed(&p, ""));
		CHECK(!net_policy_host_allowed(&p, "."));
		CHECK(!net_policy_host_allowed(&p, NULL));
	}
	net_policy_free(&p);

	char name[300];
	memset(name, 'a', sizeof(name));
	for (int i = 63; i < 253; i += 64)
		name[i] = '.';
	if (parse_ok("{\"mode\": \"custom\", \"allowedHosts\": [\"*\"]}", &p)) {
		CHECK(net_policy_host_allowed(&p, "anything.at.all"));
		CHECK(net_policy_host_allowed(&p, "localhost"));
		name[253] = '\0';
		CHECK(net_policy_host_allowed(&p, name));
		name[253] = '.', name[254] = '\0'; /* 253 and a trailing dot */
		CHECK(net_policy_host_allowed(&p, name));
		name[253] = 'a';
		CHECK(!net_policy_host_allowed(&p, name)); /* 254 */
		CHECK(!net_policy_host_allowed(&p, ""));
		CHECK(!net_policy_host_allowed(&p, "bad name"));
	}
	net_policy_free(&p);

	if (parse_ok("{\"mode\": \"allow-all\"}", &p)) {
		CHECK(net_policy_host_allowed(&p, "example.com"));
		CHECK(net_policy_host_allowed(&p, "X.Y.Z."));
		CHECK(!net_policy_host_allowed(&p, ""));
		CHECK(!net_policy_host_allowed(&p, "a..b"));
		name[253] = 'a', name[254] = '\0';
		CHECK(!net_policy_host_allowed(&p, name));
	}
	net_policy_free(&p);

	if (parse_ok("{\"mode\": \"deny-all\"}", &p)) {
		CHECK(!net_policy_host_allowed(&p, "example.com"));
		CHECK(!net_policy_host_allowed(&p, "a"));
	}
	net_policy_free(&p);

	/* A custom policy of CIDRs alone allows no name. */
	if (parse_ok("{\"mode\": \"custom\", \"allowedCIDRs\": [\"0.0.0.0/0\"]}", &p))
		CHECK(!net_policy_host_allowed(&p, "example.com"));
	net_policy_free(&p);
}

/* s parses and formats as want. */
static void cidr_is(const char *s, const char *want, int family, unsigned prefix)
{
	struct net_cidr c;
	char out[INET6_ADDRSTRLEN + 4] = "";
	int r = net_cidr_parse(s, &c);
	if (CHECK(r == 0)) {
		net_cidr_format(&c, out, sizeof(out));
		CHECK(c.family == family && c.prefix == prefix);
	}
	if (!CHECK(!strcmp(out, want)))
		t_note("%s: %d '%s', wanted '%s'", s, r, out, want);
}

static int contains(const char *cidr, const char *addr)
{
	struct net_cidr c;
	struct ip x = ip(addr);
	if (!CHECK(net_cidr_parse(cidr, &c) == 0))
		return -1;
	return net_cidr_contains(&c, x.family, x.a);
}

static void test_cidr(void)
{
	cidr_is("10.0.0.0/8", "10.0.0.0/8", AF_INET, 8);
	cidr_is("1.2.3.4", "1.2.3.4/32", AF_INET, 32);
	cidr_is("1.2.3.4/32", "1.2.3.4/32", AF_INET, 32);
	cidr_is("0.0.0.0/0", "0.0.0.0/0", AF_INET, 0);
	cidr_is("172.16.0.0/12", "172.16.0.0/12", AF_INET, 12);
	cidr_is("2001:DB8:0:0::/32", "2001:db8::/32", AF_INET6, 32);
	cidr_is("::1", "::1/128", AF_INET6, 128);
	cidr_is("::/0", "::/0", AF_INET6, 0);
	cidr_is("fe80::/10", "fe80::/10", AF_INET6, 10);

	static const char *const bad[] = {
		"10.0.0.1/8", "10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/+8",
		"10.0.0.0/08", "10.0.0.0/ 8", "10.0.0.0/8 ", "10.0.0", "10.0.0.256", "010.0.0.0/8",
		"abc", "", "/8", "1.2.3.4/32x", "fe80::1%eth0", "2001:db8::1/32", "10.0.0.0/8/8",
		"10.0.0.0/1000", "fe81::/10",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct net_cidr c;
		if (!CHECK(net_cidr_parse(bad[i], &c) == -EINVAL))
			t_note("'%s' was accepted", bad[i]);
	}
	struct net_cidr c;
	CHECK(net_cidr_parse(NULL, &c) == -EINVAL);

	CHECK(contains("10.0.0.0/8", "10.255.1.1") == 1);
	CHECK(contains("10.0.0.0/8", "11.0.0.0") == 0);
	CHECK(contains("10.0.0.0/8", "9.255.255.255") == 0);
	CHECK(contains("172.16.0.0/12", "172.31.255.255") == 1);
	CHECK(contains("172.16.0.0/12", "172.32.0.0") == 0);
	CHECK(contains("172.16.0.0/12", "172.15.255.255") == 0);
	CHECK(contains("1.2.3.4", "1.2.3.4") == 1);
	CHECK(contains("1.2.3.4", "1.2.3.5") == 0);
	CHECK(contains("0.0.0.0/0", "255.1.2.3") == 1);
	CHECK(contains("0.0.0.0/0", "::1") == 0); /* families never mix */
	CHECK(contains("::/0", "1.2.3.4") == 0);
	CHECK(contains("2001:db8::/32", "2001:db8:ffff::1") == 1);
	CHECK(contains("2001:db8::/32", "2001:db9::1") == 0);
	CHECK(contains("fe80::/10", "febf::1") == 1);
	CHECK(contains("fe80::/10", "fec0::1") == 0);

	char small[8];
	CHECK(net_cidr_parse("10.0.0.0/8", &c) == 0);
	net_cidr_format(&c, small, sizeof(small));
	CHECK(!strcmp(small, "10.0.0.")); /* cut, still a string */
}

static void test_fixed_lists(void)
{
	char out[INET6_ADDRSTRLEN + 4];
	struct net_cidr c;
	size_t n = 0;
	for (const char *const *l = net_always_denied; *l; l++, n++) {
		CHECK(net_cidr_parse(*l, &c) == 0);
		net_cidr_format(&c, out, sizeof(out));
		if (!CHECK(!strcmp(out, *l)))
			t_note("%s formats as %s", *l, out);
	}
	CHECK(n >= 11);
	n = 0;
	for (const char *const *l = net_private_ranges; *l; l++, n++) {
		CHECK(net_cidr_parse(*l, &c) == 0);
		net_cidr_format(&c, out, sizeof(out));
		CHECK(!strcmp(out, *l));
		CHECK(strcmp(*l, "198.18.0.0/15") != 0);
	}
	CHECK(n == 5);

	/* No two entries overlap, in a list or across both: nftables
	 * interval sets refuse that. Overlapping CIDRs share the shorter
	 * one's network address. */
	const char *all[64];
	n = 0;
	for (const char *const *l = net_always_denied; *l; l++)
		all[n++] = *l;
	for (const char *const *l = net_private_ranges; *l; l++)
		all[n++] = *l;
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < n; k++) {
			struct net_cidr a, b;
			if (i == k || net_cidr_parse(all[i], &a) || net_cidr_parse(all[k], &b))
				continue;
			if (!CHECK(!net_cidr_contains(&a, b.family, b.addr)))
				t_note("%s overlaps %s", all[i], all[k]);
		}
}

static void test_addr_allowed(void)
{
	struct net_policy p;
	if (parse_ok("{\"mode\": \"allow-all\"}", &p)) {
		CHECK(addr_ok(&p, "8.8.8.8"));
		CHECK(addr_ok(&p, "198.18.0.1"));
		CHECK(addr_ok(&p, "2001:4860:4860::8888"));
		static const char *const no[] = {
			"10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "127.0.0.1",
			"127.255.255.254", "0.0.0.0", "169.254.169.254", "192.0.0.1", "224.0.0.1",
			"239.255.255.250", "240.0.0.1", "255.255.255.255", "::", "::1",
			"::ffff:127.0.0.1", "::ffff:8.8.8.8", "fe80::1", "ff02::1", "fd00::1",
			"fc00::1", "100::1",
		};
		for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
			if (!CHECK(!addr_ok(&p, no[i])))
				t_note("allow-all reaches %s", no[i]);
		uint8_t a[4] = { 8, 8, 8, 8 };
		CHECK(!net_policy_addr_allowed(&p, AF_UNIX, a));
		CHECK(!net_policy_addr_allowed(&p, AF_INET, NULL));
	}
	net_policy_free(&p);

	if (parse_ok("{\"mode\": \"deny-all\"}", &p))
		CHECK(!addr_ok(&p, "8.8.8.8") && !addr_ok(&p, "2001:4860:4860::8888"));
	net_policy_free(&p);

	/* Everything named: still none of what no policy reaches. */
	if (parse_ok("{\"mode\": \"custom\", \"allowedCIDRs\": [\"0.0.0.0/0\", \"::/0\"]}", &p)) {
		CHECK(addr_ok(&p, "8.8.8.8"));
		CHECK(addr_ok(&p, "10.1.2.3")); /* private, and named */
		CHECK(addr_ok(&p, "2001:db8::1"));
		CHECK(!addr_ok(&p, "127.0.0.1"));
		CHECK(!addr_ok(&p, "169.254.169.254"));
		CHECK(!addr_ok(&p, "0.1.2.3"));
		CHECK(!addr_ok(&p, "255.255.255.255"));
		CHECK(!addr_ok(&p, "::1"));
		CHECK(!addr_ok(&p, "::ffff:169.254.169.254"));
		CHECK(!addr_ok(&p, "fe80::1"));
		CHECK(!resolved_ok(&p, "127.0.0.1"));
	}
	net_policy_free(&p);

	if (parse_ok("{\"mode\": \"custom\", \"allowedCIDRs\": [\"198.18.0.0/15\"]}", &p)) {
		CHECK(addr_ok(&p, "198.18.1.1"));
		CHECK(addr_ok(&p, "198.19.255.255"));
		CHECK(!addr_ok(&p, "198.20.0.0"));
		CHECK(!addr_ok(&p, "8.8.8.8"));
		CHECK(!addr_ok(&p, "10.1.2.3"));
	}
	net_policy_free(&p);

	/* deniedCIDRs win over every allow. */
	if (parse_ok("{\"mode\": \"custom\", \"allowedCIDRs\": [\"10.0.0.0/8\"],"
		     " \"deniedCIDRs\": [\"10.1.0.0/16\"]}",
		     &p)) {
		CHECK(!addr_ok(&p, "10.1.2.3"));
		CHECK(addr_ok(&p, "10.2.0.1"));
		CHECK(!resolved_ok(&p, "10.1.2.3"));
		CHECK(resolved_ok(&p, "10.2.0.1"));
	}
	net_policy_free(&p);
	if (parse_ok(
		"{\"mode\": \"allow-all\", \"deniedCIDRs\": [\"8.8.8.0/24\", \"2001:db8::/32\"]}",
		&p)) {
		CHECK(!addr_ok(&p, "8.8.8.8"));
		CHECK(addr_ok(&p, "8.8.4.4"));
		CHECK(!addr_ok(&p, "2001:db8::1"));
		CHECK(addr_ok(&p, "2001:db9::1"));
		CHECK(!resolved_ok(&p, "8.8.8.8"));
	}
	net_policy_free(&p);
}

static void test_resolved(void)
{
	struct net_policy p;
	/* A name allowed, pointed by its DNS at the host or the metadata
	 * service or the LAN: refused (DNS rebinding). */
	if (parse_ok("{\"mode\": \"custom\", \"allowedHosts\": [\"api.example.com\"]}", &p)) {
		CHECK(resolved_ok(&p, "198.18.0.1"));
		CHECK(resolved_ok(&p, "2001:db8::1"));
		CHECK(!resolved_ok(&p, "127.0.0.1"));
		CHECK(!resolved_ok(&p, "169.254.169.254"));
		CHECK(!resolved_ok(&p, "10.1.2.3"));
		CHECK(!resolved_ok(&p, "192.168.0.10"));
		CHECK(!resolved_ok(&p, "100.100.100.100"));
		CHECK(!resolved_ok(&p, "::1"));
		CHECK(!resolved_ok(&p, "fd12::1"));
		CHECK(!resolved_ok(&p, "::ffff:10.1.2.3"));
		/* The address literally is another matter: not in allowedCIDRs. */
		CHECK(!addr_ok(&p, "198.18.0.1"));
	}
	net_policy_free(&p);

	if (parse_ok("{\"mode\": \"custom\", \"allowedHosts\": [\"api.example.com\"],"
		     " \"allowedCIDRs\": [\"10.0.0.0/8\"]}",
		     &p)) {
		CHECK(resolved_ok(&p, "10.1.2.3"));
		CHECK(!resolved_ok(&p, "192.168.1.1"));
		CHECK(!resolved_ok(&p, "127.0.0.1"));
		CHECK(!resolved_ok(&p, "169.254.169.254"));
		CHECK(resolved_ok(&p, "198.18.0.1"));
	}
	net_policy_free(&p);

	if (parse_ok("{\"mode\": \"allow-all\"}", &p)) {
		CHECK(resolved_ok(&p, "8.8.8.8"));
		CHECK(!resolved_ok(&p, "10.1.2.3"));
		CHECK(!resolved_ok(&p, "127.0.0.1"));
		CHECK(!resolved_ok(&p, "fc00::1"));
	}
	net_policy_free(&p);

	if (parse_ok("{\"mode\": \"deny-all\"}", &p))
		CHECK(!resolved_ok(&p, "8.8.8.8"));
	net_policy_free(&p);

	if (parse_ok("{\"mode\": \"custom\", \"allowedHosts\": [\"*\"],"
		     " \"deniedCIDRs\": [\"198.18.0.0/15\"]}",
		     &p)) {
		CHECK(!resolved_ok(&p, "198.18.0.1"));
		CHECK(resolved_ok(&p, "198.20.0.1"));
	}
	net_policy_free(&p);
}

static int same_policy(const struct net_policy *a, const struct net_policy *b)
{
	if (a->mode != b->mode || a->nhosts != b->nhosts || a->nallow != b->nallow ||
	    a->ndeny != b->ndeny)
		return 0;
	for (size_t i = 0; i < a->nhosts; i++)
		if (strcmp(a->hosts[i], b->hosts[i]))
			return 0;
	return (!a->nallow || !memcmp(a->allow, b->allow, a->nallow * sizeof(*a->allow))) &&
	       (!a->ndeny || !memcmp(a->deny, b->deny, a->ndeny * sizeof(*a->deny)));
}

/* js parses, prints as want (sorted keys, compact) and parses back equal. */
static void round_trip(const char *js, const char *want)
{
	struct net_policy p, q;
	memset(&q, 0, sizeof(q));
	if (!parse_ok(js, &p))
		return;
	json_t *j = net_policy_json(&p);
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	char err[256] = "";
	if (CHECK(s)) {
		if (!CHECK(!strcmp(s, want)))
			t_note("%s\n    printed %s\n    wanted  %s", js, s, want);
		int r = net_policy_parse(j, &q, err, sizeof(err));
		if (!CHECK(r == 0))
			t_note("%s: %d %s", s, r, err);
		CHECK(same_policy(&p, &q));
	}
	free(s);
	json_decref(j);
	net_policy_free(&p);
	net_policy_free(&q);
}

static void test_json(void)
{
	round_trip("{\"mode\": \"allow-all\"}", "{\"mode\":\"allow-all\"}");
	round_trip("{\"mode\": \"deny-all\", \"deniedCIDRs\": []}", "{\"mode\":\"deny-all\"}");
	round_trip("{\"mode\": \"allow-all\", \"deniedCIDRs\": [\"8.8.8.8\", \"2001:DB8::/32\"]}",
		   "{\"deniedCIDRs\":[\"8.8.8.8/32\",\"2001:db8::/32\"],\"mode\":\"allow-all\"}");
	round_trip("{\"mode\": \"custom\", \"allowedHosts\": [\"API.Example.com.\", \"*.b.org\","
		   " \"api.example.com\"], \"allowedCIDRs\": [\"10.0.0.0/8\", \"10.0.0.0/8\","
		   " \"::1\"], \"deniedCIDRs\": [\"10.1.0.0/16\"]}",
		   "{\"allowedCIDRs\":[\"10.0.0.0/8\",\"::1/128\"],"
		   "\"allowedHosts\":[\"api.example.com\",\"*.b.org\"],"
		   "\"deniedCIDRs\":[\"10.1.0.0/16\"],\"mode\":\"custom\"}");
	round_trip("{\"mode\": \"custom\", \"allowedCIDRs\": [\"0.0.0.0/0\"]}",
		   "{\"allowedCIDRs\":[\"0.0.0.0/0\"],\"mode\":\"custom\"}");
}

/* A policy of n entries under key: "a0.com".. or 10.0.n/24 networks. */
static char *many(const char *mode, const char *key, int n)
{
	size_t cap = 64 + (size_t)n * 24, len = 0;
	char *s = malloc(cap);
	if (!CHECK(s))
		abort();
	len += (size_t)snprintf(s + len, cap - len, "{\"mode\": \"%s\", \"%s\": [", mode, key);
	for (int i = 0; i < n; i++) {
		if (!strcmp(key, "allowedHosts"))
			len +=
			    (size_t)snprintf(s + len, cap - len, "%s\"a%d.com\"", i ? "," : "", i);
		else
			len += (size_t)snprintf(s + len, cap - len, "%s\"10.%d.%d.0/24\"",
						i ? "," : "", i / 256, i % 256);
	}
	snprintf(s + len, cap - len, "]}");
	return s;
}

static void test_caps(void)
{
	struct net_policy p;
	char *s = many("custom", "allowedHosts", NET_MAX_HOSTS);
	if (parse_ok(s, &p))
		CHECK(p.nhosts == NET_MAX_HOSTS && net_policy_host_allowed(&p, "a255.com"));
	net_policy_free(&p);
	free(s);
	s = many("custom", "allowedHosts", NET_MAX_HOSTS + 1);
	refused(s, "network.allowedHosts: at most 256 entries");
	free(s);

	s = many("custom", "allowedCIDRs", NET_MAX_CIDRS);
	if (parse_ok(s, &p))
		CHECK(p.nallow == NET_MAX_CIDRS && addr_ok(&p, "10.0.255.1"));
	net_policy_free(&p);
	free(s);
	s = many("custom", "allowedCIDRs", NET_MAX_CIDRS + 1);
	refused(s, "network.allowedCIDRs: at most 256 entries");
	free(s);
	s = many("deny-all", "deniedCIDRs", NET_MAX_CIDRS + 1);
	refused(s, "network.deniedCIDRs: at most 256 entries");
	free(s);
}

static void test_free(void)
{
	struct net_policy p;
	memset(&p, 0, sizeof(p));
	net_policy_free(&p);
	CHECK(zeroed(&p));
	if (parse_ok("{\"mode\": \"custom\", \"allowedHosts\": [\"a.com\"],"
		     " \"allowedCIDRs\": [\"1.2.3.4\"], \"deniedCIDRs\": [\"1.2.3.5\"]}",
		     &p))
		CHECK(p.hosts && p.allow && p.deny);
	net_policy_free(&p);
	CHECK(zeroed(&p));
	net_policy_free(&p); /* twice is fine */
	CHECK(zeroed(&p));
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "policy_modes", test_modes },
		{ "policy_bad", test_bad_policies },
		{ "policy_host_parse", test_host_parse },
		{ "policy_wildcards", test_wildcards },
		{ "policy_cidr", test_cidr },
		{ "policy_fixed_lists", test_fixed_lists },
		{ "policy_addr_allowed", test_addr_allowed },
		{ "policy_resolved", test_resolved },
		{ "policy_json", test_json },
		{ "policy_caps", test_caps },
		{ "policy_free", test_free },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
