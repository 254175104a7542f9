/*
 * sbx: the sandbox manager. Locking: the manager's mutex guards its list;
 * each sandbox's mutex guards its VM, agent connection and every sop bound
 * to it. The pump thread holds the sandbox lock except while it polls, so
 * frame callbacks always run locked. Lock order: manager, then sandbox.
 */
#include "daemon/sbx.h"

#include "common/log.h"
#include "common/utf8.h"
#include "daemon/agentc.h"
#include "daemon/vm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define QUEUE_HIGH (8u << 20) /* a reader this far behind stops the agent channel */
#define QUEUE_LOW (1u << 20)
#define SEND_HIGH (4u << 20)  /* bytes queued to the agent before writers wait */

struct sbx {
	struct sbx_mgr *mgr;
	char id[32];
	char account[128];
	char *env_json;
	long long expires_at;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct vm *vm;
	int wakefd;
	pthread_t pump;
	int running; /* accepts operations */
	int stop;    /* the pump must return */
	int stalled; /* readers behind: do not read the agent */
	int refs;
	struct sbx *next;
	/* Stdin channels: an attach operation per process written to, kept
	 * open because P_DATA must name a live operation. */
	struct ctl {
		uint32_t proc;
		struct sop *op;
	} *ctls;
	size_t nctls;
};

#define MAX_STARTING 64 /* sandboxes booting at once, all accounts */

struct sbx_mgr {
	struct sbx_config cfg;
	struct store *store;
	pthread_mutex_t mu;
	struct sbx *list;
	pthread_t expiry;
	int quit;
	/* Accounts of the sandboxes still booting: they count against the
	 * quota before the store knows them, so parallel creates cannot
	 * overshoot it. */
	char starting[MAX_STARTING][128];
};

/* Reserves a quota slot for account: 0, or -EDQUOT. */
static int reserve(struct sbx_mgr *m, const char *account)
{
	pthread_mutex_lock(&m->mu);
	int n = store_sbx_count_running(m->store, account), slot = -1;
	for (int i = 0; i < MAX_STARTING; i++) {
		if (!m->starting[i][0])
			slot = slot < 0 ? i : slot;
		else if (!strcmp(m->starting[i], account))
			n++;
	}
	int ok = n >= 0 && n < m->cfg.max_sandboxes && slot >= 0;
	if (ok)
		snprintf(m->starting[slot], sizeof(m->starting[slot]), "%s", account);
	pthread_mutex_unlock(&m->mu);
	return ok ? 0 : -EDQUOT;
}

static void unreserve(struct sbx_mgr *m, const char *account)
{
	pthread_mutex_lock(&m->mu);
	for (int i = 0; i < MAX_STARTING; i++) {
		if (!strcmp(m->starting[i], account)) {
			m->starting[i][0] = '\0';
			break;
		}
	}
	pthread_mutex_unlock(&m->mu);
}

static long long now_s(void)
{
	return (long long)time(NULL);
}

