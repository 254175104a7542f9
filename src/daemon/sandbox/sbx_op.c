/*
 * sbx_op: operations on a running sandbox, run from HTTP threads. A request
 * is built under the sandbox lock and handed to the pump; the pump decodes
 * the agent's frames into the struct sop (sop_cb, always locked) and wakes
 * the waiters. Everything the guest sends is charged against a cap: output
 * against the operation's credit window, listings against a byte cap,
 * one-answer requests against a frame count. Also the stdin channels of
 * background processes.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/log.h"
#include "common/utf8.h"
#include "runner/agentc.h"
#include "runner/vm.h"

#include <errno.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NO_REC SIZE_MAX
#define REC_HDR 5 /* SOP_NDJSON record: u8 stream, u32 length */
#define REC_EVENT 2 /* a record's "stream" for a code event: its index, u32 */
/* A record's "stream" for a file system event: u32 credit it cost, u8 op,
 * u8 is_dir, the path's bytes. */
#define REC_FSEVENT 3
#define FS_HDR 6

struct sop *sop_new(enum sop_mode mode, size_t cap)
{
	struct sop *op = calloc(1, sizeof(*op));
	if (!op)
		return NULL;
	op->mode = mode;
	op->cap = cap;
	op->last_rec = NO_REC;
	op->st.exit_code = op->st.signal = -1;
	return op;
}

static void item_release(struct sbx_item *it);

static void sop_destroy(struct sop *op)
{
	if (!op)
		return;
	pbuf_release(&op->out[0]);
	pbuf_release(&op->out[1]);
	for (size_t i = 0; i < op->nitems; i++)
		item_release(&op->items[i]);
	free(op->items);
	if (op->entry)
		item_release(op->entry);
	free(op->entry);
	free(op->base);
	sbx__code_free(op->code);
	free(op);
}

static int is_stream(const struct sop *op)
{
	return op->mode == SOP_QUEUE || op->mode == SOP_NDJSON;
}

static struct agentc *agent_of(struct sbx *s)
{
	return s->vm ? vm_agent(s->vm) : NULL;
}

/* With the sandbox locked: the agent operation is over for us. */
static void op_ended(struct sbx *s, struct sop *op)
{
	if (!op->live)
		return;
	op->live = 0;
	op->done = 1;
	s->nops--;
	if (is_stream(op))
		s->nstreams--;
	if (op->mode != SOP_DISCARD && !op->quiet) {
		atomic_fetch_sub(&s->busy, 1);
		atomic_store(&s->active_ms, clock_ms());
	}
}

static void remove_ctl(struct sbx *s, struct sop *op)
{
	for (size_t i = 0; i < s->nctls; i++) {
		if (s->ctls[i].op == op) {
			s->ctls[i] = s->ctls[--s->nctls];
			return;
		}
	}
}

/* Fire and forget: SIGKILL to a process's group and cgroup. */
static void kill_proc(struct agentc *a, uint32_t proc)
{
	struct pbuf *b = agentc_begin(a, P_SIGNAL, NULL, NULL, NULL);
	if (!b)
		return;
	if (proto_put_u32(b, A_PROC, proc) < 0 || proto_put_u32(b, A_SIGNO, SIGKILL) < 0)
		agentc_abort(a);
	else
		agentc_end(a);
}

static void cancel(struct agentc *a, uint32_t id)
{
	struct pbuf *b = agentc_begin(a, P_CANCEL, NULL, NULL, NULL);
	if (b && proto_put_u32(b, A_TARGET, id) == 0)
		agentc_end(a);
	else if (b)
		agentc_abort(a);
}

/* With the sandbox locked: the owner leaves a live operation to the pump,
 * which frees it when its end comes. A foreground exec nobody waits for
 * is killed, not left running. */
static void abandon_locked(struct sbx *s, struct sop *op)
{
	struct agentc *a = agent_of(s);
	op->abandoned = 1;
	if (!a)
		return;
	if (op->type == P_EXEC && op->mode != SOP_DISCARD) {
		if (op->st.proc)
			kill_proc(a, op->st.proc);
		else
			op->kill_on_start = 1;
	}
	cancel(a, op->id);
}

void sop_free(struct sbx *s, struct sop *op)
{
	if (!op)
		return;
	if (!s) {
		sop_destroy(op);
		return;
	}
	pthread_mutex_lock(&s->mu);
	if (!op->live) {
		pthread_mutex_unlock(&s->mu);
		sop_destroy(op);
		return;
	}
	abandon_locked(s, op);
	pthread_mutex_unlock(&s->mu);
	wake(s);
}

