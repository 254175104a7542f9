/*
 * bench_snap: snapshot figures, printed, never asserted, each against a
 * baseline measured in the same run: create -> first exec from a template
 * snapshot (against a cold boot and QEMU's plain -incoming of a streamed
 * RAM dump), fork, pause and resume, and host memory per restored VM.
 */
#include "common/clock.h"
#include "runner/qemu.h"
#include "runner/snap.h"
#include "tests/lib/vmtest.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VCPUS 1
#define MEM_MB 512
#define MAX_RUNS 1000
#define MAX_DENSITY 1000
#define MAX_LIVE (MAX_DENSITY + 64)
#define MAX_DIRS 64
#define FORK_MAX 10
#define EXEC_MS 120000

static const char *tpl = "python";
static int runs = 5;
static volatile sig_atomic_t interrupted;

/* ---- what to clean up, also on failure ---- */

/* VMs alive (freed with their run directories) and directories that hold
 * a snapshot or a paused VM (removed). Every VM and directory the bench
 * makes is in one of them until it is gone. */
static struct vm *live[MAX_LIVE];
static char dirs[MAX_DIRS][128];

static void track_vm(struct vm *vm)
{
	for (int i = 0; i < MAX_LIVE; i++)
		if (!live[i]) {
			live[i] = vm;
			return;
		}
	fprintf(stderr, "bench: more than %d VMs\n", MAX_LIVE);
	exit(1);
}

/* Frees vm and removes its run directory. */
static void drop_vm(struct vm *vm)
{
	for (int i = 0; vm && i < MAX_LIVE; i++)
		if (live[i] == vm)
			live[i] = NULL;
	vm_free(vm, 0);
}

static void track_dir(const char *dir)
{
	for (int i = 0; i < MAX_DIRS; i++)
		if (!dirs[i][0]) {
			snprintf(dirs[i], sizeof(dirs[i]), "%s", dir);
			return;
		}
	fprintf(stderr, "bench: more than %d directories\n", MAX_DIRS);
	exit(1);
}

/* Removes a snapshot directory, or a paused VM's (both kinds of files). */
static void drop_dir(const char *dir)
{
	char copy[128];
	snprintf(copy, sizeof(copy), "%s", dir);
	for (int i = 0; i < MAX_DIRS; i++)
		if (!strcmp(dirs[i], copy))
			dirs[i][0] = '\0';
	snap_remove(copy);
	vm_remove_files(copy);
}

static void cleanup(void)
{
	for (int i = 0; i < MAX_LIVE; i++)
		if (live[i])
			drop_vm(live[i]);
	for (int i = 0; i < MAX_DIRS; i++)
		if (dirs[i][0])
			drop_dir(dirs[i]);
}

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1; /* the loops stop at their next step; cleanup runs at exit */
}

/* ---- figures ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(const double *v, int n, double p)
{
	if (n <= 0)
		return 0;
	double s[n];
	memcpy(s, v, sizeof(s));
	qsort(s, (size_t)n, sizeof(*s), cmp_double);
	return s[(int)(p / 100.0 * (n - 1) + 0.5)];
}

static double p50(const double *v, int n)
{
	return pct(v, n, 50);
}

/* "p50 X ms  p99 Y ms", or max instead of p99 when runs are too few for it. */
static void print_dist(const char *label, const double *v, int n, const char *tail)
{
	if (!n) {
		printf("  %-30s (no successful run)\n", label);
		return;
	}
	printf("  %-30s p50 %8.1f ms  %s %8.1f ms  (%d)%s%s\n", label, p50(v, n),
	       n >= 20 ? "p99" : "max", pct(v, n, n >= 20 ? 99 : 100), n, tail ? "  " : "",
	       tail ? tail : "");
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static double file_mb(const char *dir, const char *name)
{
	char path[300];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return stat(path, &st) == 0 ? st.st_size / 1048576.0 : 0;
}

static long meminfo_kb(const char *key)
{
	char line[256];
	size_t n = strlen(key);
	long kb = -1;
	FILE *f = fopen("/proc/meminfo", "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':')
			kb = atol(line + n + 1);
	if (f)
		fclose(f);
	return kb;
}

/* Pss and Rss of pid from smaps_rollup: 0 or -1. */
static int rollup_kb(pid_t pid, long *pss, long *rss)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	*pss = *rss = 0;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "Pss:", 4))
			*pss = atol(line + 4);
		else if (!strncmp(line, "Rss:", 4))
			*rss = atol(line + 4);
	}
	fclose(f);
	return 0;
}

