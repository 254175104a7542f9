/*
 * code: code contexts. A context is a name, a language, a user and a working directory, and
 * while it lives a kernel: a process of the table started from one of the scripts in
 * src/agent/interp/ (built into this binary and written to the run directory), which reads
 * calls on its fd 3 and answers on its fd 4. One call runs in a context at a time; it ends when
 * the kernel writes EOT and its stdout and stderr written before are read, or when the kernel
 * dies. Past a call's timeout the kernel's process group gets SIGINT, and SIGKILL
 * CODE_GRACE_MS later if the call still runs.
 */
#include "agent/code.h"

#include "agent/agent.h"
#include "agent/conn.h"
#include "agent/exec.h"
#include "agent/proc.h"
#include "agent/user.h"
#include "common/clock.h"
#include "common/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define EOT	 0x04
#define DRAIN_MS 100 /* after EOT, how long output still coming may hold the end back */

/* The kernels' sources, generated from src/agent/interp/ by the Makefile. */
extern const char interp_python[], interp_bash[];

static const struct lang {
	const char *name, *prog, *script, *text;
	const char *flags[3]; /* between the program and the script */
} langs[] = {
	{"python", "python3", "kernel.py", interp_python, {NULL}},
	{"bash", "bash", "kernel.sh", interp_bash, {"--noprofile", "--norc"}},
};

struct ctx {
	char name[CTX_NAME_MAX + 1]; /* empty: a free slot */
	const struct lang *lang;
	char user[256];
	char cwd[PROTO_MAX_STR + 1];
	uint32_t proc;	   /* the kernel's process id, 0 when it is not running */
	int req_fd, ev_fd; /* its fd 3 (we write) and fd 4 (we read), -1 when closed */
	struct pbuf req;   /* request bytes not yet written */
	size_t req_head;
	char died[128]; /* how the last kernel ended, told at the next call */
	/* The call running, if any. */
	bool busy;
	uint32_t op;	    /* its operation, 0 once that is gone (cancel, disconnect) */
	bool eot;	    /* the kernel said it is over: read what it printed, then end */
	bool timed_out;	    /* interrupted by the timeout (not by a cancel) */
	int64_t deadline;   /* interrupt then (monotonic ms), 0 = none */
	int64_t kill_at;    /* kill then, 0 = none */
	int64_t drain_until;
};

static struct ctx ctxs[MAX_CTX];

/* --- contexts --- */

static struct ctx *ctx_find(const char *name)
{
	for (int i = 0; i < MAX_CTX; i++)
		if (ctxs[i].name[0] && !strcmp(ctxs[i].name, name))
			return &ctxs[i];
	return NULL;
}

static const struct lang *lang_find(const char *name)
{
	for (size_t i = 0; i < sizeof(langs) / sizeof(langs[0]); i++)
		if (!strcmp(langs[i].name, name))
			return &langs[i];
	return NULL;
}

static bool valid_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > CTX_NAME_MAX)
		return false;
	for (; *s; s++)
		if (!(*s >= 'a' && *s <= 'z') && !(*s >= 'A' && *s <= 'Z') && !(*s >= '0' && *s <= '9') &&
		    *s != '.' && *s != '_' && *s != '-')
			return false;
	return true;
}

static void close_channels(struct ctx *x)
{
	if (x->req_fd >= 0)
		close(x->req_fd);
	if (x->ev_fd >= 0)
		close(x->ev_fd);
	x->req_fd = x->ev_fd = -1;
	pbuf_release(&x->req);
	x->req_head = 0;
}

/* The call is over for the context (answered, or nobody left to answer). */
static void call_done(struct ctx *x)
{
	x->busy = x->eot = x->timed_out = false;
	x->op = 0;
	x->deadline = x->kill_at = x->drain_until = 0;
}

static struct proc *kernel_of(const struct ctx *x)
{
	struct proc *p = x->proc ? proc_find(x->proc) : NULL;
	return p && !p->reaped ? p : NULL;
}

