/*
 * interp: the code interpreter's port (49999) on cpuosd's /code: POST
 * /execute streams NDJSON lines as E2B's interpreter writes them (stdout
 * and stderr as {"type", "text", "timestamp"}, results as they are, the
 * error, then the execution count), and /contexts maps onto cpuosd's
 * contexts. The answer's status waits for cpuosd's, so that a refusal
 * (a busy context, an unknown language) is an HTTP error, not a cut
 * stream.
 */
#include "cli/cpuos/http.h"
#include "common/clock.h"
#include "e2b/e2b.h"
#include "e2b/rpc.h"
#include "lib/httpd.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct exec {
	struct api *a;
	struct apath path;
	json_t *body;
	int fd;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int state; /* 0 waiting, 1 open, -1 failed */
	int refs;
};

static void exec_unref(struct exec *x)
{
	pthread_mutex_lock(&x->mu);
	int last = --x->refs == 0;
	pthread_mutex_unlock(&x->mu);
	if (!last)
		return;
	if (x->fd >= 0)
		close(x->fd);
	api_free(x->a);
	json_decref(x->body);
	pthread_cond_destroy(&x->cv);
	pthread_mutex_destroy(&x->mu);
	free(x);
}

static void set_state(struct exec *x, int st)
{
	pthread_mutex_lock(&x->mu);
	if (!x->state)
		x->state = st;
	pthread_cond_broadcast(&x->cv);
	pthread_mutex_unlock(&x->mu);
}

/* One NDJSON line of E2B's (json stolen), newline-ended. */
static int put_line(int fd, json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		return -ENOMEM;
	size_t n = strlen(s);
	s[n] = '\n'; /* json_dumps' NUL becomes the line's end */
	int rc = pump_put(fd, s, n + 1);
	free(s);
	return rc;
}

static int exec_line(void *arg, const char *line, size_t n)
{
	struct exec *x = arg;
	if (!line) {
		set_state(x, 1);
		return 0;
	}
	json_t *j = json_loadb(line, n, 0, NULL), *out = NULL;
	const char *type = json_string_value(json_object_get(j, "type"));
	if (!type) {
		json_decref(j);
		return 0;
	}
	if (!strcmp(type, "stdout") || !strcmp(type, "stderr")) {
		out = json_pack("{s:s, s:O?, s:I}", "type", type, "text", json_object_get(j, "data"),
				"timestamp", (json_int_t)clock_realtime_ns());
	} else if (!strcmp(type, "result") || !strcmp(type, "error")) {
		out = json_incref(j); /* the same fields, is_main_result as E2B spells it */
	} else if (!strcmp(type, "end")) {
		out = json_pack("{s:s, s:O?}", "type", "number_of_executions", "execution_count",
				json_object_get(j, "execution_count"));
	}
	json_decref(j);
	return out && put_line(x->fd, out) < 0 ? -EPIPE : 0;
}

static int exec_tick(void *arg)
{
	(void)arg;
	return atomic_load(&e2b_stopping) ? -ESHUTDOWN : 0;
}

static void exec_run(void *arg)
{
	struct exec *x = arg;
	int rc = api_post_lines(x->a, &x->path, x->body, exec_line, exec_tick, x);
	/* A stream cut after it opened (the sandbox died, cpuosd went away)
	 * says so: E2B's protocol has no end line to miss. */
	if (rc < 0 && rc != -EPIPE && x->state > 0)
		put_line(x->fd, json_pack("{s:s, s:s, s:s}", "type", "error", "name", "StreamCut",
					  "value", api_error(x->a), "traceback", ""));
	set_state(x, -1); /* no effect once open */
	close(x->fd);
	x->fd = -1;
	exec_unref(x);
}

static void code_path(struct apath *p, const char *id, const char *sub)
{
	char sbx[24];
	snprintf(sbx, sizeof(sbx), "sbx_%s", id);
	apath_init(p, "/v1/sandboxes");
	apath_seg(p, sbx);
	apath_add(p, sub);
}

static json_t *body_of(struct httpd_req *r)
{
	json_t *b = r->len ? json_loadb(r->body, r->len, 0, NULL) : json_object();
	if (!json_is_object(b)) {
		json_decref(b);
		e2b_reply_error(r, 400, "the body is not a JSON object");
		return NULL;
	}
	return b;
}

