/*
 * conn: the channel to the host. Reads and parses frames, dispatches requests
 * through a table, keeps the live operations of the connection and the out
 * queue with its watermarks. P_HELLO starts a session and ends the old one's
 * operations silently; a hangup of the port only pauses it (conn_hangup).
 */
#include "agent/conn.h"

#include "agent/agent.h"
#include "agent/code.h"
#include "agent/exec.h"
#include "agent/files.h"
#include "agent/proc.h"
#include "agent/sys.h"
#include "agent/watch.h"
#include "agent/xfer.h"
#include "common/clock.h"
#include "common/proto.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_CHUNK (256u * 1024)

void conn_init(struct conn *c)
{
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

void conn_open(struct conn *c, int fd)
{
	c->fd = fd;
	c->up = true;
	c->broken = false;
	c->throttled = false;
	c->hup = false;
	c->in_cut = 0;
}

size_t conn_pending(const struct conn *c)
{
	return c->out.len - c->out_head;
}

static void update_throttle(struct conn *c)
{
	size_t n = conn_pending(c);
	if (n > OUT_HIGH)
		c->throttled = true;
	else if (n < OUT_LOW)
		c->throttled = false;
}

bool conn_want_read(const struct conn *c)
{
	return c->up && !c->broken && !c->hup && conn_pending(c) < OUT_HARD && !proc_stdin_full();
}

struct conn_op *conn_op_find(struct conn *c, uint32_t id)
{
	for (int i = 0; i < c->nops; i++)
		if (c->ops[i]->id == id)
			return c->ops[i];
	return NULL;
}

struct conn_op *conn_op_open(struct conn *c, uint32_t id, enum conn_op_kind kind)
{
	if (c->nops >= MAX_OPS) {
		conn_send_error(c, id, EAGAIN, "too many operations (%d)", MAX_OPS);
		return NULL;
	}
	struct conn_op *op = calloc(1, sizeof(*op));
	if (!op) {
		conn_send_error(c, id, ENOMEM, "out of memory");
		return NULL;
	}
	op->id = id;
	op->kind = kind;
	op->fd = -1;
	op->credit = PROTO_DEFAULT_WINDOW;
	c->ops[c->nops++] = op;
	if (kind == OP_FWRITE)
		c->nfwrite++;
	if (kind == OP_FREAD)
		c->nfread++;
	return op;
}

int conn_op_window(struct conn *c, const struct proto_frame *f, int64_t *credit)
{
	uint32_t w;
	*credit = PROTO_DEFAULT_WINDOW;
	int r = proto_get_u32(f, A_WINDOW, &w);
	if (r == -EPROTO) {
		conn_send_attr_error(c, f->id, r, "window");
		return -1;
	}
	if (r == 0)
		*credit = w < PROTO_MIN_WINDOW ? PROTO_MIN_WINDOW
			     : w > PROTO_MAX_WINDOW ? PROTO_MAX_WINDOW : w;
	return 0;
}

static void send_credit(struct conn *c, uint32_t id, uint64_t n)
{
	int r = conn_out_begin(c, P_CREDIT, 0, id);
	if (r == 0)
		r = proto_put_u32(&c->out, A_CREDIT, (uint32_t)n);
	conn_out_end(c, r);
}

void conn_op_input_taken(struct conn *c, struct conn_op *op, size_t n)
{
	op->in_unacked += n;
	/* In quarters of the window: fewer frames, and the host never waits
	 * long for the first credit. */
	if (op->in_unacked >= PROTO_INPUT_WINDOW / 4) {
		send_credit(c, op->id, op->in_unacked);
		op->in_unacked = 0;
	}
}

void conn_stdin_credit(struct conn *c)
{
	for (int i = 0; i < c->nops && c->up && !c->broken; i++) {
		struct conn_op *op = c->ops[i];
		if (!op->in_unacked || (op->kind != OP_EXEC && op->kind != OP_ATTACH))
			continue;
		/* Credit once the pipe took the bytes (or nobody reads them:
		 * a closed stdin drops them). */
		const struct proc *p = op->proc;
		if (p->in_fd < 0 || p->in.len - p->in_head < PROTO_INPUT_WINDOW / 2) {
			send_credit(c, op->id, op->in_unacked);
			op->in_unacked = 0;
		}
	}
}

void conn_op_close(struct conn *c, struct conn_op *op)
{
	switch (op->kind) {
	case OP_EXEC:
	case OP_ATTACH:
		proc_unsubscribe(op->proc, true);
		break;
	case OP_WAIT:
		proc_unsubscribe(op->proc, false);
		break;
	case OP_CODE:
		proc_unsubscribe(op->proc, true);
		code_op_closed(op);
		break;
	case OP_FWRITE:
		xfer_fwrite_release(op);
		c->nfwrite--;
		break;
	case OP_FREAD:
		if (op->fd >= 0)
			close(op->fd);
		c->nfread--;
		break;
	case OP_WATCH:
		watch_op_closed(op);
		break;
	}
	for (int i = 0; i < c->nops; i++) {
		if (c->ops[i] == op) {
			c->ops[i] = c->ops[--c->nops];
			break;
		}
	}
	free(op);
}

void conn_drop(struct conn *c)
{
	/* Highest index first: conn_op_close moves the last entry into the hole. */
	while (c->nops > 0)
		conn_op_close(c, c->ops[c->nops - 1]);
	pbuf_release(&c->in);
	pbuf_release(&c->out);
	c->out_head = 0;
	c->up = false;
	c->broken = false;
	c->throttled = false;
	c->hup = false;
	c->in_cut = 0;
	if (c->is_socket && c->fd >= 0) {
		close(c->fd);
		c->fd = -1;
	}
}

/* --- sending --- */

int conn_out_begin(struct conn *c, uint16_t type, uint16_t flags, uint32_t id)
{
	if (!c->up || c->broken)
		return -ENOTCONN;
	return proto_begin(&c->out, type, flags, id);
}

void conn_out_end(struct conn *c, int r)
{
	if (r == -ENOTCONN)
		return;
	if (r == 0)
		r = proto_end(&c->out);
	if (r < 0) {
		proto_abort(&c->out);
		sys_log("cannot queue a frame: %s", strerror(-r));
		c->broken = true;
		return;
	}
	update_throttle(c);
}

void conn_send_raw(struct conn *c, uint16_t type, uint16_t flags, uint32_t id, const void *p,
		   size_t n)
{
	int r = conn_out_begin(c, type, flags, id);
	if (r == 0)
		r = pbuf_append(&c->out, p, n);
	conn_out_end(c, r);
}

void conn_send_ok(struct conn *c, uint32_t id)
{
	conn_out_end(c, conn_out_begin(c, P_OK, 0, id));
}

void conn_send_error(struct conn *c, uint32_t id, int err, const char *fmt, ...)
{
	char msg[PROTO_MAX_STR + 1];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	int r = conn_out_begin(c, P_ERROR, 0, id);
	if (r == 0)
		r = proto_put_u32(&c->out, A_ERRNO, (uint32_t)err);
	if (r == 0)
		r = proto_put_str(&c->out, A_MESSAGE, msg);
	conn_out_end(c, r);
}

void conn_send_attr_error(struct conn *c, uint32_t id, int r, const char *what)
{
	if (r == -ENOENT)
		conn_send_error(c, id, EINVAL, "missing attribute '%s'", what);
	else if (r == -ENAMETOOLONG)
		conn_send_error(c, id, ENAMETOOLONG, "attribute '%s' is too long", what);
	else if (r == -EINVAL)
		conn_send_error(c, id, EINVAL, "attribute '%s' holds a NUL byte", what);
	else
		conn_send_error(c, id, EPROTO, "attribute '%s' has the wrong size", what);
}

void conn_flush(struct conn *c)
{
	while (c->up && !c->broken && !c->hup && conn_pending(c) > 0) {
		ssize_t n = write(c->fd, c->out.data + c->out_head, conn_pending(c));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				c->broken = true;
			break;
		}
		c->out_head += (size_t)n;
	}
	if (c->out_head == c->out.len) {
		c->out.len = c->out.mark = 0;
		c->out_head = 0;
	} else if (c->out_head > OUT_LOW && c->out_head > conn_pending(c)) {
		/* Compact rarely: the queue can hold megabytes and the port takes
		 * 32 KiB per write, so consuming on every write would be quadratic. */
		pbuf_consume(&c->out, c->out_head);
		c->out.mark = c->out.len;
		c->out_head = 0;
	}
	update_throttle(c);
}

