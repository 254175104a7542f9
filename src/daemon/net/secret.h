/*
 * secret: egress secrets as the proxy holds them for one sandbox. Each
 * has a name, a placeholder (what the guest's environment holds) and a
 * value (what only its hosts get), and the hosts, spelled as policy
 * allowedHosts are ("api.example.com", "*.example.com"; never "*").
 * Pure: the proxy calls secret_swap on a request head it is about to
 * send, and sends what comes back. Unit-tested (tests/unit/test_secret.c).
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
};

struct secret_set {
	struct secret *v;
	size_t n;
	int refs; /* the proxy's, under its lock */
};

/* [{"name", "placeholder", "value", "hosts": [...]}] into a new set (refs
 * 1): 0 or -EINVAL with a reason. Checks all secret_value_ok and
 * secret_hosts_ok check. */
int secret_set_parse(const json_t *j, struct secret_set **out, char *err, size_t errlen);
void secret_set_free(struct secret_set *s);

/* The API's checks. A name is an environment variable's ([A-Za-z_]
 * [A-Za-z0-9_]*, up to 64); a value 1..SECRET_MAX_VALUE printable ASCII
 * bytes (a header's value: no CR or LF); hosts 1..SECRET_MAX_HOSTS names
 * or "*.domain" patterns, lower-cased into *out (a new array). 0 or
 * -EINVAL with a reason. */
int secret_name_ok(const char *name);
int secret_value_ok(const char *value, char *err, size_t errlen);
int secret_hosts_ok(const json_t *hosts, json_t **out, char *err, size_t errlen);

/* Is host (lower case) one that some secret of s may go to? */
int secret_bound(const struct secret_set *s, const char *host);

/* The header block of an HTTP/1 request head (after its first line),
 * with every placeholder of a secret bound to host replaced by its value:
 * a new buffer of *outlen bytes, or NULL when out of memory. *unbound
 * gets the name of a secret whose placeholder was there but is not bound
 * to host (left as it is), or NULL. *swapped: how many were replaced. */
char *secret_swap(const struct secret_set *s, const char *host, const char *headers, size_t len,
		  size_t *outlen, const char **unbound, int *swapped);

#endif
