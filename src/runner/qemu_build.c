/*
 * qemu_build: keeping QEMU builds by content (qemu_build.h).
 */
#include "runner/qemu_build.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define MODULES "lib/x86_64-linux-gnu/qemu"
#define MAX_FILES 32

/* What the microvm machine loads from share/qemu (qboot is its BIOS; the
 * rest are option ROMs x86 machines may load): whichever of them the
 * build has. Links are kept as the files they name. */
static const char *const firmware[] = {
	"bios-microvm.bin", "qboot.rom", "linuxboot_dma.bin", "linuxboot.bin",
	"multiboot_dma.bin", "pvh.bin", "kvmvapic.bin",
};

int qemu_build_id_ok(const char *id)
{
	if (strlen(id) != QEMU_BUILD_ID_LEN)
		return 0;
	for (const char *p = id; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return 0;
	return 1;
}

int qemu_build_has_rom_off(const struct qemu_build *b)
{
	return b->major > 8 || (b->major == 8 && b->minor >= 2);
}

static void set_version(struct qemu_build *b, const char *v)
{
	snprintf(b->version, sizeof(b->version), "%s", v);
	b->major = b->minor = 0;
	sscanf(v, "%u.%u", &b->major, &b->minor);
}

static int fill(const char *builds, const char *id, struct qemu_build *b)
{
	struct qemu_build k = { 0 };
	snprintf(k.id, sizeof(k.id), "%s", id);
	snprintf(k.dir, sizeof(k.dir), "%s/%s", builds, id);
	snprintf(k.binary, sizeof(k.binary), "%s/" QEMU_BUILD_BIN, k.dir);
	char path[PATH_MAX + 16], v[sizeof(k.version)] = "";
	snprintf(path, sizeof(path), "%s/version", k.dir);
	FILE *f = fopen(path, "re");
	if (!f)
		return -ENOENT;
	int ok = fgets(v, sizeof(v), f) != NULL;
	fclose(f);
	v[strcspn(v, "\n")] = '\0';
	if (!ok || !v[0] || access(k.binary, X_OK) < 0)
		return -ENOENT;
	set_version(&k, v);
	*b = k;
	return 0;
}

int qemu_build_find(const char *builds, const char *id, const char *version,
		    struct qemu_build *b)
{
	if (id && id[0])
		return qemu_build_id_ok(id) ? fill(builds, id, b) : -ENOENT;
	if (!version || !version[0])
		return -ENOENT;
	DIR *d = opendir(builds);
	if (!d)
		return -ENOENT;
	struct dirent *e;
	struct qemu_build k;
	int r = -ENOENT;
	while (r < 0 && (e = readdir(d)))
		if (qemu_build_id_ok(e->d_name) && fill(builds, e->d_name, &k) == 0 &&
		    !strcmp(k.version, version)) {
			*b = k;
			r = 0;
		}
	closedir(d);
	return r;
}

int qemu_build_beside(const struct qemu_build *now, const char *id, const char *version,
		      struct qemu_build *b)
{
	char builds[PATH_MAX];
	const char *slash = strrchr(now->dir, '/');
	if (!slash)
		return -ENOENT;
	snprintf(builds, sizeof(builds), "%.*s", (int)(slash - now->dir), now->dir);
	return qemu_build_find(builds, id, version, b);
}

/* binary's real path, looked up in PATH when it is a plain name. */
static int resolve(const char *binary, char out[PATH_MAX])
{
	if (strchr(binary, '/'))
		return realpath(binary, out) ? 0 : -errno;
	const char *path = getenv("PATH");
	if (!path)
		path = "/usr/bin:/bin";
	while (*path) {
		size_t n = strcspn(path, ":");
		char buf[PATH_MAX];
		snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, path, binary);
		if (access(buf, X_OK) == 0 && realpath(buf, out))
			return 0;
		path += n + (path[n] == ':');
	}
	return -ENOENT;
}

/* What `binary --version` says after "QEMU emulator version ", as QMP's
 * query-version gives it (migrate_qemu_version): "major.minor.micro
 * package". */
static int run_version(const char *binary, char *out, size_t outlen)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	char *argv[] = { (char *)binary, "--version", NULL };
	pid_t pid;
	int r = posix_spawn(&pid, binary, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (r != 0) {
		close(p[0]);
		return -r;
	}
	char buf[512];
	size_t n = 0;
	ssize_t got;
	while (n < sizeof(buf) - 1 && (got = read(p[0], buf + n, sizeof(buf) - 1 - n)) > 0)
		n += (size_t)got;
	close(p[0]);
	buf[n] = '\0';
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	buf[strcspn(buf, "\n")] = '\0';
	static const char lead[] = "QEMU emulator version ";
	if (!WIFEXITED(st) || WEXITSTATUS(st) || strncmp(buf, lead, sizeof(lead) - 1) ||
	    !buf[sizeof(lead) - 1])
		return -EPROTO;
	/* "7.2.22 (Debian 1:7.2+dfsg-7)" as QMP's "7.2.22 Debian 1:7.2+dfsg-7" */
	char *v = buf + sizeof(lead) - 1, *open = strstr(v, " ("), *end = v + strlen(v);
	if (open && end[-1] == ')') {
		end[-1] = '\0';
		memmove(open + 1, open + 2, strlen(open + 2) + 1);
	}
	snprintf(out, outlen, "%.*s", (int)outlen - 1, v);
	return 0;
}

