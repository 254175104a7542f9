/*
 * jail: the id range, the plans, and the child's side. Everything a plan
 * needs is written into it by jail_prepare, in the parent, so that
 * jail_enter (in a child forked from a threaded daemon) makes no call that
 * could take a lock another thread held at the fork: no malloc, no stdio.
 */
#include "jail/jail.h"

#include "jail/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct jail {
	unsigned first, count;
	char root[256];
	struct cgroups *cg;
	pthread_mutex_t mu;
	unsigned char *used; /* a bit per id after first */
};

#define MAX_BINDS (2 * JAIL_MAX_PATHS + 16)

struct bind {
	char src[512], dst[512];
	int dir, ro;
};

struct jail_plan {
	uid_t uid;
	gid_t gid, groups[1];
	int ngroups;
	char root[256], cwd[512], tap[IFNAMSIZ];
	struct cgroup_join join;
	int nbinds, nlinks;
	struct bind b[MAX_BINDS];
	struct { char name[16], target[64]; } links[8];
	int ndevs;
	struct { char path[32]; dev_t rdev; } devs[8];
};

int jail_new(const struct jail_config *c, struct jail **out, char *err, size_t errlen)
{
	if (c->count < 2 || c->first_id == 0 || c->first_id > UINT_MAX - c->count) {
		snprintf(err, errlen, "the jail id range must be above 0 and hold 2 ids or more");
		return -EINVAL;
	}
	if (mkdir(c->root_dir, 0755) < 0 && errno != EEXIST) {
		int r = -errno;
		snprintf(err, errlen, "cannot create '%s': %s", c->root_dir, strerror(errno));
		return r;
	}
	struct jail *j = calloc(1, sizeof(*j));
	if (!j || !(j->used = calloc(c->count / 8 + 1, 1))) {
		free(j);
		return -ENOMEM;
	}
	j->first = c->first_id;
	j->count = c->count;
	j->cg = c->cg;
	snprintf(j->root, sizeof(j->root), "%s", c->root_dir);
	pthread_mutex_init(&j->mu, NULL);
	*out = j;
	return 0;
}

void jail_free(struct jail *j)
{
	if (!j)
		return;
	pthread_mutex_destroy(&j->mu);
	free(j->used);
	free(j);
}

void jail_describe(const struct jail *j, char *out, size_t len)
{
	snprintf(out, len, "ids %u-%u, cgroups %s", j->first + 1, j->first + j->count - 1,
		 j->cg ? cgroup_describe(j->cg) : "off");
}

struct cgroups *jail_cgroups(struct jail *j)
{
	return j->cg;
}

static int take_id(struct jail *j, uid_t *uid)
{
	int r = -EAGAIN;
	pthread_mutex_lock(&j->mu);
	for (unsigned i = 1; i < j->count; i++) {
		if (!(j->used[i / 8] & (1u << (i % 8)))) {
			j->used[i / 8] |= (unsigned char)(1u << (i % 8));
			*uid = j->first + i;
			r = 0;
			break;
		}
	}
	pthread_mutex_unlock(&j->mu);
	return r;
}

static int mark_id(struct jail *j, uid_t uid, int used)
{
	if (uid <= j->first || uid - j->first >= j->count)
		return -ERANGE;
	unsigned i = uid - j->first;
	pthread_mutex_lock(&j->mu);
	if (used)
		j->used[i / 8] |= (unsigned char)(1u << (i % 8));
	else
		j->used[i / 8] &= (unsigned char)~(1u << (i % 8));
	pthread_mutex_unlock(&j->mu);
	return 0;
}

int jail_hold(struct jail *j, uid_t uid)
{
	return mark_id(j, uid, 1);
}

void jail_release(struct jail *j, uid_t uid, const char *name)
{
	if (j->cg && name && *name)
		cgroup_remove(j->cg, name);
	mark_id(j, uid, 0);
}

