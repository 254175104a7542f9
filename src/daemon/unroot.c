/*
 * unroot: cpuosd giving up root once its helper runs (priv.h): what it
 * writes made its own, the guest's files put where it can read them, then
 * priv_drop. See docs/architecture.md, "Who holds what".
 */
#include "daemon/unroot.h"

#include "common/fs.h"
#include "common/log.h"
#include "priv/priv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The API socket's directory becomes the daemon's: made so, the state
 * directory, or taken when root's and holding nothing but cpuosd's (its
 * socket, an older cpuosd's id locks): never a directory of other
 * things such as /run, /root or the state's parent. */
static int own_socket_dir(const struct config *o, const char *dir, const char *sock, uid_t uid)
{
	char real[PATH_MAX];
	struct stat st;
	if (fs_mkdir_p(dir, 0700, uid, uid) < 0 || !realpath(dir, real) || lstat(real, &st) < 0) {
		log_error("cannot make the socket's directory '%s': %s", dir, strerror(errno));
		return -EIO;
	}
	if (st.st_uid == uid || !strcmp(real, o->state_dir)) /* the state's: taken below */
		return 0;
	DIR *d = opendir(real);
	struct dirent *e;
	int ours = d && st.st_uid == 0;
	while (ours && (e = readdir(d)))
		ours = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		       (e->d_type == DT_SOCK && !strcmp(e->d_name, sock)) ||
		       (e->d_type == DT_DIR && !strcmp(e->d_name, "jail-ids"));
	if (d)
		closedir(d);
	if (!ours || lchown(real, uid, uid) < 0) {
		log_error("the socket's directory '%s' is not cpuosd's to take: use --socket in a "
			  "directory of its own", real);
		return -EPERM;
	}
	return 0;
}

/* path and every directory on its way are open to others: what a uid of
 * no group reaches (each directory o+x, path o+r too). */
static int open_to_others(const char *path)
{
	char p[PATH_MAX];
	struct stat st;
	snprintf(p, sizeof(p), "%s", path);
	if (stat(p, &st) < 0 || !(st.st_mode & S_IROTH))
		return 0;
	for (char *slash; (slash = strrchr(p, '/')) && slash != p;) {
		*slash = '\0';
		if (stat(p, &st) < 0 || !(st.st_mode & S_IXOTH))
			return 0;
	}
	return 1;
}

/* src copied to dst (0644) unless dst has its size and time already. */
static int copy_file(const char *src, const char *dst)
{
	struct stat a, b;
	if (stat(src, &a) < 0)
		return -errno;
	if (stat(dst, &b) == 0 && a.st_size == b.st_size && a.st_mtim.tv_sec == b.st_mtim.tv_sec &&
	    a.st_mtim.tv_nsec == b.st_mtim.tv_nsec)
		return 0;
	char tmp[2 * PATH_MAX + 320], buf[1 << 16];
	snprintf(tmp, sizeof(tmp), "%s.tmp", dst);
	unlink(tmp);
	int in = open(src, O_RDONLY | O_CLOEXEC), r = 0;
	int out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	ssize_t n = 0;
	while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			n = -1;
	struct timespec t[2] = { a.st_atim, a.st_mtim };
	if (in < 0 || out < 0 || n < 0 || fchmod(out, 0644) < 0 || futimens(out, t) < 0)
		r = n < 0 || in < 0 || out < 0 ? -errno : -EIO;
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out) < 0 && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, dst) < 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
	return r;
}

/* Each daemon holds a shared lock on its staged copy's IN_USE file while
 * it runs (the descriptor stays open, close-on-exec, for its life). */
#define IN_USE ".in-use"

/* Removes what is in the directory fd (a staged copy: files, links and
 * templates/, root's alone), links as links, then closes it. */
static void remove_under(int fd)
{
	DIR *d = fdopendir(fd);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		int sub = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub >= 0) {
			remove_under(sub);
			unlinkat(fd, e->d_name, AT_REMOVEDIR);
		} else {
			unlinkat(fd, e->d_name, 0);
		}
	}
	if (d)
		closedir(d);
	else
		close(fd);
}

