/*
 * test_cgroup: both layouts on trees of plain directories shaped as the
 * kernel lays them out (files made beforehand where the kernel would make
 * them): where the groups go, what each limit file gets, and leaves made
 * and removed. Then v2 on the real kernel, on a cgroup2 mount of the
 * case's own (cgroup_v2_kernel*, see struct real for what runs where).
 * The host's own v1 layout is exercised by tests/e2e/test_jail.py.
 */
#include "jail/cgroup.h"
#include "tests/lib/tap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char root[128];

static void put(const char *rel, const char *text)
{
	char path[512], cmd[700];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	if (system(cmd) != 0)
		return;
	FILE *f = fopen(path, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static int has(const char *rel, const char *text)
{
	char path[512], buf[256] = "";
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	if (strcmp(buf, text))
		t_note("%s: '%s', want '%s'", rel, buf, text);
	return !strcmp(buf, text);
}

static int exists(const char *rel)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	return access(path, F_OK) == 0;
}

static void fresh(const char *what)
{
	char cmd[300];
	snprintf(root, sizeof(root), "/tmp/cpuos-cgroup-test-%d-%s", (int)getpid(), what);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	CHECK(system(cmd) == 0);
	CHECK(mkdir(root, 0755) == 0);
}

static void done(void)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	CHECK(system(cmd) == 0);
}

/* Our hosts: a hierarchy per controller, the daemon's memory cgroup a
 * nested one, cpu mounted with cpuacct, no pids controller mounted. */
static void test_v1(void)
{
	fresh("v1");
	put("self", "9:name=systemd:/\n8:blkio:/\n4:memory:/outer/x\n1:cpu,cpuacct:/\n0::/\n");
	put("memory/outer/x/memory.limit_in_bytes", "");
	put("cpu,cpuacct/cpu.shares", "");
	put("blkio/blkio.weight", "");
	/* where the kernel makes a leaf's files */
	put("memory/outer/x/cpuos/vm1/memory.limit_in_bytes", "");
	put("memory/outer/x/cpuos/vm1/memory.memsw.limit_in_bytes", "");
	put("memory/outer/x/cpuos/vm1/cgroup.procs", "");
	put("cpu,cpuacct/cpuos/vm1/cpu.cfs_period_us", "");
	put("cpu,cpuacct/cpuos/vm1/cpu.cfs_quota_us", "");
	put("blkio/cpuos/vm1/blkio.weight", "");
	char self[200], err[256] = "";
	snprintf(self, sizeof(self), "%s/self", root);
	struct cgroups *cg = NULL;
	if (!CHECK(cgroup_open(root, self, &cg, err, sizeof(err)) == 0)) {
		t_note("%s", err);
		return;
	}
	CHECK(cgroup_layout(cg) == CGROUP_V1);
	CHECK(!strcmp(cgroup_describe(cg), "v1: memory cpu blkio"));
	struct cgroup_limits l = { .memory_bytes = 768ULL << 20, .pids = 300, .cpus = 2,
				   .io_weight = 500 };
	struct cgroup_join j;
	CHECK(cgroup_create(cg, "vm1", &l, &j, err, sizeof(err)) == 0);
	CHECK(has("memory/outer/x/cpuos/vm1/memory.limit_in_bytes", "805306368"));
	CHECK(has("memory/outer/x/cpuos/vm1/memory.memsw.limit_in_bytes", "805306368"));
	CHECK(has("cpu,cpuacct/cpuos/vm1/cpu.cfs_quota_us", "200000"));
	CHECK(has("cpu,cpuacct/cpuos/vm1/cpu.cfs_period_us", "100000"));
	CHECK(has("blkio/cpuos/vm1/blkio.weight", "1000")); /* 500 x 5, at v1's top */
	l.io_weight = 100; /* v2's default is v1's */
	CHECK(cgroup_create(cg, "vm1", &l, &j, err, sizeof(err)) == 0);
	CHECK(has("blkio/cpuos/vm1/blkio.weight", "500"));
	CHECK(j.n == 3 && strstr(j.procs[0], "memory/outer/x/cpuos/vm1/cgroup.procs") &&
	      strstr(j.procs[1], "cpu,cpuacct/cpuos/vm1/cgroup.procs"));
	CHECK(cgroup_create(cg, "../escape", &l, &j, err, sizeof(err)) == -EINVAL);
	/* rmdir of a real cgroup takes its files with it; here they are
	 * files, so the leaf stays: -ENOTEMPTY, reported */
	CHECK(cgroup_remove(cg, "vm1") < 0);
	cgroup_close(cg);
	done();
}

