/*
 * files: file metadata requests (STAT, LIST, MKDIR, REMOVE, RENAME) and the
 * path and user helpers the file transfers share. Paths are absolute and
 * never trusted: symlinks are not followed where a walk could escape.
 */
#include "agent/files.h"

#include "agent/conn.h"
#include "agent/user.h"
#include "common/fs.h"
#include "common/proto.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int files_get_path(struct conn *c, const struct proto_frame *f, uint16_t tag, char *buf,
		   const char *what)
{
	int r = proto_get_str(f, tag, buf, PROTO_MAX_STR + 1);
	if (r < 0) {
		conn_send_attr_error(c, f->id, r, what);
		return -1;
	}
	if (buf[0] != '/') {
		conn_send_error(c, f->id, EINVAL, "path '%s' is not absolute", buf);
		return -1;
	}
	return 0;
}

int files_get_user(struct conn *c, const struct proto_frame *f, struct user *u, bool *given)
{
	char name[256] = "root";
	int r = proto_get_str(f, A_USER, name, sizeof(name));
	if (r < 0 && r != -ENOENT) {
		conn_send_attr_error(c, f->id, r, "user");
		return -1;
	}
	*given = r == 0;
	r = user_lookup(name, u);
	if (r == -ENOENT) {
		conn_send_error(c, f->id, EINVAL, "unknown user '%s'", name);
		return -1;
	}
	if (r < 0) {
		conn_send_error(c, f->id, -r, "cannot read '/etc/passwd': %s", strerror(-r));
		return -1;
	}
	return 0;
}

/* The stat attributes of P_OK (STAT) and P_ENTRY (LIST). */
static int put_stat(struct conn *c, const struct stat *st, int dirfd, const char *name)
{
	int r = proto_put_u32(&c->out, A_MODE, st->st_mode);
	if (r == 0)
		r = proto_put_u64(&c->out, A_SIZE, (uint64_t)st->st_size);
	if (r == 0)
		r = proto_put_u64(&c->out, A_MTIME_NS,
				  (uint64_t)st->st_mtim.tv_sec * 1000000000u +
				      (uint64_t)st->st_mtim.tv_nsec);
	if (r == 0)
		r = proto_put_u32(&c->out, A_UID, st->st_uid);
	if (r == 0)
		r = proto_put_u32(&c->out, A_GID, st->st_gid);
	if (r == 0 && S_ISLNK(st->st_mode)) {
		char link[PROTO_MAX_STR + 1];
		ssize_t n = readlinkat(dirfd, name, link, PROTO_MAX_STR);
		if (n >= 0) {
			link[n] = '\0';
			r = proto_put_str(&c->out, A_LINK, link);
		}
	}
	return r;
}

void files_stat(struct conn *c, const struct proto_frame *f)
{
	char path[PROTO_MAX_STR + 1];
	if (files_get_path(c, f, A_PATH, path, "path") < 0)
		return;
	struct stat st;
	if (lstat(path, &st) < 0) {
		conn_send_error(c, f->id, errno, "cannot stat '%s': %s", path, strerror(errno));
		return;
	}
	int r = conn_out_begin(c, P_OK, 0, f->id);
	if (r == 0)
		r = put_stat(c, &st, AT_FDCWD, path);
	conn_out_end(c, r);
}

/* --- LIST --- */

struct lister {
	struct conn *c;
	uint32_t id;
	unsigned count;
	bool full;
	char rel[PROTO_MAX_STR + 1];
};

/* Lists the directory open as dfd (consumed), rel[0..rlen) naming it. */
static void list_dir(struct lister *l, int dfd, size_t rlen, unsigned depth)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return;
	}
	struct dirent *e;
	while (!l->c->broken && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (l->count >= MAX_LIST) {
			l->full = true;
			break;
		}
		size_t n = strlen(e->d_name);
		if (rlen + 1 + n > PROTO_MAX_STR)
			continue; /* cannot be named in one attribute */
		size_t len = rlen;
		if (len)
			l->rel[len++] = '/';
		memcpy(l->rel + len, e->d_name, n + 1);
		len += n;
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* gone meanwhile */
		int r = conn_out_begin(l->c, P_ENTRY, 0, l->id);
		if (r == 0)
			r = proto_put_str(&l->c->out, A_PATH, l->rel);
		if (r == 0)
			r = put_stat(l->c, &st, dirfd(d), e->d_name);
		conn_out_end(l->c, r);
		l->count++;
		if (S_ISDIR(st.st_mode) && depth > 1) {
			int sub = openat(dirfd(d), e->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0)
				list_dir(l, sub, len, depth - 1);
		}
		l->rel[rlen] = '\0';
		if (l->full)
			break;
	}
	closedir(d);
}

