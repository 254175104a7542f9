/*
 * Snapshot tests on real microVMs: pause and resume in place, many cycles
 * byte-exact, snapshots restored into independent copies, and damaged or
 * foreign snapshots refused with a reason. Timings are printed as notes;
 * the figures that matter are in bench/bench_snap.c.
 */
#include "common/clock.h"
#include "runner/snap.h"
#include "tests/lib/tap.h"
#include "tests/lib/vmtest.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MEM_MB 256

static int sh(struct vm *vm, const char *cmd, char *out, size_t outlen)
{
	struct result r;
	int rc = vt_exec(vm, &(struct cmd){ .shell = cmd }, &r, 60000);
	if (rc == 0 && r.exit_code != 0) {
		t_note("'%s' exited %d: %.*s", cmd, r.exit_code, (int)r.err.len, (char *)r.err.data);
		rc = -EIO;
	}
	if (out && outlen) {
		size_t n = r.out.len < outlen - 1 ? r.out.len : outlen - 1;
		memcpy(out, r.out.data, n);
		out[n] = '\0';
		while (n && out[n - 1] == '\n')
			out[--n] = '\0';
	}
	vt_result_free(&r);
	return rc;
}

/* Pause, then resume in place, timing both. */
static struct vm *cycle(struct vm *vm, double *pause_ms, double *resume_ms)
{
	char dir[256], err[512];
	snprintf(dir, sizeof(dir), "%s", vm_run_dir(vm));
	double t0 = clock_ms_f();
	if (vm_pause(vm, err, sizeof(err)) < 0) {
		t_note("pause: %s", err);
		vm_free(vm, 0);
		return NULL;
	}
	double t1 = clock_ms_f();
	vm_free(vm, 1);
	vm = vt_start("base", 1, MEM_MB, NULL, dir, dir, err, sizeof(err));
	if (!vm) {
		t_note("resume: %s", err);
		return NULL;
	}
	char out[64];
	sh(vm, "true", out, sizeof(out));
	if (pause_ms)
		*pause_ms = t1 - t0;
	if (resume_ms)
		*resume_ms = clock_ms_f() - t1;
	return vm;
}

static void test_pause_resume(void)
{
	struct vm *vm = vt_boot("base", 1, MEM_MB, NULL);
	if (!CHECK(vm))
		return;
	char a[128], b[128];
	CHECK(sh(vm, "echo kept > /home/user/f && "
		     "(i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done) "
		     ">/dev/null 2>&1 & echo started", a, sizeof(a)) == 0);
	usleep(500000);
	CHECK(sh(vm, "cat /tmp/count", a, sizeof(a)) == 0);
	double p, r;
	vm = cycle(vm, &p, &r);
	if (!CHECK(vm))
		return;
	t_note("pause %.0f ms, resume to first exec %.0f ms", p, r);
	CHECK(sh(vm, "cat /home/user/f", b, sizeof(b)) == 0 && !strcmp(b, "kept"));
	/* The counter's loop lives on and counts on. */
	usleep(600000);
	CHECK(sh(vm, "cat /tmp/count", b, sizeof(b)) == 0 && atoi(b) > atoi(a));
	if (atoi(b) <= atoi(a))
		t_note("count before %s, after %s", a, b);
	/* The clock is the host's, not the saved one. */
	CHECK(sh(vm, "date +%s", b, sizeof(b)) == 0 && llabs(atoll(b) - (long long)time(NULL)) <= 2);
	vm_free(vm, 0);
}

/* Memory (a tmpfs file) and disk stay byte-exact over many cycles, with
 * files written between them. */