/* Current distributions: one tree; the daemon in a group of its own
 * (a systemd service), whose controllers reach the leaves through
 * subtree_control. */
static void test_v2(void)
{
	fresh("v2");
	put("cgroup.controllers", "cpuset cpu io memory hugetlb pids\n");
	put("self", "0::/system.slice/cpuosd.service\n");
	put("system.slice/cpuosd.service/cgroup.subtree_control", "");
	put("system.slice/cpuosd.service/cpuos/cgroup.subtree_control", "");
	put("system.slice/cpuosd.service/cpuos/vm2/memory.max", "");
	put("system.slice/cpuosd.service/cpuos/vm2/pids.max", "");
	put("system.slice/cpuosd.service/cpuos/vm2/cpu.max", "");
	put("system.slice/cpuosd.service/cpuos/vm2/cgroup.procs", "");
	char self[200], err[256] = "";
	snprintf(self, sizeof(self), "%s/self", root);
	struct cgroups *cg = NULL;
	if (!CHECK(cgroup_open(root, self, &cg, err, sizeof(err)) == 0)) {
		t_note("%s", err);
		return;
	}
	CHECK(cgroup_layout(cg) == CGROUP_V2);
	CHECK(!strcmp(cgroup_describe(cg), "v2: memory pids cpu io"));
	/* the last of the writes stays in a plain file */
	CHECK(has("system.slice/cpuosd.service/cgroup.subtree_control", "+io"));
	struct cgroup_limits l = { .memory_bytes = 1ULL << 30, .pids = 260, .cpus = 3 };
	struct cgroup_join j;
	CHECK(cgroup_create(cg, "vm2", &l, &j, err, sizeof(err)) == 0);
	CHECK(has("system.slice/cpuosd.service/cpuos/vm2/memory.max", "1073741824"));
	CHECK(has("system.slice/cpuosd.service/cpuos/vm2/pids.max", "260"));
	CHECK(has("system.slice/cpuosd.service/cpuos/vm2/cpu.max", "300000 100000"));
	CHECK(j.n == 1 && strstr(j.procs[0], "system.slice/cpuosd.service/cpuos/vm2/cgroup.procs"));
	struct cgroup_limits none = { 0 };
	CHECK(cgroup_create(cg, "vm2", &none, &j, err, sizeof(err)) == 0);
	CHECK(has("system.slice/cpuosd.service/cpuos/vm2/memory.max", "max"));
	CHECK(has("system.slice/cpuosd.service/cpuos/vm2/cpu.max", "max 100000"));
	cgroup_close(cg);
	/* a leaf made fresh (no files as the kernel would make them): the
	 * limits cannot be set, the create fails and leaves nothing */
	CHECK(cgroup_open(root, self, &cg, err, sizeof(err)) == 0);
	CHECK(cgroup_create(cg, "vm3", &l, &j, err, sizeof(err)) < 0);
	CHECK(!exists("system.slice/cpuosd.service/cpuos/vm3"));
	cgroup_close(cg);
	done();
}

/* The daemon's group with another process in it besides the daemon:
 * nothing may be written to its subtree_control (pids and cpu would be
 * taken, and make it a thread root that no leaf could be joined under),
 * the daemon moves into its leaf, and the open fails, saying why. */
static void test_v2_populated(void)
{
	fresh("v2busy");
	put("cgroup.controllers", "cpu io memory pids\n");
	put("self", "0::/svc\n");
	put("svc/cgroup.type", "domain\n");
	put("svc/cgroup.controllers", "cpu memory pids\n");
	put("svc/cgroup.procs", "1\n");
	put("svc/cgroup.subtree_control", "");
	put("svc/cpuosd/cgroup.procs", "");
	char self[200], err[256] = "", pid[24];
	snprintf(self, sizeof(self), "%s/self", root);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	struct cgroups *cg = NULL;
	CHECK(cgroup_open(root, self, &cg, err, sizeof(err)) == -EBUSY);
	CHECK(strstr(err, "cannot hand cgroup controllers down") != NULL);
	CHECK(has("svc/cgroup.subtree_control", ""));
	CHECK(has("svc/cpuosd/cgroup.procs", pid));
	done();
}

