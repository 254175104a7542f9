/*
 * api_tpl: templates. GET /v1/templates lists the published ones (the
 * host's guest/templates/) and the caller's own; POST /v1/templates makes
 * one of the caller's from an image: a JSON body names a reference to
 * pull, any other body is an archive (an OCI layout's tar or `docker
 * save`'s) streamed to an unnamed file; GET and DELETE
 * /v1/templates/{name} follow and remove one. Another account's template
 * is a 404, as if it were not there.
 */
#include "daemon/api/api.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What each published template is for; an unknown one is listed without words. */
static const char *describe(const char *name)
{
	static const char *const known[][2] = {
		{ "base", "Debian 13: bash, coreutils, curl, git, procps" },
		{ "python", "Debian 13 with CPython 3.13, numpy, pandas, matplotlib, pip, venv and uv" },
		{ "node", "Debian 13 with Node.js 22, npm and pnpm" },
	};
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (!strcmp(known[i][0], name))
			return known[i][1];
	return "";
}

/* An imported image's side of a template: what its description (written
 * by the import) says, into t. */
static void add_image(json_t *t, const char *desc_path)
{
	json_t *img = access(desc_path, R_OK) == 0 ? json_load_file(desc_path, 0, NULL) : NULL;
	if (json_is_object(img)) {
		char about[128];
		snprintf(about, sizeof(about), "imported image (%s, %lld layers)",
			 json_string_value(json_object_get(img, "format")) ?: "oci",
			 (long long)json_integer_value(json_object_get(img, "layers")));
		json_object_set_new(t, "description", json_string(about));
		static const char *const keep[] = { "digest", "env", "workdir", "user", "entrypoint",
						    "cmd", "labels", "has_sh", "has_python3", "start",
						    "ready" };
		json_t *o = json_object();
		for (size_t k = 0; k < sizeof(keep) / sizeof(keep[0]); k++)
			if (json_object_get(img, keep[k]))
				json_object_set(o, keep[k], json_object_get(img, keep[k]));
		json_object_set_new(t, "image", o);
	}
	json_decref(img);
}

static json_t *published_json(struct req *r, const char *name)
{
	char path[900];
	snprintf(path, sizeof(path), "%s/templates/%s.erofs", r->api->guest_dir, name);
	struct stat st;
	int ready = stat(path, &st) == 0 && S_ISREG(st.st_mode);
	json_t *t = json_pack("{s:s,s:s,s:I,s:b,s:s,s:b}", "name", name, "description",
			      describe(name), "size_bytes", (json_int_t)(ready ? st.st_size : 0),
			      "ready", ready, "state", ready ? "ready" : "failed", "public", 1);
	snprintf(path, sizeof(path), "%s/templates/%s.json", r->api->guest_dir, name);
	add_image(t, path);
	return t;
}

static json_t *own_json(struct req *r, const struct store_tpl *x)
{
	json_t *t = json_pack("{s:s,s:s,s:s,s:I,s:b,s:s,s:s,s:b,s:I}", "name", x->name, "id", x->id,
			      "description", "", "size_bytes", (json_int_t)x->size_bytes, "ready",
			      !strcmp(x->state, "ready"), "state", x->state, "source", x->source,
			      "public", 0, "created_ms", (json_int_t)x->created_ms);
	if (x->error[0])
		json_object_set_new(t, "error", json_string(x->error));
	if (!strcmp(x->state, "ready")) {
		char path[900];
		if (sbx_tpl_file(r->api->sbx, x->id, "json", path, sizeof(path)) == 0)
			add_image(t, path);
	}
	return t;
}

int api_templates(struct req *r)
{
	char dir[600];
	snprintf(dir, sizeof(dir), "%s/templates", r->api->guest_dir);
	json_t *arr = json_array();
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if (n <= 6 || strcmp(e->d_name + n - 6, ".erofs") || e->d_name[0] == '.')
			continue;
		char name[256];
		snprintf(name, sizeof(name), "%.*s", (int)(n - 6), e->d_name);
		json_array_append_new(arr, published_json(r, name));
	}
	if (d)
		closedir(d);
	struct store_tpl *own;
	size_t n;
	if (store_tpl_list(r->api->store, r->account, &own, &n) == 0) {
		for (size_t i = 0; i < n; i++)
			json_array_append_new(arr, own_json(r, &own[i]));
		free(own);
	}
	return reply_json(r, 200, json_pack("{s:o}", "templates", arr));
}

