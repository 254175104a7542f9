/*
 * agentc: operation table, frame dispatch and the non-blocking socket for
 * one agent connection. The agent is hostile: its frames are parsed by the
 * shared codec and a malformed one ends the connection, not the host.
 */
#include "runner/agentc.h"

#include "common/unixsock.h"
#include "common/clock.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

struct op {
	uint32_t id;
	agentc_cb cb;
	void *arg;
	int manual;       /* the owner returns credit itself */
	uint32_t unacked; /* auto credit: consumed, not yet returned */
};

/* Auto credit returns consumed output in steps well under the smallest
 * window, so no window stalls for want of a return. */
#define AUTO_CREDIT_STEP (PROTO_MIN_WINDOW / 2)

struct agentc {
	int fd;
	struct pbuf in, out;
	struct op *ops;
	size_t nops, capops;
	uint32_t next_id;
	uint32_t building; /* id of the request between begin and end */
	agentc_cb notice_cb;
	void *notice_arg;
	char version[64];
	uint64_t boot_ns, ready_ns;
	uint32_t hello_id; /* non-zero until its answer came: skip to it */
	int hello_done, hello_err; /* P_HELLO answered: 0 ok, else errno */
	char hello_msg[256];
	int dead;
};

static struct op *find_op(struct agentc *c, uint32_t id)
{
	for (size_t i = 0; i < c->nops; i++)
		if (c->ops[i].id == id)
			return &c->ops[i];
	return NULL;
}

static void remove_op(struct agentc *c, struct op *o)
{
	*o = c->ops[--c->nops];
}

static int is_terminal(uint16_t type)
{
	return type == P_OK || type == P_ERROR || type == P_EXIT;
}

/* Tells every pending operation that the connection is gone, with a P_ERROR
 * of ours: id 0, which no frame of the agent's to an operation has, so
 * callers can tell it from the agent's. */
static void fail_all(struct agentc *c, int err)
{
	struct pbuf b = { 0 };
	struct proto_frame f;
	if (proto_begin(&b, P_ERROR, 0, 0) || proto_put_u32(&b, A_ERRNO, (uint32_t)err) ||
	    proto_put_str(&b, A_MESSAGE, "agent connection lost") || proto_end(&b) ||
	    proto_parse(b.data, b.len, &f) <= 0) {
		c->nops = 0; /* out of memory: callers see no answer, not a crash */
		pbuf_release(&b);
		return;
	}
	while (c->nops) {
		struct op o = c->ops[--c->nops];
		if (o.cb)
			o.cb(o.arg, &f);
	}
	pbuf_release(&b);
}

static void dispatch(struct agentc *c, const struct proto_frame *f)
{
	if (f->id == 0) {
		if (f->type == P_NOTICE && c->notice_cb)
			c->notice_cb(c->notice_arg, f);
		return;
	}
	struct op *o = find_op(c, f->id);
	if (!o)
		return; /* a late frame for a cancelled operation */
	agentc_cb cb = o->cb;
	void *arg = o->arg;
	if (!o->manual && (f->type == P_STDOUT || f->type == P_STDERR || f->type == P_DATA ||
			   f->type == P_EVENT)) {
		o->unacked += proto_cost(f->len);
		if (o->unacked >= AUTO_CREDIT_STEP && agentc_credit(c, o->id, o->unacked) == 0)
			o->unacked = 0;
	}
	/* Remove before calling: the callback may start new operations. */
	if (is_terminal(f->type))
		remove_op(c, o);
	if (cb)
		cb(arg, f);
}

static int flush_out(struct agentc *c)
{
	while (c->out.len) {
		ssize_t n = send(c->fd, c->out.data, c->out.len, MSG_NOSIGNAL);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		pbuf_consume(&c->out, (size_t)n);
	}
	return 0;
}

/* Reads at most READ_TURN bytes per call: a guest that floods the channel
 * must not keep its owner (and the owner's lock) here. The descriptor stays
 * readable; the next poll comes back for the rest. */
#define READ_TURN (16 * 64 * 1024)

/* A new connection may first read what the agent queued for an earlier host
 * (its frames, a half frame QEMU kept from the old socket): nothing before
 * the answer to our P_HELLO is ours. That answer is found by its header:
 * P_OK or P_ERROR, no flags, the hello's id (random per connection). 1 when
 * the buffer now starts with it, 0 when it has not come yet. */
