/* Unit tests for cpuos-e2b's pure parts: Connect's envelopes and codes,
 * sealed access tokens, signed URLs' signatures, base64 and multipart
 * bodies, each against what a hostile client may send. */
#include "common/buf.h"
#include "e2b/connect.h"
#include "e2b/multipart.h"
#include "e2b/rpc.h"
#include "e2b/token.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- connect ---- */

static void connect_frames_round_trip(void)
{
	struct buf b;
	buf_init(&b, 0);
	CHECK(connect_frame(&b, 0, "{\"a\":1}", 7) == 0);
	CHECK(connect_frame_end(&b, NULL, NULL) == 0);
	CHECK(connect_frame_end(&b, "not_found", "no \"such\" file") == 0);
	unsigned flags;
	const char *msg;
	size_t len, used, at = 0;
	CHECK(connect_unframe(b.p, b.len, 1024, &flags, &msg, &len, &used) == 0);
	CHECK(flags == 0 && len == 7 && !memcmp(msg, "{\"a\":1}", 7) && used == 12);
	at += used;
	CHECK(connect_unframe(b.p + at, b.len - at, 1024, &flags, &msg, &len, &used) == 0);
	CHECK(flags == CONNECT_END && len == 2 && !memcmp(msg, "{}", 2));
	at += used;
	CHECK(connect_unframe(b.p + at, b.len - at, 1024, &flags, &msg, &len, &used) == 0);
	CHECK(flags == CONNECT_END && at + used == b.len);
	json_t *j = json_loadb(msg, len, 0, NULL);
	CHECK(!strcmp(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
		      "not_found"));
	CHECK(!strcmp(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
		      "no \"such\" file"));
	json_decref(j);
	buf_release(&b);
}

static void connect_refuses_short_and_long(void)
{
	unsigned flags;
	const char *msg;
	size_t len, used;
	CHECK(connect_unframe("", 0, 100, &flags, &msg, &len, &used) == -EAGAIN);
	CHECK(connect_unframe("\0\0\0", 3, 100, &flags, &msg, &len, &used) == -EAGAIN);
	CHECK(connect_unframe("\0\0\0\0\5{}", 7, 100, &flags, &msg, &len, &used) == -EAGAIN);
	/* a length past the cap is refused before any body is waited for */
	CHECK(connect_unframe("\0\xff\xff\xff\xff", 5, 100, &flags, &msg, &len, &used) == -EMSGSIZE);
	CHECK(connect_unframe("\0\0\0\0\x65", 5, 100, &flags, &msg, &len, &used) == -EMSGSIZE);
	CHECK(connect_unframe("\0\0\0\0\0", 5, 100, &flags, &msg, &len, &used) == 0 && len == 0);
}

static void connect_codes(void)
{
	CHECK(!strcmp(connect_code_of(404), "not_found"));
	CHECK(!strcmp(connect_code_of(422), "invalid_argument"));
	CHECK(!strcmp(connect_code_of(401), "unauthenticated"));
	CHECK(!strcmp(connect_code_of(409), "failed_precondition"));
	CHECK(!strcmp(connect_code_of(504), "deadline_exceeded"));
	CHECK(!strcmp(connect_code_of(599), "internal"));
	CHECK(connect_status_of("already_exists") == 409);
	CHECK(connect_status_of("unimplemented") == 501);
	CHECK(connect_status_of("nonsense") == 500);
}

/* ---- tokens ---- */

static const unsigned char secret[32] = "0123456789abcdef0123456789abcdef";

