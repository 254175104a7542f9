/*
 * rules: a sandbox's request transformations, the AI SDK's
 * HarnessV1RequestTransformation: headers the egress proxy sets on the
 * requests that match, so that a harness's model key (or a secret, by
 * name) is put in outside the sandbox and never enters it.
 *
 *   {"match": {"host": "api.example.com",          (or "*.example.com", "*")
 *              "path": {"startsWith": "/v1/"},      (exact, startsWith, regex)
 *              "method": ["POST"],
 *              "queryString": [{"key": {...}, "value": {...}}],
 *              "headers": [{"key": {...}, "value": {...}}]},
 *    "transform": {"headers": {"Authorization": "Bearer {{secret:NAME}}"}}}
 *
 * Every part of a match must hold; a queryString or headers entry holds
 * when some pair matches both its key and its value matcher (either may
 * be left out). Header names match without regard to case, a regex is
 * POSIX extended and found anywhere in its subject (as JavaScript's
 * test()). A value's "{{secret:NAME}}" becomes the placeholder of the
 * sandbox's secret NAME, which secret_swap then replaces under that
 * secret's own checks (its hosts, TLS, a credentials header).
 * Rules apply over TLS the proxy ends and checks the server of only (as
 * a secret without allow_http): nothing proves a plain-HTTP server is the
 * host. Pure; unit-tested (tests/unit/daemon/net/test_rules.c).
 */
#ifndef CPUOS_NET_RULES_H
#define CPUOS_NET_RULES_H

#include "common/http1.h"

#include <jansson.h>
#include <stddef.h>

#define RULES_MAX 64        /* per sandbox */
#define RULE_MAX_HEADERS 16 /* set by one rule; also its header and query matchers */
#define RULE_MAX_VALUE 8192 /* bytes of a header's value */
#define RULE_SECRET_REF "{{secret:"

struct rule_set;
struct secret_set;

/* Checks a JSON array of rules as the API takes it and makes the form the
 * daemon keeps (*out, a new array: header names lower-cased, all else as
 * given): 0, or -EINVAL with a reason. */
int rules_check(const json_t *j, json_t **out, char *err, size_t errlen);
/* rules_check'ed JSON into a set: 0, -EINVAL or -ENOMEM with a reason. */
int rules_parse(const json_t *j, struct rule_set **out, char *err, size_t errlen);
void rules_free(struct rule_set *r);
/* The rules of a, then those of b: a rule whose match equals one of a's
 * adds its headers to that one's (b's value wins for a name); else it is
 * appended. A new array; NULL when out of memory. */
json_t *rules_merge(const json_t *a, const json_t *b);
/* The names of the secrets that values refer to, appended to names (a
 * JSON array; each once). */
void rules_secret_names(const json_t *rules, json_t *names);
/* The same array for showing: each value that is not only a secret's
 * reference replaced by "***" (a key a harness set is not read back). */
json_t *rules_redacted(const json_t *rules);

/* Does some rule of r match host (lower case)? */
int rules_for_host(const struct rule_set *r, const char *host);
/* The header block of request h (after its first line: hdrs, len bytes,
 * as the proxy will send it) to host with the headers of each rule that
 * matches set: a header of that name dropped, then the rule's line
 * added, a secret's reference made its placeholder (sec; a secret it
 * does not hold drops the header). A new buffer of *outlen bytes (wipe
 * it: it holds keys), with the number of rules that matched in *matched;
 * NULL when out of memory. */
char *rules_apply(const struct rule_set *r, const struct http1_head *h, const char *host,
		  const struct secret_set *sec, const char *hdrs, size_t len, size_t *outlen,
		  int *matched);

#endif