int api_tpl_get(struct req *r)
{
	struct store_tpl t;
	if (sbx_tpl_get(r->api->sbx, r->account, r->param[0], &t) == 0)
		return reply_json(r, 200, own_json(r, &t));
	char path[900];
	snprintf(path, sizeof(path), "%s/templates/%s.erofs", r->api->guest_dir, r->param[0]);
	if (r->param[0][0] != '.' && !strchr(r->param[0], '/') && access(path, R_OK) == 0)
		return reply_json(r, 200, published_json(r, r->param[0]));
	return reply_error(r, 404, "not_found", "no template '%s'", r->param[0]);
}

int api_tpl_delete(struct req *r)
{
	char err[512];
	int e = sbx_tpl_delete(r->api->sbx, r->account, r->param[0], err, sizeof(err));
	if (e == -ENOENT)
		return reply_error(r, 404, "not_found", "%s", err);
	if (e == -EBUSY)
		return reply_error(r, 409, "conflict", "%s", err);
	if (e < 0)
		return reply_error(r, 500, "internal", "%s", err);
	return reply_empty(r, 204);
}

/* A POST's state while its body comes. */
struct tpl_upload {
	int json;        /* the body is JSON: kept in buf */
	char *buf;
	size_t len, cap;
	int fd;          /* else an archive, written to fd */
	unsigned long long size;
	int failed;      /* answered already */
};

static int answer_create(struct req *r, int e, const struct store_tpl *t, const char *err)
{
	if (e == 0)
		return reply_json(r, !strcmp(t->state, "building") ? 202 : 201, own_json(r, t));
	if (e == -EEXIST)
		return reply_error(r, 409, "conflict", "%s", err);
	if (e == -EDQUOT || e == -EFBIG)
		return reply_error(r, 413, "too_large", "%s", err);
	if (e == -EINVAL || e == -ENOENT || e == -EACCES)
		return reply_error(r, 422, "invalid_argument", "%s", err);
	if (e == -EAGAIN)
		return reply_error(r, 429, "too_many_requests", "%s", err);
	if (e == -EPERM)
		return reply_error(r, 501, "not_implemented", "%s", err);
	return reply_error(r, 503, "unavailable", "%s", err);
}

static int want_wait(struct req *r)
{
	int bad = 0;
	const char *w = req_query(r, "wait", &bad);
	return w && (!strcmp(w, "true") || !strcmp(w, "1"));
}

/* A JSON body's create: {"name", "image", "username", "password",
 * "start_cmd" | "start_image", "ready_port" | "ready_cmd"}. */
static int create_pull(struct req *r, const char *text, size_t len)
{
	json_error_t je;
	json_t *b = json_loadb(text, len, 0, &je);
	if (!json_is_object(b)) {
		json_decref(b);
		return reply_error(r, 400, "bad_request", "the body is not a JSON object");
	}
	r->body = b;
	const char *name = NULL, *image = NULL, *user = NULL, *pass = NULL, *start = NULL, *rcmd = NULL;
	long long port = 0;
	int from_image = 0;
	if (api_str(r, "name", 63, &name) < 0 || api_str(r, "image", 500, &image) < 0 ||
	    api_str(r, "username", 255, &user) < 0 || api_str(r, "password", 4096, &pass) < 0 ||
	    api_str(r, "start_cmd", 4096, &start) < 0 || api_bool(r, "start_image", &from_image) < 0 ||
	    api_uint(r, "ready_port", 1, 65535, &port) < 0 || api_str(r, "ready_cmd", 4096, &rcmd) < 0)
		return 0;
	if (!name || !image)
		return reply_error(r, 422, "invalid_argument", "'name' and 'image' are required");
	struct sbx_tpl_req q = { .name = name, .image = image, .archive_fd = -1, .username = user,
				 .password = pass, .start_cmd = start, .start_image = from_image,
				 .ready_port = (unsigned)port, .ready_cmd = rcmd };
	struct store_tpl t;
	char err[700];
	int e = sbx_tpl_create(r->api->sbx, r->account, &q, want_wait(r), &t, err, sizeof(err));
	return answer_create(r, e, &t, err);
}

