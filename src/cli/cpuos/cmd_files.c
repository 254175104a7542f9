/*
 * cmd_files: cp and file listings. Uploads are read from the file as curl
 * sends them and downloads written as they arrive, so a file of any size
 * costs a few buffers of memory.
 */
#include "cli/cpuos/cmd_files.h"
#include "cli/cpuos/cli.h"
#include "cli/cpuos/http.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char cp_usage[] =
    "usage: cpuos cp [options] LOCAL SANDBOX:/PATH\n"
    "       cpuos cp [-r] SANDBOX:/PATH LOCAL\n"
    "Copies a file (with -r, a directory) into or out of a sandbox. LOCAL '-' is standard input or\n"
    "output. A PATH ending in '/' or a LOCAL directory takes the source's name.\n"
    "Missing parent directories in the sandbox are created. A local path with\n"
    "a ':' before any '/' must be written ./NAME.\n"
    "\n"
    "  -r, --recursive         copy a directory and everything under it (as a tar\n"
    "                          stream; the local tar packs or unpacks it)\n"
    "  -u, --user USER         owner in the sandbox: user or root (default user)\n"
    "      --mode MODE         octal mode in the sandbox (default: the local\n"
    "                          file's, 0644 for standard input)\n";

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

static int upload(struct api *a, const char *local, const char *id, const char *rpath,
		  const char *user, const char *mode)
{
	char target[PATH_MAX + 256], mode_s[8];
	int fd = 0, ret = EXIT_API;
	struct apath p;
	struct stat st;

	if (strcmp(local, "-") && (fd = open(local, O_RDONLY | O_CLOEXEC)) < 0) {
		cli_err("cannot open '%s': %s", local, strerror(errno));
		return EXIT_API;
	}
	if (fstat(fd, &st) < 0) {
		cli_err("cannot stat '%s': %s", local, strerror(errno));
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		cli_err("cannot copy '%s': Is a directory", local);
		goto out;
	}
	if (*rpath && rpath[strlen(rpath) - 1] == '/') {
		if (fd == 0) {
			cli_err("'%s:%s' needs a file name when copying standard input", id, rpath);
			goto out;
		}
		snprintf(target, sizeof(target), "%s%s", rpath, base_name(local));
		rpath = target;
	}
	if (!mode && S_ISREG(st.st_mode) && fd != 0) {
		snprintf(mode_s, sizeof(mode_s), "%04o", (unsigned)(st.st_mode & 07777));
		mode = mode_s;
	}
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, id);
	apath_add(&p, "/files");
	apath_query(&p, "path", rpath);
	if (mode)
		apath_query(&p, "mode", mode);
	if (user)
		apath_query(&p, "user", user);
	if (api_upload(a, "PUT", &p, fd, NULL) < 0) {
		cli_api_fail(a);
		goto out;
	}
	ret = 0;
out:
	if (fd > 0)
		close(fd);
	return ret;
}

/* Starts the local tar with argv, its stdin (to_tar) or stdout the other
 * end of a pipe returned in *fd: its pid, or -1 after saying why. */
pid_t cli_tar_start(char *const argv[], int to_tar, int *fd)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		cli_err("cannot make a pipe: %s", strerror(errno));
		return -1;
	}
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[to_tar ? 0 : 1], to_tar ? 0 : 1);
		execvp("tar", argv);
		fprintf(stderr, "cpuos: cannot run tar: %s\n", strerror(errno));
		_exit(127);
	}
	close(p[to_tar ? 0 : 1]);
	if (pid < 0) {
		close(p[to_tar ? 1 : 0]);
		cli_err("cannot start tar: %s", strerror(errno));
		return -1;
	}
	*fd = p[to_tar ? 1 : 0];
	return pid;
}

/* Waits for the local tar: 0 when it succeeded, else -1 after saying so. */
int cli_tar_end(pid_t pid)
{
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	cli_err("the local tar failed (%s %d)", WIFEXITED(status) ? "status" : "signal",
		WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
	return -1;
}

/* cp -r LOCAL SANDBOX:/PATH: LOCAL's contents into PATH (PATH/NAME for a
 * PATH ending in '/'), made if missing. */
static int upload_dir(struct api *a, const char *local, const char *id, const char *rpath,
		      const char *user)
{
	char target[PATH_MAX + 256];
	struct stat st;
	if (stat(local, &st) < 0 || !S_ISDIR(st.st_mode)) {
		cli_err("'%s' is not a directory", local);
		return EXIT_API;
	}
	if (*rpath && rpath[strlen(rpath) - 1] == '/') {
		char copy[PATH_MAX];
		snprintf(copy, sizeof(copy), "%s", local);
		size_t n = strlen(copy);
		while (n > 1 && copy[n - 1] == '/')
			copy[--n] = '\0';
		snprintf(target, sizeof(target), "%s%s", rpath, base_name(copy));
		rpath = target;
	}
	char *argv[] = { "tar", "-C", (char *)local, "-cf", "-", ".", NULL };
	int fd;
	pid_t pid = cli_tar_start(argv, 0, &fd);
	if (pid < 0)
		return EXIT_API;
	struct apath p;
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, id);
	apath_add(&p, "/files/archive");
	apath_query(&p, "path", rpath);
	if (user)
		apath_query(&p, "user", user);
	int r = api_upload(a, "PUT", &p, fd, NULL);
	close(fd);
	int t = cli_tar_end(pid);
	if (r < 0) {
		cli_api_fail(a);
		return EXIT_API;
	}
	return t < 0 ? EXIT_API : 0;
}

