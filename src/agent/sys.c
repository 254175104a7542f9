/*
 * sys: logging, and the requests about the guest as a whole: SETTIME,
 * ENTROPY, RESTORED (clock, entropy, identity and hooks after a restore or
 * a fork) and POWEROFF. Outside PID 1 (--listen tests) they check their
 * input and answer without touching the host machine.
 */
#include "agent/sys.h"

#include "agent/agent.h"
#include "agent/conn.h"
#include "agent/hooks.h"
#include "common/clock.h"
#include "common/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/random.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define ENTROPY_MAX 4096u /* bytes per request */
/* 256 bits: as many as the kernel wants before its CRNG counts as seeded,
 * so a P_RESTORED alone is enough even for a guest that never was. */
#define RESTORED_ENTROPY_MIN 32u
#define HOSTNAME_MAX	     63 /* one DNS label */
#define MACHINE_ID_LEN	     32
/* The most a P_RESTORED holds the loop, its hooks included. */
#define RESTORED_MAX_MS 2500

void sys_log(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One write per line: the console is a slow UART shared with the kernel. */
	dprintf(2, "cpuos-agent: %s\n", line);
}

/* Sets CLOCK_REALTIME to ns: 0 or -errno. */
static int set_clock(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
			      .tv_nsec = (long)(ns % 1000000000u)};
	return clock_settime(CLOCK_REALTIME, &ts) < 0 ? -errno : 0;
}

/* Credits n bytes (at most ENTROPY_MAX) to the kernel's input pool, at 8
 * bits a byte, and with reseed makes the CRNG take them now: 0, or -errno
 * with *what naming the step that failed. */
static int feed_entropy(const uint8_t *bytes, uint32_t n, bool reseed, const char **what)
{
	int r = 0;
	*what = "cannot add entropy";
	struct rand_pool_info *info = malloc(sizeof(*info) + n);
	if (!info)
		return -ENOMEM;
	info->entropy_count = (int)(n * 8);
	info->buf_size = (int)n;
	memcpy(info->buf, bytes, n);
	int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, RNDADDENTROPY, info) < 0) {
		r = -errno;
		goto out;
	}
	/* Once the CRNG is initialised, added bytes wait in the input pool
	 * until its next scheduled reseed (up to a minute away), and until
	 * then getrandom() goes on from the state the snapshot holds: two
	 * forks would hand out the same bytes. A forced reseed, after the
	 * add so it takes the host's bytes, ends that at once (microvm has no
	 * VMGenID to tell the kernel itself). */
	if (reseed && ioctl(fd, RNDRESEEDCRNG) < 0) {
		r = -errno;
		*what = "cannot reseed the kernel's random generator";
	}
out:
	if (fd >= 0)
		close(fd);
	/* The bytes are secret: not left in freed memory. */
	explicit_bzero(info->buf, n);
	free(info);
	return r;
}

void sys_settime(struct conn *c, const struct proto_frame *f)
{
	uint64_t ns;
	int r = proto_get_u64(f, A_TIME_NS, &ns);
	if (r < 0) {
		conn_send_attr_error(c, f->id, r, "time_ns");
		return;
	}
	/* Only the guest's clock is ours to set. */
	if (agent.pid1 && (r = set_clock(ns)) < 0) {
		conn_send_error(c, f->id, -r, "cannot set the clock: %s", strerror(-r));
		return;
	}
	conn_send_ok(c, f->id);
}

void sys_entropy(struct conn *c, const struct proto_frame *f)
{
	uint32_t n;
	const uint8_t *bytes = proto_get(f, A_BYTES, &n);
	if (!bytes) {
		conn_send_error(c, f->id, EINVAL, "missing attribute 'bytes'");
		return;
	}
	if (n > ENTROPY_MAX) {
		conn_send_error(c, f->id, EINVAL, "too many entropy bytes (%u, max %u)", n,
				ENTROPY_MAX);
		return;
	}
	const char *what;
	int r = agent.pid1 && n ? feed_entropy(bytes, n, false, &what) : 0;
	if (r < 0)
		conn_send_error(c, f->id, -r, "%s: %s", what, strerror(-r));
	else
		conn_send_ok(c, f->id);
}

/* --- P_RESTORED --- */

