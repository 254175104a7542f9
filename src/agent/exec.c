/*
 * exec: the process requests (EXEC, ATTACH, WAIT, SIGNAL, PS) and the delivery
 * of a process's output and exit to the operations subscribed to it.
 */
#include "agent/exec.h"

#include "agent/agent.h"
#include "agent/code.h"
#include "agent/conn.h"
#include "agent/proc.h"
#include "agent/user.h"
#include "common/proto.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BASE_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

static void put_exit(struct conn *c, uint32_t id, const struct proc *p)
{
	int r = conn_out_begin(c, P_EXIT, 0, id);
	if (r == 0) {
		if (WIFSIGNALED(p->status))
			r = proto_put_u32(&c->out, A_SIGNAL, (uint32_t)WTERMSIG(p->status));
		else
			r = proto_put_u32(&c->out, A_EXIT_CODE, (uint32_t)WEXITSTATUS(p->status));
	}
	if (r == 0 && p->timed_out)
		r = proto_put_u32(&c->out, A_TIMED_OUT, 1);
	conn_out_end(c, r);
}

static void put_started(struct conn *c, uint16_t type, uint32_t id, const struct proc *p)
{
	int r = conn_out_begin(c, type, 0, id);
	if (r == 0)
		r = proto_put_u32(&c->out, A_PROC, p->id);
	if (r == 0)
		r = proto_put_u32(&c->out, A_PID, (uint32_t)p->pid);
	if (r == 0 && p->pty)
		r = proto_put_u32(&c->out, A_PTY, 1);
	conn_out_end(c, r);
}

/* Sends output on op, whatever its credit: bytes read from a pipe must go
 * out. Credit decides whether the pipe is read at all (exec_can_send). */
static void put_output(struct conn *c, struct conn_op *op, int stream, const uint8_t *buf, size_t n)
{
	uint16_t type = stream ? P_STDERR : P_STDOUT;
	while (n > 0) {
		size_t k = n < PROTO_DATA_CHUNK ? n : PROTO_DATA_CHUNK;
		conn_send_raw(c, type, 0, op->id, buf, k);
		op->credit -= proto_cost(k);
		buf += k;
		n -= k;
	}
}

/* Does op receive its process's output? (A code call gets its kernel's.) */
static bool streams(const struct conn_op *op)
{
	return op->kind == OP_EXEC || op->kind == OP_ATTACH || op->kind == OP_CODE;
}

bool exec_can_send(const struct proc *p)
{
	const struct conn *c = &agent.conn;
	if (p->nstream == 0)
		return true;
	for (int i = 0; i < c->nops; i++) {
		const struct conn_op *op = c->ops[i];
		if (op->proc == p && streams(op) && op->credit <= 0)
			return false;
	}
	return true;
}

void exec_output(struct proc *p, int stream, const uint8_t *buf, size_t n)
{
	struct conn *c = &agent.conn;
	if (p->nstream == 0)
		return;
	for (int i = 0; i < c->nops; i++) {
		struct conn_op *op = c->ops[i];
		if (op->proc == p && streams(op))
			put_output(c, op, stream, buf, n);
	}
}

void exec_ended(struct proc *p)
{
	struct conn *c = &agent.conn;
	bool told = false;
	/* Downwards: conn_op_close moves the last entry into the freed slot. */
	for (int i = c->nops - 1; i >= 0; i--) {
		if (i >= c->nops)
			continue;
		struct conn_op *op = c->ops[i];
		if (op->proc != p || op->kind > OP_WAIT)
			continue;
		put_exit(c, op->id, p);
		conn_op_close(c, op);
		told = true;
	}
	/* A foreground exec's process is done with once its exit was told;
	 * a background one stays (output and status) for later attach, wait
	 * and ps, until newer exits evict it. */
	if (told && !p->background)
		proc_collect(p);
	code_proc_ended(c, p);
}

