/*
 * cpuos-vm: boots one microVM, runs one command in it through the agent,
 * streams its output and passes its exit code through; for humans, tests
 * and benchmarks. The daemon uses the same runner (src/daemon/vm.h).
 */
#include "common/fs.h"
#include "common/proto.h"
#include "runner/agentc.h"
#include "runner/vm.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXIT_RUNNER 125 /* like env(1) and timeout(1): the runner failed */
#define EXIT_TIMEOUT 124

static const char usage[] =
	"usage: cpuos-vm run [options] -- COMMAND [ARG...]\n"
	"       cpuos-vm run [options] -c 'SHELL COMMAND'\n"
	"Boots a microVM, runs COMMAND inside it, streams its output and exits with\n"
	"its exit code (128+N for death by signal N, 124 for --timeout, 125 when the\n"
	"VM itself failed).\n"
	"\n"
	"  -T, --template NAME   template image (base, python, node; default base)\n"
	"      --image PATH      template image file instead of a name\n"
	"      --kernel PATH     guest kernel (default GUEST/bzImage)\n"
	"      --initrd PATH     agent initramfs (default GUEST/initramfs.cpio)\n"
	"      --qemu PATH       QEMU binary (default qemu-system-x86_64)\n"
	"      --accel A         auto, kvm or tcg (default auto)\n"
	"      --vcpus N         virtual CPUs (default 1)\n"
	"      --memory MB       guest memory (default 512)\n"
	"      --disk MB         writable layer size (default 2048)\n"
	"  -c, --shell STRING    run STRING with /bin/sh -c\n"
	"  -e, --env NAME=VALUE  environment variable (repeatable)\n"
	"  -w, --cwd DIR         working directory\n"
	"  -u, --user USER       root or user (default root)\n"
	"  -t, --timeout SECS    kill the command after SECS seconds\n"
	"  -i, --stdin           forward standard input to the command\n"
	"  -v, --verbose         print boot timings and the VM's end state\n"
	"      --console         print the guest console tail at the end\n"
	"GUEST is $CPUOS_GUEST_DIR, else build/guest beside this binary.\n"
	"Writable layers are cached under $CPUOS_CACHE (default /var/cache/cpuos).\n";

struct run {
	int done;
	int exit_code;
	char error[512];
	uint32_t id;
};

static void fail(int code, const char *fmt, va_list ap) __attribute__((noreturn));
static void fail(int code, const char *fmt, va_list ap)
{
	fputs("cpuos-vm: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	exit(code);
}

/* The runner or the VM failed: 125. */
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fail(EXIT_RUNNER, fmt, ap);
}

/* The command line is wrong: 2, as for any usage error. */
static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fail(2, fmt, ap);
}

/* SIGINT/SIGTERM: stop the VM before leaving, never orphan QEMU (it runs in
 * its own session, so the terminal's signal does not reach it). */
static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	interrupted = sig;
}

static void write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return; /* a closed stdout must not kill the VM teardown */
		p += w;
		n -= (size_t)w;
	}
}

static void exec_cb(void *arg, const struct proto_frame *f)
{
	struct run *run = arg;
	uint32_t v;
	if (run->done) /* interrupted: the teardown's ECONNRESET is no news */
		return;
	switch (f->type) {
	case P_STDOUT:
		write_all(1, f->payload, f->len);
		break;
	case P_STDERR:
		write_all(2, f->payload, f->len);
		break;
	case P_EXIT:
		run->done = 1;
		if (proto_check_attrs(f) < 0) {
			run->exit_code = EXIT_RUNNER;
		} else if (proto_get_u32(f, A_TIMED_OUT, &v) == 0 && v) {
			run->exit_code = EXIT_TIMEOUT;
		} else if (proto_get_u32(f, A_SIGNAL, &v) == 0) {
			run->exit_code = 128 + (int)(v & 0x7f);
		} else if (proto_get_u32(f, A_EXIT_CODE, &v) == 0) {
			run->exit_code = (int)(v & 0xff);
		}
		break;
	case P_ERROR:
		run->done = 1;
		run->exit_code = EXIT_RUNNER;
		if (proto_check_attrs(f) < 0 ||
		    proto_get_str(f, A_MESSAGE, run->error, sizeof(run->error)) < 0)
			snprintf(run->error, sizeof(run->error), "the agent refused the command");
		break;
	default:
		break;
	}
}

