/*
 * jail: the id range and the plans. Everything a plan needs is written
 * into it here, in the parent (the privileged helper, priv_server.c), so
 * that jail_enter (jail_child.c, in the child) makes no call that could
 * take a lock held at the fork: no malloc, no stdio.
 */
#include "jail/jail.h"

#include "common/fs.h"
#include "jail/cgroup.h"
#include "jail/jail_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct jail {
	unsigned first, count;
	char root[256], lock_dir[256];
	struct cgroups *cg;
	pthread_mutex_t mu;
	int *lock; /* per id after first: its lock file, ID_HELD, or ID_FREE */
};

#define ID_FREE (-1)
#define ID_HELD (-2) /* taken by a QEMU found running, whose lock another holds */

int jail_new(const struct jail_config *c, struct jail **out, char *err, size_t errlen)
{
	if (c->count < 2 || c->first_id == 0 || c->first_id > UINT_MAX - c->count) {
		snprintf(err, errlen, "the jail id range must be above 0 and hold 2 ids or more");
		return -EINVAL;
	}
	const char *dirs[] = { c->root_dir, c->lock_dir };
	for (int i = 0; i < 2; i++) {
		int r = fs_mkdir_p(dirs[i], 0755, (uid_t)-1, (gid_t)-1);
		if (r < 0) {
			snprintf(err, errlen, "cannot create '%s': %s", dirs[i], strerror(-r));
			return r;
		}
	}
	struct jail *j = calloc(1, sizeof(*j));
	if (!j || !(j->lock = malloc(sizeof(int) * c->count))) {
		free(j);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < c->count; i++)
		j->lock[i] = ID_FREE;
	j->first = c->first_id;
	j->count = c->count;
	j->cg = c->cg;
	snprintf(j->root, sizeof(j->root), "%s", c->root_dir);
	snprintf(j->lock_dir, sizeof(j->lock_dir), "%s", c->lock_dir);
	pthread_mutex_init(&j->mu, NULL);
	*out = j;
	return 0;
}

void jail_free(struct jail *j)
{
	if (!j)
		return;
	pthread_mutex_destroy(&j->mu);
	for (unsigned i = 0; i < j->count; i++)
		if (j->lock[i] >= 0)
			close(j->lock[i]);
	free(j->lock);
	free(j);
}

void jail_describe(const struct jail *j, char *out, size_t len)
{
	snprintf(out, len, "ids %u-%u, cgroups %s", j->first + 1, j->first + j->count - 1,
		 j->cg ? cgroup_describe(j->cg) : "off");
}

/* An id is taken host-wide: its lock file under lock_dir, held while its
 * QEMU runs (two daemons on one host share the range), and no process
 * running as it (a QEMU whose daemon died holds no lock). -1 if taken. */
static int lock_id(struct jail *j, uid_t uid)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/%u", j->lock_dir, (unsigned)uid);
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

int jail_proc_uid(pid_t pid, uid_t *uid)
{
	char path[64], line[128];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	int r = -ENOENT;
	while (r < 0 && fgets(line, sizeof(line), f)) {
		unsigned u;
		if (sscanf(line, "Uid: %u", &u) == 1) {
			*uid = u;
			r = 0;
		}
	}
	fclose(f);
	return r;
}

static int uid_running(uid_t uid)
{
	DIR *d = opendir("/proc");
	if (!d)
		return 1; /* cannot tell: taken */
	int found = 0;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		uid_t u;
		if (e->d_name[0] >= '1' && e->d_name[0] <= '9' &&
		    jail_proc_uid((pid_t)atoi(e->d_name), &u) == 0)
			found = u == uid;
	}
	closedir(d);
	return found;
}

static int take_id(struct jail *j, uid_t *uid)
{
	int r = -EAGAIN, failed = 0;
	pthread_mutex_lock(&j->mu);
	for (unsigned i = 1; i < j->count && r < 0; i++) {
		if (j->lock[i] != ID_FREE)
			continue;
		int fd = lock_id(j, j->first + i);
		if (fd == -EWOULDBLOCK)
			continue; /* another daemon's */
		if (fd < 0) {
			failed = fd; /* the lock directory: the same for every id */
			break;
		}
		if (uid_running(j->first + i)) {
			close(fd);
			continue;
		}
		j->lock[i] = fd;
		*uid = j->first + i;
		r = 0;
	}
	pthread_mutex_unlock(&j->mu);
	return failed ? failed : r;
}

