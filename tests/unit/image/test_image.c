/* Unit tests for templates from images (src/image): layers applied to a
 * tree (whiteouts, owners, modes, links), what a hostile layer tries
 * refused with nothing written outside, limits, OCI layouts and `docker
 * save` archives checked against their digests, the guest's needs, and an
 * import in a user namespace made into an erofs image. Layers are tars
 * written by hand here (ustar, pax records where needed), so a test can
 * say what no archiver would write. */
#include "image/image.h"
#include "image/image_impl.h"
#include "tests/lib/tap.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* ---- a tar by hand ---- */

struct tar {
	char *p;
	size_t len, cap;
};

static void put(struct tar *t, const void *p, size_t n)
{
	if (t->len + n > t->cap) {
		t->cap = (t->len + n) * 2 + 4096;
		t->p = realloc(t->p, t->cap);
	}
	memcpy(t->p + t->len, p, n);
	t->len += n;
}

static void pad(struct tar *t)
{
	static const char zero[512];
	if (t->len % 512)
		put(t, zero, 512 - t->len % 512);
}

static void header(struct tar *t, const char *name, char type, unsigned long long size,
		   unsigned mode, unsigned uid, unsigned gid, const char *link)
{
	char h[512] = { 0 };
	snprintf(h, 100, "%s", name);
	snprintf(h + 100, 8, "%07o", mode);
	snprintf(h + 108, 8, "%07o", uid);
	snprintf(h + 116, 8, "%07o", gid);
	snprintf(h + 124, 12, "%011llo", size < 077777777777ULL ? size : 0);
	snprintf(h + 136, 12, "%011o", 1700000000u);
	memset(h + 148, ' ', 8);
	h[156] = type;
	if (link)
		snprintf(h + 157, 100, "%s", link);
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += (unsigned char)h[i];
	snprintf(h + 148, 8, "%06o", sum);
	h[155] = ' ';
	put(t, h, 512);
}

static void file(struct tar *t, const char *name, const char *data, unsigned mode, unsigned uid,
		 unsigned gid)
{
	header(t, name, '0', strlen(data), mode, uid, gid, NULL);
	put(t, data, strlen(data));
	pad(t);
}

static void entry(struct tar *t, const char *name, char type, const char *link)
{
	header(t, name, type, 0, type == '5' ? 0755 : 0777, 0, 0, link);
}

/* A pax record for the next entry: its real size (above ustar's 8 GiB). */
static void pax_size(struct tar *t, unsigned long long size)
{
	char rec[64];
	int n = snprintf(rec, sizeof(rec), "xx size=%llu\n", size);
	char len[8];
	snprintf(len, sizeof(len), "%d", n);
	memcpy(rec, len, 2);
	header(t, "PaxHeader", 'x', (unsigned long long)n, 0644, 0, 0, NULL);
	put(t, rec, (size_t)n);
	pad(t);
}

/* A pax record for the next entry: its name (past ustar's 100 bytes). */
static void pax_path(struct tar *t, const char *path)
{
	char rec[1400];
	size_t body = strlen(" path=\n") + strlen(path);
	size_t n = body + 1;
	while (n != body + (size_t)snprintf(NULL, 0, "%zu", n))
		n = body + (size_t)snprintf(NULL, 0, "%zu", n);
	snprintf(rec, sizeof(rec), "%zu path=%s\n", n, path);
	header(t, "PaxHeader", 'x', (unsigned long long)n, 0644, 0, 0, NULL);
	put(t, rec, n);
	pad(t);
}

static void end(struct tar *t)
{
	static const char zero[1024];
	put(t, zero, sizeof(zero));
}

static char dir[] = "/tmp/cpuos-image-XXXXXX";
static int rootfd = -1;

static int setup(void)
{
	/* Open to others: an import's namespace root walks to its work
	 * directory by path, as it would to the cache's. */
	if (!mkdtemp(dir) || chmod(dir, 0755) < 0)
		return -1;
	char root[64];
	snprintf(root, sizeof(root), "%s/root", dir);
	mkdir(root, 0755);
	rootfd = open(root, O_RDONLY | O_DIRECTORY);
	return rootfd < 0;
}

static void teardown(void)
{
	image_remove_tree(AT_FDCWD, dir);
}

