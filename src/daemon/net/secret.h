/*
 * secret: egress secrets as the proxy holds them for one sandbox. Each
 * has a name, a placeholder (what the guest's environment holds) and a
 * value (what only its hosts get), and the hosts, spelled as policy
 * allowedHosts are ("api.example.com", "*.example.com"; never "*").
 * Pure: the proxy calls secret_swap on a request head it is about to
 * send, and sends what comes back. Unit-tested (tests/unit/daemon/net/test_secret.c).
 */
#ifndef CPUOS_NET_SECRET_H
#define CPUOS_NET_SECRET_H

#include <jansson.h>
#include <stddef.h>

#define SECRET_MAX 64          /* per sandbox */
#define SECRET_MAX_VALUE 8192  /* bytes */
#define SECRET_MAX_HOSTS 16    /* per secret */
#define SECRET_PREFIX "cpuos-secret-" /* placeholders: this and 32 hex */

struct secret {
	char *name, *placeholder, *value;
	char **hosts;
	size_t nhosts;
	int http; /* may go in plain HTTP too, not only over checked TLS */
};

/* What the proxy adds to one sandbox's requests: its secrets, and its
 * request transformations (rules.h), which may name them. */
struct secret_set {
	struct secret *v;
	size_t n;
	struct rule_set *rules; /* NULL: none */
	int refs;               /* the proxy's, under its lock */
};

/* [{"name", "placeholder", "value", "hosts": [...], "http": false}] into
 * a new set (refs 1): 0 or -EINVAL with a reason. Checks all that
 * secret_value_ok and secret_hosts_ok check. */
int secret_set_parse(const json_t *j, struct secret_set **out, char *err, size_t errlen);
void secret_set_free(struct secret_set *s);

/* The API's checks. A name is an environment variable's ([A-Za-z_]
 * [A-Za-z0-9_]*, up to 64); a value 1..SECRET_MAX_VALUE printable ASCII
 * bytes (a header's value: no CR or LF); hosts 1..SECRET_MAX_HOSTS names
 * or "*.domain" patterns (not "*", not a top-level domain's "*.com"),
 * lower-cased into *out (a new array). 0 or -EINVAL with a reason. */
int secret_name_ok(const char *name);
int secret_value_ok(const char *value, char *err, size_t errlen);
int secret_hosts_ok(const json_t *hosts, json_t **out, char *err, size_t errlen);

/* Is host (lower case) one that some secret of s may go to, over TLS
 * (tls) or in plain HTTP, or one a rule of s sets headers for (over TLS
 * only: nothing proves a plain-HTTP server is the host)? */
int secret_bound(const struct secret_set *s, const char *host, int tls);

/* What secret_swap did: how many went in; a secret whose placeholder was
 * there but is not bound to the host; one that is, but was held back
 * (why: plain HTTP for a secret without http, or a header that carries no
 * credentials: values go only into Authorization, Proxy-Authorization,
 * Cookie and headers whose name has key, token, secret, auth, password
 * or session in it). Names point into the set. */
struct swap_report {
	int swapped;
	const char *put, *unbound, *held, *why; /* put: one that went in */
};

/* The header block of an HTTP/1 request head (after its first line) to
 * host, with every placeholder of a secret that goes there replaced by
 * its value (tls: the request goes over TLS we checked the server of),
 * also inside the base64 of "Authorization: Basic" (and
 * Proxy-Authorization), which is encoded again: git, pip and registries
 * send a token as user:token. A new buffer of *outlen bytes, or NULL
 * when out of memory. */
char *secret_swap(const struct secret_set *s, const char *host, int tls, const char *headers,
		  size_t len, size_t *outlen, struct swap_report *rep);

#endif
