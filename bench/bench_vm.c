/*
 * bench_vm: figures for the guest platform, printed, never asserted.
 *   boot N     cold boot to agent ready, p50/p90, split qemu/kernel/agent
 *   exec N     round trip of /bin/true: our agent against Debian's
 *              qemu-guest-agent (guest-exec + guest-exec-status) in the same VM
 *   files MB   guest<->host file write and read throughput
 *   memory N   host memory per idle VM
 */
#include "runner/agentc.h"
#include "tests/lib/tap.h"
#include "tests/lib/vmtest.h"
#include "common/unixsock.h"
#include "common/clock.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	int i = (int)(p / 100.0 * (n - 1) + 0.5);
	return v[i];
}

static struct vm *boot(const char *tpl, const char *const *extra)
{
	struct vm *vm = vt_boot(tpl, 1, 512, extra);
	if (!vm)
		exit(1); /* vt_boot said why */
	return vm;
}

static void bench_boot(int n)
{
	double total[n], qemu[n], kernel[n], agent[n];
	vm_free(boot("base", NULL), 0); /* warm the page cache and the layer base */
	for (int i = 0; i < n; i++) {
		struct vm *vm = boot("base", NULL);
		const struct vm_timings *t = vm_timings(vm);
		total[i] = t->total_ms;
		qemu[i] = t->qemu_ms;
		kernel[i] = t->kernel_ms;
		agent[i] = t->agent_ms;
		vm_stop(vm, 5000);
		vm_free(vm, 0);
	}
	printf("boot (%d cold boots, base, 1 vCPU, 512 MB)\n", n);
	printf("  total to agent ready  p50 %7.1f ms  p90 %7.1f ms\n", pct(total, n, 50), pct(total, n, 90));
	printf("    qemu start          p50 %7.1f ms  p90 %7.1f ms\n", pct(qemu, n, 50), pct(qemu, n, 90));
	printf("    kernel              p50 %7.1f ms  p90 %7.1f ms\n", pct(kernel, n, 50), pct(kernel, n, 90));
	printf("    agent init          p50 %7.1f ms  p90 %7.1f ms\n", pct(agent, n, 50), pct(agent, n, 90));
}

/* qemu-guest-agent speaks JSON lines over its own virtio-serial port. */
static json_t *qga_call(int fd, json_t *req)
{
	char *text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	size_t n = strlen(text);
	if (write(fd, text, n) != (ssize_t)n || write(fd, "\n", 1) != 1) {
		free(text);
		return NULL;
	}
	free(text);
	static char buf[65536];
	static size_t len;
	for (;;) {
		char *nl = memchr(buf, '\n', len);
		if (nl) {
			json_t *msg = json_loadb(buf, (size_t)(nl - buf), 0, NULL);
			len -= (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, len);
			if (msg)
				return msg;
			continue;
		}
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 10000) <= 0)
			return NULL;
		ssize_t r = read(fd, buf + len, sizeof(buf) - len);
		if (r <= 0)
			return NULL;
		len += (size_t)r;
	}
}

static double qga_exec_true(int fd)
{
	double t0 = clock_ms_f();
	json_t *r = qga_call(fd, json_pack("{s:s,s:{s:s}}", "execute", "guest-exec", "arguments",
					   "path", "/bin/true"));
	json_int_t pid = json_integer_value(json_object_get(json_object_get(r, "return"), "pid"));
	json_decref(r);
	if (!pid)
		return -1;
	for (;;) {
		r = qga_call(fd, json_pack("{s:s,s:{s:I}}", "execute", "guest-exec-status",
					   "arguments", "pid", pid));
		int exited = json_is_true(json_object_get(json_object_get(r, "return"), "exited"));
		json_decref(r);
		if (!r)
			return -1;
		if (exited)
			return clock_ms_f() - t0;
	}
}

