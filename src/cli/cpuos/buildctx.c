/*
 * buildctx: where a Dockerfile build's files come from and go. A context
 * that is an archive is unpacked as an image's layer is (nothing outside
 * its directory, the caller's own entries), its Dockerfile opened beneath
 * it; and --remote, which sends a context to the daemon to build
 * (POST /v1/templates/NAME/build) and shows the build's log.
 */
#include "cli/cpuos/buildctx.h"
#include "cli/cpuos/cli.h"
#include "cli/cpuos/cmd_files.h"
#include "cli/cpuos/http.h"
#include "cli/cpuos/tplbuild.h"
#include "image/image.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_CONTEXT (4ULL << 30) /* an archive context or ADD, unpacked */

/* A new directory under $TMPDIR (else /tmp) named for what, into dir. */
int bctx_temp_dir(const char *what, char *dir, size_t n)
{
	const char *t = getenv("TMPDIR");
	snprintf(dir, n, "%s/cpuos-%s-XXXXXX", t && *t ? t : "/tmp", what);
	if (!mkdtemp(dir))
		return cli_err("cannot make a directory in '%s': %s", t && *t ? t : "/tmp",
			       strerror(errno)), -1;
	return 0;
}

void bctx_remove_dir(const char *dir)
{
	if (image_remove_tree(AT_FDCWD, dir) < 0)
		cli_err("cannot remove '%s'", dir);
}

/* The archive at fd (a tar, plain or compressed: a context, or what ADD
 * unpacks) into the empty directory dir, as an image's layer is: nothing
 * is made outside it, no device node, owned by us. what: for errors. */
int bctx_unpack(int fd, const char *dir, const char *what)
{
	int root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return cli_err("cannot open '%s': %s", dir, strerror(errno)), -1;
	/* The daemon's builds: what it allows an image (--image-max-mb). */
	const char *mb = getenv("CPUOS_BUILD_MAX_MB");
	unsigned long long max = mb && strtoull(mb, NULL, 10) ? strtoull(mb, NULL, 10) << 20
							      : MAX_CONTEXT;
	struct image_limits lim = { .max_bytes = max, .as_caller = 1 };
	struct image_usage used = { 0 };
	char err[512];
	int r = image_layer_apply(root, fd, &lim, &used, err, sizeof(err));
	close(root);
	if (r < 0)
		cli_err("%s: %s", what, err);
	return r < 0 ? -1 : 0;
}

/* A context that is an archive (a file, or "-": stdin), unpacked into a
 * new directory, into dir. */
int bctx_unpack_context(const char *archive, char *dir, size_t n)
{
	int fd = strcmp(archive, "-") ? open(archive, O_RDONLY | O_CLOEXEC) : dup(0);
	if (fd < 0)
		return cli_err("cannot read '%s': %s", archive, strerror(errno)), -1;
	if (lseek(fd, 0, SEEK_SET) < 0) {
		/* a pipe: kept in a file first, which the unpack may rewind */
		char tmp[PATH_MAX];
		int keep = -1;
		if (bctx_temp_dir("context", tmp, sizeof(tmp)) == 0) {
			keep = open(tmp, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
			rmdir(tmp);
		}
		char buf[65536];
		ssize_t k;
		while (keep >= 0 && (k = read(fd, buf, sizeof(buf))) > 0)
			if (write(keep, buf, (size_t)k) != k) {
				close(keep);
				keep = -1;
			}
		close(fd);
		if (keep < 0 || lseek(keep, 0, SEEK_SET) < 0)
			return cli_err("cannot keep the context read from '%s'", archive), -1;
		fd = keep;
	}
	int r = bctx_temp_dir("context", dir, n);
	if (r == 0 && (r = bctx_unpack(fd, dir, "the context")) < 0)
		bctx_remove_dir(dir);
	close(fd);
	return r;
}

/* The Dockerfile at rel in the context dir ctx, never through a symlink
 * nor out of it (what the context's sender chose is hostile), as a
 * stream. */
FILE *bctx_open(const char *ctx, const char *rel)
{
	int dfd = open(ctx, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct open_how how = { .flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS };
	int fd = dfd < 0 ? -1 : (int)syscall(SYS_openat2, dfd, rel, &how, sizeof(how));
	int e = errno;
	if (dfd >= 0)
		close(dfd);
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
			fcntl(fd, F_SETFL, O_RDONLY) < 0)) { /* a FIFO would never end */
		close(fd);
		fd = -1;
		e = EINVAL;
	}
	FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
	if (fd >= 0 && !f)
		close(fd);
	errno = fd < 0 ? (e == EXDEV || e == ELOOP ? EACCES : e) : errno;
	return f;
}

/* ---- --remote: the daemon runs the build ---- */

