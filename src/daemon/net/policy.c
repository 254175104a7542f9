/*
 * policy: parses a sandbox's network policy and judges names and addresses
 * against it. The fixed ranges stay strings, as nftables wants them, and
 * are parsed on each check: a dozen inet_pton calls per DNS answer cost
 * nothing and keep this file free of shared state.
 *
 * Details the header leaves open: duplicate hosts and CIDRs are dropped; a
 * key that is present counts, even as [] (allowedHosts: [] with allow-all is
 * refused); a queried name that is no valid host name is never allowed.
 */
#include "daemon/net/policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define NAME_MAX_LEN  253
#define LABEL_MAX_LEN 63
#define SHOWN_MAX     64 /* bytes of a refused value an error shows */

/* In enum order: the parser looks modes up here. */
static const char *const mode_names[] = { "allow-all", "deny-all", "custom" };
static const char *const known_keys[] = { "mode", "allowedHosts", "allowedCIDRs", "deniedCIDRs",
					  NULL };

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt,
						      ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (err && errlen)
		vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* A client's string as an error shows it: printable ASCII, cut short, so
 * the message stays one readable line in a 400 body. */
static const char *shown(const char *s, char buf[SHOWN_MAX + 4])
{
	size_t i = 0;
	for (; s[i] && i < SHOWN_MAX; i++)
		buf[i] = s[i] >= 0x20 && s[i] < 0x7f && s[i] != '\'' ? s[i] : '?';
	strcpy(buf + i, s[i] ? "..." : "");
	return buf;
}

/* Labels of [a-z0-9_-], 1..63 bytes, no '-' at either end; 253 in all. */
static int name_ok(const char *s)
{
	size_t len = strlen(s), n = 0;
	if (len == 0 || len > NAME_MAX_LEN)
		return 0;
	for (size_t i = 0; i <= len; i++) {
		char c = s[i];
		if (c == '.' || c == '\0') {
			if (n == 0 || n > LABEL_MAX_LEN || s[i - 1] == '-' || s[i - n] == '-')
				return 0;
			n = 0;
		} else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr("_-", c)) {
			n++;
		} else {
			return 0;
		}
	}
	return 1;
}

/* s in lower case (ASCII only), one trailing dot dropped: 0, or -EINVAL
 * when that is empty or too long for a name. */
static int fold_name(const char *s, char out[NAME_MAX_LEN + 1])
{
	size_t len = strlen(s);
	if (len && s[len - 1] == '.')
		len--;
	if (len == 0 || len > NAME_MAX_LEN)
		return -EINVAL;
	for (size_t i = 0; i < len; i++)
		out[i] = s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] - 'A' + 'a') : s[i];
	out[len] = '\0';
	return 0;
}

/* "a.b", "*.a.b" or "*" alone. */
static int pattern_ok(const char *h)
{
	return !strcmp(h, "*") || name_ok(strncmp(h, "*.", 2) ? h : h + 2);
}

/* inet_aton, not inet_pton: libc takes "10.1" or "0x7f.1" for addresses
 * too, and the guest's would never look those up. */
static int is_ip_literal(const char *s)
{
	struct in_addr a4;
	struct in6_addr a6;
	struct net_cidr c;
	return inet_aton(s, &a4) || inet_pton(AF_INET6, s, &a6) == 1 ||
	       (strchr(s, '/') && net_cidr_parse(s, &c) == 0);
}

static unsigned addr_bits(int family)
{
	return family == AF_INET ? 32 : family == AF_INET6 ? 128 : 0;
}

static int in_cidrs(const struct net_cidr *v, size_t n, int family, const void *addr)
{
	for (size_t i = 0; i < n; i++)
		if (net_cidr_contains(&v[i], family, addr))
			return 1;
	return 0;
}

static int in_list(const char *const *list, int family, const void *addr)
{
	struct net_cidr c;
	for (; *list; list++)
		if (net_cidr_parse(*list, &c) == 0 && net_cidr_contains(&c, family, addr))
			return 1;
	return 0;
}

/* a as an array of at most max strings, none with a NUL inside (it would
 * be judged on its first part): 0, or -EINVAL with err set. */