/* With the sandbox locked: ends op on our side, because the guest broke a
 * cap. Its later frames are dropped and the agent is asked to stop. */
static void fail_local(struct sbx *s, struct sop *op, int err, const char *why)
{
	struct agentc *a = agent_of(s);
	log_warn("operation %u (%s): %s", op->id, proto_type_name(op->type), why);
	if (a) {
		agentc_forget(a, op->id);
		cancel(a, op->id);
	}
	op->st.end = P_ERROR;
	op->st.err = err;
	op->st.local = 1;
	snprintf(op->st.msg, sizeof(op->st.msg), "%s", why);
	op_ended(s, op);
}

/* Returns n bytes of credit to the agent, in quarters of the window. */
static void refund(struct sbx *s, struct sop *op, uint64_t n)
{
	op->unacked += n;
	struct agentc *a = agent_of(s);
	if (!op->live || op->abandoned || !a || op->unacked < op->window / 4)
		return;
	if (agentc_credit(a, op->id, (uint32_t)op->unacked) == 0) {
		op->granted += op->unacked;
		op->unacked = 0;
		wake(s);
	}
}

/* A string attribute, copied (NULL when absent); *bytes counts it. */
static char *attr_str(const struct proto_frame *f, uint16_t tag, size_t *bytes)
{
	char v[PROTO_MAX_STR + 1];
	if (proto_get_str(f, tag, v, sizeof(v)) < 0)
		return NULL;
	*bytes += strlen(v) + 1;
	return strdup(v);
}

static void item_release(struct sbx_item *it)
{
	switch (it->kind) {
	case SBX_ITEM_FILE:
		free((char *)it->file.path);
		free((char *)it->file.target);
		break;
	case SBX_ITEM_PROC:
		free((char *)it->proc.cmd);
		break;
	case SBX_ITEM_CTX:
		free((char *)it->ctx.id);
		free((char *)it->ctx.language);
		free((char *)it->ctx.user);
		free((char *)it->ctx.cwd);
		break;
	}
}

/* A stat-like frame's attributes as a file; for a listing, base is the
 * listed directory and the path becomes absolute. 0 or -ENOMEM. */
static int file_of(const struct proto_frame *f, const char *base, struct sbx_file *x,
		   size_t *bytes)
{
	char path[PROTO_MAX_STR + 1];
	*x = (struct sbx_file){ 0 };
	if (proto_get_str(f, A_PATH, path, sizeof(path)) == 0) {
		char *abs;
		if (asprintf(&abs, "%s%s%s", base && strcmp(base, "/") ? base : "", base ? "/" : "",
			     path) < 0)
			return -ENOMEM;
		x->path = abs;
		/* basename("") is ".", longer than an empty path: then no name. */
		size_t al = strlen(abs), bl = strlen(basename(path));
		x->name = abs + (bl <= al ? al - bl : al);
		*bytes += strlen(abs) + 1;
	}
	proto_get_u32(f, A_MODE, &x->mode);
	proto_get_u64(f, A_SIZE, &x->size);
	proto_get_u64(f, A_MTIME_NS, &x->mtime_ns);
	proto_get_u32(f, A_UID, &x->uid);
	proto_get_u32(f, A_GID, &x->gid);
	if (S_ISLNK(x->mode))
		x->target = attr_str(f, A_LINK, bytes);
	return 0;
}

/* A process listing item. */
static int proc_of(const struct proto_frame *f, struct sbx_proc *x, size_t *bytes)
{
	uint32_t state = 0, to = 0, pty = 0, v;
	*x = (struct sbx_proc){ .exit_code = -1, .signal = -1 };
	proto_get_u32(f, A_PTY, &pty);
	x->pty = pty != 0;
	proto_get_u32(f, A_PROC, &x->proc);
	proto_get_u32(f, A_PID, &x->pid);
	proto_get_u32(f, A_STATE, &state);
	proto_get_u32(f, A_TIMED_OUT, &to);
	x->exited = state == PS_EXITED;
	x->timed_out = to != 0;
	if (proto_get_u32(f, A_EXIT_CODE, &v) == 0)
		x->exit_code = (int)v;
	if (proto_get_u32(f, A_SIGNAL, &v) == 0)
		x->signal = (int)v;
	x->cmd = attr_str(f, A_CMD, bytes);
	if (!x->cmd && !(x->cmd = strdup("")))
		return -ENOMEM;
	return 0;
}

