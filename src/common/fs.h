/*
 * fs: small file system helpers every program needs the same way.
 */
#ifndef CPUOS_FS_H
#define CPUOS_FS_H

#include <stddef.h>
#include <sys/types.h>

/* mkdir -p: creates path and its missing ancestors with mode (the umask
 * applies), each new one chowned to uid:gid unless uid is (uid_t)-1.
 * 0, -ENOTDIR when a component is not a directory, -ENAMETOOLONG, -errno. */
int fs_mkdir_p(const char *path, mode_t mode, uid_t uid, gid_t gid);

/* Opens a regular file at path (flags as open's, O_CLOEXEC added): a
 * symlink is not followed (-ELOOP) and anything else that is not a regular
 * file, a FIFO above all, is refused (-EINVAL) without blocking on it. For
 * files in directories that a jailed QEMU may write. A descriptor or -errno. */
int fs_open_file(const char *path, int flags, mode_t mode);

/* The last non-empty line of the file at path (a log's last word: why a
 * program refused to start or died), read from its last 4 KiB into out:
 * 0, or -errno (-ENODATA when the file holds no line, -ELOOP for a
 * symlink, which is not followed) with out empty. */
int fs_last_line(const char *path, char *out, size_t len);

/* Writes p[0..n) at offset off of fd, leaving a hole for each aligned
 * 4 KiB of zeros (a file being filled from its start, whose size the
 * caller sets at the end with ftruncate): a RAM file takes on disk what
 * it held. 0 or -errno. */
int fs_pwrite_sparse(int fd, const void *p, size_t n, unsigned long long off);

/* A secret shared by the programs of a cluster, from the file at path: its
 * one line of 32..cap-1 visible ASCII bytes (a header's value), trailing
 * whitespace cut. The file must be a regular file that only its owner may
 * read or write. 0 with out filled, or -errno with a reason in err. */
int fs_read_secret(const char *path, char *out, size_t cap, char *err, size_t errlen);

#endif
