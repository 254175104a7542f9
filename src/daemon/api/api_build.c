/*
 * api_build: Dockerfile builds the node runs (sbx_build.c).
 *
 *   POST   /v1/templates/{name}/build       the body is the build's context:
 *          a tar (plain, gzip or zstd) holding the Dockerfile; ?dockerfile=
 *          (its path in the context, default Dockerfile), ?no_cache=true,
 *          ?build_arg=K=V (repeated), ?start_cmd=, ?ready_port=, ?ready_cmd=.
 *          202 with the build; with ?follow=true, 200 and its log as it is
 *          written, to its end.
 *   GET    /v1/templates/{name}/build       the newest build of that name
 *   GET    /v1/templates/{name}/build/logs  its log: ?offset= (bytes) and
 *          ?follow=true (what comes next, until the build ends)
 *   DELETE /v1/templates/{name}/build       cancels it (202)
 *
 * The template itself appears at the end, as any upload's does (GET
 * /v1/templates/{name}).
 */
#include "daemon/api/api.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FOLLOW_POLL_MS 250
#define LOG_PAGE (4 << 20) /* a GET of the log without follow, at most */

static json_t *build_json(const struct sbx_build_info *b)
{
	json_t *o = json_pack("{s:s,s:s,s:s,s:I,s:I}", "id", b->id, "name", b->name, "state",
			      b->state, "started_ms", (json_int_t)b->started_ms, "log_bytes",
			      (json_int_t)b->log_bytes);
	if (b->ended_ms) {
		json_object_set_new(o, "ended_ms", json_integer(b->ended_ms));
		json_object_set_new(o, "exit_code", json_integer(b->exit_code));
	}
	if (b->error[0])
		json_object_set_new(o, "error", json_string(b->error));
	return o;
}

/* ---- a log as it grows ---- */

struct follow {
	int fd, client;
	struct sbx_mgr *m;
	char id[24];
	int ended; /* seen ended: one more read, then the end */
};

static ssize_t follow_read(void *arg, char *buf, size_t max)
{
	struct follow *f = arg;
	for (;;) {
		ssize_t n = read(f->fd, buf, max);
		if (n > 0)
			return n;
		if (n < 0 && errno != EINTR)
			return -1;
		if (f->ended)
			return 0;
		if (!sbx_build_running(f->m, f->id)) {
			f->ended = 1;
			continue; /* what it wrote last */
		}
		if (http_fd_gone(f->client))
			return -1;
		struct timespec ts = { 0, FOLLOW_POLL_MS * 1000000L };
		nanosleep(&ts, NULL);
	}
}

static void follow_done(void *arg)
{
	struct follow *f = arg;
	close(f->fd);
	free(f);
}

/* The log from offset: streamed to the build's end with follow, else what
 * there is now (LOG_PAGE at most). */
static int send_log(struct req *r, const char *path, const char *id, long long offset, int follow)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return reply_error(r, 404, "not_found", "the build's log is gone");
	if (!follow) {
		struct stat st;
		long long size = fstat(fd, &st) == 0 ? st.st_size : 0;
		long long n = size > offset ? size - offset : 0;
		if (n > LOG_PAGE)
			n = LOG_PAGE;
		char *buf = malloc((size_t)n + 1);
		ssize_t got = buf ? pread(fd, buf, (size_t)n, offset) : -1;
		close(fd);
		if (got < 0) {
			free(buf);
			return reply_error(r, 500, "internal", "cannot read the build's log");
		}
		return reply_buffer(r, 200, "text/plain; charset=utf-8", buf, (size_t)got);
	}
	struct follow *f = calloc(1, sizeof(*f));
	if (!f || lseek(fd, offset, SEEK_SET) < 0) {
		free(f);
		close(fd);
		return reply_error(r, 500, "internal", "cannot read the build's log");
	}
	*f = (struct follow){ .fd = fd, .client = req_fd(r), .m = r->api->sbx };
	snprintf(f->id, sizeof(f->id), "%s", id);
	return reply_stream(r, 200, "text/plain; charset=utf-8", follow_read, follow_done, f);
}

/* ?follow: 1, 0, or -1 (answered: bad) */
static int want_follow(struct req *r)
{
	const char *fs = req_query(r, "follow", NULL);
	if (!fs || !strcmp(fs, "false") || !strcmp(fs, "0"))
		return 0;
	if (!strcmp(fs, "true") || !strcmp(fs, "1"))
		return 1;
	reply_error(r, 400, "bad_request", "follow must be true or false");
	return -1;
}

/* ---- POST ---- */

struct build_upload {
	int fd;
	unsigned long long size;
	int failed;
};

struct args {
	const char *v[65];
	size_t n;
	int over;
};

static int take_arg(void *arg, const char *value)
{
	struct args *a = arg;
	if (a->n >= 64) {
		a->over = 1;
		return 1;
	}
	a->v[a->n++] = value;
	return 0;
}

static void upload_free(struct req *r)
{
	struct build_upload *up = r->stream;
	if (!up)
		return;
	if (up->fd >= 0)
		close(up->fd);
	free(up);
	r->stream = NULL;
}

/* A build refused (sbx_build_start's errors), answered. */
static int refused(struct req *r, int e, const char *err)
{
	if (e == -EINVAL)
		return reply_error(r, 422, "invalid_argument", "%s", err);
	if (e == -EACCES)
		return reply_error(r, 403, "forbidden", "%s", err);
	if (e == -EBUSY)
		return reply_error(r, 409, "conflict", "%s", err);
	if (e == -EAGAIN)
		return reply_error(r, 429, "too_many_requests", "%s", err);
	if (e == -EPERM)
		return reply_error(r, 501, "not_implemented", "%s", err);
	return reply_error(r, 503, "unavailable", "%s", err);
}