/* A code context (a P_CTX_LIST item, a create's or restart's P_OK). */
static int ctx_of(const struct proto_frame *f, struct sbx_ctx *x, size_t *bytes)
{
	uint32_t state = 0, proc;
	*x = (struct sbx_ctx){ .pid = -1 };
	proto_get_u32(f, A_STATE, &state);
	x->state = state == CS_IDLE ? SBX_CTX_IDLE : state == CS_BUSY ? SBX_CTX_BUSY : SBX_CTX_EXITED;
	if (proto_get_u32(f, A_PROC, &proc) == 0)
		x->pid = proc;
	const char **fields[4] = { &x->id, &x->language, &x->user, &x->cwd };
	static const uint16_t tags[4] = { A_CONTEXT, A_LANGUAGE, A_USER, A_CWD };
	for (int i = 0; i < 4; i++) {
		char *v = attr_str(f, tags[i], bytes);
		if (!v && !(v = strdup("")))
			return -ENOMEM;
		*fields[i] = v;
	}
	return 0;
}

/* f as an item of op's kind: 0, or -ENOMEM (x then holds what to free). */
static int item_of(const struct sop *op, const struct proto_frame *f, const char *base,
		   struct sbx_item *x, size_t *bytes)
{
	*bytes += sizeof(*x);
	if (op->type == P_PS) {
		x->kind = SBX_ITEM_PROC;
		return proc_of(f, &x->proc, bytes);
	}
	if (op->type == P_CTX_LIST || op->type == P_CTX_CREATE || op->type == P_CTX_RESTART) {
		x->kind = SBX_ITEM_CTX;
		return ctx_of(f, &x->ctx, bytes);
	}
	x->kind = SBX_ITEM_FILE;
	return file_of(f, base, &x->file, bytes);
}

/* One P_ENTRY into the items: 0, or -E2BIG past the byte cap. */
static int add_item(struct sop *op, const struct proto_frame *f)
{
	if (op->nitems == op->items_cap) {
		size_t cap = op->items_cap ? 2 * op->items_cap : 64;
		struct sbx_item *v = realloc(op->items, cap * sizeof(*v));
		if (!v)
			return 0; /* out of memory: the entry is lost, not the daemon */
		op->items = v;
		op->items_cap = cap;
	}
	struct sbx_item *x = &op->items[op->nitems];
	size_t bytes = 0;
	if (item_of(op, f, op->base, x, &bytes) < 0) {
		item_release(x);
		return 0;
	}
	if (op->items_bytes + bytes > SBX_MAX_ITEMS_BYTES) {
		item_release(x);
		return -E2BIG;
	}
	op->items_bytes += bytes;
	op->nitems++;
	return 0;
}

/* SOP_COLLECT keeps the newest cap bytes: trimming at twice the cap keeps
 * the copying amortised. */
static void collect(struct sop *op, int stream, const uint8_t *p, size_t n)
{
	struct pbuf *b = &op->out[stream];
	op->total[stream] += n;
	pbuf_append(b, p, n);
	if (b->len > 2 * op->cap + PROTO_DATA_CHUNK)
		pbuf_consume(b, b->len - op->cap);
}

/* SOP_NDJSON: appends output to the record queue, growing the last record
 * while the same stream continues. */
static void queue_record(struct sop *op, int stream, const uint8_t *p, size_t n)
{
	struct pbuf *q = &op->out[0];
	if (op->last_rec != NO_REC && q->data[op->last_rec] == stream) {
		uint32_t len;
		memcpy(&len, q->data + op->last_rec + 1, 4);
		if (pbuf_append(q, p, n) == 0) {
			len += (uint32_t)n;
			memcpy(q->data + op->last_rec + 1, &len, 4);
		}
		return;
	}
	uint8_t hdr[REC_HDR] = { (uint8_t)stream };
	uint32_t len = (uint32_t)n;
	memcpy(hdr + 1, &len, 4);
	size_t at = q->len;
	if (pbuf_append(q, hdr, sizeof(hdr)) == 0 && pbuf_append(q, p, n) == 0)
		op->last_rec = at;
	else
		q->len = at;
}

