/*
 * cgroup: layout detection, the "cpuos" groups and the leaves of the VMs,
 * through the cgroup filesystem's files only (no library does more than
 * write them).
 */
#include "jail/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* v1 names the I/O controller blkio. */
static const char *const v1_name[CG_NCTL] = { "memory", "pids", "cpu", "blkio" };
static const char *const v2_name[CG_NCTL] = { "memory", "pids", "cpu", "io" };

struct cgroups {
	enum cgroup_layout layout;
	char dir[CG_NCTL][512]; /* each controller's "cpuos" group; "" if absent */
	char desc[96];
};

static int write_file(const char *dir, const char *file, const char *value)
{
	char path[800];
	if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC); /* as a shell's > does */
	if (fd < 0)
		return -errno;
	size_t n = strlen(value);
	int r = write(fd, value, n) == (ssize_t)n ? 0 : -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	return r;
}

static int has_file(const char *dir, const char *file)
{
	char path[800];
	if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path))
		return 0;
	return access(path, F_OK) == 0;
}

static int mkdir_ok(const char *dir)
{
	return mkdir(dir, 0755) == 0 || errno == EEXIST ? 0 : -errno;
}

/* The controllers' lines of a /proc/PID/cgroup: "4:memory:/a/b" (v1, the
 * middle a comma-separated list) or "0::/a/b" (v2). Fills own[] with each
 * wanted controller's path (v1) or the unified path in own[0] (v2). */
static int read_self(const char *self, int v2, char own[CG_NCTL][256], char mount[CG_NCTL][64])
{
	FILE *f = fopen(self, "re");
	if (!f)
		return -errno;
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2 || strlen(c2 + 1) >= 200)
			continue;
		*c2 = '\0';
		const char *ctls = c1 + 1, *path = c2 + 1;
		if (v2) {
			if (!*ctls)
				snprintf(own[0], 256, "%s", path);
			continue;
		}
		for (int i = 0; i < CG_NCTL; i++) {
			char list[128];
			snprintf(list, sizeof(list), ",%s,", ctls);
			char want[32];
			snprintf(want, sizeof(want), ",%s,", v1_name[i]);
			if (strstr(list, want)) {
				snprintf(own[i], 256, "%s", path);
				snprintf(mount[i], 64, "%s", ctls);
			}
		}
	}
	fclose(f);
	return 0;
}

/* A group with a process of its own: its cgroup.procs is not empty. */
static int has_procs(const char *dir)
{
	char path[800], c;
	if (snprintf(path, sizeof(path), "%s/cgroup.procs", dir) >= (int)sizeof(path))
		return 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	int r = read(fd, &c, 1) == 1;
	close(fd);
	return r;
}

/* Moves every process listed in from's cgroup.procs, and this one, into
 * to: 0 or -errno (one that ended meanwhile is no failure). */
static int move_procs(const char *from, const char *to)
{
	char path[800], list[4096], pid[24];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	if (snprintf(path, sizeof(path), "%s/cgroup.procs", from) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, O_RDONLY | O_CLOEXEC), r = 0;
	ssize_t n = fd >= 0 ? read(fd, list, sizeof(list) - 1) : -1;
	if (fd >= 0)
		close(fd);
	list[n > 0 ? n : 0] = '\0';
	char *save = NULL;
	for (char *p = strtok_r(list, "\n", &save); p; p = strtok_r(NULL, "\n", &save))
		if (strspn(p, "0123456789") == strlen(p) && strcmp(p, pid) &&
		    (r = write_file(to, "cgroup.procs", p)) < 0 && r != -ESRCH)
			return r;
	return write_file(to, "cgroup.procs", pid);
}

/* Clears have[i] for each controller dir is not offered (its
 * cgroup.controllers); when that cannot be read, the writes decide. */
static void v2_offered(const char *dir, int *have)
{
	char path[800], list[260] = " ";
	if (snprintf(path, sizeof(path), "%s/cgroup.controllers", dir) >= (int)sizeof(path))
		return;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, list + 1, sizeof(list) - 3);
	close(fd);
	if (n < 0)
		return;
	list[n + 1] = '\0';
	list[strcspn(list, "\n")] = '\0';
	strcat(list, " ");
	for (int i = 0; i < CG_NCTL; i++) {
		char want[16];
		snprintf(want, sizeof(want), " %s ", v2_name[i]);
		if (!strstr(list, want))
			have[i] = 0;
	}
}