/* ---- VMs ---- */

/* Starts a VM of the template: booted (restore NULL), restored from the
 * snapshot restore into a new run directory with a new identity, or
 * resumed in place (restore is its own run directory, in_place set).
 * Tracked; NULL with the reason on stderr. */
static struct vm *start(const char *restore, int in_place)
{
	char run[128], err[512];
	if (in_place)
		snprintf(run, sizeof(run), "%s", restore);
	else
		vt_new_run_dir(run, sizeof(run));
	struct vm *vm = vt_start(tpl, VCPUS, MEM_MB, NULL, restore, run, err, sizeof(err));
	if (!vm) {
		const char *what = !restore ? "boot" : in_place ? "resume" : "restore";
		fprintf(stderr, "bench: %s %s: %s\n", what, restore ? restore : tpl, err);
		if (!in_place) /* vm_start keeps a failed start's files */
			vm_remove_files(run);
		return NULL;
	}
	track_vm(vm);
	return vm;
}

/* Runs a shell command (as user, or root when NULL): 0 when it exited 0. */
static int sh(struct vm *vm, const char *cmd, const char *user)
{
	struct result r;
	int rc = vt_exec(vm, &(struct cmd){ .shell = cmd, .user = user }, &r, EXEC_MS);
	if (rc == 0 && r.exit_code != 0)
		rc = -EIO;
	int n = (int)(r.err.len < 400 ? r.err.len : 400);
	if (rc < 0)
		fprintf(stderr, "bench: '%s' failed (%s, exit %d): %.*s\n", cmd, strerror(-rc),
			r.exit_code, n, n ? (char *)r.err.data : "");
	vt_result_free(&r);
	return rc;
}

/* The first exec after a create or resume: `true`. */
static int exec_true(struct vm *vm)
{
	static const char *const argv_true[] = { "/bin/true", NULL };
	struct result r;
	int rc = vt_exec(vm, &(struct cmd){ .argv = argv_true }, &r, EXEC_MS);
	if (rc == 0 && r.exit_code != 0)
		rc = -EIO;
	if (rc < 0)
		fprintf(stderr, "bench: first exec of true failed: %s\n", strerror(-rc));
	vt_result_free(&r);
	return rc;
}

/* Where a create's time went: vt_start in all, of it QEMU spawn -> state
 * loaded (a boot: -> QMP up) and spawn -> agent answered. */
struct split {
	double start, state, hello;
};

/* create -> first exec done: restore (NULL = cold boot), then `true`.
 * The VM in *out (tracked), or NULL; the time in ms or -1. */
static double create_exec(const char *restore, struct vm **out, struct split *sp)
{
	double t0 = clock_ms_f();
	struct vm *vm = start(restore, 0);
	double t1 = clock_ms_f();
	if (vm && exec_true(vm) < 0) {
		drop_vm(vm);
		vm = NULL;
	}
	double ms = clock_ms_f() - t0;
	if (vm && sp)
		*sp = (struct split){ .start = t1 - t0,
				      .state = restore ? vm_timings(vm)->restore_ms
						       : vm_timings(vm)->qemu_ms,
				      .hello = vm_timings(vm)->total_ms };
	if (out)
		*out = vm;
	else
		drop_vm(vm);
	return vm ? ms : -1;
}

static int is_python(void)
{
	return !strcmp(tpl, "python");
}

/* The workloads; other templates than python get shell stand-ins, so the
 * bench runs (quickly) on base too. */
static const char *warm_cmd(void)
{
	return is_python() ? "python3 -c 'import numpy, pandas, matplotlib.pyplot'" : "true";
}

static const char *small_job(void)
{
	return is_python() ? "python3 -c 'import pandas as pd; "
			     "print(pd.DataFrame({\"a\": range(1000)}).a.sum())'"
			   : "echo $((6 * 7))";
}

