/*
 * oci: an image's manifest, config and layers (image.h), from an OCI image
 * layout or a `docker save` archive. A tar's files are staged one by one
 * in a directory of their own under numbers, never under their names, so
 * what a name says never reaches the host's file system; a directory's
 * are opened beneath it without following a symlink. Each blob named by
 * a digest is read whole and checked against it and its size before it is
 * used; a `docker save` layer against the config's diff_ids.
 */
#include "image/image.h"
#include "image/image_impl.h"

#include "common/errbuf.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_STAGED   4096		/* files in an archive */
#define MAX_JSON     (4 << 20)		/* an index, a manifest, a config */
#define MAX_LAYERS   256
#define MAX_LINKS    8			/* symlinks in an archive, one after another */
#define DEFAULT_MAX  (4ULL << 30)

struct staged {
	char *name;  /* the clean path in the archive */
	char *alias; /* a symlink's target (clean), or NULL */
};

struct src {
	int dirfd;   /* the layout's directory, or the staging directory */
	int staged;  /* dirfd holds the files of a tar under their numbers */
	struct staged *files;
	size_t n;
	char *err;
	size_t errlen;
};

/* A name in an archive, cleaned ("./a//b" is "a/b"), with ".." taken
 * against what is before it: 0, or -EINVAL when it climbs out. */
static int clean(const char *in, char *out, size_t n)
{
	size_t len = 0;
	for (const char *p = in; *p;) {
		while (*p == '/')
			p++;
		const char *e = strchrnul(p, '/');
		size_t k = (size_t)(e - p);
		if (k == 2 && p[0] == '.' && p[1] == '.') {
			if (!len)
				return -EINVAL;
			while (len && out[len - 1] != '/')
				len--;
			if (len)
				len--;
		} else if (k && !(k == 1 && p[0] == '.')) {
			if (len + k + 2 > n)
				return -EINVAL;
			if (len)
				out[len++] = '/';
			memcpy(out + len, p, k);
			len += k;
		}
		p = e;
	}
	out[len] = '\0';
	return len ? 0 : -EINVAL;
}

static void src_free(struct src *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->files[i].name);
		free(s->files[i].alias);
	}
	free(s->files);
}