/* Replays the kept output of p to op (the host gives a window it fits in). */
static void replay(struct conn *c, struct conn_op *op, const struct proc *p)
{
	for (int s = 0; s < 2; s++) {
		const uint8_t *span[2];
		size_t len[2];
		proc_ring_spans(&p->ring[s], span, len);
		for (int k = 0; k < 2; k++)
			put_output(c, op, s, span[k], len[k]);
	}
}

/* --- EXEC --- */

const char *exec_base_path(void)
{
	return BASE_PATH + 5;
}

void exec_base_env(struct exec_env *e, const struct user *u)
{
	snprintf(e->home, sizeof(e->home), "HOME=%s", u->home);
	snprintf(e->user, sizeof(e->user), "USER=%s", u->name);
	snprintf(e->logname, sizeof(e->logname), "LOGNAME=%s", u->name);
	char *v[] = {BASE_PATH, e->home, e->user, e->logname, "LANG=C.UTF-8", "TERM=xterm", NULL};
	memcpy(e->v, v, sizeof(v));
}

/* A_ROWS and A_COLS: both or (unless required) neither, each 1 to
 * MAX_TERM_SIZE. 0, or -1 after P_ERROR. */
static int get_size(struct conn *c, const struct proto_frame *f, uint16_t *rows, uint16_t *cols,
		    bool required)
{
	uint32_t v[2];
	int r[2] = {proto_get_u32(f, A_ROWS, &v[0]), proto_get_u32(f, A_COLS, &v[1])};
	static const char *const what[2] = {"rows", "cols"};
	for (int i = 0; i < 2; i++) {
		if (r[i] == -EPROTO) {
			conn_send_attr_error(c, f->id, r[i], what[i]);
			return -1;
		}
		if (r[i] == 0 && (v[i] == 0 || v[i] > MAX_TERM_SIZE)) {
			conn_send_error(c, f->id, EINVAL, "'%s' must be 1 to %d", what[i],
					MAX_TERM_SIZE);
			return -1;
		}
	}
	if (r[0] != r[1] || (required && r[0] < 0)) {
		conn_send_error(c, f->id, EINVAL, "give both 'rows' and 'cols'");
		return -1;
	}
	*rows = r[0] == 0 ? (uint16_t)v[0] : 0;
	*cols = r[1] == 0 ? (uint16_t)v[1] : 0;
	return 0;
}

struct exec_req {
	char *argv[MAX_ARGS + 4];
	int argc;
	char *env[MAX_ARGS + 8];
	int envc;
	char cmd[CMD_MAX + 1];
	struct user user;
	char cwd[PROTO_MAX_STR + 1];
	struct exec_env base;
};

/* Copies a validated string attribute: NULL when out of memory. */
static char *attr_dup(const struct proto_attr *a)
{
	char *s = malloc(a->len + 1);
	if (s) {
		memcpy(s, a->val, a->len);
		s[a->len] = '\0';
	}
	return s;
}

static void add_cmd(char *cmd, const char *s)
{
	size_t n = strlen(cmd);
	if (n && n < CMD_MAX)
		cmd[n++] = ' ';
	while (*s && n < CMD_MAX)
		cmd[n++] = *s++;
	cmd[n] = '\0';
}

/* Sets NAME=value in env, replacing an earlier entry of the same name. */
static void env_set(struct exec_req *x, char *entry)
{
	size_t k = (size_t)(strchr(entry, '=') - entry);
	for (int i = 0; i < x->envc; i++) {
		if (strncmp(x->env[i], entry, k + 1) == 0) {
			x->env[i] = entry;
			return;
		}
	}
	x->env[x->envc++] = entry;
	x->env[x->envc] = NULL;
}

/* Fills x from the frame; on error sends P_ERROR and returns -1. Strings the
 * request owns go to owned[] (*nowned of them), which the caller frees even
 * after an error. */
