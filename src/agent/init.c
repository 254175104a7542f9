/*
 * init: PID 1 duties. Boots from the initramfs into the sandbox root (erofs
 * template + ext4 scratch under overlayfs), mounts the API file systems,
 * finds the agent port, and shuts the VM down (a reset: QEMU runs -no-reboot).
 */
#include "agent/init.h"

#include "agent/conn.h"
#include "agent/net.h"
#include "agent/proc.h"
#include "agent/sys.h"
#include "common/clock.h"
#include "common/fs.h"
#include "common/proto.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PORT_NAME	"cpuos.agent"
#define SELF		"/run/cpuos/cpuos-agent"
#define WAIT_DEVICES_MS 5000

#define CGROUP_FS	 "/sys/fs/cgroup"
#define AGENT_CGROUP	 CGROUP_FS "/agent"
#define SANDBOX_CGROUP	 CGROUP_FS "/cpuos"
#define SANDBOX_PIDS_MAX 4096	       /* all processes of the sandbox, at most */
#define PIDS_RESERVE	 256	       /* tasks kept for the agent and the kernel */
#define RESERVE_MIN	 (32ull << 20) /* memory kept from the sandbox */

static int scratch_fd = -1; /* the scratch mount, unreachable by path after switch root */

static void sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

/* Resets the VM so that QEMU (-no-reboot) exits. Without ACPI, x86 Linux
 * falls back to a jump into the BIOS, which QEMU does not see as a reset and
 * the VM boots again: ask for a triple fault, a reset QEMU sees. */
static void reset_vm(void)
{
	int fd = open("/sys/kernel/reboot/type", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, "triple", 6) < 0)
			sys_log("cannot set reboot type: %s", strerror(errno));
		close(fd);
	}
	reboot(RB_AUTOBOOT);
}

/* PID 1 must never exit (the kernel would panic): reset the VM instead. */
static __attribute__((noreturn, format(printf, 1, 2))) void fatal(const char *fmt, ...)
{
	char line[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	sys_log("fatal: %s", line);
	sync();
	reset_vm();
	for (;;)
		pause();
}

/* Reads a small file into buf, trailing newline removed: 0 or -errno. */
static int read_line(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, cap - 1);
	int r = n < 0 ? -errno : 0;
	close(fd);
	if (r < 0)
		return r;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

static void mount_or_die(const char *src, const char *dst, const char *type, unsigned long flags,
			 const char *data)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "%s", dst);
	fs_mkdir_p(dir, 0755, (uid_t)-1, (gid_t)-1); /* the initramfs has no /mnt */
	if (mount(src, dst, type, flags, data) < 0)
		fatal("cannot mount %s on '%s': %s", type, dst, strerror(errno));
}

/* Mounts an API file system if it is not there yet (best effort). */
static void mount_api(const char *src, const char *dst, const char *type, unsigned long flags,
		      const char *data)
{
	mkdir(dst, 0755);
	if (mount(src, dst, type, flags, data) < 0 && errno != EBUSY)
		sys_log("cannot mount %s on '%s': %s", type, dst, strerror(errno));
}

/* Finds /dev/vdX whose virtio serial is want: 0 with dev filled, or -ENOENT. */
static int find_disk(const char *want, char *dev, size_t cap)
{
	DIR *d = opendir("/sys/block");
	if (!d)
		return -ENOENT;
	struct dirent *e;
	int r = -ENOENT;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "vd", 2) != 0)
			continue;
		char path[300], serial[64];
		if (strlen(e->d_name) > 32)
			continue;
		snprintf(path, sizeof(path), "/sys/block/%s/serial", e->d_name);
		if (read_line(path, serial, sizeof(serial)) == 0 && !strcmp(serial, want)) {
			snprintf(dev, cap, "/dev/%s", e->d_name);
			r = 0;
			break;
		}
	}
	closedir(d);
	return r;
}

static int find_port(char *dev, size_t cap)
{
	DIR *d = opendir("/sys/class/virtio-ports");
	if (!d)
		return -ENOENT;
	struct dirent *e;
	int r = -ENOENT;
	while ((e = readdir(d))) {
		char path[300], name[64];
		snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", e->d_name);
		if (e->d_name[0] != '.' && read_line(path, name, sizeof(name)) == 0 &&
		    !strcmp(name, PORT_NAME)) {
			snprintf(dev, cap, "/dev/%s", e->d_name);
			r = 0;
			break;
		}
	}
	closedir(d);
	return r;
}

