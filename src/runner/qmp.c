/*
 * qmp: line framing and message dispatch for QEMU's machine protocol. Every
 * line is a JSON object: a greeting ("QMP"), a reply ("return" or "error")
 * or an event ("event"). Replies are matched to the one command in flight.
 */
#include "runner/qmp.h"

#include "common/unixsock.h"
#include "common/clock.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

struct qmp {
	int fd;
	char *buf; /* bytes read, not yet a whole line */
	size_t len, cap;
	json_t *reply;       /* the reply to the command in flight */
	long long want_id;   /* its "id": replies to older commands are dropped */
	long long next_id;
	int greeted;
	char shutdown[64];   /* reason of the last SHUTDOWN event */
	char migration[32];  /* status of the last MIGRATION event */
	unsigned events, events_seen; /* events read; as qmp_wait_event began */
	int closed;
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* Handles one complete line: an event is recorded, a reply kept. */
static int handle_line(struct qmp *q, const char *line, size_t n)
{
	json_error_t jerr;
	json_t *msg = json_loadb(line, n, 0, &jerr);
	if (!msg || !json_is_object(msg)) {
		json_decref(msg);
		return -EPROTO;
	}
	const char *ev = json_string_value(json_object_get(msg, "event"));
	if (ev) {
		json_t *data = json_object_get(msg, "data");
		if (!strcmp(ev, "SHUTDOWN")) {
			const char *reason = json_string_value(json_object_get(data, "reason"));
			snprintf(q->shutdown, sizeof(q->shutdown), "%s", reason ? reason : "unknown");
		} else if (!strcmp(ev, "MIGRATION")) {
			const char *status = json_string_value(json_object_get(data, "status"));
			snprintf(q->migration, sizeof(q->migration), "%s", status ? status : "unknown");
		}
		q->events++;
		json_decref(msg);
		return 0;
	}
	if (json_object_get(msg, "QMP")) {
		q->greeted = 1;
		json_decref(msg);
		return 0;
	}
	if (json_object_get(msg, "return") || json_object_get(msg, "error")) {
		/* A reply to a command that timed out earlier must not be taken
		 * for the answer to the current one. */
		if (json_integer_value(json_object_get(msg, "id")) == q->want_id && !q->reply)
			q->reply = msg;
		else
			json_decref(msg);
		return 0;
	}
	json_decref(msg);
	return -EPROTO;
}

/* Reads once (the socket is non-blocking) and handles every whole line. */
static int read_some(struct qmp *q)
{
	if (q->cap - q->len < 4096) {
		size_t cap = q->cap ? q->cap * 2 : 8192;
		if (cap > QMP_MAX_LINE + 8192)
			return -EMSGSIZE;
		char *p = realloc(q->buf, cap);
		if (!p)
			return -ENOMEM;
		q->buf = p;
		q->cap = cap;
	}
	ssize_t n = read(q->fd, q->buf + q->len, q->cap - q->len);
	if (n == 0) {
		q->closed = 1;
		return -EPIPE;
	}
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	q->len += (size_t)n;
	char *start = q->buf, *nl;
	while ((nl = memchr(start, '\n', q->len - (size_t)(start - q->buf)))) {
		int r = handle_line(q, start, (size_t)(nl - start));
		if (r < 0)
			return r;
		start = nl + 1;
	}
	q->len -= (size_t)(start - q->buf);
	memmove(q->buf, start, q->len);
	if (q->len > QMP_MAX_LINE)
		return -EMSGSIZE;
	return 0;
}

static int have_reply(const struct qmp *q)
{
	return q->reply != NULL;
}

static int have_greeting(const struct qmp *q)
{
	return q->greeted;
}

static int have_event(const struct qmp *q)
{
	return q->events != q->events_seen;
}

/* Reads until ready(q), or the deadline passes. */
static int wait_for(struct qmp *q, int64_t deadline, int (*ready)(const struct qmp *))
{
	while (!ready(q)) {
		int64_t left = deadline - clock_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = q->fd, .events = POLLIN };
		int r = poll(&p, 1, (int)left);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r > 0 && (r = read_some(q)) < 0)
			return r;
	}
	return 0;
}

/* Writes all of p, its first bytes with fd attached (SCM_RIGHTS) unless
 * fd is -1: QEMU takes a descriptor with the line it came with. */