static int check_strings(const json_t *a, const char *key, size_t max, char *err, size_t errlen)
{
	if (!json_is_array(a))
		return fail(err, errlen, "network.%s: must be an array of strings", key);
	if (json_array_size(a) > max)
		return fail(err, errlen, "network.%s: at most %zu entries", key, max);
	for (size_t i = 0; i < json_array_size(a); i++) {
		const json_t *v = json_array_get(a, i);
		if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
			return fail(err, errlen, "network.%s[%zu]: must be a string", key, i);
	}
	return 0;
}

static int parse_hosts(const json_t *a, struct net_policy *p, char *err, size_t errlen)
{
	char name[NAME_MAX_LEN + 1], sb[SHOWN_MAX + 4];
	size_t n = json_array_size(a);
	if (check_strings(a, "allowedHosts", NET_MAX_HOSTS, err, errlen) < 0)
		return -EINVAL;
	if (n && !(p->hosts = calloc(n, sizeof(*p->hosts))))
		return fail(err, errlen, "network.allowedHosts: out of memory");
	for (size_t i = 0; i < n; i++) {
		const char *s = json_string_value(json_array_get(a, i));
		int folded = fold_name(s, name) == 0;
		const char *why = NULL;
		if (folded && is_ip_literal(name))
			why = "is an IP address: use allowedCIDRs";
		else if (!folded || !pattern_ok(name))
			why = "is not a host name or *.domain pattern";
		if (why)
			return fail(err, errlen, "network.allowedHosts[%zu]: '%s' %s", i,
				    shown(s, sb), why);
		size_t k = 0;
		while (k < p->nhosts && strcmp(p->hosts[k], name))
			k++;
		if (k < p->nhosts)
			continue;
		if (!(p->hosts[k] = strdup(name)))
			return fail(err, errlen, "network.allowedHosts: out of memory");
		p->nhosts++;
	}
	return 0;
}

static int parse_cidrs(const json_t *a, const char *key, struct net_cidr **v, size_t *nv, char *err,
		       size_t errlen)
{
	char sb[SHOWN_MAX + 4];
	size_t n = json_array_size(a);
	if (check_strings(a, key, NET_MAX_CIDRS, err, errlen) < 0)
		return -EINVAL;
	if (n && !(*v = calloc(n, sizeof(**v))))
		return fail(err, errlen, "network.%s: out of memory", key);
	for (size_t i = 0; i < n; i++) {
		const char *s = json_string_value(json_array_get(a, i));
		struct net_cidr c;
		if (net_cidr_parse(s, &c) < 0)
			return fail(err, errlen,
				    "network.%s[%zu]: '%s' is not a CIDR such as 10.0.0.0/8 or "
				    "2001:db8::/32 (with no host bits set)",
				    key, i, shown(s, sb));
		size_t k = 0;
		while (k < *nv && memcmp(&(*v)[k], &c, sizeof(c)))
			k++;
		if (k == *nv)
			(*v)[(*nv)++] = c;
	}
	return 0;
}

int net_policy_parse(const json_t *j, struct net_policy *out, char *err, size_t errlen)
{
	char sb[SHOWN_MAX + 4];
	const char *key, *mode;
	json_t *v;
	unsigned m = 0;
	memset(out, 0, sizeof(*out));
	if (!json_is_object(j))
		return fail(err, errlen, "network: must be an object");
	/* jansson iterates only a mutable object; nothing is changed */
	json_object_foreach ((json_t *)j, key, v) {
		size_t k = 0;
		while (known_keys[k] && strcmp(known_keys[k], key))
			k++;
		if (!known_keys[k])
			return fail(err, errlen, "network: unknown key '%s'", shown(key, sb));
	}
	if (!(mode = json_string_value(json_object_get(j, "mode"))))
		return fail(err, errlen, "network.mode: required: allow-all, deny-all or custom");
	while (m <= NET_CUSTOM && strcmp(mode, mode_names[m]))
		m++;
	if (m > NET_CUSTOM)
		return fail(err, errlen, "network.mode: '%s' is not allow-all, deny-all or custom",
			    shown(mode, sb));
	const json_t *hosts = json_object_get(j, "allowedHosts");
	const json_t *allow = json_object_get(j, "allowedCIDRs");
	const json_t *deny = json_object_get(j, "deniedCIDRs");
	if (m != NET_CUSTOM && (hosts || allow))
		return fail(err, errlen, "network.%s: only with mode custom",
			    hosts ? "allowedHosts" : "allowedCIDRs");
	if (hosts && parse_hosts(hosts, out, err, errlen) < 0)
		goto fail;
	if (allow && parse_cidrs(allow, "allowedCIDRs", &out->allow, &out->nallow, err, errlen) < 0)
		goto fail;
	if (deny && parse_cidrs(deny, "deniedCIDRs", &out->deny, &out->ndeny, err, errlen) < 0)
		goto fail;
	if (m == NET_CUSTOM && !out->nhosts && !out->nallow) {
		fail(err, errlen, "network: a custom policy must allow at least one host or CIDR");
		goto fail;
	}
	out->mode = (enum net_mode)m; /* last: a failed parse leaves *out zeroed */
	return 0;
fail:
	net_policy_free(out);
	return -EINVAL;
}

