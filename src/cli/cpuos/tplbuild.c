/*
 * tplbuild: runs build.sh with its stdout and stderr on one pipe and reads
 * them line by line. Progress comes from the script's phase lines
 * ("template NAME: mmdebstrap"), mmdebstrap's stage lines ("I: extracting
 * archives...") and, within a stage, counted dpkg and apt lines.
 */
#include "cli/cpuos/tplbuild.h"
#include "cli/cpuos/cli.h"
#include "common/clock.h"
#include "common/errbuf.h"
#include "common/fs.h"
#include "common/spawn.h"
#include "image/image.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_ 1024
#define TAIL	  20

/* mmdebstrap's stages, in order, and where each starts on the bar. The
 * percentages are rough shares of a typical build's time. */
static const struct stage {
	const char *prefix;
	double pct;
	const char *label;
} stages[] = {
    {"template ", 2, "mmdebstrap"}, /* placeholder for the phase line */
    {"I: running apt-get update", 4, "apt-get update"},
    {"I: downloading packages", 8, "downloading packages"},
    {"I: extracting archives", 28, "extracting archives"},
    {"I: installing essential packages", 34, "installing essential packages"},
    {"I: installing remaining packages", 48, "installing packages"},
    {"I: running --customize-hook", 70, "running the recipe's hook"},
    {"I: cleaning package lists", 82, "cleaning up"},
    {"I: success in", 85, "mmdebstrap done"},
};
#define NSTAGES	 (sizeof(stages) / sizeof(stages[0]))
#define PCT_MKFS 86.0

struct bar {
	const char *name;
	size_t prefix_len; /* "template NAME: " */
	char prefix[128];
	int tty;
	long long t0, phase_t0;
	double base, next; /* the current stage spans [base, next) */
	unsigned count;	   /* progress lines seen in this stage */
	int creep;	   /* mkfs.erofs: quiet, so progress follows the clock */
	const char *label;
	char tail[TAIL][LINE_MAX_];
	unsigned ntail;
};

static double bar_pct(const struct bar *b)
{
	double f;
	double t = (double)(clock_ms() - b->phase_t0);
	if (b->creep)
		f = 0.95 * t / (t + 20000.0);
	else
		f = b->count / (b->count + 60.0); /* approaches the next stage, never passes */
	return b->base + (b->next - b->base) * f;
}

static void bar_clear(struct bar *b)
{
	if (b->tty)
		fputs("\r\033[K", stderr);
}

static void bar_draw(struct bar *b)
{
	if (!b->tty || !b->label)
		return;
	struct winsize ws;
	int cols = ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20 ? ws.ws_col : 80;
	double pct = bar_pct(b);
	char line[512], fill[31];
	int filled = (int)(pct * 30 / 100);
	for (int i = 0; i < 30; i++)
		fill[i] = i < filled ? '#' : '-';
	fill[30] = '\0';
	long long s = (clock_ms() - b->t0) / 1000;
	snprintf(line, sizeof(line), "%s [%s] %3d%% %lldm%02llds %s", b->name, fill, (int)pct,
		 s / 60, s % 60, b->label);
	/* One terminal line exactly: a wrapped bar could not be redrawn. */
	if ((int)strlen(line) > cols - 1)
		line[cols - 1] = '\0';
	fprintf(stderr, "\r%s\033[K", line);
	fflush(stderr);
}

static void bar_stage(struct bar *b, double base, double next, const char *label)
{
	b->base = base;
	b->next = next;
	b->count = 0;
	b->creep = 0;
	b->label = label;
	b->phase_t0 = clock_ms();
}