static int parse_exec(struct conn *c, const struct proto_frame *f, struct exec_req *x, char **owned,
		      int *nowned)
{
	size_t off = 0;
	struct proto_attr a;
	int nargs = 0, nenv = 0, nshell = 0;
	while (proto_next(f, &off, &a) == 1) {
		if (a.tag != A_ARG && a.tag != A_ENV && a.tag != A_SHELL)
			continue;
		const char *what = a.tag == A_ARG ? "arg" : a.tag == A_ENV ? "env" : "shell";
		int r = proto_check_str(&a);
		if (r < 0) {
			conn_send_attr_error(c, f->id, r, what);
			return -1;
		}
		if ((a.tag == A_ARG && ++nargs > MAX_ARGS) ||
		    (a.tag == A_ENV && ++nenv > MAX_ARGS)) {
			conn_send_error(c, f->id, E2BIG, "too many '%s' attributes (max %d)", what,
					MAX_ARGS);
			return -1;
		}
		if (a.tag == A_SHELL && ++nshell > 1) {
			conn_send_error(c, f->id, EINVAL, "more than one 'shell' attribute");
			return -1;
		}
		if (a.tag == A_ENV &&
		    (!memchr(a.val, '=', a.len) || a.len == 0 || a.val[0] == '=')) {
			conn_send_error(c, f->id, EINVAL, "env entry '%.*s' is not NAME=value",
					(int)(a.len > 200 ? 200 : a.len), (const char *)a.val);
			return -1;
		}
		char *s = attr_dup(&a);
		if (!s) {
			conn_send_error(c, f->id, ENOMEM, "out of memory");
			return -1;
		}
		owned[(*nowned)++] = s;
		if (a.tag == A_ENV)
			continue; /* applied after the base environment */
		if (a.tag == A_SHELL) {
			x->argv[0] = "/bin/sh";
			x->argv[1] = "-c";
			x->argv[2] = s;
			x->argv[3] = NULL;
			snprintf(x->cmd, sizeof(x->cmd), "%s", s);
		} else if (!nshell) {
			x->argv[x->argc++] = s;
			x->argv[x->argc] = NULL;
			add_cmd(x->cmd, s);
		}
	}
	if (nshell && nargs) {
		conn_send_error(c, f->id, EINVAL, "both 'arg' and 'shell' given");
		return -1;
	}
	if (!nshell && !nargs) {
		conn_send_error(c, f->id, EINVAL, "missing attribute 'arg' or 'shell'");
		return -1;
	}
	if (!nshell && x->argv[0][0] == '\0') {
		conn_send_error(c, f->id, EINVAL, "empty program name");
		return -1;
	}
	return 0;
}

