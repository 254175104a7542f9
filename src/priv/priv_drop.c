/*
 * priv_drop: the daemon gives up root once the helper holds what needs
 * it (priv.h). What it writes becomes its own first, since root made
 * much of it: an older daemon that ran as root, a test, `make run`.
 */
#include "priv/priv.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* One entry, open as fd: root's becomes the daemon's, another's (a
 * jail id's, left by a cpuos that gave run directories to QEMU's uid)
 * the daemon's group's to use too. A root file with a second link is
 * left alone: it may be a host file linked in by a jail. */
static int fix(int fd, uid_t uid)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_uid == 0 && (S_ISDIR(st.st_mode) || st.st_nlink == 1))
		return fchown(fd, uid, uid) < 0 ? -errno : 0;
	if (st.st_uid != uid && st.st_uid != 0 && (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) &&
	    (fchown(fd, (uid_t)-1, uid) < 0 ||
	     fchmod(fd, (st.st_mode & 07777) | (S_ISDIR(st.st_mode) ? 02070 : 0060)) < 0))
		return -errno;
	return 0;
}

/* The tree under dfd (taken), walked through descriptors only: a jail
 * can rename and link inside its run directory while this runs as root,
 * so no path is followed twice and no link at all. */
static int walk(int dfd, uid_t uid, int depth)
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
		int fd = openat(dirfd(d), e->d_name,
				O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
		if (fd < 0) { /* a link, a socket: only its own owner changes */
			struct stat st;
			if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    st.st_uid == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
				fchownat(dirfd(d), e->d_name, uid, uid, AT_SYMLINK_NOFOLLOW);
			continue;
		}
		struct stat st;
		r = fix(fd, uid);
		if (r == 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && depth < 16) {
			r = walk(fd, uid, depth + 1);
			continue;
		}
		close(fd);
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

int priv_drop(uid_t uid, const char *const *dirs, char *err, size_t errlen)
{
	for (int i = 0; dirs[i]; i++) {
		int fd = open(dirs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = fd < 0 ? -errno : 0;
		if (r == 0 && (r = fix(fd, uid)) < 0)
			close(fd);
		if (r == 0)
			r = walk(fd, uid, 0);
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
