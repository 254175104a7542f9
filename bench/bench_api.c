/*
 * bench_api: figures for the daemon's HTTP API, printed, never asserted:
 * create -> first exec, exec over HTTP against straight over the agent, and N
 * sandboxes at once. Starts its own cpuosd; speaks raw keep-alive HTTP/1.1.
 */
#include "tests/lib/vmtest.h"
#include "common/unixsock.h"
#include "common/clock.h"
#include "common/spawn.h"

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BUF_CAP (256 * 1024)
#define MAX_SBX 256

static char state_dir[64], sock_path[96];
static pid_t daemon_pid;
static pthread_mutex_t ids_lock = PTHREAD_MUTEX_INITIALIZER;
static char live_ids[MAX_SBX][64]; /* created, not yet deleted: killed at exit */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
	if (n <= 0)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[(int)(p / 100.0 * (n - 1) + 0.5)];
}

/* One keep-alive HTTP/1.1 connection to the daemon's Unix socket. */
struct conn {
	int fd;
	size_t len;    /* bytes read past the last response */
	char buf[BUF_CAP];
	char body[BUF_CAP]; /* the last response's body, NUL-terminated */
};

static struct conn *conn_open(int timeout_ms)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c || (c->fd = unix_connect(sock_path, timeout_ms)) < 0) {
		free(c);
		return NULL;
	}
	struct timeval tv = { .tv_sec = 300 }; /* a hung daemon must not hang us */
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return c;
}

static void conn_close(struct conn *c)
{
	if (c)
		close(c->fd);
	free(c);
}

static int fill(struct conn *c)
{
	ssize_t r = c->len < BUF_CAP - 1 ? read(c->fd, c->buf + c->len, BUF_CAP - 1 - c->len) : 0;
	c->len += r > 0 ? (size_t)r : 0;
	return r > 0 ? 0 : -1;
}

/* Sends one request and reads its response by Content-Length. The status,
 * or -1 if the connection failed; the body is in c->body. */
static int http(struct conn *c, const char *method, const char *path, const char *body)
{
	char req[1024], *end;
	int n = snprintf(req, sizeof(req),
			 "%s %s HTTP/1.1\r\nHost: cpuosd\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\n\r\n%s",
			 method, path, body ? strlen(body) : 0, body ? body : "");
	if (n >= (int)sizeof(req) || write(c->fd, req, (size_t)n) != n)
		return -1;
	while (!(end = memmem(c->buf, c->len, "\r\n\r\n", 4)))
		if (fill(c) < 0)
			return -1;
	int status = 0;
	size_t hlen = (size_t)(end + 4 - c->buf), clen = 0;
	*end = '\0';
	const char *cl = strcasestr(c->buf, "\r\ncontent-length:");
	if (sscanf(c->buf, "HTTP/1.%*d %d", &status) != 1 || (cl && sscanf(cl + 17, "%zu", &clen) != 1) ||
	    (!cl && status != 204) || hlen + clen >= BUF_CAP)
		return -1;
	while (c->len < hlen + clen)
		if (fill(c) < 0)
			return -1;
	memcpy(c->body, c->buf + hlen, clen);
	c->body[clen] = '\0';
	c->len -= hlen + clen;
	memmove(c->buf, c->buf + hlen + clen, c->len);
	return status;
}

/* Remembers (add) or forgets a sandbox id, for the cleanup at exit. */
static void track(const char *id, int add)
{
	pthread_mutex_lock(&ids_lock);
	for (int i = 0; i < MAX_SBX; i++)
		if (add ? !live_ids[i][0] : !strcmp(live_ids[i], id)) {
			snprintf(live_ids[i], sizeof(live_ids[i]), "%s", add ? id : "");
			break;
		}
	pthread_mutex_unlock(&ids_lock);
}

/* Creates a base sandbox; its id in id, or -1 with the reason on stderr. */
static int sbx_create(struct conn *c, char *id, size_t idlen)
{
	int st = http(c, "POST", "/v1/sandboxes", "{\"template\":\"base\",\"timeout\":\"30m\"}");
	json_t *j = st == 201 ? json_loads(c->body, 0, NULL) : NULL;
	const char *s = json_string_value(json_object_get(j, "id"));
	if (s)
		snprintf(id, idlen, "%s", s), track(id, 1);
	else
		fprintf(stderr, "bench: create: %d %s\n", st, st > 0 ? c->body : "(connection)");
	json_decref(j);
	return s ? 0 : -1;
}

static int sbx_kill(struct conn *c, const char *id)
{
	char path[128];
	snprintf(path, sizeof(path), "/v1/sandboxes/%.63s", id);
	int st = http(c, "DELETE", path, NULL);
	if (st == 204)
		track(id, 0);
	return st == 204 ? 0 : -1;
}