/* Kills a context's kernel and lets go of it: a call running in it ends when it dies. */
static void ctx_stop(struct ctx *x)
{
	struct proc *p = kernel_of(x);
	if (p)
		proc_kill(p, SIGKILL);
	close_channels(x);
	call_done(x);
	x->proc = 0;
}

/* Is there an executable prog in the directories of the base PATH? */
static bool have_program(const char *prog)
{
	const char *path = exec_base_path();
	char dir[512], file[600];
	while (*path) {
		size_t n = strcspn(path, ":");
		snprintf(dir, sizeof(dir), "%.*s", (int)n, path);
		snprintf(file, sizeof(file), "%s/%s", dir, prog);
		if (access(file, X_OK) == 0)
			return true;
		path += n + (path[n] == ':');
	}
	return false;
}

/* Writes a kernel's script into the run directory (anew each time: a new agent may bring a new
 * one): 0 or -errno. */
static int write_script(const struct lang *l, char *path, size_t len)
{
	char tmp[620];
	snprintf(path, len, "%s/%s", agent.run_dir, l->script);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -errno;
	size_t n = strlen(l->text);
	int r = write(fd, l->text, n) == (ssize_t)n ? 0 : -EIO;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
	return r;
}

/* Starts x's kernel: 0, or -errno with the reason in err. */
static int ctx_start(struct ctx *x, char *err, size_t errlen)
{
	const struct lang *l = x->lang;
	if (!have_program(l->prog)) {
		snprintf(err, errlen, "no '%s' in this sandbox: %s code needs an image that has it",
			 l->prog, l->name);
		return -ENOENT;
	}
	char script[600];
	int r = write_script(l, script, sizeof(script));
	if (r < 0) {
		snprintf(err, errlen, "cannot write '%s': %s", script, strerror(-r));
		return r;
	}
	struct user u;
	if ((r = user_lookup(x->user, &u)) < 0) {
		snprintf(err, errlen, r == -ENOENT ? "unknown user '%s'" : "cannot look up '%s'",
			 x->user);
		return r == -ENOENT ? -EINVAL : r;
	}
	bool setids = geteuid() == 0;
	if (!setids && u.uid != geteuid()) {
		snprintf(err, errlen, "cannot run as '%s': agent is not root", x->user);
		return -EPERM;
	}
	struct stat st;
	int bad = stat(x->cwd, &st) < 0 ? errno : !S_ISDIR(st.st_mode) ? ENOTDIR : 0;
	if (bad) {
		snprintf(err, errlen, "cannot use cwd '%.1000s': %s", x->cwd, strerror(bad));
		return -ENOENT;
	}

	int req[2] = {-1, -1}, ev[2] = {-1, -1};
	if (pipe2(req, O_CLOEXEC) < 0 || pipe2(ev, O_CLOEXEC) < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot make pipes: %s", strerror(errno));
		goto fail;
	}
	if (fcntl(req[1], F_SETFL, O_NONBLOCK) < 0 || fcntl(ev[0], F_SETFL, O_NONBLOCK) < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot set up pipes: %s", strerror(errno));
		goto fail;
	}
	char *argv[8];
	int argc = 0;
	argv[argc++] = (char *)l->prog;
	for (int i = 0; i < 3 && l->flags[i]; i++)
		argv[argc++] = (char *)l->flags[i];
	argv[argc++] = script;
	argv[argc++] = x->name; /* in the guest's ps, so a kernel can be told apart */
	argv[argc] = NULL;
	struct exec_env env;
	exec_base_env(&env, &u);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "%s kernel of code context %s", l->name, x->name);
	struct proc_spawn_args sp = {
	    .argv = argv,
	    .env = env.v,
	    .cwd = x->cwd,
	    .user = &u,
	    .setids = setids,
	    .cmd = cmd,
	    .has_ctl = true,
	    .ctl = {req[0], ev[1]},
	};
	struct proc *p;
	if ((r = proc_spawn(&sp, &p)) < 0) {
		snprintf(err, errlen, "cannot start the %s kernel: %s", l->name, strerror(-r));
		goto fail;
	}
	close(req[0]);
	close(ev[1]);
	p->background = true; /* listed, and kept after its end like a background process */
	x->proc = p->id;
	x->req_fd = req[1];
	x->ev_fd = ev[0];
	return 0;