static void test_cycles(void)
{
	int n = getenv("CPUOS_SNAP_CYCLES") ? atoi(getenv("CPUOS_SNAP_CYCLES")) : 20;
	struct vm *vm = vt_boot("base", 1, MEM_MB, NULL);
	if (!CHECK(vm))
		return;
	char want[128], got[128];
	CHECK(sh(vm, "head -c 16777216 /dev/urandom > /dev/shm/blob && sha256sum < /dev/shm/blob",
		 want, sizeof(want)) == 0);
	double pmax = 0, rmax = 0;
	int ok = 1;
	for (int i = 0; i < n && ok; i++) {
		char cmd[256];
		snprintf(cmd, sizeof(cmd), "echo %d > /home/user/f%d && sync", i, i);
		ok = sh(vm, cmd, NULL, 0) == 0;
		double p, r;
		vm = ok ? cycle(vm, &p, &r) : vm;
		if (!vm)
			break;
		pmax = p > pmax ? p : pmax;
		rmax = r > rmax ? r : rmax;
		ok = sh(vm, "sha256sum < /dev/shm/blob", got, sizeof(got)) == 0 && !strcmp(got, want);
		snprintf(cmd, sizeof(cmd), "echo $(cat /home/user/f0 /home/user/f%d)", i);
		char files[64], expect[64];
		snprintf(expect, sizeof(expect), i ? "0 %d" : "0 0", i);
		ok = ok && sh(vm, cmd, files, sizeof(files)) == 0 && !strcmp(files, expect);
		if (!ok)
			t_note("cycle %d: memory %s (want %s), files '%s'", i, got, want, files);
	}
	CHECK(vm && ok);
	t_note("%d cycles, slowest pause %.0f ms, slowest resume %.0f ms", n, pmax, rmax);
	vm_free(vm, 0);
}

/* A snapshot restored twice: two independent sandboxes from one memory
 * file, each with its own name, entropy and disk. */
static void test_snapshot_copies(void)
{
	struct vm *parent = vt_boot("base", 1, MEM_MB, NULL);
	if (!CHECK(parent))
		return;
	char dir[128], err[512], out[2][128];
	CHECK(sh(parent, "echo parent > /home/user/p", NULL, 0) == 0);
	vt_new_run_dir(dir, sizeof(dir));
	double t0 = clock_ms_f();
	if (!CHECK(vm_snapshot(parent, dir, 0, err, sizeof(err)) == 0)) {
		t_note("snapshot: %s", err);
		vm_free(parent, 0);
		return;
	}
	t_note("snapshot of a running VM %.0f ms", clock_ms_f() - t0);
	struct vm *kid[2] = { 0 };
	for (int i = 0; i < 2; i++) {
		t0 = clock_ms_f();
		kid[i] = vt_start("base", 1, MEM_MB, NULL, dir, NULL, err, sizeof(err));
		if (!CHECK(kid[i]))
			t_note("restore: %s", err);
		else
			t_note("restore %d to agent %.0f ms", i, clock_ms_f() - t0);
	}
	if (kid[0] && kid[1]) {
		CHECK(sh(kid[0], "echo mine > /home/user/k", NULL, 0) == 0);
		CHECK(sh(kid[1], "test -e /home/user/k || echo absent", out[1], sizeof(out[1])) == 0 &&
		      !strcmp(out[1], "absent"));
		CHECK(sh(kid[1], "cat /home/user/p", out[1], sizeof(out[1])) == 0 &&
		      !strcmp(out[1], "parent"));
		for (int i = 0; i < 2; i++)
			sh(kid[i], "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'", out[i],
			   sizeof(out[i]));
		CHECK(strlen(out[0]) == 32 && strcmp(out[0], out[1]));
		for (int i = 0; i < 2; i++)
			sh(kid[i], "cat /proc/sys/kernel/random/uuid", out[i], sizeof(out[i]));
		CHECK(strlen(out[0]) == 36 && strcmp(out[0], out[1]));
	}
	/* The parent ran on meanwhile, untouched by its copies. */
	CHECK(sh(parent, "test -e /home/user/k || echo absent", out[0], sizeof(out[0])) == 0 &&
	      !strcmp(out[0], "absent"));
	for (int i = 0; i < 2; i++)
		vm_free(kid[i], 0);
	vm_free(parent, 0);
	snap_remove(dir);
}

