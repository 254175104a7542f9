/*
 * priv_drop: the daemon gives up root once the helper holds what needs
 * it (priv.h). What it writes becomes its own first, since root made
 * much of it: an older daemon that ran as root, a test, `make run`.
 */
#include "priv/priv.h"

#include <errno.h>
#include <ftw.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static uid_t owner;

/* Root's entries become the daemon's; a QEMU's (a jail id's) stay its. */
static int own(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)flag;
	(void)f;
	if (st->st_uid == 0 && lchown(path, owner, owner) < 0 && errno != ENOENT)
		return errno; /* ends the walk */
	return 0;
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
	owner = uid;
	for (int i = 0; dirs[i]; i++) {
		int r = nftw(dirs[i], own, 16, FTW_PHYS | FTW_MOUNT);
		if (r != 0) {
			snprintf(err, errlen, "cannot give '%s' to uid %u: %s", dirs[i], (unsigned)uid,
				 strerror(r > 0 ? r : errno));
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