int conn_flush_wait(struct conn *c, int timeout_ms)
{
	int64_t end = clock_ms() + timeout_ms;
	while (c->up && !c->broken && conn_pending(c) > 0) {
		int64_t left = end - clock_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = c->fd, .events = POLLOUT};
		if (poll(&p, 1, (int)left) < 0 && errno != EINTR)
			return -errno;
		if (p.revents & (POLLHUP | POLLERR | POLLNVAL))
			return -EPIPE;
		conn_flush(c);
		if (c->hup)
			return -EPIPE; /* paused (conn_hangup): only the loop's probe resumes it */
	}
	return c->broken ? -EPIPE : 0;
}

/* --- requests handled here --- */

static void req_hello(struct conn *c, const struct proto_frame *f)
{
	uint32_t v;
	int r = proto_get_u32(f, A_VERSION, &v);
	if (r == -EPROTO) {
		conn_send_attr_error(c, f->id, r, "version");
		return;
	}
	/* A hello starts a session: whatever the previous host left open (it may
	 * have gone and come back within one reconnect tick) ends silently. */
	for (int i = c->nops - 1; i >= 0; i--)
		conn_op_close(c, c->ops[i]);
	/* So does what it queued and this host never asked for, a half-written
	 * frame included: the host skips what comes before this answer. */
	c->out.len = c->out.mark = c->out_head = 0;
	c->throttled = false;
	r = conn_out_begin(c, P_OK, 0, f->id);
	if (r == 0)
		r = proto_put_u32(&c->out, A_VERSION, PROTO_VERSION);
	if (r == 0)
		r = proto_put_str(&c->out, A_AGENT, AGENT_VERSION);
	if (r == 0 && agent.ready_ns)
		r = proto_put_u64(&c->out, A_BOOT_NS, agent.boot_ns);
	if (r == 0 && agent.ready_ns)
		r = proto_put_u64(&c->out, A_READY_NS, agent.ready_ns);
	conn_out_end(c, r);
}