/* Runs body (a JSON exec request) in sandbox id: the HTTP status. */
static int sbx_exec(struct conn *c, const char *id, const char *body)
{
	char path[128];
	snprintf(path, sizeof(path), "/v1/sandboxes/%.63s/exec", id);
	return http(c, "POST", path, body);
}

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

static void daemon_start(void)
{
	snprintf(state_dir, sizeof(state_dir), "/tmp/cab-XXXXXX");
	if (!mkdtemp(state_dir)) {
		perror("bench: mkdtemp");
		exit(1);
	}
	snprintf(sock_path, sizeof(sock_path), "%s/s.sock", state_dir);
	const char *cache = getenv("CPUOS_CACHE");
	const char *argv[] = { env_or("CPUOSD", "build/bin/cpuosd"), "--state-dir", state_dir, "--socket",
			       sock_path, "--listen", "none", "--url-listen", "none", "--guest-dir",
			       env_or("CPUOS_GUEST_DIR", "build/guest"), "--max-sandboxes", "64",
			       "--log-level", "warn", cache ? "--cache-dir" : NULL, cache, NULL };
	char log[96];
	snprintf(log, sizeof(log), "%s/cpuosd.log", state_dir);
	int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	struct spawn_opts o = { .argv = (char *const *)argv, .fd = { -1, fd, fd } };
	if (fd < 0 || spawn(&o, &daemon_pid) < 0) {
		fprintf(stderr, "bench: cannot start %s\n", argv[0]);
		exit(1);
	}
	close(fd);
	for (double t0 = clock_ms_f(); clock_ms_f() - t0 < 15000; usleep(20000)) {
		struct conn *c = conn_open(0);
		int st = c ? http(c, "GET", "/v1/health", NULL) : -1;
		conn_close(c);
		if (st == 200)
			return;
		if (waitpid(daemon_pid, NULL, WNOHANG) == daemon_pid)
			break;
	}
	fprintf(stderr, "bench: cpuosd did not come up (see %s)\n", log);
	exit(1);
}

/* Kills every sandbox still alive, stops the daemon, removes its state. */
static void daemon_stop(void)
{
	struct conn *c = conn_open(2000);
	for (int i = 0; i < MAX_SBX && c; i++)
		if (live_ids[i][0] && sbx_kill(c, live_ids[i]) < 0)
			fprintf(stderr, "bench: could not kill %s\n", live_ids[i]);
	conn_close(c);
	kill(daemon_pid, SIGTERM);
	waitpid(daemon_pid, NULL, 0);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", state_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench: could not remove %s\n", state_dir);
}

static void bench_create(int n)
{
	struct conn *c = conn_open(2000);
	double total[n], create[n], first[n];
	char id[64];
	int ok = 0;
	for (int i = -1; i < n; i++) { /* -1: warm the page cache and the layer base */
		double t0 = clock_ms_f();
		if (sbx_create(c, id, sizeof(id)) < 0)
			continue;
		double t1 = clock_ms_f();
		int st = sbx_exec(c, id, "{\"argv\":[\"/bin/true\"]}");
		double t2 = clock_ms_f();
		if (st != 200)
			fprintf(stderr, "bench: exec: %d %s\n", st, c->body);
		else if (i >= 0)
			total[ok] = t2 - t0, create[ok] = t1 - t0, first[ok++] = t2 - t1;
		sbx_kill(c, id);
	}
	conn_close(c);
	printf("create -> first exec done (%d of %d sandboxes, base, 1 vCPU, 512 MB, over HTTP)\n", ok, n);
	printf("  total                 p50 %7.1f ms  p90 %7.1f ms\n", pct(total, ok, 50), pct(total, ok, 90));
	printf("    create answered     p50 %7.1f ms  p90 %7.1f ms\n", pct(create, ok, 50), pct(create, ok, 90));
	printf("    first exec of true  p50 %7.1f ms  p90 %7.1f ms\n", pct(first, ok, 50), pct(first, ok, 90));
}