void sbx__queue_event(struct sop *op, uint32_t i)
{
	/* Its own record always: events are never joined like output. */
	op->last_rec = NO_REC;
	queue_record(op, REC_EVENT, (const uint8_t *)&i, sizeof(i));
	op->last_rec = NO_REC;
}

/* A watch's event: charged against the window, queued as a record whose
 * credit goes back as the reader takes it. */
static void on_fsevent(struct sbx *s, struct sop *op, const struct proto_frame *f)
{
	uint32_t cost = proto_cost(f->len), fs_op = 0, dir = 0;
	char path[PROTO_MAX_STR + 1];
	op->received += cost;
	if (op->received > op->granted + PROTO_DATA_CHUNK) {
		fail_local(s, op, EPROTO, "the agent sent past its credit window");
		return;
	}
	if (op->mode != SOP_NDJSON || proto_check_attrs(f) < 0 ||
	    proto_get_u32(f, A_FSOP, &fs_op) < 0 || fs_op < FS_CREATE || fs_op > FS_OVERFLOW ||
	    proto_get_str(f, A_PATH, path, sizeof(path)) < 0 || path[0] != '/') {
		fail_local(s, op, EPROTO, "the agent sent a malformed file system event");
		return;
	}
	proto_get_u32(f, A_ISDIR, &dir);
	size_t n = strlen(path);
	uint8_t rec[FS_HDR + PROTO_MAX_STR];
	memcpy(rec, &cost, 4);
	rec[4] = (uint8_t)fs_op;
	rec[5] = dir != 0;
	memcpy(rec + FS_HDR, path, n);
	op->last_rec = NO_REC;
	queue_record(op, REC_FSEVENT, rec, FS_HDR + n);
	op->last_rec = NO_REC;
}

/* Output or file bytes: charged against the window, then kept per mode. */
static void on_bytes(struct sbx *s, struct sop *op, const struct proto_frame *f)
{
	uint32_t cost = proto_cost(f->len);
	op->received += cost;
	if (op->received > op->granted + PROTO_DATA_CHUNK) {
		fail_local(s, op, EPROTO, "the agent sent past its credit window");
		return;
	}
	if (f->type == P_EVENT) {
		/* Taken at once: what is kept of it is capped in sbx_code.c. */
		sbx__code_event(op, f->payload, f->len);
		refund(s, op, cost);
		return;
	}
	if (f->type == P_DATA) {
		op->st.started = 1; /* a download may answer 200 now */
		op->total[0] += f->len;
	}
	int stream = f->type == P_STDERR;
	if (op->mode == SOP_QUEUE && (f->type == P_DATA || f->type == P_STDOUT)) {
		pbuf_append(&op->out[0], f->payload, f->len);
		refund(s, op, cost - f->len); /* the rest as the reader takes it */
	} else if (op->mode == SOP_NDJSON && f->type != P_DATA && f->len) {
		queue_record(op, stream, f->payload, f->len);
		refund(s, op, cost - f->len);
	} else {
		if (op->mode == SOP_COLLECT && f->type != P_DATA)
			collect(op, stream, f->payload, f->len);
		refund(s, op, cost);
	}
}

