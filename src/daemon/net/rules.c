/*
 * rules: see rules.h. Hosts are matched by the policy's own matcher
 * (policy.h), so "*.domain" and "*" mean here what they mean in
 * allowedHosts.
 */
#include "daemon/net/rules.h"

#include "daemon/net/policy.h"
#include "daemon/net/secret.h"

#include <ctype.h>
#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MATCH_MAX 1024 /* bytes of a matcher's string */
#define REGEX_MAX 256

enum how { ANY, EXACT, PREFIX, REGEX };

struct matcher {
	enum how how;
	char *s;
	regex_t re;
};

struct pair {
	struct matcher key, value;
};

struct header {
	char *name, *value;
};

struct rule {
	struct net_policy host; /* custom, its one name */
	struct matcher path;
	json_t *methods;        /* NULL: any */
	struct pair *query, *headers;
	size_t nquery, nheaders;
	struct header *set;
	size_t nset;
};

struct rule_set {
	struct rule *v;
	size_t n;
};

/* --- checking the API's JSON ------------------------------------------- */

static int fail(char *err, size_t errlen, const char *where, const char *what)
{
	snprintf(err, errlen, "transformations%s: %s", where, what);
	return -EINVAL;
}

static int only_keys(const json_t *o, const char *const *keys)
{
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)o, k, v)
	{
		const char *const *w = keys;
		while (*w && strcmp(*w, k))
			w++;
		if (!*w)
			return 0;
	}
	return 1;
}

/* {"exact" | "startsWith" | "regex": string}: 0, or -EINVAL. */
static int check_matcher(const json_t *m, const char *where, char *err, size_t errlen)
{
	static const char *const keys[] = { "exact", "startsWith", "regex", NULL };
	char at[128];
	if (!json_is_object(m) || json_object_size(m) != 1 || !only_keys(m, keys))
		return fail(err, errlen, where,
			    "a matcher is an object with one of exact, startsWith or regex");
	const char *k = json_object_iter_key(json_object_iter((json_t *)m));
	const char *s = json_string_value(json_object_get(m, k));
	snprintf(at, sizeof(at), "%s.%s", where, k);
	if (!s || strlen(s) > MATCH_MAX)
		return fail(err, errlen, at, "a string of at most 1024 bytes");
	if (!strcmp(k, "regex")) {
		regex_t re;
		if (strlen(s) > REGEX_MAX || regcomp(&re, s, REG_EXTENDED | REG_NOSUB) != 0)
			return fail(err, errlen, at,
				    "not a POSIX extended regular expression of at most 256 bytes");
		regfree(&re);
	}
	return 0;
}

/* [{"key": matcher, "value": matcher}, ...] */
static int check_pairs(const json_t *a, const char *where, char *err, size_t errlen)
{
	static const char *const keys[] = { "key", "value", NULL };
	if (!json_is_array(a) || json_array_size(a) > RULE_MAX_HEADERS)
		return fail(err, errlen, where, "an array of at most 16 {key, value} matchers");
	size_t i;
	json_t *e;
	json_array_foreach(a, i, e)
	{
		char at[128];
		snprintf(at, sizeof(at), "%s[%zu]", where, i);
		if (!json_is_object(e) || !only_keys(e, keys) || !json_object_size(e))
			return fail(err, errlen, at, "an object with key, value or both");
		for (const char *const *k = keys; *k; k++) {
			char sub[160];
			snprintf(sub, sizeof(sub), "%s.%s", at, *k);
			json_t *m = json_object_get(e, *k);
			if (m && check_matcher(m, sub, err, errlen) < 0)
				return -EINVAL;
		}
	}
	return 0;
}

static int token_char(int c)
{
	return isalnum(c) || strchr("!#$%&'*+-.^_`|~", c);
}

/* Headers a rule may not set: they frame the request, route it or are
 * the proxy's own. */
static int framing(const char *name)
{
	static const char *const no[] = { "host", "content-length", "transfer-encoding",
					  "connection", "upgrade", "te", "trailer", "expect",
					  "keep-alive", "proxy-connection", "http2-settings", NULL };
	for (const char *const *n = no; *n; n++)
		if (!strcasecmp(name, *n))
			return 1;
	return 0;
}