static void bench_exec(int n)
{
	struct conn *c = conn_open(2000);
	char id[64];
	struct vm *vm = c && sbx_create(c, id, sizeof(id)) == 0 ? vt_boot("base", 1, 512, NULL) : NULL;
	if (!vm) { /* vt_boot or sbx_create said why */
		conn_close(c);
		return;
	}
	static const char *const argv_true[] = { "/bin/true", NULL };
	const char *body = "{\"argv\":[\"/bin/true\"]}";
	double api[n], direct[n], diff[n];
	int na = 0, nd = 0, np = 0;
	struct result r;
	for (int i = 0; i < 20; i++) /* warm both paths under TCG */
		vt_exec(vm, &(struct cmd){ .argv = argv_true }, &r, 30000), vt_result_free(&r),
			sbx_exec(c, id, body);
	for (int i = 0; i < n; i++) {
		double t0 = clock_ms_f();
		int st = sbx_exec(c, id, body);
		double t1 = clock_ms_f();
		json_t *j = st == 200 ? json_loads(c->body, 0, NULL) : NULL;
		json_t *code = json_object_get(j, "exit_code");
		int a_ok = json_is_integer(code) && json_integer_value(code) == 0;
		if (a_ok)
			api[na++] = t1 - t0;
		json_decref(j);
		double t2 = clock_ms_f();
		int d_ok = vt_exec(vm, &(struct cmd){ .argv = argv_true }, &r, 30000) == 0 && r.exit_code == 0;
		if (d_ok)
			direct[nd++] = clock_ms_f() - t2;
		vt_result_free(&r);
		if (a_ok && d_ok) /* neighbours in time: noise mostly cancels */
			diff[np++] = api[na - 1] - direct[nd - 1];
	}
	printf("exec round trip of /bin/true (%d runs each, alternating; one sandbox, one VM)\n", n);
	double a50 = pct(api, na, 50), a99 = pct(api, na, 99);
	double d50 = pct(direct, nd, 50), d99 = pct(direct, nd, 99);
	printf("  HTTP API (keep-alive) p50 %7.2f ms  p99 %7.2f ms  (%d ok)\n", a50, a99, na);
	printf("  agent channel direct  p50 %7.2f ms  p99 %7.2f ms  (%d ok)\n", d50, d99, nd);
	printf("  added by the daemon:  p50 %.2f ms (target <= 1 ms); median of paired differences "
	       "%.2f ms\n", a50 - d50, pct(diff, np, 50));
	vm_stop(vm, 5000);
	vm_free(vm, 0);
	sbx_kill(c, id);
	conn_close(c);
}

static long rss_kb(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	long kb = 0;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			kb = atol(line + 6);
	if (f)
		fclose(f);
	return kb;
}

/* Sums the RSS of the processes whose command line holds the daemon's VM
 * run directory (its QEMUs); their number in *count. */
static long qemu_rss_kb(int *count)
{
	char vms[96], path[64], cmd[8192];
	snprintf(vms, sizeof(vms), "%s/vms/", state_dir);
	DIR *d = opendir("/proc");
	struct dirent *e;
	long kb = 0;
	*count = 0;
	while (d && (e = readdir(d))) {
		int pid = atoi(e->d_name);
		snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
		FILE *f = pid > 0 ? fopen(path, "r") : NULL;
		size_t n = f ? fread(cmd, 1, sizeof(cmd) - 1, f) : 0;
		if (f)
			fclose(f);
		for (size_t i = 0; i < n; i++)
			cmd[i] = cmd[i] ? cmd[i] : ' ';
		cmd[n] = '\0';
		if (n && strstr(cmd, vms))
			kb += rss_kb(pid), ++*count;
	}
	if (d)
		closedir(d);
	return kb;
}

/* n exec round trips of /bin/true into v[]: how many succeeded. */
static int exec_rounds(struct conn *c, const char *id, double *v, int n)
{
	int ok = 0;
	for (int i = 0; i < n; i++) {
		double t0 = clock_ms_f();
		if (sbx_exec(c, id, "{\"argv\":[\"/bin/true\"]}") == 200)
			v[ok++] = clock_ms_f() - t0;
	}
	return ok;
}