static int tar_fd(struct tar *t)
{
	char path[64];
	snprintf(path, sizeof(path), "%s/layer.XXXXXX", dir);
	int fd = mkstemp(path);
	if (fd >= 0 && write(fd, t->p, t->len) != (ssize_t)t->len) {
		close(fd);
		fd = -1;
	}
	free(t->p);
	*t = (struct tar){ 0 };
	return fd;
}

static char err[700];

static int apply(struct tar *t, const struct image_limits *lim)
{
	struct image_usage u = { 0 };
	int fd = tar_fd(t);
	int r = image_layer_apply(rootfd, fd, lim, &u, err, sizeof(err));
	if (r < 0)
		t_note("refused: %s", err);
	close(fd);
	return r;
}

static int at(const char *path, struct stat *st)
{
	return fstatat(rootfd, path, st, AT_SYMLINK_NOFOLLOW);
}

static int exists(const char *path)
{
	struct stat st;
	return at(path, &st) == 0;
}

static void test_entries(void)
{
	struct tar t = { 0 };
	entry(&t, "./", '5', NULL);
	entry(&t, "etc/", '5', NULL);
	file(&t, "etc/marker", "hello\n", 0644, 0, 0);
	file(&t, "usr/bin/su", "#!\n", 04755, 0, 0); /* parent made */
	file(&t, "home/app/data", "x", 0600, 1234, 5678);
	entry(&t, "etc/localtime", '2', "/usr/share/zoneinfo/UTC");
	entry(&t, "etc/marker2", '1', "etc/marker");
	entry(&t, "run/fifo", '6', NULL);
	end(&t);
	CHECK(apply(&t, NULL) == 0);
	struct stat st;
	CHECK(at("etc/marker", &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 6 &&
	      (st.st_mode & 07777) == 0644 && st.st_mtime == 1700000000);
	CHECK(at("usr/bin/su", &st) == 0 && (st.st_mode & 07777) == 04755); /* setuid kept */
	CHECK(at("home/app/data", &st) == 0 && st.st_uid == 1234 && st.st_gid == 5678 &&
	      (st.st_mode & 0777) == 0600);
	char link[128] = "";
	CHECK(readlinkat(rootfd, "etc/localtime", link, sizeof(link) - 1) > 0 &&
	      !strcmp(link, "/usr/share/zoneinfo/UTC")); /* absolute: the guest's */
	struct stat a;
	CHECK(at("etc/marker2", &st) == 0 && at("etc/marker", &a) == 0 && st.st_ino == a.st_ino);
	CHECK(at("run/fifo", &st) == 0 && S_ISFIFO(st.st_mode));
	/* A later layer replaces a file with a directory and a link with a file. */
	entry(&t, "etc/marker/", '5', NULL);
	file(&t, "etc/localtime", "UTC\n", 0644, 0, 0);
	end(&t);
	CHECK(apply(&t, NULL) == 0);
	CHECK(at("etc/marker", &st) == 0 && S_ISDIR(st.st_mode));
	CHECK(at("etc/localtime", &st) == 0 && S_ISREG(st.st_mode));
}

static void test_whiteouts(void)
{
	struct tar t = { 0 };
	file(&t, "a/x", "1", 0644, 0, 0);
	file(&t, "a/y", "2", 0644, 0, 0);
	file(&t, "b/z", "3", 0644, 0, 0);
	file(&t, "b/deep/w", "4", 0644, 0, 0);
	file(&t, "c/gone/f", "5", 0644, 0, 0);
	end(&t);
	CHECK(apply(&t, NULL) == 0);
	/* The whiteouts come after the layer's own b/new: they hide lower layers only. */
	file(&t, "b/new", "6", 0644, 0, 0);
	file(&t, "a/.wh.x", "", 0644, 0, 0);
	file(&t, "b/.wh..wh..opq", "", 0644, 0, 0);
	file(&t, "c/.wh.gone", "", 0644, 0, 0);
	file(&t, "nowhere/.wh.thing", "", 0644, 0, 0);
	end(&t);
	CHECK(apply(&t, NULL) == 0);
	CHECK(!exists("a/x") && exists("a/y"));
	CHECK(!exists("b/z") && !exists("b/deep") && exists("b/new"));
	CHECK(!exists("c/gone") && exists("c"));
	CHECK(!exists("a/.wh.x") && !exists("b/.wh..wh..opq") && !exists("nowhere"));
}

/* Nothing appeared beside the root. */
static int outside_clean(void)
{
	char p[128];
	snprintf(p, sizeof(p), "%s/evil", dir);
	struct stat st;
	int clean = stat(p, &st) < 0;
	snprintf(p, sizeof(p), "%s/outside/passwd", dir);
	return clean && stat(p, &st) < 0;
}

static void test_hostile(void)
{
	char outside[128];
	snprintf(outside, sizeof(outside), "%s/outside", dir);
	mkdir(outside, 0755);
	struct tar t = { 0 };
	file(&t, "../evil", "x", 0644, 0, 0);
	end(&t);
	CHECK(apply(&t, NULL) == -EINVAL && strstr(err, "../evil"));
	file(&t, "a/../../evil", "x", 0644, 0, 0);
	end(&t);
	CHECK(apply(&t, NULL) == -EINVAL);
	/* A symlink out, then a write through it. */
	entry(&t, "link", '2', outside);
	file(&t, "link/passwd", "root::0:0\n", 0644, 0, 0);
	end(&t);
	CHECK(apply(&t, NULL) == -EINVAL && strstr(err, "symlink"));
	entry(&t, "up", '2', "../../../..");
	file(&t, "up/evil", "x", 0644, 0, 0);
	end(&t);
	CHECK(apply(&t, NULL) == -EINVAL);
	/* A whiteout through a symlink removes nothing out there. */
	char keep[160];
	snprintf(keep, sizeof(keep), "%s/keep", outside);
	close(open(keep, O_CREAT | O_WRONLY, 0644));
	entry(&t, "link2", '2', outside);
	end(&t);
	CHECK(apply(&t, NULL) == 0);
	file(&t, "link2/.wh.keep", "", 0644, 0, 0);
	end(&t);
	CHECK(apply(&t, NULL) == -EINVAL && access(keep, F_OK) == 0);
	/* Hard links out of the root, or to what is not there. */
	entry(&t, "hl", '1', "../../etc/passwd");
	end(&t);
	CHECK(apply(&t, NULL) == -EINVAL);
	entry(&t, "hl", '1', "link/keep");
	end(&t);
	CHECK(apply(&t, NULL) == -EINVAL);
	/* Device nodes. */
	header(&t, "dev/sda", '4', 0, 0600, 0, 0, NULL);
	end(&t);
	CHECK(apply(&t, NULL) == -EINVAL && strstr(err, "device"));
	header(&t, "null", '3', 0, 0666, 0, 0, NULL);
	end(&t);
	CHECK(apply(&t, NULL) == -EINVAL);
	/* Owners outside the namespace's range. */
	file(&t, "big-owner", "x", 0644, 70000, 0);
	end(&t);
	CHECK(apply(&t, NULL) == -EINVAL);
	/* Deeper than a removal goes: refused, so nothing is left behind. */
	char deep[1200] = "";
	for (int i = 0; i < 300; i++)
		strcat(deep, "d/");
	strcat(deep, "f");
	pax_path(&t, deep);
	header(&t, "deep", '0', 0, 0644, 0, 0, NULL);
	end(&t);
	CHECK(apply(&t, NULL) == -EINVAL && !exists("d"));
	/* Not a tar at all. */
	t.len = 0;
	put(&t, "this is not a tar, not even close; nothing here is a header", 60);
	CHECK(apply(&t, NULL) == -EINVAL);
	CHECK(outside_clean());
	CHECK(!exists("dev/sda") && !exists("null"));
}

static void test_limits(void)
{
	struct image_limits lim = { .max_bytes = 1 << 20, .max_entries = 100 };
	struct tar t = { 0 };
	/* A 10 GB (sparse) file is refused before a byte of it is written. */
	pax_size(&t, 10ULL << 30);
	header(&t, "sparse", '0', 0, 0644, 0, 0, NULL);
	end(&t);
	CHECK(apply(&t, NULL) == -EFBIG && !exists("sparse"));
	/* A decompression bomb: 64 MB of zeros in a gzip of 64 KB. */
	char path[64];
	snprintf(path, sizeof(path), "%s/bomb.tar.gz", dir);
	struct archive *a = archive_write_new();
	archive_write_add_filter_gzip(a);
	archive_write_set_format_raw(a);
	CHECK(archive_write_open_filename(a, path) == ARCHIVE_OK);
	struct archive_entry *ae = archive_entry_new();
	archive_entry_set_filetype(ae, AE_IFREG);
	archive_write_header(a, ae);
	header(&t, "bomb", '0', 64ULL << 20, 0644, 0, 0, NULL);
	archive_write_data(a, t.p, t.len);
	free(t.p);
	t = (struct tar){ 0 };
	static char zeros[1 << 20];
	for (int i = 0; i < 64; i++)
		archive_write_data(a, zeros, sizeof(zeros));
	archive_write_data(a, zeros, 1024);
	archive_entry_free(ae);
	archive_write_close(a);
	archive_write_free(a);
	struct stat st;
	CHECK(stat(path, &st) == 0 && st.st_size < (1 << 20));
	int fd = open(path, O_RDONLY);
	struct image_usage u = { 0 };
	CHECK(image_layer_apply(rootfd, fd, &lim, &u, err, sizeof(err)) == -EFBIG);
	close(fd);
	CHECK(!exists("bomb"));
	/* Too many entries. */
	for (int i = 0; i < 101; i++) {
		char name[32];
		snprintf(name, sizeof(name), "many/f%d", i);
		file(&t, name, "", 0644, 0, 0);
	}
	end(&t);
	CHECK(apply(&t, &lim) == -EFBIG && strstr(err, "more than 100"));
}

/* ---- images ---- */

static void sha256_hex(const void *p, size_t n, char out[65])
{
	unsigned char md[32];
	unsigned len;
	EVP_Digest(p, n, md, &len, EVP_sha256(), NULL);
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", md[i]);
}

/* Writes blob into layout/blobs/sha256 and its descriptor into desc. */
static void blob(const char *layout, const void *p, size_t n, const char *mt, char *desc, size_t dn)
{
	char hex[65], path[256];
	sha256_hex(p, n, hex);
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", layout, hex);
	FILE *f = fopen(path, "w");
	fwrite(p, 1, n, f);
	fclose(f);
	snprintf(desc, dn, "{\"mediaType\":\"%s\",\"digest\":\"sha256:%s\",\"size\":%zu}", mt, hex, n);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
}

/* An OCI layout at dir/name with one layer (marker) over a base layer. */
static void make_layout(const char *name, const char *arch, int lie)
{
	char layout[128], path[192], cfg[512], l1[256], l2[256], man[1024], mdesc[256];
	snprintf(layout, sizeof(layout), "%s/%s", dir, name);
	snprintf(path, sizeof(path), "%s/blobs/sha256", layout);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "mkdir -p %s", path);
	CHECK(system(cmd) == 0);
	struct tar t = { 0 };
	file(&t, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", 0644, 0, 0);
	file(&t, "etc/old", "old", 0644, 0, 0);
	end(&t);
	blob(layout, t.p, t.len, "application/vnd.oci.image.layer.v1.tar", l1, sizeof(l1));
	free(t.p);
	t = (struct tar){ 0 };
	file(&t, "etc/marker", "from the image\n", 0644, 0, 0);
	file(&t, "etc/.wh.old", "", 0644, 0, 0);
	end(&t);
	if (lie == 2)
		t.p[600] ^= 1; /* the blob no longer has its digest */
	blob(layout, t.p, t.len, "application/vnd.oci.image.layer.v1.tar", l2, sizeof(l2));
	if (lie == 2) {
		char hex[65];
		t.p[600] ^= 1;
		sha256_hex(t.p, t.len, hex);
		char *d = strstr(l2, "sha256:") + 7;
		char old[65];
		memcpy(old, d, 64);
		old[64] = 0;
		char from[256], to[256];
		snprintf(from, sizeof(from), "%s/blobs/sha256/%s", layout, old);
		snprintf(to, sizeof(to), "%s/blobs/sha256/%s", layout, hex);
		rename(from, to);
		memcpy(d, hex, 64);
	}
	free(t.p);
	snprintf(cfg, sizeof(cfg),
		 "{\"architecture\":\"%s\",\"os\":\"linux\",\"config\":{\"Env\":[\"PATH=/usr/bin:/bin\","
		 "\"GREETING=hi\"],\"WorkingDir\":\"/srv\",\"Cmd\":[\"/bin/sh\"],\"Labels\":{\"a\":\"b\"}},"
		 "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}",
		 arch);
	char cdesc[256];
	blob(layout, cfg, strlen(cfg), "application/vnd.oci.image.config.v1+json", cdesc, sizeof(cdesc));
	if (lie == 1) /* a layer's size that is not its blob's */
		*strstr(l2, "\"size\":") = '\0', strcat(l2, "\"size\":3}");
	snprintf(man, sizeof(man),
		 "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
		 "\"config\":%s,\"layers\":[%s,%s]}",
		 cdesc, l1, l2);
	blob(layout, man, strlen(man), "application/vnd.oci.image.manifest.v1+json", mdesc,
	     sizeof(mdesc));
	char index[512];
	snprintf(index, sizeof(index), "{\"schemaVersion\":2,\"manifests\":[%s]}", mdesc);
	snprintf(path, sizeof(path), "%s/index.json", layout);
	write_text(path, index);
	snprintf(path, sizeof(path), "%s/oci-layout", layout);
	write_text(path, "{\"imageLayoutVersion\":\"1.0.0\"}");
}

static int unpack(const char *name, json_t **config)
{
	static int n;
	char path[128], stage[128];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(stage, sizeof(stage), "%s/stage-%d", dir, n++);
	mkdir(stage, 0700);
	int src = open(path, O_RDONLY), sfd = open(stage, O_RDONLY | O_DIRECTORY);
	int r = image_unpack(src, sfd, rootfd, NULL, config, err, sizeof(err));
	if (r < 0)
		t_note("refused: %s", err);
	close(src);
	close(sfd);
	return r;
}

static void test_oci_layout(void)
{
	make_layout("good", "amd64", 0);
	json_t *c = NULL;
	CHECK(unpack("good", &c) == 0);
	CHECK(exists("etc/marker") && exists("etc/passwd") && !exists("etc/old"));
	CHECK(c && !strcmp(json_string_value(json_object_get(c, "workdir")), "/srv"));
	CHECK(json_array_size(json_object_get(c, "env")) == 2);
	CHECK(json_integer_value(json_object_get(c, "layers")) == 2);
	CHECK(!strcmp(json_string_value(json_object_get(c, "format")), "oci"));
	/* The guest's needs: a user (uid 1000, the first free), /work, /tmp. */
	CHECK(image_guest_needs(rootfd, c, err, sizeof(err)) == 0);
	struct stat st;
	CHECK(at("work", &st) == 0 && st.st_uid == 1000);
	CHECK(at("tmp", &st) == 0 && (st.st_mode & 07777) == 01777);
	CHECK(at("srv", &st) == 0 && S_ISDIR(st.st_mode)); /* the WORKDIR, made */
	char buf[512] = "";
	int fd = openat(rootfd, "etc/passwd", O_RDONLY);
	CHECK(read(fd, buf, sizeof(buf) - 1) > 0 && strstr(buf, "root:x:0:0") &&
	      strstr(buf, "\nuser:x:1000:1000:"));
	close(fd);
	CHECK(json_is_true(json_object_get(c, "user_added")));
	json_decref(c);
	/* Run again on the same tree: the user is there, not added twice. */
	c = json_object();
	CHECK(image_guest_needs(rootfd, c, err, sizeof(err)) == 0 &&
	      json_is_false(json_object_get(c, "user_added")));
	json_decref(c);
}

static void test_oci_lies(void)
{
	json_t *c = NULL;
	make_layout("size-lie", "amd64", 1);
	CHECK(unpack("size-lie", &c) == -EINVAL && strstr(err, "bytes"));
	make_layout("digest-lie", "amd64", 2);
	CHECK(unpack("digest-lie", &c) == -EINVAL && strstr(err, "digest"));
	make_layout("arm", "arm64", 0);
	CHECK(unpack("arm", &c) == -EINVAL && strstr(err, "arm64"));
	CHECK(!exists("etc/marker"));
	char path[128];
	snprintf(path, sizeof(path), "%s/empty", dir);
	mkdir(path, 0755);
	CHECK(unpack("empty", &c) == -EINVAL && strstr(err, "not an image"));
	/* A layout whose index is a symlink out of it. */
	make_layout("linked", "amd64", 0);
	snprintf(path, sizeof(path), "%s/linked/index.json", dir);
	unlink(path);
	CHECK(symlink("/etc/passwd", path) == 0);
	CHECK(unpack("linked", &c) == -EINVAL);
	CHECK(c == NULL);
}

/* A `docker save` tar: manifest.json, <id>.json, <id>/layer.tar. */
static void test_docker_save(void)
{
	struct tar layer = { 0 }, out = { 0 };
	file(&layer, "etc/marker", "saved\n", 0644, 0, 0);
	end(&layer);
	char lhex[65], chex[65], cfg[400], man[400];
	sha256_hex(layer.p, layer.len, lhex);
	snprintf(cfg, sizeof(cfg),
		 "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":[\"A=1\"]},"
		 "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:%s\"]}}",
		 lhex);
	sha256_hex(cfg, strlen(cfg), chex);
	snprintf(man, sizeof(man), "[{\"Config\":\"%s.json\",\"RepoTags\":[\"t:1\"],\"Layers\":[\"other/layer.tar\"]}]",
		 chex);
	char name[128];
	snprintf(name, sizeof(name), "%s.json", chex);
	file(&out, name, cfg, 0644, 0, 0);
	snprintf(name, sizeof(name), "%.12s/layer.tar", lhex);
	header(&out, name, '0', layer.len, 0644, 0, 0, NULL);
	put(&out, layer.p, layer.len);
	pad(&out);
	/* The same layer again under a symlink, as docker saves repeats. */
	char link[128];
	snprintf(link, sizeof(link), "../%.12s/layer.tar", lhex);
	entry(&out, "other/layer.tar", '2', link);
	file(&out, "manifest.json", man, 0644, 0, 0);
	end(&out);
	char path[128];
	snprintf(path, sizeof(path), "%s/saved.tar", dir);
	FILE *f = fopen(path, "w");
	fwrite(out.p, 1, out.len, f);
	fclose(f);
	json_t *c = NULL;
	CHECK(unpack("saved.tar", &c) == 0 && exists("etc/marker"));
	CHECK(c && !strcmp(json_string_value(json_object_get(c, "format")), "docker"));
	json_decref(c);
	/* A layer that is not its diff_id. */
	char *lp = memmem(out.p, out.len, "saved\n", 6);
	CHECK(lp != NULL);
	if (lp)
		lp[0] = 'S';
	f = fopen(path, "w");
	fwrite(out.p, 1, out.len, f);
	fclose(f);
	c = NULL;
	CHECK(unpack("saved.tar", &c) == -EINVAL && strstr(err, "diff_id"));
	free(layer.p);
	free(out.p);
}

/* The whole import: a user namespace, then mkfs.erofs. */
static void test_import(void)
{
	t_timeout(120);
	if (geteuid() != 0) {
		CHECK(!"test_import needs root");
		return;
	}
	make_layout("imp", "amd64", 0);
	char src[128], work[128], out[128], js[128];
	snprintf(src, sizeof(src), "%s/imp", dir);
	snprintf(work, sizeof(work), "%s/out.work", dir);
	snprintf(out, sizeof(out), "%s/out.erofs", dir);
	snprintf(js, sizeof(js), "%s/out.json", dir);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	int r = image_import(src, dfd, "out", NULL, err, sizeof(err));
	if (r < 0)
		t_note("import: %s", err);
	CHECK(r == 0);
	struct stat st;
	CHECK(stat(out, &st) == 0 && st.st_size > 0 && st.st_uid == 0);
	/* erofs's magic at 1024. */
	unsigned char magic[4] = { 0 };
	int fd = open(out, O_RDONLY);
	CHECK(pread(fd, magic, 4, 1024) == 4 && magic[0] == 0xe2 && magic[1] == 0xe1 &&
	      magic[2] == 0xf5 && magic[3] == 0xe0);
	close(fd);
	json_t *c = json_load_file(js, 0, NULL);
	CHECK(c && json_is_true(json_object_get(c, "user_added")) &&
	      json_is_false(json_object_get(c, "has_sh")));
	json_decref(c);
	CHECK(stat(work, &st) < 0); /* the work directory went */
	/* A hostile one fails in the child with its reason, and leaves nothing. */
	make_layout("imp-lie", "amd64", 2);
	snprintf(src, sizeof(src), "%s/imp-lie", dir);
	snprintf(out, sizeof(out), "%s/lie.erofs", dir);
	snprintf(work, sizeof(work), "%s/lie.work", dir);
	CHECK(image_import(src, dfd, "lie", NULL, err, sizeof(err)) == -EINVAL &&
	      strstr(err, "digest"));
	CHECK(stat(out, &st) < 0 && stat(work, &st) < 0);
	/* Started apart: its line comes through the pipe, and a bad name
	 * is refused before anything is made. */
	int sfd = open(src, O_RDONLY | O_DIRECTORY), rfd = -1;
	CHECK(image_import_start(sfd, dfd, "lie", NULL, &rfd, err, sizeof(err)) == 0);
	CHECK(image_import_result(rfd, err, sizeof(err)) == -EINVAL && strstr(err, "digest"));
	close(rfd);
	snprintf(src, sizeof(src), "%s/imp", dir);
	close(sfd);
	sfd = open(src, O_RDONLY | O_DIRECTORY);
	CHECK(image_import_start(sfd, dfd, "../x", NULL, &rfd, err, sizeof(err)) == -EINVAL);
	CHECK(image_import_start(sfd, dfd, "again", NULL, &rfd, err, sizeof(err)) == 0);
	CHECK(image_import_result(rfd, err, sizeof(err)) == 0);
	snprintf(out, sizeof(out), "%s/again.erofs", dir);
	CHECK(stat(out, &st) == 0 && st.st_uid == 0 && st.st_size > 0);
	close(rfd);
	close(sfd);
	close(dfd);
}

/* The addresses a pull for an account never reaches, and the references
 * a pull takes (pull.c). */
static void test_inward(void)
{
	static const char *const in[] = { "127.0.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255",
					  "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0",
					  "::1", "::", "fd00::1", "fe80::1", "::ffff:127.0.0.1",
					  "::ffff:169.254.169.254", "224.0.0.1", "nonsense", "198.18.0.2",
					  "192.0.0.8", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "::7f00:1" };
	static const char *const out[] = { "8.8.8.8", "172.32.0.1", "192.169.0.1", "100.128.0.1",
					   "2001:4860:4860::8888", "::ffff:1.1.1.1", "198.20.0.1",
					   "64:ff9b::808:808", "2002:808:808::1" };
	int wrong = 0;
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++)
		if (!image__inward(in[i]))
			wrong++, t_note("%s taken for a public address", in[i]);
	for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); i++)
		if (image__inward(out[i]))
			wrong++, t_note("%s taken for the host's own or a private one", out[i]);
	CHECK(wrong == 0);
	/* References outside the distribution spec's grammar: refused before
	 * any network (image_pull's -EINVAL). */
	static const char *const bad[] = { "..././etc/passwd", "Upper/case", "a..b/c", "host:port/x",
					   "-a.b/c", "a.b/-c", "a.b/c_", "a.b/c:", "a.b/c:.tag", "a.b//c",
					   "a.b/c@sha256:12", "a.b/c___d", "" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (image_pull(bad[i], "/nonexistent/layout", &(struct image_pull_opts){ 0 }, err,
			       sizeof(err)) != -EINVAL)
			wrong++, t_note("'%s' taken for a reference", bad[i]);
	/* and ones inside it, tried (a closed port on loopback: not -EINVAL) */
	static const char *const good[] = { "127.0.0.1:1/tools/tiny:v1", "127.0.0.1:1/a__b/c-d.e:1.0-x",
					    "127.0.0.1:1/x@sha256:0123456789abcdef0123456789abcdef"
					    "0123456789abcdef0123456789abcdef" };
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		if (image_pull(good[i], "/nonexistent/layout", &(struct image_pull_opts){ .insecure = 1 },
			       err, sizeof(err)) == -EINVAL)
			wrong++, t_note("'%s' refused: %s", good[i], err);
	CHECK(wrong == 0);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "image_entries", test_entries },     { "image_whiteouts", test_whiteouts },
		{ "image_hostile", test_hostile },     { "image_limits", test_limits },
		{ "image_oci_layout", test_oci_layout }, { "image_oci_lies", test_oci_lies },
		{ "image_docker_save", test_docker_save }, { "image_import", test_import },
		{ "image_addresses_and_references", test_inward },
		{ NULL, NULL },
	};
	t_fixture(setup, teardown);
	return t_main(argc, argv, cases);
}
