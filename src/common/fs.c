/* fs: mkdir -p. */
#include "common/fs.h"

#include <errno.h>
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