void files_list(struct conn *c, const struct proto_frame *f)
{
	char path[PROTO_MAX_STR + 1];
	if (files_get_path(c, f, A_PATH, path, "path") < 0)
		return;
	uint32_t depth = 1;
	int r = proto_get_u32(f, A_DEPTH, &depth);
	if (r == -EPROTO) {
		conn_send_attr_error(c, f->id, r, "depth");
		return;
	}
	if (depth == 0) {
		conn_send_error(c, f->id, EINVAL, "depth must be at least 1");
		return;
	}
	if (depth > MAX_LIST_DEPTH)
		depth = MAX_LIST_DEPTH;
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		conn_send_error(c, f->id, errno, "cannot list '%s': %s", path, strerror(errno));
		return;
	}
	struct lister *l = calloc(1, sizeof(*l));
	if (!l) {
		close(fd);
		conn_send_error(c, f->id, ENOMEM, "out of memory");
		return;
	}
	l->c = c;
	l->id = f->id;
	list_dir(l, fd, 0, depth);
	if (l->full)
		conn_send_error(c, f->id, E2BIG, "listing of '%s' stopped after %d entries", path,
				MAX_LIST);
	else
		conn_send_ok(c, f->id);
	free(l);
}

/* --- MKDIR, REMOVE, RENAME --- */

void files_mkdir(struct conn *c, const struct proto_frame *f)
{
	char path[PROTO_MAX_STR + 1];
	if (files_get_path(c, f, A_PATH, path, "path") < 0)
		return;
	uint32_t mode = 0755, parents = 0;
	int r = proto_get_u32(f, A_MODE, &mode);
	if (r == -EPROTO) {
		conn_send_attr_error(c, f->id, r, "mode");
		return;
	}
	if ((r = proto_get_u32(f, A_PARENTS, &parents)) == -EPROTO) {
		conn_send_attr_error(c, f->id, r, "parents");
		return;
	}
	struct user u;
	bool given;
	if (files_get_user(c, f, &u, &given) < 0)
		return;
	bool own = given && geteuid() == 0;
	mode &= 07777;
	struct stat st;
	if (parents && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		conn_send_ok(c, f->id); /* mkdir -p: already there is fine */
		return;
	}
	char *slash = strrchr(path, '/');
	r = 0;
	if (parents && slash != path) {
		*slash = '\0';
		r = fs_mkdir_p(path, 0755, own ? u.uid : (uid_t)-1, u.gid);
		*slash = '/';
	}
	if (r == 0) {
		/* mkdir applies the umask; the host asked for this exact mode. */
		if (mkdir(path, mode) < 0 || chmod(path, mode) < 0 ||
		    (own && chown(path, u.uid, u.gid) < 0))
			r = -errno;
	}
	if (r < 0)
		conn_send_error(c, f->id, -r, "cannot create directory '%s': %s", path,
				strerror(-r));
	else
		conn_send_ok(c, f->id);
}

static int rm_errno;
static char rm_path[PROTO_MAX_STR + 1];

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	int r = (type == FTW_DP || type == FTW_DNR) ? rmdir(path) : unlink(path);
	if (r < 0 && errno != ENOENT) {
		rm_errno = errno;
		snprintf(rm_path, sizeof(rm_path), "%s", path);
		return 1;
	}
	return 0;
}

void files_remove(struct conn *c, const struct proto_frame *f)
{
	char path[PROTO_MAX_STR + 1];
	if (files_get_path(c, f, A_PATH, path, "path") < 0)
		return;
	uint32_t recursive = 0;
	int r = proto_get_u32(f, A_RECURSIVE, &recursive);
	if (r == -EPROTO) {
		conn_send_attr_error(c, f->id, r, "recursive");
		return;
	}
	struct stat st, root;
	if (lstat(path, &st) < 0) {
		conn_send_error(c, f->id, errno, "cannot remove '%s': %s", path, strerror(errno));
		return;
	}
	if (stat("/", &root) == 0 && st.st_dev == root.st_dev && st.st_ino == root.st_ino) {
		conn_send_error(c, f->id, EPERM, "refusing to remove '/'");
		return;
	}
	if (!S_ISDIR(st.st_mode))
		r = unlink(path);
	else if (!recursive)
		r = rmdir(path);
	else {
		/* Depth first, never following symlinks. No FTW_MOUNT: on the
		 * overlay root a copied-up file reports the upper layer's st_dev,
		 * not its directory's, so FTW_MOUNT would skip it. */
		rm_errno = 0;
		r = nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS);
		if (r > 0) {
			conn_send_error(c, f->id, rm_errno, "cannot remove '%s': %s", rm_path,
					strerror(rm_errno));
			return;
		}
	}
	if (r < 0)
		conn_send_error(c, f->id, errno, "cannot remove '%s': %s", path, strerror(errno));
	else
		conn_send_ok(c, f->id);
}

void files_rename(struct conn *c, const struct proto_frame *f)
{
	char from[PROTO_MAX_STR + 1], to[PROTO_MAX_STR + 1];
	if (files_get_path(c, f, A_PATH, from, "path") < 0 ||
	    files_get_path(c, f, A_PATH2, to, "path2") < 0)
		return;
	if (rename(from, to) < 0)
		conn_send_error(c, f->id, errno, "cannot rename '%s' to '%s': %s", from, to,
				strerror(errno));
	else
		conn_send_ok(c, f->id);
}
