/*
 * sbx_op: operations on a running sandbox, run from HTTP threads. A request
 * is built under the sandbox lock and handed to the pump; the pump decodes
 * the agent's frames into the struct sop (sop_cb, always locked) and wakes
 * the waiters. Also the stdin channels of background processes.
 */
#include "daemon/sandbox/sbx_impl.h"

#include "common/utf8.h"
#include "runner/agentc.h"
#include "runner/vm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct sop *sop_new(enum sop_mode mode)
{
	struct sop *op = calloc(1, sizeof(*op));
	if (!op)
		return NULL;
	op->mode = mode;
	op->exit_code = op->signal = -1;
	return op;
}

static void sop_destroy(struct sop *op)
{
	pbuf_release(&op->out[0]);
	pbuf_release(&op->out[1]);
	json_decref(op->items);
	json_decref(op->ok);
	free(op);
}

static void unstall(struct sop *op)
{
	if (op->stalled && op->owner) {
		op->stalled = 0;
		op->owner->stalled--;
		wake(op->owner);
	}
}

void sop_free(struct sbx *s, struct sop *op)
{
	if (!op)
		return;
	if (!s || !op->live) {
		if (s) {
			pthread_mutex_lock(&s->mu);
			unstall(op);
			pthread_mutex_unlock(&s->mu);
		}
		sop_destroy(op);
		return;
	}
	pthread_mutex_lock(&s->mu);
	unstall(op);
	if (!op->live) {
		pthread_mutex_unlock(&s->mu);
		sop_destroy(op);
		return;
	}
	op->abandoned = 1;
	struct agentc *a = s->vm ? vm_agent(s->vm) : NULL;
	struct pbuf *b = a ? agentc_begin(a, P_CANCEL, NULL, NULL, NULL) : NULL;
	if (b && proto_put_u32(b, A_TARGET, op->id) == 0)
		agentc_end(a);
	pthread_mutex_unlock(&s->mu);
	wake(s);
}

/* Attributes of a stat-like frame as an API entry (docs/api.md). */
static json_t *entry_json(const struct proto_frame *f)
{
	json_t *e = json_object();
	char path[PROTO_MAX_STR + 1], link[PROTO_MAX_STR + 1];
	uint32_t mode = 0, uid = 0, gid = 0;
	uint64_t size = 0, mtime = 0;
	if (proto_get_str(f, A_PATH, path, sizeof(path)) == 0)
		json_object_set_new(e, "path", json_string(path));
	proto_get_u32(f, A_MODE, &mode);
	proto_get_u64(f, A_SIZE, &size);
	proto_get_u64(f, A_MTIME_NS, &mtime);
	proto_get_u32(f, A_UID, &uid);
	proto_get_u32(f, A_GID, &gid);
	const char *type = S_ISREG(mode) ? "file" : S_ISDIR(mode) ? "dir" : S_ISLNK(mode) ? "symlink" : "other";
	char octal[8], when[CLOCK_RFC3339_LEN];
	snprintf(octal, sizeof(octal), "%04o", mode & 07777);
	clock_rfc3339((long long)(mtime / 1000000000u), when, sizeof(when));
	json_object_set_new(e, "type", json_string(type));
	json_object_set_new(e, "size", json_integer((json_int_t)size));
	json_object_set_new(e, "mode", json_string(octal));
	json_object_set_new(e, "mtime", json_string(when));
	json_object_set_new(e, "uid", json_integer(uid));
	json_object_set_new(e, "gid", json_integer(gid));
	if (S_ISLNK(mode) && proto_get_str(f, A_LINK, link, sizeof(link)) == 0)
		json_object_set_new(e, "target", json_string(link));
	return e;
}

