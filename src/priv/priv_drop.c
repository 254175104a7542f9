/*
 * priv_drop: the daemon gives up root once the helper holds what needs
 * it (priv.h). What it writes becomes its own first, since root made
 * much of it: an older daemon that ran as root, a test, `make run`.
 */
#include "priv/priv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct walk {
	uid_t uid;      /* the daemon's, and the jails' shared group */
	unsigned count; /* the jail ids: uid+1 .. uid+count-1 */
	dev_t dev;      /* the tree's filesystem: no other is entered */
};

/* One entry, open as fd: root's becomes the daemon's, a jail id's (left
 * by a cpuos that gave run directories to QEMU's uid) the daemon's
 * group's to use too. A file with a second link is left alone: it may be
 * a host file linked in. */
static int fix(const struct walk *w, int fd, const struct stat *st)
{
	int dir = S_ISDIR(st->st_mode);
	if (!dir && !S_ISREG(st->st_mode))
		return 0;
	if (!dir && st->st_nlink != 1)
		return 0;
	if (st->st_uid == 0)
		return fchown(fd, w->uid, w->uid) < 0 ? -errno : 0;
	if (st->st_uid > w->uid && st->st_uid - w->uid < w->count &&
	    (fchown(fd, (uid_t)-1, w->uid) < 0 ||
	     fchmod(fd, (st->st_mode & 0777) | (dir ? 02070 : 0060)) < 0))
		return -errno;
	return 0;
}

/* The tree under dfd (taken), walked through descriptors only: a jail
 * can rename and link inside its run directory while this runs as root,
 * so no path is followed twice and no link at all. */
static int walk(const struct walk *w, int dfd, int depth)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -errno;
	}
	int r = 0;
	struct dirent *e;
	while (r == 0 && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		/* O_PATH first: nothing is opened for reading (a FIFO, a
		 * device) before it is known to be a file or directory. */
		int fd = openat(dirfd(d), e->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC), rd = -1;
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0 || st.st_dev != w->dev) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) { /* a link, a socket */
			if (st.st_uid == 0)
				fchownat(fd, "", w->uid, w->uid, AT_EMPTY_PATH);
			close(fd);
			continue;
		}
		/* The same inode, opened for fchmod and readdir. */
		char self[32];
		snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
		rd = open(self, (S_ISDIR(st.st_mode) ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
		close(fd);
		struct stat st2;
		if (rd < 0 || fstat(rd, &st2) < 0 || st2.st_ino != st.st_ino || st2.st_dev != st.st_dev) {
			if (rd >= 0)
				close(rd);
			continue;
		}
		r = fix(w, rd, &st2);
		if (r == 0 && S_ISDIR(st2.st_mode) && depth < 16) {
			r = walk(w, rd, depth + 1);
			continue;
		}
		close(rd);
	}
	closedir(d);
	return r;
}

static int no_caps(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return -errno;
	for (int i = 0; i < 2; i++)
		if (d[i].effective || d[i].permitted || d[i].inheritable)
			return -EPERM;
	return 0;
}

int priv_drop(uid_t uid, unsigned jail_count, const char *const *dirs, char *err, size_t errlen)
{
	for (int i = 0; dirs[i]; i++) {
		struct stat st;
		struct walk w = { .uid = uid, .count = jail_count };
		int fd = open(dirs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), r = 0;
		if (fd < 0 || fstat(fd, &st) < 0) {
			r = -errno;
		} else {
			w.dev = st.st_dev;
			r = fix(&w, fd, &st);
		}
		if (r == 0)
			r = walk(&w, fd, 0); /* takes fd */
		else if (fd >= 0)
			close(fd);
		if (r < 0) {
			snprintf(err, errlen, "cannot give '%s' to uid %u: %s", dirs[i], (unsigned)uid,
				 strerror(-r));
			return -EPERM;
		}
	}
	/* Group-readable and -writable: the jails (whose group this is)
	 * and the daemon read what the other writes in run directories. */
	umask(007);
	if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0 ||
	    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		snprintf(err, errlen, "cannot become uid %u: %s", (unsigned)uid, strerror(errno));
		return -EPERM;
	}
	if (no_caps() < 0) {
		snprintf(err, errlen, "capabilities left after becoming uid %u", (unsigned)uid);
		return -EPERM;
	}
	return 0;
}
