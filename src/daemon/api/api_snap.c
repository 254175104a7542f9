/*
 * api_snap: pause, resume, fork and checkpoints (docs/api.md). The work is
 * the sandbox manager's (sbx_snap.c); here are the checks, the account
 * rules (another account's sandbox or checkpoint is 404) and the answers.
 */
#include "daemon/api/api.h"

#include "common/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FORKS 16

/* A session id names its sandbox: ses_X is sbx_X. */
static void session_to_id(struct req *r)
{
	if (!strncmp(r->param[0], "ses_", 4))
		memcpy(r->param[0], "sbx_", 4);
}

static int reply_row(struct req *r, int status)
{
	struct store_sbx row;
	if (api_row(r, &row) < 0)
		return 0;
	reply_json(r, status, api_sandbox_json(r, &row));
	store_sbx_release(&row);
	return 0;
}

/* Pause and resume: the same checks, then the manager's call. */
static int transition(struct req *r, int (*call)(struct sbx_mgr *, const char *, char *, size_t))
{
	session_to_id(r);
	struct store_sbx row;
	if (api_row(r, &row) < 0)
		return 0;
	store_sbx_release(&row);
	char err[512] = "";
	int e = call(r->api->sbx, r->param[0], err, sizeof(err));
	if (e < 0)
		return api_resume_error(r, e, err);
	return reply_row(r, 200);
}

int api_sbx_pause(struct req *r)
{
	return transition(r, sbx_pause);
}

int api_sbx_resume(struct req *r)
{
	return transition(r, sbx_resume);
}

int api_sbx_fork(struct req *r)
{
	long long n = 1;
	if (api_uint(r, "count", 1, MAX_FORKS, &n) < 0)
		return 0;
	struct sbx *s = api_sbx(r); /* resumes a paused parent */
	if (!s)
		return 0;
	sbx_put(s);
	struct store_sbx rows[MAX_FORKS];
	char err[512];
	int e = sbx_fork(r->api->sbx, r->param[0], (unsigned)n, rows, err, sizeof(err));
	if (e < 0)
		return api_resume_error(r, e, err);
	json_t *arr = json_array();
	for (long long i = 0; i < n; i++) {
		json_array_append_new(arr, api_sandbox_json(r, &rows[i]));
		store_sbx_release(&rows[i]);
	}
	return reply_json(r, 201, json_pack("{s:o}", "sandboxes", arr));
}

static int name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n < 1 || n > 64)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
		      *s == '.' || *s == '_' || *s == '-'))
			return 0;
	return 1;
}

static json_t *ckpt_json(const struct store_ckpt *c)
{
	char when[CLOCK_RFC3339_LEN];
	clock_rfc3339(c->created_at, when, sizeof(when));
	return json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:I, s:s, s:b}", "id", c->id, "name",
			 c->name, "sandbox_id", c->sbx_id, "template", c->template, "vcpus",
			 (int)c->vcpus, "memory_mb", (int)c->memory_mb, "disk_mb", (int)c->disk_mb,
			 "size_bytes", (json_int_t)c->size_bytes, "created_at", when, "stored",
			 c->stored[0] != '\0');
}

int api_ckpt_create(struct req *r)
{
	const char *name = NULL;
	if (api_str(r, "name", 64, &name) < 0)
		return 0;
	if (!name || !name_ok(name))
		return reply_error(r, 422, "invalid_argument",
				   "'name' must be 1 to 64 characters of A-Z a-z 0-9 . _ -");
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	sbx_put(s);
	struct store_ckpt c;
	char err[512];
	int e = sbx_checkpoint(r->api->sbx, r->param[0], name, &c, err, sizeof(err));
	if (e == -EEXIST)
		return reply_error(r, 409, "conflict", "%s", err);
	if (e < 0)
		return api_resume_error(r, e, err);
	reply_json(r, 201, ckpt_json(&c));
	store_ckpt_release(&c);
	return 0;
}

int api_ckpt_list(struct req *r)
{
	struct store_ckpt *cs;
	size_t n;
	if (store_ckpt_list(r->api->store, r->admin ? NULL : r->account, &cs, &n) < 0)
		return reply_error(r, 500, "internal", "cannot list checkpoints");
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, ckpt_json(&cs[i]));
	store_ckpt_free_list(cs, n);
	return reply_json(r, 200, json_pack("{s:o}", "checkpoints", arr));
}

static int find_ckpt(struct req *r, struct store_ckpt *c)
{
	if (store_ckpt_get(r->api->store, r->admin ? NULL : r->account, r->param[0], c) == 0)
		return 0;
	reply_error(r, 404, "not_found", "no checkpoint '%s'", r->param[0]);
	return -ENOENT;
}

int api_ckpt_get(struct req *r)
{
	struct store_ckpt c;
	if (find_ckpt(r, &c) < 0)
		return 0;
	reply_json(r, 200, ckpt_json(&c));
	store_ckpt_release(&c);
	return 0;
}

int api_ckpt_delete(struct req *r)
{
	struct store_ckpt c;
	if (find_ckpt(r, &c) < 0)
		return 0;
	sbx_ckpt_delete(r->api->sbx, &c);
	store_ckpt_release(&c);
	return reply_empty(r, 204);
}