/* The path as QEMU will see it: absolute, from the daemon's cwd. */
static int add_bind(struct jail_plan *p, const char *cwd, const char *path, int ro)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return -errno;
	char dst[512];
	if (path[0] == '/')
		snprintf(dst, sizeof(dst), "%s", path);
	else
		snprintf(dst, sizeof(dst), "%s/%s", cwd, path);
	/* Inside a directory already bound: seen through it already, and a
	 * mount point made there would be made on the host. */
	for (int i = 0; i < p->nbinds; i++) {
		size_t n = strlen(p->b[i].dst);
		if (p->b[i].dir && !strncmp(p->b[i].dst, dst, n) && (dst[n] == '/' || !dst[n]))
			return 0;
	}
	if (p->nbinds == MAX_BINDS || strlen(path) >= sizeof(p->b[0].src))
		return -E2BIG;
	struct bind *b = &p->b[p->nbinds++];
	snprintf(b->src, sizeof(b->src), "%s", path);
	snprintf(b->dst, sizeof(b->dst), "%s", dst);
	b->dir = S_ISDIR(st.st_mode);
	b->ro = ro;
	return 0;
}

/* What every QEMU needs to run at all: the binaries and libraries under
 * /usr (Debian's top-level bin, lib, ... are symlinks into it), the loader's
 * cache, and the device nodes it opens. */
static int add_system(struct jail_plan *p, const struct jail_spec *s)
{
	static const char *const top[] = { "bin", "sbin", "lib", "lib32", "lib64", "libx32" };
	int r = add_bind(p, "/", "/usr", 1);
	for (size_t i = 0; r == 0 && i < sizeof(top) / sizeof(top[0]); i++) {
		char path[32], target[64];
		snprintf(path, sizeof(path), "/%s", top[i]);
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		if (n > 0 && p->nlinks < 8) {
			target[n] = '\0';
			snprintf(p->links[p->nlinks].name, sizeof(p->links[0].name), "%s", top[i]);
			snprintf(p->links[p->nlinks].target, sizeof(p->links[0].target), "%s", target);
			p->nlinks++;
		} else if (n < 0 && access(path, F_OK) == 0) {
			r = add_bind(p, "/", path, 1);
		}
	}
	if (r == 0 && access("/etc/ld.so.cache", F_OK) == 0)
		r = add_bind(p, "/", "/etc/ld.so.cache", 1);
	/* Nodes of its own rather than the host's (whose modes vary: tun
	 * and kvm are 0600 on some hosts): in a mount namespace of one uid
	 * they serve that uid alone. */
	const char *devs[] = { "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random",
			       s->kvm ? "/dev/kvm" : NULL, s->tap ? "/dev/net/tun" : NULL };
	for (size_t i = 0; r == 0 && i < sizeof(devs) / sizeof(devs[0]); i++) {
		struct stat st;
		if (!devs[i])
			continue;
		if (stat(devs[i], &st) < 0 || !S_ISCHR(st.st_mode))
			return -ENODEV;
		snprintf(p->devs[p->ndevs].path, sizeof(p->devs[0].path), "%s", devs[i]);
		p->devs[p->ndevs++].rdev = st.st_rdev;
	}
	return r;
}

/* The run directory and the files in it become the uid's: QEMU makes its
 * sockets there and writes its layer and RAM file. */
static int own_run_dir(const char *dir, uid_t uid, gid_t gid)
{
	if (chown(dir, uid, gid) < 0 || chmod(dir, 0700) < 0)
		return -errno;
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	int r = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
		    fchownat(dirfd(d), e->d_name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
			r = -errno;
	}
	closedir(d);
	return r;
}

/* A file several jails open: the shared group's, for reading (ro) or for
 * reading and writing. A file others may read already is left as it is. */
static int share_file(const char *path, gid_t shared, int write)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || (!write && (st.st_mode & S_IROTH)))
		return 0;
	mode_t mode = (st.st_mode & 07777) | S_IRGRP | (write ? S_IWGRP : 0);
	if (chown(path, (uid_t)-1, shared) < 0 || chmod(path, mode) < 0)
		return -errno;
	return 0;
}