static int execute(struct httpd_req *r)
{
	struct e2b *g = r->arg;
	struct e2b_req *q = r->app;
	json_t *b = body_of(r);
	struct exec *x = NULL;
	int fds[2];
	if (!b)
		return 0;
	const char *code = json_string_value(json_object_get(b, "code"));
	if (!code) {
		json_decref(b);
		return e2b_reply_error(r, 400, "code is required");
	}
	if (!(x = calloc(1, sizeof(*x))) || e2b_api(r, &x->a) < 0 ||
	    pipe2(fds, O_CLOEXEC) < 0) {
		if (x)
			api_free(x->a);
		free(x);
		json_decref(b);
		return e2b_reply_error(r, 500, "cannot start the execution");
	}
	x->fd = fds[1];
	x->refs = 2;
	pthread_mutex_init(&x->mu, NULL);
	pthread_cond_init(&x->cv, NULL);
	x->body = json_pack("{s:s, s:b}", "code", code, "stream", 1);
	const char *ctx = json_string_value(json_object_get(b, "context_id"));
	const char *lang = json_string_value(json_object_get(b, "language"));
	if (ctx)
		json_object_set_new(x->body, "context", json_string(ctx));
	if (lang)
		json_object_set_new(x->body, "language", json_string(lang));
	json_decref(b);
	code_path(&x->path, q->id, "/code");
	if (workers_spawn(&g->pumps, exec_run, x) < 0) {
		x->refs = 1;
		exec_unref(x);
		close(fds[0]);
		return e2b_reply_error(r, 503, "cannot start the execution");
	}
	pthread_mutex_lock(&x->mu);
	while (!x->state)
		pthread_cond_wait(&x->cv, &x->mu);
	int st = x->state;
	pthread_mutex_unlock(&x->mu);
	if (st > 0) {
		httpd_reply_fd(r, 200, "application/x-ndjson", fds[0]);
	} else {
		close(fds[0]);
		/* the worker is done with the handle once it failed */
		if (api_status(x->a) || api_error(x->a)[0])
			e2b_reply_api_error(r, x->a);
		else
			e2b_reply_error(r, 500, "the execution did not start");
	}
	exec_unref(x);
	return 0;
}

/* A context in E2B's shape: {id, language, cwd}. */
static json_t *context_of(json_t *c)
{
	return json_pack("{s:O?, s:O?, s:O?}", "id", json_object_get(c, "id"), "language",
			 json_object_get(c, "language"), "cwd", json_object_get(c, "cwd"));
}

static int ctx_call(struct httpd_req *r, const char *method, const char *sub, json_t *body,
		    json_t **out)
{
	struct e2b_req *q = r->app;
	struct api *a;
	struct apath p;
	code_path(&p, q->id, "/code/contexts");
	if (sub)
		apath_seg(&p, sub);
	if (sub && !strcmp(method, "POST"))
		apath_add(&p, "/restart");
	if (e2b_api(r, &a) < 0) {
		e2b_reply_error(r, 500, "out of memory");
		return -1;
	}
	int rc = api_json(a, method, &p, body, out);
	if (rc < 0)
		e2b_reply_api_error(r, a);
	api_free(a);
	return rc < 0 ? -1 : 0;
}

static int ctx_create(struct httpd_req *r)
{
	json_t *b = body_of(r), *out = NULL, *req;
	if (!b)
		return 0;
	req = json_object();
	json_t *v;
	if ((v = json_object_get(b, "language")) && json_is_string(v))
		json_object_set(req, "language", v);
	if ((v = json_object_get(b, "cwd")) && json_is_string(v))
		json_object_set(req, "cwd", v);
	if (ctx_call(r, "POST", NULL, req, &out) == 0)
		e2b_reply_json(r, 200, context_of(out));
	json_decref(b), json_decref(req), json_decref(out);
	return 0;
}

static int ctx_list(struct httpd_req *r)
{
	json_t *out = NULL, *arr, *c;
	size_t i;
	if (ctx_call(r, "GET", NULL, NULL, &out) < 0)
		return 0;
	arr = json_array();
	json_array_foreach(json_object_get(out, "contexts"), i, c)
		json_array_append_new(arr, context_of(c));
	json_decref(out);
	return e2b_reply_json(r, 200, arr);
}

static int ctx_restart(struct httpd_req *r)
{
	json_t *out = NULL;
	if (ctx_call(r, "POST", r->param[0], NULL, &out) == 0)
		e2b_reply_json(r, 200, json_object());
	json_decref(out);
	return 0;
}

static int ctx_delete(struct httpd_req *r)
{
	if (ctx_call(r, "DELETE", r->param[0], NULL, NULL) == 0)
		httpd_reply_empty(r, 204);
	return 0;
}

static int health(struct httpd_req *r)
{
	return httpd_reply_empty(r, 204);
}

const struct httpd_route e2b_interp_routes[] = {
	{ "GET", "/health", HTTPD_OPEN, health, e2b_auth_none },
	{ "POST", "/execute", HTTPD_OPEN, execute, NULL },
	{ "POST", "/contexts", HTTPD_OPEN, ctx_create, NULL },
	{ "GET", "/contexts", HTTPD_OPEN, ctx_list, NULL },
	{ "POST", "/contexts/{id}/restart", HTTPD_OPEN, ctx_restart, NULL },
	{ "DELETE", "/contexts/{id}", HTTPD_OPEN, ctx_delete, NULL },
	{ 0 },
};
