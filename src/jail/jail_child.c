/*
 * jail_child: the child's side of a jail, between fork and exec: it joins
 * the cgroup, hands over the TAP, builds the root and drops privileges,
 * with system calls only (the daemon's other threads left their locks as
 * they were at the fork).
 */
#include "jail/jail_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/if_tun.h>
#include <linux/securebits.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* One line on stderr (QEMU's log, which the runner reads back): which
 * step failed, and the errno's name (strerror may translate, and so lock). */
static int say(const char *step, int e)
{
	const char *m = strerrorname_np(e);
	const char *parts[] = { "cpuos jail: ", step, ": ", m ? m : "unknown error", "\n" };
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
		if (write(2, parts[i], strlen(parts[i])) < 0)
			break;
	return -e;
}

/* out = a b, cut to len: snprintf is not for a forked child either. */
static void cat2(char *out, size_t len, const char *a, const char *b)
{
	size_t n = 0;
	for (const char *s = a; *s && n + 1 < len; s++)
		out[n++] = *s;
	for (const char *s = b; *s && n + 1 < len; s++)
		out[n++] = *s;
	out[n] = '\0';
}

static int write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, s, strlen(s));
	int e = n < 0 ? errno : 0;
	close(fd);
	return -e;
}

/* mkdir -p of path's directories, and path itself as a directory (dir) or
 * an empty file to mount a file on. */