struct file {
	char src[PATH_MAX + 64], rel[128];
	mode_t mode;
};

/* The build's files, in the order they are hashed: the binary, the
 * accelerator modules by name, the firmware in the list's order. */
static int list_files(const char *bin, struct file *f, int *nf)
{
	char prefix[PATH_MAX];
	snprintf(prefix, sizeof(prefix), "%s", bin);
	for (int up = 0; up < 2; up++) { /* <prefix>/bin/qemu-system-x86_64 */
		char *slash = strrchr(prefix, '/');
		if (!slash || slash == prefix)
			return -EINVAL;
		*slash = '\0';
	}
	int n = 0;
	snprintf(f[n].src, sizeof(f[n].src), "%s", bin);
	snprintf(f[n].rel, sizeof(f[n].rel), QEMU_BUILD_BIN);
	f[n++].mode = 0755;
	char dir[PATH_MAX];
	if (snprintf(dir, sizeof(dir), "%s/" MODULES, prefix) >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	struct dirent **names;
	int m = scandir(dir, &names, NULL, alphasort);
	for (int i = 0; i < m; i++) {
		const char *d = names[i]->d_name;
		size_t l = strlen(d);
		if (n < MAX_FILES && !strncmp(d, "accel-", 6) && l > 9 && !strcmp(d + l - 3, ".so") &&
		    strlen(d) < 64) {
			snprintf(f[n].src, sizeof(f[n].src), "%s/%s", dir, d);
			snprintf(f[n].rel, sizeof(f[n].rel), MODULES "/%s", d);
			f[n++].mode = 0644;
		}
		free(names[i]);
	}
	if (m > 0)
		free(names);
	for (size_t i = 0; i < sizeof(firmware) / sizeof(firmware[0]) && n < MAX_FILES; i++) {
		char path[PATH_MAX + 64];
		snprintf(path, sizeof(path), "%s/share/qemu/%s", prefix, firmware[i]);
		char real[PATH_MAX];
		if (!realpath(path, real))
			continue;
		snprintf(f[n].src, sizeof(f[n].src), "%s", real);
		snprintf(f[n].rel, sizeof(f[n].rel), "share/qemu/%s", firmware[i]);
		f[n++].mode = 0644;
	}
	*nf = n;
	return 0;
}

/* Hashes f's name and content into ctx, and with dst copies it there (a
 * new file). */
static int copy_hash(EVP_MD_CTX *ctx, const struct file *f, const char *dst)
{
	int in = open(f->src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	int out = dst ? open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, f->mode) : -1;
	if (dst && out < 0) {
		close(in);
		return -errno;
	}
	int r = 0;
	EVP_DigestUpdate(ctx, f->rel, strlen(f->rel) + 1);
	static char buf[1 << 16];
	ssize_t got;
	while ((got = read(in, buf, sizeof(buf))) > 0) {
		EVP_DigestUpdate(ctx, buf, (size_t)got);
		for (ssize_t off = 0; out >= 0 && off < got;) {
			ssize_t w = write(out, buf + off, (size_t)(got - off));
			if (w < 0) {
				r = -errno;
				goto done;
			}
			off += w;
		}
	}
	if (got < 0)
		r = -errno;
	else if (out >= 0 && (fchmod(out, f->mode) < 0 || fsync(out) < 0))
		r = -errno;
done:
	close(in);
	if (out >= 0)
		close(out);
	return r;
}

/* The build's id from its files, copied into dir on the way unless dir
 * is NULL. 0 or -errno with a reason. */
static int hash_files(const struct file *f, int nf, const char *dir, char id[QEMU_BUILD_ID_LEN + 1],
		      char *err, size_t errlen)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		snprintf(err, errlen, "no SHA-256");
		return -ENOMEM;
	}
	int r = 0;
	for (int i = 0; r == 0 && i < nf; i++) {
		char dst[PATH_MAX + 160];
		if (dir)
			snprintf(dst, sizeof(dst), "%s/%s", dir, f[i].rel);
		if ((r = copy_hash(ctx, &f[i], dir ? dst : NULL)) < 0)
			snprintf(err, errlen, "cannot %s '%s'%s%s: %s", dir ? "copy" : "read", f[i].src,
				 dir ? " to " : "", dir ? dst : "", strerror(-r));
	}
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned len = 0;
	if (r == 0 && (EVP_DigestFinal_ex(ctx, md, &len) != 1 || len != 32)) {
		snprintf(err, errlen, "no SHA-256");
		r = -EIO;
	}
	EVP_MD_CTX_free(ctx);
	for (int i = 0; r == 0 && i < QEMU_BUILD_ID_LEN / 2; i++)
		snprintf(id + 2 * i, 3, "%02x", md[i]);
	return r;
}

