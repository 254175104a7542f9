/*
 * layer: one image layer applied to a tree (image.h). Two passes over the
 * tar, as the OCI spec's whiteouts apply to the layers below only: the
 * first removes what `.wh.NAME` and `.wh..wh..opq` hide, the second
 * creates the layer's own entries. Every path is cleaned first (no `..`,
 * no leading `/`), every parent opened beneath the root without following
 * a symlink, every node made with an *at() call that does not follow one
 * either, so nothing lands outside the root, whatever the tar says.
 */
#include "image/image.h"
#include "image/image_impl.h"

#include "common/errbuf.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define DEFAULT_MAX_BYTES   (4ULL << 30)
#define DEFAULT_MAX_ENTRIES 1000000UL
#define MAX_DEPTH	    256 /* directories deep, for removal */
#define ENTRY_COST	    512 /* bytes an entry counts for beyond its data: a header */
#define WH_PREFIX	    ".wh."
#define WH_OPAQUE	    ".wh..wh..opq"

struct lctx {
	int root;
	unsigned long long max_bytes;
	unsigned long max_entries;
	int as_caller;
	struct image_usage *used;
	char *err;
	size_t errlen;
};

int image__open(int dirfd, const char *path, int flags, unsigned long long resolve)
{
	struct open_how how = { .flags = (unsigned long long)flags | O_CLOEXEC,
				.mode = (flags & O_CREAT) ? 0644 : 0, .resolve = resolve };
	int fd = (int)syscall(SYS_openat2, dirfd, *path ? path : ".", &how, sizeof(how));
	return fd < 0 ? -errno : fd;
}

/* The entry's name as a clean relative path in out ("" for the root):
 * leading "/" and "./" dropped, "." and empty components skipped; -EINVAL
 * for a ".." component or a name too long. */
static int clean_path(const char *in, char *out, size_t n)
{
	size_t len = 0;
	int depth = 0;
	const char *p = in;
	while (*p) {
		while (*p == '/')
			p++;
		const char *e = strchrnul(p, '/');
		size_t k = (size_t)(e - p);
		if (k == 0)
			break;
		if (k == 2 && p[0] == '.' && p[1] == '.')
			return -EINVAL;
		if (!(k == 1 && p[0] == '.')) {
			/* No deeper than a removal goes (rm_at). */
			if (k > NAME_MAX || len + k + 2 > n || ++depth >= MAX_DEPTH)
				return -ENAMETOOLONG;
			if (len)
				out[len++] = '/';
			memcpy(out + len, p, k);
			len += k;
		}
		p = e;
	}
	out[len] = '\0';
	return 0;
}

/* Splits path into its parent (in dir) and last component (*base). */
static void split(char *path, const char **dir, const char **base)
{
	char *slash = strrchr(path, '/');
	if (slash) {
		*slash = '\0';
		*dir = path;
		*base = slash + 1;
	} else {
		*dir = "";
		*base = path;
	}
}

/* The directory dir below the root, open (O_PATH), made (0755, root's)
 * where it is missing when create is set: its fd, -ENOENT, or -ELOOP /
 * -ENOTDIR when a component is a symlink or not a directory. */
static int open_dir(int root, const char *dir, int create)
{
	int fd = image__open(root, dir, O_PATH | O_DIRECTORY, IMAGE_STRICT);
	if (fd != -ENOENT || !create)
		return fd;
	/* Made one component at a time, each opened as above. */
	char part[PATH_MAX];
	size_t len = strlen(dir);
	if (len >= sizeof(part))
		return -ENAMETOOLONG;
	memcpy(part, dir, len + 1);
	for (char *p = part;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		int d = image__open(root, part, O_PATH | O_DIRECTORY, IMAGE_STRICT);
		if (d == -ENOENT) {
			if (mkdirat(root, part, 0755) < 0 && errno != EEXIST)
				return -errno;
			d = image__open(root, part, O_PATH | O_DIRECTORY, IMAGE_STRICT);
		}
		*p = c;
		if (d < 0)
			return d;
		if (!c)
			return d;
		close(d);
	}
}

