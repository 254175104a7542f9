/*
 * test_snapblob: snapshots to a real object store (Swift's s3api, started
 * once for the binary by tests/lib/objstore) and back, and every way a
 * store could hand back something else: altered, truncated, lengthened,
 * missing or swapped files and manifests, each refused with what differs
 * and nothing left behind.
 */
#include "daemon/blob/snapblob.h"

#include "lib/s3.h"
#include "runner/snap.h"
#include "tests/lib/objstore.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#define MEM_SIZE (8u << 20)

static int store_up;
static char tmpdir[64];

static int setup(void)
{
	if (!store_up)
		t_note("the object store did not start (see above)");
	return store_up ? 0 : -1;
}

static struct s3 *client(void)
{
	struct s3_conf c;
	char err[256];
	struct s3 *s = NULL;
	if (CHECK(s3_conf_env(&c, "CPUOS_S3", err, sizeof(err)) == 0))
		c.part_size = S3_PART_MIN; /* the 8 MiB RAM file goes up in parts */
	if (!CHECK(s3_open(&s, &c, err, sizeof(err)) == 0))
		t_note("%s", err);
	return s;
}

static int write_file(const char *dir, const char *name, const void *p, size_t n, off_t size)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int ok = fd >= 0 && write(fd, p, n) == (ssize_t)n && ftruncate(fd, size) == 0;
	if (fd >= 0)
		close(fd);
	return ok ? 0 : -1;
}

/* A paused-like snapshot in dir: state (checksummed), an 8 MiB RAM file
 * mostly holes with a page of bytes in the middle, and a disk layer; the
 * mem and disk by size only, as a pause records them. */
static void make_snapshot(const char *dir)
{
	mkdir(dir, 0700);
	char page[4096];
	for (size_t i = 0; i < sizeof(page); i++)
		page[i] = (char)(i * 7 + 1);
	CHECK(write_file(dir, "state", "device state", 12, 12) == 0);
	CHECK(write_file(dir, "mem", "", 0, MEM_SIZE) == 0);
	char path[256];
	snprintf(path, sizeof(path), "%s/mem", dir);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	CHECK(fd >= 0 && pwrite(fd, page, sizeof(page), MEM_SIZE / 2) == (ssize_t)sizeof(page));
	close(fd);
	CHECK(write_file(dir, "layer.qcow2", "QFI\xfb layer", 10, 65536 + 3) == 0);
	struct snap_manifest m;
	memset(&m, 0, sizeof(m));
	snprintf(m.env.qemu, sizeof(m.env.qemu), "7.2.22");
	snprintf(m.env.accel, sizeof(m.env.accel), "tcg");
	snprintf(m.env.template, sizeof(m.env.template), "sha256:%064d", 0);
	m.env.vcpus = 1;
	m.env.memory_mb = 8;
	m.env.disk_mb = 64;
	m.ram_in_file = 1;
	snprintf(m.files[SNAP_STATE].name, sizeof(m.files[0].name), "state");
	snprintf(m.files[SNAP_MEM].name, sizeof(m.files[0].name), "mem");
	snprintf(m.files[SNAP_DISK].name, sizeof(m.files[0].name), "layer.qcow2");
	char err[256];
	if (!CHECK(snap_seal(dir, &m, err, sizeof(err)) == 0))
		t_note("%s", err);
}

static int same_file(const char *a_dir, const char *b_dir, const char *name)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "cmp -s '%s/%s' '%s/%s'", a_dir, name, b_dir, name);
	return system(cmd) == 0;
}

static void paths(char *src, char *dst, size_t n, const char *tag)
{
	snprintf(src, n, "%s/%s-src-%d", tmpdir, tag, (int)getpid());
	snprintf(dst, n, "%s/%s-dst-%d", tmpdir, tag, (int)getpid());
}

