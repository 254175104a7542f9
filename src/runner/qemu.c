/*
 * qemu: accelerator choice and the microvm command line. Each argument has a
 * reason; the ones that are not obvious say it beside them.
 */
#include "runner/qemu.h"

#include "runner/migrate.h"

#include "common/netconst.h"

#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int qemu_accel_parse(const char *s, enum qemu_accel *out)
{
	if (!strcmp(s, "auto"))
		*out = QEMU_ACCEL_AUTO;
	else if (!strcmp(s, "kvm"))
		*out = QEMU_ACCEL_KVM;
	else if (!strcmp(s, "tcg"))
		*out = QEMU_ACCEL_TCG;
	else
		return -EINVAL;
	return 0;
}

const char *qemu_accel_name(enum qemu_accel a)
{
	return a == QEMU_ACCEL_KVM ? "kvm" : a == QEMU_ACCEL_TCG ? "tcg" : "auto";
}

static int cpu_has_hw_virt(void)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return 0;
	char line[4096];
	int found = 0;
	while (!found && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "flags", 5))
			continue;
		found = strstr(line, " vmx") || strstr(line, " svm");
		break;
	}
	fclose(f);
	return found;
}

enum qemu_accel qemu_accel_probe(void)
{
	if (!cpu_has_hw_virt())
		return QEMU_ACCEL_TCG;
	if (access("/sys/module/kvm_intel", F_OK) && access("/sys/module/kvm_amd", F_OK))
		return QEMU_ACCEL_TCG;
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return QEMU_ACCEL_TCG;
	close(fd);
	return QEMU_ACCEL_KVM;
}

/* The QMP socket's chardev: its path names the run directory. */
#define QMP_CHARDEV "socket,id=qmp,path="

struct argv_builder {
	char **v;
	size_t n, cap;
	int err;
};