static void setup_console(void)
{
	int fd = open("/dev/console", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	for (int i = 0; i < 3 && fd >= 0; i++)
		dup2(fd, i);
	if (fd > 2)
		close(fd);
}

/* Mounts the overlay root at /mnt/root and switches into it. */
static void switch_root(void)
{
	char root[300] = "", scratch[300] = "";
	int64_t end = clock_ms() + WAIT_DEVICES_MS, scratch_end = 0;
	/* Devices usually exist before init runs; the wait covers slow probes.
	 * Once the root disk is there, scratch gets a short extra wait only. */
	for (;;) {
		if (!*root && find_disk("root", root, sizeof(root)) == 0)
			scratch_end = clock_ms() + 300;
		if (!*scratch)
			find_disk("scratch", scratch, sizeof(scratch));
		if (*root && (*scratch || clock_ms() >= scratch_end))
			break;
		if (!*root && clock_ms() >= end)
			fatal("no disk with serial 'root' after %d ms", WAIT_DEVICES_MS);
		sleep_ms(20);
	}
	mount_or_die(root, "/mnt/lower", "erofs", MS_RDONLY, NULL);
	if (*scratch)
		mount_or_die(scratch, "/mnt/scratch", "ext4", MS_NOATIME, NULL);
	else
		mount_or_die("scratch", "/mnt/scratch", "tmpfs", 0, "mode=0755");
	/* upper and work persist across reboots of the same sandbox. */
	mkdir("/mnt/scratch/upper", 0755);
	mkdir("/mnt/scratch/work", 0755);
	scratch_fd = open("/mnt/scratch", O_PATH | O_DIRECTORY | O_CLOEXEC);
	mount_or_die("overlay", "/mnt/root", "overlay", 0,
		     "lowerdir=/mnt/lower,upperdir=/mnt/scratch/upper,workdir=/mnt/scratch/work");

	static const char *const moved[] = {"/dev", "/proc", "/sys"};
	for (size_t i = 0; i < sizeof(moved) / sizeof(moved[0]); i++) {
		char dst[64];
		snprintf(dst, sizeof(dst), "/mnt/root%s", moved[i]);
		mkdir(dst, 0755);
		if (mount(moved[i], dst, NULL, MS_MOVE, NULL) < 0)
			fatal("cannot move '%s' to '%s': %s", moved[i], dst, strerror(errno));
	}
	/* The initramfs stays in memory under the new root: free its only file. */
	unlink("/init");
	if (chdir("/mnt/root") < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 ||
	    chdir("/") < 0)
		fatal("cannot switch root: %s", strerror(errno));
}

int init_cmdline(const char *key, char *out, size_t len)
{
	char cmdline[4096];
	if (read_line("/proc/cmdline", cmdline, sizeof(cmdline)) < 0)
		return -1;
	size_t k = strlen(key);
	for (char *w = strtok(cmdline, " "); w; w = strtok(NULL, " "))
		if (!strncmp(w, key, k) && w[k] == '=' && strlen(w + k + 1) < len) {
			strcpy(out, w + k + 1);
			return 0;
		}
	return -1;
}

static void set_hostname(void)
{
	char name[65] = "cpuos", v[65];
	if (init_cmdline("cpuos.hostname", v, sizeof(v)) == 0 && v[0] &&
	    strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") == strlen(v))
		strcpy(name, v);
	if (sethostname(name, strlen(name)) < 0)
		sys_log("cannot set hostname: %s", strerror(errno));
}

/* The sandbox's memory: the guest's less a reserve for the kernel and the
 * agent (max(32 MiB, 10%)), so a sandbox at its limit cannot starve them.
 * 0 when /proc/meminfo cannot be read. */
static uint64_t sandbox_memory(void)
{
	char buf[256];
	unsigned long long kb = 0;
	if (read_line("/proc/meminfo", buf, sizeof(buf)) < 0 ||
	    sscanf(buf, "MemTotal: %llu kB", &kb) != 1 || kb == 0)
		return 0;
	uint64_t total = (uint64_t)kb * 1024, reserve = total / 10;
	if (reserve < RESERVE_MIN)
		reserve = RESERVE_MIN;
	return reserve < total / 2 ? total - reserve : total / 2;
}

/* The sandbox's tasks: SANDBOX_PIDS_MAX, but PIDS_RESERVE under the kernel's
 * threads-max (derived from guest memory: 3879 at 512 MiB), past which every
 * fork fails, the agent's and the kernel threads' included. */
static long sandbox_pids(void)
{
	char buf[32];
	long max = SANDBOX_PIDS_MAX, threads;
	if (read_line("/proc/sys/kernel/threads-max", buf, sizeof(buf)) == 0 &&
	    (threads = strtol(buf, NULL, 10)) > 2 * PIDS_RESERVE && threads - PIDS_RESERVE < max)
		max = threads - PIDS_RESERVE;
	return max;
}

static void set_or_log(const char *dir, const char *knob, const char *val)
{
	int r = proc_cgroup_set(dir, knob, val);
	if (r < 0)
		sys_log("cannot set '%s/%s' to '%s': %s", dir, knob, val, strerror(-r));
}

/* Enables the cpu, memory and pids controllers for the children of dir: in
 * one write, else one at a time so that a missing one does not take the
 * others along. */
static void enable_controllers(const char *dir)
{
	static const char *const ctl[] = {"+cpu", "+memory", "+pids"};
	if (proc_cgroup_set(dir, "cgroup.subtree_control", "+cpu +memory +pids") == 0)
		return;
	for (size_t i = 0; i < sizeof(ctl) / sizeof(ctl[0]); i++)
		set_or_log(dir, "cgroup.subtree_control", ctl[i]);
}

/* The cgroup layout and limits (docs/agent-protocol.md, Limits):
 *   /sys/fs/cgroup          kernel threads; cpu, memory, pids for children
 *   ├── agent               this process alone, cpu.weight 10000
 *   └── cpuos               every process started: memory.max, pids.max,
 *       └── p<id>           cpu.weight 100; one per exec (proc.c)
 * The agent leaves the root first: with controllers enabled a non-root
 * cgroup can hold no process itself, and /cpuos must stay empty for its
 * p<id> children. Each step is best effort (logged): a sandbox with less
 * protection still boots. Returns whether per-process cgroups can be made. */
static bool setup_limits(void)
{
	/* The OOM killer never takes PID 1; -1000 says so to any reader (and
	 * holds if we ever stop being PID 1). Children reset it (proc.c). */
	int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "-1000", 5) != 5)
		sys_log("cannot set oom_score_adj: %s", strerror(errno));
	if (fd >= 0)
		close(fd);

	/* Controllers before children: no task has to move then. The whole
	 * layout costs about 100 ms of boot under TCG, most of it sleeping in
	 * the kernel while it creates the two memory cgroups. */
	enable_controllers(CGROUP_FS);
	if ((mkdir(AGENT_CGROUP, 0755) < 0 && errno != EEXIST) ||
	    (mkdir(SANDBOX_CGROUP, 0755) < 0 && errno != EEXIST)) {
		sys_log("cannot make the cgroups: %s", strerror(errno));
		return false;
	}
	set_or_log(AGENT_CGROUP, "cgroup.procs", "0");
	/* Weights are relative among siblings: while the agent wants the CPU
	 * it gets 100 parts in 101 however many processes the sandbox runs,
	 * so a fork bomb or a CPU hog cannot make it miss a deadline. Nice
	 * would not help (a task's nice counts only inside its own cgroup)
	 * and SCHED_FIFO would let one bug in the loop hang the guest. */
	set_or_log(AGENT_CGROUP, "cpu.weight", "10000");
	set_or_log(SANDBOX_CGROUP, "cpu.weight", "100");

	char val[32];
	uint64_t mem = sandbox_memory();
	if (mem) {
		snprintf(val, sizeof(val), "%llu", (unsigned long long)mem);
		set_or_log(SANDBOX_CGROUP, "memory.max", val);
	}
	/* Swap would let the sandbox past memory.max (the kernel has none
	 * today: the knob is then absent). */
	int r = proc_cgroup_set(SANDBOX_CGROUP, "memory.swap.max", "0");
	if (r < 0 && r != -ENOENT)
		sys_log("cannot set '%s/memory.swap.max': %s", SANDBOX_CGROUP, strerror(-r));
	snprintf(val, sizeof(val), "%ld", sandbox_pids());
	set_or_log(SANDBOX_CGROUP, "pids.max", val);
	enable_controllers(SANDBOX_CGROUP);
	return access(SANDBOX_CGROUP "/cgroup.procs", W_OK) == 0;
}