static int make_point(char *path, int dir)
{
	for (char *q = path + 1; *q; q++) {
		if (*q != '/')
			continue;
		*q = '\0';
		int r = mkdir(path, 0755) < 0 && errno != EEXIST ? -errno : 0;
		*q = '/';
		if (r < 0)
			return r;
	}
	if (dir)
		return mkdir(path, 0755) < 0 && errno != EEXIST ? -errno : 0;
	int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

static int build_root(const struct jail_plan *p)
{
	char path[800];
	/* Each bind is of the descriptor the plan opened, never of a name
	 * looked up again here: a copy of its mount, detached (open_tree
	 * takes only mounts of this namespace, so before the unshare), then
	 * moved into the jail's root. */
	int tree[MAX_BINDS];
	for (int i = 0; i < p->nbinds; i++)
		if ((tree[i] = open_tree(p->b[i].fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
						       AT_EMPTY_PATH | AT_RECURSIVE)) < 0)
			return say(p->b[i].src, errno);
	/* Nothing done here may reach the host's mounts; and no System V
	 * IPC object of the host's (or of an earlier holder of this uid)
	 * is in reach either. */
	if (unshare(CLONE_NEWNS | CLONE_NEWIPC) < 0)
		return say("unshare(CLONE_NEWNS | CLONE_NEWIPC)", errno);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return say("making mounts private", errno);
	if (mount("cpuos-jail", p->root, "tmpfs", MS_NOSUID | MS_NOEXEC,
		  "size=1m,nr_inodes=4096,mode=0755") < 0)
		return say("mounting the jail's tmpfs", errno);
	for (int i = 0; i < p->nbinds; i++) {
		const struct bind *b = &p->b[i];
		cat2(path, sizeof(path), p->root, b->dst);
		int r = make_point(path, b->dir);
		if (r < 0)
			return say(b->dst, -r);
		if (move_mount(tree[i], "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH) < 0)
			return say(b->src, errno);
		close(tree[i]);
		/* A bind takes its flags from a change of its own: on every
		 * mount under it too (mount_setattr, Linux 5.12), else by a
		 * remount of the top one. */
		struct mount_attr a = {
			.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
				    (b->ro ? MOUNT_ATTR_RDONLY : 0) | (b->exec ? 0 : MOUNT_ATTR_NOEXEC),
		};
		if (mount_setattr(AT_FDCWD, path, AT_RECURSIVE, &a, sizeof(a)) == 0)
			continue;
		if (errno != ENOSYS)
			return say(b->dst, errno);
		unsigned long fl = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV |
				   (b->ro ? MS_RDONLY : 0) | (b->exec ? 0 : MS_NOEXEC);
		if (mount(NULL, path, NULL, fl, NULL) < 0)
			return say(b->dst, errno);
	}
	for (int i = 0; i < p->ndevs; i++) {
		cat2(path, sizeof(path), p->root, p->devs[i].path);
		int r = make_point(path, 1); /* its directories, then the node in place of the dir */
		if (r < 0 || rmdir(path) < 0 || mknod(path, S_IFCHR | 0666, p->devs[i].rdev) < 0 ||
		    chmod(path, 0666) < 0) /* past the umask */
			return say(p->devs[i].path, r < 0 ? -r : errno);
	}
	for (int i = 0; i < p->nlinks; i++) {
		cat2(path, sizeof(path), p->root, "/");
		cat2(path, sizeof(path), path, p->links[i].name);
		if (symlink(p->links[i].target, path) < 0)
			return say(p->links[i].name, errno);
	}
	cat2(path, sizeof(path), p->root, p->cwd);
	int r = make_point(path, 1);
	if (r < 0)
		return say("the working directory", -r);
	/* The old root stacked under the new one and then let go. */
	if (chdir(p->root) < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
		return say("pivot_root", errno);
	if (umount2(".", MNT_DETACH) < 0)
		return say("detaching the host's root", errno);
	if (mount(NULL, "/", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) < 0)
		return say("making the jail's root read-only", errno);
	if (chdir(p->cwd) < 0)
		return say("chdir", errno);
	return 0;
}

static int give_tap(const struct jail_plan *p)
{
	int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return say("/dev/net/tun", errno);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, p->tap, strlen(p->tap));
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
	int r = 0;
	if (ioctl(fd, TUNSETIFF, &ifr) < 0 || ioctl(fd, TUNSETOWNER, (unsigned long)p->uid) < 0 ||
	    ioctl(fd, TUNSETGROUP, (unsigned long)p->gid) < 0)
		r = say("giving the TAP to the jail's uid", errno);
	close(fd);
	return r;
}

static int drop(const struct jail_plan *p)
{
	/* The bounding set emptied while root may still do it, so that
	 * nothing this process execs can gain a capability back; the
	 * securebits fixed so that the uid change below clears every set
	 * whatever the daemon was started with (keep-caps, no-setuid-fixup). */
	for (int c = 0; c <= 63; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno == EINVAL)
			break;
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED |
				       SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED, 0, 0, 0) < 0)
		return say("locking the capability rules", errno);
	if (setgroups((size_t)p->ngroups, p->groups) < 0 || setresgid(p->gid, p->gid, p->gid) < 0 ||
	    setresuid(p->uid, p->uid, p->uid) < 0)
		return say("dropping to the jail's uid", errno);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return say("no_new_privs", errno);
	/* The inheritable set survives a uid change: emptied too, and all
	 * of it seen to be so. */
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	if (syscall(SYS_capset, &h, d) < 0 || syscall(SYS_capget, &h, d) < 0)
		return say("emptying the capability sets", errno);
	for (int i = 0; i < 2; i++)
		if (d[i].effective || d[i].permitted || d[i].inheritable)
			return say("a capability is left", EPERM);
	return 0;
}

int jail_enter(const void *arg)
{
	const struct jail_plan *p = arg;
	int r;
	umask(022); /* its root's directories: for QEMU's uid to walk */
	for (int i = 0; i < p->join.n; i++)
		if ((r = write_str(p->join.procs[i], "0")) < 0)
			return say(p->join.procs[i], -r);
	/* When memory runs out on the host, a VM goes before the daemon. */
	write_str("/proc/self/oom_score_adj", "500");
	if (p->tap[0] && (r = give_tap(p)) < 0)
		return r;
	/* Without a network of its own it sees none: not the host's
	 * loopback, where the daemon's API listens. */
	if (p->own_netns && unshare(CLONE_NEWNET) < 0)
		return say("unshare(CLONE_NEWNET)", errno);
	if ((r = build_root(p)) < 0)
		return r;
	/* What QEMU makes in its run directory (sockets, a RAM file) is
	 * the shared group's to read and write too: the daemon's. */
	umask(007);
	return drop(p);
}