/* {"headers": {name: value}} into out (names lower-cased). */
static int check_transform(const json_t *t, const char *where, json_t *out, char *err,
			   size_t errlen)
{
	static const char *const keys[] = { "headers", NULL };
	json_t *h = json_object_get(t, "headers");
	if (!json_is_object(t) || !only_keys(t, keys) || !json_is_object(h) ||
	    !json_object_size(h) || json_object_size(h) > RULE_MAX_HEADERS)
		return fail(err, errlen, where, "transform is {\"headers\": {name: value}} with 1 "
						"to 16 headers");
	const char *k;
	json_t *v;
	json_object_foreach(h, k, v)
	{
		char name[72], at[192];
		size_t n = strlen(k);
		snprintf(at, sizeof(at), "%s.headers.%.64s", where, k);
		if (n < 1 || n > 64)
			return fail(err, errlen, at, "a header's name is 1 to 64 bytes");
		for (size_t i = 0; i < n; i++) {
			if (!token_char((unsigned char)k[i]))
				return fail(err, errlen, at, "not a header's name");
			name[i] = (char)tolower((unsigned char)k[i]);
		}
		name[n] = '\0';
		if (framing(name))
			return fail(err, errlen, at, "a header that frames or routes the request "
						     "cannot be set");
		const char *s = json_string_value(v);
		size_t vl = s ? strlen(s) : 0;
		if (!s || vl > RULE_MAX_VALUE)
			return fail(err, errlen, at, "a value is a string of at most 8192 bytes");
		for (size_t i = 0; i < vl; i++)
			if ((unsigned char)s[i] < 0x20 && s[i] != '\t')
				return fail(err, errlen, at, "a value holds no control characters");
		for (size_t i = 0; i < vl; i++)
			if ((unsigned char)s[i] > 0x7e)
				return fail(err, errlen, at, "a value is printable ASCII");
		for (const char *r = strstr(s, RULE_SECRET_REF); r; r = strstr(r + 1, RULE_SECRET_REF)) {
			const char *name_at = r + strlen(RULE_SECRET_REF), *end = strstr(name_at, "}}");
			char sn[72];
			if (!end || end - name_at > 64)
				return fail(err, errlen, at, "{{secret:NAME}} names a secret");
			snprintf(sn, sizeof(sn), "%.*s", (int)(end - name_at), name_at);
			if (!secret_name_ok(sn))
				return fail(err, errlen, at, "{{secret:NAME}} names a secret");
		}
		json_object_set(out, name, v);
	}
	return 0;
}

static int check_host(const json_t *host, json_t **out, char *err, size_t errlen)
{
	const char *h = json_string_value(host);
	json_t *j = json_pack("{s:s, s:[O]}", "mode", "custom", "allowedHosts", host);
	struct net_policy p;
	char why[256];
	int r = h && j && net_policy_parse(j, &p, why, sizeof(why)) == 0 ? 0 : -EINVAL;
	json_decref(j);
	if (r < 0)
		return fail(err, errlen, "[].match.host",
			    "a host name, *.domain or *, as allowedHosts spells them");
	*out = json_string(p.hosts[0]);
	net_policy_free(&p);
	return 0;
}