static const char *pandas_job(void)
{
	if (!is_python())
		return "dd if=/dev/urandom of=/tmp/w bs=1M count=16 status=none; sha256sum /tmp/w";
	return "python3 -c \"import pandas as pd, numpy as np; "
	       "df = pd.DataFrame(np.random.rand(200000, 4)); print(df.describe().shape)\"";
}

/* The template snapshot, made once: the template booted, warmed as user
 * "user" and snapshotted, sealed (as cpuosd makes its template snapshots). */
static char tsnap[128];
static int tsnap_failed;

static const char *template_snapshot(void)
{
	if (tsnap[0] || tsnap_failed)
		return tsnap[0] ? tsnap : NULL;
	tsnap_failed = 1; /* until it is made: one try per run */
	double t0 = clock_ms_f();
	struct vm *vm = start(NULL, 0);
	if (!vm || sh(vm, warm_cmd(), "user") < 0) {
		drop_vm(vm);
		return NULL;
	}
	double t1 = clock_ms_f();
	char dir[128], err[512];
	vt_new_run_dir(dir, sizeof(dir));
	track_dir(dir);
	int r = vm_snapshot(vm, dir, 1, err, sizeof(err));
	double t2 = clock_ms_f();
	drop_vm(vm);
	if (r < 0) {
		fprintf(stderr, "bench: template snapshot: %s\n", err);
		drop_dir(dir);
		return NULL;
	}
	printf("template snapshot of %s: boot + warm-up %.0f ms, vm_snapshot (sealed) %.0f ms; "
	       "mem %.0f MB, state %.1f MB\n",
	       tpl, t1 - t0, t2 - t1, file_mb(dir, "mem"), file_mb(dir, "state"));
	snprintf(tsnap, sizeof(tsnap), "%s", dir);
	tsnap_failed = 0;
	return tsnap;
}

/* A snapshot of vm into a new tracked directory; 0 or -1 (said why). */
static int snapshot(struct vm *vm, char *dir, size_t dirlen, int sealed)
{
	char err[512];
	vt_new_run_dir(dir, dirlen);
	track_dir(dir);
	if (vm_snapshot(vm, dir, sealed, err, sizeof(err)) < 0) {
		fprintf(stderr, "bench: vm_snapshot: %s\n", err);
		drop_dir(dir);
		return -1;
	}
	return 0;
}

/* ---- 1. create -> first exec ---- */

static void bench_create(void)
{
	const char *ts = template_snapshot();
	if (!ts)
		return;
	/* (c): a VM restored from the template has private RAM, so its
	 * snapshot streams the RAM into the state. */
	char cdir[128];
	struct vm *src;
	struct snap_manifest m;
	char err[512];
	if (create_exec(ts, &src, NULL) < 0)
		return;
	int r = snapshot(src, cdir, sizeof(cdir), 0);
	drop_vm(src);
	if (r < 0)
		return;
	if (snap_load(cdir, &m, 0, err, sizeof(err)) < 0 || m.ram_in_file) {
		fprintf(stderr, "bench: the streamed snapshot is not one: %s\n",
			m.ram_in_file ? "ram is \"file\"" : err);
		drop_dir(cdir);
		return;
	}
	struct kind {
		const char *label, *restore, *tail;
		double wall[MAX_RUNS], runner[MAX_RUNS], state[MAX_RUNS], agent[MAX_RUNS],
			first[MAX_RUNS];
		int n;
	} *k = calloc(3, sizeof(*k));
	if (!k) {
		drop_dir(cdir);
		return;
	}
	char tail[96];
	snprintf(tail, sizeof(tail), "(state %.1f MB, RAM inside)", file_mb(cdir, "state"));
	k[0].label = "(a) cold boot (baseline)";
	k[1].label = "(b) template snapshot, CoW RAM", k[1].restore = ts;
	k[1].tail = "(target <= 150 ms p50)";
	k[2].label = "(c) -incoming of a RAM stream", k[2].restore = cdir, k[2].tail = tail;
	for (int i = -1; i < runs && !interrupted; i++) /* -1: warm the caches */
		for (int j = 0; j < 3; j++) {
			struct split sp;
			double ms = create_exec(k[j].restore, NULL, &sp);
			if (ms < 0 || i < 0)
				continue;
			int n = k[j].n++;
			k[j].wall[n] = ms;
			k[j].runner[n] = sp.start - sp.hello;
			k[j].state[n] = sp.state;
			k[j].agent[n] = sp.hello - sp.state;
			k[j].first[n] = ms - sp.start;
		}
	printf("create -> first exec of true done (%s, %d vCPU, %d MB; %d runs each, alternating, "
	       "after a warm-up)\n", tpl, VCPUS, MEM_MB, runs);
	for (int j = 0; j < 3; j++) {
		struct kind *x = &k[j];
		print_dist(x->label, x->wall, x->n, x->tail);
		if (!x->n)
			continue;
		printf("      p50 split: runner outside QEMU %6.1f, spawn -> %s %6.1f, -> agent "
		       "%6.1f, first exec %6.1f ms\n",
		       p50(x->runner, x->n), j ? "state loaded" : "QMP up", p50(x->state, x->n),
		       p50(x->agent, x->n), p50(x->first, x->n));
	}
	printf("  ratio cold/(b)                 p50 %7.2fx (target >= 7x)\n",
	       ratio(p50(k[0].wall, k[0].n), p50(k[1].wall, k[1].n)));
	printf("  ratio (c)/(b)                  p50 %7.2fx\n",
	       ratio(p50(k[2].wall, k[2].n), p50(k[1].wall, k[1].n)));
	free(k);
	drop_dir(cdir);
}

