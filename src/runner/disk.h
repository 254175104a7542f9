/*
 * disk: per-VM writable layers. Each VM writes into its own qcow2 overlay
 * whose backing file is a pre-formatted, empty ext4 image of the requested
 * size, made once per size and cached; so a new layer costs one small file
 * and qcow2 gives us copy-on-write snapshots and forks later.
 */
#ifndef CPUOS_DISK_H
#define CPUOS_DISK_H

#include <stddef.h>

#define DISK_MIN_MB 64
#define DISK_MAX_MB (1024 * 1024)

/* Creates the overlay at path for a layer of size_mb, making the cached base
 * under cache_dir/scratch/ first if needed. 0 or -errno, reason in err. */
int disk_scratch_create(const char *cache_dir, unsigned size_mb, const char *path,
			char *err, size_t errlen);

/* The cached base a layer of size_mb is backed by: QEMU opens it too. */
int disk_base_path(const char *cache_dir, unsigned size_mb, char *out, size_t len);
/* The base the layer at path is backed by, read from its qcow2 header: 0
 * with it in out, or -EINVAL when that is not one of cache_dir's bases (a
 * jailed QEMU may have written the header: it names no other file). */
int disk_layer_base(const char *cache_dir, const char *path, char *out, size_t len);

/* Runs argv to completion with stdout and stderr in a pipe; 0 when it exits
 * 0, else -EIO with its last line of output (or the exec error) in err. */
int disk_run(char *const argv[], char *err, size_t errlen);

#endif