static int skip_to_hello(struct agentc *c)
{
	/* The header is length u32, type u16, flags u16, id u32: the key is
	 * flags and id, and the type sits just before it. */
	const size_t at = 6;
	uint8_t key[6] = { 0, 0 };
	for (int i = 0; i < 4; i++)
		key[2 + i] = (uint8_t)(c->hello_id >> (8 * i));
	const uint8_t *p = c->in.data + at, *end = c->in.data + c->in.len;
	while (p < end && (p = memmem(p, (size_t)(end - p), key, sizeof(key)))) {
		uint16_t type = (uint16_t)(p[-2] | p[-1] << 8);
		if (type == P_OK || type == P_ERROR) {
			pbuf_consume(&c->in, (size_t)(p - at - c->in.data));
			c->hello_id = 0;
			return 1;
		}
		p++;
	}
	/* Keep what could be the start of the answer. */
	if (c->in.len >= PROTO_HDR_SIZE)
		pbuf_consume(&c->in, c->in.len - (PROTO_HDR_SIZE - 1));
	return 0;
}

static int read_in(struct agentc *c)
{
	for (size_t turn = 0; turn < READ_TURN; turn += 64 * 1024) {
		int r = pbuf_reserve(&c->in, 64 * 1024);
		if (r < 0)
			return r;
		ssize_t n = read(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		c->in.len += (size_t)n;
		if (c->hello_id && !skip_to_hello(c))
			continue;
		size_t off = 0;
		struct proto_frame f;
		ssize_t used;
		while ((used = proto_parse(c->in.data + off, c->in.len - off, &f)) > 0) {
			off += (size_t)used;
			dispatch(c, &f);
		}
		pbuf_consume(&c->in, off);
		if (used < 0)
			return (int)used;
	}
	return 0;
}

int agentc_io(struct agentc *c, short revents)
{
	if (c->dead)
		return -ECONNRESET;
	int r = 0;
	if (revents & (POLLIN | POLLHUP | POLLERR))
		r = read_in(c);
	if (r == 0)
		r = flush_out(c);
	if (r < 0) {
		c->dead = 1;
		fail_all(c, -r == EPROTO || -r == EMSGSIZE ? EPROTO : ECONNRESET);
	}
	return r;
}

int agentc_fd(const struct agentc *c)
{
	return c->fd;
}

short agentc_events(const struct agentc *c)
{
	return POLLIN | (c->out.len ? POLLOUT : 0);
}

size_t agentc_queued(const struct agentc *c)
{
	return c->out.len;
}

struct pbuf *agentc_begin(struct agentc *c, uint16_t type, agentc_cb cb, void *arg, uint32_t *id)
{
	if (c->nops == c->capops) {
		size_t cap = c->capops ? c->capops * 2 : 16;
		struct op *ops = realloc(c->ops, cap * sizeof(*ops));
		if (!ops)
			return NULL;
		c->ops = ops;
		c->capops = cap;
	}
	do
		c->next_id++;
	while (c->next_id == 0 || find_op(c, c->next_id));
	if (proto_begin(&c->out, type, 0, c->next_id) < 0)
		return NULL;
	c->ops[c->nops++] = (struct op){ .id = c->next_id, .cb = cb, .arg = arg };
	c->building = c->next_id;
	if (id)
		*id = c->next_id;
	return &c->out;
}

int agentc_end(struct agentc *c)
{
	int r = proto_end(&c->out);
	if (r < 0) {
		struct op *o = find_op(c, c->building);
		if (o)
			remove_op(c, o);
	}
	c->building = 0;
	return r;
}

void agentc_abort(struct agentc *c)
{
	proto_abort(&c->out);
	struct op *o = find_op(c, c->building);
	if (o)
		remove_op(c, o);
	c->building = 0;
}

int agentc_data(struct agentc *c, uint32_t id, uint16_t flags, const void *p, size_t n)
{
	do {
		size_t chunk = n > PROTO_DATA_CHUNK ? PROTO_DATA_CHUNK : n;
		uint16_t fl = chunk == n ? flags : 0;
		int r = proto_raw(&c->out, P_DATA, fl, id, p, chunk);
		if (r < 0)
			return r;
		p = (const uint8_t *)p + chunk;
		n -= chunk;
	} while (n);
	return 0;
}

void agentc_manual_credit(struct agentc *c, uint32_t id)
{
	struct op *o = find_op(c, id);
	if (o)
		o->manual = 1;
}

void agentc_forget(struct agentc *c, uint32_t id)
{
	struct op *o = find_op(c, id);
	if (o)
		remove_op(c, o);
}

int agentc_credit(struct agentc *c, uint32_t id, uint32_t n)
{
	int r = proto_begin(&c->out, P_CREDIT, 0, id);
	if (r == 0)
		r = proto_put_u32(&c->out, A_CREDIT, n);
	if (r == 0)
		r = proto_end(&c->out);
	if (r < 0)
		proto_abort(&c->out);
	return r;
}

int agentc_ready(const struct agentc *c)
{
	return !c->dead && c->hello_done && c->hello_err == 0;
}

void agentc_on_notice(struct agentc *c, agentc_cb cb, void *arg)
{
	c->notice_cb = cb;
	c->notice_arg = arg;
}

const char *agentc_version(const struct agentc *c)
{
	return c->version;
}

void agentc_boot_times(const struct agentc *c, uint64_t *start_ns, uint64_t *ready_ns)
{
	*start_ns = c->boot_ns;
	*ready_ns = c->ready_ns;
}

int agentc_wait(struct agentc *c, const int *done, int timeout_ms)
{
	int64_t deadline = clock_ms() + timeout_ms;
	while (!*done) {
		int64_t left = deadline - clock_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = c->fd, .events = agentc_events(c) };
		int r = poll(&p, 1, (int)left);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r > 0 && (r = agentc_io(c, p.revents)) < 0)
			return r;
	}
	return 0;
}