/* v2 hands a controller down only through subtree_control, and only from
 * a group with no processes of its own: a daemon in a delegated group
 * (systemd's Delegate=yes) moves itself into a leaf of it first. That is
 * asked before any write (the root, without cgroup.type, is exempt): to
 * a group with processes the kernel refuses memory and io (EBUSY) but
 * takes pids and cpu, which makes it a thread root, and under a thread
 * root no process may join a domain group (EOPNOTSUPP): not even the
 * daemon a leaf of its own. */
static int v2_enable(const char *dir, int *have)
{
	v2_offered(dir, have);
	int any = 0;
	for (int i = 0; i < CG_NCTL; i++)
		any |= have[i];
	if (any && has_file(dir, "cgroup.type") && has_procs(dir))
		return -EBUSY;
	int busy = 0;
	for (int i = 0; i < CG_NCTL; i++) {
		if (!have[i])
			continue;
		char op[16];
		snprintf(op, sizeof(op), "+%s", v2_name[i]);
		int r = write_file(dir, "cgroup.subtree_control", op);
		if (r == -EBUSY)
			busy = 1;
		else if (r < 0)
			have[i] = 0;
	}
	return busy ? -EBUSY : 0;
}

static int open_v2(struct cgroups *cg, const char *root, const char *self, char *err,
		   size_t errlen)
{
	char own[CG_NCTL][256] = { "" }, mount[CG_NCTL][64];
	int r = read_self(self, 1, own, mount);
	if (r < 0 || own[0][0] != '/') {
		snprintf(err, errlen, "cannot find this process's cgroup in '%s'", self);
		return r < 0 ? r : -ENOENT;
	}
	char base[480], top[512];
	if (snprintf(base, sizeof(base), "%s%s", root, strcmp(own[0], "/") ? own[0] : "") >=
	    (int)sizeof(base)) {
		snprintf(err, errlen, "cgroup path too long: '%s%s'", root, own[0]);
		return -ENAMETOOLONG;
	}
	int have[CG_NCTL] = { 1, 1, 1, 1 };
	if (v2_enable(base, have) == -EBUSY) {
		char leaf[512];
		snprintf(leaf, sizeof(leaf), "%s/cpuosd", base);
		/* Every process of the group, not only this one: under systemd
		 * the unit's group holds cpuosd too, and a group with processes
		 * of its own hands no controller down. */
		if ((r = mkdir_ok(leaf)) < 0 || (r = move_procs(base, leaf)) < 0 ||
		    (r = v2_enable(base, have)) < 0) {
			snprintf(err, errlen, "cannot hand cgroup controllers down from '%s': %s", base,
				 strerror(-r));
			return r;
		}
	}
	snprintf(top, sizeof(top), "%s/cpuos", base);
	if ((r = mkdir_ok(top)) < 0) {
		snprintf(err, errlen, "cannot create cgroup '%s': %s", top, strerror(-r));
		return r;
	}
	int down[CG_NCTL] = { 1, 1, 1, 1 }; /* handed down to the leaves too */
	v2_enable(top, down);
	for (int i = 0; i < CG_NCTL; i++)
		if (have[i] && down[i])
			snprintf(cg->dir[i], sizeof(cg->dir[i]), "%s", top);
	return 0;
}

static int open_v1(struct cgroups *cg, const char *root, const char *self, char *err,
		   size_t errlen)
{
	char own[CG_NCTL][256] = { "" }, mount[CG_NCTL][64] = { "" };
	int r = read_self(self, 0, own, mount);
	if (r < 0) {
		snprintf(err, errlen, "cannot read '%s': %s", self, strerror(-r));
		return r;
	}
	for (int i = 0; i < CG_NCTL; i++) {
		if (own[i][0] != '/')
			continue;
		/* Mounted under its own name, or under the list ("cpu,cpuacct")
		 * with the name a symlink to it. */
		char mnt[200], top[512];
		snprintf(mnt, sizeof(mnt), "%.100s/%.60s", root, v1_name[i]);
		if (access(mnt, F_OK) < 0)
			snprintf(mnt, sizeof(mnt), "%.100s/%.60s", root, mount[i]);
		if (access(mnt, F_OK) < 0)
			continue;
		if (snprintf(top, sizeof(top), "%s%s/cpuos", mnt, strcmp(own[i], "/") ? own[i] : "") >=
		    (int)sizeof(top)) {
			snprintf(err, errlen, "cgroup path too long: '%s%s'", mnt, own[i]);
			return -ENAMETOOLONG;
		}
		if ((r = mkdir_ok(top)) < 0) {
			snprintf(err, errlen, "cannot create cgroup '%s': %s", top, strerror(-r));
			return r;
		}
		snprintf(cg->dir[i], sizeof(cg->dir[i]), "%s", top);
	}
	return 0;
}

