/* Unit tests for request transformations: the API's checks, merging,
 * redaction, and the headers set on requests that match (and only
 * those). */
#include "common/http1.h"
#include "daemon/net/rules.h"
#include "daemon/net/secret.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PH "cpuos-secret-0123456789abcdef0123456789abcdef"

static json_t *checked(const char *text)
{
	json_error_t je;
	json_t *j = json_loads(text, 0, &je), *out = NULL;
	char err[256] = "";
	if (!CHECK(j && rules_check(j, &out, err, sizeof(err)) == 0))
		t_note("%s: %s %s", text, je.text, err);
	json_decref(j);
	return out;
}

static void test_check(void)
{
	json_t *out = checked("[{\"match\":{\"host\":\"API.Test\",\"path\":{\"startsWith\":\"/v1\"},"
			      "\"method\":[\"POST\"],\"headers\":[{\"key\":{\"exact\":\"x-a\"}}]},"
			      "\"transform\":{\"headers\":{\"X-Api-Key\":\"k\"}}}]");
	json_t *r0 = json_array_get(out, 0);
	CHECK(!strcmp(json_string_value(json_object_get(json_object_get(r0, "match"), "host")),
		      "api.test"));
	CHECK(json_object_get(json_object_get(json_object_get(r0, "transform"), "headers"),
			      "x-api-key") != NULL);
	json_decref(out);
	const char *bad[] = {
		"{}", "[1]", "[{}]",
		"[{\"match\":{\"host\":\"a.test\"}}]",
		"[{\"match\":{\"host\":\"a.test\"},\"transform\":{\"headers\":{}}}]",
		"[{\"match\":{\"host\":\"a b\"},\"transform\":{\"headers\":{\"x\":\"v\"}}}]",
		"[{\"match\":{},\"transform\":{\"headers\":{\"x\":\"v\"}}}]",
		"[{\"match\":{\"host\":\"a.test\"},\"transform\":{\"headers\":{\"Host\":\"v\"}}}]",
		"[{\"match\":{\"host\":\"a.test\"},\"transform\":{\"headers\":{\"Content-Length\":\"1\"}}}]",
		"[{\"match\":{\"host\":\"a.test\"},\"transform\":{\"headers\":{\"x y\":\"v\"}}}]",
		"[{\"match\":{\"host\":\"a.test\"},\"transform\":{\"headers\":{\"x\":\"a\\r\\nEvil: 1\"}}}]",
		"[{\"match\":{\"host\":\"a.test\"},\"transform\":{\"headers\":{\"x\":1}}}]",
		"[{\"match\":{\"host\":\"a.test\"},\"transform\":{\"headers\":{\"x\":\"{{secret:1A}}\"}}}]",
		"[{\"match\":{\"host\":\"a.test\"},\"transform\":{\"headers\":{\"x\":\"{{secret:A\"}}}]",
		"[{\"match\":{\"host\":\"a.test\",\"path\":{\"regex\":\"(\"}},\"transform\":{\"headers\":{\"x\":\"v\"}}}]",
		"[{\"match\":{\"host\":\"a.test\",\"path\":{\"exact\":\"/\",\"regex\":\"/\"}},\"transform\":{\"headers\":{\"x\":\"v\"}}}]",
		"[{\"match\":{\"host\":\"a.test\",\"method\":[\"get\"]},\"transform\":{\"headers\":{\"x\":\"v\"}}}]",
		"[{\"match\":{\"host\":\"a.test\",\"port\":1},\"transform\":{\"headers\":{\"x\":\"v\"}}}]",
		"[{\"match\":{\"host\":\"a.test\",\"headers\":[{}]},\"transform\":{\"headers\":{\"x\":\"v\"}}}]",
		NULL,
	};
	char err[256];
	for (int i = 0; bad[i]; i++) {
		json_t *j = json_loads(bad[i], 0, NULL);
		out = NULL;
		int r = rules_check(j, &out, err, sizeof(err));
		if (!CHECK(r == -EINVAL && !out && err[0]))
			t_note("accepted %s", bad[i]);
		json_decref(j);
	}
}

static void test_merge_and_redact(void)
{
	json_t *a = checked("[{\"match\":{\"host\":\"a.test\"},\"transform\":{\"headers\":"
			    "{\"x-one\":\"1\",\"x-two\":\"2\"}}}]");
	json_t *b = checked("[{\"match\":{\"host\":\"a.test\"},\"transform\":{\"headers\":"
			    "{\"X-Two\":\"two\",\"x-key\":\"{{secret:KEY}}\"}}},"
			    "{\"match\":{\"host\":\"b.test\"},\"transform\":{\"headers\":{\"x\":\"Bearer {{secret:OTHER}}\"}}}]");
	json_t *m = rules_merge(a, b);
	json_t *h = json_object_get(json_object_get(json_array_get(m, 0), "transform"), "headers");
	CHECK(json_array_size(m) == 2 && json_object_size(h) == 3);
	CHECK(!strcmp(json_string_value(json_object_get(h, "x-two")), "two"));
	json_t *names = json_array();
	rules_secret_names(m, names);
	CHECK(json_array_size(names) == 2 &&
	      !strcmp(json_string_value(json_array_get(names, 0)), "KEY") &&
	      !strcmp(json_string_value(json_array_get(names, 1)), "OTHER"));
	json_t *red = rules_redacted(m);
	json_t *rh = json_object_get(json_object_get(json_array_get(red, 0), "transform"), "headers");
	CHECK(!strcmp(json_string_value(json_object_get(rh, "x-one")), "***") &&
	      !strcmp(json_string_value(json_object_get(rh, "x-key")), "{{secret:KEY}}"));
	rh = json_object_get(json_object_get(json_array_get(red, 1), "transform"), "headers");
	CHECK(!strcmp(json_string_value(json_object_get(rh, "x")), "***"));
	json_decref(red);
	json_decref(names);
	json_decref(m);
	json_decref(a);
	json_decref(b);
}

