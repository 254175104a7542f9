/*
 * test_seal: the sealing of secrets' values (seal.h): a value opens with
 * the key and the associated data it was sealed with, and with nothing
 * else; the key file is made once, read again, and refused when it is not
 * a key of its owner's alone.
 */
#include "daemon/net/seal.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64], err[256];

static int setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/cpuos-test-seal-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		t_note("cannot remove %s", dir);
}

static const char *key_path(void)
{
	static char p[128];
	snprintf(p, sizeof(p), "%s/%s", dir, SEAL_KEY_FILE);
	return p;
}

static void test_a_value_opens_with_its_key_and_binding_only(void)
{
	struct seal *s = NULL, *again = NULL;
	CHECK(seal_load(dir, &s, err, sizeof(err)) == 0);
	struct stat st;
	CHECK(stat(key_path(), &st) == 0 && st.st_size == 32 && (st.st_mode & 0777) == 0600);
	const char *v = "sk-the-real-one";
	char *t = seal_wrap(s, "acct/KEY", v, strlen(v));
	CHECK(t && !strncmp(t, SEAL_PREFIX, strlen(SEAL_PREFIX)) && !strstr(t, v));
	CHECK(strlen(t) < SEAL_TEXT_MAX(strlen(v)));
	/* each sealing under a nonce of its own */
	char *t2 = seal_wrap(s, "acct/KEY", v, strlen(v));
	CHECK(t2 && strcmp(t, t2));
	size_t n = 0;
	char *p = seal_unwrap(s, "acct/KEY", t, &n);
	CHECK(p && n == strlen(v) && !strcmp(p, v));
	free(p);
	/* the same key file loaded again opens it */
	CHECK(seal_load(dir, &again, err, sizeof(err)) == 0);
	p = again ? seal_unwrap(again, "acct/KEY", t2, &n) : NULL;
	CHECK(p && !strcmp(p, v));
	free(p);
	/* other associated data, an altered text, a cut one, junk: nothing */
	CHECK(!seal_unwrap(s, "acct/OTHER", t, &n));
	char *bad = strdup(t);
	size_t at = strlen(SEAL_PREFIX) + 20;
	bad[at] = bad[at] == 'A' ? 'B' : 'A';
	CHECK(!seal_unwrap(s, "acct/KEY", bad, &n));
	bad[strlen(bad) - 4] = '\0';
	CHECK(!seal_unwrap(s, "acct/KEY", bad, &n));
	CHECK(!seal_unwrap(s, "acct/KEY", "sealed1:", &n));
	CHECK(!seal_unwrap(s, "acct/KEY", "sealed1:AAAA", &n));
	CHECK(!seal_unwrap(s, "acct/KEY", "sealed1:%%%%", &n));
	CHECK(!seal_unwrap(s, "acct/KEY", v, &n));
	CHECK(!seal_unwrap(s, "acct/KEY", NULL, &n));
	free(bad);
	free(t);
	free(t2);
	seal_free(s);
	seal_free(again);
}

static void test_another_key_opens_nothing(void)
{
	struct seal *s = NULL, *other = NULL;
	CHECK(seal_load(dir, &s, err, sizeof(err)) == 0);
	char *t = seal_wrap(s, "a", "v", 1);
	CHECK(unlink(key_path()) == 0);
	CHECK(seal_load(dir, &other, err, sizeof(err)) == 0); /* a new key */
	size_t n;
	CHECK(t && other && !seal_unwrap(other, "a", t, &n));
	free(t);
	seal_free(s);
	seal_free(other);
}

static void test_a_longest_value_fits(void)
{
	struct seal *s = NULL;
	CHECK(seal_load(dir, &s, err, sizeof(err)) == 0);
	char v[8193];
	memset(v, 'x', 8192);
	v[8192] = '\0';
	char *t = seal_wrap(s, "", v, 8192);
	CHECK(t && strlen(t) < SEAL_TEXT_MAX(8192));
	size_t n = 0;
	char *p = t ? seal_unwrap(s, "", t, &n) : NULL;
	CHECK(p && n == 8192 && !memcmp(p, v, 8192));
	free(p);
	free(t);
	seal_free(s);
}

static void test_a_key_file_that_is_no_key_is_refused(void)
{
	struct seal *s = NULL;
	int fd = open(key_path(), O_WRONLY | O_CREAT | O_EXCL, 0644);
	CHECK(fd >= 0 && write(fd, "0123456789abcdef0123456789abcdef", 32) == 32);
	CHECK(fchmod(fd, 0644) == 0); /* whatever the umask */
	close(fd);
	/* open to others */
	CHECK(seal_load(dir, &s, err, sizeof(err)) == -EPERM && strstr(err, "not a key"));
	/* short */
	CHECK(chmod(key_path(), 0600) == 0 && truncate(key_path(), 16) == 0);
	CHECK(seal_load(dir, &s, err, sizeof(err)) == -EPERM);
	/* a link, never followed */
	CHECK(unlink(key_path()) == 0 && symlink("/etc/passwd", key_path()) == 0);
	CHECK(seal_load(dir, &s, err, sizeof(err)) < 0);
	/* none of them replaced */
	struct stat st;
	CHECK(lstat(key_path(), &st) == 0 && S_ISLNK(st.st_mode));
	CHECK(s == NULL);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
	    {"a_value_opens_with_its_key_and_binding_only",
	     test_a_value_opens_with_its_key_and_binding_only},
	    {"another_key_opens_nothing", test_another_key_opens_nothing},
	    {"a_longest_value_fits", test_a_longest_value_fits},
	    {"a_key_file_that_is_no_key_is_refused", test_a_key_file_that_is_no_key_is_refused},
	    {0, 0},
	};
	t_fixture(setup, teardown);
	return t_main(argc, argv, cases);
}
