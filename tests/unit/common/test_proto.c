/* Unit tests for the agent protocol codec, hostile frames included. */
#include "common/proto.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void build_exec(struct pbuf *b)
{
	CHECK(proto_begin(b, P_EXEC, 0, 7) == 0);
	CHECK(proto_put_str(b, A_ARG, "python3") == 0);
	CHECK(proto_put_str(b, A_ARG, "-c") == 0);
	CHECK(proto_put_u64(b, A_TIMEOUT_MS, 120000) == 0);
	CHECK(proto_put_u32(b, A_STDIN, 1) == 0);
	CHECK(proto_end(b) == 0);
}

static void test_roundtrip(void)
{
	struct pbuf b = { 0 };
	build_exec(&b);
	struct proto_frame f;
	ssize_t n = proto_parse(b.data, b.len, &f);
	CHECK(n == (ssize_t)b.len);
	CHECK(f.type == P_EXEC && f.id == 7 && f.flags == 0);
	CHECK(proto_check_attrs(&f) == 0);
	uint64_t t = 0;
	uint32_t s = 0;
	CHECK(proto_get_u64(&f, A_TIMEOUT_MS, &t) == 0 && t == 120000);
	CHECK(proto_get_u32(&f, A_STDIN, &s) == 0 && s == 1);
	char arg[16];
	CHECK(proto_get_str(&f, A_ARG, arg, sizeof(arg)) == 0 && !strcmp(arg, "python3"));
	size_t off = 0;
	struct proto_attr a;
	int args = 0;
	while (proto_next(&f, &off, &a) == 1)
		args += a.tag == A_ARG;
	CHECK(args == 2);
	CHECK(proto_get_u32(&f, A_PROC, &s) == -ENOENT);
	pbuf_release(&b);
}

static void test_binary_safe_raw(void)
{
	struct pbuf b = { 0 };
	uint8_t data[300];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)i; /* includes NUL and 0xff bytes */
	CHECK(proto_raw(&b, P_DATA, PF_EOF, 3, data, sizeof(data)) == 0);
	struct proto_frame f;
	CHECK(proto_parse(b.data, b.len, &f) == (ssize_t)b.len);
	CHECK(f.type == P_DATA && (f.flags & PF_EOF) && f.len == sizeof(data));
	CHECK(memcmp(f.payload, data, sizeof(data)) == 0);
	pbuf_release(&b);
}

static void test_truncated(void)
{
	struct pbuf b = { 0 };
	build_exec(&b);
	struct proto_frame f;
	/* Every strict prefix of a frame asks for more bytes, never errs. */
	for (size_t i = 0; i < b.len; i++)
		if (!CHECK(proto_parse(b.data, i, &f) == 0))
			break;
	pbuf_release(&b);
}

static void test_oversized_and_flags(void)
{
	uint8_t h[PROTO_HDR_SIZE] = { 0 };
	uint32_t len = PROTO_MAX_PAYLOAD + 1;
	memcpy(h, &len, 4); /* x86 is little-endian, as the wire */
	struct proto_frame f;
	CHECK(proto_parse(h, sizeof(h), &f) == -EMSGSIZE);
	memset(h, 0, sizeof(h));
	h[6] = 0x02; /* a reserved flag bit */
	CHECK(proto_parse(h, sizeof(h), &f) == -EPROTO);
	memset(h, 0, sizeof(h));
	h[4] = 0xee; /* an unknown type parses: the receiver answers ENOSYS */
	CHECK(proto_parse(h, sizeof(h), &f) == PROTO_HDR_SIZE && f.type == 0xee);
	CHECK(!strcmp(proto_type_name(0xee), "?"));
	CHECK(!strcmp(proto_type_name(P_EXEC), "exec"));
}

static void test_encoder_caps(void)
{
	struct pbuf b = { 0 };
	uint8_t *big = calloc(1, PROTO_MAX_PAYLOAD);
	CHECK(proto_begin(&b, P_FWRITE, 0, 1) == 0);
	CHECK(proto_put(&b, A_BYTES, big, PROTO_MAX_PAYLOAD - 6) == 0);
	CHECK(proto_put_u32(&b, A_MODE, 0644) == 0);
	size_t before = b.mark;
	CHECK(proto_end(&b) == -EMSGSIZE);
	CHECK(b.len == before); /* the oversized frame is gone */
	CHECK(proto_raw(&b, P_DATA, 0, 1, big, PROTO_MAX_PAYLOAD + 1) == -EMSGSIZE);
	CHECK(b.len == 0);
	char *s = malloc(PROTO_MAX_STR + 2);
	memset(s, 'a', PROTO_MAX_STR + 1);
	s[PROTO_MAX_STR + 1] = '\0';
	CHECK(proto_begin(&b, P_STAT, 0, 2) == 0);
	CHECK(proto_put_str(&b, A_PATH, s) == -ENAMETOOLONG);
	proto_abort(&b);
	CHECK(b.len == 0);
	free(s);
	free(big);
	pbuf_release(&b);
}