/* A process listing item as an API process object. */
static json_t *process_json(const struct proto_frame *f)
{
	uint32_t proc = 0, pid = 0, state = 0, code, sig, to = 0;
	char cmd[PROTO_MAX_STR + 1] = "";
	proto_get_u32(f, A_PROC, &proc);
	proto_get_u32(f, A_PID, &pid);
	proto_get_u32(f, A_STATE, &state);
	proto_get_u32(f, A_TIMED_OUT, &to);
	proto_get_str(f, A_CMD, cmd, sizeof(cmd));
	char safe[3 * sizeof(cmd) + 1];
	utf8_sanitize((const uint8_t *)cmd, strlen(cmd), safe);
	json_t *p = json_pack("{s:i,s:i,s:s,s:s,s:b}", "pid", proc, "os_pid", pid, "cmd", safe, "state",
			      state == PS_EXITED ? "exited" : "running", "timed_out", to != 0);
	json_object_set_new(p, "exit_code", proto_get_u32(f, A_EXIT_CODE, &code) == 0 ? json_integer(code) : json_null());
	json_object_set_new(p, "signal", proto_get_u32(f, A_SIGNAL, &sig) == 0 ? json_integer(sig) : json_null());
	return p;
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

static void ndjson_output(struct sop *op, int stream, const uint8_t *p, size_t n)
{
	/* Join with the bytes an earlier frame cut mid-character. */
	size_t have = op->npartial[stream];
	uint8_t *joined = malloc(have + n);
	if (!joined)
		return;
	memcpy(joined, op->partial[stream], have);
	memcpy(joined + have, p, n);
	size_t total = have + n;
	size_t keep = utf8_incomplete_tail(joined, total);
	memcpy(op->partial[stream], joined + total - keep, keep);
	op->npartial[stream] = keep;
	char *text = malloc(3 * (total - keep) + 1);
	if (text) {
		size_t len = utf8_sanitize(joined, total - keep, text);
		json_t *line = json_pack("{s:s,s:s%}", "type", stream ? "stderr" : "stdout", "data", text, len);
		char *s = line ? json_dumps(line, JSON_COMPACT) : NULL;
		if (s) {
			pbuf_append(&op->out[0], s, strlen(s));
			pbuf_append(&op->out[0], "\n", 1);
		}
		free(s);
		json_decref(line);
		free(text);
	}
	free(joined);
}

static void ndjson_exit(struct sop *op)
{
	json_t *line = json_pack("{s:s,s:o,s:o,s:b}", "type", "exit", "exit_code",
				 op->exit_code >= 0 ? json_integer(op->exit_code) : json_null(), "signal",
				 op->signal >= 0 ? json_integer(op->signal) : json_null(), "timed_out",
				 op->timed_out > 0);
	char *s = line ? json_dumps(line, JSON_COMPACT) : NULL;
	if (s) {
		pbuf_append(&op->out[0], s, strlen(s));
		pbuf_append(&op->out[0], "\n", 1);
	}
	free(s);
	json_decref(line);
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

/* Runs in the pump thread with the sandbox locked. */
static void sop_cb(void *arg, const struct proto_frame *f)
{
	struct sop *op = arg;
	struct sbx *s = op->owner;
	int stream = f->type == P_STDERR;
	switch (f->type) {
	case P_STDOUT:
	case P_STDERR:
		if (op->mode == SOP_COLLECT)
			collect(op, stream, f->payload, f->len);
		else if (op->mode == SOP_NDJSON)
			ndjson_output(op, stream, f->payload, f->len);
		break;
	case P_DATA:
		op->started = 1; /* a download may answer 200 now */
		if (op->mode == SOP_QUEUE)
			pbuf_append(&op->out[0], f->payload, f->len);
		op->total[0] += f->len;
		op->eof |= (f->flags & PF_EOF) != 0;
		break;
	default:
		if (proto_check_attrs(f) < 0) {
			if (f->type == P_OK || f->type == P_ERROR || f->type == P_EXIT) {
				op->end = P_ERROR;
				op->err = EPROTO;
				snprintf(op->msg, sizeof(op->msg), "malformed answer from the agent");
			}
			break;
		}
		if (f->type == P_STARTED || f->type == P_OK) {
			proto_get_u32(f, A_PROC, &op->proc);
			proto_get_u32(f, A_PID, &op->pid);
			op->started = 1;
		}
		if (f->type == P_ENTRY) {
			if (!op->items)
				op->items = json_array();
			json_array_append_new(op->items, op->type == P_PS ? process_json(f) : entry_json(f));
		}
		if (f->type == P_OK && op->type == P_STAT)
			op->ok = entry_json(f);
		if (f->type == P_EXIT) {
			uint32_t v;
			if (proto_get_u32(f, A_EXIT_CODE, &v) == 0)
				op->exit_code = (int)v;
			if (proto_get_u32(f, A_SIGNAL, &v) == 0)
				op->signal = (int)v;
			op->timed_out = proto_get_u32(f, A_TIMED_OUT, &v) == 0 && v;
			if (op->mode == SOP_NDJSON)
				ndjson_exit(op);
		}
		if (f->type == P_ERROR) {
			uint32_t e = EIO;
			proto_get_u32(f, A_ERRNO, &e);
			op->err = (int)e;
			if (proto_get_str(f, A_MESSAGE, op->msg, sizeof(op->msg)) < 0)
				snprintf(op->msg, sizeof(op->msg), "%s", strerror((int)e));
		}
		if (f->type == P_OK || f->type == P_ERROR || f->type == P_EXIT)
			op->end = f->type;
	}
	if ((op->mode == SOP_QUEUE || op->mode == SOP_NDJSON) && !op->stalled &&
	    op->out[0].len > QUEUE_HIGH && !op->abandoned) {
		op->stalled = 1;
		s->stalled++;
	}
	if (op->end) {
		op->done = 1;
		op->live = 0;
		if (op->abandoned) {
			remove_ctl(s, op);
			unstall(op);
			sop_destroy(op);
		}
	}
}

struct pbuf *sbx_begin(struct sbx *s, uint16_t type, struct sop *op)
{
	pthread_mutex_lock(&s->mu);
	struct agentc *a = s->running && s->vm ? vm_agent(s->vm) : NULL;
	struct pbuf *b = a ? agentc_begin(a, type, sop_cb, op, &op->id) : NULL;
	if (!b) {
		pthread_mutex_unlock(&s->mu);
		return NULL;
	}
	op->owner = s;
	op->type = type;
	op->live = 1;
	return b;
}

int sbx_end(struct sbx *s, struct sop *op)
{
	int r = agentc_end(vm_agent(s->vm));
	if (r < 0)
		op->live = 0;
	pthread_mutex_unlock(&s->mu);
	wake(s);
	return r;
}

/* With the sandbox locked: waits while the agent channel's queue is long,
 * so writers keep memory bounded. The agent, or NULL if the VM is gone. */
static struct agentc *room_to_send(struct sbx *s)
{
	for (;;) {
		struct agentc *a = s->running && s->vm ? vm_agent(s->vm) : NULL;
		if (!a || agentc_queued(a) < SEND_HIGH)
			return a;
		struct timespec ts;
		clock_deadline(&ts, 1000);
		pthread_cond_timedwait(&s->cv, &s->mu, &ts);
	}
}

void sbx_abort(struct sbx *s, struct sop *op)
{
	agentc_abort(vm_agent(s->vm));
	op->live = 0;
	pthread_mutex_unlock(&s->mu);
}

int sbx_data(struct sbx *s, struct sop *op, uint16_t flags, const void *p, size_t n)
{
	pthread_mutex_lock(&s->mu);
	struct agentc *a = room_to_send(s);
	int r;
	if (!a || !op->live)
		r = op->err ? -op->err : -ECONNRESET;
	else
		r = agentc_data(a, op->id, flags, p, n);
	pthread_mutex_unlock(&s->mu);
	wake(s);
	return r;
}

int sbx_wait(struct sbx *s, struct sop *op, int want_start, int timeout_ms)
{
	struct timespec ts;
	if (timeout_ms >= 0)
		clock_deadline(&ts, timeout_ms);
	int r = 0;
	pthread_mutex_lock(&s->mu);
	while (!op->done && !(want_start && op->started)) {
		if (timeout_ms < 0) {
			pthread_cond_wait(&s->cv, &s->mu);
		} else if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == ETIMEDOUT) {
			r = -ETIMEDOUT;
			break;
		}
	}
	pthread_mutex_unlock(&s->mu);
	return r;
}

ssize_t sbx_read(struct sbx *s, struct sop *op, void *buf, size_t n, int timeout_ms)
{
	struct timespec ts;
	clock_deadline(&ts, timeout_ms);
	ssize_t r;
	pthread_mutex_lock(&s->mu);
	while (op->out[0].len == 0 && !op->done) {
		if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == ETIMEDOUT) {
			pthread_mutex_unlock(&s->mu);
			return -ETIMEDOUT;
		}
	}
	size_t k = op->out[0].len < n ? op->out[0].len : n;
	memcpy(buf, op->out[0].data, k);
	pbuf_consume(&op->out[0], k);
	if (op->stalled && op->out[0].len < QUEUE_LOW)
		unstall(op);
	r = (ssize_t)k;
	pthread_mutex_unlock(&s->mu);
	return r;
}