struct untar {
	const char *dest;
	pid_t pid; /* 0 until the first byte */
	int fd;
};

/* The local tar starts on the first byte (and the directory is made
 * then), so that a refused download leaves nothing behind. */
static int tar_sink(void *arg, const char *p, size_t n)
{
	struct untar *u = arg;
	if (!u->pid) {
		if (mkdir(u->dest, 0777) < 0 && errno != EEXIST)
			return -errno;
		/* What the guest sends is the guest's: no owners, no setuid
		 * bits, nothing over a directory that is there (even as root). */
		char *argv[] = { "tar", "-C", (char *)u->dest, "-xf", "-", "--no-same-owner",
				 "--no-same-permissions", "--no-overwrite-dir", NULL };
		if ((u->pid = cli_tar_start(argv, 1, &u->fd)) < 0)
			return -EIO;
	}
	while (n) {
		ssize_t w = write(u->fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* cp -r SANDBOX:/PATH LOCAL: PATH's contents into LOCAL (LOCAL/NAME when
 * LOCAL is a directory already), made if missing. */
static int download_dir(struct api *a, const char *id, const char *rpath, const char *local)
{
	char target[PATH_MAX + 256];
	struct stat st;
	if (stat(local, &st) == 0 && S_ISDIR(st.st_mode)) {
		char copy[PATH_MAX];
		snprintf(copy, sizeof(copy), "%s", rpath);
		size_t n = strlen(copy);
		while (n > 1 && copy[n - 1] == '/')
			copy[--n] = '\0';
		const char *name = base_name(copy);
		snprintf(target, sizeof(target), "%s/%s", local, *name ? name : "root");
		local = target;
	}
	struct untar u = { .dest = local, .fd = -1 };
	struct apath p;
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, id);
	apath_add(&p, "/files/archive");
	apath_query(&p, "path", rpath);
	signal(SIGPIPE, SIG_IGN); /* a tar that gave up: its error says why */
	int r = api_download(a, &p, tar_sink, &u);
	if (u.fd >= 0)
		close(u.fd);
	int t = u.pid > 0 ? cli_tar_end(u.pid) : 0;
	if (r < 0 && api_error(a)[0])
		cli_api_fail(a);
	else if (r < 0)
		cli_err("cannot unpack into '%s': %s", local, strerror(-r));
	return r < 0 || t < 0 ? EXIT_API : 0;
}

struct sink {
	const char *dest; /* NULL: stdout */
	int fd;
	int created;
};

/* Opens the destination on the first byte, so that a refused download
 * (404, a directory) never truncates or creates the local file. */
static int sink_open(struct sink *s)
{
	if (s->fd >= 0)
		return 0;
	if (!s->dest) {
		s->fd = 1;
		return 0;
	}
	s->fd = open(s->dest, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (s->fd < 0)
		return -errno;
	s->created = 1;
	return 0;
}

static int sink_write(void *arg, const char *p, size_t n)
{
	struct sink *s = arg;
	int r = sink_open(s);
	if (r < 0)
		return r;
	while (n) {
		ssize_t w = write(s->fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int download(struct api *a, const char *id, const char *rpath, const char *local)
{
	char target[PATH_MAX + 256];
	struct sink s = {.fd = -1};
	struct apath p;
	struct stat st;
	int r;

	if (strcmp(local, "-")) {
		s.dest = local;
		if (stat(local, &st) == 0 && S_ISDIR(st.st_mode)) {
			const char *name = base_name(rpath);
			if (!*name) {
				cli_err("'%s:%s' is not a file name", id, rpath);
				return EXIT_API;
			}
			snprintf(target, sizeof(target), "%s/%s", local, name);
			s.dest = target;
		}
	}
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, id);
	apath_add(&p, "/files");
	apath_query(&p, "path", rpath);
	r = api_download(a, &p, sink_write, &s);
	if (r == 0)
		r = sink_open(&s); /* an empty file */
	if (s.fd > 1 && close(s.fd) < 0 && r == 0)
		r = -errno;
	if (r == 0)
		return 0;
	if (api_error(a)[0])
		cli_api_fail(a);
	else
		cli_err("cannot write '%s': %s", s.dest ? s.dest : "standard output", strerror(-r));
	/* A partial copy would pass for the whole file. */
	if (s.created)
		unlink(s.dest);
	return EXIT_API;
}

int cmd_cp(struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"recursive", no_argument, 0, 'r'},
	    {"user", required_argument, 0, 'u'},
	    {"mode", required_argument, 0, 'M'},
	    {"help", no_argument, 0, 'h'},
	    {0, 0, 0, 0},
	};
	const char *user = NULL, *mode = NULL, *spath, *dpath;
	char sid[256], did[256];
	int o, recursive = 0;
	struct api *a;

	optind = 0;
	while ((o = getopt_long(argc, argv, "ru:h", opts, NULL)) != -1) {
		switch (o) {
		case 'r':
			recursive = 1;
			break;
		case 'u':
			user = optarg;
			break;
		case 'M':
			if (strlen(optarg) > 5 || strspn(optarg, "01234567") != strlen(optarg) ||
			    !*optarg)
				return cli_usage_err("cp", "invalid --mode '%s' (octal)", optarg);
			mode = optarg;
			break;
		case 'h':
			fputs(cp_usage, stdout);
			return 0;
		default:
			fputs(cp_usage, stderr);
			return EXIT_USAGE;
		}
	}
	if (argc - optind != 2)
		return cli_usage_err("cp", "expected a source and a destination");
	const char *src = argv[optind], *dst = argv[optind + 1];
	int sremote = cli_remote(src, sid, sizeof(sid), &spath);
	int dremote = cli_remote(dst, did, sizeof(did), &dpath);
	if (sremote == dremote)
		return cli_usage_err("cp", "exactly one of source and destination must be "
					   "SANDBOX:/PATH");
	if (recursive && (!strcmp(src, "-") || !strcmp(dst, "-") || mode))
		return cli_usage_err("cp", "-r copies directories: not '-', nor with --mode");
	if (!(a = cli_api(c)))
		return EXIT_API;
	if (recursive)
		return dremote ? upload_dir(a, src, did, dpath, user) : download_dir(a, sid, spath, dst);
	if (dremote)
		return upload(a, src, did, dpath, user, mode);
	return download(a, sid, spath, dst);
}

/* "drwxr-xr-x" from an entry's type and octal mode. */
static void mode_string(const json_t *e, char out[11])
{
	const char *type = cli_str(e, "type");
	unsigned long m = strtoul(cli_str(e, "mode"), NULL, 8);
	out[0] = !strcmp(type, "dir")	    ? 'd'
		 : !strcmp(type, "symlink") ? 'l'
		 : !strcmp(type, "file")    ? '-'
					    : '?';
	for (int i = 0; i < 9; i++)
		out[1 + i] = (m >> (8 - i)) & 1 ? "rwxrwxrwx"[i] : '-';
	out[10] = '\0';
}

int files_ls(struct cli *c, const char *id, const char *path, unsigned depth, int json)
{
	json_t *list = NULL, *rows = json_array(), *e;
	int ret = EXIT_API;
	char depth_s[16], size[32], mode[11], name[PATH_MAX + 300];
	struct api *a;
	struct apath p;
	size_t i;

	if (!rows || !(a = cli_api(c)))
		goto out;
	apath_init(&p, "/v1/sandboxes");
	apath_seg(&p, id);
	apath_add(&p, "/files/list");
	apath_query(&p, "path", path);
	if (depth) {
		snprintf(depth_s, sizeof(depth_s), "%u", depth);
		apath_query(&p, "depth", depth_s);
	}
	if (api_json(a, "GET", &p, NULL, &list) < 0) {
		ret = cli_api_fail(a);
		goto out;
	}
	ret = 0;
	if (json) {
		cli_print_json(list);
		goto out;
	}
	json_array_foreach(json_object_get(list, "entries"), i, e)
	{
		mode_string(e, mode);
		snprintf(size, sizeof(size), "%lld",
			 (long long)json_integer_value(json_object_get(e, "size")));
		/* Deeper listings name entries by path, or names would repeat. */
		snprintf(name, sizeof(name), "%s%s%s", cli_str(e, depth > 1 ? "path" : "name"),
			 json_object_get(e, "target") ? " -> " : "",
			 json_object_get(e, "target") ? cli_str(e, "target") : "");
		json_array_append_new(rows,
				      json_pack("[ssss]", mode, size, cli_str(e, "mtime"), name));
	}
	static const char *const hdr[] = {"MODE", "SIZE", "MTIME", "NAME"};
	cli_table(hdr, 4, rows);
out:
	json_decref(list);
	json_decref(rows);
	return ret;
}