static int start_build(struct req *r, struct build_upload *up)
{
	int bad = 0, follow = want_follow(r);
	if (follow < 0)
		return 0;
	const char *df = req_query(r, "dockerfile", &bad), *nc = req_query(r, "no_cache", &bad),
		   *start = req_query(r, "start_cmd", &bad), *rcmd = req_query(r, "ready_cmd", &bad),
		   *port = req_query(r, "ready_port", &bad);
	char *end = NULL;
	long p = port ? strtol(port, &end, 10) : 0;
	struct args a = { .n = 0 };
	req_query_each(r, "build_arg", take_arg, &a, &bad);
	if (bad || (port && (!*port || *end || p < 1 || p > 65535)) ||
	    (nc && strcmp(nc, "true") && strcmp(nc, "false") && strcmp(nc, "1") && strcmp(nc, "0")))
		return reply_error(r, 400, "bad_request", "bad query parameters");
	if (a.over)
		return reply_error(r, 422, "invalid_argument", "at most 64 build arguments");
	if (!up->size)
		return reply_error(r, 422, "invalid_argument",
				   "the body is the build's context: a tar (plain, gzip or zstd) "
				   "holding the Dockerfile");
	if (lseek(up->fd, 0, SEEK_SET) < 0)
		return reply_error(r, 500, "internal", "cannot read the upload back");
	struct sbx_build_req q = { .name = r->param[0], .dockerfile = df, .context_fd = up->fd,
				   .no_cache = nc && (!strcmp(nc, "true") || !strcmp(nc, "1")),
				   .build_args = a.v, .nbuild_args = a.n, .start_cmd = start,
				   .ready_cmd = rcmd, .ready_port = (unsigned)p };
	up->fd = -1; /* taken over */
	struct sbx_build_info b;
	char err[700], log[700];
	int e = sbx_build_start(r->api->sbx, r->account, &q, &b, err, sizeof(err));
	if (e < 0)
		return refused(r, e, err);
	if (follow && sbx_build_get(r->api->sbx, r->account, b.name, &b, log, sizeof(log)) == 0)
		return send_log(r, log, b.id, 0, 1);
	return reply_json(r, 202, build_json(&b));
}

int api_build_create(struct req *r, enum up_phase phase, const char *data, size_t n)
{
	struct build_upload *up = r->stream;
	unsigned long long max = sbx_tpl_max_bytes(r->api->sbx);
	if (phase == UP_BEGIN) {
		const char *cl = req_header(r, "Content-Length");
		if (!sbx_tpl_name_ok(r->param[0]))
			return reply_error(r, 422, "invalid_argument",
					   "invalid template name: lower-case letters, digits, '.', "
					   "'_' and '-', at most 63");
		if (cl && strtoull(cl, NULL, 10) > max)
			return reply_error(r, 413, "too_large",
					   "the context is %s bytes, over the limit of %llu", cl, max);
		/* What would refuse it at the end, before its bytes come. */
		char err[700];
		int e = sbx_build_check(r->api->sbx, r->account, r->param[0], err, sizeof(err));
		if (e < 0)
			return refused(r, e, err);
		if (!(up = calloc(1, sizeof(*up))))
			return reply_error(r, 500, "internal", "out of memory");
		up->fd = sbx_tpl_upload_fd(r->api->sbx);
		r->stream = up;
		if (up->fd < 0) {
			e = -up->fd;
			upload_free(r);
			return reply_error(r, 503, "unavailable", "cannot keep the upload: %s",
					   strerror(e));
		}
		return 0;
	}
	if (phase == UP_ABORT) {
		upload_free(r);
		return 0;
	}
	if (!up || up->failed)
		return 0;
	if (phase == UP_DATA) {
		if (api_upload_append(r, up->fd, &up->size, max, "context", data, n) < 0)
			up->failed = 1;
		return 0;
	}
	int rc = start_build(r, up); /* UP_END */
	upload_free(r);
	return rc;
}

/* ---- GET, DELETE ---- */

int api_build_get(struct req *r)
{
	struct sbx_build_info b;
	if (sbx_build_get(r->api->sbx, r->account, r->param[0], &b, NULL, 0) < 0)
		return reply_error(r, 404, "not_found", "no build of template '%s' on this node",
				   r->param[0]);
	return reply_json(r, 200, build_json(&b));
}

int api_build_logs(struct req *r)
{
	int follow = want_follow(r);
	if (follow < 0)
		return 0;
	const char *os = req_query(r, "offset", NULL);
	char *end = NULL;
	errno = 0;
	long long offset = os ? strtoll(os, &end, 10) : 0;
	if (os && (!*os || *end || offset < 0 || offset > (1LL << 40) || errno))
		return reply_error(r, 400, "bad_request", "offset must be a number of bytes, 0 or more");
	struct sbx_build_info b;
	char log[700];
	if (sbx_build_get(r->api->sbx, r->account, r->param[0], &b, log, sizeof(log)) < 0)
		return reply_error(r, 404, "not_found", "no build of template '%s' on this node",
				   r->param[0]);
	return send_log(r, log, b.id, offset, follow);
}

int api_build_cancel(struct req *r)
{
	struct sbx_build_info b;
	if (sbx_build_get(r->api->sbx, r->account, r->param[0], &b, NULL, 0) < 0)
		return reply_error(r, 404, "not_found", "no build of template '%s' on this node",
				   r->param[0]);
	if (sbx_build_cancel(r->api->sbx, r->account, r->param[0]) < 0)
		return reply_error(r, 409, "conflict", "the build of '%s' has ended (%s)",
				   r->param[0], b.state);
	return reply_json(r, 202, build_json(&b));
}