static void test_nothing_mounted(void)
{
	fresh("none");
	put("self", "0::/\n");
	char self[200], err[256] = "";
	snprintf(self, sizeof(self), "%s/self", root);
	struct cgroups *cg = NULL;
	CHECK(cgroup_open(root, self, &cg, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "no cgroup controller") != NULL);
	done();
}

/*
 * The cases below run on the real kernel: a cgroup2 filesystem mounted in
 * a mount namespace of the case's process. A second cgroup2 mount is the
 * same one v2 hierarchy the host has (/sys/fs/cgroup on a v2 host, its
 * .../unified beside a v1 layout), so the case's groups get a name of
 * their own and are removed at its end. What runs depends on what the
 * kernel hands the case's group: a controller bound to a v1 hierarchy is
 * never v2's. On our v1 hosts that is none of memory, pids, cpu, io: the
 * cases check cgroup_open's refusal and, on a leaf of their own, what the
 * leaves rely on (the join, rmdir refused while a process is in). Where
 * the root hands them down (a v2 host) they check the limits in the
 * kernel's files, the join and the removal through cgroup.c, and say
 * which controller was missing. Not root, or no cgroup2: they fail.
 */
struct real {
	char mnt[64];      /* the cgroup2 mount */
	char rel[64];      /* the case's group, from the mount's root */
	char grp[128];     /* ... and its path */
	char self[64];     /* a "/proc/self/cgroup" text naming it */
	char home[256];    /* the case's own v2 group, to go back to */
	char desc[64];     /* what cgroup_describe should say */
	int have[CG_NCTL]; /* the controllers the kernel hands grp */
	int n;
	int mounted, moved;
	pid_t sleeper;
};

static const char *const ctl_name[CG_NCTL] = { "memory", "pids", "cpu", "io" };

static int read_text(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, len - 1);
	int e = errno;
	close(fd);
	if (n < 0)
		return -e;
	buf[n] = '\0';
	return 0;
}

/* One write, as cgroup.c and jail_enter make theirs: the kernel's answer
 * to it is what counts. */
static int write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, text, strlen(text));
	int r = n == (ssize_t)strlen(text) ? 0 : n < 0 ? -errno : -EIO;
	close(fd);
	return r;
}

static int kernel_has(const char *dir, const char *file)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	return access(path, F_OK) == 0;
}

static int in_list(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; (p = strstr(p, word)); p += n)
		if ((p == list || p[-1] == ' ') && (!p[n] || p[n] == ' ' || p[n] == '\n'))
			return 1;
	return 0;
}

/* A kernel file of dir holds want (its newline aside). */
static int holds(const char *dir, const char *file, const char *want)
{
	char path[512], buf[256] = "";
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	int r = read_text(path, buf, sizeof(buf));
	buf[strcspn(buf, "\n")] = '\0';
	if (r < 0 || strcmp(buf, want))
		t_note("%s: '%s' (%s), want '%s'", path, buf, r < 0 ? strerror(-r) : "read", want);
	return r == 0 && !strcmp(buf, want);
}

/* The controllers of a subtree_control hold every one the kernel hands
 * the case's group. */
static int lists_all(const struct real *r, const char *dir)
{
	char path[512], buf[256] = "";
	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", dir);
	if (read_text(path, buf, sizeof(buf)) < 0)
		return 0;
	for (int i = 0; i < CG_NCTL; i++)
		if (r->have[i] && !in_list(buf, ctl_name[i])) {
			t_note("%s: '%s', without %s", path, strtok(buf, "\n"), ctl_name[i]);
			return 0;
		}
	return 1;
}

/* pid's group in the v2 hierarchy, from its /proc/PID/cgroup ("0::/a"). */
static int v2_group(pid_t pid, char *out, size_t len)
{
	char path[64], buf[4096] = "";
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	int r = read_text(path, buf, sizeof(buf));
	if (r < 0)
		return r;
	char *l = strstr(buf, "0::");
	if (!l || (l != buf && l[-1] != '\n'))
		return -ENOENT;
	l += 3;
	size_t n = strcspn(l, "\n");
	if (n >= len)
		return -ENAMETOOLONG;
	memcpy(out, l, n);
	out[n] = '\0';
	return 0;
}