static void test_a_snapshot_goes_up_and_comes_back(void)
{
	struct s3 *s = client();
	if (!s)
		return;
	char src[128], dst[128], err[256], msha[65], prefix[64];
	paths(src, dst, sizeof(src), "round");
	snprintf(prefix, sizeof(prefix), "pauses/round-%d", (int)getpid());
	make_snapshot(src);
	int r = snapblob_push(s, src, prefix, msha, err, sizeof(err));
	if (!CHECK(r == 0))
		t_note("push: %s", err);
	CHECK(strlen(msha) == 64);
	r = snapblob_pull(s, prefix, msha, dst, err, sizeof(err));
	if (!CHECK(r == 0))
		t_note("pull: %s", err);
	CHECK(same_file(src, dst, "state") && same_file(src, dst, "mem") &&
	      same_file(src, dst, "layer.qcow2"));
	/* What came back is sealed: every file checks against its sum. */
	struct snap_manifest m, was;
	r = snap_load(dst, &m, 1, err, sizeof(err));
	if (!CHECK(r == 0))
		t_note("load: %s", err);
	CHECK(m.sealed && m.files[SNAP_MEM].sha256[0] && m.files[SNAP_DISK].sha256[0]);
	CHECK(snap_load(src, &was, 0, err, sizeof(err)) == 0);
	CHECK(m.created_ns == was.created_ns && !strcmp(m.env.template, was.env.template));
	CHECK(m.env.memory_mb == 8 && m.ram_in_file);
	/* The RAM file's zeros stayed holes: one page of data, not 8 MiB. */
	char path[256];
	struct stat st;
	snprintf(path, sizeof(path), "%s/mem", dst);
	CHECK(stat(path, &st) == 0 && st.st_size == MEM_SIZE);
	t_note("mem: %lld bytes, %lld on disk", (long long)st.st_size, (long long)st.st_blocks * 512);
	CHECK(st.st_blocks * 512 <= 1024 * 1024); /* the file system may round up */
	/* A pull into a directory that exists is refused and leaves it be. */
	r = snapblob_pull(s, prefix, msha, dst, err, sizeof(err));
	CHECK(r == -EEXIST);
	CHECK(snap_load(dst, &m, 1, err, sizeof(err)) == 0);
	/* Gone from the store: no such snapshot. */
	CHECK(snapblob_delete(s, prefix, err, sizeof(err)) == 0);
	char dst2[160];
	snprintf(dst2, sizeof(dst2), "%s.2", dst);
	r = snapblob_pull(s, prefix, NULL, dst2, err, sizeof(err));
	CHECK(r == -ENOENT && access(dst2, F_OK) < 0);
	snap_remove(src);
	snap_remove(dst);
	s3_close(s);
}

enum sha_mode { SHA_RECORDED, SHA_OTHER, SHA_NONE };

/* Pushes a fresh snapshot, applies one change to the store, and expects
 * the pull (told the manifest's checksum, another, or none) to fail with
 * -EBADMSG and a reason holding expect. */