static int in_range(const struct jail *j, uid_t uid)
{
	return uid > j->first && uid - j->first < j->count;
}

int jail_owns(const struct jail *j, uid_t uid)
{
	return in_range(j, uid);
}

static void free_id(struct jail *j, uid_t uid)
{
	if (!in_range(j, uid))
		return;
	pthread_mutex_lock(&j->mu);
	int *l = &j->lock[uid - j->first];
	if (*l >= 0)
		close(*l);
	*l = ID_FREE;
	pthread_mutex_unlock(&j->mu);
}

int jail_hold(struct jail *j, uid_t uid)
{
	if (!in_range(j, uid))
		return -ERANGE;
	pthread_mutex_lock(&j->mu);
	int *l = &j->lock[uid - j->first];
	if (*l == ID_FREE && (*l = lock_id(j, uid)) < 0)
		*l = ID_HELD;
	pthread_mutex_unlock(&j->mu);
	return 0;
}

void jail_release(struct jail *j, uid_t uid, const char *name)
{
	if (j->cg && name && *name)
		cgroup_remove(j->cg, name);
	free_id(j, uid);
}

/* path, opened with no symbolic link anywhere on the way: the paths a
 * plan changes the owner or mode of are the daemon's to name, and a
 * daemon without root must not get a host file chmod-ed through a link
 * it planted. A descriptor or -errno. */
static int open_no_links(int dirfd, const char *path, int flags)
{
	struct open_how how = { .flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
				.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	return fd >= 0 ? fd : -errno;
}

/* path, opened for a bind (O_PATH), so what is bound is what was checked
 * whatever is renamed meanwhile. A path of the host's (trusted: /usr, the
 * configured QEMU) as it is. One the daemon named: with no link on the
 * way, since the daemon (without root) writes its directories and could
 * plant one toward anything; or, read-only, through links to a regular
 * file of root's that all may read (a template's image is a link into the
 * cache of builds, a staged guest's too). A read-only one is a directory
 * or a file others may read: the jail changes no host file's mode. A
 * descriptor or -errno. */
static int open_bind(const char *path, int how, int trusted, struct stat *st)
{
	/* Not open_no_links: with O_PATH, its O_NOFOLLOW would open a
	 * link at the end of the path rather than refuse it. */
	struct open_how oh = { .flags = O_PATH | O_CLOEXEC,
			       .resolve = trusted ? 0 : RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &oh, sizeof(oh));
	if (fd == -1)
		fd = -errno;
	if (fd == -ELOOP && how != RW) {
		oh.resolve = RESOLVE_NO_MAGICLINKS;
		fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &oh, sizeof(oh));
		if (fd < 0)
			return -errno;
		if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode) || st->st_uid != 0 ||
		    !(st->st_mode & S_IROTH)) {
			close(fd);
			return -ELOOP;
		}
	}
	if (fd < 0)
		return fd;
	int r = fstat(fd, st) < 0 ? -errno : 0;
	if (r == 0 && how == RO && !trusted && !S_ISDIR(st->st_mode) && !(st->st_mode & S_IROTH))
		r = -EACCES;
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

/* The path as QEMU will see it: absolute, from the daemon's cwd; how as
 * RW, RO, RO_EXEC or RO_SHARED; trusted as open_bind. */
