/*
 * Integration tests: real QEMU microVMs booted from our kernel, initramfs
 * and template images, driven through the runner and the agent protocol.
 * Slow under TCG (a python import takes seconds); each case says why.
 * Each case runs in a process of its own (tests/lib/tap) and boots the
 * VMs it uses: what one case did to a guest is not the next one's state.
 */
#include "common/clock.h"
#include "runner/agentc.h"
#include "tests/lib/vmtest.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct vm *py; /* the case's python VM, booted on first use */

static struct vm *python_vm(void)
{
	if (!py)
		py = vt_boot("python", 2, 1024, NULL);
	return py;
}

static int out_is(const struct result *r, const char *s)
{
	return r->out.len == strlen(s) && !memcmp(r->out.data, s, r->out.len);
}

static void test_python_stack(void)
{
	struct vm *vm = python_vm();
	if (!CHECK(vm))
		return;
	struct result r;
	struct cmd c = {
		.shell = "python3 -c \"import numpy, pandas, matplotlib; "
			 "df = pandas.DataFrame({'m': [1, 1, 2], 'v': [1.5, 2.5, 4.0]}); "
			 "print(df.groupby('m').v.sum().to_dict(), matplotlib.get_backend())\"",
	};
	CHECK(vt_exec(vm, &c, &r, 180000) == 0);
	CHECK(r.exit_code == 0);
	CHECK(out_is(&r, "{1: 4.0, 2: 4.0} agg\n"));
	if (r.exit_code)
		t_note("stderr: %.*s", (int)r.err.len, r.err.data);
	vt_result_free(&r);
}

static void test_exit_codes(void)
{
	struct vm *vm = python_vm();
	if (!CHECK(vm))
		return;
	struct result r;
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "true" }, &r, 30000) == 0 && r.exit_code == 0);
	vt_result_free(&r);
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "exit 3" }, &r, 30000) == 0 && r.exit_code == 3);
	vt_result_free(&r);
	static const char *const argv[] = { "/bin/false", NULL };
	CHECK(vt_exec(vm, &(struct cmd){ .argv = argv }, &r, 30000) == 0 && r.exit_code == 1);
	vt_result_free(&r);
	static const char *const missing[] = { "/no/such/program", NULL };
	CHECK(vt_exec(vm, &(struct cmd){ .argv = missing }, &r, 30000) == 0 && r.exit_code == 127);
	vt_result_free(&r);
}

static void test_signal_death(void)
{
	struct vm *vm = python_vm();
	if (!CHECK(vm))
		return;
	struct result r;
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "kill -9 $$" }, &r, 30000) == 0);
	CHECK(r.signal == SIGKILL && r.exit_code == -1);
	vt_result_free(&r);
}

static void test_stdin_roundtrip(void)
{
	struct vm *vm = python_vm();
	if (!CHECK(vm))
		return;
	static const char *const cat[] = { "cat", NULL };
	size_t n = 300 * 1024; /* several frames, with NUL bytes */
	unsigned char *data = malloc(n);
	for (size_t i = 0; i < n; i++)
		data[i] = (unsigned char)(i * 7 + (i >> 9));
	struct result r;
	struct cmd c = { .argv = cat, .stdin_data = data, .stdin_len = n, .stdin_eof = 1 };
	CHECK(vt_exec(vm, &c, &r, 60000) == 0);
	CHECK(r.exit_code == 0 && r.out.len == n && !memcmp(r.out.data, data, n));
	vt_result_free(&r);
	free(data);
}

static void test_stderr_apart(void)
{
	struct vm *vm = python_vm();
	if (!CHECK(vm))
		return;
	struct result r;
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "echo out; echo err >&2; echo out2" }, &r,
		      30000) == 0);
	CHECK(out_is(&r, "out\nout2\n"));
	CHECK(r.err.len == 4 && !memcmp(r.err.data, "err\n", 4));
	vt_result_free(&r);
}

static void test_users(void)
{
	struct vm *vm = python_vm();
	if (!CHECK(vm))
		return;
	struct result r;
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "id -un; pwd", .user = "user" }, &r, 30000) == 0);
	CHECK(out_is(&r, "user\n/home/user\n"));
	vt_result_free(&r);
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "id -u", .user = "nobody-here" }, &r, 30000) == 0);
	CHECK(r.error != 0);
	vt_result_free(&r);
}