/* What a P_RESTORED asks for, checked whole before anything changes. */
struct restored {
	uint64_t time_ns;
	const uint8_t *bytes;
	uint32_t nbytes;
	char hostname[HOSTNAME_MAX + 1]; /* "" when not given */
	char machine_id[MACHINE_ID_LEN + 1];
	bool has_generation;
	uint32_t generation;
};

/* One DNS label in lowercase, what the daemon names sandboxes with: 1 to
 * HOSTNAME_MAX of [a-z0-9-], not starting with '-'. */
static bool valid_hostname(const uint8_t *s, uint32_t n)
{
	if (n == 0 || n > HOSTNAME_MAX || s[0] == '-')
		return false;
	for (uint32_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
			return false;
	return true;
}

/* machine-id(5): 32 lowercase hexadecimal digits. */
static bool valid_machine_id(const uint8_t *s, uint32_t n)
{
	if (n != MACHINE_ID_LEN)
		return false;
	for (uint32_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* Fills r from f: 0, or -1 after answering P_ERROR. */
static int restored_parse(struct conn *c, const struct proto_frame *f, struct restored *r)
{
	memset(r, 0, sizeof(*r));
	int e = proto_get_u64(f, A_TIME_NS, &r->time_ns);
	if (e < 0) {
		conn_send_attr_error(c, f->id, e, "time_ns");
		return -1;
	}
	r->bytes = proto_get(f, A_BYTES, &r->nbytes);
	if (!r->bytes) {
		conn_send_error(c, f->id, EINVAL, "missing attribute 'bytes'");
		return -1;
	}
	if (r->nbytes < RESTORED_ENTROPY_MIN || r->nbytes > ENTROPY_MAX) {
		conn_send_error(c, f->id, EINVAL, "attribute 'bytes' holds %u bytes, not %u to %u",
				r->nbytes, RESTORED_ENTROPY_MIN, ENTROPY_MAX);
		return -1;
	}
	uint32_t n;
	const uint8_t *s = proto_get(f, A_HOSTNAME, &n);
	if (s) {
		if (!valid_hostname(s, n)) {
			conn_send_error(c, f->id, EINVAL,
					"attribute 'hostname' is not 1 to %d of [a-z0-9-] "
					"starting with a letter or digit",
					HOSTNAME_MAX);
			return -1;
		}
		memcpy(r->hostname, s, n);
	}
	s = proto_get(f, A_MACHINE_ID, &n);
	if (s) {
		if (!valid_machine_id(s, n)) {
			conn_send_error(c, f->id, EINVAL,
					"attribute 'machine_id' is not %d lowercase hex digits",
					MACHINE_ID_LEN);
			return -1;
		}
		memcpy(r->machine_id, s, n);
	}
	e = proto_get_u32(f, A_GENERATION, &r->generation);
	if (e == -EPROTO) {
		conn_send_attr_error(c, f->id, e, "generation");
		return -1;
	}
	r->has_generation = e == 0;
	return 0;
}

/* Replaces the content of path with line and a newline, in place: a
 * rename would replace a symlink (machine-id is one in some images) and
 * cannot replace a bind mount. With create a missing file is made (mode
 * 0444, machine-id(5)'s). 0 or -errno (-ENOENT: missing, not created). */
static int write_etc(const char *path, const char *line, bool create)
{
	char buf[80];
	int n = snprintf(buf, sizeof(buf), "%s\n", line);
	int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC | (create ? O_CREAT : 0), 0444);
	if (fd < 0)
		return -errno;
	int r = write(fd, buf, (size_t)n) == n ? 0 : -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	return r;
}

/* write_etc, with failures logged, not answered: the kernel's hostname is
 * what counts, and a read-only root (an image run without the overlay) is
 * a setup, not an error, told once. */
static void update_etc(const char *path, const char *line, bool create)
{
	static bool told_ro;
	int r = write_etc(path, line, create);
	if (r == -ENOENT && !create)
		return;
	if (r == -EROFS || r == -EACCES || r == -EPERM) {
		if (!told_ro)
			sys_log("cannot write '%s' after a restore: %s (not told again)", path,
				strerror(-r));
		told_ro = true;
	} else if (r < 0) {
		sys_log("cannot write '%s' after a restore: %s", path, strerror(-r));
	}
}

/* Does what q asks for, as PID 1, by end (monotonic ms): 0, or -1 after
 * answering P_ERROR. */
static int restored_apply(struct conn *c, uint32_t id, const struct restored *q, int64_t end)
{
	/* The clock first: the hooks (DHCP, TLS) want the right time. */
	int r = set_clock(q->time_ns);
	if (r < 0) {
		conn_send_error(c, id, -r, "cannot set the clock: %s", strerror(-r));
		return -1;
	}
	const char *what;
	r = feed_entropy(q->bytes, q->nbytes, true, &what);
	if (r < 0) {
		conn_send_error(c, id, -r, "%s: %s", what, strerror(-r));
		return -1;
	}
	if (q->hostname[0]) {
		if (sethostname(q->hostname, strlen(q->hostname)) < 0) {
			r = errno;
			conn_send_error(c, id, r, "cannot set the hostname: %s", strerror(r));
			return -1;
		}
		update_etc("/etc/hostname", q->hostname, false);
	}
	if (q->machine_id[0])
		update_etc("/etc/machine-id", q->machine_id, true);

	char host[HOST_NAME_MAX + 1] = "", gen[16];
	if (gethostname(host, sizeof(host)) < 0)
		host[0] = '\0';
	snprintf(gen, sizeof(gen), "%u", q->generation);
	r = hooks_run(HOOKS_DIR, q->has_generation ? gen : NULL, host[0] ? host : NULL, end);
	if (r < 0 && r != -ENOENT)
		sys_log("cannot read '%s': %s", HOOKS_DIR, strerror(-r));
	return 0;
}

void sys_restored(struct conn *c, const struct proto_frame *f)
{
	int64_t start = clock_ms();
	struct restored q;
	if (restored_parse(c, f, &q) < 0)
		return;
	/* Outside PID 1 nothing here is ours to change. */
	if (agent.pid1 && restored_apply(c, f->id, &q, start + RESTORED_MAX_MS) < 0)
		return;
	/* Code kernels reseed their generators at their next call (code.c). */
	agent.restores++;
	int r = conn_out_begin(c, P_OK, 0, f->id);
	if (r == 0 && q.has_generation)
		r = proto_put_u32(&c->out, A_GENERATION, q.generation);
	conn_out_end(c, r);
}

void sys_poweroff(struct conn *c, const struct proto_frame *f)
{
	conn_send_ok(c, f->id);
	/* The loop flushes the answer, then stops (init_shutdown as PID 1). */
	agent.shutdown = SHUT_REQUEST;
}

/* A "Name:   123 kB" line of /proc/meminfo, in bytes; 0 when missing. */
static uint64_t meminfo(const char *text, const char *name)
{
	const char *p = strstr(text, name);
	unsigned long long kb;
	if (!p || sscanf(p + strlen(name), " %llu", &kb) != 1)
		return 0;
	return (uint64_t)kb * 1024;
}

/* Reads a small /proc file into buf (NUL-terminated): its length or -1. */
static ssize_t read_small(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t k = read(fd, buf, n - 1);
	close(fd);
	if (k < 0)
		return -1;
	buf[k] = '\0';
	return k;
}

void sys_stats(struct conn *c, const struct proto_frame *f)
{
	static char buf[16384];
	uint64_t mem_total = 0, mem_avail = 0, rx = 0, tx = 0, cpu_ns = 0;
	if (read_small("/proc/meminfo", buf, sizeof(buf)) > 0) {
		mem_total = meminfo(buf, "MemTotal:");
		mem_avail = meminfo(buf, "MemAvailable:");
	}
	/* "  eth0: rx_bytes packets ... (8 fields) tx_bytes ..." after two header lines. */
	if (read_small("/proc/net/dev", buf, sizeof(buf)) > 0) {
		char *save = NULL;
		for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			char *colon = strchr(line, ':');
			unsigned long long v[9];
			if (!colon)
				continue;
			*colon = '\0';
			while (*line == ' ')
				line++;
			if (!strcmp(line, "lo") ||
			    sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
				   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]) != 9)
				continue;
			rx += v[0];
			tx += v[8];
		}
	}
	/* "cpu  user nice system idle iowait irq softirq steal" in USER_HZ. */
	if (read_small("/proc/stat", buf, sizeof(buf)) > 0) {
		unsigned long long u, n, s, idle, io, irq, sirq, steal = 0;
		if (sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &u, &n, &s, &idle, &io,
			   &irq, &sirq, &steal) >= 7) {
			long hz = sysconf(_SC_CLK_TCK);
			cpu_ns = (u + n + s + irq + sirq) * (1000000000ull / (uint64_t)(hz > 0 ? hz : 100));
		}
	}
	struct statvfs sv;
	uint64_t disk_total = 0, disk_used = 0;
	if (statvfs("/", &sv) == 0) {
		disk_total = (uint64_t)sv.f_blocks * sv.f_frsize;
		disk_used = (uint64_t)(sv.f_blocks - sv.f_bfree) * sv.f_frsize;
	}
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int r = conn_out_begin(c, P_OK, 0, f->id);
	if (r == 0)
		r = proto_put_u64(&c->out, A_MEM_TOTAL, mem_total);
	if (r == 0)
		r = proto_put_u64(&c->out, A_MEM_AVAIL, mem_avail);
	if (r == 0)
		r = proto_put_u64(&c->out, A_DISK_TOTAL, disk_total);
	if (r == 0)
		r = proto_put_u64(&c->out, A_DISK_USED, disk_used);
	if (r == 0)
		r = proto_put_u64(&c->out, A_NET_RX, rx);
	if (r == 0)
		r = proto_put_u64(&c->out, A_NET_TX, tx);
	if (r == 0)
		r = proto_put_u64(&c->out, A_CPU_NS, cpu_ns);
	if (r == 0)
		r = proto_put_u32(&c->out, A_NCPU, (uint32_t)(ncpu > 0 ? ncpu : 1));
	conn_out_end(c, r);
}