/* ---- 2. fork ---- */

/* Snapshot of src + n restores to first exec; prints one line. Returns
 * the time per clone or -1. */
static double fork_once(struct vm *src, int n, const char *kind)
{
	struct vm *kid[FORK_MAX] = { 0 };
	double each[FORK_MAX];
	char dir[128];
	int ok = 0;
	double t0 = clock_ms_f();
	if (snapshot(src, dir, sizeof(dir), 1) < 0)
		return -1;
	double snap_ms = clock_ms_f() - t0;
	for (int i = 0; i < n && !interrupted; i++) {
		double ms = create_exec(dir, &kid[i], NULL);
		if (ms >= 0)
			each[ok++] = ms;
	}
	double total = clock_ms_f() - t0;
	double state_mb = file_mb(dir, "state") + file_mb(dir, "pages");
	double per = ok == n ? total / n : -1;
	for (int i = 0; i < n; i++)
		drop_vm(kid[i]);
	drop_dir(dir);
	printf("  %-9s N=%-2d total %8.1f ms  snapshot %7.1f ms (state %5.1f MB)  "
	       "restore p50 %7.1f max %7.1f ms  per clone %7.1f ms%s\n",
	       kind, n, total, snap_ms, state_mb, p50(each, ok), pct(each, ok, 100), per,
	       ok == n ? "" : "  (some clones failed)");
	return per;
}

static void bench_fork(void)
{
	const char *ts = template_snapshot();
	if (!ts)
		return;
	printf("fork of a running %s VM after %s: snapshot (sealed) + N restores to first exec "
	       "(target <= 150 ms per clone)\n",
	       tpl, is_python() ? "a small pandas job" : "a small job");
	/* A sandbox as cpuosd makes it (restored from the template: private
	 * RAM, whose snapshot is the pages it wrote; its clones map the
	 * template's RAM and write those pages over it), a cold-booted VM
	 * (RAM a file of its own: copied, its clones map it CoW), and the
	 * sandbox with its RAM streamed (CPUOS_STREAM_PAUSES, each clone
	 * loads it), the two baselines. */
	static const char *const kinds[3] = { "sandbox", "cold src", "streamed" };
	double per[3][2] = { { -1, -1 }, { -1, -1 }, { -1, -1 } };
	for (int k = 0; k < 3 && !interrupted; k++) {
		struct vm *src;
		if (k == 2)
			setenv("CPUOS_STREAM_PAUSES", "1", 1);
		if (create_exec(k == 1 ? NULL : ts, &src, NULL) < 0)
			break;
		if (sh(src, small_job(), "user") < 0) {
			drop_vm(src);
			break;
		}
		for (int j = 0; j < 2 && !interrupted; j++)
			per[k][j] = fork_once(src, j ? FORK_MAX : 1, kinds[k]);
		drop_vm(src);
	}
	unsetenv("CPUOS_STREAM_PAUSES");
	if (!interrupted)
		printf("  ratio per clone  sandbox/cold src  N=1 %.2fx  N=%d %.2fx; "
		       "sandbox/streamed  N=1 %.2fx  N=%d %.2fx\n",
		       ratio(per[0][0], per[1][0]), FORK_MAX, ratio(per[0][1], per[1][1]),
		       ratio(per[0][0], per[2][0]), FORK_MAX, ratio(per[0][1], per[2][1]));
}