static void test_concurrent(void)
{
	struct vm *vm = python_vm();
	if (!CHECK(vm))
		return;
	enum { N = 20 };
	struct result r[N];
	char cmds[N][64];
	for (int i = 0; i < N; i++) {
		snprintf(cmds[i], sizeof(cmds[i]), "sleep 1; echo %d", i);
		CHECK(vt_exec_start(vm, &(struct cmd){ .shell = cmds[i] }, &r[i]) == 0);
	}
	for (int i = 0; i < N; i++) {
		CHECK(vm_run(vm, &r[i].done, 60000) == 0);
		char want[16];
		snprintf(want, sizeof(want), "%d\n", i);
		CHECK(r[i].exit_code == 0 && out_is(&r[i], want));
		vt_result_free(&r[i]);
	}
}

static void test_timeout_kills_tree(void)
{
	struct vm *vm = python_vm();
	if (!CHECK(vm))
		return;
	struct result r;
	struct cmd c = { .shell = "sleep 300 & (setsid sleep 301 &); sleep 302; echo never",
			 .timeout_ms = 1500 };
	CHECK(vt_exec(vm, &c, &r, 60000) == 0);
	CHECK(r.timed_out == 1 && r.out.len == 0);
	vt_result_free(&r);
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "sleep 0.3; pgrep -c -x sleep" }, &r, 30000) == 0);
	CHECK(out_is(&r, "0\n")); /* every sleep of the tree is gone */
	if (!out_is(&r, "0\n"))
		t_note("sleeps left: %.*s", (int)r.out.len, r.out.data);
	vt_result_free(&r);
}

/* --- hostile commands: the limits of docs/agent-protocol.md --- */

static struct vm *hostile; /* the case's; 1 vCPU, 512 MiB: the daemon's default sandbox */

static struct vm *hostile_vm(void)
{
	if (!hostile)
		hostile = vt_boot("base", 1, 512, NULL);
	return hostile;
}

/* A sandbox that no longer answers is not used again. */
static void hostile_drop(void)
{
	if (!hostile)
		return;
	t_note("console: %.2000s", vm_console_tail(hostile));
	vm_free(hostile, 0);
	hostile = NULL;
}

/* Waits up to timeout_ms for the exec behind r: 0 or -errno. One that did
 * not finish takes the VM along at once, while r still lives: its pending
 * callback points at r. */
static int hostile_wait(struct result *r, int timeout_ms)
{
	int e = hostile ? vm_run(hostile, &r->done, timeout_ms) : -ENOTCONN;
	if (e == 0 && r->done)
		return 0;
	hostile_drop();
	return e < 0 ? e : -ETIMEDOUT;
}

static int hostile_exec(const struct cmd *c, struct result *r, int timeout_ms)
{
	memset(r, 0, sizeof(*r));
	int e = hostile ? vt_exec_start(hostile, c, r) : -ENOTCONN;
	return e < 0 ? e : hostile_wait(r, timeout_ms);
}

/* Checks that the sandbox answers `echo ok` within limit_ms: 0 when it did. */
static int answers_ok(int limit_ms, const char *when)
{
	struct result r;
	int64_t t0 = clock_ms();
	int e = hostile_exec(&(struct cmd){ .shell = "echo ok" }, &r, 30000);
	int64_t ms = clock_ms() - t0;
	t_note("echo ok %s: %lld ms", when, (long long)ms);
	int ok = CHECK(e == 0 && out_is(&r, "ok\n")) && CHECK(ms <= limit_ms);
	vt_result_free(&r);
	return ok ? 0 : -1;
}

/* Counts the processes named name in the guest (pgrep, not through sh). */
static int count_procs(const char *name)
{
	const char *const argv[] = { "pgrep", "-c", "-x", name, NULL };
	struct result r;
	int n = -1;
	if (hostile_exec(&(struct cmd){ .argv = argv }, &r, 30000) == 0 && r.out.len > 0 &&
	    r.out.len < 16) {
		char buf[16];
		memcpy(buf, r.out.data, r.out.len);
		buf[r.out.len] = '\0';
		n = atoi(buf);
	}
	vt_result_free(&r);
	return n;
}

/* Notes what runs in the guest, by state, name and cgroup (after a failure). */
static void show_procs(void)
{
	struct result r;
	struct cmd c = { .shell = "ps -e -o stat=,comm=,cgroup= | sort | uniq -c | sort -rn | "
				  "head -20" };
	if (hostile_exec(&c, &r, 30000) == 0)
		t_note("processes:\n%.*s", (int)r.out.len, r.out.data);
	vt_result_free(&r);
}

/* Waits up to limit_ms for no process named name to be left, noting how
 * long it took; shows what is left otherwise. */
static void check_gone(const char *name, int limit_ms)
{
	int64_t t0 = clock_ms();
	int n;
	while ((n = count_procs(name)) != 0 && hostile && clock_ms() - t0 < limit_ms)
		vm_pump(hostile, 200);
	t_note("%d '%s' left after %lld ms", n, name, (long long)(clock_ms() - t0));
	if (!CHECK(n == 0) && hostile)
		show_procs();
}

