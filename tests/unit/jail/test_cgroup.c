/*
 * test_cgroup: both layouts on trees of plain directories shaped as the
 * kernel lays them out (files made beforehand where the kernel would make
 * them): where the groups go, what each limit file gets, and leaves made
 * and removed. The host's own v1 layout is exercised by tests/e2e/test_jail.py.
 */
#include "jail/cgroup.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "cgroup_v1", test_v1 },
		{ "cgroup_v2", test_v2 },
		{ "cgroup_v2_populated", test_v2_populated },
		{ "cgroup_nothing_mounted", test_nothing_mounted },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
