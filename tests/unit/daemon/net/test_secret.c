/* Unit tests for egress secrets: their checks, the set the proxy holds,
 * the header swap, and the CA's certificates (verified by OpenSSL as a
 * guest's TLS would). */
#include "daemon/net/ca.h"
#include "daemon/net/secret.h"
#include "tests/lib/tap.h"

#include <jansson.h>
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PH_A "cpuos-secret-0123456789abcdef0123456789abcdef"
#define PH_B "cpuos-secret-ffffffffffffffffffffffffffffffff"

static struct secret_set *two(void)
{
	json_t *j = json_pack("[{s:s,s:s,s:s,s:[s]}, {s:s,s:s,s:s,s:[s,s],s:b}]", "name", "API_KEY",
			      "placeholder", PH_A, "value", "sk-real-value-that-is-longer-than-its-placeholder-0123456789",
			      "hosts", "api.test", "name", "GH", "placeholder", PH_B, "value", "ghp_x",
			      "hosts", "*.github.test", "Other.Test", "http", 1);
	struct secret_set *s = NULL;
	char err[256] = "";
	if (!CHECK(secret_set_parse(j, &s, err, sizeof(err)) == 0))
		t_note("%s", err);
	json_decref(j);
	return s;
}

static void test_checks(void)
{
	CHECK(secret_name_ok("OPENAI_API_KEY") && secret_name_ok("_x1"));
	CHECK(!secret_name_ok("") && !secret_name_ok("1X") && !secret_name_ok("A-B") &&
	      !secret_name_ok("A=B") && !secret_name_ok(NULL));
	char long_name[70];
	memset(long_name, 'A', 65);
	long_name[65] = '\0';
	CHECK(!secret_name_ok(long_name));
	char err[256];
	CHECK(secret_value_ok("Bearer abc", err, sizeof(err)) == 0);
	CHECK(secret_value_ok("", err, sizeof(err)) == -EINVAL);
	CHECK(secret_value_ok("a\r\nX-Evil: 1", err, sizeof(err)) == -EINVAL); /* header injection */
	CHECK(secret_value_ok("caf\xc3\xa9", err, sizeof(err)) == -EINVAL);
	char *big = malloc(SECRET_MAX_VALUE + 2);
	memset(big, 'a', SECRET_MAX_VALUE + 1);
	big[SECRET_MAX_VALUE + 1] = '\0';
	CHECK(secret_value_ok(big, err, sizeof(err)) == -EINVAL);
	big[SECRET_MAX_VALUE] = '\0';
	CHECK(secret_value_ok(big, err, sizeof(err)) == 0);
	free(big);

	json_t *out = NULL, *h = json_pack("[s,s]", "API.Test.", "*.x.test");
	CHECK(secret_hosts_ok(h, &out, err, sizeof(err)) == 0 && json_array_size(out) == 2 &&
	      !strcmp(json_string_value(json_array_get(out, 0)), "api.test"));
	json_decref(out);
	json_decref(h);
	const char *bad[] = { "[]", "[\"*\"]", "[\"*.\"]", "[\"*.com\"]", "[\"*.COM.\"]",
			      "[\"a b\"]", "[1]", "{}", "[\"1.2.3.4/8\"]", NULL };
	for (int i = 0; bad[i]; i++) {
		h = json_loads(bad[i], 0, NULL);
		out = NULL;
		if (!CHECK(secret_hosts_ok(h, &out, err, sizeof(err)) == -EINVAL))
			t_note("accepted %s", bad[i]);
		json_decref(out);
		json_decref(h);
	}
}

static void test_parse(void)
{
	struct secret_set *s = two();
	if (!s)
		return;
	CHECK(s->n == 2 && s->refs == 1 && !strcmp(s->v[1].hosts[1], "other.test"));
	CHECK(!s->v[0].http && s->v[1].http);
	CHECK(secret_bound(s, "api.test", 1) && secret_bound(s, "a.b.github.test", 1) &&
	      secret_bound(s, "other.test", 0) && !secret_bound(s, "api.test", 0));
	CHECK(!secret_bound(s, "github.test", 1) && !secret_bound(s, "api.test.evil", 1) &&
	      !secret_bound(s, "xapi.test", 1) && !secret_bound(NULL, "api.test", 1));
	secret_set_free(s);

	const char *bad[] = {
		"[{\"name\":\"A\",\"placeholder\":\"cpuos-secret-00\",\"value\":\"v\",\"hosts\":[\"a.test\"]}]",
		"[{\"name\":\"A\",\"placeholder\":\"" PH_A "\",\"value\":\"v\",\"hosts\":[\"*\"]}]",
		"[{\"name\":\"A-\",\"placeholder\":\"" PH_A "\",\"value\":\"v\",\"hosts\":[\"a.test\"]}]",
		"[{\"name\":\"A\",\"placeholder\":\"" PH_A "\",\"value\":\"v\\n\",\"hosts\":[\"a.test\"]}]",
		"{}", NULL,
	};
	char err[256];
	for (int i = 0; bad[i]; i++) {
		json_t *j = json_loads(bad[i], 0, NULL);
		s = NULL;
		if (!CHECK(secret_set_parse(j, &s, err, sizeof(err)) == -EINVAL && !s))
			t_note("accepted %s", bad[i]);
		json_decref(j);
	}
}