static int check_rule(const json_t *e, size_t i, json_t **out, char *err, size_t errlen)
{
	static const char *const keys[] = { "match", "transform", NULL };
	static const char *const mkeys[] = { "host", "path", "method", "queryString", "headers",
					     NULL };
	char at[32], sub[96];
	snprintf(at, sizeof(at), "[%zu]", i);
	json_t *m = json_object_get(e, "match"), *t = json_object_get(e, "transform");
	if (!json_is_object(e) || !only_keys(e, keys) || !json_is_object(m) || !t)
		return fail(err, errlen, at, "a rule is {\"match\": {...}, \"transform\": {...}}");
	if (!only_keys(m, mkeys))
		return fail(err, errlen, at, "match has host, path, method, queryString and headers");
	json_t *host = NULL, *headers = json_object();
	snprintf(sub, sizeof(sub), "%s.transform", at);
	int r = headers ? check_host(json_object_get(m, "host"), &host, err, errlen) : -ENOMEM;
	if (r == 0)
		r = check_transform(t, sub, headers, err, errlen);
	json_t *path = json_object_get(m, "path"), *method = json_object_get(m, "method");
	snprintf(sub, sizeof(sub), "%s.match.path", at);
	if (r == 0 && path)
		r = check_matcher(path, sub, err, errlen);
	if (r == 0 && method) {
		size_t k;
		json_t *x;
		int ok = json_is_array(method) && json_array_size(method) &&
			 json_array_size(method) <= 16;
		json_array_foreach(method, k, x)
		{
			const char *s = json_string_value(x);
			ok = ok && s && *s && strlen(s) <= 16 && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") ==
								  strlen(s);
		}
		if (!ok)
			r = fail(err, errlen, at, "match.method is an array of upper-case methods");
	}
	for (const char *const *k = (const char *const[]){ "queryString", "headers", NULL };
	     r == 0 && *k; k++) {
		snprintf(sub, sizeof(sub), "%s.match.%s", at, *k);
		json_t *a = json_object_get(m, *k);
		if (a)
			r = check_pairs(a, sub, err, errlen);
	}
	if (r == 0) {
		json_t *match = json_deep_copy(m);
		json_object_set_new(match, "host", host);
		host = NULL;
		*out = json_pack("{s:o, s:{s:o}}", "match", match, "transform", "headers", headers);
		headers = NULL;
		if (!*out)
			r = -ENOMEM;
	}
	json_decref(host);
	json_decref(headers);
	return r;
}

int rules_check(const json_t *j, json_t **out, char *err, size_t errlen)
{
	if (!json_is_array(j) || json_array_size(j) > RULES_MAX)
		return fail(err, errlen, "", "an array of at most 64 rules");
	json_t *a = json_array();
	size_t i;
	json_t *e;
	json_array_foreach(j, i, e)
	{
		json_t *rule = NULL;
		int r = a ? check_rule(e, i, &rule, err, errlen) : -ENOMEM;
		if (r < 0) {
			json_decref(a);
			return r;
		}
		json_array_append_new(a, rule);
	}
	*out = a;
	return 0;
}

json_t *rules_merge(const json_t *a, const json_t *b)
{
	json_t *out = json_deep_copy(a);
	size_t i;
	json_t *e;
	json_array_foreach(b, i, e)
	{
		json_t *same = NULL, *x;
		size_t k;
		json_array_foreach(out, k, x)
			if (json_equal(json_object_get(x, "match"), json_object_get(e, "match")))
				same = x;
		if (same)
			json_object_update(json_object_get(json_object_get(same, "transform"),
							   "headers"),
					   json_object_get(json_object_get(e, "transform"), "headers"));
		else
			json_array_append(out, e);
	}
	return out;
}

void rules_secret_names(const json_t *rules, json_t *names)
{
	size_t i;
	json_t *e;
	json_array_foreach(rules, i, e)
	{
		const char *k;
		json_t *v;
		json_object_foreach(json_object_get(json_object_get(e, "transform"), "headers"), k, v)
		{
			for (const char *r = strstr(json_string_value(v), RULE_SECRET_REF); r;
			     r = strstr(r + 1, RULE_SECRET_REF)) {
				const char *at = r + strlen(RULE_SECRET_REF), *end = strstr(at, "}}");
				if (!end)
					break;
				json_t *name = json_stringn(at, (size_t)(end - at)), *x;
				size_t n, have = 0;
				json_array_foreach(names, n, x)
					have |= json_equal(x, name);
				if (!have)
					json_array_append(names, name);
				json_decref(name);
			}
		}
	}
}