static int in_group(pid_t pid, const char *want)
{
	char got[256] = "";
	int r = v2_group(pid, got, sizeof(got));
	if (r < 0 || strcmp(got, want))
		t_note("process %d is in '%s', want '%s'", (int)pid, got, want);
	return r == 0 && !strcmp(got, want);
}

/* A child that joins a group by writing "0" into its cgroup.procs, as
 * jail_enter does, and sleeps there: its pid, or -errno of the join. */
static pid_t join_sleeper(const char *procs)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid == 0) {
		int r = write_text(procs, "0");
		if (write(p[1], &r, sizeof(r)) != sizeof(r) || r < 0)
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	int r = -EIO;
	if (pid < 0 || read(p[0], &r, sizeof(r)) != sizeof(r))
		r = pid < 0 ? -errno : -EIO;
	close(p[0]);
	if (r < 0) {
		t_note("cannot join '%s': %s", procs, strerror(-r));
		if (pid > 0)
			waitpid(pid, NULL, 0);
		return r;
	}
	return pid;
}

static void reap(pid_t *pid)
{
	if (*pid > 0) {
		kill(*pid, SIGKILL);
		waitpid(*pid, NULL, 0);
	}
	*pid = 0;
}

/* Groups are directories whose files go with them: children first. */
static void rm_groups(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_type == DT_DIR && e->d_name[0] != '.') {
			char sub[512];
			snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
			rm_groups(sub);
		}
	closedir(d);
	rmdir(dir);
}

/* Mounts cgroup2 and makes the case's group; 0 (with a failed CHECK and
 * the reason) when the case cannot run here. */
static int real_setup(struct real *r)
{
	memset(r, 0, sizeof(*r));
	if (!CHECK(geteuid() == 0)) {
		t_note("needs root: it mounts cgroup2 and makes groups in the host's hierarchy");
		return 0;
	}
	/* private first: the mount must not reach the host's namespace */
	if (!CHECK(unshare(CLONE_NEWNS) == 0 &&
		   mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0)) {
		t_note("cannot have a mount namespace of its own: %s", strerror(errno));
		return 0;
	}
	snprintf(r->mnt, sizeof(r->mnt), "/tmp/cpuos-cgroup2-XXXXXX");
	if (!CHECK(mkdtemp(r->mnt) != NULL))
		return 0;
	if (!CHECK(mount("none", r->mnt, "cgroup2", 0, NULL) == 0)) {
		t_note("cannot mount cgroup2 on '%s': %s (a kernel without cgroup v2?)", r->mnt,
		       strerror(errno));
		rmdir(r->mnt);
		return 0;
	}
	r->mounted = 1;
	snprintf(r->rel, sizeof(r->rel), "/cpuos-test-%d", (int)getpid());
	snprintf(r->grp, sizeof(r->grp), "%s%s", r->mnt, r->rel);
	snprintf(r->self, sizeof(r->self), "/tmp/cpuos-cgroup2-%d.self", (int)getpid());
	char text[128], path[256], ctls[256] = "";
	snprintf(text, sizeof(text), "0::%s\n", r->rel);
	snprintf(path, sizeof(path), "%s/cgroup.controllers", r->grp);
	rm_groups(r->grp); /* a past run's, killed, with the same pid */
	if (!CHECK(v2_group(getpid(), r->home, sizeof(r->home)) == 0) ||
	    !CHECK(mkdir(r->grp, 0755) == 0) || !CHECK(read_text(path, ctls, sizeof(ctls)) == 0))
		return 0;
	FILE *f = fopen(r->self, "we");
	if (!CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0))
		return 0;
	size_t len = (size_t)snprintf(r->desc, sizeof(r->desc), "v2:");
	for (int i = 0; i < CG_NCTL; i++)
		if ((r->have[i] = in_list(ctls, ctl_name[i]))) {
			r->n++;
			len += (size_t)snprintf(r->desc + len, sizeof(r->desc) - len, " %s",
						ctl_name[i]);
		}
	ctls[strcspn(ctls, "\n")] = '\0';
	t_note("cgroup2 on '%s': the kernel hands '%s' %s", r->mnt, r->rel,
	       ctls[0] ? ctls : "no controller");
	return 1;
}

