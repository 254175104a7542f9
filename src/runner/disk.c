/*
 * disk: scratch layer creation with mkfs.ext4 and qemu-img. The cached base
 * is written to a temporary name and renamed, so concurrent creators and a
 * crash halfway leave either no base or a complete one.
 */
#include "runner/disk.h"

#include "common/fs.h"
#include "common/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* disk_run with the environment envp (NULL: ours). */
static int run_env(char *const argv[], char *const envp[], char *err, size_t errlen)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	pid_t pid;
	struct spawn_opts o = { .argv = argv, .fd = { -1, pfd[1], pfd[1] }, .envp = envp };
	int r = spawn(&o, &pid);
	close(pfd[1]);
	if (r < 0) {
		close(pfd[0]);
		snprintf(err, errlen, "cannot run '%s': %s", argv[0], strerror(-r));
		return r;
	}
	char out[4096];
	size_t len = 0;
	ssize_t n;
	/* Keep the tail: the last line is the one that says what went wrong. */
	while ((n = read(pfd[0], out + len, sizeof(out) - 1 - len)) > 0 || (n < 0 && errno == EINTR)) {
		if (n < 0)
			continue;
		len += (size_t)n;
		if (len == sizeof(out) - 1) {
			memmove(out, out + len / 2, len - len / 2);
			len -= len / 2;
		}
	}
	close(pfd[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	out[len] = '\0';
	while (len && out[len - 1] == '\n')
		out[--len] = '\0';
	char *last = strrchr(out, '\n');
	snprintf(err, errlen, "%s failed: %s", argv[0], last ? last + 1 : len ? out : "no output");
	return -EIO;
}

int disk_run(char *const argv[], char *err, size_t errlen)
{
	return run_env(argv, NULL, err, errlen);
}

int disk_base_path(const char *cache_dir, unsigned size_mb, char *out, size_t len)
{
	return snprintf(out, len, "%s/scratch/ext4-%um-r1.raw", cache_dir, size_mb) >= (int)len
		       ? -ENAMETOOLONG
		       : 0;
}

int disk_layer_base(const char *cache_dir, const char *path, char *out, size_t len)
{
	/* qcow2: magic "QFI\xfb", version, then the backing file name's
	 * offset (64 bits) and length (32), big-endian. */
	unsigned char h[20];
	char name[1024];
	int fd = fs_open_file(path, O_RDONLY, 0);
	if (fd < 0)
		return fd;
	int r = -EINVAL;
	if (pread(fd, h, sizeof(h), 0) == (ssize_t)sizeof(h) && !memcmp(h, "QFI\xfb", 4)) {
		uint64_t off = 0;
		for (int i = 8; i < 16; i++)
			off = off << 8 | h[i];
		uint32_t n = (uint32_t)h[16] << 24 | (uint32_t)h[17] << 16 | (uint32_t)h[18] << 8 | h[19];
		if (n > 0 && n < sizeof(name) && off < (1u << 20) &&
		    pread(fd, name, n, (off_t)off) == (ssize_t)n) {
			name[n] = '\0';
			unsigned mb;
			char want[1100], was[1100];
			size_t cl = strlen(cache_dir);
			/* This cpuos's name of a base, or that of one before,
			 * whose bases were not the same bytes on every host. */
			if (n > cl && !strncmp(name, cache_dir, cl) &&
			    sscanf(name + cl, "/scratch/ext4-%u", &mb) == 1 &&
			    disk_base_path(cache_dir, mb, want, sizeof(want)) == 0 &&
			    (size_t)snprintf(was, sizeof(was), "%s/scratch/ext4-%um.raw", cache_dir,
					     mb) < sizeof(was) &&
			    (!strcmp(want, name) || !strcmp(was, name)))
				r = snprintf(out, len, "%s", name) >= (int)len ? -ENAMETOOLONG : 0;
		}
	}
	close(fd);
	return r;
}

/* Every base's UUID and directory hash seed (any fixed value would do). */
#define BASE_UUID "5f1e2a6c-7d8b-4c3a-9e0f-1a2b3c4d5e6f"

static int ensure_base(const char *cache_dir, unsigned size_mb, char *base, size_t baselen,
		       char *err, size_t errlen)
{
	char dir[4096], tmp[4200], size[32];
	snprintf(dir, sizeof(dir), "%s/scratch", cache_dir);
	if (disk_base_path(cache_dir, size_mb, base, baselen) < 0)
		return -ENAMETOOLONG;
	/* An empty filesystem, read by every jailed QEMU that layers on it:
	 * made 0644 (one of an earlier cpuos, 0600, is made so where a jail
	 * starts on it, vm.c). */
	if (access(base, R_OK) == 0)
		return 0;
	int r = fs_mkdir_p(dir, 0755, (uid_t)-1, (gid_t)-1);
	if (r < 0) {
		snprintf(err, errlen, "cannot create '%s': %s", dir, strerror(-r));
		return r;
	}
	/* A name of its own per creator: two threads of one daemon making the
	 * same base at once must not mkfs one file together. */
	snprintf(tmp, sizeof(tmp), "%s.XXXXXX", base);
	int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot create a file in '%s': %s", dir, strerror(-r));
		return r;
	}
	snprintf(size, sizeof(size), "%um", size_mb);
	/* Lazy init keeps the base sparse: a 10 GiB layer costs a few MB. The
	 * root of the new filesystem is owned by nobody in particular; the
	 * agent makes upper/ and work/ inside it at first boot. The same
	 * bytes on every host (a fixed UUID, hash seed and time), since a
	 * layer saved on one host is restored over another's base. */
	char *argv[] = { "mkfs.ext4", "-q", "-F", "-m", "0", "-L", "scratch", "-U", BASE_UUID,
			 "-E", "lazy_itable_init=1,lazy_journal_init=1,hash_seed=" BASE_UUID,
			 tmp, size, NULL };
	char path[4200];
	snprintf(path, sizeof(path), "PATH=%s",
		 getenv("PATH") ? getenv("PATH") : "/usr/sbin:/usr/bin:/sbin:/bin");
	char *envp[] = { path, "E2FSPROGS_FAKE_TIME=1", NULL };
	int mkfs_failed = 0;
	r = ftruncate(fd, (off_t)size_mb << 20) < 0 || fchmod(fd, 0644) < 0 ? -errno : 0;
	if (r == 0 && (r = run_env(argv, envp, err, errlen)) < 0)
		mkfs_failed = 1; /* err says why */
	/* On disk before it is cached: a crash must not leave a torn base
	 * that every later sandbox would mount. */
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	close(fd);
	/* The first complete base wins; a later one is thrown away. */
	int renamed = 0;
	if (r == 0 && !(renamed = renameat2(AT_FDCWD, tmp, AT_FDCWD, base, RENAME_NOREPLACE) == 0) &&
	    errno != EEXIST)
		r = -errno;
	if (!renamed)
		unlink(tmp);
	if (r < 0 && !mkfs_failed)
		snprintf(err, errlen, "cannot make '%s': %s", base, strerror(-r));
	return r;
}

int disk_scratch_create(const char *cache_dir, unsigned size_mb, const char *path,
			char *err, size_t errlen)
{
	if (size_mb < DISK_MIN_MB || size_mb > DISK_MAX_MB) {
		snprintf(err, errlen, "disk size %u MB is outside %u..%u", size_mb, DISK_MIN_MB,
			 DISK_MAX_MB);
		return -EINVAL;
	}
	char base[4096];
	int r = ensure_base(cache_dir, size_mb, base, sizeof(base), err, errlen);
	if (r < 0)
		return r;
	char *argv[] = { "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", base,
			 (char *)path, NULL };
	return disk_run(argv, err, errlen);
}