static int rm_at(int dirfd, const char *name, int depth);

/* Removes what the directory at fd holds, entries at depth. */
static int rm_children(int fd, int depth)
{
	int own = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = own >= 0 ? fdopendir(own) : NULL;
	if (!d) {
		if (own >= 0)
			close(own);
		return -ENOMEM;
	}
	int r = 0;
	struct dirent *e;
	while (r == 0 && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			r = rm_at(fd, e->d_name, depth);
	closedir(d);
	return r;
}

static int rm_at(int dirfd, const char *name, int depth)
{
	if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -errno;
	if (depth >= MAX_DEPTH)
		return -ELOOP;
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = rm_children(fd, depth + 1);
	close(fd);
	if (r == 0 && unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		r = -errno;
	return r;
}

int image_remove_tree(int dirfd, const char *name)
{
	return rm_at(dirfd, name, 0);
}

static int refuse(struct lctx *c, int code, const char *name, const char *why)
{
	return errbuf_set(c->err, c->errlen, code, "entry '%.300s': %s", name, why);
}

/* The first pass's work for one entry: a whiteout applied, others skipped. */
static int whiteout(struct lctx *c, const char *raw)
{
	char path[PATH_MAX];
	if (clean_path(raw, path, sizeof(path)) < 0)
		return refuse(c, -EINVAL, raw, "leaves the image's root (..) or is too long");
	const char *dir, *base;
	split(path, &dir, &base);
	if (c->as_caller || strncmp(base, WH_PREFIX, strlen(WH_PREFIX)))
		return 0; /* a context's .wh.x is a file like any */
	int fd = open_dir(c->root, dir, 0);
	if (fd == -ENOENT)
		return 0; /* hides what is not there */
	if (fd < 0)
		return refuse(c, -EINVAL, raw, "its directory is a symlink or a file");
	int r;
	if (!strcmp(base, WH_OPAQUE)) {
		r = rm_children(fd, 1); /* an opaque whiteout: what lower layers put there */
	} else {
		const char *hidden = base + strlen(WH_PREFIX);
		r = !*hidden || !strcmp(hidden, ".") || !strcmp(hidden, "..") ? -EINVAL
									       : rm_at(fd, hidden, 1);
		if (r == -EINVAL) {
			close(fd);
			return refuse(c, -EINVAL, raw, "a whiteout of nothing");
		}
	}
	close(fd);
	return r < 0 ? errbuf_set(c->err, c->errlen, r, "cannot apply whiteout '%.300s': %s", raw,
				  strerror(-r))
		     : 0;
}

static int count(struct lctx *c, const char *name, unsigned long long bytes)
{
	if (++c->used->entries > c->max_entries)
		return errbuf_set(c->err, c->errlen, -EFBIG,
				  "the image has more than %lu files and directories", c->max_entries);
	if (bytes > c->max_bytes || c->used->bytes + bytes > c->max_bytes)
		return errbuf_set(c->err, c->errlen, -EFBIG,
				  "the image is larger than the limit of %llu MB unpacked (at '%.300s')",
				  c->max_bytes >> 20, name);
	c->used->bytes += bytes;
	return 0;
}

/* Owner, mode and times of the node fd (not a symlink). */
/* The mode an entry gets: its own, or for the caller's (a context) one
 * its owner can always read, write and enter (else a 0555 directory
 * refuses its own entries, a 0000 file its COPY, and neither can be
 * removed), and no setuid or setgid bit. */
static mode_t mode_of(const struct lctx *c, struct archive_entry *e)
{
	mode_t m = archive_entry_mode(e) & 07777;
	if (!c->as_caller)
		return m;
	return (m & 01777) | (archive_entry_filetype(e) == AE_IFDIR ? 0700 : 0600);
}

static int set_attrs(const struct lctx *c, int fd, struct archive_entry *e)
{
	if (!c->as_caller &&
	    fchown(fd, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e)) < 0)
		return -errno;
	/* After the chown, which clears setuid and setgid. */
	if (fchmod(fd, mode_of(c, e)) < 0)
		return -errno;
	return 0;
}

static int set_times(int dirfd, const char *name, struct archive_entry *e)
{
	struct timespec ts[2] = {
		{ archive_entry_mtime(e), archive_entry_mtime_nsec(e) },
		{ archive_entry_mtime(e), archive_entry_mtime_nsec(e) },
	};
	return utimensat(dirfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

static int write_data(struct lctx *c, struct archive *a, int fd, const char *name,
		      la_int64_t size)
{
	const void *buf;
	size_t len;
	la_int64_t off;
	for (;;) {
		int r = archive_read_data_block(a, &buf, &len, &off);
		if (r == ARCHIVE_EOF)
			return 0;
		if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
			return errbuf_set(c->err, c->errlen, -EINVAL, "the layer is broken at '%.300s': %s",
					  name, archive_error_string(a));
		/* Within the entry's size, which is what was counted. */
		if (off < 0 || (la_int64_t)len > size || off > size - (la_int64_t)len)
			return errbuf_set(c->err, c->errlen, -EINVAL,
					  "the layer's '%.300s' holds data past its size", name);
		const char *p = buf;
		while (len) {
			ssize_t w = pwrite(fd, p, len, off);
			if (w < 0) {
				if (errno == EINTR)
					continue;
				return errbuf_set(c->err, c->errlen, errno == EFBIG ? -EFBIG : -errno,
						  "cannot write '%.300s': %s", name, strerror(errno));
			}
			p += w;
			off += w;
			len -= (size_t)w;
		}
	}
}

/* The second pass's work for one entry. */
static int create(struct lctx *c, struct archive *a, struct archive_entry *e)
{
	const char *raw = archive_entry_pathname(e);
	char path[PATH_MAX];
	if (!raw)
		return refuse(c, -EINVAL, "?", "has no name");
	if (clean_path(raw, path, sizeof(path)) < 0)
		return refuse(c, -EINVAL, raw, "leaves the image's root (..) or is too long");
	if (!*path)
		return 0; /* the root itself: ours */
	const char *dir, *base;
	split(path, &dir, &base);
	if (!c->as_caller && !strncmp(base, WH_PREFIX, strlen(WH_PREFIX)))
		return 0; /* the first pass's */
	mode_t type = archive_entry_filetype(e);
	const char *hard = archive_entry_hardlink(e);
	if (!hard && (type == AE_IFCHR || type == AE_IFBLK))
		return refuse(c, -EINVAL, raw, "is a device node (the guest's /dev is its own)");
	if (!hard && type == AE_IFSOCK)
		return 0; /* nothing to keep */
	la_int64_t size = archive_entry_size(e);
	if (size < 0)
		size = 0;
	if (!c->as_caller &&
	    (archive_entry_uid(e) < 0 || archive_entry_uid(e) >= IMAGE_ID_COUNT ||
	     archive_entry_gid(e) < 0 || archive_entry_gid(e) >= IMAGE_ID_COUNT))
		return refuse(c, -EINVAL, raw, "has an owner outside 0-65535");
	int r = count(c, raw, (unsigned long long)size + ENTRY_COST);
	if (r < 0)
		return r;
	int dfd = open_dir(c->root, dir, 1);
	if (dfd < 0)
		return refuse(c, -EINVAL, raw, "goes through a symlink or a file");
	struct stat st;
	int exists = fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0;
	/* What is there goes, unless a directory meets a directory. */
	if (exists && !(S_ISDIR(st.st_mode) && !hard && type == AE_IFDIR)) {
		if ((r = rm_at(dfd, base, 1)) < 0) {
			close(dfd);
			return errbuf_set(c->err, c->errlen, r, "cannot replace '%.300s': %s", raw,
					  strerror(-r));
		}
		exists = 0;
	}
	r = 0;
	int fd = -1;
	if (hard) {
		char target[PATH_MAX];
		if (clean_path(hard, target, sizeof(target)) < 0 || !*target) {
			close(dfd);
			return refuse(c, -EINVAL, raw, "is a hard link out of the image's root");
		}
		const char *tdir, *tbase;
		split(target, &tdir, &tbase);
		int tfd = open_dir(c->root, tdir, 0);
		struct stat ts;
		if (tfd < 0 || fstatat(tfd, tbase, &ts, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(ts.st_mode)) {
			if (tfd >= 0)
				close(tfd);
			close(dfd);
			return refuse(c, -EINVAL, raw, "is a hard link to nothing in the image");
		}
		if (linkat(tfd, tbase, dfd, base, 0) < 0)
			r = -errno;
		close(tfd);
		close(dfd);
		return r < 0 ? errbuf_set(c->err, c->errlen, r, "cannot link '%.300s': %s", raw,
					  strerror(-r))
			     : 0;
	}
	switch (type) {
	case AE_IFREG:
		fd = openat(dfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			r = -errno;
		else if ((r = write_data(c, a, fd, raw, size)) == 0 && ftruncate(fd, size) < 0)
			r = errno == EFBIG ? -EFBIG : -errno;
		if (r == -EFBIG) {
			close(fd);
			close(dfd);
			return errbuf_set(c->err, c->errlen, -EFBIG, "'%.300s' is larger than the limit", raw);
		}
		if (r < 0 && !*c->err)
			errbuf_set(c->err, c->errlen, r, "cannot write '%.300s': %s", raw, strerror(-r));
		break;
	case AE_IFDIR:
		if (!exists && mkdirat(dfd, base, 0700) < 0)
			r = -errno;
		else if ((fd = openat(dfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
			r = -errno;
		break;
	case AE_IFLNK: {
		/* Kept as written, absolute or not: the guest resolves it in
		 * its own root, and nothing here ever follows it. */
		const char *to = archive_entry_symlink(e);
		if (!to || !*to)
			r = -EINVAL;
		else if (symlinkat(to, dfd, base) < 0)
			r = -errno;
		else if (!c->as_caller &&
			 fchownat(dfd, base, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e),
				  AT_SYMLINK_NOFOLLOW) < 0)
			r = -errno;
		else
			r = set_times(dfd, base, e);
		close(dfd);
		if (r == -EINVAL)
			return refuse(c, r, raw, "is a symlink to nothing");
		return r < 0 ? errbuf_set(c->err, c->errlen, r, "cannot make symlink '%.300s': %s", raw,
					  strerror(-r))
			     : 0;
	}
	case AE_IFIFO:
		if (mknodat(dfd, base, S_IFIFO | 0600, 0) < 0)
			r = -errno;
		else if ((fd = openat(dfd, base, O_PATH | O_NOFOLLOW | O_CLOEXEC)) < 0)
			r = -errno;
		if (fd >= 0) {
			/* fchown and fchmod do not take O_PATH descriptors. */
			char proc[64];
			snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
			if ((!c->as_caller && chown(proc, (uid_t)archive_entry_uid(e),
						    (gid_t)archive_entry_gid(e)) < 0) ||
			    chmod(proc, mode_of(c, e)) < 0)
				r = -errno;
			close(fd);
			fd = -1;
		}
		break;
	default:
		close(dfd);
		return refuse(c, -EINVAL, raw, "is of a kind no image has");
	}
	if (r == 0 && fd >= 0)
		r = set_attrs(c, fd, e);
	if (fd >= 0)
		close(fd);
	if (r == 0 && type != AE_IFDIR)
		r = set_times(dfd, base, e);
	close(dfd);
	if (r < 0 && !*c->err)
		errbuf_set(c->err, c->errlen, r, "cannot make '%.300s': %s", raw, strerror(-r));
	return r;
}

static struct archive *open_layer(int fd, int as_caller, char *err, size_t errlen)
{
	if (lseek(fd, 0, SEEK_SET) < 0) {
		errbuf_set(err, errlen, -errno, "cannot read the layer: %s", strerror(errno));
		return NULL;
	}
	struct archive *a = archive_read_new();
	if (!a) {
		errbuf_set(err, errlen, -ENOMEM, "out of memory");
		return NULL;
	}
	archive_read_support_filter_gzip(a);
	archive_read_support_filter_zstd(a);
	if (as_caller) { /* what ADD unpacks: xz and bzip2 too */
		archive_read_support_filter_xz(a);
		archive_read_support_filter_bzip2(a);
	}
	archive_read_support_format_tar(a);
	if (archive_read_open_fd(a, fd, 64 * 1024) != ARCHIVE_OK) {
		errbuf_set(err, errlen, -EINVAL, "the layer is not a tar: %s", archive_error_string(a));
		archive_read_free(a);
		return NULL;
	}
	return a;
}

/* Each entry of the layer at fd to fn; 0, or fn's or the tar's error. */
static int each_entry(struct lctx *c, int fd, int pass)
{
	struct archive *a = open_layer(fd, c->as_caller, c->err, c->errlen);
	if (!a)
		return -EINVAL;
	struct archive_entry *e;
	unsigned long long sum = 0; /* pass 1's count of what pass 2 will write */
	unsigned long n = 0;
	int r = 0, x;
	while (r == 0 && (x = archive_read_next_header(a, &e)) != ARCHIVE_EOF) {
		if (x != ARCHIVE_OK && x != ARCHIVE_WARN) {
			r = errbuf_set(c->err, c->errlen, -EINVAL, "the layer is not a whole tar: %s",
				       archive_error_string(a));
			break;
		}
		if (pass == 1) {
			/* Sizes and counts first, as pass 2 will count them: the
			 * next header is past this entry's data, which a 10 GB one
			 * does not have, and a layer past the limits is not read
			 * whole to find out. */
			const char *name = archive_entry_pathname(e);
			la_int64_t size = archive_entry_size(e);
			sum += (size > 0 ? (unsigned long long)size : 0) + ENTRY_COST;
			if (++n + c->used->entries > c->max_entries)
				r = errbuf_set(c->err, c->errlen, -EFBIG,
					       "the image has more than %lu files and directories",
					       c->max_entries);
			else if ((size > 0 && (unsigned long long)size > c->max_bytes) ||
				 sum + c->used->bytes > c->max_bytes)
				r = errbuf_set(c->err, c->errlen, -EFBIG,
					       "the image is larger than the limit of %llu MB unpacked (at "
					       "'%.300s')",
					       c->max_bytes >> 20, name ? name : "?");
			else
				r = name ? whiteout(c, name) : refuse(c, -EINVAL, "?", "has no name");
		} else {
			r = create(c, a, e);
		}
	}
	archive_read_free(a);
	return r;
}

int image_layer_apply(int rootfd, int layerfd, const struct image_limits *lim,
		      struct image_usage *used, char *err, size_t errlen)
{
	if (err && errlen)
		*err = '\0';
	struct lctx c = {
		.root = rootfd,
		.max_bytes = lim && lim->max_bytes ? lim->max_bytes : DEFAULT_MAX_BYTES,
		.max_entries = lim && lim->max_entries ? lim->max_entries : DEFAULT_MAX_ENTRIES,
		.as_caller = lim && lim->as_caller,
		.used = used,
		.err = err,
		.errlen = errlen,
	};
	int r = each_entry(&c, layerfd, 1);
	return r < 0 ? r : each_entry(&c, layerfd, 2);
}