/* ---- 3. pause and resume ---- */

/* Pauses vm into its run directory and resumes it in place to the first
 * exec. The resumed VM (tracked), or NULL after a failure (cleaned up). */
static struct vm *cycle(struct vm *vm, double *pause_ms, double *resume_ms, double *state_mb)
{
	char dir[128], err[512];
	snprintf(dir, sizeof(dir), "%s", vm_run_dir(vm));
	double t0 = clock_ms_f();
	if (vm_pause(vm, err, sizeof(err)) < 0) {
		fprintf(stderr, "bench: pause: %s\n", err);
		drop_vm(vm);
		return NULL;
	}
	double t1 = clock_ms_f();
	*state_mb = file_mb(dir, "state") + file_mb(dir, "pages");
	/* QEMU is gone; the directory holds the VM until it resumes. */
	track_dir(dir);
	for (int i = 0; i < MAX_LIVE; i++)
		if (live[i] == vm)
			live[i] = NULL;
	vm_free(vm, 1);
	vm = start(dir, 1);
	if (vm && exec_true(vm) < 0) {
		drop_vm(vm);
		vm = NULL;
	}
	double t2 = clock_ms_f();
	if (!vm) {
		drop_dir(dir);
		return NULL;
	}
	for (int i = 0; i < MAX_DIRS; i++) /* running again: the VM owns it */
		if (!strcmp(dirs[i], dir))
			dirs[i][0] = '\0';
	*pause_ms = t1 - t0;
	*resume_ms = t2 - t1;
	return vm;
}