static void req_ping(struct conn *c, const struct proto_frame *f)
{
	conn_send_ok(c, f->id);
}

static void req_cancel(struct conn *c, const struct proto_frame *f)
{
	uint32_t target;
	int r = proto_get_u32(f, A_TARGET, &target);
	if (r < 0) {
		conn_send_attr_error(c, f->id, r, "target");
		return;
	}
	struct conn_op *op = target ? conn_op_find(c, target) : NULL;
	if (op) {
		if (op->kind == OP_CODE)
			code_cancel(op);
		conn_send_error(c, op->id, ECANCELED, "operation cancelled");
		conn_op_close(c, op);
	}
	/* An unknown target is not an error: it may have just ended. */
	conn_send_ok(c, f->id);
}

typedef void req_fn(struct conn *c, const struct proto_frame *f);

static req_fn *const requests[] = {
    [P_HELLO] = req_hello,     [P_PING] = req_ping,	    [P_EXEC] = exec_run,
    [P_ATTACH] = exec_attach,  [P_WAIT] = exec_wait,	    [P_SIGNAL] = exec_signal,
    [P_PS] = exec_ps,	       [P_FWRITE] = xfer_fwrite,    [P_FREAD] = xfer_fread,
    [P_STAT] = files_stat,     [P_LIST] = files_list,	    [P_MKDIR] = files_mkdir,
    [P_REMOVE] = files_remove, [P_RENAME] = files_rename,   [P_SETTIME] = sys_settime,
    [P_ENTROPY] = sys_entropy, [P_POWEROFF] = sys_poweroff, [P_CANCEL] = req_cancel,
    [P_RESTORED] = sys_restored, [P_CODE] = code_run,	    [P_CTX_CREATE] = code_ctx_create,
    [P_CTX_LIST] = code_ctx_list, [P_CTX_RESTART] = code_ctx_restart,
    [P_CTX_DELETE] = code_ctx_delete, [P_RESIZE] = exec_resize,
    [P_WATCH] = watch_start,	      [P_STATS] = sys_stats,	  [P_TRUST] = sys_trust,
};

static void on_data(struct conn *c, const struct proto_frame *f)
{
	struct conn_op *op = conn_op_find(c, f->id);
	/* Data for an operation that is gone may race its end: ignore it. */
	if (!op)
		return;
	bool eof = f->flags & PF_EOF;
	switch (op->kind) {
	case OP_EXEC:
	case OP_ATTACH:
		proc_stdin(op->proc, f->payload, f->len, eof);
		op->in_unacked += f->len;
		conn_stdin_credit(c);
		break;
	case OP_FWRITE:
		xfer_fwrite_data(c, op, f);
		break;
	default:
		break;
	}
}