static void tampered_as(const char *tag, const char *key_suffix, const void *bytes, size_t n,
			enum sha_mode sha, int raw, const char *expect)
{
	struct s3 *s = client();
	if (!s)
		return;
	char src[128], dst[128], err[256], msha[65], prefix[64], key[S3_KEY_MAX + 1];
	paths(src, dst, sizeof(src), tag);
	snprintf(prefix, sizeof(prefix), "pauses/%s-%d", tag, (int)getpid());
	make_snapshot(src);
	CHECK(snapblob_push(s, src, prefix, msha, err, sizeof(err)) == 0);
	if (key_suffix) {
		snprintf(key, sizeof(key), "%s/%s", prefix, key_suffix);
		/* A file in the store is compressed: so is the forgery,
		 * unless it is the manifest or a raw one is wanted. */
		size_t zn = ZSTD_compressBound(n);
		char *z = malloc(zn);
		if (bytes && strcmp(key_suffix, SNAP_MANIFEST) && !raw)
			zn = ZSTD_compress(z, zn, bytes, n, 1);
		else if (bytes)
			memcpy(z, bytes, zn = n);
		if (bytes)
			CHECK(!ZSTD_isError(zn) && s3_put_mem(s, key, z, zn, err, sizeof(err)) == 0);
		else
			CHECK(s3_delete(s, key, err, sizeof(err)) == 0);
		free(z);
	}
	if (sha == SHA_OTHER)
		msha[0] = msha[0] == 'a' ? 'b' : 'a';
	int r = snapblob_pull(s, prefix, sha == SHA_NONE ? NULL : msha, dst, err, sizeof(err));
	CHECK(r == -EBADMSG);
	t_note("%s: %s", tag, err);
	if (!CHECK(strstr(err, expect) != NULL))
		t_note("expected '%s' in it", expect);
	CHECK(access(dst, F_OK) < 0); /* nothing left of it */
	snapblob_delete(s, prefix, err, sizeof(err));
	snap_remove(src);
	s3_close(s);
}

static void tampered(const char *tag, const char *key_suffix, const void *bytes, size_t n,
		     enum sha_mode sha, const char *expect)
{
	tampered_as(tag, key_suffix, bytes, n, sha, 0, expect);
}

static void test_an_altered_file_is_refused(void)
{
	/* The state's 12 bytes, one changed: same size, other sum. */
	tampered("altered", "state", "device statE", 12, SHA_RECORDED, "'state' does not match its checksum");
}

static void test_a_truncated_file_is_refused(void)
{
	tampered("truncated", "disk", "QFI", 3, SHA_RECORDED, "'disk' is short of the");
}

static void test_a_longer_file_is_refused(void)
{
	static char big[65536 + 100];
	tampered("longer", "disk", big, sizeof(big), SHA_RECORDED, "'disk' is over the");
}

/* Not zstd at all, or a zstd frame cut short: refused as such. */
static void test_a_file_not_compressed_is_refused(void)
{
	tampered_as("raw", "state", "device state", 12, SHA_RECORDED, 1,
		    "'state' is not the compressed file");
	char z[256];
	size_t zn = ZSTD_compress(z, sizeof(z), "device state", 12, 1);
	CHECK(!ZSTD_isError(zn) && zn > 4);
	tampered_as("cut", "state", z, zn - 4, SHA_RECORDED, 1, "'state' is not the compressed file");
}

static void test_a_missing_file_is_refused(void)
{
	tampered("missing", "mem", NULL, 0, SHA_RECORDED, "'mem' is missing");
}

static void test_another_manifest_is_refused(void)
{
	tampered("swapped", NULL, NULL, 0, SHA_OTHER, "not the one recorded");
}

