/*
 * test_disk: writable layers. Many creators of one layer size on a cold
 * cache (parallel sandbox creates after a fresh install) must all succeed
 * and leave one sound, cached base behind, the same bytes on every host.
 */
#include "runner/disk.h"
#include "tests/lib/tap.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CREATORS 6

static char cache[64];

struct creator {
	int i, r;
	char err[256];
};

static void *create(void *arg)
{
	struct creator *c = arg;
	char path[128];
	snprintf(path, sizeof(path), "%s/layer%d.qcow2", cache, c->i);
	c->r = disk_scratch_create(cache, 96, path, c->err, sizeof(c->err));
	return NULL;
}

static void test_parallel_cold_creates(void)
{
	snprintf(cache, sizeof(cache), "/tmp/cpuos-disk-test-%d", (int)getpid());
	pthread_t t[CREATORS];
	struct creator c[CREATORS];
	for (int i = 0; i < CREATORS; i++) {
		c[i] = (struct creator){ .i = i };
		CHECK(pthread_create(&t[i], NULL, create, &c[i]) == 0);
	}
	for (int i = 0; i < CREATORS; i++) {
		pthread_join(t[i], NULL);
		if (!CHECK(c[i].r == 0))
			t_note("creator %d: %s", i, c[i].err);
	}
	/* One base, whole; no temporary file left behind. */
	char base[128], cmd[800], dir[96];
	snprintf(base, sizeof(base), "%s/scratch/ext4-96m-r1.raw", cache);
	snprintf(cmd, sizeof(cmd), "e2fsck -fn '%s' >/dev/null 2>&1", base);
	int st = system(cmd);
	if (!CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0))
		t_note("e2fsck -fn %s: status %d", base, st);
	snprintf(dir, sizeof(dir), "%s/scratch", cache);
	DIR *d = opendir(dir);
	int files = 0;
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.')
			files++;
	if (d)
		closedir(d);
	CHECK(files == 1);
	/* read by others: every jailed QEMU layers on it */
	struct stat bs;
	CHECK(stat(base, &bs) == 0 && (bs.st_mode & 0777) == 0644);
	/* the base a layer names, and only one of the cache's */
	char layer[128], got[256];
	snprintf(layer, sizeof(layer), "%s/layer0.qcow2", cache);
	CHECK(disk_layer_base(cache, layer, got, sizeof(got)) == 0 && !strcmp(got, base));
	snprintf(layer, sizeof(layer), "%s/forged.qcow2", cache);
	snprintf(cmd, sizeof(cmd), "qemu-img create -q -f qcow2 -F raw -b /etc/hostname '%s' 1M", layer);
	CHECK(system(cmd) == 0);
	CHECK(disk_layer_base(cache, layer, got, sizeof(got)) == -EINVAL);
	snprintf(layer, sizeof(layer), "%s/scratch", cache);
	CHECK(disk_layer_base(cache, layer, got, sizeof(got)) < 0); /* not a file */
	/* a layer on a base named as a cpuos before named it */
	char old[160];
	snprintf(old, sizeof(old), "%s/scratch/ext4-96m.raw", cache);
	snprintf(layer, sizeof(layer), "%s/old.qcow2", cache);
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && qemu-img create -q -f qcow2 -F raw -b '%s' '%s'",
		 base, old, old, layer);
	CHECK(system(cmd) == 0);
	CHECK(disk_layer_base(cache, layer, got, sizeof(got)) == 0 && !strcmp(got, old));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cache);
	CHECK(system(cmd) == 0);
}

/* A layer saved on one host is restored over another's base: two caches
 * (two hosts), made a second apart, hold the same bytes. */
static void test_bases_are_the_same_everywhere(void)
{
	char a[96], b[96], pa[160], pb[160], err[256], cmd[800];
	snprintf(a, sizeof(a), "/tmp/cpuos-disk-a-%d", (int)getpid());
	snprintf(b, sizeof(b), "/tmp/cpuos-disk-b-%d", (int)getpid());
	snprintf(pa, sizeof(pa), "%s/layer.qcow2", a);
	snprintf(pb, sizeof(pb), "%s/layer.qcow2", b);
	CHECK(mkdir(a, 0700) == 0 && mkdir(b, 0700) == 0);
	CHECK(disk_scratch_create(a, 96, pa, err, sizeof(err)) == 0);
	sleep(1); /* a clock that moved on changes nothing */
	CHECK(disk_scratch_create(b, 96, pb, err, sizeof(err)) == 0);
	snprintf(cmd, sizeof(cmd), "cmp -s '%s/scratch/ext4-96m-r1.raw' '%s/scratch/ext4-96m-r1.raw'",
		 a, b);
	CHECK(system(cmd) == 0);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", a, b);
	CHECK(system(cmd) == 0);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "disk_parallel_cold_creates", test_parallel_cold_creates },
		{ "disk_bases_are_the_same_everywhere", test_bases_are_the_same_everywhere },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
