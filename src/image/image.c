/*
 * image: a template from an image (image.h): the guest's needs added to an
 * unpacked tree, and the whole import run in a child of its own.
 */
#include "image/image.h"
#include "image/image_impl.h"

#include "common/errbuf.h"
#include "common/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEFAULT_MAX_BYTES (4ULL << 30)
#define DEFAULT_TIMEOUT_S 1800
#define MAX_PASSWD	  (1 << 20)
#define FIRST_UID	  1000

/* Whether path is an executable file in the guest's view: symlinks
 * followed as the guest would, inside root. */
static int has_exec(int root, const char *path)
{
	int fd = image__open(root, path, O_PATH, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
	if (fd < 0)
		return 0;
	struct stat st;
	int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111);
	close(fd);
	return ok;
}

/* A directory the guest needs, made when the image has none. */
static int need_dir(int root, const char *path, mode_t mode, uid_t uid, gid_t gid, int *made)
{
	*made = 0;
	int fd = image__open(root, path, O_PATH | O_DIRECTORY, IMAGE_STRICT);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	if (fd != -ENOENT)
		return fd;
	if (mkdirat(root, path, 0700) < 0)
		return -errno;
	if ((fd = image__open(root, path, O_RDONLY | O_DIRECTORY, IMAGE_STRICT)) < 0)
		return fd;
	int r = fchown(fd, uid, gid) < 0 || fchmod(fd, mode) < 0 ? -errno : 0;
	close(fd);
	*made = r == 0;
	return r;
}

/* The file at path in root read whole (at most MAX_PASSWD), "" when absent. */
static int read_small(int root, const char *path, char **out)
{
	*out = NULL;
	int fd = image__open(root, path, O_RDONLY, IMAGE_STRICT);
	if (fd == -ENOENT)
		return (*out = strdup("")) ? 0 : -ENOMEM;
	if (fd < 0)
		return fd;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_PASSWD) {
		close(fd);
		return -EINVAL;
	}
	char *buf = malloc((size_t)st.st_size + 1);
	ssize_t n = buf ? read(fd, buf, (size_t)st.st_size) : -1;
	close(fd);
	if (n < 0) {
		free(buf);
		return -EIO;
	}
	buf[n] = '\0';
	*out = buf;
	return 0;
}

/* Field 3 (an id) of the line of name in a passwd or group file, or -1;
 * the largest id below 60000 in *top. */
static long find_id(const char *text, const char *name, long *top, long *gid)
{
	long found = -1;
	size_t nl = strlen(name);
	for (const char *l = text; *l;) {
		const char *end = strchrnul(l, '\n');
		const char *c1 = memchr(l, ':', (size_t)(end - l));
		const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
		if (c2) {
			char *e;
			long id = strtol(c2 + 1, &e, 10);
			if (e != c2 + 1 && id >= 0) {
				if (id < 60000 && id > *top)
					*top = id;
				if ((size_t)(c1 - l) == nl && !strncmp(l, name, nl)) {
					found = id;
					if (gid && *e == ':')
						*gid = strtol(e + 1, NULL, 10);
				}
			}
		}
		l = *end ? end + 1 : end;
	}
	return found;
}

static int append(int root, const char *path, const char *text, const char *line)
{
	int fd = image__open(root, path, O_WRONLY | O_APPEND | O_CREAT, IMAGE_STRICT);
	if (fd < 0)
		return fd;
	size_t n = strlen(text);
	int r = 0;
	/* A last line without its newline gets one first. */
	if ((n && text[n - 1] != '\n' && write(fd, "\n", 1) != 1) ||
	    write(fd, line, strlen(line)) != (ssize_t)strlen(line))
		r = -EIO;
	close(fd);
	return r;
}