static void add(struct argv_builder *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void add(struct argv_builder *b, const char *fmt, ...)
{
	if (b->err)
		return;
	if (b->n + 2 > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64;
		char **v = realloc(b->v, cap * sizeof(*v));
		if (!v) {
			b->err = -ENOMEM;
			return;
		}
		b->v = v;
		b->cap = cap;
	}
	va_list ap;
	va_start(ap, fmt);
	int r = vasprintf(&b->v[b->n], fmt, ap);
	va_end(ap);
	if (r < 0) {
		b->err = -ENOMEM;
		return;
	}
	b->v[++b->n] = NULL;
}

/* QEMU's option parser splits on commas; a path holding one would inject
 * options, so such paths are refused rather than escaped. */
static int safe_path(const char *p)
{
	return p && *p && !strchr(p, ',');
}

unsigned qemu_host_tsc_khz(void)
{
#if defined(__x86_64__)
	/* Atomic: sandboxes boot from many threads; two that measure at
	 * once get the same figure. */
	static unsigned cached;
	unsigned khz = __atomic_load_n(&cached, __ATOMIC_RELAXED);
	if (khz)
		return khz;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC_RAW, &a);
	uint64_t t0 = __builtin_ia32_rdtsc();
	/* The interval measured, not a wait: once per process. */
	struct timespec pause = { .tv_nsec = 20 * 1000000 };
	nanosleep(&pause, NULL);
	uint64_t t1 = __builtin_ia32_rdtsc();
	clock_gettime(CLOCK_MONOTONIC_RAW, &b);
	double us = (double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3;
	if (us > 0)
		khz = (unsigned)((double)(t1 - t0) * 1000.0 / us + 0.5);
	__atomic_store_n(&cached, khz, __ATOMIC_RELAXED);
	return khz;
#else
	return 0;
#endif
}

int qemu_argv(const struct qemu_config *c, char ***out)
{
	if (!c->binary || !safe_path(c->kernel) || !safe_path(c->initrd) ||
	    !safe_path(c->template) || !safe_path(c->scratch) || !safe_path(c->run_dir) ||
	    (c->mem_path && !safe_path(c->mem_path)))
		return -EINVAL;
	if (c->vcpus < 1 || c->vcpus > 64 || c->memory_mb < 64 || c->accel == QEMU_ACCEL_AUTO)
		return -EINVAL;
	if (c->hostname && strpbrk(c->hostname, " \t\n\"'"))
		return -EINVAL;
	if (c->tap && (!safe_path(c->tap) || strlen(c->tap) >= 16))
		return -EINVAL;

	struct argv_builder b = { 0 };
	add(&b, "%s", c->binary);
	/* acpi=off: our kernel has no ACPI; QEMU then lists the virtio-mmio
	 * devices on the kernel command line itself. The PIT stays: under TCG
	 * there is no kvmclock and the kernel calibrates the TSC against it
	 * (without it boot stalls with "Unable to calibrate against PIT"). */
	add(&b, "-M");
	add(&b, "microvm,acpi=off,rtc=on,isa-serial=on,x-option-roms=off%s",
	    c->mem_path ? ",memory-backend=mem" : "");
	if (c->mem_path) {
		add(&b, "-object");
		add(&b, "memory-backend-file,id=" QEMU_RAM_ID ",size=%uM,mem-path=%s,share=%s%s",
		    c->memory_mb, c->mem_path, c->mem_shared ? "on" : "off",
		    c->mem_readonly && !c->mem_shared ? ",readonly=on,rom=off" : "");
	}
	if (c->accel == QEMU_ACCEL_KVM) {
		add(&b, "-accel");
		add(&b, "kvm");
		add(&b, "-cpu");
		add(&b, "host");
	} else {
		/* Multi-threaded TCG, one host thread per vCPU. The translation
		 * cache is bounded (default is 1 GiB per VM) so many idle VMs
		 * do not each hold a gigabyte of code cache. */
		add(&b, "-accel");
		add(&b, "tcg,thread=multi,tb-size=128");
		add(&b, "-cpu");
		add(&b, QEMU_TCG_CPU);
	}
	add(&b, "-smp");
	add(&b, "%u", c->vcpus);
	add(&b, "-m");
	add(&b, "%u", c->memory_mb);
	/* QEMU's own seccomp filter, before any guest code runs: no
	 * obsolete calls, no set*id, no fork or exec (migrations go
	 * through a descriptor, not a shell), no scheduler or priority
	 * changes. */
	add(&b, "-sandbox");
	add(&b, "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
	add(&b, "-nodefaults");
	add(&b, "-no-user-config");
	add(&b, "-display");
	add(&b, "none");
	/* A guest reset ends the process: the agent powers off by resetting,
	 * and a panicking kernel (panic=-1) resets immediately. */
	add(&b, "-no-reboot");
	add(&b, "-kernel");
	add(&b, "%s", c->kernel);
	add(&b, "-initrd");
	add(&b, "%s", c->initrd);
	add(&b, "-append");
	/* reboot=t: without ACPI or a keyboard controller the only reset that
	 * reaches QEMU is a triple fault; the default methods spin forever. */
	char tsc[64] = "";
	if (c->accel == QEMU_ACCEL_TCG && c->tsc_khz)
		snprintf(tsc, sizeof(tsc), " tsc_early_khz=%u tsc=reliable", c->tsc_khz);
	add(&b, "console=ttyS0 quiet panic=-1 reboot=t rdinit=/init 8250.nr_uarts=1 "
		"cryptomgr.notests random.trust_cpu=on cpuos.hostname=%s%s%s%s%s",
	    c->hostname ? c->hostname : "cpuos", tsc,
	    c->tap ? " cpuos.net=" NET_GUEST_IP "/30," NET_GATEWAY_IP : "",
	    c->extra_append ? " " : "", c->extra_append ? c->extra_append : "");

	/* Control and console sockets: QEMU listens, the runner connects and
	 * may reconnect after a restart (wait=off: QEMU does not block). */
	add(&b, "-chardev");
	add(&b, QMP_CHARDEV "%s/" QEMU_QMP_SOCK ",server=on,wait=off", c->run_dir);
	add(&b, "-mon");
	add(&b, "chardev=qmp,mode=control");
	add(&b, "-chardev");
	add(&b, "socket,id=con,path=%s/" QEMU_CONSOLE_SOCK ",server=on,wait=off", c->run_dir);
	add(&b, "-serial");
	add(&b, "chardev:con");

	/* The agent channel: virtio-serial (no vhost-vsock on our hosts). */
	add(&b, "-device");
	add(&b, "virtio-serial-device,max_ports=4");
	add(&b, "-chardev");
	add(&b, "socket,id=agent,path=%s/" QEMU_AGENT_SOCK ",server=on,wait=off", c->run_dir);
	add(&b, "-device");
	add(&b, "virtserialport,chardev=agent,name=cpuos.agent");

	/* Disks are found by serial in the guest, not by probe order. */
	add(&b, "-blockdev");
	add(&b, "driver=file,node-name=tplfile,filename=%s,read-only=on", c->template);
	add(&b, "-blockdev");
	add(&b, "driver=raw,node-name=tpl,file=tplfile,read-only=on");
	add(&b, "-device");
	add(&b, "virtio-blk-device,drive=tpl,serial=root");
	add(&b, "-blockdev");
	add(&b, "driver=file,node-name=scrfile,filename=%s,discard=unmap", c->scratch);
	add(&b, "-blockdev");
	add(&b, "driver=qcow2,node-name=scr,file=scrfile,discard=unmap");
	add(&b, "-device");
	add(&b, "virtio-blk-device,drive=scr,serial=scratch");

	/* vhost stays off: the host may have no vhost-net, and a restore
	 * must find the same backend the save had. */
	if (c->tap) {
		add(&b, "-netdev");
		add(&b, "tap,id=net,ifname=%s,script=no,downscript=no,vhost=off", c->tap);
		add(&b, "-device");
		add(&b, "virtio-net-device,netdev=net,mac=" NET_GUEST_MAC);
	}

	add(&b, "-object");
	add(&b, "rng-random,id=rng,filename=/dev/urandom");
	add(&b, "-device");
	add(&b, "virtio-rng-device,rng=rng");

	if (c->incoming) {
		add(&b, "-incoming");
		add(&b, "defer");
	}
	if (c->incoming && c->devices_only)
		add(&b, "-S");
	if (c->no_config) {
		add(&b, "-global");
		add(&b, "%s", MIGRATE_NO_CONFIG);
	}
	for (const char *const *p = c->extra_args; p && *p; p++)
		add(&b, "%s", *p);

	if (b.err) {
		qemu_argv_free(b.v);
		return b.err;
	}
	*out = b.v;
	return 0;
}

int qemu_run_dir_of(const char *cmdline, char *dir, size_t len)
{
	const char *at = strstr(cmdline, QMP_CHARDEV);
	if (!at)
		return -ENOENT;
	at += strlen(QMP_CHARDEV);
	const char *end = strstr(at, "/" QEMU_QMP_SOCK ",");
	if (!end || (size_t)(end - at) >= len || memchr(at, ' ', (size_t)(end - at)))
		return -ENOENT;
	snprintf(dir, len, "%.*s", (int)(end - at), at);
	return 0;
}

void qemu_argv_free(char **argv)
{
	if (!argv)
		return;
	for (char **p = argv; *p; p++)
		free(*p);
	free(argv);
}
