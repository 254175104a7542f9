/*
 * fuzz_agentc: libFuzzer target for the host side of the agent protocol.
 * The input is what a hostile agent writes to its end of a socketpair; the
 * host end is a real agentc with operations in flight, some with recording
 * callbacks that start and cancel others from inside, some owned by the
 * sandbox code (sbx_op.c, its frame decoding) on a fake sandbox. Checks:
 * every operation gets exactly one terminal callback (ECONNRESET at close
 * included), none after it, aborted requests never, and what the host
 * writes is a stream of well-formed frames; the sandbox's counts balance
 * and what its operations gathered (listings, NDJSON) is valid JSON.
 * Input: raw agent bytes. Odd-sized inputs end with the agent closing its
 * end, even-sized ones with the host closing while operations are pending.
 * Operation ids are fixed (LLVMFuzzerTestOneInput), so the seeds from
 * tests/fuzz/mkcorpus.py can answer them.
 */
#include "common/proto.h"
#include "common/utf8.h"
#include "daemon/sandbox/sbx_impl.h"
#include "runner/agentc.h"
#include "runner/vm.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_RECS    16
#define MAX_FROM_CB 6 /* operations callbacks may start, so a close ends */

#define BUG(...)                                                                                   \
	do {                                                                                       \
		fprintf(stderr, "fuzz_agentc: " __VA_ARGS__);                                      \
		fputc('\n', stderr);                                                               \
		abort();                                                                           \
	} while (0)

/* The agent connection sbx_op.c reaches through vm_agent(s->vm): this
 * target links no VM runner, only this stand-in. */
static struct agentc *cur_agent;

struct agentc *vm_agent(struct vm *vm)
{
	(void)vm;
	return cur_agent;
}

enum rec_kind {
	R_PLAIN,  /* records only */
	R_SPAWN,  /* on P_STARTED or P_ENTRY: starts another R_PLAIN operation */
	R_CANCEL, /* on its first frame: cancels the R_PLAIN op 1, as sop_free does */
	R_ABORT,  /* on its first frame: begins a request and aborts it */
};

struct rec {
	enum rec_kind kind;
	uint32_t id;
	int frames, terminals, acted;
};

static struct {
	struct agentc *c;
	struct rec recs[MAX_RECS];
	int nrecs, from_cb;
	int closing; /* agentc_close runs: callbacks must not start more */
	uint32_t cancel_target;
} g;

static void rec_cb(void *arg, const struct proto_frame *f);

static struct rec *start_rec(enum rec_kind kind, uint16_t type)
{
	if (g.nrecs == MAX_RECS)
		return NULL;
	struct rec *r = &g.recs[g.nrecs];
	*r = (struct rec){.kind = kind};
	struct pbuf *b = agentc_begin(g.c, type, rec_cb, r, &r->id);
	if (!b)
		return NULL;
	if (proto_put_str(b, A_PATH, "/work") < 0 || agentc_end(g.c) < 0)
		BUG("cannot build a small request");
	g.nrecs++;
	return r;
}

static void never_cb(void *arg, const struct proto_frame *f)
{
	(void)arg;
	BUG("callback of an aborted request called (frame type %u id %u)", f->type, f->id);
}

static void notice_cb(void *arg, const struct proto_frame *f)
{
	(void)arg;
	if (f->id != 0 || f->type != P_NOTICE)
		BUG("notice callback got type %u id %u", f->type, f->id);
}

static int is_terminal(uint16_t t)
{
	return t == P_OK || t == P_ERROR || t == P_EXIT;
}

static void rec_cb(void *arg, const struct proto_frame *f)
{
	struct rec *r = arg;
	if (r->terminals)
		BUG("op %u: frame type %u after its terminal frame", r->id, f->type);
	if (f->id != r->id && f->id != 0)
		BUG("op %u: got a frame for op %u", r->id, f->id);
	r->frames++;
	if (is_terminal(f->type)) {
		r->terminals++;
		return;
	}
	if (g.closing || r->acted || g.from_cb >= MAX_FROM_CB)
		return;
	switch (r->kind) {
	case R_SPAWN:
		if (f->type == P_STARTED || f->type == P_ENTRY) {
			r->acted = 1;
			g.from_cb++;
			start_rec(R_PLAIN, P_WAIT);
		}
		break;
	case R_CANCEL: {
		r->acted = 1;
		g.from_cb++;
		struct pbuf *b = agentc_begin(g.c, P_CANCEL, NULL, NULL, NULL);
		if (b && proto_put_u32(b, A_TARGET, g.cancel_target) == 0)
			agentc_end(g.c);
		else if (b)
			agentc_abort(g.c);
		break;
	}
	case R_ABORT: {
		r->acted = 1;
		g.from_cb++;
		if (agentc_begin(g.c, P_MKDIR, never_cb, NULL, NULL))
			agentc_abort(g.c);
		break;
	}
	case R_PLAIN:
		break;
	}
}