static void tokens_seal_one_sandbox(void)
{
	char tok[TOK_MAX], again[TOK_MAX], key[256];
	CHECK(tok_seal(secret, "3f9a0c1d2e4b5a69", "cpuos_key_of_alice", tok) == 0);
	CHECK(!strncmp(tok, "e2bt_", 5) && !strstr(tok, "alice"));
	CHECK(tok_seal(secret, "3f9a0c1d2e4b5a69", "cpuos_key_of_alice", again) == 0);
	CHECK(!strcmp(tok, again)); /* a sandbox's token is the same at each get */
	CHECK(tok_open(secret, "3f9a0c1d2e4b5a69", tok, key, sizeof(key)) == 0);
	CHECK(!strcmp(key, "cpuos_key_of_alice"));
	/* another sandbox, another secret, a changed byte, a short buffer */
	CHECK(tok_open(secret, "0000000000000000", tok, key, sizeof(key)) == -EACCES);
	unsigned char other[32];
	memcpy(other, secret, 32);
	other[0] ^= 1;
	CHECK(tok_open(other, "3f9a0c1d2e4b5a69", tok, key, sizeof(key)) == -EACCES);
	char bad[TOK_MAX];
	snprintf(bad, sizeof(bad), "%s", tok);
	bad[10] = bad[10] == 'A' ? 'B' : 'A';
	CHECK(tok_open(secret, "3f9a0c1d2e4b5a69", bad, key, sizeof(key)) == -EACCES);
	CHECK(tok_open(secret, "3f9a0c1d2e4b5a69", tok, key, 5) == -EACCES);
	/* one spelling: the last character with other unused low bits is
	 * another string for the same bytes (the key's 18 bytes and 28 leave
	 * 46, whose last base64 character has 4 unused bits), refused */
	size_t last = strlen(tok) - 1;
	static const char alpha[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	int v = (int)(strchr(alpha, tok[last]) - alpha);
	snprintf(bad, sizeof(bad), "%s", tok);
	bad[last] = alpha[v ^ 1];
	CHECK(tok_open(secret, "3f9a0c1d2e4b5a69", bad, key, sizeof(key)) == -EACCES);
	/* another key's token differs */
	CHECK(tok_seal(secret, "3f9a0c1d2e4b5a69", "cpuos_key_of_bob", again) == 0);
	CHECK(strcmp(tok, again) != 0);
	/* garbage */
	CHECK(tok_open(secret, "3f9a0c1d2e4b5a69", "", key, sizeof(key)) == -EACCES);
	CHECK(tok_open(secret, "3f9a0c1d2e4b5a69", "e2bt_", key, sizeof(key)) == -EACCES);
	CHECK(tok_open(secret, "3f9a0c1d2e4b5a69", "e2bt_!!!!", key, sizeof(key)) == -EACCES);
	CHECK(tok_open(secret, "3f9a0c1d2e4b5a69", "cpuos_key_of_alice", key, sizeof(key)) ==
	      -EACCES);
}

static void url_signature_as_the_sdk(void)
{
	char sig[64];
	/* the SDK's own: sha256("/home/user/a.txt:read::envdtok") (e2b 2.64.0) */
	tok_url_signature("/home/user/a.txt", "read", "", "envdtok", 0, sig);
	CHECK(!strcmp(sig, "v1_RXoTfv8fZov6wEk3x1MtXvBzDRAir30QpELBhgDwaYY"));
	char with_exp[64];
	tok_url_signature("/home/user/a.txt", "read", "", "envdtok", 1700000000, with_exp);
	CHECK(strcmp(sig, with_exp) && !strncmp(with_exp, "v1_", 3));
}

static int is(void *arg, const char *token)
{
	return !strcmp(arg, token);
}

static void recent_tokens(void)
{
	struct tokens *t;
	char out[TOK_MAX], id[24];
	CHECK(tokens_new(&t) == 0);
	CHECK(tokens_find(t, "a", is, "one", id, out) == -ENOENT);
	tokens_put(t, "a", "one");
	tokens_put(t, "a", "two"); /* another key's, on the same sandbox */
	tokens_put(t, "a", "one");
	CHECK(tokens_find(t, "a", is, "one", id, out) == 0 && !strcmp(out, "one"));
	CHECK(tokens_find(t, "a", is, "two", id, out) == 0 && !strcmp(id, "a"));
	CHECK(tokens_find(t, "b", is, "two", id, out) == -ENOENT);
	CHECK(tokens_find(t, NULL, is, "two", id, out) == 0 && !strcmp(id, "a"));
	char name[24];
	for (int i = 0; i < 5000; i++) { /* past the ring: the oldest go */
		snprintf(name, sizeof(name), "id%d", i);
		tokens_put(t, name, "x");
	}
	CHECK(tokens_find(t, "a", is, "one", id, out) == -ENOENT);
	CHECK(tokens_find(t, "id4999", is, "x", id, out) == 0);
	tokens_free(t);
}

/* ---- base64 ---- */

static void base64_both_alphabets(void)
{
	char out[64];
	char *e = b64_encode("\xff\xfe hello", 8);
	CHECK(e && !strcmp(e, "//4gaGVsbG8="));
	CHECK(b64_decode(e, out, sizeof(out)) == 8 && !memcmp(out, "\xff\xfe hello", 8));
	free(e);
	CHECK(b64_decode("__4gaGVsbG8", out, sizeof(out)) == 8); /* URL-safe, unpadded */
	CHECK(b64_decode("dXNlcjo=", out, sizeof(out)) == 5 && !strcmp(out, "user:"));
	CHECK(b64_decode("", out, sizeof(out)) == 0);
	CHECK(b64_decode("a b", out, sizeof(out)) == -1);
	CHECK(b64_decode("aGVsbG8=x", out, sizeof(out)) == -1);
	CHECK(b64_decode("aGVsbG8", out, 5) == -1); /* no room */
}

/* ---- multipart ---- */

struct got {
	char names[4][64];
	char data[4][64];
	int n;
};

static int collect(void *arg, const struct mp_part *p)
{
	struct got *g = arg;
	if (g->n < 4) {
		snprintf(g->names[g->n], 64, "%.63s", p->has_filename ? p->filename : "(none)");
		snprintf(g->data[g->n], 64, "%.*s", (int)p->len, p->data);
	}
	g->n++;
	return 0;
}

static void multipart_as_the_sdks_send_it(void)
{
	char delim[MP_BOUNDARY_MAX + 3];
	CHECK(multipart_boundary("multipart/form-data; boundary=abc123", delim) == 0);
	CHECK(!strcmp(delim, "--abc123"));
	CHECK(multipart_boundary("multipart/form-data; boundary=\"a b\"", delim) == 0);
	CHECK(!strcmp(delim, "--a b"));
	CHECK(multipart_boundary("multipart/form-data", delim) == -EINVAL);
	CHECK(multipart_boundary("multipart/form-data; boundary=", delim) == -EINVAL);
	CHECK(multipart_boundary("text/plain; boundary=x", delim) == -EINVAL);
	char big[200];
	snprintf(big, sizeof(big), "multipart/form-data; boundary=%080d", 0);
	CHECK(multipart_boundary(big, delim) == -EINVAL);

	static const char body[] =
		"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/a.txt\"\r\n"
		"Content-Type: text/plain\r\n\r\nhello\r\n"
		"--b\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nnot a file\r\n"
		"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/tmp/--b\"\r\n\r\n"
		"two\r\nlines\r\n--b--\r\nepilogue";
	struct got g = { 0 };
	CHECK(multipart_each(body, sizeof(body) - 1, "--b", collect, &g) == 0);
	CHECK(g.n == 3);
	CHECK(!strcmp(g.names[0], "/home/user/a.txt") && !strcmp(g.data[0], "hello"));
	CHECK(!strcmp(g.names[1], "(none)") && !strcmp(g.data[1], "not a file"));
	CHECK(!strcmp(g.names[2], "/tmp/--b") && !strcmp(g.data[2], "two\r\nlines"));
	/* an empty part, and a part whose head is empty */
	static const char empty[] = "--b\r\nContent-Disposition: form-data; filename=\"/e\"\r\n\r\n"
				    "\r\n--b\r\n\r\nx\r\n--b--";
	memset(&g, 0, sizeof(g));
	CHECK(multipart_each(empty, sizeof(empty) - 1, "--b", collect, &g) == 0);
	CHECK(g.n == 2 && !strcmp(g.data[0], "") && !strcmp(g.data[1], "x"));
}

static void multipart_refuses_what_is_not_one(void)
{
	struct got g = { 0 };
	static const char *const bad[] = {
		"",
		"no delimiter at all",
		"--b\r\nContent-Disposition: form-data; filename=\"/a\"\r\n\r\nno end",
		"--b\r\nno blank line\r\n--b--",
		"--b\r\nContent-Disposition: form-data; filename=\"/a\r\n\r\nx\r\n--b--x",
		"junk--b\r\n\r\nx\r\n--b--",
		"--bX\r\n\r\nx\r\n--b--",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = multipart_each(bad[i], strlen(bad[i]), "--b", collect, &g);
		if (rc != -EINVAL)
			t_note("body %zu: %d", i, rc);
		CHECK(rc == -EINVAL);
	}
	/* a filename past MP_NAME_MAX */
	size_t n = MP_NAME_MAX + 200;
	char *b = malloc(n + 100), *p = b;
	p += sprintf(p, "--b\r\nContent-Disposition: form-data; filename=\"");
	memset(p, 'a', MP_NAME_MAX + 10);
	p += MP_NAME_MAX + 10;
	p += sprintf(p, "\"\r\n\r\nx\r\n--b--");
	CHECK(multipart_each(b, (size_t)(p - b), "--b", collect, &g) == -EINVAL);
	free(b);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "connect_frames_round_trip", connect_frames_round_trip },
		{ "connect_refuses_short_and_long", connect_refuses_short_and_long },
		{ "connect_codes", connect_codes },
		{ "tokens_seal_one_sandbox", tokens_seal_one_sandbox },
		{ "url_signature_as_the_sdk", url_signature_as_the_sdk },
		{ "recent_tokens", recent_tokens },
		{ "base64_both_alphabets", base64_both_alphabets },
		{ "multipart_as_the_sdks_send_it", multipart_as_the_sdks_send_it },
		{ "multipart_refuses_what_is_not_one", multipart_refuses_what_is_not_one },
		{ 0 },
	};
	return t_main(argc, argv, cases);
}