fail:
	for (int i = 0; i < 2; i++) {
		if (req[i] >= 0)
			close(req[i]);
		if (ev[i] >= 0)
			close(ev[i]);
	}
	return r;
}

/* The attributes that name and describe a context: A_CONTEXT (required), A_LANGUAGE,
 * A_USER, A_CWD into x (the slot is not taken): 0, or -1 after P_ERROR. */
static int parse_ctx(struct conn *c, const struct proto_frame *f, struct ctx *x, bool *lang_given)
{
	char lang[32] = "python";
	int r = proto_get_str(f, A_CONTEXT, x->name, sizeof(x->name));
	if (r < 0) {
		conn_send_attr_error(c, f->id, r, "context");
		return -1;
	}
	if (!valid_name(x->name)) {
		conn_send_error(c, f->id, EINVAL, "context id '%s' is not 1 to %d of A-Z a-z 0-9 . _ -",
				x->name, CTX_NAME_MAX);
		return -1;
	}
	r = proto_get_str(f, A_LANGUAGE, lang, sizeof(lang));
	if (r < 0 && r != -ENOENT) {
		conn_send_attr_error(c, f->id, r, "language");
		return -1;
	}
	*lang_given = r == 0;
	if (!(x->lang = lang_find(lang))) {
		conn_send_error(c, f->id, EINVAL, "unknown language '%s' (python or bash)", lang);
		return -1;
	}
	snprintf(x->user, sizeof(x->user), "root");
	r = proto_get_str(f, A_USER, x->user, sizeof(x->user));
	if (r < 0 && r != -ENOENT) {
		conn_send_attr_error(c, f->id, r, "user");
		return -1;
	}
	r = proto_get_str(f, A_CWD, x->cwd, sizeof(x->cwd));
	if (r < 0 && r != -ENOENT) {
		conn_send_attr_error(c, f->id, r, "cwd");
		return -1;
	}
	if (r == 0 && x->cwd[0] != '/') {
		conn_send_error(c, f->id, EINVAL, "cwd '%s' is not absolute", x->cwd);
		return -1;
	}
	if (r == -ENOENT) {
		/* /work, where the files of the API's examples are, or the user's home. */
		struct stat st;
		struct user u;
		if (stat("/work", &st) == 0 && S_ISDIR(st.st_mode))
			strcpy(x->cwd, "/work");
		else if (user_lookup(x->user, &u) == 0)
			snprintf(x->cwd, sizeof(x->cwd), "%s", u.home);
		else
			strcpy(x->cwd, "/");
	}
	return 0;
}

/* Takes a free slot for *tmpl and starts its kernel: the context, or NULL after P_ERROR. */
static struct ctx *ctx_new(struct conn *c, uint32_t id, const struct ctx *tmpl)
{
	struct ctx *x = NULL;
	for (int i = 0; i < MAX_CTX && !x; i++)
		if (!ctxs[i].name[0])
			x = &ctxs[i];
	if (!x) {
		conn_send_error(c, id, EAGAIN, "too many code contexts (%d)", MAX_CTX);
		return NULL;
	}
	*x = *tmpl;
	x->req_fd = x->ev_fd = -1;
	char err[PROTO_MAX_STR];
	int r = ctx_start(x, err, sizeof(err));
	if (r < 0) {
		memset(x, 0, sizeof(*x));
		conn_send_error(c, id, -r, "%s", err);
		return NULL;
	}
	return x;
}

/* A context as a frame of type: A_CONTEXT, A_LANGUAGE, A_USER, A_CWD, A_STATE, and the
 * kernel's A_PROC and A_PID while it runs (a P_CTX_LIST entry, a create's or restart's P_OK). */