static int swap(const struct secret_set *s, const char *host, int tls, const char *in, char *out,
		size_t cap, struct swap_report *rep)
{
	size_t n;
	char *r = secret_swap(s, host, tls, in, strlen(in), &n, rep);
	snprintf(out, cap, "%.*s", r ? (int)n : 0, r ? r : "");
	free(r);
	return rep->swapped;
}

static void test_swap(void)
{
	struct secret_set *s = two();
	if (!s)
		return;
	char out[4096];
	struct swap_report rep;
	const char *hdrs = "Authorization: Bearer " PH_A "\r\nX-Gh-Token: " PH_B "\r\nAccept: */*\r\n";
	/* To the API: its key goes in; the other's placeholder stays, and is told. */
	CHECK(swap(s, "api.test", 1, hdrs, out, sizeof(out), &rep) == 1);
	CHECK(strstr(out, "Bearer sk-real-value-that-is-longer-than-its-placeholder-0123456789\r\n") &&
	      strstr(out, "X-Gh-Token: " PH_B "\r\n") && strstr(out, "Accept: */*\r\n"));
	CHECK(rep.unbound && !strcmp(rep.unbound, "GH") && !rep.held);
	/* To a subdomain of the other's: that one only. */
	CHECK(swap(s, "x.github.test", 1, hdrs, out, sizeof(out), &rep) == 1);
	CHECK(strstr(out, "X-Gh-Token: ghp_x\r\n") && strstr(out, PH_A) && !strcmp(rep.unbound, "API_KEY"));
	/* Anywhere else, and with no host at all: nothing. */
	CHECK(swap(s, "evil.test", 1, hdrs, out, sizeof(out), &rep) == 0 && !strcmp(out, hdrs));
	CHECK(swap(s, "", 1, hdrs, out, sizeof(out), &rep) == 0 && !strcmp(out, hdrs));
	/* Plain HTTP: only a secret that allows it (GH does, API_KEY not). */
	CHECK(swap(s, "api.test", 0, hdrs, out, sizeof(out), &rep) == 0 && !strcmp(out, hdrs));
	CHECK(rep.held && !strcmp(rep.held, "API_KEY") && !strcmp(rep.why, "plain HTTP"));
	CHECK(swap(s, "x.github.test", 0, hdrs, out, sizeof(out), &rep) == 1 && strstr(out, "ghp_x"));
	/* Only into headers that carry credentials: others come back in answers. */
	const char *echo = "host: api.test:" PH_A "\r\nOrigin: " PH_A "\r\nREFERER: " PH_A
			   "\r\nUser-Agent: " PH_A "\r\nX-Forwarded-Host: " PH_A "\r\nVia: " PH_A
			   "\r\nX-Request-Id: " PH_A "\r\ntraceparent: " PH_A "\r\nAccept: " PH_A
			   "\r\nX-Note: key " PH_A "\r\n";
	CHECK(swap(s, "api.test", 1, echo, out, sizeof(out), &rep) == 0 && !strcmp(out, echo));
	CHECK(rep.held && !strcmp(rep.why, "not a header that carries credentials"));
	const char *cred = "proxy-authorization: " PH_A "\r\nCookie: s=" PH_A "\r\nX-Api-Key: " PH_A
			   "\r\nPRIVATE-TOKEN: " PH_A "\r\nX-Client-Secret: " PH_A
			   "\r\nX-Session-Id: " PH_A "\r\nX-Password: " PH_A "\r\nX-Auth: " PH_A "\r\n";
	CHECK(swap(s, "api.test", 1, cred, out, sizeof(out), &rep) == 8 && !strstr(out, PH_A));
	/* Twice in one header, and a placeholder cut short or unknown. */
	CHECK(swap(s, "api.test", 1, "X-Key: " PH_A PH_A "\r\n", out, sizeof(out), &rep) == 2);
	CHECK(!strstr(out, "cpuos-secret-") && !rep.unbound);
	const char *partial = "A: cpuos-secret-0123456789abcdef\r\nB: cpuos-secret-"
			      "00000000000000000000000000000000\r\n";
	CHECK(swap(s, "api.test", 1, partial, out, sizeof(out), &rep) == 0 &&
	      !strcmp(out, partial) && !rep.unbound);
	/* At the very end, with no CRLF after it. */
	CHECK(swap(s, "api.test", 1, "X-Key: " PH_A, out, sizeof(out), &rep) == 1 &&
	      !strcmp(out, "X-Key: sk-real-value-that-is-longer-than-its-placeholder-0123456789"));
	/* Many placeholder-like runs cost their own length, not a value's each. */
	char many[8192] = "A: ";
	for (int i = 0; i < 500; i++)
		strcat(many, SECRET_PREFIX);
	CHECK(swap(s, "api.test", 1, many, out, sizeof(out), &rep) == 0);
	secret_set_free(s);
}