static void bench_exec(int n)
{
	char qga_dev[200];
	const char *root = getenv("CPUOS_RUN_DIR");
	snprintf(qga_dev, sizeof(qga_dev), "socket,id=qga,path=%s/qga-%d.sock,server=on,wait=off",
		 root ? root : "/tmp", (int)getpid());
	const char *const extra[] = { "-chardev", qga_dev, "-device",
				      "virtserialport,chardev=qga,name=org.qemu.guest_agent.0", NULL };
	struct vm *vm = boot("base", extra);
	struct result r;
	/* Start qemu-ga on its port, found by name as our agent finds its own. */
	struct cmd start = { .shell = "for d in /sys/class/virtio-ports/*; do "
				      "[ \"$(cat $d/name)\" = org.qemu.guest_agent.0 ] && "
				      "exec qemu-ga -m virtio-serial -p /dev/${d##*/}; done",
			     .background = 1 };
	vt_exec(vm, &start, &r, 30000);
	vt_result_free(&r);
	char sock[200];
	snprintf(sock, sizeof(sock), "%s/qga-%d.sock", root ? root : "/tmp", (int)getpid());
	int fd = unix_connect(sock, 5000);
	json_t *sync = fd >= 0 ? qga_call(fd, json_pack("{s:s,s:{s:i}}", "execute", "guest-sync",
							  "arguments", "id", 4242))
			       : NULL;
	if (!sync)
		fprintf(stderr, "bench: qemu-guest-agent did not answer\n");
	json_decref(sync);

	static const char *const argv_true[] = { "/bin/true", NULL };
	double ours[n], theirs[n];
	for (int i = 0; i < 20; i++) /* warm both paths under TCG */
		vt_exec(vm, &(struct cmd){ .argv = argv_true }, &r, 30000), vt_result_free(&r),
			sync ? qga_exec_true(fd) : 0;
	int m = 0;
	for (int i = 0; i < n; i++) {
		double t0 = clock_ms_f();
		vt_exec(vm, &(struct cmd){ .argv = argv_true }, &r, 30000);
		ours[i] = clock_ms_f() - t0;
		vt_result_free(&r);
		if (sync && (theirs[m] = qga_exec_true(fd)) >= 0)
			m++;
	}
	/* The floor neither agent can beat: fork+exec of /bin/true inside the
	 * guest, timed by the guest itself (under TCG this dominates). */
	struct cmd floor_cmd = { .shell = "s=$(date +%s%N); for i in $(seq 100); do /bin/true; done; "
					  "e=$(date +%s%N); echo $(( (e - s) / 100 ))" };
	vt_exec(vm, &floor_cmd, &r, 60000);
	double floor = r.out.len ? atof((char *)r.out.data) / 1e6 : 0;
	vt_result_free(&r);

	printf("exec round trip of /bin/true (%d runs each, same VM, alternating)\n", n);
	double o50 = pct(ours, n, 50), o99 = pct(ours, n, 99);
	printf("  cpuos-agent           p50 %7.2f ms  p99 %7.2f ms\n", o50, o99);
	if (m) {
		double q50 = pct(theirs, m, 50), q99 = pct(theirs, m, 99);
		printf("  qemu-guest-agent      p50 %7.2f ms  p99 %7.2f ms\n", q50, q99);
		printf("  ratio cpuos/qemu-ga   p50 %7.2fx    p99 %7.2fx   (target <= 0.5x)\n",
		       o50 / q50, o99 / q99);
		printf("  in-guest fork+exec of /bin/true: %.2f ms; above it: cpuos %.2f ms, "
		       "qemu-ga %.2f ms (%.2fx)\n",
		       floor, o50 - floor, q50 - floor, (o50 - floor) / (q50 - floor));
	}
	if (fd >= 0)
		close(fd);
	vm_stop(vm, 5000);
	vm_free(vm, 0);
}

static void fill(uint64_t *s, uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		*s ^= *s << 13;
		*s ^= *s >> 7;
		*s ^= *s << 17;
		p[i] = (uint8_t)*s;
	}
}

