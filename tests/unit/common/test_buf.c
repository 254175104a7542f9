/* Unit tests for the growable buffer (common/buf) and the error buffer
 * (common/errbuf). */
#include "common/buf.h"
#include "common/errbuf.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void test_add(void)
{
	struct buf b;
	buf_init(&b, 0);
	CHECK(b.p == NULL && b.len == 0);
	CHECK(buf_add(&b, "abc", 3) == 0 && b.len == 3 && !strcmp(b.p, "abc"));
	CHECK(buf_adds(&b, "def") == 0 && !strcmp(b.p, "abcdef"));
	CHECK(buf_add(&b, "", 0) == 0 && b.len == 6);
	/* many small appends: the bytes and the NUL stay right as it grows */
	for (int i = 0; i < 10000; i++)
		if (buf_add(&b, "x", 1))
			break;
	CHECK(b.len == 10006 && b.cap > b.len && b.p[b.len] == '\0');
	CHECK(b.p[6] == 'x' && b.p[10005] == 'x');
	/* bytes with a NUL among them are kept whole */
	buf_release(&b);
	CHECK(b.p == NULL && b.len == 0 && b.cap == 0);
	CHECK(buf_add(&b, "a\0b", 3) == 0 && b.len == 3 && !memcmp(b.p, "a\0b", 4));
	buf_release(&b);
}

static void test_cap(void)
{
	struct buf b;
	buf_init(&b, 8);
	CHECK(buf_add(&b, "12345678", 8) == 0);
	CHECK(buf_add(&b, "9", 1) == -EMSGSIZE);
	CHECK(b.len == 8 && !strcmp(b.p, "12345678")); /* unchanged */
	b.len = 0;                                     /* a reader may take it back */
	CHECK(buf_add(&b, "abcdefghi", 9) == -EMSGSIZE && b.len == 0);
	CHECK(buf_addf(&b, "%d-%s", 12, "ab") == 0 && !strcmp(b.p, "12-ab"));
	CHECK(buf_addf(&b, "%s", "long") == -EMSGSIZE && !strcmp(b.p, "12-ab"));
	CHECK(buf_push(&b, 4) == NULL);
	buf_release(&b);
	CHECK(b.max == 8); /* the cap outlives a release */
	/* a size that would wrap is refused, not allocated */
	buf_init(&b, 0);
	CHECK(buf_reserve(&b, SIZE_MAX - 1) == -EMSGSIZE && b.p == NULL);
	buf_release(&b);
}

static void test_formatted(void)
{
	struct buf b;
	buf_init(&b, 0);
	CHECK(buf_addf(&b, "%s=%d", "n", 42) == 0 && !strcmp(b.p, "n=42"));
	char big[3000];
	memset(big, 'y', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	CHECK(buf_addf(&b, ";%s;", big) == 0 && b.len == 4 + 2 + 2999);
	CHECK(b.p[5] == 'y' && b.p[b.len - 1] == ';' && b.p[b.len] == '\0');
	size_t n = 0;
	char *p = buf_detach(&b, &n);
	CHECK(p && n == 4 + 2 + 2999 && b.p == NULL && b.len == 0 && b.cap == 0);
	free(p);
	CHECK(buf_detach(&b, &n) == NULL && n == 0);
}

struct rec {
	int a;
	char name[12];
};

static void test_array(void)
{
	struct buf b;
	buf_init(&b, 0);
	for (int i = 0; i < 100; i++) {
		struct rec *r = buf_push(&b, sizeof(*r));
		if (!CHECK(r != NULL))
			break;
		CHECK(r->a == 0 && r->name[0] == '\0'); /* zeroed */
		r->a = i;
	}
	struct rec *rs = (struct rec *)b.p;
	CHECK(b.len == 100 * sizeof(struct rec) && rs[0].a == 0 && rs[99].a == 99);
	buf_wipe(&b);
	CHECK(b.p == NULL && b.len == 0);
}

static void test_errbuf(void)
{
	char err[8] = "";
	CHECK(errbuf_set(err, sizeof(err), -EINVAL, "bad '%s'", "value") == -EINVAL);
	CHECK(!strcmp(err, "bad 'va")); /* cut to fit, terminated */
	CHECK(errbuf_set(NULL, 0, -EIO, "nowhere") == -EIO);
	CHECK(errbuf_set(err, 0, 0, "not written") == 0 && !strcmp(err, "bad 'va"));
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "add", test_add },	 { "cap", test_cap },	    { "formatted", test_formatted },
		{ "array", test_array }, { "errbuf", test_errbuf }, { 0 },
	};
	return t_main(argc, argv, cases);
}