json_t *rules_redacted(const json_t *rules)
{
	json_t *out = json_deep_copy(rules);
	size_t i;
	json_t *e;
	json_array_foreach(out, i, e)
	{
		json_t *h = json_object_get(json_object_get(e, "transform"), "headers"), *v;
		const char *k;
		json_object_foreach(h, k, v)
		{
			const char *s = json_string_value(v);
			size_t n = strlen(s), p = strlen(RULE_SECRET_REF);
			int ref = n > p + 2 && !strncmp(s, RULE_SECRET_REF, p) &&
				  strstr(s, "}}") == s + n - 2;
			if (!ref)
				json_string_set(v, "***");
		}
	}
	return out;
}

/* --- the set the proxy holds ------------------------------------------- */

static int compile(const json_t *j, struct matcher *m)
{
	if (!j)
		return 0;
	const char *k = json_object_iter_key(json_object_iter((json_t *)j));
	m->how = !strcmp(k, "exact") ? EXACT : !strcmp(k, "startsWith") ? PREFIX : REGEX;
	if (!(m->s = strdup(json_string_value(json_object_get(j, k)))))
		return -ENOMEM;
	if (m->how == REGEX && regcomp(&m->re, m->s, REG_EXTENDED | REG_NOSUB) != 0) {
		free(m->s);
		m->s = NULL;
		m->how = ANY;
		return -EINVAL;
	}
	return 0;
}

static void matcher_free(struct matcher *m)
{
	if (m->how == REGEX)
		regfree(&m->re);
	free(m->s);
}

static int compile_pairs(const json_t *a, struct pair **out, size_t *n)
{
	*n = json_array_size(a);
	if (!*n)
		return 0;
	if (!(*out = calloc(*n, sizeof(**out))))
		return -ENOMEM;
	for (size_t i = 0; i < *n; i++) {
		json_t *e = json_array_get(a, i);
		int r = compile(json_object_get(e, "key"), &(*out)[i].key);
		if (r == 0)
			r = compile(json_object_get(e, "value"), &(*out)[i].value);
		if (r < 0)
			return r;
	}
	return 0;
}

static void rule_free(struct rule *x)
{
	net_policy_free(&x->host);
	matcher_free(&x->path);
	json_decref(x->methods);
	for (size_t i = 0; i < x->nquery; i++) {
		matcher_free(&x->query[i].key);
		matcher_free(&x->query[i].value);
	}
	for (size_t i = 0; i < x->nheaders; i++) {
		matcher_free(&x->headers[i].key);
		matcher_free(&x->headers[i].value);
	}
	for (size_t i = 0; i < x->nset; i++) {
		free(x->set[i].name);
		if (x->set[i].value)
			explicit_bzero(x->set[i].value, strlen(x->set[i].value));
		free(x->set[i].value);
	}
	free(x->query);
	free(x->headers);
	free(x->set);
}

void rules_free(struct rule_set *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n; i++)
		rule_free(&r->v[i]);
	free(r->v);
	free(r);
}

static int compile_rule(const json_t *e, struct rule *x, char *err, size_t errlen)
{
	json_t *m = json_object_get(e, "match");
	json_t *h = json_object_get(json_object_get(e, "transform"), "headers");
	json_t *pol = json_pack("{s:s, s:[O]}", "mode", "custom", "allowedHosts",
				json_object_get(m, "host"));
	int r = pol ? net_policy_parse(pol, &x->host, err, errlen) : -ENOMEM;
	json_decref(pol);
	if (r < 0)
		return r;
	if ((r = compile(json_object_get(m, "path"), &x->path)) < 0 ||
	    (r = compile_pairs(json_object_get(m, "queryString"), &x->query, &x->nquery)) < 0 ||
	    (r = compile_pairs(json_object_get(m, "headers"), &x->headers, &x->nheaders)) < 0)
		return r;
	x->methods = json_incref(json_object_get(m, "method"));
	if (!(x->set = calloc(json_object_size(h) + 1, sizeof(*x->set))))
		return -ENOMEM;
	const char *k;
	json_t *v;
	json_object_foreach(h, k, v)
	{
		struct header *s = &x->set[x->nset++];
		s->name = strdup(k);
		s->value = strdup(json_string_value(v));
		if (!s->name || !s->value)
			return -ENOMEM;
	}
	return 0;
}