/* The archive at fd (a tar, plain or gzip) staged in stagefd's directory. */
static int stage(struct src *s, int fd, int stagefd, unsigned long long max)
{
	struct archive *a = archive_read_new();
	if (!a)
		return errbuf_set(s->err, s->errlen, -ENOMEM, "out of memory");
	archive_read_support_filter_gzip(a);
	archive_read_support_format_tar(a);
	if (archive_read_open_fd(a, fd, 64 * 1024) != ARCHIVE_OK) {
		int r = errbuf_set(s->err, s->errlen, -EINVAL,
				   "not an image: neither an OCI layout's directory nor a tar (%s)",
				   archive_error_string(a));
		archive_read_free(a);
		return r;
	}
	s->dirfd = stagefd;
	s->staged = 1;
	unsigned long long total = 0;
	struct archive_entry *e;
	int r = 0, x;
	while (r == 0 && (x = archive_read_next_header(a, &e)) != ARCHIVE_EOF) {
		if (x != ARCHIVE_OK && x != ARCHIVE_WARN) {
			r = errbuf_set(s->err, s->errlen, -EINVAL, "the archive is not a whole tar: %s",
				       archive_error_string(a));
			break;
		}
		char name[512], target[512];
		const char *raw = archive_entry_pathname(e);
		mode_t type = archive_entry_filetype(e);
		if (type == AE_IFDIR)
			continue;
		if (!raw || clean(raw, name, sizeof(name)) < 0) {
			r = errbuf_set(s->err, s->errlen, -EINVAL, "the archive's entry '%.200s' is out of it",
				       raw ? raw : "?");
			break;
		}
		const char *hard = archive_entry_hardlink(e);
		if (!hard && type != AE_IFREG && type != AE_IFLNK)
			continue; /* nothing an image needs */
		if (s->n == MAX_STAGED) {
			r = errbuf_set(s->err, s->errlen, -EFBIG, "the archive has more than %d files",
				       MAX_STAGED);
			break;
		}
		char *alias = NULL;
		if (hard || type == AE_IFLNK) {
			/* A link to another file of the archive (docker save's
			 * layers that are the same): followed when opened. */
			char joined[1024];
			const char *to = hard ? hard : archive_entry_symlink(e);
			const char *slash = strrchr(name, '/');
			if (hard || !to || to[0] == '/' || !slash)
				snprintf(joined, sizeof(joined), "%s", to ? to : "");
			else
				snprintf(joined, sizeof(joined), "%.*s/%s", (int)(slash - name), name, to);
			if (!to || clean(joined, target, sizeof(target)) < 0) {
				r = errbuf_set(s->err, s->errlen, -EINVAL,
					       "the archive's link '%.200s' points out of it", name);
				break;
			}
			if (!(alias = strdup(target))) {
				r = -ENOMEM;
				break;
			}
		} else {
			la_int64_t size = archive_entry_size(e);
			if (size < 0 || (total += (unsigned long long)size) > max) {
				r = errbuf_set(s->err, s->errlen, -EFBIG,
					       "the archive is larger than the limit of %llu MB", max >> 20);
				break;
			}
			char num[24];
			snprintf(num, sizeof(num), "%zu", s->n);
			int out = openat(stagefd, num, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
					 0600);
			if (out < 0) {
				r = errbuf_set(s->err, s->errlen, -errno, "cannot stage the archive: %s",
					       strerror(errno));
				break;
			}
			if (archive_read_data_into_fd(a, out) != ARCHIVE_OK)
				r = errbuf_set(s->err, s->errlen, -EINVAL, "cannot read '%.200s' of the archive: %s",
					       name, archive_error_string(a));
			close(out);
			if (r < 0)
				break;
		}
		struct staged *f = realloc(s->files, (s->n + 1) * sizeof(*f));
		char *dup = strdup(name);
		if (!f || !dup) {
			free(dup);
			free(alias);
			if (f)
				s->files = f;
			r = -ENOMEM;
			break;
		}
		s->files = f;
		s->files[s->n++] = (struct staged){ .name = dup, .alias = alias };
	}
	archive_read_free(a);
	return r;
}

/* The file path of the image, open for reading: its fd, or -errno with err set. */
static int src_open(struct src *s, const char *path)
{
	char name[512];
	if (clean(path, name, sizeof(name)) < 0)
		return errbuf_set(s->err, s->errlen, -EINVAL, "the image names '%.200s', out of it", path);
	if (!s->staged) {
		/* O_NONBLOCK: a FIFO does not block; a layout may span mounts. */
		int fd = image__open(s->dirfd, name, O_RDONLY | O_NONBLOCK, IMAGE_STRICT & ~RESOLVE_NO_XDEV);
		struct stat st;
		if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
			close(fd);
			fd = -EINVAL;
		}
		if (fd < 0)
			return errbuf_set(s->err, s->errlen, fd == -ENOENT ? -EINVAL : fd,
					  "the image has no file '%.200s' (%s)", name,
					  fd == -ELOOP ? "a symlink" : strerror(-fd));
		return fd;
	}
	for (int hops = 0; hops <= MAX_LINKS; hops++) {
		size_t i = s->n;
		while (i-- > 0) /* the last of one name counts, as tar extracts */
			if (!strcmp(s->files[i].name, name))
				break;
		if (i == (size_t)-1)
			return errbuf_set(s->err, s->errlen, -EINVAL, "the image has no file '%.200s'", path);
		if (!s->files[i].alias) {
			char num[24];
			snprintf(num, sizeof(num), "%zu", i);
			int fd = openat(s->dirfd, num, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
			return fd < 0 ? errbuf_set(s->err, s->errlen, -errno, "cannot read the staged '%.200s'",
						   path)
				      : fd;
		}
		snprintf(name, sizeof(name), "%s", s->files[i].alias);
	}
	return errbuf_set(s->err, s->errlen, -EINVAL, "the image's '%.200s' is a loop of links", path);
}