static int add_bind(struct jail_plan *p, const char *cwd, const char *path, int how, int trusted)
{
	char dst[512];
	if (snprintf(dst, sizeof(dst), "%s%s%s", path[0] == '/' ? "" : cwd,
		     path[0] == '/' ? "" : "/", path) >= (int)sizeof(dst))
		return -ENAMETOOLONG;
	/* A ".." could climb out of the jail's root while it is made. */
	if (strstr(dst, "/../") || (strlen(dst) >= 3 && !strcmp(dst + strlen(dst) - 3, "/..")))
		return -EINVAL;
	struct stat st;
	int fd = open_bind(path, how, trusted, &st);
	if (fd < 0)
		return fd;
	/* Inside a directory already bound, or under a top-level link into
	 * /usr: seen through it already, and a mount point made there would
	 * be made on the host. Except a snapshot's RAM inside the run
	 * directory (the base linked there at restore): bound read-only over
	 * itself, a file that is there, so nothing is made. */
	int seen = 0;
	for (int i = 0; i < p->nbinds && !seen && how != RO_SHARED; i++) {
		size_t n = strlen(p->b[i].dst);
		seen = p->b[i].dir && !strncmp(p->b[i].dst, dst, n) && (dst[n] == '/' || !dst[n]);
	}
	for (int i = 0; i < p->nlinks && !seen; i++) {
		size_t n = strlen(p->links[i].name);
		seen = !strncmp(dst + 1, p->links[i].name, n) && dst[n + 1] == '/';
	}
	if (seen || p->nbinds == MAX_BINDS || strlen(path) >= sizeof(p->b[0].src)) {
		close(fd);
		return seen ? 0 : -E2BIG;
	}
	struct bind *b = &p->b[p->nbinds++];
	snprintf(b->src, sizeof(b->src), "%s", path);
	snprintf(b->dst, sizeof(b->dst), "%s", dst);
	b->fd = fd;
	b->dir = S_ISDIR(st.st_mode);
	b->ro = how != RW;
	b->exec = how == RO_EXEC;
	return 0;
}

/* What every QEMU needs to run at all: the binaries and libraries under
 * /usr (Debian's top-level bin, lib, ... are symlinks into it), the loader's
 * cache, and the device nodes it opens. */
static int add_system(struct jail_plan *p, const struct jail_spec *s)
{
	static const char *const top[] = { "bin", "sbin", "lib", "lib32", "lib64", "libx32" };
	int r = add_bind(p, "/", "/usr", RO_EXEC, 1);
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
			r = add_bind(p, "/", path, RO_EXEC, 1);
		}
	}
	if (r == 0 && access("/etc/ld.so.cache", F_OK) == 0)
		r = add_bind(p, "/", "/etc/ld.so.cache", RO, 1);
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

/* A regular file (through fd) becomes the shared group's to read and
 * write as well (writable), or to read alone and no one's to write:
 * one of the daemon's (the shared id's) or a QEMU's, never a file of
 * anyone else's linked in (a hard link is not a symlink). */
static int share_fd(const struct jail *j, int fd, int writable)
{
	gid_t shared = j->first;
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if (st.st_uid != shared && !in_range(j, st.st_uid))
		return -EPERM;
	/* A file of two names may be a snapshot's RAM under another name
	 * (a base in a run directory renamed): never made writable. */
	if (writable && st.st_nlink != 1)
		return -EMLINK;
	if (fchown(fd, (uid_t)-1, shared) < 0 ||
	    fchmod(fd, writable ? (st.st_mode & 0770) | 0660 : 0440) < 0)
		return -errno;
	return 0;
}

/* The run directory and the files in it become the shared group's, set
 * so what QEMU makes there is too: QEMU makes its sockets there and
 * writes its layer and RAM file, the daemon (whose group it is, when it
 * runs without root) reads them and connects. */
static int share_run_dir(const struct jail *j, const char *dir)
{
	gid_t shared = j->first;
	int dfd = open_no_links(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY);
	if (dfd < 0)
		return dfd;
	if (fchown(dfd, (uid_t)-1, shared) < 0 || fchmod(dfd, 02770) < 0) {
		close(dfd);
		return -errno;
	}
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -errno;
	}
	int r = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		/* The base (a snapshot's RAM, linked) stays read-only. */
		if (e->d_name[0] == '.' || e->d_type == DT_DIR || e->d_type == DT_LNK ||
		    !strcmp(e->d_name, JAIL_RAM_BASE))
			continue;
		int fd = open_no_links(dirfd(d), e->d_name, O_RDONLY | O_NONBLOCK);
		if (fd >= 0) {
			int s2 = share_fd(j, fd, 1);
			if (s2 < 0 && s2 != -EINVAL) /* not a regular file: left */
				r = s2;
			close(fd);
		}
	}
	closedir(d);
	return r;
}