/* Runs shell with a timeout of timeout_ms and checks how it ends: with
 * the timeout (want_signal 0) or killed by want_signal before it, within
 * timeout_ms + 2 s of wall time either way; then that `echo ok` answers. */
static void hostile_case(const char *shell, uint64_t timeout_ms, int want_signal)
{
	if (!CHECK(hostile_vm()))
		return;
	struct result r;
	struct cmd c = { .shell = shell, .timeout_ms = timeout_ms };
	int64_t t0 = clock_ms();
	int e = hostile_exec(&c, &r, (int)timeout_ms + 30000);
	int64_t ms = clock_ms() - t0;
	t_note("ended after %lld ms (timeout %llu ms): timed_out %d, signal %d, exit %d, error %d, "
	       "%zu bytes of stderr",
	       (long long)ms, (unsigned long long)timeout_ms, r.timed_out, r.signal, r.exit_code,
	       r.error, r.err.len);
	CHECK(e == 0);
	if (want_signal)
		CHECK(r.signal == want_signal && !r.timed_out);
	else
		CHECK(r.timed_out == 1 && r.signal == SIGKILL);
	CHECK(ms <= (int64_t)timeout_ms + 2000);
	vt_result_free(&r);
	if (hostile)
		answers_ok(3000, "right after");
}

static void test_fork_bomb_timeout(void)
{
	/* The leader stays (exec, no fork needed) while the bomb grows. */
	hostile_case("bomb() { bomb | bomb & }; bomb; exec sleep 600", 5000, 0);
	/* Its thousand processes take a while to die (TCG), but all do. */
	if (hostile)
		check_gone("sh", 10000);
}

/* The user's report: the leader returns at once and leaves the bomb behind
 * holding its pipes. The exec answers; the timeout still takes the tree. */
static void test_fork_bomb_leftovers(void)
{
	if (!CHECK(hostile_vm()))
		return;
	struct result r;
	struct cmd c = { .shell = "bomb() { bomb | bomb & }; bomb", .timeout_ms = 5000 };
	int64_t t0 = clock_ms();
	int e = hostile_exec(&c, &r, 35000);
	int64_t ms = clock_ms() - t0;
	t_note("ended after %lld ms: timed_out %d, signal %d, exit %d", (long long)ms, r.timed_out,
	       r.signal, r.exit_code);
	CHECK(e == 0 && ms <= 7000);
	vt_result_free(&r);
	if (hostile)
		answers_ok(3000, "while the bomb runs");
	if (!hostile)
		return;
	/* Past the deadline nothing of the bomb is left: it is killed then
	 * (its thousand processes take a while to die under TCG). */
	while (hostile && clock_ms() - t0 < 5000)
		vm_pump(hostile, 100);
	check_gone("sh", 10000);
	if (hostile)
		answers_ok(3000, "after the timeout");
}

static void test_cpu_hog_timeout(void)
{
	if (!CHECK(hostile_vm()))
		return;
	/* 32 spinning subshells and a spinning leader: the agent's share of
	 * the single vCPU is what makes it see the deadline and serve. */
	struct result hog;
	struct cmd c = { .shell = "i=0; while [ $i -lt 32 ]; do (while :; do :; done) & "
				  "i=$((i+1)); done; while :; do :; done",
			 .timeout_ms = 6000 };
	int64_t t0 = clock_ms();
	CHECK(vt_exec_start(hostile, &c, &hog) == 0);
	while (clock_ms() - t0 < 2000 && !hog.done)
		vm_pump(hostile, 100);
	answers_ok(2000, "while 33 spinners run");
	int e = hostile_wait(&hog, 30000);
	int64_t ms = clock_ms() - t0;
	t_note("hog ended after %lld ms (timeout 6000 ms): timed_out %d, signal %d", (long long)ms,
	       hog.timed_out, hog.signal);
	CHECK(e == 0 && hog.timed_out == 1 && hog.signal == SIGKILL && ms <= 8000);
	vt_result_free(&hog);
	if (hostile)
		answers_ok(3000, "right after");
}

static void test_memory_hog(void)
{
	/* Three growing processes: an OOM must take the whole command at
	 * once (signal 9 for its leader), inside the sandbox's limit, and
	 * leave the agent serving. */
	hostile_case("for i in 1 2 3; do tail /dev/zero & done; wait", 90000, SIGKILL);
	if (hostile)
		check_gone("tail", 10000);
}