/* sha256 of what fd holds, from its start, as 64 hex digits; its size. */
static int hash_fd(int fd, char hex[65], unsigned long long *size)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(ctx);
		return -ENOMEM;
	}
	static __thread unsigned char buf[1 << 16];
	unsigned long long total = 0;
	off_t off = 0;
	for (;;) {
		ssize_t n = pread(fd, buf, sizeof(buf), off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			EVP_MD_CTX_free(ctx);
			return -errno;
		}
		if (n == 0)
			break;
		EVP_DigestUpdate(ctx, buf, (size_t)n);
		off += n;
		total += (unsigned long long)n;
	}
	unsigned char md[32];
	unsigned len = 0;
	EVP_DigestFinal_ex(ctx, md, &len);
	EVP_MD_CTX_free(ctx);
	for (int i = 0; i < 32; i++)
		sprintf(hex + 2 * i, "%02x", md[i]);
	*size = total;
	return 0;
}

static int is_hex64(const char *s)
{
	if (strlen(s) != 64)
		return 0;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return 0;
	return 1;
}

/* A descriptor's blob (OCI: {"digest","size"}) open and checked: its fd. */
static int blob_open(struct src *s, json_t *desc, const char *what)
{
	const char *digest = json_string_value(json_object_get(desc, "digest"));
	json_t *jsize = json_object_get(desc, "size");
	if (!digest || strncmp(digest, "sha256:", 7) || !is_hex64(digest + 7) ||
	    !json_is_integer(jsize) || json_integer_value(jsize) < 0)
		return errbuf_set(s->err, s->errlen, -EINVAL,
				  "the %s's descriptor has no sha256 digest and size", what);
	char path[128];
	snprintf(path, sizeof(path), "blobs/sha256/%s", digest + 7);
	int fd = src_open(s, path);
	if (fd < 0)
		return fd;
	char hex[65];
	unsigned long long size;
	struct stat st;
	if (fstat(fd, &st) < 0 || (unsigned long long)st.st_size != (unsigned long long)json_integer_value(jsize)) {
		close(fd);
		return errbuf_set(s->err, s->errlen, -EINVAL, "the %s is %lld bytes, its descriptor says %lld",
				  what, (long long)st.st_size, (long long)json_integer_value(jsize));
	}
	int r = hash_fd(fd, hex, &size);
	if (r < 0) {
		close(fd);
		return errbuf_set(s->err, s->errlen, r, "cannot read the %s: %s", what, strerror(-r));
	}
	if (size != (unsigned long long)json_integer_value(jsize))
		r = errbuf_set(s->err, s->errlen, -EINVAL, "the %s is %llu bytes, its descriptor says %lld",
			       what, size, (long long)json_integer_value(jsize));
	else if (strcmp(hex, digest + 7))
		r = errbuf_set(s->err, s->errlen, -EINVAL,
			       "the %s's digest is sha256:%.12s..., its descriptor says %.19s...", what, hex,
			       digest);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

static json_t *load_json(struct src *s, int fd, const char *what)
{
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_size > MAX_JSON) {
		close(fd);
		errbuf_set(s->err, s->errlen, -EINVAL, "the %s is larger than %d MB", what, MAX_JSON >> 20);
		return NULL;
	}
	char *buf = malloc((size_t)st.st_size + 1);
	ssize_t n = buf ? pread(fd, buf, (size_t)st.st_size, 0) : -1;
	close(fd);
	json_error_t je;
	json_t *j = n == st.st_size ? json_loadb(buf, (size_t)n, JSON_REJECT_DUPLICATES, &je) : NULL;
	free(buf);
	if (!j || (!json_is_object(j) && !json_is_array(j))) {
		json_decref(j);
		errbuf_set(s->err, s->errlen, -EINVAL, "the %s is not JSON", what);
		return NULL;
	}
	return j;
}

static int platform_ok(json_t *desc)
{
	json_t *p = json_object_get(desc, "platform");
	if (!p)
		return 1;
	const char *os = json_string_value(json_object_get(p, "os"));
	const char *arch = json_string_value(json_object_get(p, "architecture"));
	return (!os || !strcmp(os, "linux")) && (!arch || !strcmp(arch, "amd64"));
}

static const char *MT_INDEX[] = { "application/vnd.oci.image.index.v1+json",
				  "application/vnd.docker.distribution.manifest.list.v2+json", NULL };