static void bench_pause(void)
{
	const char *ts = template_snapshot();
	if (!ts)
		return;
	/* [0]: pauses of written pages (ramdiff.h); [1]: the RAM streamed
	 * (CPUOS_STREAM_PAUSES), the baseline. */
	double cp[MAX_RUNS], cr[MAX_RUNS], p1[2][MAX_RUNS], r1[2][MAX_RUNS], p2[2][MAX_RUNS],
		r2[2][MAX_RUNS];
	double cmb = 0, mb1[2] = { 0, 0 }, mb2[2] = { 0, 0 };
	int nc = 0, n1[2] = { 0, 0 }, n2[2] = { 0, 0 };
	/* Cold-booted: RAM is its own file, every pause saves devices only;
	 * one VM, runs cycles. */
	struct vm *vm;
	if (create_exec(NULL, &vm, NULL) >= 0 && sh(vm, pandas_job(), "user") == 0)
		for (int i = 0; i < runs && vm && !interrupted; i++)
			if ((vm = cycle(vm, &cp[nc], &cr[nc], &cmb)))
				nc++;
	drop_vm(vm);
	/* Restored from the template: private RAM over the snapshot's. Its
	 * pauses save the pages it wrote, each a diff over the snapshot;
	 * streamed, the first pause writes all of RAM into the state and the
	 * resume makes it a file of its own, so the second saves devices
	 * only. A fresh VM per run and way, the two ways taking turns. */
	for (int i = 0; i < runs && !interrupted; i++) {
		for (int w = 0; w < 2 && !interrupted; w++) {
			if (w)
				setenv("CPUOS_STREAM_PAUSES", "1", 1);
			else
				unsetenv("CPUOS_STREAM_PAUSES");
			if (create_exec(ts, &vm, NULL) < 0)
				continue;
			if (sh(vm, pandas_job(), "user") == 0 &&
			    (vm = cycle(vm, &p1[w][n1[w]], &r1[w][n1[w]], &mb1[w]))) {
				n1[w]++;
				if ((vm = cycle(vm, &p2[w][n2[w]], &r2[w][n2[w]], &mb2[w])))
					n2[w]++;
			}
			drop_vm(vm);
		}
	}
	unsetenv("CPUOS_STREAM_PAUSES");
	char tail[96];
	printf("pause and resume of %s after %s (pause = vm_pause; resume = restore in "
	       "place -> first exec of true)\n",
	       tpl, is_python() ? "a pandas job" : "a memory job");
	printf("  targets: pause <= 300 ms, resume -> first exec <= 150 ms\n");
	snprintf(tail, sizeof(tail), "(state %.1f MB: devices only)", cmb);
	print_dist("cold-booted (baseline) pause", cp, nc, tail);
	print_dist("cold-booted (baseline) resume", cr, nc, NULL);
	static const char *const way[2] = { "written pages", "RAM streamed" };
	for (int w = 0; w < 2; w++) {
		char label[64];
		snprintf(tail, sizeof(tail), "(state %.1f MB: %s)", mb1[w], way[w]);
		snprintf(label, sizeof(label), "restored, 1st cycle pause%s", w ? " (stream)" : "");
		print_dist(label, p1[w], n1[w], tail);
		snprintf(label, sizeof(label), "restored, 1st cycle resume%s", w ? " (stream)" : "");
		print_dist(label, r1[w], n1[w], NULL);
		snprintf(tail, sizeof(tail), "(state %.1f MB: %s)", mb2[w],
			 w ? "RAM now a file" : "written pages");
		snprintf(label, sizeof(label), "restored, 2nd cycle pause%s", w ? " (stream)" : "");
		print_dist(label, p2[w], n2[w], tail);
		snprintf(label, sizeof(label), "restored, 2nd cycle resume%s", w ? " (stream)" : "");
		print_dist(label, r2[w], n2[w], NULL);
	}
	printf("  ratio to cold-booted p50       1st cycle pause %.2fx resume %.2fx; "
	       "2nd cycle pause %.2fx resume %.2fx\n",
	       ratio(p50(p1[0], n1[0]), p50(cp, nc)), ratio(p50(r1[0], n1[0]), p50(cr, nc)),
	       ratio(p50(p2[0], n2[0]), p50(cp, nc)), ratio(p50(r2[0], n2[0]), p50(cr, nc)));
	printf("  ratio written pages / stream   1st cycle pause %.2fx resume %.2fx; "
	       "2nd cycle pause %.2fx resume %.2fx\n",
	       ratio(p50(p1[0], n1[0]), p50(p1[1], n1[1])),
	       ratio(p50(r1[0], n1[0]), p50(r1[1], n1[1])),
	       ratio(p50(p2[0], n2[0]), p50(p2[1], n2[1])),
	       ratio(p50(r2[0], n2[0]), p50(r2[1], n2[1])));
}

/* ---- 4. density ---- */