/* GUEST directory: $CPUOS_GUEST_DIR or ../guest next to this binary. */
static void guest_dir(char *out, size_t n)
{
	const char *env = getenv("CPUOS_GUEST_DIR");
	if (env) {
		snprintf(out, n, "%s", env);
		return;
	}
	char exe[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (len < 0) {
		snprintf(out, n, "build/guest");
		return;
	}
	exe[len] = '\0';
	snprintf(out, n, "%s/../guest", dirname(exe));
}

static unsigned parse_uint(const char *s, const char *what)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || !*s || v > 1u << 30 || s[0] == '-')
		usage_error("invalid %s '%s' (a number)", what, s);
	return (unsigned)v;
}

/* Feeds our stdin to the command, a chunk at a time so memory stays
 * bounded whatever the input size. */
static void pump_stdin(struct agentc *a, struct run *run, int *open_)
{
	if (!*open_ || agentc_queued(a) > 1024 * 1024)
		return;
	uint8_t buf[PROTO_DATA_CHUNK];
	ssize_t n = read(0, buf, sizeof(buf));
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		agentc_data(a, run->id, PF_EOF, "", 0);
		*open_ = 0;
		return;
	}
	agentc_data(a, run->id, 0, buf, (size_t)n);
}

int main(int argc, char **argv)
{
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		fputs(usage, stdout);
		return 0;
	}
	if (argc < 2 || strcmp(argv[1], "run")) {
		fputs(usage, stderr);
		return 2;
	}
	static const struct option opts[] = {
		{ "template", required_argument, 0, 'T' }, { "image", required_argument, 0, 'I' },
		{ "kernel", required_argument, 0, 'K' },   { "initrd", required_argument, 0, 'R' },
		{ "qemu", required_argument, 0, 'Q' },     { "accel", required_argument, 0, 'A' },
		{ "vcpus", required_argument, 0, 'C' },    { "memory", required_argument, 0, 'M' },
		{ "disk", required_argument, 0, 'D' },     { "shell", required_argument, 0, 'c' },
		{ "env", required_argument, 0, 'e' },      { "cwd", required_argument, 0, 'w' },
		{ "user", required_argument, 0, 'u' },     { "timeout", required_argument, 0, 't' },
		{ "stdin", no_argument, 0, 'i' },          { "verbose", no_argument, 0, 'v' },
		{ "console", no_argument, 0, 'O' },        { "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	char gdir[PATH_MAX], kernel[PATH_MAX + 32], initrd[PATH_MAX + 32], image[PATH_MAX + 64];
	guest_dir(gdir, sizeof(gdir));
	snprintf(kernel, sizeof(kernel), "%s/bzImage", gdir);
	snprintf(initrd, sizeof(initrd), "%s/initramfs.cpio", gdir);
	const char *template = "base", *image_path = NULL, *shell = NULL, *cwd = NULL, *user = NULL;
	const char *envs[256];
	int nenv = 0, use_stdin = 0, verbose = 0, console = 0, c;
	unsigned timeout_s = 0;
	struct vm_config cfg = { 0 };
	cfg.kernel = kernel;
	cfg.initrd = initrd;

	optind = 2;
	opterr = 0; /* one line of our own instead of getopt's */
	while ((c = getopt_long(argc, argv, "+T:c:e:w:u:t:ivh", opts, NULL)) != -1) {
		switch (c) {
		case 'T': template = optarg; break;
		case 'I': image_path = optarg; break;
		case 'K': cfg.kernel = optarg; break;
		case 'R': cfg.initrd = optarg; break;
		case 'Q': cfg.qemu = optarg; break;
		case 'A':
			if (qemu_accel_parse(optarg, &cfg.accel) < 0)
				usage_error("invalid --accel '%s' (auto, kvm or tcg)", optarg);
			break;
		case 'C': cfg.vcpus = parse_uint(optarg, "--vcpus"); break;
		case 'M': cfg.memory_mb = parse_uint(optarg, "--memory"); break;
		case 'D': cfg.disk_mb = parse_uint(optarg, "--disk"); break;
		case 'c': shell = optarg; break;
		case 'e':
			if (nenv == 256 || !strchr(optarg, '='))
				usage_error("invalid --env '%s' (NAME=VALUE, at most 256)", optarg);
			envs[nenv++] = optarg;
			break;
		case 'w': cwd = optarg; break;
		case 'u': user = optarg; break;
		case 't': timeout_s = parse_uint(optarg, "--timeout"); break;
		case 'i': use_stdin = 1; break;
		case 'v': verbose = 1; break;
		case 'O': console = 1; break;
		case 'h': fputs(usage, stdout); return 0;
		default: usage_error("bad option '%s' (see cpuos-vm --help)", argv[optind - 1]);
		}
	}
	if (!shell && optind >= argc) {
		fputs("cpuos-vm: no command given (see cpuos-vm --help)\n", stderr);
		return 2;
	}
	if (strchr(template, '/') || !*template)
		usage_error("invalid template name '%s'", template);
	snprintf(image, sizeof(image), "%s/templates/%s.erofs", gdir, template);
	cfg.template = image_path ? image_path : image;
	const char *cache = getenv("CPUOS_CACHE");
	cfg.cache_dir = cache ? cache : "/var/cache/cpuos";
	char run_dir[128];
	const char *run_root = getenv("CPUOS_RUN_DIR");
	run_root = run_root ? run_root : "/run/cpuos";
	if (fs_mkdir_p(run_root, 0755, (uid_t)-1, (gid_t)-1) < 0)
		die("cannot create run directory '%s'", run_root);
	snprintf(run_dir, sizeof(run_dir), "%s/vm-%d-%lx", run_root, (int)getpid(),
		 (unsigned long)time(NULL) & 0xffff);
	cfg.run_dir = run_dir;
	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = { .sa_handler = on_signal }; /* no SA_RESTART: poll returns */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	char err[512];
	struct vm *vm;
	if (vm_start(&cfg, &vm, err, sizeof(err)) < 0)
		die("%s", err);
	if (verbose) {
		const struct vm_timings *t = vm_timings(vm);
		fprintf(stderr, "cpuos-vm: ready in %.0f ms (qemu %.0f, kernel %.0f, agent %.0f), %s\n",
			t->total_ms, t->qemu_ms, t->kernel_ms, t->agent_ms,
			agentc_version(vm_agent(vm)));
	}

	struct run run = { .exit_code = EXIT_RUNNER };
	struct agentc *a = vm_agent(vm);
	struct pbuf *b = agentc_begin(a, P_EXEC, exec_cb, &run, &run.id);
	int r = b ? 0 : -ENOMEM;
	if (shell)
		r = r ? r : proto_put_str(b, A_SHELL, shell);
	for (int i = optind; !shell && i < argc && !r; i++)
		r = proto_put_str(b, A_ARG, argv[i]);
	for (int i = 0; i < nenv && !r; i++)
		r = proto_put_str(b, A_ENV, envs[i]);
	if (cwd && !r)
		r = proto_put_str(b, A_CWD, cwd);
	if (user && !r)
		r = proto_put_str(b, A_USER, user);
	if (timeout_s && !r)
		r = proto_put_u64(b, A_TIMEOUT_MS, (uint64_t)timeout_s * 1000);
	if (use_stdin && !r)
		r = proto_put_u32(b, A_STDIN, 1);
	r = r ? r : agentc_end(a);
	if (r < 0) {
		vm_free(vm, 0);
		die("command too long: %s", strerror(-r));
	}
	int stdin_open = use_stdin;
	if (use_stdin)
		fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
	while (!run.done && !interrupted) {
		pump_stdin(a, &run, &stdin_open);
		r = vm_pump(vm, stdin_open ? 5 : 1000);
		if (r == -ESHUTDOWN)
			break;
	}
	if (interrupted) {
		snprintf(run.error, sizeof(run.error), "interrupted by signal %d", (int)interrupted);
		run.exit_code = 128 + interrupted;
		run.done = 1;
	} else if (!run.done) {
		snprintf(run.error, sizeof(run.error), "vm %s: %s", vm_state_name(vm_state(vm)),
			 vm_reason(vm));
	}
	vm_stop(vm, 5000);
	if (verbose)
		fprintf(stderr, "cpuos-vm: vm %s: %s\n", vm_state_name(vm_state(vm)), vm_reason(vm));
	if (console)
		fprintf(stderr, "--- console ---\n%s\n", vm_console_tail(vm));
	vm_free(vm, 0);
	if (run.error[0])
		fprintf(stderr, "cpuos-vm: %s\n", run.error);
	return run.exit_code;
}