static void real_done(struct real *r)
{
	reap(&r->sleeper);
	if (r->moved) {
		char procs[400];
		snprintf(procs, sizeof(procs), "%s%s/cgroup.procs", r->mnt,
			 strcmp(r->home, "/") ? r->home : "");
		CHECK(write_text(procs, "0") == 0);
	}
	if (r->grp[0]) {
		rm_groups(r->grp);
		/* nothing of the case's left in the host's hierarchy */
		CHECK(access(r->grp, F_OK) < 0 && errno == ENOENT);
	}
	if (r->mounted)
		CHECK(umount(r->mnt) == 0);
	rmdir(r->mnt);
	unlink(r->self);
}

/* Without a controller: cgroup_open refuses, and what cgroup.c's leaves
 * rely on from the kernel is checked on a leaf of the test's own. */
static void v2_no_controller(struct real *r)
{
	char path[300], err[256] = "";
	/* A controller the group is not handed it refuses (ENOENT, not
	 * EBUSY), and cgroup_open, finding none, refuses in turn. */
	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", r->grp);
	CHECK(write_text(path, "+memory") == -ENOENT);
	struct cgroups *cg = NULL;
	CHECK(cgroup_open(r->mnt, r->self, &cg, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "no cgroup controller found") != NULL);
	CHECK(holds(r->grp, "cgroup.subtree_control", ""));
	/* A leaf the kernel makes has no limit file of a controller it
	 * lacks; a process joins it by writing "0" (jail_enter); rmdir of a
	 * leaf with a process in it is EBUSY (cgroup_remove's -EBUSY), and
	 * once that process is reaped it takes the leaf, files and all. */
	char leaf[200], want[128];
	snprintf(leaf, sizeof(leaf), "%s/vm0", r->grp);
	snprintf(want, sizeof(want), "%s/vm0", r->rel);
	snprintf(path, sizeof(path), "%s/cgroup.procs", leaf);
	if (!CHECK(mkdir(leaf, 0755) == 0))
		return;
	CHECK(!kernel_has(leaf, "memory.max") && !kernel_has(leaf, "pids.max"));
	r->sleeper = join_sleeper(path);
	if (CHECK(r->sleeper > 0))
		CHECK(in_group(r->sleeper, want));
	CHECK(rmdir(leaf) < 0 && errno == EBUSY);
	reap(&r->sleeper);
	CHECK(rmdir(leaf) == 0);
	CHECK(access(leaf, F_OK) < 0 && errno == ENOENT);
	t_note("none of memory, pids, cpu, io reaches this group (a v1 hierarchy holds them, or "
	       "the root hands them no further): no leaf with limits made here");
}

/* With controllers: the groups, the limits in the kernel's own files, a
 * process joined, and the leaf removed only once it is empty. */
static void v2_limits(struct real *r)
{
	char err[256] = "";
	struct cgroups *cg = NULL;
	if (!CHECK(cgroup_open(r->mnt, r->self, &cg, err, sizeof(err)) == 0)) {
		t_note("%s", err);
		return;
	}
	char top[200], leaf[240], procs[300], want[128];
	snprintf(top, sizeof(top), "%s/cpuos", r->grp);
	snprintf(leaf, sizeof(leaf), "%s/vm1", top);
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", leaf);
	snprintf(want, sizeof(want), "%s/cpuos/vm1", r->rel);
	CHECK(cgroup_layout(cg) == CGROUP_V2);
	if (!CHECK(!strcmp(cgroup_describe(cg), r->desc)))
		t_note("'%s', want '%s'", cgroup_describe(cg), r->desc);
	CHECK(lists_all(r, r->grp) && lists_all(r, top));
	struct cgroup_limits l = { .memory_bytes = 768ULL << 20, .pids = 300, .cpus = 2,
				   .io_weight = 500 };
	struct cgroup_join j;
	if (!CHECK(cgroup_create(cg, "vm1", &l, &j, err, sizeof(err)) == 0)) {
		t_note("%s", err);
		cgroup_close(cg);
		return;
	}
	CHECK(j.n == 1 && !strcmp(j.procs[0], procs));
	if (r->have[CG_MEMORY]) {
		CHECK(holds(leaf, "memory.max", "805306368"));
		if (kernel_has(leaf, "memory.swap.max"))
			CHECK(holds(leaf, "memory.swap.max", "0"));
	}
	if (r->have[CG_PIDS])
		CHECK(holds(leaf, "pids.max", "300"));
	if (r->have[CG_CPU])
		CHECK(holds(leaf, "cpu.max", "200000 100000"));
	if (r->have[CG_IO] && kernel_has(leaf, "io.weight"))
		CHECK(holds(leaf, "io.weight", "default 500"));
	else if (r->have[CG_IO])
		t_note("io without io.weight here (no iocost): no weight set, as intended");
	/* made again (a VM that died before its leaf went): no limits now */
	struct cgroup_limits none = { 0 };
	CHECK(cgroup_create(cg, "vm1", &none, &j, err, sizeof(err)) == 0);
	if (r->have[CG_MEMORY])
		CHECK(holds(leaf, "memory.max", "max"));
	if (r->have[CG_PIDS])
		CHECK(holds(leaf, "pids.max", "max"));
	if (r->have[CG_CPU])
		CHECK(holds(leaf, "cpu.max", "max 100000"));
	r->sleeper = join_sleeper(j.procs[0]);
	if (CHECK(r->sleeper > 0))
		CHECK(in_group(r->sleeper, want));
	unsigned long long now = 0, peak = 0;
	if (r->have[CG_MEMORY])
		CHECK(cgroup_memory(cg, "vm1", &now, &peak) == 0 && peak >= now);
	CHECK(cgroup_remove(cg, "vm1") == -EBUSY);
	CHECK(access(leaf, F_OK) == 0);
	reap(&r->sleeper);
	CHECK(cgroup_remove(cg, "vm1") == 0);
	CHECK(access(leaf, F_OK) < 0 && errno == ENOENT);
	cgroup_close(cg);
}