static int is_index(json_t *desc)
{
	const char *mt = json_string_value(json_object_get(desc, "mediaType"));
	for (int i = 0; mt && MT_INDEX[i]; i++)
		if (!strcmp(mt, MT_INDEX[i]))
			return 1;
	return 0;
}

/* The image manifest an index leads to (linux/amd64), loaded and checked. */
static json_t *pick_manifest(struct src *s, json_t *index, char *digest, size_t dlen, int depth)
{
	json_t *list = json_object_get(index, "manifests");
	if (!json_is_array(list) || !json_array_size(list)) {
		errbuf_set(s->err, s->errlen, -EINVAL, "the image's index lists no manifest");
		return NULL;
	}
	size_t i;
	json_t *d, *other = NULL;
	json_array_foreach(list, i, d) {
		if (!json_is_object(d))
			continue;
		if (!platform_ok(d)) {
			other = d;
			continue;
		}
		int fd = blob_open(s, d, "manifest");
		if (fd < 0)
			return NULL;
		json_t *m = load_json(s, fd, "manifest");
		if (!m)
			return NULL;
		if (is_index(d) || json_object_get(m, "manifests")) {
			json_t *inner = depth < 2 ? pick_manifest(s, m, digest, dlen, depth + 1) : NULL;
			if (!inner && depth >= 2)
				errbuf_set(s->err, s->errlen, -EINVAL, "the image's indexes nest too deep");
			json_decref(m);
			return inner;
		}
		snprintf(digest, dlen, "%s", json_string_value(json_object_get(d, "digest")));
		return m;
	}
	const char *arch = other ? json_string_value(json_object_get(json_object_get(other, "platform"),
								     "architecture"))
				 : NULL;
	errbuf_set(s->err, s->errlen, -EINVAL, "the image has no linux/amd64 manifest%s%s%s",
		   arch ? " (it is for " : "", arch ? arch : "", arch ? ")" : "");
	return NULL;
}

/* Strings of a config field that must be an array of them, or NULL. */
static int str_array(json_t *a)
{
	size_t i;
	json_t *v;
	if (!a || json_is_null(a))
		return 1;
	if (!json_is_array(a))
		return 0;
	json_array_foreach(a, i, v) if (!json_is_string(v)) return 0;
	return 1;
}

/* The template's description from the image's config. */
static json_t *describe(struct src *s, json_t *config)
{
	const char *os = json_string_value(json_object_get(config, "os"));
	const char *arch = json_string_value(json_object_get(config, "architecture"));
	if ((os && strcmp(os, "linux")) || (arch && strcmp(arch, "amd64"))) {
		errbuf_set(s->err, s->errlen, -EINVAL, "the image is for %s/%s; this host runs linux/amd64",
			   os ? os : "linux", arch ? arch : "amd64");
		return NULL;
	}
	json_t *c = json_object_get(config, "config");
	json_t *env = json_object_get(c, "Env"), *ep = json_object_get(c, "Entrypoint");
	json_t *cmd = json_object_get(c, "Cmd"), *labels = json_object_get(c, "Labels");
	const char *wd = json_string_value(json_object_get(c, "WorkingDir"));
	const char *user = json_string_value(json_object_get(c, "User"));
	if (!str_array(env) || !str_array(ep) || !str_array(cmd) ||
	    (labels && !json_is_null(labels) && !json_is_object(labels))) {
		errbuf_set(s->err, s->errlen, -EINVAL, "the image's config has a malformed Env, Entrypoint, "
						       "Cmd or Labels");
		return NULL;
	}
	size_t i;
	json_t *v;
	json_array_foreach(env, i, v) if (!strchr(json_string_value(v), '=')) {
		errbuf_set(s->err, s->errlen, -EINVAL, "the image's Env has '%.100s', not NAME=VALUE",
			   json_string_value(v));
		return NULL;
	}
	json_t *keep[4] = { env, ep, cmd, labels };
	for (int k = 0; k < 4; k++)
		keep[k] = keep[k] && !json_is_null(keep[k]) ? json_incref(keep[k]) : NULL;
	return json_pack("{s:o,s:s,s:s,s:o,s:o,s:o}", "env", keep[0] ? keep[0] : json_array(), "workdir",
			 wd ? wd : "", "user", user ? user : "", "entrypoint",
			 keep[1] ? keep[1] : json_null(), "cmd", keep[2] ? keep[2] : json_null(), "labels",
			 keep[3] ? keep[3] : json_object());
}