/* A file a jail reads must be readable by others already: the jail does
 * not change the modes of the host's files. */
static int readable(const char *path)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) || (st.st_mode & S_IROTH) ? 0 : -EACCES;
}

/* A snapshot's RAM file, which QEMU before 8.2 opens for writing even to
 * map it copy-on-write: the shared group's, which every jail has (see
 * docs/architecture.md, "A snapshot's RAM is read-only to the QEMUs that
 * map it"). */
static int share_rw(const struct jail *j, const char *path)
{
	int fd = open_no_links(AT_FDCWD, path, O_RDONLY | O_NONBLOCK);
	if (fd < 0)
		return fd;
	int r = share_fd(j, fd, 1);
	close(fd);
	return r;
}

/* A snapshot's RAM file that QEMU opens read-only (rom=off): the shared
 * group's to read and no one's to write, whatever a QEMU before 8.2 made
 * of it. */
static int share_ro(const struct jail *j, const char *path)
{
	int fd = open_no_links(AT_FDCWD, path, O_RDONLY | O_NONBLOCK);
	if (fd < 0)
		return fd;
	int r = share_fd(j, fd, 0);
	close(fd);
	return r;
}

int jail_prepare(struct jail *j, const struct jail_spec *s, struct jail_plan **out, char *err,
		 size_t errlen)
{
	struct jail_plan *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	int r = take_id(j, &p->uid);
	if (r < 0) {
		if (r == -EAGAIN)
			snprintf(err, errlen, "no jail id left: all %u are in use", j->count - 1);
		else
			snprintf(err, errlen, "cannot take a jail id in '%s': %s", j->lock_dir,
				 strerror(-r));
		free(p);
		return r;
	}
	p->gid = p->uid;
	p->groups[p->ngroups++] = j->first;
	snprintf(p->root, sizeof(p->root), "%s", j->root);
	if (!getcwd(p->cwd, sizeof(p->cwd)))
		snprintf(p->cwd, sizeof(p->cwd), "/");
	snprintf(p->tap, sizeof(p->tap), "%s", s->tap ? s->tap : "");
	p->own_netns = s->own_netns;
	const char *what = s->run_dir;
	if ((r = add_bind(p, p->cwd, s->run_dir, RW, 0)) < 0)
		goto fail;
	what = "what every QEMU needs";
	if ((r = add_system(p, s)) < 0)
		goto fail;
	/* A kept build: the helper checked that it is root's throughout. */
	if (s->prefix)
		r = add_bind(p, p->cwd, what = s->prefix, RO_EXEC, 1);
	if (r == 0 && s->binary && (r = readable(what = s->binary)) == 0)
		r = add_bind(p, p->cwd, s->binary, RO_EXEC, 1);
	if (r == 0 && s->ram_ro && (r = share_ro(j, what = s->ram_ro)) == 0)
		r = add_bind(p, p->cwd, s->ram_ro, RO_SHARED, 0);
	for (int i = 0; r == 0 && i < JAIL_MAX_PATHS; i++) {
		if (s->ro[i])
			r = add_bind(p, p->cwd, what = s->ro[i], RO, 0);
		if (r == 0 && s->rw[i] && (r = share_rw(j, what = s->rw[i])) == 0)
			r = add_bind(p, p->cwd, s->rw[i], RW, 0);
	}
	if (r < 0)
		goto fail;
	what = s->run_dir;
	if ((r = share_run_dir(j, s->run_dir)) < 0)
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
			free_id(j, p->uid);
			jail_plan_free(p);
			return r;
		}
	}
	*out = p;
	return 0;
fail:
	snprintf(err, errlen, "cannot jail QEMU: '%s': %s%s", what, strerror(-r),
		 r == -ELOOP ? " (a link where the daemon's path must have none)" : "");
	free_id(j, p->uid);
	jail_plan_free(p);
	return r;
}

uid_t jail_plan_uid(const struct jail_plan *p)
{
	return p->uid;
}

void jail_plan_free(struct jail_plan *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->nbinds; i++)
		close(p->b[i].fd);
	free(p);
}