static void rewrite(const char *path, const char *from, const char *to)
{
	char buf[8192];
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = '\0';
	char *p = strstr(buf, from);
	if (!p)
		return;
	char out[8192];
	snprintf(out, sizeof(out), "%.*s%s%s", (int)(p - buf), buf, to, p + strlen(from));
	f = fopen(path, "w");
	if (f) {
		fputs(out, f);
		fclose(f);
	}
}

/* Damaged and foreign snapshots are refused with a reason, and the
 * snapshot itself is left as it was. */
static void test_refused(void)
{
	struct vm *vm = vt_boot("base", 1, MEM_MB, NULL);
	if (!CHECK(vm))
		return;
	char dir[128], path[300], err[512];
	vt_new_run_dir(dir, sizeof(dir));
	if (!CHECK(vm_snapshot(vm, dir, 1, err, sizeof(err)) == 0)) {
		t_note("snapshot: %s", err);
		vm_free(vm, 0);
		return;
	}
	vm_free(vm, 0);
	struct snap_manifest m;
	CHECK(snap_load(dir, &m, 1, err, sizeof(err)) == 0);
	CHECK(m.sealed && m.files[SNAP_MEM].sha256[0] && m.files[SNAP_DISK].sha256[0]);

	/* A flipped byte in the state: its checksum says so. */
	snprintf(path, sizeof(path), "%s/state", dir);
	int fd = open(path, O_RDWR);
	char c = 0;
	CHECK(fd >= 0 && pread(fd, &c, 1, 100) == 1);
	c ^= 1;
	CHECK(pwrite(fd, &c, 1, 100) == 1);
	CHECK(!vt_start("base", 1, MEM_MB, NULL, dir, NULL, err, sizeof(err)));
	CHECK(strstr(err, "checksum") != NULL);
	t_note("flipped byte: %s", err);
	c ^= 1;
	CHECK(pwrite(fd, &c, 1, 100) == 1);
	close(fd);

	/* A truncated memory file. */
	snprintf(path, sizeof(path), "%s/mem", dir);
	struct stat st;
	CHECK(stat(path, &st) == 0 && truncate(path, st.st_size / 2) == 0);
	CHECK(!vt_start("base", 1, MEM_MB, NULL, dir, NULL, err, sizeof(err)));
	CHECK(strstr(err, "wrong size") != NULL);
	t_note("truncated: %s", err);
	CHECK(truncate(path, st.st_size) == 0);

	/* Made by another QEMU: refused before it is loaded. */
	snprintf(path, sizeof(path), "%s/" SNAP_MANIFEST, dir);
	CHECK(snap_load(dir, &m, 0, err, sizeof(err)) == 0);
	rewrite(path, m.env.qemu, "6.2.0");
	CHECK(!vt_start("base", 1, MEM_MB, NULL, dir, NULL, err, sizeof(err)));
	CHECK(strstr(err, "another QEMU") != NULL);
	t_note("other QEMU: %s", err);

	/* Another machine size. */
	rewrite(path, "6.2.0", m.env.qemu);
	CHECK(!vt_start("base", 1, MEM_MB * 2, NULL, dir, NULL, err, sizeof(err)));
	t_note("other size: %s", err);
	CHECK(strstr(err, "snapshot is") != NULL);
	snap_remove(dir);
	/* Gone: no manifest. */
	CHECK(!vt_start("base", 1, MEM_MB, NULL, dir, NULL, err, sizeof(err)));
	CHECK(strstr(err, "no snapshot") != NULL);
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	static const struct t_case cases[] = {
		{ "snap_pause_resume", test_pause_resume },
		{ "snap_cycles", test_cycles },
		{ "snap_copies", test_snapshot_copies },
		{ "snap_refused", test_refused },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
