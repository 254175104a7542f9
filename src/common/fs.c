/* fs: mkdir -p and the last line of a log. */
#include "common/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_mkdir_p(const char *path, mode_t mode, uid_t uid, gid_t gid)
{
	char dir[PATH_MAX];
	struct stat st;
	size_t n = strlen(path);
	if (n == 0 || n >= sizeof(dir))
		return n ? -ENAMETOOLONG : -ENOENT;
	memcpy(dir, path, n + 1);
	if (stat(dir, &st) == 0)
		return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
	/* Walk down from the root, creating what is missing. */
	for (char *p = dir + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char saved = *p;
		*p = '\0';
		int r = 0;
		if (mkdir(dir, mode) == 0) {
			if (uid != (uid_t)-1 && chown(dir, uid, gid) < 0)
				r = -errno;
		} else if (errno != EEXIST) {
			r = -errno;
		} else if (stat(dir, &st) < 0) {
			r = -errno;
		} else if (!S_ISDIR(st.st_mode)) {
			r = -ENOTDIR;
		}
		*p = saved;
		if (r < 0 || saved == '\0')
			return r;
	}
}

int fs_open_file(const char *path, int flags, mode_t mode)
{
	/* O_NONBLOCK: a FIFO opens at once (or fails: ENXIO), to be seen
	 * for what it is; a regular file ignores it, and loses it after. */
	int fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	struct stat st;
	int r = fstat(fd, &st) < 0 ? -errno : !S_ISREG(st.st_mode) ? -EINVAL : 0;
	int fl = r == 0 ? fcntl(fd, F_GETFL) : 0;
	if (r == 0 && !(flags & O_NONBLOCK) && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0))
		r = -errno;
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

int fs_last_line(const char *path, char *out, size_t len)
{
	char buf[4096];
	out[0] = '\0';
	int fd = fs_open_file(path, O_RDONLY, 0);
	if (fd < 0)
		return fd;
	off_t end = lseek(fd, 0, SEEK_END);
	off_t from = end > (off_t)sizeof(buf) - 1 ? end - (off_t)sizeof(buf) + 1 : 0;
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, from);
	close(fd);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	if (n <= 0)
		return -ENODATA;
	buf[n] = '\0';
	char *last = strrchr(buf, '\n');
	snprintf(out, len, "%s", last ? last + 1 : buf);
	return 0;
}

int fs_pwrite_sparse(int fd, const void *p, size_t n, unsigned long long off)
{
	static const char zero[4096];
	const char *c = p;
	while (n > 0) {
		size_t chunk = sizeof(zero) - (size_t)(off % sizeof(zero));
		if (chunk > n)
			chunk = n;
		if (chunk < sizeof(zero) || memcmp(c, zero, chunk)) {
			for (size_t done = 0; done < chunk;) {
				ssize_t w = pwrite(fd, c + done, chunk - done, (off_t)(off + done));
				if (w < 0 && errno == EINTR)
					continue;
				if (w <= 0)
					return w < 0 ? -errno : -EIO;
				done += (size_t)w;
			}
		}
		c += chunk;
		n -= chunk;
		off += chunk;
	}
	return 0;
}

/* errbuf_set's contract, here for the agent, which links no more of
 * common than it uses */
static int say(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int say(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (err && errlen)
		vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return code;
}

int fs_read_secret(const char *path, char *out, size_t cap, char *err, size_t errlen)
{
	int fd = fs_open_file(path, O_RDONLY, 0);
	if (fd < 0)
		return say(err, errlen, fd, "cannot open '%s': %s", path, strerror(-fd));
	struct stat st;
	ssize_t n = -1;
	int r = 0;
	if (fstat(fd, &st) < 0)
		r = say(err, errlen, -errno, "cannot stat '%s': %s", path, strerror(errno));
	else if (st.st_mode & 077)
		r = say(err, errlen, -EPERM, "'%s' may be read by others than its owner "
				"(chmod 600 it)", path);
	else if ((n = read(fd, out, cap)) < 0)
		r = say(err, errlen, -errno, "cannot read '%s': %s", path, strerror(errno));
	close(fd);
	if (r)
		return r;
	while (n > 0 && strchr(" \t\r\n", out[n - 1]))
		n--;
	int ok = n >= 32 && (size_t)n < cap;
	for (ssize_t i = 0; ok && i < n; i++)
		ok = out[i] > ' ' && out[i] < 0x7f;
	if (!ok) {
		explicit_bzero(out, cap);
		return say(err, errlen, -EINVAL, "'%s' must hold one line of 32 to %zu visible "
				"ASCII characters", path, cap - 1);
	}
	out[n] = '\0';
	return 0;
}