static void test_ignores_sigterm_timeout(void)
{
	/* Ignores every catchable signal, in its own session, with a child
	 * that does the same: only the cgroup-wide SIGKILL reaches both. */
	hostile_case("trap '' TERM INT HUP QUIT USR1 USR2; "
		     "setsid sh -c \"trap '' TERM INT HUP; while :; do sleep 1; done\" & "
		     "while :; do sleep 1; done",
		     3000, 0);
	if (hostile)
		check_gone("sleep", 10000);
}

/* A stop while a fork bomb fills the guest: the guest may not manage to
 * power off within the grace, but the stop ends it all the same, bounded
 * by the grace, QMP's quit and the kill after it. */
static void test_hostile_stop(void)
{
	if (!CHECK(hostile_vm()))
		return;
	struct result r;
	struct cmd c = { .shell = "bomb() { bomb | bomb & }; bomb; exec sleep 600",
			 .background = 1 };
	CHECK(hostile_exec(&c, &r, 30000) == 0 && r.proc != 0);
	vt_result_free(&r);
	if (!hostile)
		return;
	int64_t t0 = clock_ms();
	while (clock_ms() - t0 < 2000)
		vm_pump(hostile, 100);
	pid_t qemu = vm_pid(hostile);
	CHECK(qemu > 0);
	t0 = clock_ms();
	CHECK(vm_stop(hostile, 10000) == 0);
	int64_t ms = clock_ms() - t0;
	t_note("stopped in %lld ms, end state %s: %s", (long long)ms,
	       vm_state_name(vm_state(hostile)), vm_reason(hostile));
	CHECK(vm_state(hostile) == VM_STOPPED);
	CHECK(qemu > 0 && kill(qemu, 0) < 0 && errno == ESRCH); /* QEMU is gone, reaped */
	CHECK(ms < 10000 + 8000);
	vm_free(hostile, 0);
	hostile = NULL;
}

static void test_background(void)
{
	struct vm *vm = python_vm();
	if (!CHECK(vm))
		return;
	struct result bg, r;
	struct cmd c = { .shell = "echo started; while true; do sleep 0.2; done", .background = 1 };
	CHECK(vt_exec(vm, &c, &bg, 30000) == 0);
	CHECK(bg.done && bg.proc != 0 && bg.pid != 0);
	/* It outlived its exec call: still running and listed. */
	CHECK(vt_simple(vm, P_PS, 0, NULL, &r, 30000) == 0 && r.entries >= 1);
	vt_result_free(&r);
	/* Attach replays the buffered output; a signal ends it. */
	struct result at;
	memset(&at, 0, sizeof(at));
	struct agentc *a = vm_agent(vm);
	struct pbuf *b = agentc_begin(a, P_ATTACH, vt_collect, &at, NULL);
	CHECK(b && proto_put_u32(b, A_PROC, bg.proc) == 0 && agentc_end(a) == 0);
	for (int i = 0; i < 100 && at.out.len < 8; i++)
		vm_pump(vm, 50);
	CHECK(at.out.len >= 8 && !memcmp(at.out.data, "started\n", 8));
	struct result sig;
	memset(&sig, 0, sizeof(sig));
	b = agentc_begin(a, P_SIGNAL, vt_collect, &sig, NULL);
	CHECK(b && proto_put_u32(b, A_PROC, bg.proc) == 0 &&
	      proto_put_u32(b, A_SIGNO, SIGKILL) == 0 && agentc_end(a) == 0);
	CHECK(vm_run(vm, &at.done, 30000) == 0);
	CHECK(at.signal == SIGKILL);
	CHECK(vm_run(vm, &sig.done, 30000) == 0 && sig.error == 0);
	vt_result_free(&at);
	vt_result_free(&bg);
	/* A background process's end stays known after it was told. */
	CHECK(vt_simple(vm, P_WAIT, bg.proc, NULL, &r, 30000) == 0 && r.signal == SIGKILL);
	vt_result_free(&r);
}

/* Deterministic bytes, so the data never has to be held whole. */
static void fill(uint64_t *state, uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		*state ^= *state << 13;
		*state ^= *state >> 7;
		*state ^= *state << 17;
		p[i] = (uint8_t)*state;
	}
}

struct readback {
	uint64_t state;
	size_t got, mismatches;
	int done, error, eof;
};

static void readback_cb(void *arg, const struct proto_frame *f)
{
	struct readback *rb = arg;
	if (f->type == P_DATA) {
		uint8_t want[PROTO_DATA_CHUNK];
		size_t n = f->len > sizeof(want) ? sizeof(want) : f->len;
		fill(&rb->state, want, n);
		rb->mismatches += (size_t)(memcmp(want, f->payload, n) != 0) + (f->len - n);
		rb->got += f->len;
		rb->eof |= f->flags & PF_EOF;
	} else if (f->type == P_OK || f->type == P_ERROR) {
		rb->done = 1;
		rb->error = f->type == P_ERROR;
	}
}

