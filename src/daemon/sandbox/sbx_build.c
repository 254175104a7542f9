/*
 * sbx_build: Dockerfile builds the node runs (POST /v1/templates/{name}/
 * build). The build is the CLI's own (src/cli/cpuos/build.c), run here as
 * a child: `cpuos templates build NAME -f DOCKERFILE -`, its context
 * archive on its stdin (the CLI unpacks it as image.h unpacks a layer:
 * nothing outside its directory), a client of this daemon's API like any
 * other. So a build here is what it is from a laptop: each RUN an exec in
 * a sandbox of the account's, under its egress policy, each step a
 * checkpoint, the result an upload to POST /v1/templates.
 *
 * The child speaks as the account with a key made for the build, named
 * BUILD_KEY_PREFIX + node + id, and deleted at its end, after the
 * sandboxes that key made are killed (a builder killed mid-step leaves
 * its sandbox). A daemon that restarts finds its node's leftover keys and
 * does the same. The child runs in a session of its own, in a directory
 * of its own under <state>/builds (its HOME and TMPDIR), under the
 * daemon's user and system-call filter. Its output goes through a pipe
 * to the build's log, <state>/builds/<id>.log, kept to LOG_MAX bytes.
 *
 * Builds are kept in memory: the newest KEEP_ENDED ended ones (and their
 * logs) besides those that run; a restart forgets them.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/spawn.h"
#include "lib/db.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BUILD_KEY_PREFIX "cpuos-build/"
#define MAX_RUNNING 2        /* an account's builds at once */
#define MAX_NODE 4           /* the node's, all accounts */
#define KEEP_ENDED 64        /* ended builds remembered, all accounts */
#define LOG_MAX (32LL << 20) /* a build's log, at most */
#define BUILD_LIMIT_S 21600  /* a build's time (its sandbox's timeout) */
#define TERM_GRACE_MS 10000  /* SIGTERM, then SIGKILL */
#define MAX_ARGV 160
#define LATE_SWEEPS 6        /* after the end, every LATE_SWEEP_S */
#define LATE_SWEEP_S 5

struct sbx_dbuild {
	struct sbx_dbuild *next;
	struct sbx_mgr *m;
	struct sbx_build_info info;
	char account[128];
	char key_id[32];
	char dir[600], log[640];
	int cancel; /* under builds_mu */
	int running;
	int killed; /* the thread's: the builder was stopped by a signal of ours */
	/* for the thread */
	int ctxfd, logfd;
	char *argv[MAX_ARGV];
	char *envp[9];
};

static long long wall_ms(void)
{
	return (long long)(clock_realtime_ns() / 1000000);
}

/* What only the thread needs, once it ended (the key's secret is in envp). */
static void free_args(struct sbx_dbuild *b)
{
	if (b->ctxfd >= 0)
		close(b->ctxfd);
	b->ctxfd = -1;
	for (int i = 0; i < MAX_ARGV && b->argv[i]; i++) {
		free(b->argv[i]);
		b->argv[i] = NULL;
	}
	for (int i = 0; i < 9 && b->envp[i]; i++) {
		explicit_bzero(b->envp[i], strlen(b->envp[i]));
		free(b->envp[i]);
		b->envp[i] = NULL;
	}
}

/* The sandboxes key_id made, killed: what a builder left. A sandbox busy
 * settling (a checkpoint) is waited for. Returns how many it found. */
static int kill_left(struct sbx_mgr *m, const char *account, const char *key_id)
{
	struct store_sbx *rows;
	size_t n;
	char next[128] = "";
	int found = 0;
	do {
		if (store_sbx_list(m->store, account, NULL, NULL, 0, 100, next[0] ? next : NULL,
				   &rows, &n, next, sizeof(next)) < 0) {
			log_warn("cannot list the sandboxes of key %s", key_id);
			return found;
		}
		for (size_t i = 0; i < n; i++)
			if (!strcmp(rows[i].key_id, key_id) && (!strcmp(rows[i].state, "running") ||
								!strcmp(rows[i].state, "paused")))
			{
				found++;
				int r;
				for (int t = 0; (r = sbx_kill(m, rows[i].id, "killed")) == -EBUSY &&
						t < 10; t++)
					;
				if (r == 0)
					log_info("sandbox %s, left by its builder: killed", rows[i].id);
			}
		store_sbx_free_list(rows, n);
	} while (next[0]);
	return found;
}