/* A client that asks for a stream and never reads it: its socket. */
static int stalled_stream(const char *path)
{
	int fd = unix_connect(sock_path, 2000);
	char req[256];
	int len = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: cpuosd\r\n\r\n", path);
	if (fd >= 0 && write(fd, req, (size_t)len) != len) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Exec round trips while 10 clients hold streams of a noisy process on the
 * same sandbox open without reading them, against the same sandbox quiet. */
static void bench_hostile(int n)
{
	enum { STREAMS = 10 };
	struct conn *c = conn_open(2000);
	char id[64], path[160];
	if (!c || sbx_create(c, id, sizeof(id)) < 0) {
		conn_close(c);
		return;
	}
	double quiet[n], busy[n];
	exec_rounds(c, id, quiet, n < 20 ? n : 20); /* warm up under TCG */
	int nq = exec_rounds(c, id, quiet, n);
	int st = sbx_exec(c, id, "{\"cmd\":\"yes\",\"background\":true}");
	json_t *j = st == 201 ? json_loads(c->body, 0, NULL) : NULL;
	long pid = (long)json_integer_value(json_object_get(j, "pid"));
	json_decref(j);
	int fds[STREAMS], open_ = 0;
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%ld/stream", id, pid);
	for (int i = 0; pid && i < STREAMS; i++)
		if ((fds[open_] = stalled_stream(path)) >= 0)
			open_++;
	usleep(2000000); /* every stream fills its socket and its window */
	int nb = exec_rounds(c, id, busy, n);
	long dkb = rss_kb(daemon_pid);
	for (int i = 0; i < open_; i++)
		close(fds[i]);
	printf("exec round trip of /bin/true with %d streams nobody reads on the same sandbox (%d runs each)\n",
	       open_, n);
	double q50 = pct(quiet, nq, 50), b50 = pct(busy, nb, 50);
	printf("  quiet                 p50 %7.2f ms  p99 %7.2f ms  (%d ok)\n", q50, pct(quiet, nq, 99), nq);
	printf("  10 stalled streams    p50 %7.2f ms  p99 %7.2f ms  (%d ok)  %.2fx quiet; cpuosd RSS %.1f MB\n",
	       b50, pct(busy, nb, 99), nb, q50 > 0 ? b50 / q50 : 0.0, dkb / 1024.0);
	sbx_kill(c, id);
	conn_close(c);
}

struct worker {
	pthread_t th;
	int ok;
	double create_ms, used_ms;
};

static pthread_barrier_t all_up, measured;

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	struct conn *c = conn_open(5000);
	char id[64] = "";
	double t0 = clock_ms_f();
	if (c && sbx_create(c, id, sizeof(id)) == 0) {
		w->create_ms = clock_ms_f() - t0;
		int st = sbx_exec(c, id, "{\"cmd\":\"echo $((6*7))\"}");
		json_t *j = st == 200 ? json_loads(c->body, 0, NULL) : NULL;
		const char *out = json_string_value(json_object_get(j, "stdout"));
		w->ok = out && !strcmp(out, "42\n");
		json_decref(j);
		w->used_ms = clock_ms_f() - t0;
	}
	pthread_barrier_wait(&all_up); /* every sandbox exists at once */
	pthread_barrier_wait(&measured);
	if (id[0])
		sbx_kill(c, id);
	conn_close(c);
	return NULL;
}

static void bench_concurrent(int n)
{
	struct worker w[n];
	memset(w, 0, sizeof(w));
	pthread_barrier_init(&all_up, NULL, (unsigned)n + 1);
	pthread_barrier_init(&measured, NULL, (unsigned)n + 1);
	double t0 = clock_ms_f();
	for (int i = 0; i < n; i++)
		pthread_create(&w[i].th, NULL, worker_run, &w[i]);
	pthread_barrier_wait(&all_up);
	double t_up = clock_ms_f() - t0;
	int nq;
	long qkb = qemu_rss_kb(&nq), dkb = rss_kb(daemon_pid);
	pthread_barrier_wait(&measured);
	for (int i = 0; i < n; i++)
		pthread_join(w[i].th, NULL);
	double t_all = clock_ms_f() - t0;
	double create[n], used[n];
	int ok = 0, m = 0;
	for (int i = 0; i < n; i++) {
		ok += w[i].ok;
		if (w[i].create_ms > 0)
			create[m] = w[i].create_ms, used[m++] = w[i].used_ms;
	}
	printf("concurrent (%d sandboxes created and used at once, base, 1 vCPU, 512 MB)\n", n);
	printf("  output verified       %d of %d\n", ok, n);
	printf("  wall time             %7.1f ms total (create+exec+kill); all up after %.1f ms\n",
	       t_all, t_up);
	printf("  create answered       p50 %7.1f ms  max %7.1f ms\n", pct(create, m, 50), pct(create, m, 100));
	printf("  create+exec done      p50 %7.1f ms  max %7.1f ms\n", pct(used, m, 50), pct(used, m, 100));
	printf("  host memory at peak   %7.1f MB: QEMU RSS %.1f MB (%d processes, %.1f MB each) "
	       "+ cpuosd %.1f MB\n",
	       (qkb + dkb) / 1024.0, qkb / 1024.0, nq, nq ? qkb / 1024.0 / nq : 0.0, dkb / 1024.0);
	pthread_barrier_destroy(&all_up);
	pthread_barrier_destroy(&measured);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	int n = argc > 2 ? atoi(argv[2]) : 0;
	const char *what = argc > 1 ? argv[1] : "";
	if (strcmp(what, "create") && strcmp(what, "exec") && strcmp(what, "concurrent") &&
	    strcmp(what, "hostile")) {
		fprintf(stderr, "usage: bench_api create N | exec N | concurrent N | hostile N\n");
		return 2;
	}
	daemon_start();
	if (!strcmp(what, "create"))
		bench_create(n > 0 ? n : 10);
	else if (!strcmp(what, "exec"))
		bench_exec(n > 0 ? n : 200);
	else if (!strcmp(what, "hostile"))
		bench_hostile(n > 0 ? n : 100);
	else
		bench_concurrent(n > 0 && n <= MAX_SBX ? n : 20);
	daemon_stop();
	return 0;
}