static void test_big_file(void)
{
	struct vm *vm = python_vm();
	if (!CHECK(vm))
		return;
	const size_t total = 200u * 1024 * 1024;
	const char *path = "/root/big.bin";
	struct agentc *a = vm_agent(vm);
	struct result w;
	memset(&w, 0, sizeof(w));
	uint32_t id;
	struct pbuf *b = agentc_begin(a, P_FWRITE, vt_collect, &w, &id);
	CHECK(b && proto_put_str(b, A_PATH, path) == 0 && agentc_end(a) == 0);
	FILE *host = popen("sha256sum > /tmp/cpuos-test-big.sha", "w");
	uint64_t state = 0x9e3779b97f4a7c15ull;
	static uint8_t chunk[PROTO_DATA_CHUNK];
	for (size_t sent = 0; sent < total && !w.done;) {
		if (agentc_queued(a) > 4 * 1024 * 1024) {
			vm_pump(vm, 100);
			continue;
		}
		fill(&state, chunk, sizeof(chunk));
		fwrite(chunk, 1, sizeof(chunk), host);
		sent += sizeof(chunk);
		CHECK(agentc_data(a, id, sent == total ? PF_EOF : 0, chunk, sizeof(chunk)) == 0);
	}
	pclose(host);
	CHECK(vm_run(vm, &w.done, 300000) == 0 && w.error == 0);
	vt_result_free(&w);

	struct readback rb = { .state = 0x9e3779b97f4a7c15ull };
	b = agentc_begin(a, P_FREAD, readback_cb, &rb, NULL);
	CHECK(b && proto_put_str(b, A_PATH, path) == 0 && agentc_end(a) == 0);
	CHECK(vm_run(vm, &rb.done, 300000) == 0);
	CHECK(!rb.error && rb.eof && rb.got == total && rb.mismatches == 0);

	struct result r;
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "sha256sum < /root/big.bin; rm /root/big.bin" },
		      &r, 300000) == 0);
	char want[65] = "";
	FILE *f = fopen("/tmp/cpuos-test-big.sha", "r");
	CHECK(f && fread(want, 1, 64, f) == 64);
	if (f)
		fclose(f);
	unlink("/tmp/cpuos-test-big.sha");
	CHECK(r.out.len >= 64 && !memcmp(r.out.data, want, 64));
	vt_result_free(&r);
}

static void test_files(void)
{
	struct vm *vm = python_vm();
	if (!CHECK(vm))
		return;
	struct agentc *a = vm_agent(vm);
	struct result r;
	memset(&r, 0, sizeof(r));
	uint32_t id;
	struct pbuf *b = agentc_begin(a, P_FWRITE, vt_collect, &r, &id);
	CHECK(b && proto_put_str(b, A_PATH, "/work/deep/er/hello.txt") == 0 &&
	      proto_put_str(b, A_USER, "user") == 0 && proto_put_u32(b, A_MODE, 0600) == 0 &&
	      agentc_end(a) == 0 && agentc_data(a, id, PF_EOF, "hi\n", 3) == 0);
	CHECK(vm_run(vm, &r.done, 30000) == 0 && r.error == 0);
	vt_result_free(&r);
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "stat -c '%U %a %s' /work/deep/er/hello.txt" },
		      &r, 30000) == 0);
	CHECK(out_is(&r, "user 600 3\n"));
	vt_result_free(&r);
	CHECK(vt_simple(vm, P_STAT, 0, "/work/deep/er/hello.txt", &r, 30000) == 0 && r.error == 0);
	vt_result_free(&r);
	CHECK(vt_simple(vm, P_LIST, 0, "/work/deep", &r, 30000) == 0 && r.error == 0 &&
	      r.entries == 1);
	vt_result_free(&r);
	CHECK(vt_simple(vm, P_STAT, 0, "relative/path", &r, 30000) == 0 && r.error == EINVAL);
	vt_result_free(&r);
	CHECK(vt_simple(vm, P_FREAD, 0, "/work/missing", &r, 30000) == 0 && r.error == ENOENT);
	vt_result_free(&r);
	memset(&r, 0, sizeof(r));
	b = agentc_begin(a, P_REMOVE, vt_collect, &r, NULL);
	CHECK(b && proto_put_str(b, A_PATH, "/work/deep") == 0 &&
	      proto_put_u32(b, A_RECURSIVE, 1) == 0 && agentc_end(a) == 0);
	CHECK(vm_run(vm, &r.done, 30000) == 0 && r.error == 0);
	if (r.error)
		t_note("remove: %s", r.message);
	vt_result_free(&r);
	CHECK(vt_simple(vm, P_STAT, 0, "/work/deep", &r, 30000) == 0 && r.error == ENOENT);
	vt_result_free(&r);
}