/* Each hierarchy once: v2 has one directory for all controllers. */
static int first_of_dir(const struct cgroups *cg, int ctl)
{
	for (int j = 0; j < ctl; j++)
		if (!strcmp(cg->dir[j], cg->dir[ctl]))
			return 0;
	return cg->dir[ctl][0] != '\0';
}

/* Leaves of VMs that ended while no daemon watched (a crash, a kill at a
 * restart) are empty: removed. A leaf in use refuses (EBUSY); one younger
 * than a minute may be another daemon's VM just starting, and stays. */
static void sweep(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	time_t now = time(NULL);
	struct dirent *e;
	while ((e = readdir(d))) {
		struct stat st;
		if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &st, 0) < 0 ||
		    !S_ISDIR(st.st_mode) || now - st.st_mtime < 60)
			continue;
		unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
	}
	closedir(d);
}

int cgroup_open(const char *root, const char *self, struct cgroups **out, char *err,
		size_t errlen)
{
	struct cgroups *cg = calloc(1, sizeof(*cg));
	if (!cg)
		return -ENOMEM;
	/* A v2 mount at the root has cgroup.controllers; a hybrid host
	 * (v1 controllers, an empty unified tree beside them) is v1. */
	cg->layout = has_file(root, "cgroup.controllers") ? CGROUP_V2 : CGROUP_V1;
	int r = cg->layout == CGROUP_V2 ? open_v2(cg, root, self, err, errlen)
					: open_v1(cg, root, self, err, errlen);
	size_t len = (size_t)snprintf(cg->desc, sizeof(cg->desc), "v%d:", (int)cg->layout);
	int n = 0;
	for (int i = 0; i < CG_NCTL && len < sizeof(cg->desc); i++) {
		if (!cg->dir[i][0])
			continue;
		n++;
		len += (size_t)snprintf(cg->desc + len, sizeof(cg->desc) - len, " %s",
					cg->layout == CGROUP_V2 ? v2_name[i] : v1_name[i]);
	}
	if (r == 0 && n == 0) {
		snprintf(err, errlen, "no cgroup controller found under '%s'", root);
		r = -ENOENT;
	}
	if (r < 0) {
		free(cg);
		return r;
	}
	for (int i = 0; i < CG_NCTL; i++)
		if (first_of_dir(cg, i))
			sweep(cg->dir[i]);
	*out = cg;
	return 0;
}

void cgroup_close(struct cgroups *cg)
{
	free(cg);
}

enum cgroup_layout cgroup_layout(const struct cgroups *cg)
{
	return cg->layout;
}

const char *cgroup_describe(const struct cgroups *cg)
{
	return cg->desc;
}

static int leaf_path(const struct cgroups *cg, int ctl, const char *name, char *out, size_t len)
{
	if (!cg->dir[ctl][0])
		return -ENOENT;
	return snprintf(out, len, "%s/%s", cg->dir[ctl], name) >= (int)len ? -ENAMETOOLONG : 0;
}


