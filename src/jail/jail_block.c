/*
 * jail_block: see jail.h. The registry is a directory of root's with a
 * file per block taken, named by its number and holding the state
 * directory it is for; a lock on the directory orders daemons that start
 * at once.
 */
#include "jail/jail.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The state directory block k is for, into out ("" when none): 0, or -1
 * when it cannot be read. */
static int owner_of(int dfd, unsigned k, char *out, size_t len)
{
	char name[16];
	snprintf(name, sizeof(name), "%u", k);
	out[0] = '\0';
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	ssize_t n = read(fd, out, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	out[n] = '\0';
	return 0;
}

/* Does a process run as one of the ids lo .. lo + n - 1 (a daemon given
 * them with --jail-ids, or the QEMUs of one whose state directory is
 * gone)? */
static int ids_in_use(unsigned lo, unsigned n)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int used = 0;
	while (d && !used && (e = readdir(d))) {
		char path[300], line[256];
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/status", e->d_name);
		FILE *f = fopen(path, "re");
		unsigned uid;
		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, "Uid: %u", &uid) == 1) {
				used = uid >= lo && uid - lo < n;
				break;
			}
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return used;
}

/* Block k is state_dir's from now on. */
static int claim(int dfd, unsigned k, const char *state_dir)
{
	char name[16], tmp[32];
	snprintf(name, sizeof(name), "%u", k);
	snprintf(tmp, sizeof(tmp), ".%u.new", k);
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	size_t n = strlen(state_dir);
	int r = write(fd, state_dir, n) == (ssize_t)n && fsync(fd) == 0 ? 0 : -EIO;
	close(fd);
	if (r == 0 && renameat(dfd, tmp, dfd, name) < 0)
		r = -errno;
	if (r < 0)
		unlinkat(dfd, tmp, 0);
	return r;
}

int jail_block(const char *dir, const char *state_dir, unsigned base, unsigned size,
	       unsigned max, unsigned *first, char *err, size_t errlen)
{
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		snprintf(err, errlen, "cannot make '%s': %s", dir, strerror(errno));
		return -errno;
	}
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (dfd < 0 || fstat(dfd, &st) < 0 || st.st_uid != 0 || (st.st_mode & 022)) {
		snprintf(err, errlen, "'%s' is not a directory of root's alone", dir);
		if (dfd >= 0)
			close(dfd);
		return -EPERM;
	}
	flock(dfd, LOCK_EX); /* released at close */
	char owner[4096];
	unsigned free_k = max;
	int r = -ENOSPC;
	for (unsigned k = 0; k < max; k++) {
		if (owner_of(dfd, k, owner, sizeof(owner)) < 0)
			continue;
		if (!strcmp(owner, state_dir)) {
			r = 0;
			*first = base + k * size;
			break;
		}
		/* Free, or its state directory is gone (with the files the
		 * block's first id owned), and no process runs as its ids. */
		if (free_k == max && (!owner[0] || (access(owner, F_OK) < 0 && errno == ENOENT)) &&
		    !ids_in_use(base + k * size, size))
			free_k = k;
	}
	if (r < 0 && free_k < max && (r = claim(dfd, free_k, state_dir)) == 0)
		*first = base + free_k * size;
	close(dfd);
	if (r == -ENOSPC)
		snprintf(err, errlen, "every one of the %u blocks of jail ids is another state "
			 "directory's (in '%s')", max, dir);
	else if (r < 0)
		snprintf(err, errlen, "cannot take a block of jail ids in '%s': %s", dir,
			 strerror(-r));
	return r;
}