static void remove_tree(const char *dir, const struct file *f, int nf)
{
	char path[PATH_MAX + 160];
	for (int i = 0; i < nf; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, f[i].rel);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/version", dir);
	unlink(path);
	static const char *const dirs[] = { MODULES, "lib/x86_64-linux-gnu", "lib", "share/qemu",
					    "share", "bin", "" };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, dirs[i]);
		rmdir(path);
	}
}

static int make_dirs(const char *dir)
{
	static const char *const dirs[] = { "", "bin", "lib", "lib/x86_64-linux-gnu", MODULES,
					    "share", "share/qemu" };
	char path[PATH_MAX + 64];
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, dirs[i]);
		if (mkdir(path, 0755) < 0 || chmod(path, 0755) < 0) /* whatever the umask */
			return -errno;
	}
	return 0;
}

int qemu_build_keep(const char *builds, const char *binary, struct qemu_build *b, char *err,
		    size_t errlen)
{
	char bin[PATH_MAX], version[128];
	int r = resolve(binary, bin);
	if (r < 0) {
		snprintf(err, errlen, "cannot find QEMU binary '%s' (apt-get install qemu-system-x86)",
			 binary);
		return r;
	}
	/* A wrapper script (tests put one in QEMU's place) is run as it
	 * is: what it runs is not known here. */
	unsigned char magic[4] = { 0 };
	int fd = open(bin, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (read(fd, magic, sizeof(magic)) < 0)
			magic[0] = 0;
		close(fd);
	}
	if (memcmp(magic, "\x7f" "ELF", 4)) {
		snprintf(err, errlen, "'%s' is not an ELF binary", bin);
		return -ENOEXEC;
	}
	if ((r = run_version(bin, version, sizeof(version))) < 0) {
		snprintf(err, errlen, "'%s --version' did not say which QEMU it is", bin);
		return r;
	}
	static struct file f[MAX_FILES];
	int nf;
	if ((r = list_files(bin, f, &nf)) < 0) {
		snprintf(err, errlen, "'%s' is not in a bin directory", bin);
		return r;
	}
	/* Kept already (the usual start): read, not copied again. */
	char id[QEMU_BUILD_ID_LEN + 1], copied[QEMU_BUILD_ID_LEN + 1];
	if ((r = hash_files(f, nf, NULL, id, err, errlen)) < 0)
		return r;
	if (fill(builds, id, b) == 0)
		return 0;
	if (mkdir(builds, 0755) < 0 && errno != EEXIST) {
		snprintf(err, errlen, "cannot create '%s': %s", builds, strerror(errno));
		return -errno;
	}
	char tmp[PATH_MAX], dst[PATH_MAX + 160];
	snprintf(tmp, sizeof(tmp), "%s/.new-%d", builds, (int)getpid());
	remove_tree(tmp, f, nf); /* what a crash of this process left */
	if ((r = make_dirs(tmp)) < 0)
		snprintf(err, errlen, "cannot create '%s': %s", tmp, strerror(-r));
	if (r == 0 && (r = hash_files(f, nf, tmp, copied, err, errlen)) == 0 && strcmp(id, copied)) {
		snprintf(err, errlen, "'%s' changed while it was kept (an upgrade?)", bin);
		r = -EAGAIN;
	}
	if (r == 0) {
		snprintf(dst, sizeof(dst), "%s/version", tmp);
		FILE *vf = fopen(dst, "wxe");
		if (!vf || fprintf(vf, "%s\n", version) < 0 || fflush(vf) != 0 || fsync(fileno(vf)) < 0)
			r = -EIO;
		if (vf && fclose(vf) != 0)
			r = -EIO;
		if (r < 0)
			snprintf(err, errlen, "cannot write '%s'", dst);
	}
	if (r == 0) {
		snprintf(dst, sizeof(dst), "%s/%s", builds, id);
		/* Kept by another daemon meanwhile: that one. */
		if (rename(tmp, dst) < 0 && errno != EEXIST && errno != ENOTEMPTY) {
			snprintf(err, errlen, "cannot keep '%s' as '%s': %s", bin, dst,
				 strerror(errno));
			r = -errno;
		}
		int dfd = open(builds, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			fsync(dfd);
			close(dfd);
		}
	}
	remove_tree(tmp, f, nf);
	if (r < 0)
		return r;
	if ((r = fill(builds, id, b)) < 0)
		snprintf(err, errlen, "the build kept in '%s' is incomplete", dst);
	return r;
}