static void on_line(struct bar *b, const char *line)
{
	if (!strncmp(line, b->prefix, b->prefix_len)) {
		const char *what = line + b->prefix_len;
		if (!strncmp(what, "mmdebstrap", 10)) {
			bar_stage(b, stages[0].pct, stages[1].pct, stages[0].label);
		} else if (!strncmp(what, "mkfs.erofs", 10)) {
			bar_stage(b, PCT_MKFS, 100, "mkfs.erofs");
			b->creep = 1;
		} else if (!strncmp(what, "done", 4) || !strncmp(what, "cached", 6)) {
			bar_stage(b, 100, 100, "done");
		}
		bar_clear(b);
		printf("%s\n", line);
		fflush(stdout);
		return;
	}
	for (size_t i = 1; i < NSTAGES; i++) {
		if (!strncmp(line, stages[i].prefix, strlen(stages[i].prefix))) {
			bar_stage(b, stages[i].pct, i + 1 < NSTAGES ? stages[i + 1].pct : PCT_MKFS,
				  stages[i].label);
			break;
		}
	}
	if (!strncmp(line, "Unpacking ", 10) || !strncmp(line, "Setting up ", 11) ||
	    !strncmp(line, "Get:", 4) || !strncmp(line, "Collecting ", 11))
		b->count++;
	snprintf(b->tail[b->ntail++ % TAIL], LINE_MAX_, "%s", line);
}

/* Where build.sh is and where the image goes: $CPUOS_GUEST_SRC (else
 * ../../guest from this binary) and $CPUOS_GUEST_DIR (else build/guest in
 * the same tree, where cpuos-vm and cpuosd look by default). */
static int locate(const char *name, char *script, size_t sn, char *out, size_t on)
{
	char bindir[PATH_MAX], src[PATH_MAX + 16], real[PATH_MAX];
	const char *env = getenv("CPUOS_GUEST_SRC"), *gdir = getenv("CPUOS_GUEST_DIR");
	if (env && *env) {
		snprintf(src, sizeof(src), "%s", env);
	} else {
		if (cli_bindir(bindir, sizeof(bindir)) < 0)
			return -ENOENT;
		snprintf(src, sizeof(src), "%s/../../guest", bindir);
	}
	if (!realpath(src, real)) {
		cli_err("cannot find the guest sources at '%s' (set CPUOS_GUEST_SRC): %s", src,
			strerror(errno));
		return -ENOENT;
	}
	snprintf(script, sn, "%s/templates/build.sh", real);
	if (access(script, X_OK) < 0) {
		cli_err("cannot run '%s': %s", script, strerror(errno));
		return -ENOENT;
	}
	if (gdir && *gdir)
		snprintf(out, on, "%s/templates/%s.erofs", gdir, name);
	else
		snprintf(out, on, "%s/../build/guest/templates/%s.erofs", real, name);
	return 0;
}