static void put_ctx(struct conn *c, uint16_t type, uint32_t id, const struct ctx *x)
{
	struct proc *p = kernel_of(x);
	uint32_t state = !p ? CS_EXITED : x->busy ? CS_BUSY : CS_IDLE;
	int r = conn_out_begin(c, type, 0, id);
	if (r == 0)
		r = proto_put_str(&c->out, A_CONTEXT, x->name);
	if (r == 0)
		r = proto_put_str(&c->out, A_LANGUAGE, x->lang->name);
	if (r == 0)
		r = proto_put_str(&c->out, A_USER, x->user);
	if (r == 0)
		r = proto_put_str(&c->out, A_CWD, x->cwd);
	if (r == 0)
		r = proto_put_u32(&c->out, A_STATE, state);
	if (r == 0 && p)
		r = proto_put_u32(&c->out, A_PROC, p->id);
	if (r == 0 && p)
		r = proto_put_u32(&c->out, A_PID, (uint32_t)p->pid);
	conn_out_end(c, r);
}

/* --- requests --- */

void code_ctx_create(struct conn *c, const struct proto_frame *f)
{
	struct ctx tmpl = {0};
	bool lang_given;
	if (parse_ctx(c, f, &tmpl, &lang_given) < 0)
		return;
	if (ctx_find(tmpl.name)) {
		conn_send_error(c, f->id, EEXIST, "code context '%s' exists", tmpl.name);
		return;
	}
	struct ctx *x = ctx_new(c, f->id, &tmpl);
	if (x)
		put_ctx(c, P_OK, f->id, x);
}

void code_ctx_list(struct conn *c, const struct proto_frame *f)
{
	for (int i = 0; i < MAX_CTX && !c->broken; i++)
		if (ctxs[i].name[0])
			put_ctx(c, P_ENTRY, f->id, &ctxs[i]);
	conn_send_ok(c, f->id);
}

/* The context a request names: it, or NULL after P_ERROR. */
static struct ctx *named_ctx(struct conn *c, const struct proto_frame *f)
{
	char name[CTX_NAME_MAX + 1];
	int r = proto_get_str(f, A_CONTEXT, name, sizeof(name));
	if (r < 0) {
		conn_send_attr_error(c, f->id, r, "context");
		return NULL;
	}
	struct ctx *x = ctx_find(name);
	if (!x)
		conn_send_error(c, f->id, ENOENT, "no code context '%s'", name);
	return x;
}

void code_ctx_restart(struct conn *c, const struct proto_frame *f)
{
	struct ctx *x = named_ctx(c, f);
	if (!x)
		return;
	ctx_stop(x);
	x->died[0] = '\0';
	char err[PROTO_MAX_STR];
	int r = ctx_start(x, err, sizeof(err));
	if (r < 0)
		conn_send_error(c, f->id, -r, "%s", err);
	else
		put_ctx(c, P_OK, f->id, x);
}

void code_ctx_delete(struct conn *c, const struct proto_frame *f)
{
	struct ctx *x = named_ctx(c, f);
	if (!x)
		return;
	ctx_stop(x);
	memset(x, 0, sizeof(*x));
	conn_send_ok(c, f->id);
}

/* Queues a call for the kernel: the options line, the environment, an empty field, the code,
 * each NUL-terminated (what the scripts in interp/ read). 0 or -ENOMEM. */
static int queue_call(struct conn *c, struct ctx *x, const struct proto_frame *f, const uint8_t *code,
		      uint32_t len, const char *formats, bool counted)
{
	char opts[96];
	int n = snprintf(opts, sizeof(opts), "gen=%u formats=%s count=%d", agent.restores, formats,
			 counted);
	int r = pbuf_append(&x->req, opts, (size_t)n + 1);
	size_t off = 0;
	struct proto_attr a;
	while (r == 0 && proto_next(f, &off, &a) == 1) {
		if (a.tag != A_ENV)
			continue;
		if (a.len == 0 || proto_check_str(&a) < 0 || !memchr(a.val, '=', a.len)) {
			conn_send_error(c, f->id, EINVAL, "env entry '%.*s' is not NAME=value",
					(int)(a.len > 200 ? 200 : a.len), (const char *)a.val);
			return -EINVAL;
		}
		if ((r = pbuf_append(&x->req, a.val, a.len)) == 0)
			r = pbuf_append(&x->req, "", 1);
	}
	if (r == 0)
		r = pbuf_append(&x->req, "", 1);
	if (r == 0)
		r = pbuf_append(&x->req, code, len);
	if (r == 0)
		r = pbuf_append(&x->req, "", 1);
	if (r < 0)
		conn_send_error(c, f->id, ENOMEM, "out of memory");
	return r;
}