int rules_parse(const json_t *j, struct rule_set **out, char *err, size_t errlen)
{
	json_t *checked = NULL;
	int r = rules_check(j, &checked, err, errlen);
	if (r < 0)
		return r;
	struct rule_set *s = calloc(1, sizeof(*s));
	size_t n = json_array_size(checked);
	if (s && !(s->v = calloc(n ? n : 1, sizeof(*s->v))))
		r = -ENOMEM;
	for (size_t i = 0; s && r == 0 && i < n; i++, s->n++)
		r = compile_rule(json_array_get(checked, i), &s->v[i], err, errlen);
	json_decref(checked);
	if (!s || r < 0) {
		if (r == -ENOMEM || !s)
			snprintf(err, errlen, "out of memory");
		rules_free(s);
		return s ? r : -ENOMEM;
	}
	*out = s;
	return 0;
}

/* --- matching and setting ---------------------------------------------- */

static int matches(const struct matcher *m, const char *s, size_t n, int nocase)
{
	if (m->how == ANY)
		return 1;
	size_t ml = strlen(m->s);
	if (m->how == EXACT)
		return n == ml && !(nocase ? strncasecmp : strncmp)(s, m->s, n);
	if (m->how == PREFIX)
		return n >= ml && !(nocase ? strncasecmp : strncmp)(s, m->s, ml);
	char *z = strndup(s, n);
	int ok = z && regexec(&m->re, z, 0, NULL, 0) == 0;
	free(z);
	return ok;
}

/* Does some key=value of the query q (n bytes) match p? */
static int query_has(const struct pair *p, const char *q, size_t n)
{
	for (size_t at = 0; at <= n && n;) {
		const char *amp = memchr(q + at, '&', n - at);
		size_t end = amp ? (size_t)(amp - q) : n;
		const char *eq = memchr(q + at, '=', end - at);
		size_t kl = eq ? (size_t)(eq - q) - at : end - at;
		const char *v = eq ? eq + 1 : q + end;
		size_t vl = eq ? end - at - kl - 1 : 0;
		if (matches(&p->key, q + at, kl, 0) && matches(&p->value, v, vl, 0))
			return 1;
		at = end + 1;
	}
	return 0;
}

static int header_has(const struct pair *p, const struct http1_head *h)
{
	const char *at = NULL, *line, *name, *v;
	size_t ll, nl, vl;
	while (http1_next(h, &at, &line, &ll, &name, &nl, &v, &vl))
		if (matches(&p->key, name, nl, 1) && matches(&p->value, v, vl, 0))
			return 1;
	return 0;
}

static int rule_matches(const struct rule *x, const struct http1_head *h, const char *host)
{
	if (!net_policy_host_allowed(&x->host, host))
		return 0;
	const char *q = memchr(h->target, '?', h->target_len);
	size_t pl = q ? (size_t)(q - h->target) : h->target_len;
	if (!matches(&x->path, h->target, pl, 0))
		return 0;
	if (x->methods) {
		int any = 0;
		size_t i;
		json_t *m;
		json_array_foreach(x->methods, i, m)
			any |= strlen(json_string_value(m)) == h->method_len &&
			       !strncmp(h->buf, json_string_value(m), h->method_len);
		if (!any)
			return 0;
	}
	for (size_t i = 0; i < x->nquery; i++)
		if (!query_has(&x->query[i], q ? q + 1 : "", q ? h->target_len - pl - 1 : 0))
			return 0;
	for (size_t i = 0; i < x->nheaders; i++)
		if (!header_has(&x->headers[i], h))
			return 0;
	return 1;
}

int rules_for_host(const struct rule_set *r, const char *host)
{
	for (size_t i = 0; r && i < r->n; i++)
		if (net_policy_host_allowed(&r->v[i].host, host))
			return 1;
	return 0;
}

static const char *placeholder_of(const struct secret_set *sec, const char *name, size_t n)
{
	for (size_t i = 0; sec && i < sec->n; i++)
		if (strlen(sec->v[i].name) == n && !strncmp(sec->v[i].name, name, n))
			return sec->v[i].placeholder;
	return NULL;
}

/* value with each secret's reference made its placeholder, to out (when
 * not NULL): its length, or -1 when a secret is not held. */