/* Frames built by hand, as a hostile peer would. */
static size_t put_attr(uint8_t *p, uint16_t tag, uint32_t len, const void *v, uint32_t vlen)
{
	memcpy(p, &tag, 2);
	memcpy(p + 2, &len, 4);
	memcpy(p + 6, v, vlen);
	return 6 + vlen;
}

static void test_hostile_attrs(void)
{
	uint8_t pl[256];
	struct proto_frame f = { .type = P_STAT, .id = 1, .payload = pl };
	/* attribute length running past the payload */
	f.len = (uint32_t)put_attr(pl, A_PATH, 100, "/x", 2);
	CHECK(proto_check_attrs(&f) == -EPROTO);
	CHECK(proto_get(&f, A_PATH, NULL) == NULL);
	/* a header cut short */
	f.len = 3;
	CHECK(proto_check_attrs(&f) == -EPROTO);
	/* a string with a NUL inside */
	f.len = (uint32_t)put_attr(pl, A_PATH, 4, "/a\0b", 4);
	char path[16];
	CHECK(proto_check_attrs(&f) == 0);
	CHECK(proto_get_str(&f, A_PATH, path, sizeof(path)) == -EINVAL);
	/* a string that does not fit the caller's buffer */
	f.len = (uint32_t)put_attr(pl, A_PATH, 20, "/aaaaaaaaaaaaaaaaaaa", 20);
	CHECK(proto_get_str(&f, A_PATH, path, sizeof(path)) == -ENAMETOOLONG);
	/* an integer of the wrong size */
	f.len = (uint32_t)put_attr(pl, A_MODE, 2, "\x01\x02", 2);
	uint32_t mode;
	CHECK(proto_get_u32(&f, A_MODE, &mode) == -EPROTO);
	/* too many attributes */
	size_t n = (PROTO_MAX_ATTRS + 1) * 6;
	uint8_t *many = calloc(1, n);
	struct proto_frame g = { .type = P_EXEC, .id = 1, .payload = many, .len = (uint32_t)n };
	CHECK(proto_check_attrs(&g) == -EPROTO);
	g.len = PROTO_MAX_ATTRS * 6;
	CHECK(proto_check_attrs(&g) == 0);
	free(many);
}

/* Random bytes through every entry point: must never crash or read out of
 * bounds (run under SANITIZE=address,undefined). */
static void test_random_garbage(void)
{
	srand(42);
	uint8_t buf[512];
	int frames = 0;
	for (int round = 0; round < 20000; round++) {
		size_t n = (size_t)rand() % sizeof(buf);
		for (size_t i = 0; i < n; i++)
			buf[i] = (uint8_t)rand();
		if (n >= 4 && (round & 1)) { /* a plausible length, so payloads get parsed */
			uint32_t len = (uint32_t)(n >= PROTO_HDR_SIZE ? n - PROTO_HDR_SIZE : 0);
			memcpy(buf, &len, 4);
			buf[6] = buf[7] = 0;
		}
		struct proto_frame f;
		if (proto_parse(buf, n, &f) > 0) {
			frames++;
			char s[64];
			uint32_t v;
			uint64_t w;
			proto_check_attrs(&f);
			proto_get_str(&f, A_PATH, s, sizeof(s));
			proto_get_u32(&f, A_MODE, &v);
			proto_get_u64(&f, A_SIZE, &w);
		}
	}
	CHECK(frames > 1000);
}

static void test_pbuf(void)
{
	struct pbuf b = { 0 };
	CHECK(pbuf_append(&b, "hello world", 11) == 0);
	pbuf_consume(&b, 6);
	CHECK(b.len == 5 && !memcmp(b.data, "world", 5));
	pbuf_consume(&b, 99);
	CHECK(b.len == 0);
	pbuf_release(&b);
	CHECK(b.data == NULL);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "proto_roundtrip", test_roundtrip },
		{ "proto_binary_safe_raw", test_binary_safe_raw },
		{ "proto_truncated_frames", test_truncated },
		{ "proto_oversized_and_reserved_flags", test_oversized_and_flags },
		{ "proto_encoder_caps", test_encoder_caps },
		{ "proto_hostile_attributes", test_hostile_attrs },
		{ "proto_random_garbage", test_random_garbage },
		{ "proto_pbuf", test_pbuf },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