/* desc, the template's description, with what the unpack found. */
static json_t *finish(json_t *desc, const char *format, const char *digest, size_t layers,
		      const struct image_usage *used)
{
	json_object_set_new(desc, "format", json_string(format));
	json_object_set_new(desc, "digest", json_string(digest));
	json_object_set_new(desc, "layers", json_integer((json_int_t)layers));
	json_object_set_new(desc, "size_bytes", json_integer((json_int_t)used->bytes));
	return desc;
}

static int apply(struct src *s, int rootfd, int fd, size_t n, const struct image_limits *lim,
		 struct image_usage *used)
{
	char err[512];
	int r = image_layer_apply(rootfd, fd, lim, used, err, sizeof(err));
	close(fd);
	if (r < 0)
		errbuf_set(s->err, s->errlen, r, "layer %zu: %s", n + 1, err);
	return r;
}

static int unpack_oci(struct src *s, json_t *index, int rootfd, const struct image_limits *lim,
		      json_t **out)
{
	char digest[80] = "";
	json_t *m = pick_manifest(s, index, digest, sizeof(digest), 0);
	if (!m)
		return -EINVAL;
	json_t *layers = json_object_get(m, "layers");
	json_t *cdesc = json_object_get(m, "config");
	int r = -EINVAL;
	json_t *config = NULL, *desc = NULL;
	if (!json_is_array(layers) || !json_is_object(cdesc)) {
		errbuf_set(s->err, s->errlen, -EINVAL, "the manifest has no config or layers");
		goto out;
	}
	if (json_array_size(layers) > MAX_LAYERS) {
		errbuf_set(s->err, s->errlen, -EINVAL, "the image has more than %d layers", MAX_LAYERS);
		goto out;
	}
	unsigned long long max = lim && lim->max_bytes ? lim->max_bytes : DEFAULT_MAX, sum = 0;
	size_t i;
	json_t *l;
	json_array_foreach(layers, i, l) {
		json_int_t size = json_integer_value(json_object_get(l, "size"));
		if (size < 0 || (sum += (unsigned long long)size) > max) {
			r = errbuf_set(s->err, s->errlen, -EFBIG,
				       "the image's layers are larger than the limit of %llu MB", max >> 20);
			goto out;
		}
	}
	int fd = blob_open(s, cdesc, "config");
	if (fd < 0 || !(config = load_json(s, fd, "config")) || !(desc = describe(s, config)))
		goto out;
	struct image_usage used = { 0 };
	json_array_foreach(layers, i, l) {
		const char *mt = json_string_value(json_object_get(l, "mediaType"));
		if (mt && !strstr(mt, "tar")) {
			r = errbuf_set(s->err, s->errlen, -EINVAL, "layer %zu is a '%.100s', not a tar",
				       i + 1, mt);
			goto out;
		}
		if ((fd = blob_open(s, l, "layer")) < 0) {
			r = fd;
			goto out;
		}
		if ((r = apply(s, rootfd, fd, i, lim, &used)) < 0)
			goto out;
	}
	*out = finish(desc, "oci", digest, json_array_size(layers), &used);
	desc = NULL;
	r = 0;
out:
	json_decref(desc);
	json_decref(config);
	json_decref(m);
	return r < 0 ? r : 0;
}

/* `docker save`'s manifest.json: [{"Config", "Layers"}], layers checked
 * against the config's rootfs.diff_ids (the digests of the plain tars). */