static char *b64(const char *in)
{
	static char out[4][512];
	static int k;
	char *o = out[k++ % 4];
	EVP_EncodeBlock((unsigned char *)o, (const unsigned char *)in, (int)strlen(in));
	return o;
}

/* Basic credentials carry the placeholder in base64: git and pip send a
 * token as user:token; GitHub also takes token:x-oauth-basic. */
static void test_swap_basic(void)
{
	struct secret_set *s = two();
	if (!s)
		return;
	char in[2048], out[4096], want[1024];
	struct swap_report rep;
	const char *forms[][2] = {
		{ "x-access-token:" PH_B, "x-access-token:ghp_x" },
		{ PH_B ":x-oauth-basic", "ghp_x:x-oauth-basic" },
		{ "u:" PH_B, "u:ghp_x" },         /* encodes with padding */
		{ "us:" PH_B, "us:ghp_x" },       /* another padding */
		{ PH_B ":" PH_B, "ghp_x:ghp_x" },
	};
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		snprintf(in, sizeof(in), "Accept: */*\r\nAuthorization: Basic %s\r\nX: y\r\n",
			 b64(forms[i][0]));
		snprintf(want, sizeof(want), "Accept: */*\r\nAuthorization: Basic %s\r\nX: y\r\n",
			 b64(forms[i][1]));
		if (!CHECK(swap(s, "git.github.test", 1, in, out, sizeof(out), &rep) >= 1 &&
			   !strcmp(out, want)))
			t_note("%s: got %s", forms[i][0], out);
	}
	/* Any case of the scheme, extra spaces, Proxy-Authorization, at the end. */
	snprintf(in, sizeof(in), "proxy-authorization:  bAsIc   %s", b64("u:" PH_B));
	CHECK(swap(s, "x.github.test", 1, in, out, sizeof(out), &rep) == 1 &&
	      strstr(out, b64("u:ghp_x")) && !strncmp(out, "proxy-authorization:  bAsIc   ", 30));
	/* A value longer than the placeholder (the buffer grows right). */
	snprintf(in, sizeof(in), "Authorization: Basic %s\r\n", b64("k:" PH_A));
	CHECK(swap(s, "api.test", 1, in, out, sizeof(out), &rep) == 1 &&
	      strstr(out, b64("k:sk-real-value-that-is-longer-than-its-placeholder-0123456789")));
	/* Still only toward the bound hosts, only over TLS unless allowed. */
	snprintf(in, sizeof(in), "Authorization: Basic %s\r\n", b64("u:" PH_A));
	CHECK(swap(s, "evil.test", 1, in, out, sizeof(out), &rep) == 0 && !strcmp(out, in) &&
	      rep.unbound && !strcmp(rep.unbound, "API_KEY"));
	CHECK(swap(s, "api.test", 0, in, out, sizeof(out), &rep) == 0 && !strcmp(out, in) &&
	      rep.held && !strcmp(rep.why, "plain HTTP"));
	/* Basic in another header is not a credential's encoding. */
	snprintf(in, sizeof(in), "X-Note: Basic %s\r\n", b64("u:" PH_B));
	CHECK(swap(s, "x.github.test", 1, in, out, sizeof(out), &rep) == 0 && !strcmp(out, in));
	/* Not base64, cut short, or nothing in it: as it came. */
	const char *odd[] = { "Authorization: Basic ***\r\n", "Authorization: Basic abc\r\n",
			      "Authorization: Basic \r\n", "Authorization: Basic\r\n",
			      "Authorization: Basic ====\r\n", "Authorization: Bearer dTp4\r\n", NULL };
	for (int i = 0; odd[i]; i++)
		if (!CHECK(swap(s, "x.github.test", 1, odd[i], out, sizeof(out), &rep) == 0 &&
			   !strcmp(out, odd[i])))
			t_note("%s", odd[i]);
	snprintf(in, sizeof(in), "Authorization: Basic %s\r\n", b64("user:password"));
	CHECK(swap(s, "x.github.test", 1, in, out, sizeof(out), &rep) == 0 && !strcmp(out, in));
	secret_set_free(s);
}