/* The removal of a build's tree, whatever its depth. */
static void remove_dir(const char *dir)
{
	char *argv[] = { "rm", "-rf", "--one-file-system", "--", (char *)dir, NULL };
	struct spawn_opts o = { .argv = argv, .fd = { -1, -1, -1 } };
	pid_t pid;
	int status = 1;
	if (spawn(&o, &pid) == 0)
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	if (status != 0)
		log_warn("cannot remove '%s'", dir);
}

/* Copies what the builder wrote to the log (to LOG_MAX), keeping its last
 * "cpuos: " line, the CLI's error, in b->info.error. */
static void take_output(struct sbx_dbuild *b, int logfd, const char *buf, size_t n, char *line,
			size_t *linelen)
{
	pthread_mutex_lock(&b->m->builds_mu);
	long long have = b->info.log_bytes;
	pthread_mutex_unlock(&b->m->builds_mu);
	size_t keep = have >= LOG_MAX ? 0 : (size_t)(LOG_MAX - have) < n ? (size_t)(LOG_MAX - have) : n;
	ssize_t w = keep ? write(logfd, buf, keep) : 0;
	if (keep && (size_t)w == keep && have + (long long)keep == LOG_MAX) {
		static const char cut[] = "\n[the log is cut here: over its limit]\n";
		if (write(logfd, cut, sizeof(cut) - 1) == (ssize_t)sizeof(cut) - 1)
			w += (ssize_t)sizeof(cut) - 1;
	}
	for (size_t i = 0; i < n; i++) {
		if (buf[i] == '\n') {
			line[*linelen] = '\0';
			if (!strncmp(line, "cpuos: ", 7)) {
				for (char *p = line; *p; p++)
					if (*p < 0x20 || *p > 0x7e)
						*p = '?'; /* a JSON string whole, not cut mid-character */
				pthread_mutex_lock(&b->m->builds_mu);
				snprintf(b->info.error, sizeof(b->info.error), "%s", line + 7);
				pthread_mutex_unlock(&b->m->builds_mu);
			}
			*linelen = 0;
		} else if (*linelen < 511) {
			line[(*linelen)++] = buf[i];
		}
	}
	if (w > 0) {
		pthread_mutex_lock(&b->m->builds_mu);
		b->info.log_bytes += w;
		pthread_mutex_unlock(&b->m->builds_mu);
	}
}

/* In the builder, before its exec: it dies with the thread that waits
 * for it (a daemon that crashed leaves no builder with a live key). */
static int die_with_parent(const void *arg)
{
	(void)arg;
	return prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 ? -errno : 0;
}