/* Hands a started attach operation (SOP_DISCARD) to the sandbox, which
 * keeps it as the process's stdin channel until the process ends. */
static void sbx_adopt(struct sbx *s, struct sop *op)
{
	pthread_mutex_lock(&s->mu);
	struct ctl *c = NULL;
	if (op->live && op->proc) {
		c = realloc(s->ctls, (s->nctls + 1) * sizeof(*c));
		if (c) {
			s->ctls = c;
			s->ctls[s->nctls++] = (struct ctl){ .proc = op->proc, .op = op };
		}
	}
	if (op->live)
		op->abandoned = 1; /* freed by the pump when it ends */
	pthread_mutex_unlock(&s->mu);
	if (!c && op->live)
		sop_free(s, op); /* cannot keep it: cancel */
	else if (!op->abandoned)
		sop_destroy(op);
}

static struct sop *find_ctl(struct sbx *s, uint32_t proc)
{
	for (size_t i = 0; i < s->nctls; i++)
		if (s->ctls[i].proc == proc)
			return s->ctls[i].op;
	return NULL;
}

int sbx_stdin(struct sbx *s, uint32_t proc, uint16_t flags, const void *p, size_t n)
{
	pthread_mutex_lock(&s->mu);
	int have = find_ctl(s, proc) != NULL;
	pthread_mutex_unlock(&s->mu);
	if (!have) {
		/* The first write: attach to get an operation whose P_DATA
		 * reaches the process's stdin. */
		struct sop *op = sop_new(SOP_DISCARD);
		struct pbuf *b = op ? sbx_begin(s, P_ATTACH, op) : NULL;
		if (!b) {
			sop_destroy(op);
			return -ECONNRESET;
		}
		/* A failed put leaves A_PROC out: the agent then refuses it. */
		proto_put_u32(b, A_PROC, proc);
		if (sbx_end(s, op) < 0) {
			sop_free(s, op);
			return -ENOMEM;
		}
		sbx_wait(s, op, 1, 10000);
		if (!op->started) {
			int e = op->err ? op->err : ETIMEDOUT;
			sop_free(s, op);
			return -e;
		}
		sbx_adopt(s, op);
	}
	pthread_mutex_lock(&s->mu);
	struct agentc *a = room_to_send(s);
	struct sop *op = find_ctl(s, proc); /* after the wait: it may have ended */
	int r = a && op ? agentc_data(a, op->id, flags, p, n) : -ESRCH;
	pthread_mutex_unlock(&s->mu);
	wake(s);
	return r;
}