int image_guest_needs(int root, json_t *config, char *err, size_t errlen)
{
	int made, r;
	char *passwd = NULL, *group = NULL;
	const struct { const char *path; mode_t mode; } dirs[] = {
		{ "tmp", 01777 }, { "run", 0755 }, { "etc", 0755 }, { "home", 0755 },
	};
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		if ((r = need_dir(root, dirs[i].path, dirs[i].mode, 0, 0, &made)) < 0)
			return errbuf_set(err, errlen, r == -ELOOP || r == -ENOTDIR ? -EINVAL : r,
					  "the image's /%s is not a directory", dirs[i].path);
	if ((r = read_small(root, "etc/passwd", &passwd)) < 0 ||
	    (r = read_small(root, "etc/group", &group)) < 0) {
		free(passwd);
		return errbuf_set(err, errlen, -EINVAL,
				  "the image's /etc/passwd or /etc/group is not a small plain file");
	}
	long top_uid = FIRST_UID - 1, top_gid = FIRST_UID - 1, gid = -1;
	long uid = find_id(passwd, "user", &top_uid, &gid);
	int added = uid < 0;
	if (added) {
		long g = find_id(group, "user", &top_gid, NULL);
		uid = top_uid + 1;
		gid = g >= 0 ? g : top_gid + 1;
		const char *shell = has_exec(root, "bin/sh") ? "/bin/sh" : "/sbin/nologin";
		char line[256];
		snprintf(line, sizeof(line), "user:x:%ld:%ld:cpuos:/home/user:%s\n", uid, gid, shell);
		r = append(root, "etc/passwd", passwd, line);
		if (r == 0 && g < 0) {
			snprintf(line, sizeof(line), "user:x:%ld:\n", gid);
			r = append(root, "etc/group", group, line);
		}
		if (r == 0)
			r = need_dir(root, "home/user", 0750, (uid_t)uid, (gid_t)gid, &made);
	}
	free(passwd);
	free(group);
	if (r < 0)
		return errbuf_set(err, errlen, r, "cannot add the 'user' account: %s", strerror(-r));
	if (uid >= (long)IMAGE_ID_COUNT || gid < 0 || gid >= (long)IMAGE_ID_COUNT)
		return errbuf_set(err, errlen, -EINVAL, "the image's 'user' has ids outside 0-65535");
	if ((r = need_dir(root, "work", 0755, (uid_t)uid, (gid_t)gid, &made)) < 0)
		return errbuf_set(err, errlen, r == -ELOOP || r == -ENOTDIR ? -EINVAL : r,
				  "the image's /work is not a directory");
	/* The WORKDIR, made where the image lacks it, as docker run does. */
	const char *wd = json_string_value(json_object_get(config, "workdir"));
	if (wd && wd[0] == '/' && strlen(wd) < 256 && !strstr(wd, "..")) {
		char part[256];
		for (const char *p = wd + 1; r == 0 && *p; ) {
			const char *end = strchrnul(p, '/');
			snprintf(part, sizeof(part), "%.*s", (int)(end - wd - 1), wd + 1);
			if (end > p)
				r = need_dir(root, part, 0755, 0, 0, &made);
			p = *end ? end + 1 : end;
		}
		if (r < 0)
			return errbuf_set(err, errlen, r == -ELOOP || r == -ENOTDIR ? -EINVAL : r,
					  "the image's WORKDIR '%s' is not a directory", wd);
	}
	static const char *const pythons[] = { "usr/bin/python3", "usr/local/bin/python3", "bin/python3" };
	int py = 0;
	for (size_t i = 0; i < 3 && !py; i++)
		py = has_exec(root, pythons[i]);
	json_object_set_new(config, "user_added", json_boolean(added));
	json_object_set_new(config, "has_sh", json_boolean(has_exec(root, "bin/sh")));
	json_object_set_new(config, "has_python3", json_boolean(py));
	return 0;
}

/* ---- the import's child ---- */

struct job {
	int workfd, srcfd, errfd;
	const struct image_limits *lim;
	unsigned long long max;
};

/* mkfs.erofs ends with the import's child (its timeout's SIGALRM). */
static int die_with_parent(const void *arg)
{
	(void)arg;
	return prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 ? -errno : 0;
}