static void bench_density(int k)
{
	const char *ts = template_snapshot();
	if (!ts)
		return;
	/* Once untimed, so the snapshot's pages are in the page cache before
	 * MemAvailable is read. */
	if (create_exec(ts, NULL, NULL) < 0)
		return;
	struct vm **vms = calloc((size_t)k, sizeof(*vms));
	double *each = calloc((size_t)k, sizeof(*each));
	if (!vms || !each) {
		free(vms);
		free(each);
		return;
	}
	sync(); /* dirty pages settle before each reading of MemAvailable */
	sleep(1);
	long avail0 = meminfo_kb("MemAvailable");
	int n = 0;
	for (int i = 0; i < k && !interrupted; i++) {
		double ms = create_exec(ts, &vms[n], NULL);
		if (ms >= 0)
			each[n++] = ms;
	}
	double t0 = clock_ms_f();
	int never = 0;
	while (n && clock_ms_f() - t0 < 5000 && !interrupted) /* let the guests settle into idle */
		for (int i = 0; i < n; i++)
			vm_run(vms[i], &never, 20);
	long pss = 0, rss = 0, p, r;
	int measured = 0;
	for (int i = 0; i < n; i++)
		if (rollup_kb(vm_pid(vms[i]), &p, &r) == 0)
			pss += p, rss += r, measured++;
	sync();
	sleep(1);
	long avail1 = meminfo_kb("MemAvailable"), total = meminfo_kb("MemTotal");
	printf("density (%d of %d idle %s VMs restored from the template snapshot, %d vCPU, %d MB "
	       "each, after 5 s idle)\n", n, k, tpl, VCPUS, MEM_MB);
	print_dist("restore -> first exec", each, n, NULL);
	if (measured && pss > 0) {
		double pss_mb = pss / 1024.0 / measured, rss_mb = rss / 1024.0 / measured;
		double drop_mb = (avail0 - avail1) / 1024.0 / measured;
		printf("  QEMU PSS per VM                %8.1f MB (target <= 80 MB; the snapshot's "
		       "shared pages split %d ways)\n",
		       pss_mb, measured);
		printf("  QEMU RSS per VM                %8.1f MB (shared pages counted in full)\n",
		       rss_mb);
		printf("  MemAvailable drop per VM       %8.1f MB (%.0f -> %.0f MB%s)\n", drop_mb,
		       avail0 / 1024.0, avail1 / 1024.0,
		       drop_mb > 0 ? "" : "; others freed memory meanwhile: no figure");
		printf("  extrapolated: %.0f VMs in 24 GiB at this PSS (target >= 200)",
		       24 * 1024 / pss_mb);
		if (drop_mb > 0)
			printf(", %.0f by the MemAvailable drop; this host (%.1f GiB) %.0f by it",
			       24 * 1024 / drop_mb, total / 1048576.0, avail0 / 1024.0 / drop_mb);
		printf("\n");
	}
	/* Then three pause/resume cycles of each, which save the pages each
	 * wrote (ramdiff.h): their RAM stays the snapshot's but for those. */
	double pause_ms, resume_ms, state_mb;
	for (int c = 0; c < 3 && !interrupted; c++)
		for (int i = 0; i < n && !interrupted; i++)
			if (vms[i])
				vms[i] = cycle(vms[i], &pause_ms, &resume_ms, &state_mb);
	t0 = clock_ms_f();
	while (n && clock_ms_f() - t0 < 5000 && !interrupted)
		for (int i = 0; i < n; i++)
			if (vms[i])
				vm_run(vms[i], &never, 20);
	long pss2 = 0;
	int measured2 = 0;
	for (int i = 0; i < n; i++)
		if (vms[i] && rollup_kb(vm_pid(vms[i]), &p, &r) == 0)
			pss2 += p, measured2++;
	if (measured && measured2 && pss > 0)
		printf("  after 3 pause/resume cycles    %8.1f MB QEMU PSS per VM, %d VMs (%.2fx never "
		       "paused; target <= 1.2x)\n",
		       pss2 / 1024.0 / measured2, measured2,
		       (pss2 / (double)measured2) / (pss / (double)measured));
	for (int i = 0; i < n; i++)
		drop_vm(vms[i]);
	free(vms);
	free(each);
}

static int usage(void)
{
	fprintf(stderr, "usage: bench_snap [--runs N] [--density K] "
			"[--only create|fork|pause|density] [--template NAME]\n");
	return 2;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int density = 20;
	const char *only = NULL;
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--runs") && v)
			runs = atoi(v);
		else if (!strcmp(argv[i], "--density") && v)
			density = atoi(v);
		else if (!strcmp(argv[i], "--only") && v)
			only = v;
		else if (!strcmp(argv[i], "--template") && v)
			tpl = v;
		else
			return usage();
		i++;
	}
	if (runs < 1 || runs > MAX_RUNS || density < 1 || density > MAX_DENSITY ||
	    (only && strcmp(only, "create") && strcmp(only, "fork") && strcmp(only, "pause") &&
	     strcmp(only, "density")))
		return usage();
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	atexit(cleanup);
	printf("bench_snap: accelerator %s, host %ld CPUs, %.1f GiB RAM; "
	       "template %s, %d vCPU, %d MB\n",
	       qemu_accel_name(qemu_accel_probe()), sysconf(_SC_NPROCESSORS_ONLN),
	       meminfo_kb("MemTotal") / 1048576.0, tpl, VCPUS, MEM_MB);
	if ((!only || !strcmp(only, "create")) && !interrupted)
		bench_create();
	if ((!only || !strcmp(only, "fork")) && !interrupted)
		bench_fork();
	if ((!only || !strcmp(only, "pause")) && !interrupted)
		bench_pause();
	if ((!only || !strcmp(only, "density")) && !interrupted)
		bench_density(density);
	cleanup();
	return interrupted ? 130 : 0;
}