int tpl_build(const char *name)
{
	char script[PATH_MAX + 32], out[PATH_MAX + 300], buf[8192], line[LINE_MAX_];
	size_t llen = 0;
	int pfd[2], status, ret;
	struct bar *b = calloc(1, sizeof(*b));
	pid_t pid;

	if (!b) {
		cli_err("out of memory");
		return EXIT_API;
	}
	ret = EXIT_API;
	if (locate(name, script, sizeof(script), out, sizeof(out)) < 0)
		goto out;
	b->name = name;
	b->tty = isatty(2);
	b->t0 = clock_ms();
	b->prefix_len = (size_t)snprintf(b->prefix, sizeof(b->prefix), "template %s: ", name);
	bar_stage(b, 0, stages[0].pct, "starting");
	if (pipe2(pfd, O_CLOEXEC) < 0) {
		cli_err("cannot make a pipe: %s", strerror(errno));
		goto out;
	}
	char *args[] = { script, (char *)name, out, NULL };
	struct spawn_opts o = { .argv = args, .fd = { -1, pfd[1], pfd[1] } };
	int sr = spawn(&o, &pid);
	close(pfd[1]);
	if (sr < 0) {
		cli_err("cannot run '%s': %s", script, strerror(-sr));
		close(pfd[0]);
		goto out;
	}
	/* Ctrl-C reaches the script through the process group; we stay to
	 * report how it ended. */
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	bar_draw(b);
	for (;;) {
		struct pollfd p = {.fd = pfd[0], .events = POLLIN};
		int r = poll(&p, 1, 500);
		if (r < 0 && errno != EINTR)
			break;
		if (r <= 0) {
			bar_draw(b);
			continue;
		}
		ssize_t n = read(pfd[0], buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++) {
			/* apt and dpkg redraw with '\r': each redraw is a line. */
			if (buf[i] == '\n' || buf[i] == '\r') {
				line[llen] = '\0';
				if (llen)
					on_line(b, line);
				llen = 0;
			} else if (llen < sizeof(line) - 1) {
				line[llen++] = buf[i]; /* the rest of a long line is dropped */
			}
		}
		bar_draw(b);
	}
	if (llen) {
		line[llen] = '\0';
		on_line(b, line);
	}
	close(pfd[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	bar_clear(b);
	ret = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	if (ret) {
		/* The phase lines rarely say why: show the end of the rest. */
		unsigned from = b->ntail > TAIL ? b->ntail - TAIL : 0;
		for (unsigned i = from; i < b->ntail; i++)
			fprintf(stderr, "  %s\n", b->tail[i % TAIL]);
		cli_err("template %s: build failed (exit %d)", name, ret);
	}
out:
	free(b);
	return ret;
}

/* ---- cpuos templates import ---- */

static int valid_name(const char *n)
{
	size_t len = strlen(n);
	if (!len || len > 63 || !((n[0] >= 'a' && n[0] <= 'z') || (n[0] >= '0' && n[0] <= '9')))
		return 0;
	for (const char *p = n; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' ||
		      *p == '-'))
			return 0;
	return 1;
}

/* link -> target, replaced in one rename. */
static int relink(const char *target, const char *link)
{
	char tmp[PATH_MAX + 32];
	snprintf(tmp, sizeof(tmp), "%s.tmp%d", link, (int)getpid());
	unlink(tmp);
	if (symlink(target, tmp) < 0)
		return -errno;
	if (rename(tmp, link) < 0) {
		int e = errno;
		unlink(tmp);
		return -e;
	}
	return 0;
}

/* The start command and ready check into the description at path. */
static int add_start(const char *path, const struct tpl_start *st)
{
	json_t *d = json_load_file(path, 0, NULL);
	if (!json_is_object(d)) {
		json_decref(d);
		cli_err("cannot read '%s'", path);
		return EXIT_API;
	}
	char err[256];
	if (image_set_start(d, st->cmd, st->image, st->ready_port, st->ready_cmd, err, sizeof(err)) < 0) {
		json_decref(d);
		cli_err("--start-image: %s", err);
		return EXIT_USAGE;
	}
	char tmp[PATH_MAX + 256];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int r = json_dump_file(d, tmp, JSON_INDENT(2) | JSON_SORT_KEYS) == 0 && rename(tmp, path) == 0 ? 0 : -1;
	json_decref(d);
	if (r < 0) {
		cli_err("cannot write '%s': %s", path, strerror(errno));
		unlink(tmp);
		return EXIT_API;
	}
	return 0;
}

int tpl_import(const char *name, const char *archive, unsigned long long max_mb,
	       const struct tpl_start *start)
{
	static const char *const recipes[] = { "base", "python", "node" };
	if (!valid_name(name)) {
		cli_err("invalid template name '%s': lower-case letters, digits, '.', '_' and '-', "
			"at most 63", name);
		return EXIT_USAGE;
	}
	for (size_t i = 0; i < 3; i++)
		if (!strcmp(name, recipes[i])) {
			cli_err("template '%s' is built from its recipe (cpuos templates build); "
				"import under another name", name);
			return EXIT_USAGE;
		}
	char gdir[PATH_MAX + 16], cache[PATH_MAX + 16], bindir[PATH_MAX];
	const char *g = getenv("CPUOS_GUEST_DIR"), *cc = getenv("CPUOS_CACHE");
	if (g && *g)
		snprintf(gdir, sizeof(gdir), "%s", g);
	else if (cli_bindir(bindir, sizeof(bindir)) == 0)
		snprintf(gdir, sizeof(gdir), "%s/../guest", bindir);
	else {
		cli_err("cannot find the guest directory (set CPUOS_GUEST_DIR)");
		return EXIT_API;
	}
	snprintf(cache, sizeof(cache), "%s/images", cc && *cc ? cc : "/var/cache/cpuos");
	char tdir[PATH_MAX + 32], id[128], img[PATH_MAX + 160], desc[PATH_MAX + 160];
	snprintf(tdir, sizeof(tdir), "%s/templates", gdir);
	if (fs_mkdir_p(cache, 0755, (uid_t)-1, (gid_t)-1) < 0 ||
	    fs_mkdir_p(tdir, 0755, (uid_t)-1, (gid_t)-1) < 0) {
		cli_err("cannot make '%s' or '%s': %s", cache, tdir, strerror(errno));
		return EXIT_API;
	}
	/* A name of its own per import: a paused sandbox of the image this
	 * one replaces still needs that one to resume. */
	long long t0 = clock_ms();
	snprintf(id, sizeof(id), "%s-%lld-%d", name, (long long)time(NULL), (int)getpid());
	snprintf(img, sizeof(img), "%s/%s.erofs", cache, id);
	snprintf(desc, sizeof(desc), "%s/%s.json", cache, id);
	fprintf(stderr, "template %s: importing %s\n", name, archive);
	struct image_limits lim = { .max_bytes = max_mb << 20 };
	char err[700];
	int cfd = open(cache, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = cfd < 0 ? errbuf_set(err, sizeof(err), -errno, "cannot open '%s': %s", cache, strerror(errno))
			: image_import(archive, cfd, id, &lim, err, sizeof(err));
	if (cfd >= 0)
		close(cfd);
	if (r < 0) {
		cli_err("cannot import '%s': %s", archive, err);
		return r == -EINVAL || r == -EFBIG || r == -ENOENT ? EXIT_USAGE : EXIT_API;
	}
	if (start && (start->cmd || start->image) && (r = add_start(desc, start)) != 0) {
		unlink(img);
		unlink(desc);
		return r;
	}
	/* The description first: a template is there once its image is. If
	 * the second link fails, the first points at a description kept. */
	char link[PATH_MAX + 128];
	snprintf(link, sizeof(link), "%s/%s.json", tdir, name);
	int linked = (r = relink(desc, link)) == 0;
	if (linked) {
		snprintf(link, sizeof(link), "%s/%s.erofs", tdir, name);
		r = relink(img, link);
	}
	if (r < 0) {
		cli_err("cannot link '%s': %s", link, strerror(-r));
		unlink(img);
		if (!linked)
			unlink(desc);
		return EXIT_API;
	}
	struct stat st;
	fprintf(stderr, "template %s: done in %.1f s, %lld MB (%s)\n", name,
		(double)(clock_ms() - t0) / 1000, stat(img, &st) == 0 ? (long long)st.st_size >> 20 : 0,
		img);
	return 0;
}

int tpl_pull(const char *name, const char *ref, int insecure, unsigned long long max_mb,
	     const struct tpl_start *start)
{
	const char *cc = getenv("CPUOS_CACHE");
	char cache[PATH_MAX + 16], layout[PATH_MAX + 96];
	snprintf(cache, sizeof(cache), "%s/images", cc && *cc ? cc : "/var/cache/cpuos");
	if (!valid_name(name)) {
		cli_err("invalid template name '%s': lower-case letters, digits, '.', '_' and '-', "
			"at most 63", name);
		return EXIT_USAGE;
	}
	if (fs_mkdir_p(cache, 0755, (uid_t)-1, (gid_t)-1) < 0) {
		cli_err("cannot make '%s': %s", cache, strerror(errno));
		return EXIT_API;
	}
	snprintf(layout, sizeof(layout), "%s/.pull-%s-%d", cache, name, (int)getpid());
	struct image_pull_opts o = { .insecure = insecure, .max_bytes = max_mb << 20,
				     .username = getenv("CPUOS_REGISTRY_USERNAME"),
				     .password = getenv("CPUOS_REGISTRY_PASSWORD") };
	if (o.username && !*o.username)
		o.username = NULL;
	long long t0 = clock_ms();
	fprintf(stderr, "template %s: pulling %s\n", name, ref);
	char err[700];
	int r = image_pull(ref, layout, &o, err, sizeof(err));
	int ret = 0;
	if (r < 0) {
		cli_err("cannot pull '%s': %s", ref, err);
		ret = r == -EINVAL || r == -ENOENT || r == -EACCES || r == -EFBIG ? EXIT_USAGE : EXIT_API;
	} else {
		fprintf(stderr, "template %s: pulled in %.1f s\n", name, (double)(clock_ms() - t0) / 1000);
		ret = tpl_import(name, layout, max_mb, start);
	}
	image_remove_tree(AT_FDCWD, layout);
	return ret;
}