/* mkfs.erofs in the work directory, our current one. */
static int run_mkfs(int wfd, char *err, size_t errlen)
{
	int log = openat(wfd, "mkfs.log", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	/* mtimes kept (Python's .pyc), uncompressed (TCG), /dev the guest's:
	 * as guest/templates/build.sh makes the built-in ones. */
	char *argv[] = { "mkfs.erofs", "--quiet", "--exclude-regex=^dev/.+", "image.erofs", "root",
			 NULL };
	struct spawn_opts o = { .argv = argv, .fd = { -1, log, log }, .pre_exec = die_with_parent };
	pid_t pid;
	int r = spawn(&o, &pid), st = 0;
	if (r == 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		close(log);
		return 0;
	}
	char last[300] = "";
	ssize_t n = log >= 0 ? pread(log, last, sizeof(last) - 1, 0) : -1;
	if (n > 0) {
		last[n] = '\0';
		last[strcspn(last, "\n")] = '\0';
	}
	if (log >= 0)
		close(log);
	return errbuf_set(err, errlen, -EIO, "mkfs.erofs failed%s%s", *last ? ": " : "",
			  r < 0 ? strerror(-r) : last);
}

static void child_fail(int errfd, int r, const char *err)
{
	dprintf(errfd, "%d %s", r, err);
	_exit(1);
}

static void child(const struct job *j, int syncfd, int gofd)
{
	char err[600] = "";
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* mkfs.erofs takes paths and walks up from them to "/", through
	 * directories closed to this namespace's root (a daemon's state
	 * directory): the work directory is bound at /tmp in a mount
	 * namespace of the import's own, made while this is still the host's
	 * root, so no one in the import's user namespace may change it. */
	int tree = open_tree(j->workfd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	if (tree < 0 || unshare(CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    move_mount(tree, "", AT_FDCWD, "/tmp", MOVE_MOUNT_F_EMPTY_PATH) < 0) {
		snprintf(err, sizeof(err), "cannot bind the import's directory: %s", strerror(errno));
		child_fail(j->errfd, -errno, err);
	}
	close(tree);
	if (unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) < 0) {
		snprintf(err, sizeof(err), "cannot make the import's namespaces: %s", strerror(errno));
		child_fail(j->errfd, -errno, err);
	}
	char c = 1;
	if (write(syncfd, &c, 1) != 1 || read(gofd, &c, 1) != 1 || c != 1)
		_exit(2); /* the parent said why */
	if (setresgid(0, 0, 0) < 0 || setgroups(0, NULL) < 0 || setresuid(0, 0, 0) < 0 ||
	    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		child_fail(j->errfd, -EPERM, "cannot become the namespace's root");
	/* No file grows past the limit (a sparse one included), no core. */
	struct rlimit fsz = { j->max + (64ULL << 20), j->max + (64ULL << 20) }, core = { 0, 0 };
	setrlimit(RLIMIT_FSIZE, &fsz);
	setrlimit(RLIMIT_CORE, &core);
	signal(SIGXFSZ, SIG_IGN); /* EFBIG from write, reported as such */
	alarm(j->lim && j->lim->timeout_s ? j->lim->timeout_s : DEFAULT_TIMEOUT_S);
	/* Its descriptor, as the path's parents may be closed to this
	 * namespace's root. */
	int wfd = j->workfd;
	if (chdir("/tmp") < 0 || mkdirat(wfd, "root", 0755) < 0 || mkdirat(wfd, "stage", 0700) < 0)
		child_fail(j->errfd, -EIO, "cannot make the import's directories");
	int rootfd = openat(wfd, "root", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int stagefd = openat(wfd, "stage", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	json_t *config = NULL;
	int r = rootfd < 0 || stagefd < 0 ? -EIO
					  : image_unpack(j->srcfd, stagefd, rootfd, j->lim, &config, err,
							 sizeof(err));
	image_remove_tree(wfd, "stage");
	if (r == 0)
		r = image_guest_needs(rootfd, config, err, sizeof(err));
	if (r == 0) {
		char *text = json_dumps(config, JSON_INDENT(2) | JSON_SORT_KEYS);
		int fd = openat(wfd, "config.json", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (!text || fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
			r = errbuf_set(err, sizeof(err), -EIO, "cannot write the template's description");
		if (fd >= 0)
			close(fd);
		free(text);
	}
	if (r == 0)
		r = run_mkfs(wfd, err, sizeof(err));
	json_decref(config);
	image_remove_tree(wfd, "root");
	if (r < 0)
		child_fail(j->errfd, r, err);
	_exit(0);
}

static int write_map(pid_t pid, const char *which)
{
	char path[64], map[64];
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, which);
	int n = snprintf(map, sizeof(map), "0 %u %u\n", IMAGE_ID_BASE, IMAGE_ID_COUNT);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	int r = fd >= 0 && write(fd, map, (size_t)n) == n ? 0 : -errno;
	if (fd >= 0)
		close(fd);
	return r;
}

/* The child's result: 0, or its error (its line in err). */
static int child_result(pid_t pid, int errfd, const struct image_limits *lim, char *err,
			size_t errlen)
{
	char line[700];
	size_t got = 0;
	ssize_t n;
	while (got < sizeof(line) - 1 && (n = read(errfd, line + got, sizeof(line) - 1 - got)) > 0)
		got += (size_t)n;
	line[got] = '\0';
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
		return errbuf_set(err, errlen, -ETIMEDOUT, "the import took longer than %u s",
				  lim && lim->timeout_s ? lim->timeout_s : DEFAULT_TIMEOUT_S);
	if (WIFSIGNALED(st))
		return errbuf_set(err, errlen, -EIO, "the import's process died (signal %d)",
				  WTERMSIG(st));
	char *msg;
	long code = strtol(line, &msg, 10);
	if (code >= 0 || code < -4095 || *msg != ' ')
		return errbuf_set(err, errlen, -EIO, "the import failed");
	return errbuf_set(err, errlen, (int)code, "%s", msg + 1);
}

/* The child's output file name in the work directory, made root's and
 * moved to to in dirfd. The child owns that directory: what is there is
 * only taken when it is a plain file of the child's with one link, opened
 * without following a symlink, and changed through its descriptor. */
static int take(int workfd, const char *name, int dirfd, const char *to, char *err,
		size_t errlen)
{
	int fd = openat(workfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	int r = 0;
	if (fd < 0 || fstat(fd, &st) < 0)
		r = -errno;
	else if (!S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != IMAGE_ID_BASE)
		r = -EPERM;
	else if (fchown(fd, 0, 0) < 0 || fchmod(fd, 0644) < 0 || renameat(workfd, name, dirfd, to) < 0)
		r = -errno;
	if (fd >= 0)
		close(fd);
	return r < 0 ? errbuf_set(err, errlen, r == -EPERM ? -EIO : r, "cannot keep the import's %s as '%s': %s",
				  name, to, r == -EPERM ? "not the file it made" : strerror(-r))
		     : 0;
}

static int id_ok(const char *id)
{
	size_t n = strlen(id);
	return n && n <= 120 && id[0] != '.' &&
	       strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

int image_import_at(int srcfd, int dirfd, const char *id, const struct image_limits *lim,
		    char *err, size_t errlen)
{
	if (geteuid() != 0)
		return errbuf_set(err, errlen, -EPERM,
				  "importing an image needs root (its files keep their owners)");
	if (!id_ok(id))
		return errbuf_set(err, errlen, -EINVAL, "bad import name '%.64s'", id);
	char workdir[160], out_erofs[160], out_json[160];
	snprintf(workdir, sizeof(workdir), "%s.work", id);
	snprintf(out_erofs, sizeof(out_erofs), "%s.erofs", id);
	snprintf(out_json, sizeof(out_json), "%s.json", id);
	if (mkdirat(dirfd, workdir, 0700) < 0)
		return errbuf_set(err, errlen, -errno, "cannot make '%s': %s", workdir, strerror(errno));
	int r = 0, syncp[2] = { -1, -1 }, gop[2] = { -1, -1 }, errp[2] = { -1, -1 };
	int workfd = openat(dirfd, workdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (workfd < 0 || fchown(workfd, IMAGE_ID_BASE, IMAGE_ID_BASE) < 0 ||
	    pipe2(syncp, O_CLOEXEC) < 0 ||
	    pipe2(gop, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
		r = errbuf_set(err, errlen, -errno, "cannot prepare the import: %s", strerror(errno));
		goto out;
	}
	struct job j = { .workfd = workfd, .srcfd = srcfd, .errfd = errp[1], .lim = lim,
			 .max = lim && lim->max_bytes ? lim->max_bytes : DEFAULT_MAX_BYTES };
	pid_t pid = fork();
	if (pid < 0) {
		r = errbuf_set(err, errlen, -errno, "cannot fork: %s", strerror(errno));
		goto out;
	}
	if (pid == 0)
		child(&j, syncp[1], gop[0]);
	close(errp[1]);
	errp[1] = -1;
	char c = 0;
	close(syncp[1]);
	syncp[1] = -1;
	if (read(syncp[0], &c, 1) == 1) {
		/* Its namespace's ids: ours to give, as root. */
		if ((r = write_map(pid, "uid_map")) < 0 || (r = write_map(pid, "gid_map")) < 0) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			errbuf_set(err, errlen, r, "cannot map the import's ids: %s", strerror(-r));
			goto out;
		}
		c = 1;
		if (write(gop[1], &c, 1) != 1)
			kill(pid, SIGKILL);
	}
	if ((r = child_result(pid, errp[0], lim, err, errlen)) < 0)
		goto out;
	if ((r = take(workfd, "image.erofs", dirfd, out_erofs, err, errlen)) == 0 &&
	    (r = take(workfd, "config.json", dirfd, out_json, err, errlen)) < 0)
		unlinkat(dirfd, out_erofs, 0);
out:
	for (int i = 0; i < 2; i++) {
		if (syncp[i] >= 0)
			close(syncp[i]);
		if (gop[i] >= 0)
			close(gop[i]);
		if (errp[i] >= 0)
			close(errp[i]);
	}
	if (workfd >= 0)
		close(workfd);
	/* What the child left (a failure's tree), never followed out. */
	image_remove_tree(dirfd, workdir);
	return r;
}

int image_import(const char *archive, int dirfd, const char *id, const struct image_limits *lim,
		 char *err, size_t errlen)
{
	int srcfd = open(archive, O_RDONLY | O_CLOEXEC);
	if (srcfd < 0)
		return errbuf_set(err, errlen, errno == ENOENT ? -ENOENT : -errno, "cannot open '%s': %s",
				  archive, strerror(errno));
	int r = image_import_at(srcfd, dirfd, id, lim, err, errlen);
	close(srcfd);
	return r;
}

/* Every descriptor from 3 up closed but a, b and c (each above 2). */
static void close_all_but(int a, int b, int c)
{
	int k[3] = { a, b, c };
	for (int i = 0; i < 3; i++)
		for (int j = i + 1; j < 3; j++)
			if (k[j] < k[i]) {
				int t = k[i];
				k[i] = k[j];
				k[j] = t;
			}
	unsigned from = 3;
	for (int i = 0; i < 3; i++) {
		if ((unsigned)k[i] > from)
			close_range(from, (unsigned)k[i] - 1, 0);
		if ((unsigned)k[i] + 1 > from)
			from = (unsigned)k[i] + 1;
	}
	close_range(from, ~0u, 0);
}

int image_import_start(int srcfd, int dirfd, const char *id, const struct image_limits *lim,
		       int *resultfd, char *err, size_t errlen)
{
	if (!id_ok(id))
		return errbuf_set(err, errlen, -EINVAL, "bad import name '%.64s'", id);
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return errbuf_set(err, errlen, -errno, "cannot make a pipe: %s", strerror(errno));
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return errbuf_set(err, errlen, -e, "cannot fork: %s", strerror(e));
	}
	if (pid == 0) {
		/* The first child only forks the one that imports, and goes:
		 * that one is no one's child to wait for, and keeps none of
		 * its caller's descriptors but its three. */
		if (fork() != 0)
			_exit(0);
		setsid();
		signal(SIGPIPE, SIG_IGN);
		sigset_t all;
		sigemptyset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		close_all_but(srcfd, dirfd, p[1]);
		char e2[600] = "";
		int r = image_import_at(srcfd, dirfd, id, lim, e2, sizeof(e2));
		dprintf(p[1], "%d %s\n", r, r < 0 ? e2 : "imported");
		_exit(r < 0);
	}
	close(p[1]);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	*resultfd = p[0];
	return 0;
}

int image_import_result(int resultfd, char *err, size_t errlen)
{
	char line[700];
	size_t got = 0;
	ssize_t n;
	while (got < sizeof(line) - 1 &&
	       ((n = read(resultfd, line + got, sizeof(line) - 1 - got)) > 0 || (n < 0 && errno == EINTR)))
		if (n > 0)
			got += (size_t)n;
	line[got] = '\0';
	line[strcspn(line, "\n")] = '\0';
	char *msg;
	long code = strtol(line, &msg, 10);
	if (!got || code > 0 || code < -4095 || *msg != ' ')
		return errbuf_set(err, errlen, -EIO, "the import ended without a word");
	return code ? errbuf_set(err, errlen, (int)code, "%s", msg + 1) : 0;
}

int image_set_start(json_t *d, const char *cmd, int from_image, unsigned ready_port,
		    const char *ready_cmd, char *err, size_t errlen)
{
	if (!cmd && !from_image)
		return (ready_port || ready_cmd) ? errbuf_set(err, errlen, -EINVAL,
							      "a ready check needs a start command")
						 : 0;
	if (ready_port > 65535)
		return errbuf_set(err, errlen, -EINVAL, "ready port %u is not a port", ready_port);
	json_t *how = json_object();
	if (cmd) {
		json_object_set_new(how, "cmd", json_string(cmd));
	} else {
		json_t *argv = json_array();
		const char *keys[] = { "entrypoint", "cmd" };
		for (int k = 0; k < 2; k++) {
			size_t i;
			json_t *v;
			json_array_foreach(json_object_get(d, keys[k]), i, v) {
				json_array_append(argv, v);
			}
		}
		if (!json_array_size(argv)) {
			json_decref(argv);
			json_decref(how);
			return errbuf_set(err, errlen, -EINVAL, "the image has no ENTRYPOINT or CMD");
		}
		json_object_set_new(how, "argv", argv);
	}
	json_object_set_new(d, "start", how);
	if (ready_port)
		json_object_set_new(d, "ready", json_pack("{s:i}", "port", (int)ready_port));
	else if (ready_cmd)
		json_object_set_new(d, "ready", json_pack("{s:s}", "cmd", ready_cmd));
	return 0;
}