static void req_flush(struct ctx *x)
{
	while (x->req_fd >= 0 && x->req.len > x->req_head) {
		ssize_t n = write(x->req_fd, x->req.data + x->req_head, x->req.len - x->req_head);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN) {
				close(x->req_fd); /* EPIPE: the kernel is gone, its end is told */
				x->req_fd = -1;
			}
			return;
		}
		x->req_head += (size_t)n;
	}
	x->req.len = x->req_head = 0;
}

/* The call's options other than the context: 0, or -1 after P_ERROR. */
static int parse_call(struct conn *c, const struct proto_frame *f, const uint8_t **code,
		      uint32_t *len, uint64_t *timeout, char *formats, size_t flen, bool *counted)
{
	*code = proto_get(f, A_CODE, len);
	if (!*code) {
		conn_send_error(c, f->id, EINVAL, "missing attribute 'code'");
		return -1;
	}
	if (memchr(*code, '\0', *len)) {
		conn_send_error(c, f->id, EINVAL, "the code holds a NUL byte");
		return -1;
	}
	int r = proto_get_u64(f, A_TIMEOUT_MS, timeout);
	if (r == -EPROTO) {
		conn_send_attr_error(c, f->id, r, "timeout_ms");
		return -1;
	}
	uint32_t uncounted = 0;
	r = proto_get_u32(f, A_UNCOUNTED, &uncounted);
	if (r == -EPROTO) {
		conn_send_attr_error(c, f->id, r, "uncounted");
		return -1;
	}
	*counted = !uncounted;
	snprintf(formats, flen, "png");
	r = proto_get_str(f, A_FORMATS, formats, flen);
	if (r < 0 && r != -ENOENT) {
		conn_send_attr_error(c, f->id, r, "formats");
		return -1;
	}
	if (strcmp(formats, "png") && strcmp(formats, "svg") && strcmp(formats, "png,svg") &&
	    strcmp(formats, "svg,png")) {
		conn_send_error(c, f->id, EINVAL, "figure formats '%s' are not png, svg or png,svg",
				formats);
		return -1;
	}
	return 0;
}

void code_run(struct conn *c, const struct proto_frame *f)
{
	struct ctx tmpl = {0};
	bool lang_given, restarted = false, counted;
	const uint8_t *code;
	uint32_t len;
	uint64_t timeout = 0;
	char formats[16];
	int64_t window;
	if (parse_ctx(c, f, &tmpl, &lang_given) < 0 ||
	    parse_call(c, f, &code, &len, &timeout, formats, sizeof(formats), &counted) < 0 ||
	    conn_op_window(c, f, &window) < 0)
		return;

	struct ctx *x = ctx_find(tmpl.name);
	if (x && lang_given && x->lang != tmpl.lang) {
		conn_send_error(c, f->id, EINVAL, "code context '%s' is a %s context", x->name,
				x->lang->name);
		return;
	}
	if (x && x->busy) {
		conn_send_error(c, f->id, EBUSY, "code context '%s' is running another call", x->name);
		return;
	}
	if (!x && !(x = ctx_new(c, f->id, &tmpl)))
		return;
	if (!kernel_of(x)) {
		char err[PROTO_MAX_STR];
		close_channels(x);
		x->proc = 0;
		int r = ctx_start(x, err, sizeof(err));
		if (r < 0) {
			conn_send_error(c, f->id, -r, "%s", err);
			return;
		}
		restarted = true;
	}
	struct proc *p = kernel_of(x);
	struct conn_op *op = NULL;
	if (queue_call(c, x, f, code, len, formats, counted) < 0 ||
	    !(op = conn_op_open(c, f->id, OP_CODE))) {
		pbuf_release(&x->req);
		x->req_head = 0;
		return;
	}
	op->proc = p;
	op->credit = window;
	proc_subscribe(p, true);
	x->busy = true;
	x->op = f->id;
	if (timeout)
		x->deadline = clock_ms() + (int64_t)(timeout > INT32_MAX ? INT32_MAX : timeout);

	int r = conn_out_begin(c, P_STARTED, 0, f->id);
	if (r == 0)
		r = proto_put_u32(&c->out, A_PROC, p->id);
	if (r == 0)
		r = proto_put_u32(&c->out, A_PID, (uint32_t)p->pid);
	if (r == 0)
		r = proto_put_str(&c->out, A_LANGUAGE, x->lang->name);
	if (r == 0 && restarted && x->died[0])
		r = proto_put_u32(&c->out, A_RESTARTED, 1);
	if (r == 0 && restarted && x->died[0])
		r = proto_put_str(&c->out, A_MESSAGE, x->died);
	conn_out_end(c, r);
	x->died[0] = '\0';
	req_flush(x);
}