/* The leaf the CA makes for host verifies under the CA for host only, as
 * a strict client checks it. */
static void test_ca(void)
{
	char dir[] = "/tmp/cpuos-test-ca-XXXXXX", err[256] = "";
	if (!CHECK(mkdtemp(dir)))
		return;
	struct ca *ca = NULL;
	if (!CHECK(ca_open(dir, &ca, err, sizeof(err)) == 0)) {
		t_note("%s", err);
		return;
	}
	char id[65];
	snprintf(id, sizeof(id), "%s", ca_id(ca));
	CHECK(strlen(id) == 64 && strstr(ca_pem(ca), "BEGIN CERTIFICATE"));
	SSL_CTX *ctx = ca_server_ctx(ca, "api.test");
	SSL_CTX *again = ca_server_ctx(ca, "api.test");
	CHECK(ctx && ctx == again); /* kept */
	X509 *leaf = ctx ? SSL_CTX_get0_certificate(ctx) : NULL;
	BIO *b = BIO_new_mem_buf(ca_pem(ca), -1);
	X509 *root = PEM_read_bio_X509(b, NULL, NULL, NULL);
	BIO_free(b);
	X509_STORE *store = X509_STORE_new();
	X509_STORE_add_cert(store, root);
	X509_STORE_CTX *sc = X509_STORE_CTX_new();
	if (CHECK(leaf && root && sc) && X509_STORE_CTX_init(sc, store, leaf, NULL) == 1) {
		X509_VERIFY_PARAM *vp = X509_STORE_CTX_get0_param(sc);
		X509_VERIFY_PARAM_set_flags(vp, X509_V_FLAG_X509_STRICT);
		X509_VERIFY_PARAM_set_purpose(vp, X509_PURPOSE_SSL_SERVER);
		X509_VERIFY_PARAM_set1_host(vp, "api.test", 0);
		int ok = X509_verify_cert(sc);
		if (!CHECK(ok == 1))
			t_note("%s", X509_verify_cert_error_string(X509_STORE_CTX_get_error(sc)));
		CHECK(X509_check_host(leaf, "other.test", 0, 0, NULL) != 1);
	}
	X509_STORE_CTX_free(sc);
	X509_STORE_free(store);
	X509_free(root);
	SSL_CTX_free(ctx);
	SSL_CTX_free(again);
	ca_close(ca);
	/* Opened again, it is the same CA. */
	ca = NULL;
	CHECK(ca_open(dir, &ca, err, sizeof(err)) == 0 && ca && !strcmp(ca_id(ca), id));
	ca_close(ca);
	char path[600];
	snprintf(path, sizeof(path), "%s/ca.key", dir);
	struct stat st;
	CHECK(stat(path, &st) == 0 && (st.st_mode & 077) == 0); /* the key is ours alone */
	/* A broken one is refused, not replaced behind the admin's back. */
	FILE *f = fopen(path, "w");
	if (f) {
		fputs("junk\n", f);
		fclose(f);
	}
	ca = NULL;
	CHECK(ca_open(dir, &ca, err, sizeof(err)) == -EIO && !ca && strstr(err, "does not load"));
	unlink(path);
	snprintf(path, sizeof(path), "%s/ca.pem", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/lock", dir);
	unlink(path);
	CHECK(rmdir(dir) == 0); /* nothing else was left there */
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "secret_checks", test_checks },
		{ "secret_parse", test_parse },
		{ "secret_swap", test_swap },
		{ "secret_swap_basic", test_swap_basic },
		{ "secret_ca", test_ca },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
