/*
 * sys: logging, the monotonic clock, and the requests about the guest as a
 * whole: SETTIME, ENTROPY and POWEROFF. Outside PID 1 (--listen tests) they
 * answer without touching the host machine.
 */
#include "agent/sys.h"

#include "agent/agent.h"
#include "agent/conn.h"
#include "common/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

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

void sys_settime(struct conn *c, const struct proto_frame *f)
{
	uint64_t ns;
	int r = proto_get_u64(f, A_TIME_NS, &ns);
	if (r < 0) {
		conn_send_attr_error(c, f->id, r, "time_ns");
		return;
	}
	/* Only the guest's clock is ours to set. */
	if (agent.pid1) {
		struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
				      .tv_nsec = (long)(ns % 1000000000u)};
		if (clock_settime(CLOCK_REALTIME, &ts) < 0) {
			conn_send_error(c, f->id, errno, "cannot set the clock: %s",
					strerror(errno));
			return;
		}
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
	if (n > 4096) {
		conn_send_error(c, f->id, EINVAL, "too many entropy bytes (%u, max 4096)", n);
		return;
	}
	if (!agent.pid1 || n == 0) {
		conn_send_ok(c, f->id);
		return;
	}
	struct rand_pool_info *info = malloc(sizeof(*info) + n);
	if (!info) {
		conn_send_error(c, f->id, ENOMEM, "out of memory");
		return;
	}
	info->entropy_count = (int)(n * 8);
	info->buf_size = (int)n;
	memcpy(info->buf, bytes, n);
	int err = 0;
	int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, RNDADDENTROPY, info) < 0)
		err = errno;
	if (fd >= 0)
		close(fd);
	free(info);
	if (err)
		conn_send_error(c, f->id, err, "cannot add entropy: %s", strerror(err));
	else
		conn_send_ok(c, f->id);
}

void sys_poweroff(struct conn *c, const struct proto_frame *f)
{
	conn_send_ok(c, f->id);
	/* The loop flushes the answer, then stops (init_shutdown as PID 1). */
	agent.shutdown = SHUT_REQUEST;
}
