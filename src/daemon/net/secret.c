/*
 * secret: see secret.h. Host patterns are matched by the policy's own
 * matcher (policy.h), so "*.domain" means here what it means there.
 */
#include "daemon/net/secret.h"

#include "daemon/net/policy.h"
#include "daemon/net/rules.h"

#include <openssl/evp.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int secret_name_ok(const char *name)
{
	size_t n = name ? strlen(name) : 0;
	if (n < 1 || n > 64 || isdigit((unsigned char)name[0]))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)name[i]) && name[i] != '_')
			return 0;
	return 1;
}

int secret_value_ok(const char *value, char *err, size_t errlen)
{
	size_t n = value ? strlen(value) : 0;
	if (n < 1 || n > SECRET_MAX_VALUE) {
		snprintf(err, errlen, "a secret's value is 1 to %d bytes", SECRET_MAX_VALUE);
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)value[i] < 0x20 || (unsigned char)value[i] > 0x7e) {
			snprintf(err, errlen, "a secret's value goes in a header: printable ASCII "
					      "only (byte %zu is not)", i);
			return -EINVAL;
		}
	return 0;
}

int secret_hosts_ok(const json_t *hosts, json_t **out, char *err, size_t errlen)
{
	size_t n = json_is_array(hosts) ? json_array_size(hosts) : 0;
	if (n < 1 || n > SECRET_MAX_HOSTS) {
		snprintf(err, errlen, "'hosts' is an array of 1 to %d names", SECRET_MAX_HOSTS);
		return -EINVAL;
	}
	size_t i;
	json_t *h;
	json_array_foreach(hosts, i, h)
		if (!json_is_string(h) || !strcmp(json_string_value(h), "*")) {
			snprintf(err, errlen, "'hosts' names hosts (\"api.example.com\" or "
					      "\"*.example.com\"), not every host");
			return -EINVAL;
		}
	/* The policy's parser checks and lower-cases names as it does
	 * allowedHosts. */
	json_t *pj = json_pack("{s:s, s:O}", "mode", "custom", "allowedHosts", hosts);
	struct net_policy p;
	int r = pj ? net_policy_parse(pj, &p, err, errlen) : -ENOMEM;
	json_decref(pj);
	if (r < 0)
		return r;
	json_t *a = json_array();
	for (size_t k = 0; a && k < p.nhosts; k++) {
		/* As folded ("*." is "*"), and not a whole top-level domain. */
		const char *name = p.hosts[k];
		if (!strcmp(name, "*") || (!strncmp(name, "*.", 2) && !strchr(name + 2, '.'))) {
			snprintf(err, errlen, "'hosts' names hosts, not every host or a whole "
					      "top-level domain ('%s')", name);
			json_decref(a);
			net_policy_free(&p);
			return -EINVAL;
		}
		json_array_append_new(a, json_string(name));
	}
	net_policy_free(&p);
	*out = a;
	return a ? 0 : -ENOMEM;
}

void secret_set_free(struct secret_set *s)
{
	if (!s)
		return;
	rules_free(s->rules);
	for (size_t i = 0; i < s->n; i++) {
		struct secret *x = &s->v[i];
		free(x->name);
		free(x->placeholder);
		if (x->value)
			memset(x->value, 0, strlen(x->value));
		free(x->value);
		for (size_t k = 0; k < x->nhosts; k++)
			free(x->hosts[k]);
		free(x->hosts);
	}
	free(s->v);
	free(s);
}

static int placeholder_ok(const char *p)
{
	size_t n = strlen(SECRET_PREFIX);
	if (strncmp(p, SECRET_PREFIX, n) || strlen(p) != n + 32)
		return 0;
	for (const char *c = p + n; *c; c++)
		if (!isxdigit((unsigned char)*c) || isupper((unsigned char)*c))
			return 0;
	return 1;
}