static void on_attrs(struct sbx *s, struct sop *op, const struct proto_frame *f)
{
	struct sop_state *st = &op->st;
	int terminal = f->type == P_OK || f->type == P_ERROR || f->type == P_EXIT;
	if (proto_check_attrs(f) < 0) {
		if (terminal) {
			st->end = P_ERROR;
			st->err = EPROTO;
			snprintf(st->msg, sizeof(st->msg), "malformed answer from the agent");
		}
		return;
	}
	uint32_t v;
	switch (f->type) {
	case P_CREDIT:
		if (proto_get_u32(f, A_CREDIT, &v) == 0)
			op->acked = op->acked + v > op->sent ? op->sent : op->acked + v;
		return;
	case P_ENTRY:
		if (add_item(op, f) < 0)
			fail_local(s, op, E2BIG, "the listing is too large");
		return;
	case P_STARTED:
	case P_OK:
		proto_get_u32(f, A_PROC, &st->proc);
		proto_get_u32(f, A_PID, &st->pid);
		if (proto_get_u32(f, A_PTY, &v) == 0 && v)
			st->pty = 1;
		st->started = 1;
		if (op->kill_on_start && st->proc && agent_of(s))
			kill_proc(agent_of(s), st->proc);
		if (f->type == P_OK && (op->type == P_STAT || op->type == P_CTX_CREATE ||
					op->type == P_CTX_RESTART)) {
			size_t bytes = 0;
			struct sbx_item *x = calloc(1, sizeof(*x));
			if (x && item_of(op, f, NULL, x, &bytes) < 0) {
				item_release(x);
				free(x);
				x = NULL;
			}
			if (op->entry) {
				item_release(op->entry);
				free(op->entry);
			}
			op->entry = x;
		}
		sbx__code_attrs(op, f);
		if (f->type == P_OK && op->type == P_STATS) {
			uint64_t u;
			struct sbx_guest_stats *g = &st->stats;
			const struct { uint16_t tag; unsigned long long *v; } stats[] = {
				{ A_MEM_TOTAL, &g->mem_total }, { A_MEM_AVAIL, &g->mem_avail },
				{ A_DISK_TOTAL, &g->disk_total }, { A_DISK_USED, &g->disk_used },
				{ A_NET_RX, &g->net_rx }, { A_NET_TX, &g->net_tx },
			};
			for (size_t i = 0; i < sizeof(stats) / sizeof(stats[0]); i++)
				if (proto_get_u64(f, stats[i].tag, &u) == 0)
					*stats[i].v = u;
		}
		break;
	case P_EXIT:
		if (proto_get_u32(f, A_EXIT_CODE, &v) == 0)
			st->exit_code = (int)v;
		if (proto_get_u32(f, A_SIGNAL, &v) == 0)
			st->signal = (int)v;
		st->timed_out = proto_get_u32(f, A_TIMED_OUT, &v) == 0 && v;
		break;
	case P_ERROR:
		v = EIO;
		proto_get_u32(f, A_ERRNO, &v);
		st->err = (int)v;
		st->local = f->id == 0; /* agentc's own, as the connection went (fail_all) */
		if (proto_get_str(f, A_MESSAGE, st->msg, sizeof(st->msg)) < 0)
			snprintf(st->msg, sizeof(st->msg), "%s", strerror((int)v));
		break;
	default:
		break;
	}
	if (terminal)
		st->end = f->type;
}

/* How many frames a request may get: unbounded for streams (credit bounds
 * them), the listing cap for listings, a few for the rest. */
#define CTX_LIST_FRAMES 64 /* the agent has at most 16 contexts */
static uint64_t max_frames(uint16_t type)
{
	switch (type) {
	case P_EXEC: case P_ATTACH: case P_FREAD: case P_FWRITE: case P_CODE: case P_WATCH:
		return UINT64_MAX;
	case P_CTX_LIST: return CTX_LIST_FRAMES;
	case P_LIST: return PROTO_MAX_LIST + SBX_MAX_SMALL_FRAMES;
	case P_PS: return 4 * SBX_MAX_OPS + SBX_MAX_SMALL_FRAMES;
	default: return SBX_MAX_SMALL_FRAMES;
	}
}

/* Runs in the pump thread with the sandbox locked (ECONNRESET endings come
 * from whichever thread closes the connection, locked too). */
static void sop_cb(void *arg, const struct proto_frame *f)
{
	struct sop *op = arg;
	struct sbx *s = op->owner;
	if (++op->frames > max_frames(op->type))
		fail_local(s, op, EPROTO, "the agent sent too many frames");
	else if (f->type == P_STDOUT || f->type == P_STDERR || f->type == P_DATA || f->type == P_EVENT)
		on_bytes(s, op, f);
	else if (f->type == P_FSEVENT)
		on_fsevent(s, op, f);
	else
		on_attrs(s, op, f);
	if (op->st.end && op->live)
		op_ended(s, op);
	if (op->done && op->abandoned) {
		remove_ctl(s, op);
		sop_destroy(op);
	}
}