/* The host consumed output of an operation: it may send more. */
static void on_credit(struct conn *c, const struct proto_frame *f)
{
	struct conn_op *op = conn_op_find(c, f->id);
	uint32_t n;
	if (!op || proto_check_attrs(f) < 0 || proto_get_u32(f, A_CREDIT, &n) < 0)
		return; /* ended meanwhile, or nonsense: nothing to credit */
	/* Bounded, so a confused host cannot wrap the counter. */
	op->credit += n;
	if (op->credit > (int64_t)PROTO_MAX_WINDOW * 4)
		op->credit = (int64_t)PROTO_MAX_WINDOW * 4;
}

static void dispatch(struct conn *c, const struct proto_frame *f)
{
	if (f->type == P_DATA) {
		on_data(c, f);
		return;
	}
	if (f->type == P_CREDIT) {
		on_credit(c, f);
		return;
	}
	/* Id 0 belongs to notices; a request on it has nowhere to be answered. */
	if (f->id == 0)
		return;
	req_fn *fn = f->type < sizeof(requests) / sizeof(requests[0]) ? requests[f->type] : NULL;
	if (!fn) {
		conn_send_error(c, f->id, ENOSYS, "unknown request type %u", f->type);
		return;
	}
	if (conn_op_find(c, f->id)) {
		conn_send_error(c, f->id, EBUSY, "operation %u is already live", f->id);
		return;
	}
	if (proto_check_attrs(f) < 0) {
		conn_send_error(c, f->id, EPROTO, "malformed attribute list in '%s'",
				proto_type_name(f->type));
		return;
	}
	fn(c, f);
}

/* The virtio port's hangup is not ordered with its data: the guest learns of
 * it from the control queue, while the new host's first frames come in on the
 * port's own queue, before the news or after it. So a hangup of the port only
 * pauses the channel, and P_HELLO alone ends a session; what was half read
 * when the host left is settled by the bytes after it (cut_settle). */
void conn_hangup(struct conn *c)
{
	if (c->is_socket) {
		c->broken = true;
		return;
	}
	c->hup = true;
	c->in_cut = c->in.len;
}

/* The first bytes after a hangup that left a frame half read. A new host
 * starts with P_HELLO: the half frame was the old host's, and goes. Anything
 * else (fewer bytes than a header too) is the rest of a frame the new host
 * began before the news of the hangup came. */
static void cut_settle(struct conn *c)
{
	const uint8_t *h = c->in.data + c->in_cut; /* len u32, type u16, flags u16, id u32 */
	if (c->in.len - c->in_cut >= PROTO_HDR_SIZE && h[4] == P_HELLO && !(h[5] | h[6] | h[7]) &&
	    !(h[2] | h[3]) && (h[0] | h[1] << 8) <= 256)
		pbuf_consume(&c->in, c->in_cut);
	c->in_cut = 0;
}

void conn_read(struct conn *c)
{
	/* A bounded turn (4 MiB), so a long upload does not starve the pipes. */
	for (int turn = 0; turn < 16 && conn_want_read(c); turn++) {
		if (pbuf_reserve(&c->in, READ_CHUNK) < 0) {
			c->broken = true;
			return;
		}
		ssize_t n = read(c->fd, c->in.data + c->in.len, READ_CHUNK);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				c->broken = true;
			return;
		}
		if (n == 0) {
			conn_hangup(c);
			return;
		}
		c->in.len += (size_t)n;
		if (c->in_cut)
			cut_settle(c);
		size_t off = 0;
		while (c->up && !c->broken) {
			struct proto_frame f;
			ssize_t m = proto_parse(c->in.data + off, c->in.len - off, &f);
			if (m < 0) {
				sys_log("bad frame from host: %s", strerror((int)-m));
				c->broken = true;
				return;
			}
			if (m == 0)
				break;
			dispatch(c, &f);
			off += (size_t)m;
		}
		if (c->broken)
			return;
		pbuf_consume(&c->in, off);
		/* A handler may want the loop (poweroff): stop reading. */
		if (agent.shutdown != SHUT_NONE)
			return;
	}
}