static void deadline_in(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

static void wake(struct sbx *s)
{
	uint64_t one = 1;
	if (write(s->wakefd, &one, sizeof(one)) < 0) {
		/* the counter is saturated: the pump is awake anyway */
	}
}

/* ---- sandbox operations ---- */

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
	char octal[8], when[32];
	snprintf(octal, sizeof(octal), "%04o", mode & 07777);
	time_t t = (time_t)(mtime / 1000000000u);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
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
		deadline_in(&ts, 1000);
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
		deadline_in(&ts, timeout_ms);
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
	deadline_in(&ts, timeout_ms);
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

/* ---- lifecycle ---- */

static const char *end_reason(enum vm_state st)
{
	switch (st) {
	case VM_STOPPED: return "killed";
	case VM_POWEROFF: return "poweroff";
	case VM_REBOOT: return "poweroff";
	case VM_PANIC: return "panic";
	default: return "crashed";
	}
}

static void sbx_release(struct sbx *s)
{
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	close(s->wakefd);
	free(s->ctls);
	free(s->env_json);
	free(s);
}

void sbx_put(struct sbx *s)
{
	if (!s)
		return;
	struct sbx_mgr *m = s->mgr;
	pthread_mutex_lock(&m->mu);
	int last = --s->refs == 0;
	pthread_mutex_unlock(&m->mu);
	if (last)
		sbx_release(s);
}

/* Removes s from the manager's list: 1 if this call did it. */
static int unlink_sbx(struct sbx_mgr *m, struct sbx *s)
{
	pthread_mutex_lock(&m->mu);
	int found = 0;
	for (struct sbx **pp = &m->list; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&m->mu);
	return found;
}

/* Frees the VM with the sandbox locked: pending operations hear ECONNRESET
 * through their callbacks, and every waiter wakes. */
static void drop_vm(struct sbx *s)
{
	s->running = 0;
	vm_free(s->vm, 0);
	s->vm = NULL;
	pthread_cond_broadcast(&s->cv);
}

static void *pump_main(void *arg)
{
	struct sbx *s = arg;
	char tag[48];
	snprintf(tag, sizeof(tag), "sbx/%s", s->id);
	log_set_tag(tag);
	pthread_mutex_lock(&s->mu);
	while (!s->stop) {
		struct pollfd fds[VM_MAX_FDS + 1];
		int n = vm_pollfds(s->vm, fds, s->stalled == 0);
		fds[n] = (struct pollfd){ .fd = s->wakefd, .events = POLLIN };
		pthread_mutex_unlock(&s->mu);
		int r = poll(fds, (nfds_t)n + 1, 1000);
		pthread_mutex_lock(&s->mu);
		if (r < 0)
			continue;
		if (fds[n].revents) {
			uint64_t v;
			if (read(s->wakefd, &v, sizeof(v)) < 0) {
				/* nothing to drain */
			}
		}
		if (s->stop)
			break;
		r = vm_handle(s->vm, fds, n);
		pthread_cond_broadcast(&s->cv);
		if (r == -ESHUTDOWN) {
			enum vm_state st = vm_state(s->vm);
			log_info("vm ended: %s: %s", vm_state_name(st), vm_reason(s->vm));
			store_sbx_set_state(s->mgr->store, s->id, "stopped", end_reason(st));
			drop_vm(s);
			pthread_mutex_unlock(&s->mu);
			/* Nobody will join us once we are out of the list. */
			if (unlink_sbx(s->mgr, s)) {
				pthread_detach(pthread_self());
				sbx_put(s);
			}
			return NULL;
		}
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static int add_sbx(struct sbx_mgr *m, const struct store_sbx *row, struct vm *vm)
{
	struct sbx *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->mgr = m;
	snprintf(s->id, sizeof(s->id), "%s", row->id);
	snprintf(s->account, sizeof(s->account), "%s", row->account);
	s->env_json = strdup(row->env_json ? row->env_json : "{}");
	s->expires_at = row->expires_at;
	s->vm = vm;
	s->running = 1;
	s->refs = 1; /* the list's */
	pthread_mutex_init(&s->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	s->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pthread_mutex_lock(&m->mu);
	s->next = m->list;
	m->list = s;
	pthread_mutex_unlock(&m->mu);
	if (s->wakefd < 0 || pthread_create(&s->pump, NULL, pump_main, s) != 0) {
		log_error("cannot start the pump of %s", s->id);
		unlink_sbx(m, s);
		s->vm = NULL;
		sbx_release(s);
		return -EAGAIN;
	}
	return 0;
}

struct sbx *sbx_find(struct sbx_mgr *m, const char *id, const char *account)
{
	pthread_mutex_lock(&m->mu);
	struct sbx *s = m->list;
	while (s && strcmp(s->id, id))
		s = s->next;
	if (s && account && strcmp(s->account, account))
		s = NULL;
	if (s)
		s->refs++;
	pthread_mutex_unlock(&m->mu);
	return s;
}

const char *sbx_env_json(const struct sbx *s)
{
	return s->env_json;
}

int sbx_kill(struct sbx_mgr *m, const char *id, const char *reason)
{
	struct sbx *s = sbx_find(m, id, NULL);
	if (!s)
		return -ENOENT;
	if (!unlink_sbx(m, s)) { /* the pump or another kill got there first */
		sbx_put(s);
		return 0;
	}
	pthread_mutex_lock(&s->mu);
	s->running = 0;
	s->stop = 1;
	pthread_mutex_unlock(&s->mu);
	wake(s);
	pthread_join(s->pump, NULL);
	pthread_mutex_lock(&s->mu);
	if (s->vm)
		vm_stop(s->vm, 3000);
	drop_vm(s);
	pthread_mutex_unlock(&s->mu);
	store_sbx_set_state(m->store, id, "stopped", reason);
	log_info("sandbox %s stopped: %s", id, reason);
	sbx_put(s); /* ours */
	sbx_put(s); /* the list's */
	return 0;
}

/* ---- creation, restore, expiry ---- */

static void random_id(char *out, size_t n, const char *prefix)
{
	uint8_t b[8];
	if (getrandom(b, sizeof(b), 0) != sizeof(b))
		for (size_t i = 0; i < sizeof(b); i++) /* never in practice */
			b[i] = (uint8_t)(rand() ^ (int)time(NULL));
	snprintf(out, n, "%s%02x%02x%02x%02x%02x%02x%02x%02x", prefix, b[0], b[1], b[2], b[3], b[4],
		 b[5], b[6], b[7]);
}

/* The body of sbx_create once a quota slot is held. */
static int boot(struct sbx_mgr *m, const char *account, const struct sbx_params *p,
		const char *image, struct store_sbx *row, char *err, size_t errlen)
{
	const struct sbx_config *c = &m->cfg;
	char kernel[512], initrd[512], run[sizeof(row->run_dir)];
	snprintf(kernel, sizeof(kernel), "%s/bzImage", c->guest_dir);
	snprintf(initrd, sizeof(initrd), "%s/initramfs.cpio", c->guest_dir);
	memset(row, 0, sizeof(*row));
	random_id(row->id, sizeof(row->id), "sbx_");
	snprintf(run, sizeof(run), "%s/vms/%s", c->state_dir, row->id);
	snprintf(row->run_dir, sizeof(row->run_dir), "%s", run);
	struct vm_config vc = {
		.qemu = c->qemu, .accel = c->accel, .vcpus = p->vcpus, .memory_mb = p->memory_mb,
		.disk_mb = p->disk_mb, .kernel = kernel, .initrd = initrd, .template = image,
		.run_dir = run, .cache_dir = c->cache_dir, .hostname = row->id + 4,
	};
	struct vm *vm;
	int r = vm_start(&vc, &vm, err, errlen);
	if (r < 0) {
		log_error("sandbox %s did not start: %s", row->id, err);
		return -EIO;
	}
	snprintf(row->account, sizeof(row->account), "%s", account);
	snprintf(row->template, sizeof(row->template), "%s", p->template);
	snprintf(row->state, sizeof(row->state), "running");
	row->vcpus = p->vcpus;
	row->memory_mb = p->memory_mb;
	row->disk_mb = p->disk_mb;
	row->created_at = now_s();
	row->expires_at = row->created_at + p->timeout_s;
	row->metadata_json = strdup(p->metadata_json ? p->metadata_json : "{}");
	row->env_json = strdup(p->env_json ? p->env_json : "{}");
	row->qemu_pid = vm_pid(vm);
	r = store_sbx_insert(m->store, row);
	if (r == 0)
		r = add_sbx(m, row, vm);
	if (r < 0) {
		snprintf(err, errlen, "cannot record sandbox: %s", strerror(-r));
		vm_free(vm, 0);
		store_sbx_release(row);
		return -EIO;
	}
	log_info("sandbox %s started for '%s' (%s) in %.0f ms", row->id, account, p->template,
		 vm_timings(vm)->total_ms);
	return 0;
}

int sbx_create(struct sbx_mgr *m, const char *account, const struct sbx_params *p,
	       struct store_sbx *row, char *err, size_t errlen)
{
	const struct sbx_config *c = &m->cfg;
	char image[512];
	snprintf(image, sizeof(image), "%s/templates/%s.erofs", c->guest_dir, p->template);
	if (!*p->template || strchr(p->template, '/') || access(image, R_OK) < 0) {
		snprintf(err, errlen, "unknown template '%s'", p->template);
		return -ENOENT;
	}
	if (reserve(m, account) < 0) {
		snprintf(err, errlen, "account '%s' already runs or starts %d sandboxes (or %d start at once)",
			 account, c->max_sandboxes, MAX_STARTING);
		return -EDQUOT;
	}
	int r = boot(m, account, p, image, row, err, errlen);
	unreserve(m, account);
	return r;
}

/* Is pid a QEMU running from run_dir? Guards against a recycled pid. */
static int is_our_qemu(int pid, const char *run_dir)
{
	char path[64], cmd[8192];
	snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, cmd, sizeof(cmd) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	for (ssize_t i = 0; i < n; i++)
		if (!cmd[i])
			cmd[i] = ' ';
	cmd[n] = '\0';
	return strstr(cmd, run_dir) != NULL;
}

void sbx_mgr_restore(struct sbx_mgr *m)
{
	struct store_sbx *rows;
	size_t n;
	if (store_sbx_running(m->store, &rows, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct store_sbx *row = &rows[i];
		char err[256] = "";
		struct vm *vm = NULL;
		int r = -ESRCH;
		if (is_our_qemu(row->qemu_pid, row->run_dir))
			r = vm_attach(row->run_dir, row->qemu_pid, &vm, err, sizeof(err));
		if (r == 0 && add_sbx(m, row, vm) == 0) {
			log_info("sandbox %s re-attached (qemu pid %d)", row->id, row->qemu_pid);
			continue;
		}
		log_warn("sandbox %s lost: %s", row->id, err[0] ? err : "its QEMU is gone");
		if (r == 0)
			vm_free(vm, 1);
		store_sbx_set_state(m->store, row->id, "lost", "lost");
	}
	store_sbx_free_list(rows, n);
}

static void *expiry_main(void *arg)
{
	struct sbx_mgr *m = arg;
	log_set_tag("expiry");
	for (;;) {
		char due[16][32];
		int ndue = 0;
		pthread_mutex_lock(&m->mu);
		if (m->quit) {
			pthread_mutex_unlock(&m->mu);
			return NULL;
		}
		long long now = now_s();
		for (struct sbx *s = m->list; s && ndue < 16; s = s->next)
			if (s->expires_at <= now)
				snprintf(due[ndue++], sizeof(due[0]), "%s", s->id);
		pthread_mutex_unlock(&m->mu);
		for (int i = 0; i < ndue; i++)
			sbx_kill(m, due[i], "timeout");
		usleep(250000);
	}
}

int sbx_set_expiry(struct sbx_mgr *m, const char *id, long long expires_at)
{
	struct sbx *s = sbx_find(m, id, NULL);
	if (!s)
		return -ENOENT;
	pthread_mutex_lock(&m->mu);
	s->expires_at = expires_at;
	pthread_mutex_unlock(&m->mu);
	sbx_put(s);
	return store_sbx_set_expiry(m->store, id, expires_at);
}

int sbx_mgr_new(const struct sbx_config *cfg, struct store *store, struct sbx_mgr **out)
{
	struct sbx_mgr *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->cfg = *cfg;
	m->store = store;
	pthread_mutex_init(&m->mu, NULL);
	if (pthread_create(&m->expiry, NULL, expiry_main, m) != 0) {
		free(m);
		return -EAGAIN;
	}
	*out = m;
	return 0;
}

void sbx_mgr_stop(struct sbx_mgr *m)
{
	pthread_mutex_lock(&m->mu);
	if (m->quit) {
		pthread_mutex_unlock(&m->mu);
		return;
	}
	m->quit = 1;
	struct sbx *list = m->list;
	m->list = NULL;
	pthread_mutex_unlock(&m->mu);
	pthread_join(m->expiry, NULL);
	while (list) {
		struct sbx *s = list;
		list = s->next;
		pthread_mutex_lock(&s->mu);
		s->stop = 1;
		s->running = 0;
		pthread_mutex_unlock(&s->mu);
		wake(s);
		pthread_join(s->pump, NULL);
		/* Leave QEMU running for the next daemon: close our side only. */
		pthread_mutex_lock(&s->mu);
		vm_detach(s->vm);
		s->vm = NULL;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		sbx_put(s);
	}
}

void sbx_mgr_free(struct sbx_mgr *m)
{
	if (!m)
		return;
	sbx_mgr_stop(m);
	pthread_mutex_destroy(&m->mu);
	free(m);
}