#define TRUST_MAX (64 * 1024)

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

void sys_trust(struct conn *c, const struct proto_frame *f)
{
	/* Debian's and Alpine's, Red Hat's, and LibreSSL's (on Alpine a link
	 * to the first: each file once). */
	static const char *const bundles[] = { "/etc/ssl/certs/ca-certificates.crt",
					       "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem" };
	uint32_t n;
	const uint8_t *pem = proto_get(f, A_BYTES, &n);
	if (!pem || !n || n > TRUST_MAX || memmem(pem, n, "", 1)) {
		conn_send_error(c, f->id, EINVAL, "missing or bad attribute 'bytes' (a PEM, at most %d bytes)",
				TRUST_MAX);
		return;
	}
	/* Only the guest's bundles are ours (an agent in --listen mode runs
	 * on a host, for tests). */
	if (!agent.pid1) {
		conn_send_error(c, f->id, EPERM, "the CA bundles are changed only in a guest");
		return;
	}
	/* Modes as written: init set the umask to 022. */
	if (access("/usr", F_OK) == 0) {
		mkdir("/usr/local", 0755);
		mkdir("/usr/local/share", 0755);
		mkdir("/usr/local/share/ca-certificates", 0755);
		int fd = open("/usr/local/share/ca-certificates/cpuos-egress.crt",
			      O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (fd >= 0) {
			write_all(fd, pem, n);
			close(fd);
		}
	}
	struct stat seen[3];
	int nseen = 0, r = 0;
	for (size_t i = 0; i < 3 && r == 0; i++) {
		struct stat st;
		if (stat(bundles[i], &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		int dup = 0;
		for (int k = 0; k < nseen; k++)
			dup |= seen[k].st_dev == st.st_dev && seen[k].st_ino == st.st_ino;
		if (dup)
			continue;
		seen[nseen++] = st;
		int fd = open(bundles[i], O_WRONLY | O_APPEND | O_CLOEXEC);
		if (fd < 0 || (r = write_all(fd, pem, n)) < 0)
			r = r ? r : -errno;
		if (fd >= 0)
			close(fd);
		if (r < 0)
			conn_send_error(c, f->id, -r, "cannot add to '%s': %s", bundles[i], strerror(-r));
	}
	if (r < 0)
		return;
	if (!nseen) { /* no bundle: the first one's place */
		mkdir("/etc/ssl", 0755);
		mkdir("/etc/ssl/certs", 0755);
		int fd = open(bundles[0], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd < 0 || (r = write_all(fd, pem, n)) < 0) {
			r = r ? r : -errno;
			conn_send_error(c, f->id, -r, "cannot write '%s': %s", bundles[0], strerror(-r));
			if (fd >= 0)
				close(fd);
			return;
		}
		close(fd);
	}
	conn_send_ok(c, f->id);
}