int jail_prepare(struct jail *j, const struct jail_spec *s, struct jail_plan **out, char *err,
		 size_t errlen)
{
	struct jail_plan *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	int r = take_id(j, &p->uid);
	if (r < 0) {
		snprintf(err, errlen, "no jail id left: all %u are in use", j->count - 1);
		free(p);
		return r;
	}
	p->gid = p->uid;
	p->groups[p->ngroups++] = j->first;
	snprintf(p->root, sizeof(p->root), "%s", j->root);
	if (!getcwd(p->cwd, sizeof(p->cwd)))
		snprintf(p->cwd, sizeof(p->cwd), "/");
	snprintf(p->tap, sizeof(p->tap), "%s", s->tap ? s->tap : "");
	const char *what = "the run directory";
	if ((r = add_bind(p, p->cwd, s->run_dir, 0)) < 0 || (r = add_system(p, s)) < 0)
		goto fail;
	for (int i = 0; i < JAIL_MAX_PATHS; i++) {
		for (int w = 0; w < 2; w++) {
			const char *path = w ? s->rw[i] : s->ro[i];
			if (!path)
				continue;
			what = path;
			if ((r = add_bind(p, p->cwd, path, !w)) < 0 ||
			    (r = share_file(path, j->first, w)) < 0)
				goto fail;
		}
	}
	what = s->run_dir;
	if ((r = own_run_dir(s->run_dir, p->uid, p->gid)) < 0)
		goto fail;
	if (j->cg) {
		/* RAM, plus QEMU itself: under TCG its translation cache
		 * (tb-size 128 MiB) and code, under KVM less; measured in
		 * bench/bench_jail.py. The RAM file's pages count: they are
		 * the cgroup's page cache. */
		struct cgroup_limits l = {
			.memory_bytes = ((unsigned long long)s->memory_mb + (s->kvm ? 128 : 256)) << 20,
			/* QEMU's threads: the vCPUs, the main loop, RCU and a
			 * block thread pool of up to 64; one it cannot create
			 * aborts it, so the margin is wide. */
			.pids = 256 + s->vcpus,
			/* A CPU per vCPU, and one for the main loop and I/O
			 * that emulate its devices. */
			.cpus = s->vcpus + 1,
			.io_weight = 100,
		};
		if ((r = cgroup_create(j->cg, s->name, &l, &p->join, err, errlen)) < 0) {
			mark_id(j, p->uid, 0);
			free(p);
			return r;
		}
	}
	*out = p;
	return 0;
fail:
	snprintf(err, errlen, "cannot jail QEMU: '%s': %s", what, strerror(-r));
	mark_id(j, p->uid, 0);
	free(p);
	return r;
}

uid_t jail_plan_uid(const struct jail_plan *p)
{
	return p->uid;
}

void jail_plan_free(struct jail_plan *p)
{
	free(p);
}

/* ---- the child's side: system calls only ---- */

static int say(const char *step, int e)
{
	/* The errno's name: strerror may translate, and so lock. */
	const char *m = strerrorname_np(e);
	if (!m)
		m = "unknown error";
	if (write(2, "cpuos jail: ", 12) < 0 || write(2, step, strlen(step)) < 0 ||
	    write(2, ": ", 2) < 0 || write(2, m, strlen(m)) < 0 || write(2, "\n", 1) < 0)
		return -e;
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
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

static int build_root(const struct jail_plan *p)
{
	char path[800];
	/* Nothing done here may reach the host's mounts. */
	if (unshare(CLONE_NEWNS) < 0)
		return say("unshare(CLONE_NEWNS)", errno);
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
		if (mount(b->src, path, NULL, MS_BIND | MS_REC, NULL) < 0)
			return say(b->src, errno);
		/* A bind takes its flags from a remount of its own. */
		unsigned long fl = MS_BIND | MS_REMOUNT | MS_NOSUID | (b->ro ? MS_RDONLY : 0);
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
	 * nothing this process execs can gain a capability back. */
	for (int c = 0; c <= 63; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno == EINVAL)
			break;
	if (setgroups((size_t)p->ngroups, p->groups) < 0 || setresgid(p->gid, p->gid, p->gid) < 0 ||
	    setresuid(p->uid, p->uid, p->uid) < 0)
		return say("dropping to the jail's uid", errno);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return say("no_new_privs", errno);
	return 0;
}

int jail_enter(const void *arg)
{
	const struct jail_plan *p = arg;
	int r;
	for (int i = 0; i < p->join.n; i++)
		if ((r = write_str(p->join.procs[i], "0")) < 0)
			return say(p->join.procs[i], -r);
	/* When memory runs out on the host, a VM goes before the daemon. */
	write_str("/proc/self/oom_score_adj", "500");
	if (p->tap[0] && (r = give_tap(p)) < 0)
		return r;
	if ((r = build_root(p)) < 0)
		return r;
	return drop(p);
}