void exec_run(struct conn *c, const struct proto_frame *f)
{
	struct exec_req *x = calloc(1, sizeof(*x));
	char **owned = calloc(2 * MAX_ARGS + 2, sizeof(char *));
	int nowned = 0;
	if (!x || !owned) {
		conn_send_error(c, f->id, ENOMEM, "out of memory");
		goto out;
	}
	if (parse_exec(c, f, x, owned, &nowned) < 0)
		goto out;

	char name[256] = "root";
	int r = proto_get_str(f, A_USER, name, sizeof(name));
	if (r < 0 && r != -ENOENT) {
		conn_send_attr_error(c, f->id, r, "user");
		goto out;
	}
	r = user_lookup(name, &x->user);
	if (r < 0) {
		if (r == -ENOENT)
			conn_send_error(c, f->id, EINVAL, "unknown user '%s'", name);
		else
			conn_send_error(c, f->id, -r, "cannot read '/etc/passwd': %s",
					strerror(-r));
		goto out;
	}
	bool setids = geteuid() == 0;
	if (!setids && x->user.uid != geteuid()) {
		conn_send_error(c, f->id, EPERM, "cannot run as '%s': agent is not root", name);
		goto out;
	}

	uint64_t timeout = 0;
	uint32_t want_stdin = 0, background = 0;
	if ((r = proto_get_u64(f, A_TIMEOUT_MS, &timeout)) == -EPROTO) {
		conn_send_attr_error(c, f->id, r, "timeout_ms");
		goto out;
	}
	if ((r = proto_get_u32(f, A_STDIN, &want_stdin)) == -EPROTO) {
		conn_send_attr_error(c, f->id, r, "stdin");
		goto out;
	}
	if ((r = proto_get_u32(f, A_BACKGROUND, &background)) == -EPROTO) {
		conn_send_attr_error(c, f->id, r, "background");
		goto out;
	}
	uint16_t rows = 0, cols = 0;
	if (get_size(c, f, &rows, &cols, false) < 0)
		goto out;

	r = proto_get_str(f, A_CWD, x->cwd, sizeof(x->cwd));
	if (r < 0 && r != -ENOENT) {
		conn_send_attr_error(c, f->id, r, "cwd");
		goto out;
	}
	struct stat st;
	if (r == -ENOENT) {
		/* The user's home, or / when the image lacks it. */
		snprintf(x->cwd, sizeof(x->cwd), "%s", x->user.home);
		if (stat(x->cwd, &st) < 0 || !S_ISDIR(st.st_mode))
			strcpy(x->cwd, "/");
	} else if (x->cwd[0] != '/') {
		conn_send_error(c, f->id, EINVAL, "cwd '%s' is not absolute", x->cwd);
		goto out;
	} else if (stat(x->cwd, &st) < 0) {
		conn_send_error(c, f->id, errno, "cannot use cwd '%s': %s", x->cwd,
				strerror(errno));
		goto out;
	} else if (!S_ISDIR(st.st_mode)) {
		conn_send_error(c, f->id, ENOTDIR, "cannot use cwd '%s': %s", x->cwd,
				strerror(ENOTDIR));
		goto out;
	}

	exec_base_env(&x->base, &x->user);
	for (char **v = x->base.v; *v; v++)
		env_set(x, *v);
	if (rows)
		env_set(x, "TERM=xterm-256color"); /* what xterm.js and most terminals are */
	size_t off = 0;
	struct proto_attr a;
	int k = 0;
	while (proto_next(f, &off, &a) == 1) {
		if (a.tag == A_ARG || a.tag == A_SHELL)
			k++;
		else if (a.tag == A_ENV)
			env_set(x, owned[k++]);
	}

	int64_t window;
	if (conn_op_window(c, f, &window) < 0)
		goto out;
	struct conn_op *op = NULL;
	if (!background && !(op = conn_op_open(c, f->id, OP_EXEC)))
		goto out;
	if (op)
		op->credit = window;
	struct proc_spawn_args sp = {
	    .argv = x->argv,
	    .env = x->env,
	    .cwd = x->cwd,
	    .user = &x->user,
	    .setids = setids,
	    .want_stdin = want_stdin != 0,
	    .rows = rows,
	    .cols = cols,
	    .timeout_ms = timeout,
	    .cmd = x->cmd,
	};
	struct proc *p;
	r = proc_spawn(&sp, &p);
	if (r < 0) {
		if (op)
			conn_op_close(c, op);
		if (r == -EAGAIN)
			conn_send_error(c, f->id, EAGAIN, "too many processes (%d)", MAX_PROCS);
		else
			conn_send_error(c, f->id, -r, "cannot start '%s': %s", x->argv[0],
					strerror(-r));
		goto out;
	}
	p->background = background != 0;
	if (background) {
		put_started(c, P_OK, f->id, p);
	} else {
		op->proc = p;
		proc_subscribe(p, true);
		put_started(c, P_STARTED, f->id, p);
	}
out:
	for (int i = 0; i < nowned; i++)
		free(owned[i]);
	free(owned);
	free(x);
}

/* --- ATTACH, WAIT, SIGNAL, PS --- */