static long resolve(const char *value, const struct secret_set *sec, char *out)
{
	size_t o = 0, rl = strlen(RULE_SECRET_REF);
	for (const char *p = value; *p;) {
		const char *end = !strncmp(p, RULE_SECRET_REF, rl) ? strstr(p + rl, "}}") : NULL;
		if (end) {
			const char *ph = placeholder_of(sec, p + rl, (size_t)(end - p - rl));
			if (!ph)
				return -1;
			if (out)
				memcpy(out + o, ph, strlen(ph));
			o += strlen(ph);
			p = end + 2;
		} else {
			if (out)
				out[o] = *p;
			o++;
			p++;
		}
	}
	return (long)o;
}

/* Does a rule after i that holds set name too? The last one wins. */
static int set_later(const struct rule_set *r, const char *on, size_t i, const char *name)
{
	for (size_t j = i + 1; j < r->n; j++)
		for (size_t k = 0; on[j] && k < r->v[j].nset; k++)
			if (!strcmp(r->v[j].set[k].name, name))
				return 1;
	return 0;
}

char *rules_apply(const struct rule_set *r, const struct http1_head *h, const char *host,
		  const struct secret_set *sec, const char *hdrs, size_t len, size_t *outlen,
		  int *matched)
{
	/* Which rules hold, and the room their lines take. */
	char *on = calloc(r && r->n ? r->n : 1, 1);
	if (!on)
		return NULL;
	size_t need = len;
	*matched = 0;
	for (size_t i = 0; r && i < r->n; i++) {
		if (!(on[i] = (char)rule_matches(&r->v[i], h, host)))
			continue;
		++*matched;
		for (size_t k = 0; k < r->v[i].nset; k++)
			if (resolve(r->v[i].set[k].value, sec, NULL) >= 0)
				need += strlen(r->v[i].set[k].name) + 4 +
					(size_t)resolve(r->v[i].set[k].value, sec, NULL);
	}
	char *out = malloc(need + 1);
	if (!out) {
		free(on);
		return NULL;
	}
	/* The request's lines but those a rule sets (the blank line last). */
	size_t o = 0;
	for (size_t line = 0; line < len;) {
		const char *lf = memchr(hdrs + line, '\n', len - line);
		size_t end = lf ? (size_t)(lf - hdrs) + 1 : len;
		const char *colon = memchr(hdrs + line, ':', end - line);
		size_t nl = colon ? (size_t)(colon - hdrs) - line : 0;
		int drop = 0, blank = end - line <= 2;
		for (size_t i = 0; nl && r && i < r->n; i++)
			for (size_t k = 0; on[i] && k < r->v[i].nset; k++)
				drop |= strlen(r->v[i].set[k].name) == nl &&
					!strncasecmp(hdrs + line, r->v[i].set[k].name, nl);
		if (blank)
			break;
		if (!drop) {
			memcpy(out + o, hdrs + line, end - line);
			o += end - line;
		}
		line = end;
	}
	for (size_t i = 0; r && i < r->n; i++) {
		for (size_t k = 0; on[i] && k < r->v[i].nset; k++) {
			const struct header *x = &r->v[i].set[k];
			if (resolve(x->value, sec, NULL) < 0 || set_later(r, on, i, x->name))
				continue; /* a secret it does not hold: no such header */
			size_t nl = strlen(x->name);
			memcpy(out + o, x->name, nl);
			o += nl;
			memcpy(out + o, ": ", 2);
			o += 2;
			o += (size_t)resolve(x->value, sec, out + o);
			memcpy(out + o, "\r\n", 2);
			o += 2;
		}
	}
	/* The blank line, and anything after it, as it came. */
	for (size_t line = 0; line < len;) {
		const char *lf = memchr(hdrs + line, '\n', len - line);
		size_t end = lf ? (size_t)(lf - hdrs) + 1 : len;
		if (end - line <= 2) {
			memcpy(out + o, hdrs + line, len - line);
			o += len - line;
			break;
		}
		line = end;
	}
	free(on);
	*outlen = o;
	return out;
}