/* The answer to P_HELLO: the agent's version and boot times, or why not.
 * A wrong protocol version kills the connection. */
static void hello_cb(void *arg, const struct proto_frame *f)
{
	struct agentc *c = arg;
	uint32_t v = 0, e = EPROTO;
	c->hello_done = 1;
	if (f->type != P_OK || proto_check_attrs(f) < 0) {
		proto_get_u32(f, A_ERRNO, &e);
		c->hello_err = e ? (int)e : EPROTO;
		if (proto_get_str(f, A_MESSAGE, c->hello_msg, sizeof(c->hello_msg)) < 0)
			snprintf(c->hello_msg, sizeof(c->hello_msg), "%s", strerror(c->hello_err));
		return;
	}
	if (proto_get_u32(f, A_VERSION, &v) < 0 || v != PROTO_VERSION) {
		c->hello_err = EPROTONOSUPPORT;
		snprintf(c->hello_msg, sizeof(c->hello_msg), "agent speaks protocol %u, not %u", v,
			 PROTO_VERSION);
		c->dead = 1;
		return;
	}
	proto_get_str(f, A_AGENT, c->version, sizeof(c->version));
	proto_get_u64(f, A_BOOT_NS, &c->boot_ns);
	proto_get_u64(f, A_READY_NS, &c->ready_ns);
	c->hello_err = 0;
}

int agentc_open(const char *path, int timeout_ms, struct agentc **out, char *err, size_t errlen)
{
	struct agentc *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	int r = unix_connect(path, timeout_ms);
	if (r < 0) {
		snprintf(err, errlen, "cannot connect to agent socket '%s': %s", path, strerror(-r));
		free(c);
		return r;
	}
	c->fd = r;
	int fl = 1;
	struct pbuf *b = NULL;
	if (ioctl(c->fd, FIONBIO, &fl) < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot make the agent socket non-blocking: %s", strerror(-r));
		goto fail;
	}
	/* Ids start at random, so the old session's frames are not taken for
	 * this one's (skip_to_hello). */
	if (getrandom(&c->next_id, sizeof(c->next_id), GRND_NONBLOCK) != sizeof(c->next_id))
		c->next_id = (uint32_t)clock_ms() ^ (uint32_t)getpid() << 16;
	/* Queued, not awaited: the agent answers frames in order, so requests
	 * queued behind it wait for the session without us blocking. */
	b = agentc_begin(c, P_HELLO, hello_cb, c, &c->hello_id);
	if (!b || proto_put_u32(b, A_VERSION, PROTO_VERSION) < 0 || agentc_end(c) < 0) {
		r = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	*out = c;
	return 0;
fail:
	agentc_close(c);
	return r;
}

int agentc_connect(const char *path, int timeout_ms, struct agentc **out, char *err, size_t errlen)
{
	int64_t deadline = clock_ms() + timeout_ms;
	struct agentc *c;
	int r = agentc_open(path, timeout_ms, &c, err, errlen);
	if (r < 0)
		return r;
	r = agentc_wait(c, &c->hello_done, (int)(deadline - clock_ms()));
	if (r == 0 && c->hello_err)
		r = -c->hello_err;
	if (r < 0) {
		snprintf(err, errlen, "agent did not answer: %s",
			 c->hello_msg[0] ? c->hello_msg : strerror(-r));
		agentc_close(c);
		return r;
	}
	*out = c;
	return 0;
}

void agentc_close(struct agentc *c)
{
	if (!c)
		return;
	fail_all(c, ECONNRESET);
	if (c->fd >= 0)
		close(c->fd);
	pbuf_release(&c->in);
	pbuf_release(&c->out);
	free(c->ops);
	free(c);
}

/* Without the P_HELLO handshake: for tests and fuzzers that play the agent
 * on the other end of a socketpair. Self-contained on purpose (agentc_new
 * only touches the struct and its own arguments). */
int agentc_new(int fd, struct agentc **out)
{
	if (fd < 0)
		return -EBADF;
	struct agentc *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = fd;
	c->hello_done = 1; /* no session to wait for: ready at once */
	*out = c;
	return 0;
}