/* Checks what the host wrote so far: whole frames, request types only. */
static void check_host_output(struct pbuf *seen, int final)
{
	size_t off = 0;
	struct proto_frame f;
	ssize_t n;
	while ((n = proto_parse(seen->data + off, seen->len - off, &f)) > 0) {
		if (f.id == 0 ||
		    (f.type > P_CANCEL && f.type != P_CODE && f.type != P_WATCH && f.type != P_DATA &&
		     f.type != P_CREDIT))
			BUG("host sent frame type %u id %u", f.type, f.id);
		if (f.type != P_DATA && proto_check_attrs(&f) < 0)
			BUG("host sent a malformed attribute list (type %u)", f.type);
		off += (size_t)n;
	}
	if (n < 0)
		BUG("host sent an unparsable frame (%zd)", n);
	pbuf_consume(seen, off);
	if (final && seen->len)
		BUG("host left %zu bytes of a partial frame", seen->len);
}

static void drain_peer(int peer, struct pbuf *seen)
{
	for (;;) {
		if (pbuf_reserve(seen, 64 * 1024) < 0)
			BUG("out of memory");
		ssize_t n = read(peer, seen->data + seen->len, seen->cap - seen->len);
		if (n <= 0)
			break;
		seen->len += (size_t)n;
	}
	check_host_output(seen, 0);
}

/* A stream's chunk: output that is whole UTF-8 text, an event that is a
 * checked result or error. */
static void check_chunk(const struct sop_chunk *c, const char *buf)
{
	static char again[3 * 4096 + 1];
	/* Sanitizing is the identity on UTF-8 only; a terminal's bytes are
	 * raw (base64 in their lines). */
	if (c->kind == SOP_CHUNK_OUT && !c->pty && c->len <= 4096 &&
	    (utf8_sanitize((const uint8_t *)buf, c->len, again) != c->len ||
	     memcmp(again, buf, c->len)))
		BUG("an output chunk is not UTF-8: %.*s", (int)c->len, buf);
	if (c->kind == SOP_CHUNK_EVENT && !c->event)
		BUG("an event chunk without its event");
	if (c->kind == SOP_CHUNK_FSEVENT &&
	    (c->fs_op < FS_CREATE || c->fs_op > FS_OVERFLOW || buf[0] != '/' || strlen(buf) != c->len))
		BUG("a file system event that is not one: op %d, %zu bytes", c->fs_op, c->len);
	if (c->kind == SOP_CHUNK_EVENT && !c->event->is_error)
		for (int i = SBX_PNG; i < SBX_NFIELDS; i++)
			if (c->event->field[i] &&
			    strspn(c->event->field[i], "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
						       "0123456789+/=") != strlen(c->event->field[i]))
				BUG("a binary field that is not base64 passed");
}

/* A fake running sandbox around the agent connection, as sbx.c sets up. */
static void fake_sbx(struct sbx *s)
{
	memset(s, 0, sizeof(*s));
	snprintf(s->id, sizeof(s->id), "sbx_fuzz");
	pthread_mutex_init(&s->mu, NULL);
	pthread_condattr_t ca; /* sbx_read's deadlines are on CLOCK_MONOTONIC */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	s->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->wakefd < 0)
		BUG("eventfd: %s", strerror(errno));
	s->vm = (struct vm *)s; /* never dereferenced: vm_agent above */
	s->running = 1;
	s->refs = 1;
}

static struct sop *start_sop(struct sbx *s, enum sop_mode mode, uint16_t type)
{
	struct sop *op = sop_new(mode, 64);
	if (!op || (type == P_CODE && sop_code_begin(op, "default", "python") < 0))
		BUG("out of memory");
	int err = 0;
	struct pbuf *b = sbx_begin(s, type, op, &err);
	if (!b)
		BUG("sbx_begin failed on a running fake sandbox: %s", strerror(-err));
	if (proto_put_str(b, A_PATH, "/work/x") < 0 ||
	    (type == P_LIST && sop_set_base(op, "/work") < 0)) {
		sbx_abort(s, op);
		BUG("cannot build a small request");
	}
	if (sbx_end(s, op) < 0)
		BUG("sbx_end failed");
	return op;
}