struct pbuf *sbx_begin(struct sbx *s, uint16_t type, struct sop *op, int *err)
{
	pthread_mutex_lock(&s->mu);
	struct agentc *a = s->running ? agent_of(s) : NULL;
	int e = !a ? -ECONNRESET
		: s->nops >= SBX_MAX_OPS || (is_stream(op) && s->nstreams >= SBX_MAX_STREAMS) ? -EAGAIN
		: 0;
	struct pbuf *b = e ? NULL : agentc_begin(a, type, sop_cb, op, &op->id);
	uint32_t window = type == P_ATTACH ? SBX_ATTACH_WINDOW : type == P_WATCH ? SBX_WATCH_WINDOW
										 : SBX_WINDOW;
	int streams = type == P_EXEC || type == P_ATTACH || type == P_FREAD || type == P_CODE ||
		      type == P_WATCH;
	if (b && streams && proto_put_u32(b, A_WINDOW, window) < 0) {
		agentc_abort(a);
		b = NULL;
	}
	if (!b) {
		pthread_mutex_unlock(&s->mu);
		if (err)
			*err = e ? e : -ENOMEM;
		return NULL;
	}
	agentc_manual_credit(a, op->id);
	op->window = streams ? window : 0;
	op->granted = op->window;
	op->owner = s;
	op->type = type;
	op->live = 1;
	op->t0 = clock_ms();
	s->nops++;
	if (is_stream(op))
		s->nstreams++;
	if (op->mode != SOP_DISCARD && !op->quiet)
		atomic_fetch_add(&s->busy, 1);
	return b;
}

int sbx_end(struct sbx *s, struct sop *op)
{
	int r = agentc_end(vm_agent(s->vm));
	if (r < 0)
		op_ended(s, op);
	pthread_mutex_unlock(&s->mu);
	wake(s);
	return r;
}

void sbx_abort(struct sbx *s, struct sop *op)
{
	agentc_abort(vm_agent(s->vm));
	op_ended(s, op);
	pthread_mutex_unlock(&s->mu);
}

/* With the sandbox locked: sends n bytes on op (or on the stdin channel of
 * process ctl_proc, looked up anew after every wait: the pump may end and
 * free it meanwhile), each chunk within the input credit and the channel's
 * queue limit. */
static int send_locked(struct sbx *s, struct sop *op, uint32_t ctl_proc, uint16_t flags,
		       const uint8_t *p, size_t n, int timeout_ms)
{
	struct timespec deadline;
	clock_deadline(&deadline, timeout_ms);
	do {
		size_t k = n > PROTO_DATA_CHUNK ? PROTO_DATA_CHUNK : n;
		for (;;) {
			if (ctl_proc) {
				op = NULL;
				for (size_t i = 0; i < s->nctls && !op; i++)
					if (s->ctls[i].proc == ctl_proc)
						op = s->ctls[i].op;
				if (!op)
					return -ESRCH;
			}
			struct agentc *a = agent_of(s);
			if (!op->live || !a)
				return op->st.err ? -op->st.err : -ECONNRESET;
			if (op->sent - op->acked + k <= PROTO_INPUT_WINDOW && agentc_queued(a) < SEND_HIGH)
				break;
			if (pthread_cond_timedwait(&s->cv, &s->mu, &deadline) == ETIMEDOUT)
				return -ETIMEDOUT;
		}
		int r = agentc_data(agent_of(s), op->id, k == n ? flags : 0, p, k);
		if (r < 0)
			return r;
		op->sent += k;
		p += k;
		n -= k;
		wake(s);
	} while (n);
	return 0;
}

int sbx_data(struct sbx *s, struct sop *op, uint16_t flags, const void *p, size_t n, int timeout_ms)
{
	pthread_mutex_lock(&s->mu);
	int r = send_locked(s, op, 0, flags, p, n, timeout_ms);
	pthread_mutex_unlock(&s->mu);
	return r;
}

int sbx_wait(struct sbx *s, struct sop *op, int want_start, int timeout_ms, struct sop_state *st)
{
	struct timespec ts;
	clock_deadline(&ts, timeout_ms);
	int r = 0;
	pthread_mutex_lock(&s->mu);
	while (!op->done && !(want_start && op->st.started)) {
		if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == ETIMEDOUT) {
			r = -ETIMEDOUT;
			break;
		}
	}
	*st = op->st;
	pthread_mutex_unlock(&s->mu);
	return r;
}

/* Consumes take bytes of the first record of a SOP_NDJSON queue: the whole
 * record, or its head. */
static void take_record(struct sop *op, size_t take)
{
	struct pbuf *q = &op->out[0];
	uint32_t len;
	memcpy(&len, q->data + 1, 4);
	if (take == len) {
		pbuf_consume(q, REC_HDR + len);
		op->last_rec = op->last_rec == 0 ? NO_REC
			       : op->last_rec == NO_REC ? NO_REC : op->last_rec - REC_HDR - len;
	} else {
		len -= (uint32_t)take;
		memcpy(q->data + 1, &len, 4);
		memmove(q->data + REC_HDR, q->data + REC_HDR + take, q->len - REC_HDR - take);
		q->len -= take;
		if (op->last_rec != NO_REC && op->last_rec > 0)
			op->last_rec -= take;
	}
}