/* An archive's create: ?name= and the start command's fields as in JSON. */
static int create_upload(struct req *r, struct tpl_upload *up)
{
	int bad = 0;
	const char *name = req_query(r, "name", &bad), *start = req_query(r, "start_cmd", &bad),
		   *rcmd = req_query(r, "ready_cmd", &bad), *port = req_query(r, "ready_port", &bad),
		   *from = req_query(r, "start_image", &bad);
	char *end = NULL;
	long p = port ? strtol(port, &end, 10) : 0;
	if (bad || (port && (*end || p < 1 || p > 65535)))
		return reply_error(r, 400, "bad_request", "bad query parameters");
	if (lseek(up->fd, 0, SEEK_SET) < 0)
		return reply_error(r, 500, "internal", "cannot read the upload back");
	struct sbx_tpl_req q = { .name = name ? name : "", .archive_fd = up->fd, .start_cmd = start,
				 .start_image = from && !strcmp(from, "true"), .ready_port = (unsigned)p,
				 .ready_cmd = rcmd };
	up->fd = -1; /* taken over */
	struct store_tpl t;
	char err[700];
	int e = sbx_tpl_create(r->api->sbx, r->account, &q, want_wait(r), &t, err, sizeof(err));
	return answer_create(r, e, &t, err);
}

static void upload_free(struct req *r)
{
	struct tpl_upload *up = r->stream;
	if (!up)
		return;
	if (up->fd >= 0)
		close(up->fd);
	free(up->buf);
	free(up);
	r->stream = NULL;
}

int api_tpl_create(struct req *r, enum up_phase phase, const char *data, size_t n)
{
	struct tpl_upload *up = r->stream;
	unsigned long long max = sbx_tpl_max_bytes(r->api->sbx);
	if (phase == UP_BEGIN) {
		const char *ct = req_header(r, "Content-Type"), *cl = req_header(r, "Content-Length");
		int json = ct && !strncmp(ct, "application/json", 16);
		if (!json) {
			int bad = 0;
			const char *name = req_query(r, "name", &bad);
			if (bad || !name || !sbx_tpl_name_ok(name))
				return reply_error(r, 422, "invalid_argument",
						   "an archive needs ?name=: lower-case letters, digits, "
						   "'.', '_' and '-', at most 63");
			if (cl && strtoull(cl, NULL, 10) > max)
				return reply_error(r, 413, "too_large",
						   "the archive is %s bytes, over the limit of %llu",
						   cl, max);
		}
		up = calloc(1, sizeof(*up));
		if (!up)
			return reply_error(r, 500, "internal", "out of memory");
		up->json = json;
		up->fd = json ? -1 : sbx_tpl_upload_fd(r->api->sbx);
		r->stream = up;
		if (!json && up->fd < 0) {
			int e = -up->fd;
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
		if (up->json) {
			if (up->len + n > r->api->max_json_bytes) {
				up->failed = 1;
				return reply_error(r, 413, "too_large", "the JSON body is over %zu bytes",
						   r->api->max_json_bytes);
			}
			if (up->len + n > up->cap) {
				size_t nc = (up->len + n) * 2;
				char *b = realloc(up->buf, nc);
				if (!b) {
					up->failed = 1;
					return reply_error(r, 500, "internal", "out of memory");
				}
				up->buf = b;
				up->cap = nc;
			}
			memcpy(up->buf + up->len, data, n);
			up->len += n;
			return 0;
		}
		if (api_upload_append(r, up->fd, &up->size, max, "archive", data, n) < 0)
			up->failed = 1;
		return 0;
	}
	/* UP_END */
	int rc = up->json ? create_pull(r, up->buf ? up->buf : "", up->len) : create_upload(r, up);
	upload_free(r);
	return rc;
}