static void test_hostile_manifests_are_refused(void)
{
	static char huge[SNAP_MANIFEST_MAX + 10];
	memset(huge, ' ', sizeof(huge));
	tampered("huge", SNAP_MANIFEST, huge, sizeof(huge), SHA_NONE, "too big");
	tampered("garbage", SNAP_MANIFEST, "{not json", 9, SHA_NONE, "not JSON");
	/* A manifest that names a file outside its directory. With no
	 * recorded checksum to hold it to (as for an unknown snapshot),
	 * the parse must refuse it. */
	struct s3 *s = client();
	if (!s)
		return;
	char src[128], dst[128], err[256], msha[65], key[S3_KEY_MAX + 1];
	paths(src, dst, sizeof(src), "escape");
	make_snapshot(src);
	CHECK(snapblob_push(s, src, "pauses/escape", msha, err, sizeof(err)) == 0);
	struct snap_manifest m;
	CHECK(snap_load(src, &m, 0, err, sizeof(err)) == 0);
	m.sealed = 1;
	for (int i = 0; i < SNAP_NFILES; i++)
		snprintf(m.files[i].sha256, sizeof(m.files[i].sha256), "%064d", i);
	static const char *const names[] = { "../../etc/passwd", ".hidden", SNAP_MANIFEST, "a/b" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(m.files[SNAP_DISK].name, sizeof(m.files[0].name), "%s", names[i]);
		char *text = snap_manifest_json(&m);
		snprintf(key, sizeof(key), "pauses/escape/%s", SNAP_MANIFEST);
		CHECK(text && s3_put_mem(s, key, text, strlen(text), err, sizeof(err)) == 0);
		free(text);
		int r = snapblob_pull(s, "pauses/escape", NULL, dst, err, sizeof(err));
		CHECK(r == -EBADMSG && strstr(err, "malformed"));
		CHECK(access(dst, F_OK) < 0);
	}
	t_note("%s", err);
	/* Two kinds under one name would write one file twice. */
	snprintf(m.files[SNAP_DISK].name, sizeof(m.files[0].name), "mem");
	char *text = snap_manifest_json(&m);
	CHECK(text && s3_put_mem(s, key, text, strlen(text), err, sizeof(err)) == 0);
	free(text);
	CHECK(snapblob_pull(s, "pauses/escape", NULL, dst, err, sizeof(err)) == -EBADMSG);
	t_note("%s", err);
	snapblob_delete(s, "pauses/escape", err, sizeof(err));
	snap_remove(src);
	s3_close(s);
}

static void test_a_snapshot_that_changes_while_pushed(void)
{
	struct s3 *s = client();
	if (!s)
		return;
	char src[128], dst[128], err[256], msha[65];
	paths(src, dst, sizeof(src), "changed");
	make_snapshot(src);
	/* The state, checksummed at the pause, rewritten since. */
	CHECK(write_file(src, "state", "device STATE", 12, 12) == 0);
	int r = snapblob_push(s, src, "pauses/changed", msha, err, sizeof(err));
	CHECK(r == -EBADMSG);
	t_note("%s", err);
	/* The disk grown since: its size differs. */
	make_snapshot(src);
	CHECK(write_file(src, "layer.qcow2", "QFI\xfb layer", 10, 65536 + 4096) == 0);
	r = snapblob_push(s, src, "pauses/changed", msha, err, sizeof(err));
	CHECK(r == -EBADMSG);
	t_note("%s", err);
	/* Neither left a manifest: nothing to pull. */
	CHECK(snapblob_pull(s, "pauses/changed", NULL, dst, err, sizeof(err)) == -ENOENT);
	snapblob_delete(s, "pauses/changed", err, sizeof(err));
	snap_remove(src);
	s3_close(s);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "a_snapshot_goes_up_and_comes_back", test_a_snapshot_goes_up_and_comes_back },
		{ "an_altered_file_is_refused", test_an_altered_file_is_refused },
		{ "a_truncated_file_is_refused", test_a_truncated_file_is_refused },
		{ "a_longer_file_is_refused", test_a_longer_file_is_refused },
		{ "a_file_not_compressed_is_refused", test_a_file_not_compressed_is_refused },
		{ "a_missing_file_is_refused", test_a_missing_file_is_refused },
		{ "another_manifest_is_refused", test_another_manifest_is_refused },
		{ "hostile_manifests_are_refused", test_hostile_manifests_are_refused },
		{ "a_snapshot_that_changes_while_pushed", test_a_snapshot_that_changes_while_pushed },
		{ NULL, NULL },
	};
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/cpuos-test-snapblob-%d", (int)getpid());
	mkdir(tmpdir, 0700);
	char store[96];
	snprintf(store, sizeof(store), "%s/store", tmpdir);
	store_up = objstore_up(store, "cpuos-test-snapblob") == 0;
	t_fixture(setup, NULL);
	int rc = t_main(argc, argv, cases);
	objstore_down();
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "test_snapblob: could not remove %s\n", tmpdir);
	return rc;
}