static int to_stderr(void *arg, const char *p, size_t n)
{
	(void)arg;
	return fwrite(p, 1, n, stderr) == n ? 0 : -1;
}

int tpl_dockerbuild_remote(struct cli *c, const char *name, const char *dockerfile,
			   const char *context, json_t *build_args, const struct tpl_start *st,
			   int no_cache)
{
	struct api *a = cli_api(c);
	if (!a)
		return EXIT_API;
	api_set_timeout(a, 0);
	/* The context as a tar: an archive as it is, a directory packed (its
	 * files' times kept, so the steps' cache keys are a local build's),
	 * with the Dockerfile added when it lies outside. */
	struct stat cst;
	char ctx[PATH_MAX], df[PATH_MAX], rel[PATH_MAX], xf[PATH_MAX + 64];
	const char *in_ctx = dockerfile;
	int fd = -1;
	pid_t pid = -1;
	if (!strcmp(context, "-") || (stat(context, &cst) == 0 && S_ISREG(cst.st_mode))) {
		fd = strcmp(context, "-") ? open(context, O_RDONLY | O_CLOEXEC) : dup(0);
		if (fd < 0)
			return cli_err("cannot read '%s': %s", context, strerror(errno)), EXIT_USAGE;
	} else {
		if (!realpath(context, ctx))
			return cli_err("cannot read the context '%s': %s", context, strerror(errno)),
			       EXIT_USAGE;
		if (!realpath(dockerfile, df))
			return cli_err("cannot read '%s': %s", dockerfile, strerror(errno)), EXIT_USAGE;
		size_t cl = strlen(ctx);
		char *argv[16];
		int n = 0;
		argv[n++] = "tar";
		argv[n++] = "--sort=name";
		argv[n++] = "-czf";
		argv[n++] = "-";
		argv[n++] = "-C";
		argv[n++] = ctx;
		argv[n++] = ".";
		if (!strncmp(df, ctx, cl) && df[cl] == '/') {
			snprintf(rel, sizeof(rel), "%s", df + cl + 1);
		} else {
			char *slash = strrchr(df, '/');
			*slash = '\0';
			snprintf(rel, sizeof(rel), ".cpuos-build.Dockerfile");
			snprintf(xf, sizeof(xf), "--transform=s,^%s$,%s,", slash + 1, rel);
			argv[n++] = xf;
			argv[n++] = "-C";
			argv[n++] = df[0] ? df : "/";
			argv[n++] = slash + 1;
		}
		argv[n] = NULL;
		in_ctx = rel;
		if ((pid = cli_tar_start(argv, 0, &fd)) < 0)
			return EXIT_API;
	}
	struct apath p;
	apath_init(&p, "/v1/templates");
	apath_seg(&p, name);
	apath_add(&p, "/build");
	apath_query(&p, "dockerfile", in_ctx);
	if (no_cache)
		apath_query(&p, "no_cache", "true");
	const char *k;
	json_t *v;
	json_object_foreach(build_args, k, v) {
		char kv[8192];
		snprintf(kv, sizeof(kv), "%s=%s", k, json_string_value(v) ?: "");
		apath_query(&p, "build_arg", kv);
	}
	char port[16];
	snprintf(port, sizeof(port), "%u", st->ready_port);
	if (st->cmd)
		apath_query(&p, "start_cmd", st->cmd);
	if (st->ready_port)
		apath_query(&p, "ready_port", port);
	if (st->ready_cmd)
		apath_query(&p, "ready_cmd", st->ready_cmd);
	json_t *b = NULL;
	int r = api_upload(a, "POST", &p, fd, &b);
	close(fd);
	if (pid >= 0 && cli_tar_end(pid) < 0 && r == 0)
		r = -1;
	if (r < 0) {
		json_decref(b);
		return api_status(a) ? cli_api_fail(a) : EXIT_API;
	}
	json_decref(b);
	/* Its log as it comes, then how it ended. */
	apath_init(&p, "/v1/templates");
	apath_seg(&p, name);
	apath_add(&p, "/build/logs");
	apath_query(&p, "follow", "true");
	if (api_download(a, &p, to_stderr, NULL) < 0)
		return cli_api_fail(a);
	apath_init(&p, "/v1/templates");
	apath_seg(&p, name);
	apath_add(&p, "/build");
	if (api_json(a, "GET", &p, NULL, &b) < 0)
		return cli_api_fail(a);
	const char *state = json_string_value(json_object_get(b, "state")) ?: "?",
		   *why = json_string_value(json_object_get(b, "error"));
	int ok = !strcmp(state, "ready");
	if (!ok)
		cli_err("the build %s%s%s", state, why ? ": " : "", why ? why : "");
	json_decref(b);
	return ok ? 0 : 1;
}