/* --- the kernels' channels --- */

static struct ctx *ctx_of_op(uint32_t id)
{
	for (int i = 0; i < MAX_CTX && id; i++)
		if (ctxs[i].name[0] && ctxs[i].op == id)
			return &ctxs[i];
	return NULL;
}

void code_cancel(struct conn_op *op)
{
	struct ctx *x = ctx_of_op(op->id);
	/* Interrupted now, as at its timeout, so the context is free again soon. */
	if (x && !x->eot && !x->kill_at)
		x->deadline = clock_ms();
}

void code_op_closed(struct conn_op *op)
{
	struct ctx *x = ctx_of_op(op->id);
	if (x)
		x->op = 0;
}

/* Sends kernel events on op, whatever its credit, as exec sends output. */
static void put_events(struct conn *c, struct conn_op *op, const uint8_t *buf, size_t n)
{
	while (n > 0) {
		size_t k = n < PROTO_DATA_CHUNK ? n : PROTO_DATA_CHUNK;
		conn_send_raw(c, P_EVENT, 0, op->id, buf, k);
		op->credit -= proto_cost(k);
		buf += k;
		n -= k;
	}
}

static void read_events(struct ctx *x)
{
	static uint8_t buf[PROTO_DATA_CHUNK];
	ssize_t n = read(x->ev_fd, buf, sizeof(buf));
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		/* The kernel closed it: it is ending, and its end is told then. */
		close(x->ev_fd);
		x->ev_fd = -1;
		return;
	}
	if (!x->busy || x->eot)
		return; /* between calls nothing is asked for: dropped */
	uint8_t *end = memchr(buf, EOT, (size_t)n);
	size_t k = end ? (size_t)(end - buf) : (size_t)n;
	struct conn *c = &agent.conn;
	struct conn_op *op = x->op ? conn_op_find(c, x->op) : NULL;
	if (op && k)
		put_events(c, op, buf, k);
	if (end) {
		x->eot = true;
		x->deadline = x->kill_at = 0;
		x->drain_until = clock_ms() + DRAIN_MS;
	}
}

int code_poll_fill(struct pollfd *pfd, struct code_tag *tag, int max, bool throttled)
{
	struct conn *c = &agent.conn;
	int n = 0;
	for (int i = 0; i < MAX_CTX && n < max; i++) {
		struct ctx *x = &ctxs[i];
		if (!x->name[0])
			continue;
		if (x->ev_fd >= 0) {
			struct conn_op *op = x->busy && x->op ? conn_op_find(c, x->op) : NULL;
			/* A call's events wait for its credit; the rest is read and dropped. */
			if (!op || (!throttled && op->credit > 0)) {
				pfd[n] = (struct pollfd){.fd = x->ev_fd, .events = POLLIN};
				tag[n++] = (struct code_tag){.ctx = i, .what = 0};
			}
		}
		if (x->req_fd >= 0 && x->req.len > x->req_head && n < max) {
			pfd[n] = (struct pollfd){.fd = x->req_fd, .events = POLLOUT};
			tag[n++] = (struct code_tag){.ctx = i, .what = 1};
		}
	}
	return n;
}

