/*
 * sbx_req: what the API asks of a sandbox's agent, typed (struct
 * sbx_request), turned here into the agent's frame (docs/agent-protocol.md):
 * the API never writes one. The sandbox's own environment goes first into
 * every command's, so the command's own wins in the agent.
 */
#include "daemon/sandbox/sbx_impl.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

static const uint16_t frame_type[] = {
	[SBX_EXEC] = P_EXEC,         [SBX_ATTACH] = P_ATTACH,     [SBX_WAIT] = P_WAIT,
	[SBX_SIGNAL] = P_SIGNAL,     [SBX_RESIZE] = P_RESIZE,     [SBX_PS] = P_PS,             [SBX_STAT] = P_STAT,
	[SBX_LIST] = P_LIST,         [SBX_READ] = P_FREAD,        [SBX_WRITE] = P_FWRITE,
	[SBX_MKDIR] = P_MKDIR,       [SBX_RENAME] = P_RENAME,     [SBX_REMOVE] = P_REMOVE,
	[SBX_CODE] = P_CODE,         [SBX_CTX_NEW] = P_CTX_CREATE, [SBX_CTX_LIST] = P_CTX_LIST,
	[SBX_CTX_RESTART] = P_CTX_RESTART, [SBX_CTX_DELETE] = P_CTX_DELETE,
	[SBX_WATCH] = P_WATCH,          [SBX_STATS] = P_STATS,
};

/* A_ENV NAME=value for each pair of a JSON object of strings (the store's
 * form of a sandbox's environment); a pair too long for the protocol is
 * left out, as the create's checks keep it from happening. */
static int put_env_json(struct pbuf *b, const char *json)
{
	json_t *o = json ? json_loads(json, 0, NULL) : NULL;
	const char *k;
	json_t *v;
	int r = 0;
	json_object_foreach(o, k, v) {
		char kv[PROTO_MAX_STR + 1];
		if (!json_is_string(v) ||
		    snprintf(kv, sizeof(kv), "%s=%s", k, json_string_value(v)) >= (int)sizeof(kv))
			continue;
		if ((r = proto_put_str(b, A_ENV, kv)) < 0)
			break;
	}
	json_decref(o);
	return r;
}

static int put_opt_str(struct pbuf *b, uint16_t tag, const char *s)
{
	return s ? proto_put_str(b, tag, s) : 0;
}

static int put_opt_u32(struct pbuf *b, uint16_t tag, uint32_t v)
{
	return v ? proto_put_u32(b, tag, v) : 0;
}

static int put_exec(struct sbx *s, struct pbuf *b, const struct sbx_request *q)
{
	int e = put_opt_str(b, A_SHELL, q->cmd);
	for (size_t i = 0; !e && i < q->argc; i++)
		e = proto_put_str(b, A_ARG, q->argv[i]);
	if (!e)
		e = put_env_json(b, s->env_json);
	for (size_t i = 0; !e && i < q->nenv; i++)
		e = proto_put_str(b, A_ENV, q->env[i]);
	if (!e)
		e = put_opt_str(b, A_CWD, q->cwd ? q->cwd : s->def_cwd[0] ? s->def_cwd : NULL);
	if (!e)
		e = proto_put_str(b, A_USER, q->user ? q->user : s->def_user);
	if (!e && q->timeout_ms)
		e = proto_put_u64(b, A_TIMEOUT_MS, q->timeout_ms);
	/* Background at the agent too: it then keeps the process's output
	 * and exit after the end, for stream, wait and the process list. */
	if (!e && ((q->background && !q->no_stdin) || q->with_stdin))
		e = proto_put_u32(b, A_STDIN, 1);
	if (!e && q->background)
		e = proto_put_u32(b, A_BACKGROUND, 1);
	if (!e && q->rows)
		e = proto_put_u32(b, A_ROWS, q->rows);
	if (!e && q->rows)
		e = proto_put_u32(b, A_COLS, q->cols);
	return e;
}