/* Links name to target unless a non-symlink is in the way. */
static void relink(const char *target, const char *name)
{
	struct stat st;
	if (lstat(name, &st) == 0) {
		if (!S_ISLNK(st.st_mode))
			return;
		unlink(name);
	}
	if (symlink(target, name) < 0)
		sys_log("cannot link '%s': %s", name, strerror(errno));
}

/* Copies our binary to /run so poweroff, reboot and halt can be us. */
static void install_self(void)
{
	char dir[] = "/usr/local/sbin";
	int in = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	mkdir("/run/cpuos", 0755);
	int out = open(SELF, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	bool ok = in >= 0 && out >= 0;
	char buf[65536];
	ssize_t n;
	while (ok && (n = read(in, buf, sizeof(buf))) != 0)
		ok = n > 0 && write(out, buf, (size_t)n) == n;
	if (out >= 0 && (fchmod(out, 0755) < 0 || close(out) < 0))
		ok = false;
	if (in >= 0)
		close(in);
	if (!ok) {
		sys_log("cannot install '%s': %s", SELF, strerror(errno));
		return;
	}
	fs_mkdir_p(dir, 0755, (uid_t)-1, (gid_t)-1);
	relink(SELF, "/usr/local/sbin/poweroff");
	relink(SELF, "/usr/local/sbin/reboot");
	relink(SELF, "/usr/local/sbin/halt");
}

int init_boot(void)
{
	umask(022);
	mount_api("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	setup_console();
	mount_api("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mount_api("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	switch_root();

	mount_api("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		  "ptmxmode=0666,mode=0620,gid=5");
	mount_api("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	mount_api("run", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
	mount_api("tmp", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	mount_api("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, "favordynmods");
	proc_init(setup_limits());
	relink("/proc/self/fd", "/dev/fd");
	relink("/proc/self/fd/0", "/dev/stdin");
	relink("/proc/self/fd/1", "/dev/stdout");
	relink("/proc/self/fd/2", "/dev/stderr");
	struct stat st;
	if (lstat("/etc/mtab", &st) < 0)
		relink("/proc/self/mounts", "/etc/mtab");
	set_hostname();
	net_up();
	install_self();

	char dev[300];
	int64_t end = clock_ms() + WAIT_DEVICES_MS;
	while (find_port(dev, sizeof(dev)) < 0) {
		if (clock_ms() >= end)
			fatal("no virtio port named '%s'", PORT_NAME);
		sleep_ms(20);
	}
	/* Once, read-write: a port cannot be opened a second time. */
	int fd = open(dev, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		fatal("cannot open '%s': %s", dev, strerror(errno));
	return fd;
}

bool init_port_ready(int fd)
{
	/* Without a host the port reports POLLHUP, and POLLIN too (read would
	 * return 0 at once): only the absence of POLLHUP means a host. */
	struct pollfd p = {.fd = fd, .events = POLLIN};
	if (poll(&p, 1, 0) < 0)
		return false;
	return !(p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

/* Reaps children until none is left or ms have passed. */
static void reap_for(int ms)
{
	int64_t end = clock_ms() + ms;
	while (clock_ms() < end) {
		pid_t pid;
		while ((pid = waitpid(-1, NULL, WNOHANG)) > 0)
			;
		if (pid < 0 && errno == ECHILD)
			return;
		sleep_ms(10);
	}
}

void init_shutdown(struct conn *c, int notice)
{
	if (notice && c->up && !c->broken) {
		int r = conn_out_begin(c, P_NOTICE, 0, 0);
		if (r == 0)
			r = proto_put_u32(&c->out, A_NOTICE, (uint32_t)notice);
		conn_out_end(c, r);
	}
	conn_flush_wait(c, 1000);
	sys_log("%s", notice == PN_REBOOT ? "rebooting" : "powering off");
	kill(-1, SIGTERM);
	reap_for(2000);
	kill(-1, SIGKILL);
	reap_for(500);
	sync();
	/* Best effort: a clean scratch file system spares a journal replay. */
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY, NULL) < 0)
		sys_log("cannot remount '/' read-only: %s", strerror(errno));
	if (scratch_fd >= 0) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/self/fd/%d", scratch_fd);
		mount(NULL, path, NULL, MS_REMOUNT | MS_RDONLY, NULL);
	}
	sync();
	reset_vm();
	fatal("reboot failed: %s", strerror(errno));
}