/* With the sandbox locked: the head of the first record, an output one, as
 * UTF-8 text into buf (every raw byte may become three: U+FFFD). */
static void out_chunk(struct sbx *s, struct sop *op, struct sop_chunk *c, char *buf, size_t max)
{
	struct pbuf *q = &op->out[0];
	uint32_t len;
	memcpy(&len, q->data + 1, 4);
	int stream = q->data[0];
	if (op->st.pty) {
		/* A terminal's bytes go out as they came (base64 in a line). */
		size_t take = len < max ? len : max;
		if (take > 16384)
			take = 16384;
		memcpy(buf, q->data + REC_HDR, take);
		*c = (struct sop_chunk){ .kind = SOP_CHUNK_OUT, .stream = stream, .pty = 1,
					 .len = take };
		take_record(op, take);
		refund(s, op, take);
		return;
	}
	size_t budget = (max - 1) / 3 > 4 ? (max - 1) / 3 - 4 : 1;
	if (budget > 16384)
		budget = 16384;
	size_t take = len < budget ? len : budget;
	/* Join with the bytes an earlier chunk cut mid-character. */
	uint8_t joined[4 + 16384];
	size_t have = op->npartial[stream];
	memcpy(joined, op->partial[stream], have);
	memcpy(joined + have, q->data + REC_HDR, take);
	size_t total = have + take;
	size_t keep = utf8_incomplete_tail(joined, total);
	memcpy(op->partial[stream], joined + total - keep, keep);
	op->npartial[stream] = keep;
	*c = (struct sop_chunk){ .kind = SOP_CHUNK_OUT, .stream = stream,
				 .len = utf8_sanitize(joined, total - keep, buf) };
	take_record(op, take);
	refund(s, op, take);
}

/* Whether op's stream closes with an END chunk: a command's exit, a code
 * call that ended well. */
static int has_end(const struct sop *op)
{
	return op->st.end == P_EXIT || (op->type == P_CODE && op->st.end == P_OK);
}

int sop_next(struct sbx *s, struct sop *op, struct sop_chunk *c, char *buf, size_t max,
	     int timeout_ms)
{
	struct timespec ts;
	clock_deadline(&ts, timeout_ms);
	pthread_mutex_lock(&s->mu);
	while (!op->out[0].len && !op->done) {
		if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == ETIMEDOUT) {
			pthread_mutex_unlock(&s->mu);
			return -ETIMEDOUT;
		}
	}
	int r = 1;
	if (op->out[0].len && op->out[0].data[0] == REC_EVENT) {
		uint32_t i;
		memcpy(&i, op->out[0].data + REC_HDR, sizeof(i));
		*c = (struct sop_chunk){ .kind = SOP_CHUNK_EVENT, .event = sop_code_event(op, i) };
		take_record(op, sizeof(i)); /* its credit went back on arrival */
		if (!c->event)
			c->kind = SOP_CHUNK_OUT; /* cannot be: an empty output, harmless */
	} else if (op->out[0].len && op->out[0].data[0] == REC_FSEVENT) {
		uint32_t len, cost;
		memcpy(&len, op->out[0].data + 1, 4);
		const uint8_t *rec = op->out[0].data + REC_HDR;
		memcpy(&cost, rec, 4);
		size_t n = len - FS_HDR < max - 1 ? len - FS_HDR : max - 1;
		memcpy(buf, rec + FS_HDR, n);
		buf[n] = '\0';
		*c = (struct sop_chunk){ .kind = SOP_CHUNK_FSEVENT, .fs_op = rec[4], .is_dir = rec[5],
					 .len = n };
		take_record(op, len);
		refund(s, op, cost);
	} else if (op->out[0].len) {
		out_chunk(s, op, c, buf, max);
	} else if (!op->exit_sent && has_end(op)) {
		*c = (struct sop_chunk){ .kind = SOP_CHUNK_END, .st = op->st,
					 .duration_ms = clock_ms() - op->t0 };
		op->exit_sent = 1;
	} else {
		/* Cut short: the client must not take an error's stream as whole. */
		r = op->st.end == P_ERROR ? -EPIPE : 0;
	}
	pthread_mutex_unlock(&s->mu);
	return r;
}