static void test_reconnect(void)
{
	struct vm *vm = python_vm();
	if (!CHECK(vm))
		return;
	/* A host that goes away mid-command must not take the command along. */
	struct result r;
	CHECK(vt_exec_start(vm, &(struct cmd){ .shell = "sleep 2; echo survived > /tmp/mark" }, &r) == 0);
	for (int i = 0; i < 10; i++)
		vm_pump(vm, 20);
	CHECK(r.pid != 0);
	char err[256];
	/* A new connection, as a restarted daemon would make. */
	if (!CHECK(vm_reconnect(vm, err, sizeof(err)) == 0))
		t_note("reconnect: %s", err);
	CHECK(vm_agent(vm) != NULL && r.done && r.error == ECONNRESET);
	vt_result_free(&r);
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "sleep 3; cat /tmp/mark" }, &r, 30000) == 0);
	CHECK(out_is(&r, "survived\n"));
	vt_result_free(&r);
}

/* Reconnects while the guest is busy writing a file back (its kernel's
 * workqueues lag, so it may read the new host's first frames before it
 * learns the old one left) and while a command streams output (the old
 * connection's frames, half written, are still queued when the new one
 * starts). Each new connection must answer, and serve an exec. */
static void test_reconnect_busy(void)
{
	struct vm *vm = python_vm();
	if (!CHECK(vm))
		return;
	struct result bg, r;
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "while :; do dd if=/dev/zero of=/tmp/wb bs=1M "
						   "count=32 conv=fsync 2>/dev/null; done",
					 .background = 1 }, &bg, 30000) == 0 && bg.proc);
	vt_result_free(&bg);
	char err[256];
	int ok = 0, rounds = 25;
	for (int i = 0; i < rounds; i++) {
		struct result s;
		if (vt_exec_start(vm, &(struct cmd){ .shell = "yes 0123456789abcdef | head -c 8000000" },
				  &s) < 0)
			break;
		/* Mid-stream: let some output come, then leave. */
		for (int k = 0; k < 5 + i % 7 && !s.done; k++)
			vm_pump(vm, 20);
		if (vm_reconnect(vm, err, sizeof(err)) < 0) {
			t_note("round %d: reconnect: %s", i, err);
			vt_result_free(&s);
			break;
		}
		vt_result_free(&s);
		if (vt_exec(vm, &(struct cmd){ .shell = "echo ok" }, &r, 30000) < 0 ||
		    !out_is(&r, "ok\n")) {
			t_note("round %d: exec after reconnect: error %d, %zu bytes", i, r.error,
			       r.out.len);
			vt_result_free(&r);
			break;
		}
		vt_result_free(&r);
		ok++;
	}
	t_note("%d of %d reconnects served", ok, rounds);
	CHECK(ok == rounds);
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "pkill -f 'of=/tmp/w[b]'; rm -f /tmp/wb" }, &r,
		      30000) == 0 && r.exit_code == 0);
	vt_result_free(&r);
}

/* The answer to a P_RESTORED: a result, and the generation it echoed. */
struct restored_res {
	struct result r; /* first: vt_collect gets the same pointer */
	uint32_t generation;
};

static void restored_cb(void *arg, const struct proto_frame *f)
{
	struct restored_res *x = arg;
	if (f->type == P_OK && proto_check_attrs(f) == 0)
		proto_get_u32(f, A_GENERATION, &x->generation);
	vt_collect(&x->r, f);
}

/* 16 bytes of the guest's /dev/urandom in hex, into hex[33]: 0 or -1. */
static int guest_random(struct vm *vm, char hex[33])
{
	struct result r;
	int ok = vt_exec(vm, &(struct cmd){ .shell = "head -c 16 /dev/urandom | od -An -tx1 | "
						     "tr -d ' \\n'" },
			 &r, 30000) == 0 &&
		 r.exit_code == 0 && r.out.len == 32;
	if (ok) {
		memcpy(hex, r.out.data, 32);
		hex[32] = '\0';
	}
	vt_result_free(&r);
	return ok ? 0 : -1;
}

/* P_RESTORED on a booted guest: clock, hostname, machine id, hooks (a slow
 * one killed at its 2 s), and /dev/urandom still working. A VM of its own:
 * it changes the guest's identity and clock. */