int secret_set_parse(const json_t *j, struct secret_set **out, char *err, size_t errlen)
{
	size_t n = json_is_array(j) ? json_array_size(j) : 0;
	struct secret_set *s = calloc(1, sizeof(*s));
	if (!s || !json_is_array(j) || n > SECRET_MAX) {
		snprintf(err, errlen, "secrets: an array of at most %d", SECRET_MAX);
		free(s);
		return -EINVAL;
	}
	s->refs = 1;
	s->v = calloc(n ? n : 1, sizeof(*s->v));
	int r = s->v ? 0 : -ENOMEM;
	size_t i;
	json_t *e;
	json_array_foreach(j, i, e)
	{
		if (r < 0)
			break;
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *ph = json_string_value(json_object_get(e, "placeholder"));
		const char *value = json_string_value(json_object_get(e, "value"));
		json_t *hosts = NULL;
		if (!secret_name_ok(name) || !ph || !placeholder_ok(ph)) {
			snprintf(err, errlen, "secrets[%zu]: bad name or placeholder", i);
			r = -EINVAL;
		} else if ((r = secret_value_ok(value, err, errlen)) == 0 &&
			   (r = secret_hosts_ok(json_object_get(e, "hosts"), &hosts, err, errlen)) == 0) {
			struct secret *x = &s->v[s->n++];
			x->name = strdup(name);
			x->placeholder = strdup(ph);
			x->value = strdup(value);
			x->http = json_is_true(json_object_get(e, "http"));
			x->hosts = calloc(json_array_size(hosts), sizeof(char *));
			for (size_t k = 0; x->hosts && k < json_array_size(hosts); k++)
				if ((x->hosts[x->nhosts] =
					     strdup(json_string_value(json_array_get(hosts, k)))))
					x->nhosts++;
			if (!x->name || !x->placeholder || !x->value || !x->hosts ||
			    x->nhosts != json_array_size(hosts))
				r = -ENOMEM;
		}
		json_decref(hosts);
	}
	if (r < 0) {
		secret_set_free(s);
		return r;
	}
	*out = s;
	return 0;
}

static int bound_to(const struct secret *x, const char *host)
{
	struct net_policy p = { .mode = NET_CUSTOM, .hosts = x->hosts, .nhosts = x->nhosts };
	return net_policy_host_allowed(&p, host);
}

int secret_bound(const struct secret_set *s, const char *host, int tls)
{
	for (size_t i = 0; s && i < s->n; i++)
		if (bound_to(&s->v[i], host) && (tls || s->v[i].http))
			return 1;
	return tls && s && rules_for_host(s->rules, host); /* rules: over checked TLS only */
}

/* Does the header line carry credentials? Values go only there: many
 * other headers come back in answers (Host in redirects, Origin in CORS,
 * request and trace ids, Accept in error pages). Authorization,
 * Proxy-Authorization and Cookie, and any whose name says key, token,
 * secret, auth, password or session (X-Api-Key, PRIVATE-TOKEN, ...). */
static int credential(const char *line, size_t n)
{
	const char *colon = memchr(line, ':', n);
	size_t nl = colon ? (size_t)(colon - line) : 0;
	if ((nl == 13 && !strncasecmp(line, "authorization", 13)) ||
	    (nl == 19 && !strncasecmp(line, "proxy-authorization", 19)) ||
	    (nl == 6 && !strncasecmp(line, "cookie", 6)))
		return 1;
	static const char *const words[] = { "key", "token", "secret", "auth", "password",
					     "session", NULL };
	for (const char *const *w = words; *w; w++)
		for (size_t i = 0; i + strlen(*w) <= nl; i++)
			if (!strncasecmp(line + i, *w, strlen(*w)))
				return 1;
	return 0;
}

/* The secret of s whose placeholder is at p (len bytes left), or NULL. */
static const struct secret *at_placeholder(const struct secret_set *s, const char *p, size_t len)
{
	size_t plen = strlen(SECRET_PREFIX) + 32;
	if (len < plen || memcmp(p, SECRET_PREFIX, strlen(SECRET_PREFIX)))
		return NULL;
	for (size_t k = 0; s && k < s->n; k++)
		if (!memcmp(p, s->v[k].placeholder, plen))
			return &s->v[k];
	return NULL;
}

/* Does secret x, found in a header, go in: bound to host, by TLS unless
 * it allows plain HTTP, in a header that carries credentials? Notes why
 * not. */
static int goes_in(const struct secret *x, const char *host, int tls, int in_credential,
		   struct swap_report *rep)
{
	if (!bound_to(x, host)) {
		rep->unbound = x->name;
		return 0;
	}
	if (!tls && !x->http) {
		rep->held = x->name;
		rep->why = "plain HTTP";
		return 0;
	}
	if (!in_credential) {
		rep->held = x->name;
		rep->why = "not a header that carries credentials";
		return 0;
	}
	return 1;
}

/* Copies p[0..n) to out (when not NULL; else counts only) with the
 * placeholder of every secret that goes in replaced by its value: the
 * bytes that takes. */
static size_t swap_text(const struct secret_set *s, const char *host, int tls, int in_credential,
			const char *p, size_t n, char *out, struct swap_report *rep)
{
	size_t plen = strlen(SECRET_PREFIX) + 32, o = 0;
	for (size_t i = 0; i < n;) {
		const struct secret *x = at_placeholder(s, p + i, n - i);
		if (x && goes_in(x, host, tls, in_credential, rep)) {
			size_t vl = strlen(x->value);
			if (out)
				memcpy(out + o, x->value, vl);
			o += vl;
			i += plen;
			rep->swapped++;
			rep->put = x->name;
		} else {
			if (out)
				out[o] = p[i];
			o++;
			i++;
		}
	}
	return o;
}

