/*
 * Integration tests: real QEMU microVMs booted from our kernel, initramfs
 * and template images, driven through the runner and the agent protocol.
 * Slow under TCG (a python import takes seconds); each case says why.
 */
#include "runner/agentc.h"
#include "tests/lib/vmtest.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct vm *py; /* one python VM shared by most cases */

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
	CHECK(vm_reconnect(vm, err, sizeof(err)) == 0);
	CHECK(vm_agent(vm) != NULL && r.done && r.error == ECONNRESET);
	vt_result_free(&r);
	CHECK(vt_exec(vm, &(struct cmd){ .shell = "sleep 3; cat /tmp/mark" }, &r, 30000) == 0);
	CHECK(out_is(&r, "survived\n"));
	vt_result_free(&r);
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

static void test_stop(void)
{
	CHECK(py != NULL);
	if (!py)
		return;
	CHECK(vm_stop(py, 10000) == 0);
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

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
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
		{ "vm_background", test_background },
		{ "vm_files", test_files },
		{ "vm_big_file_200mb", test_big_file },
		{ "vm_reconnect", test_reconnect },
		{ "vm_stop", test_stop },
		{ "vm_poweroff", test_poweroff },
		{ "vm_panic", test_panic },
		{ 0, 0 },
	};
	return t_main(argc, argv, cases);
}