static void test_restored(void)
{
	struct vm *vm = vt_boot("base", 1, 256, NULL);
	if (!CHECK(vm))
		return;
	struct result r;
	/* Hooks: one that records what it got (its own fds: a redirection
	 * would change them), one not executable, one that outlives its 2 s
	 * with a child in its process group. */
	CHECK(vt_exec(vm, &(struct cmd){ .shell =
		"mkdir -p /etc/cpuos/restore.d && cd /etc/cpuos/restore.d && "
		"printf '#!/bin/sh\\ni=$(readlink /proc/$$/fd/0) o=$(readlink /proc/$$/fd/1)\\n"
		"echo \"$i $o $CPUOS_GENERATION $CPUOS_HOSTNAME $PATH\" > /tmp/hook.out\\n' > 10-env && "
		"printf '#!/bin/sh\\ntouch /tmp/noexec.ran\\n' > 15-noexec && "
		"printf '#!/bin/sh\\nsleep 10\\ntouch /tmp/slow.done\\n' > 20-slow && "
		"chmod 755 10-env 20-slow && chmod 644 15-noexec" },
		      &r, 30000) == 0 && r.exit_code == 0);
	vt_result_free(&r);
	char before[33] = "", after[33] = "";
	CHECK(guest_random(vm, before) == 0);

	uint8_t entropy[64];
	FILE *u = fopen("/dev/urandom", "rb");
	CHECK(u && fread(entropy, 1, sizeof(entropy), u) == sizeof(entropy));
	if (u)
		fclose(u);
	/* A day ahead, so the guest's clock shows it was set. */
	uint64_t ahead = clock_realtime_ns() + 86400ull * 1000000000u;
	struct restored_res x;
	memset(&x, 0, sizeof(x));
	struct agentc *a = vm_agent(vm);
	struct pbuf *b = a ? agentc_begin(a, P_RESTORED, restored_cb, &x, NULL) : NULL;
	CHECK(b && proto_put_u64(b, A_TIME_NS, ahead) == 0 &&
	      proto_put(b, A_BYTES, entropy, sizeof(entropy)) == 0 &&
	      proto_put_str(b, A_HOSTNAME, "sbx-restored-3") == 0 &&
	      proto_put_str(b, A_MACHINE_ID, "5f1e0c2d9a8b47f6a3c2e1d0b9a8f7e6") == 0 &&
	      proto_put_u32(b, A_GENERATION, 3) == 0 && agentc_end(a) == 0);
	int64_t t0 = clock_ms();
	CHECK(vm_run(vm, &x.r.done, 30000) == 0);
	int64_t ms = clock_ms() - t0;
	t_note("P_RESTORED answered in %lld ms", (long long)ms);
	if (!CHECK(x.r.error == 0 && x.generation == 3))
		t_note("error %d: %s", x.r.error, x.r.message);
	/* The slow hook held it 2 s, and nothing more than the 2.5 s bound. */
	CHECK(ms >= 1900 && ms < 3500);
	vt_result_free(&x.r);

	CHECK(vt_exec(vm, &(struct cmd){ .shell = "hostname; cat /etc/machine-id /etc/hostname" },
		      &r, 30000) == 0);
	if (!CHECK(out_is(&r, "sbx-restored-3\n5f1e0c2d9a8b47f6a3c2e1d0b9a8f7e6\nsbx-restored-3\n")))
		t_note("got '%.*s', stderr '%.*s'", (int)r.out.len, r.out.data, (int)r.err.len,
		       r.err.data);
	vt_result_free(&r);
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "cat /tmp/hook.out; ls /tmp/noexec.ran "
						  "/tmp/slow.done 2>&1; pgrep -c -x sleep" },
		      &r, 30000) == 0);
	const char *want = "/dev/null /dev/null 3 sbx-restored-3 /usr/sbin:/usr/bin:/sbin:/bin\n"
			   "ls: cannot access '/tmp/noexec.ran': No such file or directory\n"
			   "ls: cannot access '/tmp/slow.done': No such file or directory\n0\n";
	if (!CHECK(out_is(&r, want)))
		t_note("hooks: '%.*s'", (int)r.out.len, r.out.data);
	vt_result_free(&r);
	/* The clock: a day ahead of the host's, give or take the exec. */
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "date +%s" }, &r, 30000) == 0 && r.out.len > 0);
	long long guest_s = r.out.len < 32 ? strtoll((const char *)r.out.data, NULL, 10) : 0;
	long long want_s = (long long)(clock_realtime_ns() / 1000000000u) + 86400;
	if (!CHECK(guest_s > want_s - 60 && guest_s <= want_s + 1))
		t_note("guest clock %lld, want about %lld", guest_s, want_s);
	vt_result_free(&r);
	CHECK(guest_random(vm, after) == 0 && strcmp(before, after) != 0);
	t_note("urandom before %s, after %s", before, after);
	CHECK(strstr(vm_console_tail(vm), "restore hook '/etc/cpuos/restore.d/20-slow' still "
					 "running") != NULL);
	vm_free(vm, 0);
}

