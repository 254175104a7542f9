/*
 * fuzz_image: libFuzzer target for what an image import reads (image.h):
 * the first byte picks the reader, the rest is its input. 0: one layer
 * applied to a tree (image_layer_apply); 1: an archive (`docker save`'s,
 * or a tar of an OCI layout) staged and unpacked whole (image_unpack).
 * Both write under a work directory of their own, beside a directory
 * "outside" holding one file: whatever the input, nothing may appear,
 * change or vanish outside "root" and "stage", and the limits (1 MiB,
 * 1000 entries) hold.
 */
#include "image/image.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char work[64];
static int workfd = -1, in = -1;

/* The work directory holds root, stage and outside/keep, as made. */
static void check_outside(void)
{
	DIR *d = fdopendir(dup(workfd));
	struct dirent *e;
	int n = 0;
	if (!d)
		abort();
	rewinddir(d);
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (strcmp(e->d_name, "root") && strcmp(e->d_name, "stage") && strcmp(e->d_name, "outside"))
			abort(); /* written beside the root */
		n++;
	}
	closedir(d);
	struct stat st;
	if (n != 3 || fstatat(workfd, "outside/keep", &st, AT_SYMLINK_NOFOLLOW) < 0 ||
	    !S_ISREG(st.st_mode) || st.st_size != 4)
		abort();
	int od = openat(workfd, "outside", O_RDONLY | O_DIRECTORY);
	d = od >= 0 ? fdopendir(od) : NULL;
	n = 0;
	while (d && (e = readdir(d)))
		n++;
	if (d)
		closedir(d);
	if (n != 3) /* ".", ".." and keep */
		abort();
}

static void cleanup(void)
{
	image_remove_tree(AT_FDCWD, work);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (workfd < 0) {
		snprintf(work, sizeof(work), "/tmp/fuzz-image-%d", (int)getpid());
		if (mkdir(work, 0700) < 0 || (workfd = open(work, O_RDONLY | O_DIRECTORY)) < 0 ||
		    mkdirat(workfd, "outside", 0755) < 0)
			abort();
		int k = openat(workfd, "outside/keep", O_WRONLY | O_CREAT, 0644);
		if (k < 0 || write(k, "keep", 4) != 4)
			abort();
		close(k);
		atexit(cleanup);
		in = memfd_create("fuzz-image", MFD_CLOEXEC);
		if (in < 0)
			abort();
	}
	if (!size)
		return 0;
	image_remove_tree(workfd, "root");
	image_remove_tree(workfd, "stage");
	if (mkdirat(workfd, "root", 0755) < 0 || mkdirat(workfd, "stage", 0700) < 0)
		abort();
	int root = openat(workfd, "root", O_RDONLY | O_DIRECTORY);
	int stage = openat(workfd, "stage", O_RDONLY | O_DIRECTORY);
	if (root < 0 || stage < 0 || ftruncate(in, 0) < 0 ||
	    (size > 1 && pwrite(in, data + 1, size - 1, 0) != (ssize_t)(size - 1)) ||
	    lseek(in, 0, SEEK_SET) != 0)
		abort();
	struct image_limits lim = { .max_bytes = 1 << 20, .max_entries = 1000 };
	char err[700];
	if (data[0] & 1) {
		json_t *config = NULL;
		int r = image_unpack(in, stage, root, &lim, &config, err, sizeof(err));
		if ((r == 0) != (config != NULL))
			abort();
		json_decref(config);
	} else {
		struct image_usage used = { 0 };
		int r = image_layer_apply(root, in, &lim, &used, err, sizeof(err));
		if (used.bytes > lim.max_bytes || used.entries > lim.max_entries)
			abort();
		if (r < 0 && !err[0])
			abort(); /* a refusal says why */
	}
	close(root);
	close(stage);
	check_outside();
	return 0;
}