/* A request head as the proxy sends it on: the headers it applies to. */
static char *apply(struct rule_set *r, const struct secret_set *sec, const char *host,
		   const char *head, int *matched)
{
	struct http1_head h;
	if (!CHECK(http1_parse(head, strlen(head), &h) == 0))
		return strdup("");
	size_t first = (size_t)(h.line2 - head), n;
	char *out = rules_apply(r, &h, host, sec, head + first, strlen(head) - first, &n, matched);
	char *z = out ? strndup(out, n) : NULL;
	free(out);
	return z;
}

static void test_apply(void)
{
	json_t *j = checked(
		"[{\"match\":{\"host\":\"*.api.test\",\"path\":{\"startsWith\":\"/v1/\"},"
		"\"method\":[\"POST\",\"GET\"]},\"transform\":{\"headers\":{\"Authorization\":\"Bearer lit\"}}},"
		"{\"match\":{\"host\":\"q.test\",\"queryString\":[{\"key\":{\"exact\":\"a\"},\"value\":{\"regex\":\"^[0-9]+$\"}}],"
		"\"headers\":[{\"key\":{\"exact\":\"X-Want\"},\"value\":{\"startsWith\":\"yes\"}}]},"
		"\"transform\":{\"headers\":{\"x-key\":\"{{secret:KEY}}\",\"x-gone\":\"{{secret:NONE}}\"}}},"
		"{\"match\":{\"host\":\"*\",\"path\":{\"exact\":\"/v1/last\"}},\"transform\":{\"headers\":{\"authorization\":\"second\"}}}]");
	struct rule_set *r = NULL;
	char err[256] = "";
	if (!CHECK(rules_parse(j, &r, err, sizeof(err)) == 0)) {
		t_note("%s", err);
		json_decref(j);
		return;
	}
	json_decref(j);
	json_t *sj = json_pack("[{s:s,s:s,s:s,s:[s]}]", "name", "KEY", "placeholder", PH, "value",
			       "real", "hosts", "q.test");
	struct secret_set *sec = NULL;
	CHECK(secret_set_parse(sj, &sec, err, sizeof(err)) == 0);
	json_decref(sj);
	CHECK(rules_for_host(r, "x.api.test") && rules_for_host(r, "anything.test"));
	int matched;
	/* The guest's own Authorization goes; the rule's takes its place. */
	char *o = apply(r, sec, "x.api.test",
			"POST /v1/chat HTTP/1.1\r\nHost: x.api.test\r\nauthorization: mine\r\n"
			"Content-Length: 0\r\n\r\n", &matched);
	CHECK(matched == 1 && o && strstr(o, "authorization: Bearer lit\r\n") && !strstr(o, "mine") &&
	      strstr(o, "Content-Length: 0\r\n") && strlen(o) > 4 && !strcmp(o + strlen(o) - 4, "\r\n\r\n"));
	free(o);
	/* Not the method, not the path, not the host: untouched. */
	const char *heads[][2] = {
		{ "x.api.test", "PUT /v1/x HTTP/1.1\r\nHost: x.api.test\r\n\r\n" },
		{ "x.api.test", "GET /v2/x HTTP/1.1\r\nHost: x.api.test\r\n\r\n" },
		{ "api.test", "GET /v1/x HTTP/1.1\r\nHost: api.test\r\n\r\n" },
		{ "q.test", "GET /?a=12x HTTP/1.1\r\nHost: q.test\r\nX-Want: yes\r\n\r\n" },
		{ "q.test", "GET /?a=12 HTTP/1.1\r\nHost: q.test\r\nX-Want: no\r\n\r\n" },
		{ "q.test", "GET /?b=12 HTTP/1.1\r\nHost: q.test\r\nX-Want: yes\r\n\r\n" },
	};
	for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		o = apply(r, sec, heads[i][0], heads[i][1], &matched);
		if (!CHECK(matched == 0 && o && !strstr(o, "uthorization") && !strstr(o, "x-key")))
			t_note("%s", heads[i][1]);
		free(o);
	}
	/* Query and header matchers; a secret by name becomes its placeholder,
	 * one not held sets nothing. */
	o = apply(r, sec, "q.test", "GET /p?z=1&a=12 HTTP/1.1\r\nHost: q.test\r\nx-want: yes please\r\n\r\n",
		  &matched);
	CHECK(matched == 1 && o && strstr(o, "x-key: " PH "\r\n") && !strstr(o, "x-gone"));
	free(o);
	/* Two rules set one header: the later wins, once. */
	o = apply(r, sec, "x.api.test", "GET /v1/last HTTP/1.1\r\nHost: x.api.test\r\n\r\n", &matched);
	CHECK(matched == 2 && o && strstr(o, "authorization: second") && !strstr(o, "lit"));
	free(o);
	secret_set_free(sec);
	rules_free(r);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "rules_check", test_check },
		{ "rules_merge_and_redact", test_merge_and_redact },
		{ "rules_apply", test_apply },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