static int unpack_docker(struct src *s, json_t *list, int rootfd, const struct image_limits *lim,
			 json_t **out)
{
	json_t *m = json_array_get(list, 0);
	const char *cpath = json_string_value(json_object_get(m, "Config"));
	json_t *layers = json_object_get(m, "Layers");
	if (json_array_size(list) != 1 || !cpath || !json_is_array(layers))
		return errbuf_set(s->err, s->errlen, -EINVAL,
				  "manifest.json must name one image with its Config and Layers");
	if (json_array_size(layers) > MAX_LAYERS)
		return errbuf_set(s->err, s->errlen, -EINVAL, "the image has more than %d layers", MAX_LAYERS);
	int fd = src_open(s, cpath);
	if (fd < 0)
		return fd;
	/* Its name is its digest: "<hex>.json" or "blobs/sha256/<hex>". */
	char hex[65], want[65] = "";
	unsigned long long size;
	const char *b = strrchr(cpath, '/') ? strrchr(cpath, '/') + 1 : cpath;
	snprintf(want, sizeof(want), "%.64s", b);
	if (hash_fd(fd, hex, &size) < 0 || (is_hex64(want) && strcmp(hex, want))) {
		close(fd);
		return errbuf_set(s->err, s->errlen, -EINVAL, "the config's digest is not its name's");
	}
	json_t *config = load_json(s, fd, "config");
	json_t *desc = config ? describe(s, config) : NULL;
	json_t *diff = json_object_get(json_object_get(config, "rootfs"), "diff_ids");
	int r = -EINVAL;
	if (!desc)
		goto out;
	if (!json_is_array(diff) || json_array_size(diff) != json_array_size(layers)) {
		errbuf_set(s->err, s->errlen, -EINVAL, "the config's diff_ids do not match the layers");
		goto out;
	}
	struct image_usage used = { 0 };
	size_t i;
	json_t *l;
	json_array_foreach(layers, i, l) {
		const char *lp = json_string_value(l);
		const char *id = json_string_value(json_array_get(diff, i));
		if (!lp || !id || strncmp(id, "sha256:", 7)) {
			r = errbuf_set(s->err, s->errlen, -EINVAL, "layer %zu has no path or diff_id", i + 1);
			goto out;
		}
		if ((fd = src_open(s, lp)) < 0) {
			r = fd;
			goto out;
		}
		/* A layer saved compressed is checked as a tar when applied;
		 * a plain one (docker save's) against its diff_id first. */
		unsigned char magic[4] = { 0 };
		if (pread(fd, magic, 4, 0) == 4 && !(magic[0] == 0x1f && magic[1] == 0x8b) &&
		    !(magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd)) {
			if (hash_fd(fd, hex, &size) < 0 || strcmp(hex, id + 7)) {
				close(fd);
				r = errbuf_set(s->err, s->errlen, -EINVAL,
					       "layer %zu's digest is not its diff_id %.19s...", i + 1, id);
				goto out;
			}
		}
		if ((r = apply(s, rootfd, fd, i, lim, &used)) < 0)
			goto out;
	}
	*out = finish(desc, "docker", "", json_array_size(layers), &used);
	desc = NULL;
	r = 0;
out:
	json_decref(desc);
	json_decref(config);
	return r;
}

int image_unpack(int srcfd, int stagefd, int rootfd, const struct image_limits *lim,
		 json_t **config, char *err, size_t errlen)
{
	struct src s = { .dirfd = srcfd, .err = err, .errlen = errlen };
	if (err && errlen)
		*err = '\0';
	*config = NULL;
	struct stat st;
	if (fstat(srcfd, &st) < 0)
		return errbuf_set(err, errlen, -errno, "cannot read the image: %s", strerror(errno));
	int r = 0;
	if (!S_ISDIR(st.st_mode) && (r = stage(&s, srcfd, stagefd,
					       lim && lim->max_bytes ? lim->max_bytes : DEFAULT_MAX)) < 0)
		goto out;
	/* An OCI layout has index.json (docker 25 and later save one too);
	 * an older `docker save`, manifest.json only. */
	int fd = src_open(&s, "index.json");
	if (fd >= 0) {
		json_t *index = load_json(&s, fd, "index.json");
		r = index ? unpack_oci(&s, index, rootfd, lim, config) : -EINVAL;
		json_decref(index);
		goto out;
	}
	*err = '\0';
	if ((fd = src_open(&s, "manifest.json")) < 0) {
		r = errbuf_set(err, errlen, -EINVAL,
			       "not an image: no index.json (an OCI layout) or manifest.json (docker save)");
		goto out;
	}
	json_t *list = load_json(&s, fd, "manifest.json");
	r = list ? unpack_docker(&s, list, rootfd, lim, config) : -EINVAL;
	json_decref(list);
out:
	src_free(&s);
	return r;
}