static void test_poweroff(void)
{
	struct vm *vm = vt_boot("base", 1, 256, NULL);
	if (!CHECK(vm))
		return;
	struct result r;
	vt_exec(vm, &(struct cmd){ .shell = "poweroff" }, &r, 30000);
	vt_result_free(&r);
	int never = 0;
	CHECK(vm_run(vm, &never, 30000) == -ESHUTDOWN);
	CHECK(vm_state(vm) == VM_POWEROFF);
	t_note("end state %s: %s", vm_state_name(vm_state(vm)), vm_reason(vm));
	vm_free(vm, 0);
}

static void test_panic(void)
{
	struct vm *vm = vt_boot("base", 1, 256, NULL);
	if (!CHECK(vm))
		return;
	struct result r;
	vt_exec(vm, &(struct cmd){ .shell = "echo c > /proc/sysrq-trigger" }, &r, 30000);
	vt_result_free(&r);
	int never = 0;
	CHECK(vm_run(vm, &never, 30000) == -ESHUTDOWN);
	CHECK(vm_state(vm) == VM_PANIC);
	t_note("end state %s: %s", vm_state_name(vm_state(vm)), vm_reason(vm));
	vm_free(vm, 0);
}

/* A stop of a VM that served: the guest powers off within the grace. */
static void test_stop(void)
{
	struct vm *vm = python_vm();
	if (!CHECK(vm))
		return;
	struct result r;
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "sync; echo ok" }, &r, 30000) == 0 &&
	      out_is(&r, "ok\n"));
	vt_result_free(&r);
	int64_t t0 = clock_ms();
	CHECK(vm_stop(py, 10000) == 0);
	t_note("stopped in %lld ms", (long long)(clock_ms() - t0));
	CHECK(clock_ms() - t0 < 10000);
	CHECK(vm_state(py) == VM_STOPPED);
	vm_free(py, 0);
	py = NULL;
}

static void test_missing_files(void)
{
	char err[512];
	struct vm *vm;
	struct vm_config cfg = { .kernel = "/nonexistent/bzImage", .initrd = "build/guest/initramfs.cpio",
				 .template = "build/guest/templates/base.erofs", .run_dir = "/tmp/cpuos-miss",
				 .cache_dir = "/var/cache/cpuos" };
	CHECK(vm_start(&cfg, &vm, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "cannot find kernel '/nonexistent/bzImage'") && !strchr(err, '\n'));
	cfg.kernel = "build/guest/bzImage";
	cfg.template = "/nonexistent/t.erofs";
	CHECK(vm_start(&cfg, &vm, err, sizeof(err)) == -ENOENT && strstr(err, "template"));
	cfg.template = "build/guest/templates/base.erofs";
	cfg.qemu = "/nonexistent/qemu";
	CHECK(vm_start(&cfg, &vm, err, sizeof(err)) == -ENOENT && strstr(err, "QEMU"));
}

/* QEMU runs in its own session and outlives us: a case that returns
 * without freeing its VMs (a failed CHECK) must not leave them behind. At
 * the exit of the case's process; a case killed for its timeout leaves
 * them to the harness, which kills what is left. */
static void free_vms(void)
{
	vm_free(hostile, 0);
	vm_free(py, 0);
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	atexit(free_vms);
	static const struct t_case cases[] = {
		{ "vm_missing_files", test_missing_files },
		{ "vm_python_stack", test_python_stack },
		{ "vm_exit_codes", test_exit_codes },
		{ "vm_signal_death", test_signal_death },
		{ "vm_stdin_roundtrip", test_stdin_roundtrip },
		{ "vm_stderr_apart", test_stderr_apart },
		{ "vm_users", test_users },
		{ "vm_concurrent_20", test_concurrent },
		{ "vm_timeout_kills_tree", test_timeout_kills_tree },
		{ "vm_fork_bomb_timeout", test_fork_bomb_timeout },
		{ "vm_fork_bomb_leftovers", test_fork_bomb_leftovers },
		{ "vm_cpu_hog_timeout", test_cpu_hog_timeout },
		{ "vm_memory_hog", test_memory_hog },
		{ "vm_ignores_sigterm_timeout", test_ignores_sigterm_timeout },
		{ "vm_hostile_stop", test_hostile_stop },
		{ "vm_background", test_background },
		{ "vm_files", test_files },
		{ "vm_big_file_200mb", test_big_file },
		{ "vm_reconnect", test_reconnect },
		{ "vm_reconnect_busy", test_reconnect_busy },
		{ "vm_restored", test_restored },
		{ "vm_stop", test_stop },
		{ "vm_poweroff", test_poweroff },
		{ "vm_panic", test_panic },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