static void bench_files(int mb)
{
	struct vm *vm = boot("base", NULL);
	struct agentc *a = vm_agent(vm);
	size_t total = (size_t)mb * 1024 * 1024;
	static uint8_t chunk[PROTO_DATA_CHUNK];
	uint64_t st = 1;
	fill(&st, chunk, sizeof(chunk));
	struct result w = { 0 };
	uint32_t id;
	struct pbuf *b = agentc_begin(a, P_FWRITE, vt_collect, &w, &id);
	proto_put_str(b, A_PATH, "/root/bench.bin");
	agentc_end(a);
	double t0 = clock_ms_f();
	for (size_t sent = 0; sent < total && !w.done;) {
		if (agentc_queued(a) > 4 * 1024 * 1024) {
			vm_pump(vm, 100);
			continue;
		}
		sent += sizeof(chunk);
		agentc_data(a, id, sent >= total ? PF_EOF : 0, chunk, sizeof(chunk));
	}
	vm_run(vm, &w.done, 600000);
	double tw = clock_ms_f() - t0;
	vt_result_free(&w);
	t0 = clock_ms_f();
	struct result rd;
	vt_simple(vm, P_FREAD, 0, "/root/bench.bin", &rd, 600000);
	double tr = clock_ms_f() - t0;
	printf("files (%d MB to and from the guest's writable layer)\n", mb);
	printf("  host -> guest write   %7.1f MB/s (%s)\n", mb / (tw / 1e3), w.error ? "FAILED" : "ok");
	printf("  guest -> host read    %7.1f MB/s (%s, %zu bytes)\n", mb / (tr / 1e3),
	       rd.error ? "FAILED" : "ok", rd.out.len);
	vt_result_free(&rd);
	vm_stop(vm, 5000);
	vm_free(vm, 0);
}

static long rss_kb(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	long kb = -1;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			kb = atol(line + 6);
	if (f)
		fclose(f);
	return kb;
}

static void bench_memory(int n)
{
	struct vm *vms[n];
	for (int i = 0; i < n; i++)
		vms[i] = boot("base", NULL);
	double t0 = clock_ms_f();
	int never = 0;
	while (clock_ms_f() - t0 < 3000) /* let the guests settle into idle */
		for (int i = 0; i < n; i++)
			vm_run(vms[i], &never, 50);
	long sum = 0, guest_sum = 0;
	for (int i = 0; i < n; i++) {
		sum += rss_kb(vm_pid(vms[i]));
		struct result r;
		vt_exec(vms[i], &(struct cmd){ .shell = "awk '/MemTotal/{t=$2} /MemAvailable/{a=$2} END{print t-a}' /proc/meminfo" }, &r, 30000);
		guest_sum += r.out.len ? atol((char *)r.out.data) : 0;
		vt_result_free(&r);
	}
	printf("memory (%d idle VMs, base, 512 MB each)\n", n);
	printf("  QEMU RSS per VM       %7.1f MB (guest pages touched included)\n", sum / 1024.0 / n);
	printf("  guest in use per VM   %7.1f MB (MemTotal - MemAvailable inside)\n", guest_sum / 1024.0 / n);
	for (int i = 0; i < n; i++) {
		vm_stop(vms[i], 5000);
		vm_free(vms[i], 0);
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: bench_vm boot N | exec N | files MB | memory N\n");
		return 2;
	}
	int n = argc > 2 ? atoi(argv[2]) : 0;
	if (!strcmp(argv[1], "boot"))
		bench_boot(n > 0 ? n : 10);
	else if (!strcmp(argv[1], "exec"))
		bench_exec(n > 0 ? n : 200);
	else if (!strcmp(argv[1], "files"))
		bench_files(n > 0 ? n : 200);
	else if (!strcmp(argv[1], "memory"))
		bench_memory(n > 0 ? n : 3);
	else
		return 2;
	return 0;
}