static struct proc *get_proc(struct conn *c, const struct proto_frame *f)
{
	uint32_t id;
	int r = proto_get_u32(f, A_PROC, &id);
	if (r < 0) {
		conn_send_attr_error(c, f->id, r, "proc");
		return NULL;
	}
	struct proc *p = proc_find(id);
	if (!p)
		conn_send_error(c, f->id, ESRCH, "no process %u", id);
	return p;
}

void exec_attach(struct conn *c, const struct proto_frame *f)
{
	struct proc *p = get_proc(c, f);
	if (!p)
		return;
	int64_t window;
	if (conn_op_window(c, f, &window) < 0)
		return;
	struct conn_op *op = conn_op_open(c, f->id, OP_ATTACH);
	if (!op)
		return;
	op->proc = p;
	op->credit = window;
	proc_subscribe(p, true);
	put_started(c, P_STARTED, f->id, p);
	replay(c, op, p);
	if (p->ended)
		exec_ended(p);
}

void exec_wait(struct conn *c, const struct proto_frame *f)
{
	struct proc *p = get_proc(c, f);
	if (!p)
		return;
	struct conn_op *op = conn_op_open(c, f->id, OP_WAIT);
	if (!op)
		return;
	op->proc = p;
	proc_subscribe(p, false);
	if (p->ended)
		exec_ended(p);
}

void exec_signal(struct conn *c, const struct proto_frame *f)
{
	uint32_t sig;
	int r = proto_get_u32(f, A_SIGNO, &sig);
	if (r < 0) {
		conn_send_attr_error(c, f->id, r, "signo");
		return;
	}
	if (sig > (uint32_t)SIGRTMAX) {
		conn_send_error(c, f->id, EINVAL, "invalid signal %u", sig);
		return;
	}
	struct proc *p = get_proc(c, f);
	if (!p)
		return;
	r = proc_kill(p, (int)sig);
	if (r < 0)
		conn_send_error(c, f->id, -r, "cannot signal process %u: %s", p->id, strerror(-r));
	else
		conn_send_ok(c, f->id);
}

void exec_ps(struct conn *c, const struct proto_frame *f)
{
	for (struct proc *p = proc_next(NULL); p && !c->broken; p = proc_next(p)) {
		int r = conn_out_begin(c, P_ENTRY, 0, f->id);
		if (r == 0)
			r = proto_put_u32(&c->out, A_PROC, p->id);
		if (r == 0)
			r = proto_put_u32(&c->out, A_PID, (uint32_t)p->pid);
		if (r == 0)
			r = proto_put_u32(&c->out, A_STATE, p->ended ? PS_EXITED : PS_RUNNING);
		if (r == 0)
			r = proto_put_str(&c->out, A_CMD, p->cmd);
		if (r == 0 && p->ended) {
			if (WIFSIGNALED(p->status))
				r = proto_put_u32(&c->out, A_SIGNAL, (uint32_t)WTERMSIG(p->status));
			else
				r = proto_put_u32(&c->out, A_EXIT_CODE,
						  (uint32_t)WEXITSTATUS(p->status));
		}
		if (r == 0 && p->timed_out)
			r = proto_put_u32(&c->out, A_TIMED_OUT, 1);
		if (r == 0 && p->pty)
			r = proto_put_u32(&c->out, A_PTY, 1);
		conn_out_end(c, r);
	}
	conn_send_ok(c, f->id);
}

void exec_resize(struct conn *c, const struct proto_frame *f)
{
	uint16_t rows, cols;
	if (get_size(c, f, &rows, &cols, true) < 0)
		return;
	struct proc *p = get_proc(c, f);
	if (!p)
		return;
	int r = proc_resize(p, rows, cols);
	if (r == -ENOTTY)
		conn_send_error(c, f->id, ENOTTY, "process %u has no terminal", p->id);
	else if (r < 0)
		conn_send_error(c, f->id, -r, "cannot resize the terminal of process %u: %s", p->id,
				strerror(-r));
	else
		conn_send_ok(c, f->id);
}