void code_poll_event(const struct code_tag *t, short revents)
{
	struct ctx *x = &ctxs[t->ctx];
	if (t->what == 0 && x->ev_fd >= 0)
		read_events(x);
	else if (t->what == 1 && x->req_fd >= 0)
		req_flush(x);
	(void)revents;
}

static void send_end(struct conn *c, struct conn_op *op, bool timed_out, const struct proc *died)
{
	int r = conn_out_begin(c, P_OK, 0, op->id);
	if (r == 0 && timed_out)
		r = proto_put_u32(&c->out, A_TIMED_OUT, 1);
	if (r == 0 && died) {
		char msg[128];
		if (WIFSIGNALED(died->status))
			snprintf(msg, sizeof(msg), "the kernel was killed by signal %d",
				 WTERMSIG(died->status));
		else
			snprintf(msg, sizeof(msg), "the kernel exited with status %d",
				 WEXITSTATUS(died->status));
		r = proto_put_u32(&c->out, A_DIED, 1);
		if (r == 0)
			r = proto_put_str(&c->out, A_MESSAGE, msg);
	}
	conn_out_end(c, r);
	conn_op_close(c, op);
}

void code_pump(struct conn *c)
{
	for (int i = 0; i < MAX_CTX; i++) {
		struct ctx *x = &ctxs[i];
		if (!x->name[0] || !x->busy || !x->eot)
			continue;
		struct conn_op *op = x->op ? conn_op_find(c, x->op) : NULL;
		if (!op) {
			call_done(x); /* over, and nobody to tell */
			continue;
		}
		/* What the kernel printed before it said so is in its pipes: read it first. */
		int d = proc_drain(op->proc, c->throttled);
		if (!x->busy || !(op = conn_op_find(c, x->op)))
			continue; /* the kernel died meanwhile: told by code_proc_ended */
		if (d < 0 || (d == 0 && clock_ms() < x->drain_until))
			continue;
		bool timed_out = x->timed_out;
		call_done(x);
		send_end(c, op, timed_out, NULL);
	}
}

void code_proc_ended(struct conn *c, struct proc *p)
{
	/* Downwards: conn_op_close moves the last entry into the freed slot. */
	for (int i = c->nops - 1; i >= 0; i--) {
		if (i >= c->nops)
			continue;
		struct conn_op *op = c->ops[i];
		if (op->kind != OP_CODE || op->proc != p)
			continue;
		struct ctx *x = ctx_of_op(op->id);
		send_end(c, op, x && x->timed_out, p);
	}
	for (int i = 0; i < MAX_CTX; i++) {
		struct ctx *x = &ctxs[i];
		if (!x->name[0] || x->proc != p->id)
			continue;
		if (WIFSIGNALED(p->status))
			snprintf(x->died, sizeof(x->died), "the kernel had been killed by signal %d",
				 WTERMSIG(p->status));
		else
			snprintf(x->died, sizeof(x->died), "the kernel had exited with status %d",
				 WEXITSTATUS(p->status));
		close_channels(x);
		call_done(x);
		x->proc = 0;
	}
}

int64_t code_next_timer(void)
{
	int64_t t = 0;
	for (int i = 0; i < MAX_CTX; i++) {
		const struct ctx *x = &ctxs[i];
		int64_t due[3] = {x->deadline, x->kill_at, x->eot ? x->drain_until : 0};
		for (int k = 0; k < 3; k++)
			if (due[k] && (!t || due[k] < t))
				t = due[k];
	}
	return t;
}

void code_timers(int64_t now)
{
	for (int i = 0; i < MAX_CTX; i++) {
		struct ctx *x = &ctxs[i];
		if (!x->busy)
			continue;
		struct proc *p = kernel_of(x);
		if (x->deadline && now >= x->deadline) {
			x->deadline = 0;
			/* A timeout's, not a cancel's: the call has an operation to tell. */
			x->timed_out = x->op != 0;
			x->kill_at = now + CODE_GRACE_MS;
			if (p)
				proc_kill(p, SIGINT);
		}
		if (x->kill_at && now >= x->kill_at) {
			x->kill_at = 0;
			if (p)
				proc_kill(p, SIGKILL);
		}
	}
}