/* What an HTTP reader does: take what a streaming operation has. */
static void read_sops(struct sbx *s, struct sop **sops, int n)
{
	char buf[4096];
	for (int i = 0; i < n; i++) {
		struct sop *op = sops[i];
		if (!op || (op->mode != SOP_QUEUE && op->mode != SOP_NDJSON))
			continue;
		if (op->mode == SOP_QUEUE) {
			while (sbx_read(s, op, buf, sizeof(buf), 0) > 0)
				;
			continue;
		}
		struct sop_chunk c;
		while (sop_next(s, op, &c, buf, sizeof(buf), 0) > 0)
			check_chunk(&c, buf);
	}
}

/* What the handlers do with an ended operation's gatherings. */
static void check_results(struct sop *op)
{
	size_t bytes = 0;
	for (size_t i = 0, n = sop_nitems(op); i < n; i++) {
		const struct sbx_item *it = sop_item(op, i);
		if (!it)
			BUG("op %u: item %zu of %zu is missing", op->id, i, n);
		/* every string there, whatever the guest sent */
		if (it->kind == SBX_ITEM_PROC)
			bytes += strlen(it->proc.cmd);
		else if (it->kind == SBX_ITEM_CTX)
			bytes += strlen(it->ctx.id) + strlen(it->ctx.language) + strlen(it->ctx.user) +
				 strlen(it->ctx.cwd);
		else if (it->file.path)
			bytes += strlen(it->file.path) + strlen(it->file.name) +
				 (it->file.target ? strlen(it->file.target) : 0);
	}
	if (bytes > SBX_MAX_ITEMS_BYTES)
		BUG("op %u: items hold %zu bytes, over the cap", op->id, bytes);
	const struct sbx_item *e = sop_entry(op);
	if (e && e->kind == SBX_ITEM_FILE && e->file.path && !strstr(e->file.path, e->file.name))
		BUG("op %u: the entry's name is not in its path", op->id);
	const struct sbx_code_info *ci = sop_code(op);
	if (op->type == P_CODE && op->done && !ci)
		BUG("op %u: a code call that ended says nothing of how", op->id);
	for (size_t i = 0; ci && i < ci->nevents; i++)
		if (!sop_code_event(op, i))
			BUG("op %u: code event %zu of %zu is missing", op->id, i, ci->nevents);
	for (int stream = 0; stream < 2; stream++) {
		int cut = 0;
		const struct pbuf *b = sop_output(op, stream, &cut);
		if (op->mode == SOP_COLLECT && b->len > op->cap)
			BUG("op %u: kept %zu bytes of stream %d, over its cap %zu", op->id, b->len,
			    stream, op->cap);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
		BUG("socketpair: %s", strerror(errno));
	memset(&g, 0, sizeof(g));
	if (agentc_new(sv[0], &g.c) < 0)
		BUG("agentc_new failed");
	cur_agent = g.c;
	agentc_on_notice(g.c, notice_cb, NULL);
	struct sbx s;
	fake_sbx(&s);

	/* Operation ids are handed out in order, so the seeds can name them:
	 * 1 plain exec, 2 spawning exec, 3 cancelling stat (cancels 1),
	 * 4 aborting list, 5..10 sandbox operations, 11 fire-and-forget,
	 * 12 an operation abandoned at once, 13 its P_CANCEL, 14 and 15 code
	 * calls, 16 a watch (below). */
	start_rec(R_PLAIN, P_EXEC);
	start_rec(R_SPAWN, P_EXEC);
	g.cancel_target = g.recs[0].id;
	start_rec(R_CANCEL, P_STAT);
	start_rec(R_ABORT, P_LIST);
	struct sop *sops[9] = {
	    start_sop(&s, SOP_COLLECT, P_EXEC),	 start_sop(&s, SOP_QUEUE, P_FREAD),
	    start_sop(&s, SOP_NDJSON, P_ATTACH), start_sop(&s, SOP_DISCARD, P_STAT),
	    start_sop(&s, SOP_DISCARD, P_LIST),	 start_sop(&s, SOP_DISCARD, P_PS),
	};
	int nsops = 9;
	struct pbuf *b = agentc_begin(g.c, P_SETTIME, NULL, NULL, NULL);
	if (!b || proto_put_u64(b, A_TIME_NS, 1) < 0 || agentc_end(g.c) < 0)
		BUG("cannot queue a fire-and-forget request");
	sop_free(&s, start_sop(&s, SOP_COLLECT, P_EXEC)); /* the client left */
	/* Stdin for the attach: raw bytes on a live operation. */
	if (sbx_data(&s, sops[2], PF_EOF, "input\n", 6, 0) < 0)
		BUG("sbx_data on a live operation failed");
	/* 14 and 15: code calls, answered whole and streamed. */
	sops[6] = start_sop(&s, SOP_COLLECT, P_CODE);
	sops[7] = start_sop(&s, SOP_NDJSON, P_CODE);
	sops[8] = start_sop(&s, SOP_NDJSON, P_WATCH);

	/* Odd-sized inputs end with the agent closing its end (EOF); even ones
	 * with the host closing the connection while operations are pending. */
	int agent_closes = size & 1;
	struct pbuf seen = {0};
	size_t off = 0;
	int dead = 0, eof_sent = 0, abandoned_half = 0;
	for (int rounds = 0; !dead; rounds++) {
		if (rounds > 100000)
			BUG("no progress after %d rounds", rounds);
		if (off < size) {
			ssize_t n = send(sv[1], data + off, size - off, MSG_NOSIGNAL);
			if (n > 0)
				off += (size_t)n;
			else if (n < 0 && errno != EAGAIN)
				break; /* the host closed: it found the stream bad */
		} else if (agent_closes && !eof_sent) {
			shutdown(sv[1], SHUT_WR);
			eof_sent = 1;
		}
		/* Halfway through, a reader leaves: its operation is abandoned
		 * (cancelled, freed by the frame handler when it ends). */
		if (!abandoned_half && off >= size / 2) {
			abandoned_half = 1;
			sop_free(&s, sops[1]);
			sops[1] = NULL;
		}
		drain_peer(sv[1], &seen);
		struct pollfd p = {.fd = agentc_fd(g.c), .events = agentc_events(g.c)};
		if (poll(&p, 1, 0) < 0)
			BUG("poll: %s", strerror(errno));
		pthread_mutex_lock(&s.mu);
		int r = p.revents ? agentc_io(g.c, p.revents) : 0;
		pthread_cond_broadcast(&s.cv);
		pthread_mutex_unlock(&s.mu);
		if (r < 0) {
			dead = 1;
			break;
		}
		read_sops(&s, sops, nsops);
		if (off == size && (!agent_closes || eof_sent)) {
			int pending = 0;
			if (ioctl(agentc_fd(g.c), FIONREAD, &pending) < 0)
				BUG("FIONREAD: %s", strerror(errno));
			if (!pending && !agent_closes && !agentc_queued(g.c))
				break; /* all the agent said has been read */
		}
	}
	drain_peer(sv[1], &seen);

	/* As drop_vm does: the sandbox stops, the connection closes under the
	 * lock, and pending operations hear ECONNRESET. */
	pthread_mutex_lock(&s.mu);
	s.running = 0;
	g.closing = 1;
	agentc_close(g.c);
	s.vm = NULL;
	cur_agent = NULL;
	pthread_cond_broadcast(&s.cv);
	pthread_mutex_unlock(&s.mu);
	check_host_output(&seen, !dead);

	for (int i = 0; i < g.nrecs; i++)
		if (g.recs[i].terminals != 1)
			BUG("op %u (kind %d) got %d terminal callbacks", g.recs[i].id,
			    g.recs[i].kind, g.recs[i].terminals);
	read_sops(&s, sops, nsops);
	for (int i = 0; i < nsops; i++) {
		struct sop *op = sops[i];
		if (!op)
			continue;
		struct sop_state st;
		if (sbx_wait(&s, op, 0, 0, &st) < 0 || !st.end)
			BUG("sandbox op %u not ended after close", op->id);
		check_results(op);
		sop_free(&s, op);
	}
	if (s.nops != 0 || s.nstreams != 0 || s.nctls != 0 || atomic_load(&s.busy) != 0)
		BUG("sandbox counts unbalanced after close: ops %d streams %d ctls %zu busy %d",
		    s.nops, s.nstreams, s.nctls, atomic_load(&s.busy));

	pbuf_release(&seen);
	close(sv[1]);
	close(s.wakefd);
	free(s.ctls);
	pthread_mutex_destroy(&s.mu);
	pthread_cond_destroy(&s.cv);
	return 0;
}