ssize_t sbx_read(struct sbx *s, struct sop *op, void *buf, size_t n, int timeout_ms)
{
	struct timespec ts;
	clock_deadline(&ts, timeout_ms);
	pthread_mutex_lock(&s->mu);
	while (!op->out[0].len && !op->done) {
		if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == ETIMEDOUT) {
			pthread_mutex_unlock(&s->mu);
			return -ETIMEDOUT;
		}
	}
	size_t k = op->out[0].len < n ? op->out[0].len : n;
	if (k)
		memcpy(buf, op->out[0].data, k);
	pbuf_consume(&op->out[0], k);
	refund(s, op, k);
	ssize_t r = (ssize_t)k;
	/* Cut short: the client must not take an error's stream as whole, nor
	 * the output of a command that failed (an archive's tar). */
	if (r == 0 && op->done &&
	    (op->st.end == P_ERROR ||
	     (op->st.end == P_EXIT && (op->st.exit_code != 0 || op->st.signal >= 0))))
		r = -EPIPE;
	pthread_mutex_unlock(&s->mu);
	return r;
}

size_t sop_nitems(struct sop *op)
{
	return op->done ? op->nitems : 0;
}

const struct sbx_item *sop_item(struct sop *op, size_t i)
{
	return op->done && i < op->nitems ? &op->items[i] : NULL;
}

const struct sbx_item *sop_entry(struct sop *op)
{
	return op->done ? op->entry : NULL;
}

const struct pbuf *sop_output(struct sop *op, int stream, int *cut)
{
	struct pbuf *b = &op->out[stream];
	*cut = op->total[stream] > op->cap;
	if (op->done && b->len > op->cap)
		pbuf_consume(b, b->len - op->cap);
	return b;
}

int sop_set_base(struct sop *op, const char *path)
{
	free(op->base);
	op->base = strdup(path);
	return op->base ? 0 : -ENOMEM;
}

/* Hands a started attach operation (SOP_DISCARD) to the sandbox, which
 * keeps it as the process's stdin channel until the process ends. All
 * decided under the lock: once it is unlocked the pump may free op. */
static void sbx_adopt(struct sbx *s, struct sop *op)
{
	pthread_mutex_lock(&s->mu);
	if (!op->live) {
		pthread_mutex_unlock(&s->mu);
		sop_destroy(op);
		return;
	}
	struct ctl *c = op->st.proc ? realloc(s->ctls, (s->nctls + 1) * sizeof(*c)) : NULL;
	if (c) {
		s->ctls = c;
		s->ctls[s->nctls++] = (struct ctl){ .proc = op->st.proc, .op = op };
		op->abandoned = 1; /* freed by the pump when it ends */
	} else {
		abandon_locked(s, op); /* cannot keep it: cancel */
	}
	pthread_mutex_unlock(&s->mu);
	wake(s);
}

static int have_ctl(struct sbx *s, uint32_t proc)
{
	for (size_t i = 0; i < s->nctls; i++)
		if (s->ctls[i].proc == proc)
			return 1;
	return 0;
}

int sbx_stdin(struct sbx *s, uint32_t proc, uint16_t flags, const void *p, size_t n, int timeout_ms)
{
	if (!proc)
		return -ESRCH; /* agent ids start at 1 */
	pthread_mutex_lock(&s->mu);
	int have = have_ctl(s, proc);
	pthread_mutex_unlock(&s->mu);
	if (!have) {
		/* The first write: attach to get an operation whose P_DATA
		 * reaches the process's stdin. */
		int e = -ENOMEM;
		struct sop *op = sop_new(SOP_DISCARD, 0);
		struct pbuf *b = op ? sbx_begin(s, P_ATTACH, op, &e) : NULL;
		if (!b) {
			sop_destroy(op);
			return e;
		}
		/* A failed put leaves A_PROC out: the agent then refuses it. */
		proto_put_u32(b, A_PROC, proc);
		if (sbx_end(s, op) < 0) {
			sop_free(s, op);
			return -ENOMEM;
		}
		struct sop_state st;
		sbx_wait(s, op, 1, 10000, &st);
		if (!st.started) {
			e = st.err ? st.err : ETIMEDOUT;
			sop_free(s, op);
			return -e;
		}
		sbx_adopt(s, op);
	}
	pthread_mutex_lock(&s->mu);
	int r = send_locked(s, NULL, proc, flags, p, n, timeout_ms);
	pthread_mutex_unlock(&s->mu);
	return r;
}