static json_t *strings_json(const struct net_policy *p, const struct net_cidr *v, size_t n)
{
	char buf[INET6_ADDRSTRLEN + 4];
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++) {
		if (v)
			net_cidr_format(&v[i], buf, sizeof(buf));
		if (json_array_append_new(a, json_string(v ? buf : p->hosts[i])) < 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

json_t *net_policy_json(const struct net_policy *p)
{
	if ((unsigned)p->mode > NET_CUSTOM)
		return NULL;
	/* set_new fails on a NULL value: a helper's failure lands here too */
	json_t *o = json_object();
	int bad = !o || json_object_set_new(o, "mode", json_string(mode_names[p->mode]));
	if (!bad && p->nhosts)
		bad = json_object_set_new(o, "allowedHosts", strings_json(p, NULL, p->nhosts));
	if (!bad && p->nallow)
		bad = json_object_set_new(o, "allowedCIDRs", strings_json(p, p->allow, p->nallow));
	if (!bad && p->ndeny)
		bad = json_object_set_new(o, "deniedCIDRs", strings_json(p, p->deny, p->ndeny));
	if (bad) {
		json_decref(o);
		return NULL;
	}
	return o;
}

void net_policy_free(struct net_policy *p)
{
	for (size_t i = 0; p->hosts && i < p->nhosts; i++)
		free(p->hosts[i]);
	free(p->hosts);
	free(p->allow);
	free(p->deny);
	memset(p, 0, sizeof(*p));
}

int net_policy_host_allowed(const struct net_policy *p, const char *name)
{
	char n[NAME_MAX_LEN + 1];
	if (!name || fold_name(name, n) < 0 || !name_ok(n) || p->mode == NET_DENY_ALL)
		return 0;
	if (p->mode == NET_ALLOW_ALL)
		return 1;
	size_t len = strlen(n);
	for (size_t i = 0; i < p->nhosts; i++) {
		const char *h = p->hosts[i], *base = h + 2;
		size_t blen = strlen(h) - 2;
		if (!strcmp(h, "*") || !strcmp(h, n))
			return 1;
		/* "*.b": a name that ends in ".b", with a label before it */
		if (!strncmp(h, "*.", 2) && len > blen + 1 && n[len - blen - 1] == '.' &&
		    !strcmp(n + len - blen, base))
			return 1;
	}
	return 0;
}

/* What no allow reaches: the fixed ranges and the policy's deniedCIDRs. */
static int refused(const struct net_policy *p, int family, const void *addr)
{
	return !addr || !addr_bits(family) || in_list(net_always_denied, family, addr) ||
	       in_cidrs(p->deny, p->ndeny, family, addr);
}

int net_policy_addr_allowed(const struct net_policy *p, int family, const void *addr)
{
	if (refused(p, family, addr) || p->mode == NET_DENY_ALL)
		return 0;
	if (p->mode == NET_CUSTOM)
		return in_cidrs(p->allow, p->nallow, family, addr);
	return !in_list(net_private_ranges, family, addr);
}

int net_policy_resolved_allowed(const struct net_policy *p, int family, const void *addr)
{
	if (refused(p, family, addr) || p->mode == NET_DENY_ALL)
		return 0;
	/* The name was allowed; where its answer points can still be wrong,
	 * a private address most of all (DNS rebinding). */
	if (in_list(net_private_ranges, family, addr))
		return in_cidrs(p->allow, p->nallow, family, addr);
	return 1;
}