static int send_all(int sock, const char *p, size_t n, int fd)
{
	char ctl[CMSG_SPACE(sizeof(int))];
	while (n) {
		struct iovec iov = { .iov_base = (void *)p, .iov_len = n };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		if (fd >= 0) {
			memset(ctl, 0, sizeof(ctl));
			mh.msg_control = ctl;
			mh.msg_controllen = sizeof(ctl);
			struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &fd, sizeof(int));
		}
		ssize_t w = sendmsg(sock, &mh, MSG_NOSIGNAL);
		if (w < 0 && errno == EAGAIN) {
			struct pollfd pf = { .fd = sock, .events = POLLOUT };
			poll(&pf, 1, 1000);
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		fd = -1; /* sent with the first bytes */
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int command(struct qmp *q, const char *cmd, json_t *args, int fd, int timeout_ms,
		   json_t **ret, char *err, size_t errlen)
{
	json_decref(q->reply);
	q->reply = NULL;
	q->want_id = ++q->next_id;
	json_t *msg = json_pack("{s:s,s:I}", "execute", cmd, "id", (json_int_t)q->want_id);
	if (!msg) {
		json_decref(args);
		return -ENOMEM;
	}
	if (args)
		json_object_set_new(msg, "arguments", args);
	char *text = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	if (!text)
		return -ENOMEM;
	size_t n = strlen(text);
	text[n] = '\n'; /* json_dumps leaves room for its NUL; QMP wants a line */
	int r = send_all(q->fd, text, n + 1, fd);
	free(text);
	if (r < 0) {
		set_err(err, errlen, "cannot send '%s' to QEMU", cmd);
		return r;
	}
	r = wait_for(q, clock_ms() + timeout_ms, have_reply);
	if (r < 0) {
		set_err(err, errlen, "no reply from QEMU to '%s'", cmd);
		return r;
	}
	json_t *e = json_object_get(q->reply, "error");
	if (e) {
		const char *desc = json_string_value(json_object_get(e, "desc"));
		set_err(err, errlen, "%s", desc ? desc : "QEMU error");
		return -EREMOTEIO;
	}
	if (ret)
		*ret = json_incref(json_object_get(q->reply, "return"));
	return 0;
}

int qmp_command(struct qmp *q, const char *cmd, json_t *args, int timeout_ms,
		json_t **ret, char *err, size_t errlen)
{
	return command(q, cmd, args, -1, timeout_ms, ret, err, errlen);
}

int qmp_getfd(struct qmp *q, const char *name, int fd, char *err, size_t errlen)
{
	return command(q, "getfd", json_pack("{s:s}", "fdname", name), fd, 2000, NULL, err, errlen);
}

int qmp_open_fd(int fd, int timeout_ms, struct qmp **out, char *err, size_t errlen)
{
	struct qmp *q = calloc(1, sizeof(*q));
	if (!q) {
		close(fd);
		return -ENOMEM;
	}
	q->fd = fd;
	int r = wait_for(q, clock_ms() + timeout_ms, have_greeting);
	if (r < 0) {
		set_err(err, errlen, "%s", "no QMP greeting from QEMU");
		goto fail;
	}
	r = qmp_command(q, "qmp_capabilities", NULL, timeout_ms, NULL, err, errlen);
	if (r < 0)
		goto fail;
	*out = q;
	return 0;
fail:
	qmp_close(q);
	return r;
}

int qmp_connect(const char *path, int timeout_ms, struct qmp **out, char *err, size_t errlen)
{
	int64_t deadline = clock_ms() + timeout_ms;
	int fd = unix_connect(path, timeout_ms);
	if (fd < 0) {
		set_err(err, errlen, "cannot connect to QMP socket '%s'", path);
		return fd;
	}
	int on = 1;
	if (ioctl(fd, FIONBIO, &on) < 0) {
		close(fd);
		return -errno;
	}
	return qmp_open_fd(fd, (int)(deadline - clock_ms()), out, err, errlen);
}

void qmp_close(struct qmp *q)
{
	if (!q)
		return;
	close(q->fd);
	json_decref(q->reply);
	free(q->buf);
	free(q);
}

int qmp_fd(const struct qmp *q)
{
	return q->fd;
}

int qmp_poll_events(struct qmp *q)
{
	if (q->closed)
		return -EPIPE;
	struct pollfd p = { .fd = q->fd, .events = POLLIN };
	while (poll(&p, 1, 0) > 0) {
		int r = read_some(q);
		if (r < 0)
			return r;
	}
	return 0;
}

const char *qmp_shutdown_reason(const struct qmp *q)
{
	return q->shutdown[0] ? q->shutdown : NULL;
}

int qmp_wait_event(struct qmp *q, int timeout_ms)
{
	if (q->closed)
		return -EPIPE;
	q->events_seen = q->events;
	return wait_for(q, clock_ms() + timeout_ms, have_event);
}

const char *qmp_migration_status(const struct qmp *q)
{
	return q->migration[0] ? q->migration : NULL;
}

void qmp_migration_forget(struct qmp *q)
{
	q->migration[0] = '\0';
}