/* The daemon's group as cgroup_open sees it from a "0::/..." text: the
 * daemon is elsewhere, the group empty. */
static void test_v2_kernel(void)
{
	struct real r;
	if (real_setup(&r)) {
		if (r.n)
			v2_limits(&r);
		else
			v2_no_controller(&r);
	}
	real_done(&r);
}

/* The daemon inside the group it is given (systemd's Delegate=yes), found
 * from its real /proc/self/cgroup: a group with a process of its own may
 * hand no controller down, so cgroup_open moves the daemon into a leaf
 * "cpuosd" first; with no controller to hand down, it moves nobody. */
static void v2_delegated(struct real *r)
{
	char procs[300], leaf[300], top[200], want[128], err[256] = "";
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", r->grp);
	snprintf(leaf, sizeof(leaf), "%s/cpuosd", r->grp);
	snprintf(top, sizeof(top), "%s/cpuos", r->grp);
	if (!CHECK(write_text(procs, "0") == 0))
		return;
	r->moved = 1;
	CHECK(in_group(getpid(), r->rel));
	struct cgroups *cg = NULL;
	int e = cgroup_open(r->mnt, "/proc/self/cgroup", &cg, err, sizeof(err));
	if (!r->n) {
		CHECK(e == -ENOENT && strstr(err, "no cgroup controller found"));
		CHECK(in_group(getpid(), r->rel));
		CHECK(access(leaf, F_OK) < 0 && errno == ENOENT);
		return;
	}
	if (!CHECK(e == 0)) {
		t_note("%s", err);
		return;
	}
	snprintf(want, sizeof(want), "%s/cpuosd", r->rel);
	CHECK(in_group(getpid(), want));
	CHECK(!strcmp(cgroup_describe(cg), r->desc));
	CHECK(lists_all(r, r->grp) && lists_all(r, top));
	struct cgroup_limits l = { .memory_bytes = 256ULL << 20, .pids = 64, .cpus = 1 };
	struct cgroup_join j;
	if (!CHECK(cgroup_create(cg, "vm2", &l, &j, err, sizeof(err)) == 0))
		t_note("%s", err);
	CHECK(cgroup_remove(cg, "vm2") == 0);
	cgroup_close(cg);
}

static void test_v2_kernel_delegated(void)
{
	struct real r;
	if (real_setup(&r))
		v2_delegated(&r);
	real_done(&r);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "cgroup_v1", test_v1 },
		{ "cgroup_v2", test_v2 },
		{ "cgroup_v2_populated", test_v2_populated },
		{ "cgroup_nothing_mounted", test_nothing_mounted },
		{ "cgroup_v2_kernel", test_v2_kernel },
		{ "cgroup_v2_kernel_delegated", test_v2_kernel_delegated },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