/* Runs the builder to its end: its exit code, or -errno. */
static int run_builder(struct sbx_dbuild *b, int logfd)
{
	struct sbx_mgr *m = b->m;
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	pid_t pid;
	struct spawn_opts o = { .argv = b->argv, .fd = { b->ctxfd, pfd[1], pfd[1] },
				.new_session = 1, .cwd = b->dir, .envp = b->envp,
				.pre_exec = die_with_parent };
	int r = spawn(&o, &pid);
	close(pfd[1]);
	close(b->ctxfd);
	b->ctxfd = -1;
	if (r < 0) {
		close(pfd[0]);
		return r;
	}
	char buf[16384], line[512];
	size_t linelen = 0;
	long long until = clock_ms() + BUILD_LIMIT_S * 1000LL, term_at = 0;
	int open_ = 1, status = 0;
	for (;;) {
		struct pollfd pf = { .fd = pfd[0], .events = POLLIN };
		int n = open_ ? poll(&pf, 1, 200) : (usleep(100 * 1000), 0);
		if (n > 0) {
			ssize_t k = read(pfd[0], buf, sizeof(buf));
			if (k > 0)
				take_output(b, logfd, buf, (size_t)k, line, &linelen);
			else if (k == 0 || errno != EINTR)
				open_ = 0;
		}
		/* Ended? Not reaped yet: its group is killed below while its
		 * id cannot be anyone else's. */
		siginfo_t si = { 0 };
		if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno != EINTR)
			break;
		int w = si.si_pid == pid;
		if (w && !open_)
			break;
		if (w) {
			/* Ended: what is left in the pipe (a grandchild holding it
			 * open is not waited for). */
			while ((n = poll(&pf, 1, 0)) > 0) {
				ssize_t k = read(pfd[0], buf, sizeof(buf));
				if (k <= 0)
					break;
				take_output(b, logfd, buf, (size_t)k, line, &linelen);
			}
			break;
		}
		pthread_mutex_lock(&m->builds_mu);
		int cancel = b->cancel;
		pthread_mutex_unlock(&m->builds_mu);
		int quit = __atomic_load_n(&m->quit, __ATOMIC_RELAXED);
		long long now = clock_ms();
		if (!term_at && (cancel || quit || now > until)) {
			kill(-pid, SIGTERM);
			term_at = now;
			b->killed = 1;
			static const char by_cancel[] = "cpuos: the build was cancelled\n",
					  by_stop[] = "cpuos: the daemon stopped during the build\n",
					  by_time[] = "cpuos: the build ran out of time\n";
			const char *why = cancel ? by_cancel : quit ? by_stop : by_time;
			take_output(b, logfd, why, strlen(why), line, &linelen);
		} else if (term_at && now - term_at > TERM_GRACE_MS) {
			kill(-pid, SIGKILL);
		}
	}
	close(pfd[0]);
	kill(-pid, SIGKILL); /* what it left in its session */
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void *build_main(void *arg)
{
	struct sbx_dbuild *b = arg;
	struct sbx_mgr *m = b->m;
	log_set_tag("build");
	int code = run_builder(b, b->logfd);
	close(b->logfd);
	b->logfd = -1;
	char account[128], key_id[32];
	snprintf(account, sizeof(account), "%s", b->account);
	snprintf(key_id, sizeof(key_id), "%s", b->key_id);
	/* At the daemon's stop its sandboxes are left to the next one, which
	 * finds the key (sbx__builds_start). */
	int quit = __atomic_load_n(&m->quit, __ATOMIC_RELAXED), b_killed = b->killed;
	if (!quit) {
		kill_left(m, account, key_id);
		if (store_key_delete(m->store, key_id) < 0)
			log_warn("build %s: cannot delete its key %s", b->info.id, key_id);
	}
	remove_dir(b->dir);
	free_args(b);
	pthread_mutex_lock(&m->builds_mu);
	b->info.exit_code = code;
	b->info.ended_ms = wall_ms();
	snprintf(b->info.state, sizeof(b->info.state), "%s",
		 code == 0 ? "ready" : b->cancel ? "cancelled" : "failed");
	if (code < 0)
		snprintf(b->info.error, sizeof(b->info.error), "cannot run the builder: %s",
			 strerror(-code));
	else if (code && !b->info.error[0])
		snprintf(b->info.error, sizeof(b->info.error), "the builder exited %d", code);
	if (code == 0)
		b->info.error[0] = '\0';
	b->running = 0;
	log_info("template %s for '%s': build %s %s in %.1f s%s%s", b->info.name, b->account,
		 b->info.id, b->info.state, (double)(b->info.ended_ms - b->info.started_ms) / 1000,
		 b->info.error[0] ? ": " : "", b->info.error);
	pthread_mutex_unlock(&m->builds_mu); /* b may be pruned from here on */
	/* A create the builder had asked for when it was stopped ends after
	 * it: its sandbox is looked for a while longer. */
	for (int t = 0; !quit && b_killed && t < LATE_SWEEPS; t++) {
		struct timespec ts = { LATE_SWEEP_S, 0 };
		nanosleep(&ts, NULL);
		quit = __atomic_load_n(&m->quit, __ATOMIC_RELAXED);
		if (!quit && kill_left(m, account, key_id))
			break;
	}
	pthread_mutex_lock(&m->mu);
	m->tpl_builds--;
	pthread_cond_broadcast(&m->killers_cv);
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

/* Ended builds past KEEP_ENDED, the oldest, dropped with their logs
 * (under builds_mu). */
static void prune(struct sbx_mgr *m)
{
	int ended = 0;
	for (struct sbx_dbuild **pp = &m->dbuilds; *pp;) {
		struct sbx_dbuild *b = *pp;
		if (!b->running && ++ended > KEEP_ENDED) {
			*pp = b->next;
			unlink(b->log);
			free(b);
			continue;
		}
		pp = &b->next;
	}
}

static int add_arg(struct sbx_dbuild *b, int *n, const char *a)
{
	if (*n >= MAX_ARGV - 1 || !(b->argv[*n] = strdup(a)))
		return -1;
	(*n)++;
	return 0;
}

static int add_env(struct sbx_dbuild *b, int *n, const char *k, const char *v)
{
	if (*n >= 8 || asprintf(&b->envp[*n], "%s=%s", k, v) < 0) {
		b->envp[*n] = NULL;
		return -1;
	}
	(*n)++;
	return 0;
}

static int build_args_ok(const struct sbx_build_req *q, char *err, size_t errlen)
{
	if (!sbx_tpl_name_ok(q->name))
		return errbuf_set(err, errlen, -EINVAL,
				  "invalid template name '%.80s': lower-case letters, digits, '.', "
				  "'_' and '-', at most 63", q->name);
	const char *df = q->dockerfile ? q->dockerfile : "Dockerfile";
	if (!*df || strlen(df) > 1024 || df[0] == '-')
		return errbuf_set(err, errlen, -EINVAL, "invalid dockerfile path");
	if (q->nbuild_args > 64)
		return errbuf_set(err, errlen, -EINVAL, "at most 64 build arguments");
	for (size_t i = 0; i < q->nbuild_args; i++) {
		const char *a = q->build_args[i], *eq = strchr(a, '=');
		if (!eq || eq == a || strlen(a) > 4096)
			return errbuf_set(err, errlen, -EINVAL, "a build argument is NAME=VALUE");
	}
	if ((q->start_cmd && (!*q->start_cmd || strlen(q->start_cmd) > 4096)) ||
	    (q->ready_cmd && (!*q->ready_cmd || strlen(q->ready_cmd) > 4096)) ||
	    q->ready_port > 65535)
		return errbuf_set(err, errlen, -EINVAL, "invalid start command or ready check");
	return 0;
}

/* Whether builds run here, for account. */
static int usable(struct sbx_mgr *m, const char *account, char *err, size_t errlen)
{
	if (!m->cfg.builder || !m->cfg.builder_url)
		return errbuf_set(err, errlen, -EPERM, "this node runs no builds (cpuosd --builder, "
				  "and a --listen address for it to reach)");
	if (m->cfg.images_off || (!m->cfg.importer && geteuid() != 0))
		return errbuf_set(err, errlen, -EPERM, "importing images needs cpuosd started as root");
	if (!strcmp(account, STORE_ADMIN_ACCOUNT))
		return errbuf_set(err, errlen, -EACCES, "a build is an account's: ask with its key, "
				  "not on the administrator's socket");
	if (__atomic_load_n(&m->quit, __ATOMIC_RELAXED))
		return errbuf_set(err, errlen, -ESHUTDOWN, "the daemon is stopping");
	return 0;
}

/* Whether account may start a build of name now: one per name, MAX_RUNNING
 * per account, MAX_NODE in all (under builds_mu). */
static int admit(struct sbx_mgr *m, const char *account, const char *name, char *err,
		 size_t errlen)
{
	int mine = 0, same = 0, all = 0;
	for (struct sbx_dbuild *o = m->dbuilds; o; o = o->next)
		if (o->running) {
			all++;
			if (!strcmp(o->account, account)) {
				mine++;
				same |= !strcmp(o->info.name, name);
			}
		}
	if (same)
		return errbuf_set(err, errlen, -EBUSY, "template '%s' is being built: follow that "
				  "build, or cancel it", name);
	if (mine >= MAX_RUNNING)
		return errbuf_set(err, errlen, -EAGAIN, "the account has %d builds running: try "
				  "again when one ended", MAX_RUNNING);
	if (all >= MAX_NODE)
		return errbuf_set(err, errlen, -EAGAIN, "this node runs %d builds, its most: try "
				  "again when one ended", MAX_NODE);
	return 0;
}

int sbx_build_check(struct sbx_mgr *m, const char *account, const char *name, char *err,
		    size_t errlen)
{
	int r = usable(m, account, err, errlen);
	if (r == 0) {
		pthread_mutex_lock(&m->builds_mu);
		r = admit(m, account, name, err, errlen);
		pthread_mutex_unlock(&m->builds_mu);
	}
	return r;
}

int sbx_build_start(struct sbx_mgr *m, const char *account, const struct sbx_build_req *q,
		    struct sbx_build_info *out, char *err, size_t errlen)
{
	int ctxfd = q->context_fd, r = build_args_ok(q, err, errlen);
	if (r == 0)
		r = usable(m, account, err, errlen);
	struct sbx_dbuild *b = r == 0 ? calloc(1, sizeof(*b)) : NULL;
	if (r == 0 && !b)
		r = errbuf_set(err, errlen, -ENOMEM, "out of memory");
	if (r < 0) {
		if (ctxfd >= 0)
			close(ctxfd);
		return r;
	}
	b->m = m;
	b->ctxfd = ctxfd;
	b->logfd = -1;
	snprintf(b->account, sizeof(b->account), "%s", account);
	snprintf(b->info.name, sizeof(b->info.name), "%s", q->name);
	snprintf(b->info.state, sizeof(b->info.state), "building");
	b->info.started_ms = wall_ms();
	if (db_token("bld_", 8, b->info.id, sizeof(b->info.id)) < 0) {
		free(b);
		close(ctxfd);
		return errbuf_set(err, errlen, -EIO, "cannot make a build id");
	}
	pthread_mutex_lock(&m->builds_mu);
	r = admit(m, account, q->name, err, errlen);
	if (r == 0)
		b->running = 1; /* holds the name while it is set up */
	if (r == 0) {
		b->next = m->dbuilds;
		m->dbuilds = b;
	}
	pthread_mutex_unlock(&m->builds_mu);
	if (r < 0) {
		free(b);
		close(ctxfd);
		return r;
	}
	/* Its directory, key, argv and environment. */
	char secret[128] = "", kname[128];
	struct store_key key;
	snprintf(b->dir, sizeof(b->dir), "%s/builds/%s", m->cfg.state_dir, b->info.id);
	snprintf(b->log, sizeof(b->log), "%s/builds/%s.log", m->cfg.state_dir, b->info.id);
	snprintf(kname, sizeof(kname), BUILD_KEY_PREFIX "%s/%s", m->cfg.node ? m->cfg.node : "",
		 b->info.id);
	b->logfd = open(b->log, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC | O_NOFOLLOW,
			0600);
	if (b->logfd < 0)
		r = errbuf_set(err, errlen, -errno, "cannot make '%s': %s", b->log, strerror(errno));
	else if (mkdir(b->dir, 0700) < 0)
		r = errbuf_set(err, errlen, -errno, "cannot make '%s': %s", b->dir, strerror(errno));
	else if ((r = store_key_create(m->store, kname, account, secret, &key)) < 0)
		r = errbuf_set(err, errlen, -EIO, "cannot make the build's key: %s", strerror(-r));
	else
		snprintf(b->key_id, sizeof(b->key_id), "%s", key.id);
	int na = 0, ne = 0, bad = 0;
	char port[16];
	snprintf(port, sizeof(port), "%u", q->ready_port);
	const char *fixed[] = { m->cfg.builder, "--url", m->cfg.builder_url, "templates", "build",
				q->name, "-f", q->dockerfile ? q->dockerfile : "Dockerfile", "-" };
	for (size_t i = 0; r == 0 && i < sizeof(fixed) / sizeof(fixed[0]); i++)
		bad |= add_arg(b, &na, fixed[i]);
	if (q->no_cache)
		bad |= add_arg(b, &na, "--no-cache");
	/* An option and its value, in that order (each call takes the next
	 * slot: || keeps the order | would not). */
	for (size_t i = 0; i < q->nbuild_args; i++)
		bad |= add_arg(b, &na, "--build-arg") || add_arg(b, &na, q->build_args[i]);
	if (q->start_cmd)
		bad |= add_arg(b, &na, "--start-cmd") || add_arg(b, &na, q->start_cmd);
	if (q->ready_cmd)
		bad |= add_arg(b, &na, "--ready-cmd") || add_arg(b, &na, q->ready_cmd);
	if (q->ready_port)
		bad |= add_arg(b, &na, "--ready-port") || add_arg(b, &na, port);
	const char *path = getenv("PATH");
	char max_mb[32];
	snprintf(max_mb, sizeof(max_mb), "%llu",
		 (m->cfg.image_max_bytes ? m->cfg.image_max_bytes : 4ULL << 30) >> 20);
	bad |= add_env(b, &ne, "PATH", path ? path : "/usr/local/bin:/usr/bin:/bin") ||
	       add_env(b, &ne, "HOME", b->dir) || add_env(b, &ne, "TMPDIR", b->dir) ||
	       add_env(b, &ne, "LANG", "C.UTF-8") || add_env(b, &ne, "CPUOS_BUILD_MAX_MB", max_mb) ||
	       add_env(b, &ne, "CPUOS_API_KEY", secret);
	explicit_bzero(secret, sizeof(secret));
	if (r == 0 && bad)
		r = errbuf_set(err, errlen, -ENOMEM, "out of memory");
	*out = b->info; /* before the thread, which may end and be pruned */
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (r == 0) {
		/* Counted where the stop waits for it, unless the stop began. */
		pthread_mutex_lock(&m->mu);
		if (m->quit)
			r = errbuf_set(err, errlen, -ESHUTDOWN, "the daemon is stopping");
		else
			m->tpl_builds++;
		pthread_mutex_unlock(&m->mu);
		if (r == 0 && pthread_create(&t, &attr, build_main, b) != 0) {
			pthread_mutex_lock(&m->mu);
			m->tpl_builds--;
			pthread_cond_broadcast(&m->killers_cv);
			pthread_mutex_unlock(&m->mu);
			r = errbuf_set(err, errlen, -EIO, "cannot start the build's thread");
		}
	}
	pthread_attr_destroy(&attr);
	if (r < 0) {
		if (b->key_id[0])
			store_key_delete(m->store, b->key_id);
		if (b->logfd >= 0) {
			close(b->logfd);
			unlink(b->log);
		}
		rmdir(b->dir);
		free_args(b);
		pthread_mutex_lock(&m->builds_mu);
		for (struct sbx_dbuild **pp = &m->dbuilds; *pp; pp = &(*pp)->next)
			if (*pp == b) {
				*pp = b->next;
				break;
			}
		pthread_mutex_unlock(&m->builds_mu);
		free(b);
		return r;
	}
	log_info("template %s for '%s': build %s started", q->name, account, out->id);
	pthread_mutex_lock(&m->builds_mu);
	prune(m);
	pthread_mutex_unlock(&m->builds_mu);
	return 0;
}

int sbx_build_get(struct sbx_mgr *m, const char *account, const char *name,
		  struct sbx_build_info *out, char *log, size_t loglen)
{
	int r = -ENOENT;
	pthread_mutex_lock(&m->builds_mu);
	for (struct sbx_dbuild *b = m->dbuilds; b; b = b->next)
		if (!strcmp(b->account, account) && !strcmp(b->info.name, name)) {
			*out = b->info;
			if (log)
				snprintf(log, loglen, "%s", b->log);
			r = 0;
			break;
		}
	pthread_mutex_unlock(&m->builds_mu);
	return r;
}

int sbx_build_running(struct sbx_mgr *m, const char *id)
{
	int r = 0;
	pthread_mutex_lock(&m->builds_mu);
	for (struct sbx_dbuild *b = m->dbuilds; b; b = b->next)
		if (!strcmp(b->info.id, id)) {
			r = b->running;
			break;
		}
	pthread_mutex_unlock(&m->builds_mu);
	return r;
}

int sbx_build_cancel(struct sbx_mgr *m, const char *account, const char *name)
{
	int r = -ENOENT;
	pthread_mutex_lock(&m->builds_mu);
	for (struct sbx_dbuild *b = m->dbuilds; b; b = b->next)
		if (b->running && !strcmp(b->account, account) && !strcmp(b->info.name, name)) {
			b->cancel = 1;
			r = 0;
			break;
		}
	pthread_mutex_unlock(&m->builds_mu);
	return r;
}

void sbx__builds_start(struct sbx_mgr *m)
{
	char dir[600], prefix[128];
	snprintf(dir, sizeof(dir), "%s/builds", m->cfg.state_dir);
	remove_dir(dir); /* the last daemon's logs and directories */
	fs_mkdir_p(dir, 0700, (uid_t)-1, (gid_t)-1);
	/* Its keys, and what they made. */
	snprintf(prefix, sizeof(prefix), BUILD_KEY_PREFIX "%s/", m->cfg.node ? m->cfg.node : "");
	struct store_key *keys;
	size_t n;
	if (store_key_list(m->store, &keys, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++)
		if (!strncmp(keys[i].name, prefix, strlen(prefix))) {
			kill_left(m, keys[i].account, keys[i].id);
			store_key_delete(m->store, keys[i].id);
			log_info("build key %s of '%s' left by the last daemon: deleted", keys[i].id,
				 keys[i].account);
		}
	free(keys);
}

void sbx__builds_free(struct sbx_mgr *m)
{
	while (m->dbuilds) {
		struct sbx_dbuild *b = m->dbuilds;
		m->dbuilds = b->next;
		free_args(b);
		free(b);
	}
}
