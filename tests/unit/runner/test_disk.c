/*
 * test_disk: writable layers. Many creators of one layer size on a cold
 * cache (parallel sandbox creates after a fresh install) must all succeed
 * and leave one sound, cached base behind.
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
	char base[128], cmd[256], dir[96];
	snprintf(base, sizeof(base), "%s/scratch/ext4-96m.raw", cache);
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
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cache);
	CHECK(system(cmd) == 0);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "disk_parallel_cold_creates", test_parallel_cold_creates },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