/* Staged copies that no running daemon holds (but keep, this one's) are
 * removed: a daemon stages its copy again at every start, so nothing a
 * daemon that is not running left (a paused sandbox, a snapshot, a
 * checkpoint) needs the old one. A copy being staged is held already. */
static void prune_staged(const char *cache_dir, const char *keep)
{
	char dir[PATH_MAX + 16];
	snprintf(dir, sizeof(dir), "%s/guest", cache_dir);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (dfd < 0 || fstat(dfd, &st) < 0 || st.st_uid != 0 || (st.st_mode & 022)) {
		if (dfd >= 0)
			close(dfd);
		return; /* none, or not root's alone: not ours to clean */
	}
	DIR *d = fdopendir(dfd);
	struct dirent *e;
	const char *own = keep ? strrchr(keep, '/') + 1 : NULL;
	while (d && (e = readdir(d))) {
		if (strlen(e->d_name) != 8 || strspn(e->d_name, "0123456789abcdef") != 8 ||
		    (own && !strcmp(e->d_name, own)))
			continue;
		int fd = openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int lk = fd >= 0 ? openat(fd, IN_USE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
		if (fd < 0 || (lk >= 0 && flock(lk, LOCK_EX | LOCK_NB) < 0)) {
			if (lk >= 0)
				close(lk);
			if (fd >= 0)
				close(fd);
			continue; /* a daemon runs with it */
		}
		/* Held now: a daemon staging it waits, then finds it gone. */
		remove_under(fd);
		if (unlinkat(dfd, e->d_name, AT_REMOVEDIR) == 0)
			log_info("removed the staged guest copy '%s/%s', which no daemon uses", dir,
				 e->d_name);
		if (lk >= 0)
			close(lk);
	}
	if (d)
		closedir(d);
}

/* Holds dst's IN_USE (made if need be) for the daemon's life: 0, or
 * -errno. One pruned meanwhile (its file no longer at its path) is made
 * again. */
static int hold_staged(const char *dst)
{
	char path[PATH_MAX + 48], tpl[PATH_MAX + 48];
	snprintf(path, sizeof(path), "%s/" IN_USE, dst);
	snprintf(tpl, sizeof(tpl), "%s/templates", dst);
	for (int tries = 0; tries < 3; tries++) {
		if (fs_mkdir_p(tpl, 0755, (uid_t)-1, (gid_t)-1) < 0)
			return -errno;
		int fd = open(path, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
		struct stat a, b;
		if (fd < 0)
			return -errno;
		if (flock(fd, LOCK_SH) == 0 && fstat(fd, &a) == 0 && stat(path, &b) == 0 &&
		    a.st_ino == b.st_ino && a.st_dev == b.st_dev)
			return 0; /* fd stays open: the lock is held until exit */
		close(fd);
	}
	return -EAGAIN;
}

/* A guest directory the daemon's id cannot reach (a clone under /root,
 * 0700) is staged in the cache: the kernel and initramfs copied, each
 * template linked where it really is. o->guest_dir names the copy. */
static int stage_guest(struct config *o)
{
	char kernel[PATH_MAX + 32], initrd[PATH_MAX + 32];
	snprintf(kernel, sizeof(kernel), "%s/bzImage", o->guest_dir);
	snprintf(initrd, sizeof(initrd), "%s/initramfs.cpio", o->guest_dir);
	if (open_to_others(o->guest_dir) && open_to_others(kernel) && open_to_others(initrd)) {
		prune_staged(o->cache_dir, NULL);
		return 0;
	}
	uint32_t h = 2166136261u; /* FNV-1a: one copy per guest directory */
	for (const char *c = o->guest_dir; *c; c++)
		h = (h ^ (unsigned char)*c) * 16777619u;
	char dst[PATH_MAX + 32], tpl[PATH_MAX + 48], a[2 * PATH_MAX + 300], b[2 * PATH_MAX + 300];
	snprintf(dst, sizeof(dst), "%s/guest/%08x", o->cache_dir, h);
	snprintf(tpl, sizeof(tpl), "%s/templates", dst);
	int r = fs_mkdir_p(tpl, 0755, (uid_t)-1, (gid_t)-1);
	/* Root's alone, as the cache is: root writes there. */
	struct stat st;
	snprintf(a, sizeof(a), "%s/guest", o->cache_dir);
	const char *mine[] = { a, dst, tpl };
	for (int n = 0; r == 0 && n < 3; n++)
		if (lstat(mine[n], &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 ||
		    (st.st_mode & 022) || chmod(mine[n], 0755) < 0)
			r = -EPERM;
	if (r == 0)
		r = hold_staged(dst);
	const char *files[] = { "bzImage", "initramfs.cpio" };
	for (int i = 0; r == 0 && i < 2; i++) {
		snprintf(a, sizeof(a), "%s/%s", o->guest_dir, files[i]);
		snprintf(b, sizeof(b), "%s/%s", dst, files[i]);
		r = copy_file(a, b);
	}
	snprintf(a, sizeof(a), "%s/templates", o->guest_dir);
	DIR *d = r == 0 ? opendir(a) : NULL;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char real[PATH_MAX];
		snprintf(a, sizeof(a), "%s/templates/%s", o->guest_dir, e->d_name);
		snprintf(b, sizeof(b), "%s/%s", tpl, e->d_name);
		if (e->d_name[0] == '.' || !realpath(a, real))
			continue;
		unlink(b);
		if (!open_to_others(real) || symlink(real, b) < 0)
			log_warn("template '%s' is out of reach of cpuosd without root: left out", a);
	}
	if (d)
		closedir(d);
	if (r < 0) {
		log_error("cannot stage the guest's files of '%s' in '%s': %s", o->guest_dir, dst,
			  strerror(-r));
		return r;
	}
	log_info("guest files of '%s' (closed to others) staged in '%s'", o->guest_dir, dst);
	prune_staged(o->cache_dir, dst);
	if (strlen(dst) >= sizeof(o->guest_dir))
		return -ENAMETOOLONG;
	memcpy(o->guest_dir, dst, strlen(dst) + 1);
	return 0;
}

/* With QEMU jailed, this process needs root no more: it becomes the jail
 * range's first id, the group every jailed QEMU has, so each reads what
 * the other writes in run directories. What it writes is made its own
 * first. */
int unroot(struct config *o)
{
	/* Not the egress CA's directory: cpuos-netd's (netd.h), root's. */
	char snaps[PATH_MAX + 16], scratch[PATH_MAX + 16], sock[PATH_MAX];
	snprintf(snaps, sizeof(snaps), "%s/snapshots", o->cache_dir);
	snprintf(scratch, sizeof(scratch), "%s/scratch", o->cache_dir);
	const char *dirs[] = { o->state_dir, snaps, scratch, NULL };
	for (int i = 1; dirs[i]; i++)
		fs_mkdir_p(dirs[i], 0755, (uid_t)-1, (gid_t)-1);
	uid_t uid = (uid_t)o->jail_first;
	const char *sd = NULL, *base = strrchr(o->socket, '/');
	if (strcmp(o->socket, "none")) {
		snprintf(sock, sizeof(sock), "%s", o->socket);
		sd = dirname(sock);
	}
	if ((sd && own_socket_dir(o, sd, base ? base + 1 : o->socket, uid) < 0) || stage_guest(o) < 0)
		return -EPERM;
	char err[512];
	if (priv_drop(uid, (unsigned)o->jail_count, dirs, err, sizeof(err)) < 0) {
		log_error("%s (or run with --jail off)", err);
		return -EPERM;
	}
	/* A directory above them closed to others would fail every create. */
	const char *need[] = { o->state_dir, o->cache_dir, o->guest_dir };
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
		if (access(need[i], i ? R_OK | X_OK : R_OK | W_OK | X_OK) < 0) {
			log_error("uid %u cannot use '%s': %s (a directory above it closed to "
				  "others?)", (unsigned)uid, need[i], strerror(errno));
			return -EACCES;
		}
	log_info("serving as uid %u with no capabilities", (unsigned)uid);
	return 0;
}