static int put_attrs(struct sbx *s, struct pbuf *b, const struct sbx_request *q)
{
	int e;
	switch (q->kind) {
	case SBX_EXEC:
		return put_exec(s, b, q);
	case SBX_STATS:
		return 0;
	case SBX_ATTACH:
	case SBX_WAIT:
	case SBX_PS:
		return put_opt_u32(b, A_PROC, q->proc);
	case SBX_SIGNAL:
		e = put_opt_u32(b, A_PROC, q->proc);
		return e ? e : put_opt_u32(b, A_SIGNO, q->signo);
	case SBX_RESIZE:
		if ((e = put_opt_u32(b, A_PROC, q->proc)) || (e = put_opt_u32(b, A_ROWS, q->rows)))
			return e;
		return put_opt_u32(b, A_COLS, q->cols);
	case SBX_STAT:
	case SBX_READ:
		return proto_put_str(b, A_PATH, q->path);
	case SBX_LIST:
		e = proto_put_str(b, A_PATH, q->path);
		return e ? e : proto_put_u32(b, A_DEPTH, q->depth ? q->depth : 1);
	case SBX_WRITE:
		if ((e = proto_put_str(b, A_PATH, q->path)) || (e = proto_put_u32(b, A_MODE, q->mode)))
			return e;
		return proto_put_str(b, A_USER, q->user ? q->user : s->def_user);
	case SBX_MKDIR:
		if ((e = proto_put_str(b, A_PATH, q->path)) || (e = proto_put_u32(b, A_MODE, q->mode)) ||
		    (e = proto_put_u32(b, A_PARENTS, (uint32_t)q->parents)))
			return e;
		return proto_put_str(b, A_USER, q->user ? q->user : s->def_user);
	case SBX_RENAME:
		e = proto_put_str(b, A_PATH, q->path);
		return e ? e : proto_put_str(b, A_PATH2, q->path2);
	case SBX_REMOVE:
	case SBX_WATCH:
		e = proto_put_str(b, A_PATH, q->path);
		return e ? e : proto_put_u32(b, A_RECURSIVE, (uint32_t)q->recursive);
	case SBX_CODE:
		if ((e = proto_put_str(b, A_CONTEXT, q->context)) ||
		    (e = put_opt_str(b, A_LANGUAGE, q->language)) ||
		    (e = proto_put(b, A_CODE, q->code, strlen(q->code))) ||
		    (e = put_env_json(b, s->env_json)) ||
		    (e = proto_put_str(b, A_USER, q->user ? q->user : s->def_user)))
			return e;
		if (q->timeout_ms && (e = proto_put_u64(b, A_TIMEOUT_MS, q->timeout_ms)))
			return e;
		return put_opt_str(b, A_FORMATS, q->formats);
	case SBX_CTX_NEW:
	case SBX_CTX_LIST:
	case SBX_CTX_RESTART:
	case SBX_CTX_DELETE:
		if ((e = put_opt_str(b, A_CONTEXT, q->context)) ||
		    (e = put_opt_str(b, A_LANGUAGE, q->language)) || (e = put_opt_str(b, A_CWD, q->cwd)))
			return e;
		return put_opt_str(b, A_USER, q->user);
	}
	return -EINVAL;
}

int sbx_request(struct sbx *s, struct sop *op, const struct sbx_request *q)
{
	if ((unsigned)q->kind >= sizeof(frame_type) / sizeof(frame_type[0]) ||
	    ((q->kind == SBX_STAT || q->kind == SBX_READ || q->kind == SBX_LIST ||
	      q->kind == SBX_WRITE || q->kind == SBX_MKDIR || q->kind == SBX_RENAME ||
	      q->kind == SBX_REMOVE || q->kind == SBX_WATCH) && !q->path) ||
	    (q->kind == SBX_RENAME && !q->path2) ||
	    (q->kind == SBX_CODE && (!q->context || !q->code)) ||
	    (q->kind == SBX_EXEC && !q->cmd == !q->argc))
		return -EINVAL;
	if (q->kind == SBX_LIST && sop_set_base(op, q->path) < 0)
		return -ENOMEM;
	if (q->kind == SBX_CODE && sop_code_begin(op, q->context, q->language) < 0)
		return -ENOMEM;
	int err;
	struct pbuf *b = sbx_begin(s, frame_type[q->kind], op, &err);
	if (!b)
		return err;
	if (put_attrs(s, b, q) < 0) {
		/* never send a request with attributes missing */
		sbx_abort(s, op);
		return -E2BIG;
	}
	/* A frame over the cap fails here and the operation is dropped. */
	return sbx_end(s, op) < 0 ? -E2BIG : 0;
}