static int set_limits(const struct cgroups *cg, const char *name, const struct cgroup_limits *l)
{
	char d[640], v[64];
	int v2 = cg->layout == CGROUP_V2, r = 0;
	if (leaf_path(cg, CG_MEMORY, name, d, sizeof(d)) == 0) {
		if (l->memory_bytes)
			snprintf(v, sizeof(v), "%llu", l->memory_bytes);
		else
			snprintf(v, sizeof(v), v2 ? "max" : "-1");
		if (v2) {
			r = write_file(d, "memory.max", v);
			/* v1's memsw bounds RAM and swap together; v2 counts
			 * swap apart: none, so the limit is the bound. */
			if (r == 0 && has_file(d, "memory.swap.max"))
				r = write_file(d, "memory.swap.max", l->memory_bytes ? "0" : "max");
		} else {
			/* memsw (RAM plus swap) may never be below the RAM
			 * limit: opened first, closed to the same value last. */
			int sw = has_file(d, "memory.memsw.limit_in_bytes");
			if (sw)
				write_file(d, "memory.memsw.limit_in_bytes", "-1");
			r = write_file(d, "memory.limit_in_bytes", v);
			if (r == 0 && sw)
				r = write_file(d, "memory.memsw.limit_in_bytes", v);
		}
		if (r < 0)
			return r;
	}
	if (leaf_path(cg, CG_PIDS, name, d, sizeof(d)) == 0) {
		if (l->pids)
			snprintf(v, sizeof(v), "%u", l->pids);
		else
			snprintf(v, sizeof(v), "max");
		if ((r = write_file(d, "pids.max", v)) < 0)
			return r;
	}
	if (leaf_path(cg, CG_CPU, name, d, sizeof(d)) == 0) {
		/* A 100 ms period: the CFS default, short enough that a
		 * throttled VM does not stall for long. */
		long long quota = l->cpus ? (long long)l->cpus * 100000 : -1;
		if (v2) {
			if (quota > 0)
				snprintf(v, sizeof(v), "%lld 100000", quota);
			else
				snprintf(v, sizeof(v), "max 100000");
			r = write_file(d, "cpu.max", v);
		} else {
			snprintf(v, sizeof(v), "%lld", quota);
			r = write_file(d, "cpu.cfs_period_us", "100000");
			if (r == 0)
				r = write_file(d, "cpu.cfs_quota_us", v);
		}
		if (r < 0)
			return r;
	}
	/* An I/O weight only where the I/O scheduler takes one (v1 blkio
	 * needs CFQ or BFQ): its absence is no error. */
	if (l->io_weight && leaf_path(cg, CG_IO, name, d, sizeof(d)) == 0) {
		if (v2) {
			snprintf(v, sizeof(v), "default %u", l->io_weight);
			if (has_file(d, "io.weight"))
				r = write_file(d, "io.weight", v);
		} else {
			/* v2 counts 1..10000 around 100, v1 10..1000 around
			 * 500 (systemd maps them so too) */
			unsigned long long w = (unsigned long long)l->io_weight * 5;
			snprintf(v, sizeof(v), "%llu", w < 10 ? 10 : w > 1000 ? 1000 : w);
			if (has_file(d, "blkio.weight"))
				r = write_file(d, "blkio.weight", v);
			else if (has_file(d, "blkio.bfq.weight"))
				r = write_file(d, "blkio.bfq.weight", v);
		}
	}
	return r;
}

static int valid_name(const char *name)
{
	return *name && strlen(name) < 100 && !strchr(name, '/') && strcmp(name, ".") &&
	       strcmp(name, "..");
}

int cgroup_create(struct cgroups *cg, const char *name, const struct cgroup_limits *l,
		  struct cgroup_join *join, char *err, size_t errlen)
{
	if (!valid_name(name)) {
		snprintf(err, errlen, "invalid cgroup name '%s'", name);
		return -EINVAL;
	}
	memset(join, 0, sizeof(*join));
	char d[640];
	int r = 0;
	for (int i = 0; i < CG_NCTL; i++) {
		if (!first_of_dir(cg, i))
			continue;
		leaf_path(cg, i, name, d, sizeof(d));
		if ((r = mkdir_ok(d)) < 0) {
			snprintf(err, errlen, "cannot create cgroup '%s': %s", d, strerror(-r));
			goto fail;
		}
		if (snprintf(join->procs[join->n++], sizeof(join->procs[0]), "%s/cgroup.procs", d) >=
		    (int)sizeof(join->procs[0])) {
			r = -ENAMETOOLONG;
			snprintf(err, errlen, "cgroup path too long: '%s'", d);
			goto fail;
		}
	}
	if ((r = set_limits(cg, name, l)) < 0) {
		snprintf(err, errlen, "cannot set the limits of cgroup '%s': %s", name, strerror(-r));
		goto fail;
	}
	return 0;
fail:
	cgroup_remove(cg, name);
	return r;
}

int cgroup_remove(struct cgroups *cg, const char *name)
{
	if (!valid_name(name))
		return -EINVAL;
	char d[640];
	int r = 0;
	for (int i = 0; i < CG_NCTL; i++) {
		if (!first_of_dir(cg, i))
			continue;
		leaf_path(cg, i, name, d, sizeof(d));
		if (rmdir(d) < 0 && errno != ENOENT)
			r = -errno;
	}
	return r;
}

static int read_ull(const char *dir, const char *file, unsigned long long *v)
{
	char path[800], buf[64];
	if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	buf[n] = '\0';
	char *end;
	errno = 0;
	*v = strtoull(buf, &end, 10);
	return errno || end == buf ? -EIO : 0;
}

int cgroup_memory(struct cgroups *cg, const char *name, unsigned long long *now,
		  unsigned long long *peak)
{
	char d[640];
	if (!valid_name(name) || leaf_path(cg, CG_MEMORY, name, d, sizeof(d)) < 0)
		return -ENOENT;
	int v2 = cg->layout == CGROUP_V2;
	int r = read_ull(d, v2 ? "memory.current" : "memory.usage_in_bytes", now);
	if (r == 0 && peak && read_ull(d, v2 ? "memory.peak" : "memory.max_usage_in_bytes", peak) < 0)
		*peak = *now;
	return r;
}