/* The token of an "Authorization: Basic TOKEN" line (or
 * Proxy-Authorization), or NULL: git, pip and most registries send a
 * token as the password (user:token, or token:x-oauth-basic) in base64. */
static const char *basic_token(const char *line, size_t n, size_t *tlen)
{
	const char *colon = memchr(line, ':', n);
	if (!colon)
		return NULL;
	size_t nl = (size_t)(colon - line), i = nl + 1;
	if (!(nl == 13 && !strncasecmp(line, "authorization", 13)) &&
	    !(nl == 19 && !strncasecmp(line, "proxy-authorization", 19)))
		return NULL;
	while (i < n && (line[i] == ' ' || line[i] == '\t'))
		i++;
	if (n - i < 7 || strncasecmp(line + i, "basic", 5) || line[i + 5] != ' ')
		return NULL;
	for (i += 6; i < n && line[i] == ' '; i++)
		;
	size_t t = i;
	while (t < n && (isalnum((unsigned char)line[t]) || line[t] == '+' || line[t] == '/' ||
			 line[t] == '='))
		t++;
	*tlen = t - i;
	return *tlen ? line + i : NULL;
}

/* A Basic token (tlen bytes at tok) with the placeholders in what it
 * encodes swapped (swap_text), encoded again into out (when not NULL:
 * room for what a counting call said, plus one): its length, or 0 when
 * nothing goes in (or it is not base64), and the line stays as it is. */
static size_t swap_basic(const struct secret_set *s, const char *host, int tls, const char *tok,
			 size_t tlen, char *out, struct swap_report *rep)
{
	if (tlen % 4 || tlen > 4 * SECRET_MAX_VALUE)
		return 0;
	size_t pads = tok[tlen - 1] == '=' ? (tok[tlen - 2] == '=' ? 2 : 1) : 0, dl, ml, el = 0;
	unsigned char *dec = malloc(tlen), *mid = NULL;
	int k = dec ? EVP_DecodeBlock(dec, (const unsigned char *)tok, (int)tlen) : -1;
	if (k < 0 || (size_t)k < pads)
		goto out;
	dl = (size_t)k - pads;
	struct swap_report count = *rep;
	ml = swap_text(s, host, tls, 1, (const char *)dec, dl, NULL, &count);
	if (count.swapped == rep->swapped) { /* none goes in: why is told */
		*rep = count;
		goto out;
	}
	el = 4 * ((ml + 2) / 3);
	if (!out)
		goto out;
	if (!(mid = malloc(ml))) {
		el = 0;
		goto out;
	}
	swap_text(s, host, tls, 1, (const char *)dec, dl, (char *)mid, rep);
	EVP_EncodeBlock((unsigned char *)out, mid, (int)ml);
	explicit_bzero(mid, ml);
out:
	if (dec)
		explicit_bzero(dec, tlen);
	free(dec);
	free(mid);
	return el;
}

/* One header line (n bytes, through its LF) to out, as swap_text does,
 * or with its Basic token swapped: the bytes that takes. */
static size_t swap_line(const struct secret_set *s, const char *host, int tls, const char *line,
			size_t n, char *out, struct swap_report *rep)
{
	size_t tlen;
	const char *tok = basic_token(line, n, &tlen);
	size_t pre = tok ? (size_t)(tok - line) : 0;
	size_t k = tok ? swap_basic(s, host, tls, tok, tlen, out ? out + pre : NULL, rep) : 0;
	if (!k)
		return swap_text(s, host, tls, credential(line, n), line, n, out, rep);
	size_t rest = n - pre - tlen;
	if (out) {
		memcpy(out, line, pre);
		memmove(out + pre + k, tok + tlen, rest); /* over EVP's NUL */
	}
	return pre + k + rest;
}

char *secret_swap(const struct secret_set *s, const char *host, int tls, const char *headers,
		  size_t len, size_t *outlen, struct swap_report *rep)
{
	/* Counted first, then written once: a value is never left behind
	 * in memory a realloc let go of. */
	size_t need = 0;
	for (size_t line = 0; line < len;) {
		const char *lf = memchr(headers + line, '\n', len - line);
		size_t end = lf ? (size_t)(lf - headers) + 1 : len;
		struct swap_report count = { 0 };
		need += swap_line(s, host, tls, headers + line, end - line, NULL, &count);
		line = end;
	}
	*rep = (struct swap_report){ 0 };
	char *out = malloc(need + 2);
	if (!out)
		return NULL;
	size_t o = 0;
	for (size_t line = 0; line < len;) {
		const char *lf = memchr(headers + line, '\n', len - line);
		size_t end = lf ? (size_t)(lf - headers) + 1 : len;
		o += swap_line(s, host, tls, headers + line, end - line, out + o, rep);
		line = end;
	}
	*outlen = o;
	return out;
}
