/* vmtest: the helpers behind vmtest.h. */
#include "tests/lib/vmtest.h"

#include "runner/agentc.h"
#include "runner/qemu_build.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void vt_new_run_dir(char *out, size_t n)
{
	static int seq;
	const char *runroot = getenv("CPUOS_RUN_DIR");
	snprintf(out, n, "%s/t%d-%d", runroot ? runroot : "/tmp", (int)getpid(), ++seq);
}

static const char *cache_dir(void)
{
	const char *cache = getenv("CPUOS_CACHE");
	return cache ? cache : "/var/cache/cpuos";
}

/* The QEMU in PATH kept in the cache as cpuosd keeps its own, so tests
 * and benchmarks run what the daemon runs (the snapshot RAM read-only
 * from 8.2 on, and pauses of the pages written over it); NULL where it
 * cannot be kept (a wrapper script, no root): QEMU as it is. */
static const struct qemu_build *kept_build(void)
{
	static struct qemu_build b;
	static int done, ok;
	if (!done) {
		char dir[600], err[256];
		snprintf(dir, sizeof(dir), "%s/" QEMU_BUILDS_DIR, cache_dir());
		ok = qemu_build_keep(dir, "qemu-system-x86_64", &b, err, sizeof(err)) == 0;
		done = 1;
	}
	return ok ? &b : NULL;
}

/* Kept once before main: t_main runs each case in a child of its own,
 * which would read and hash the build again. */
__attribute__((constructor)) static void keep_build_first(void)
{
	kept_build();
}

struct vm *vt_start(const char *template, unsigned vcpus, unsigned memory_mb,
		    const char *const *extra_args, const char *restore, const char *run_dir,
		    char *err, size_t errlen)
{
	const char *g = getenv("CPUOS_GUEST_DIR");
	char kernel[512], initrd[512], image[512], run[128];
	g = g ? g : "build/guest";
	snprintf(kernel, sizeof(kernel), "%s/bzImage", g);
	snprintf(initrd, sizeof(initrd), "%s/initramfs.cpio", g);
	snprintf(image, sizeof(image), "%s/templates/%s.erofs", g, template);
	if (run_dir)
		snprintf(run, sizeof(run), "%s", run_dir);
	else
		vt_new_run_dir(run, sizeof(run));
	const struct qemu_build *build = kept_build();
	struct vm_config cfg = {
		.qemu_build = build,
		.vcpus = vcpus, .memory_mb = memory_mb, .disk_mb = 2048, .extra_args = extra_args,
		.kernel = kernel, .initrd = initrd, .template = image, .run_dir = run,
		.cache_dir = cache_dir(), .boot_timeout_ms = 60000,
		.restore = restore, .new_identity = restore && strcmp(restore, run),
		.hostname = restore && strcmp(restore, run) ? strrchr(run, '/') + 1 : NULL,
	};
	struct vm *vm;
	if (vm_start(&cfg, &vm, err, errlen) < 0)
		return NULL;
	return vm;
}

struct vm *vt_boot(const char *template, unsigned vcpus, unsigned memory_mb,
		   const char *const *extra_args)
{
	char err[512];
	struct vm *vm = vt_start(template, vcpus, memory_mb, extra_args, NULL, NULL, err,
				 sizeof(err));
	if (!vm)
		t_note("cannot boot %s: %s", template, err);
	return vm;
}

void vt_result_free(struct result *r)
{
	pbuf_release(&r->out);
	pbuf_release(&r->err);
}

void vt_collect(void *arg, const struct proto_frame *f)
{
	struct result *r = arg;
	uint32_t v;
	switch (f->type) {
	case P_STDOUT:
		pbuf_append(&r->out, f->payload, f->len);
		return;
	case P_STDERR:
	case P_DATA:
		pbuf_append(f->type == P_DATA ? &r->out : &r->err, f->payload, f->len);
		return;
	case P_ENTRY:
		r->entries++;
		return;
	default:
		break;
	}
	if (proto_check_attrs(f) < 0)
		return;
	if (f->type == P_STARTED || f->type == P_OK) {
		proto_get_u32(f, A_PROC, &r->proc);
		proto_get_u32(f, A_PID, &r->pid);
	}
	if (f->type == P_OK)
		r->done = 1;
	if (f->type == P_EXIT) {
		r->done = 1;
		if (proto_get_u32(f, A_EXIT_CODE, &v) == 0)
			r->exit_code = (int)v;
		if (proto_get_u32(f, A_SIGNAL, &v) == 0)
			r->signal = (int)v;
		if (proto_get_u32(f, A_TIMED_OUT, &v) == 0)
			r->timed_out = (int)v;
	}
	if (f->type == P_ERROR) {
		r->done = 1;
		r->error = proto_get_u32(f, A_ERRNO, &v) == 0 ? (int)v : EPROTO;
		proto_get_str(f, A_MESSAGE, r->message, sizeof(r->message));
	}
}

int vt_exec_start(struct vm *vm, const struct cmd *c, struct result *r)
{
	memset(r, 0, sizeof(*r));
	r->exit_code = -1;
	struct agentc *a = vm_agent(vm);
	uint32_t id;
	struct pbuf *b = a ? agentc_begin(a, P_EXEC, vt_collect, r, &id) : NULL;
	if (!b)
		return -ENOTCONN;
	int e = 0;
	if (c->shell)
		e = proto_put_str(b, A_SHELL, c->shell);
	for (const char *const *p = c->argv; p && *p && !e; p++)
		e = proto_put_str(b, A_ARG, *p);
	if (c->user && !e)
		e = proto_put_str(b, A_USER, c->user);
	if (c->timeout_ms && !e)
		e = proto_put_u64(b, A_TIMEOUT_MS, c->timeout_ms);
	if (c->background && !e)
		e = proto_put_u32(b, A_BACKGROUND, 1);
	if ((c->stdin_len || c->stdin_eof) && !e)
		e = proto_put_u32(b, A_STDIN, 1);
	e = e ? e : agentc_end(a);
	if (!e && (c->stdin_len || c->stdin_eof))
		e = agentc_data(a, id, PF_EOF, c->stdin_data, c->stdin_len);
	return e;
}

int vt_exec(struct vm *vm, const struct cmd *c, struct result *r, int timeout_ms)
{
	int e = vt_exec_start(vm, c, r);
	return e ? e : vm_run(vm, &r->done, timeout_ms);
}

int vt_simple(struct vm *vm, uint16_t type, uint32_t proc, const char *path, struct result *r,
	      int timeout_ms)
{
	memset(r, 0, sizeof(*r));
	r->exit_code = -1;
	struct agentc *a = vm_agent(vm);
	struct pbuf *b = a ? agentc_begin(a, type, vt_collect, r, NULL) : NULL;
	if (!b)
		return -ENOTCONN;
	int e = 0;
	if (proc)
		e = proto_put_u32(b, A_PROC, proc);
	if (path && !e)
		e = proto_put_str(b, A_PATH, path);
	e = e ? e : agentc_end(a);
	return e ? e : vm_run(vm, &r->done, timeout_ms);
}
