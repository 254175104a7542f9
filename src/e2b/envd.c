/*
 * envd: the file side of a sandbox's envd plane on cpuosd's files API:
 * GET and POST /files (raw bytes or multipart, as the SDK's versions send
 * them), and filesystem.Filesystem's Stat, ListDir, MakeDir, Move,
 * Remove (watches: watch.c), answered with envd's EntryInfo.
 */
#include "e2b/envd.h"

#include "cli/cpuos/http.h"
#include "common/buf.h"
#include "common/clock.h"
#include "e2b/e2b.h"
#include "e2b/multipart.h"
#include "e2b/process.h"
#include "e2b/rpc.h"
#include "e2b/watch.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>
#include <zlib.h>

#define MULTIPART_MAX (256u << 20) /* a multipart body is read whole, up to this */

void envd_sbx_path(struct apath *p, const char *id, const char *sub)
{
	char sbx[24];
	snprintf(sbx, sizeof(sbx), "sbx_%s", id);
	apath_init(p, "/v1/sandboxes");
	apath_seg(p, sbx);
	apath_add(p, sub);
}

/* "-rw-r--r--" of a type and an octal mode string. */
static void permissions(const char *type, unsigned mode, char out[11])
{
	static const char rwx[] = "rwxrwxrwx";
	out[0] = !strcmp(type, "dir") ? 'd' : !strcmp(type, "symlink") ? 'l' : '-';
	for (int i = 0; i < 9; i++)
		out[1 + i] = mode & (0400u >> i) ? rwx[i] : '-';
	out[10] = '\0';
}

static const char *owner_of(json_t *id)
{
	json_int_t v = json_integer_value(id);
	return v == 0 ? "root" : v == 1000 ? "user" : "";
}

/* envd's EntryInfo of a cpuos entry. */
static json_t *entry_info(json_t *e)
{
	const char *type = json_string_value(json_object_get(e, "type"));
	const char *mode = json_string_value(json_object_get(e, "mode"));
	unsigned m = mode ? (unsigned)strtoul(mode, NULL, 8) : 0;
	char perm[11];
	if (!type)
		type = "other";
	permissions(type, m, perm);
	json_t *o = json_pack("{s:O?, s:s, s:O?, s:O?, s:i, s:s, s:s, s:s, s:O?}", "name",
			      json_object_get(e, "name"), "type",
			      !strcmp(type, "dir")       ? "FILE_TYPE_DIRECTORY"
			      : !strcmp(type, "symlink") ? "FILE_TYPE_SYMLINK"
			      : !strcmp(type, "file")    ? "FILE_TYPE_FILE"
							 : "FILE_TYPE_UNSPECIFIED",
			      "path", json_object_get(e, "path"), "size", json_object_get(e, "size"),
			      "mode", (int)m, "permissions", perm, "owner",
			      owner_of(json_object_get(e, "uid")), "group",
			      owner_of(json_object_get(e, "gid")), "modifiedTime",
			      json_object_get(e, "mtime"));
	json_t *t = json_object_get(e, "target");
	if (o && json_is_string(t))
		json_object_set(o, "symlinkTarget", t);
	return o;
}

/* One call to cpuosd for an RPC: 0 with *out, or -1 after answering. */
static int fs_call(struct httpd_req *r, const char *method, struct apath *p, json_t *body,
		   json_t **out)
{
	struct api *a;
	if (e2b_api(r, &a) < 0) {
		rpc_error(r, 0, 500, "out of memory");
		return -1;
	}
	int rc = api_json(a, method, p, body, out);
	if (rc < 0)
		rpc_api_error(r, 0, a);
	api_free(a);
	return rc < 0 ? -1 : 0;
}

/* The message's path field (as given): NULL after answering. */
static const char *msg_path(struct httpd_req *r, json_t *m, const char *field)
{
	const char *path = json_string_value(json_object_get(m, field));
	if (!path || !*path) {
		rpc_error(r, 0, 400, "%s is required", field);
		return NULL;
	}
	return path;
}

static int stat_(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	int stream;
	json_t *m = rpc_request(r, &stream), *out = NULL;
	const char *path;
	struct apath p;
	if (!m || !(path = msg_path(r, m, "path")))
		goto out;
	envd_sbx_path(&p, q->id, "/files/stat");
	apath_query(&p, "path", path);
	if (fs_call(r, "GET", &p, NULL, &out) == 0)
		rpc_reply(r, json_pack("{s:o}", "entry", entry_info(out)));
out:
	json_decref(m), json_decref(out);
	return 0;
}

static int list_dir(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	int stream;
	json_t *m = rpc_request(r, &stream), *out = NULL;
	const char *path;
	struct apath p;
	char d[16];
	if (!m || !(path = msg_path(r, m, "path")))
		goto out;
	json_int_t depth = json_integer_value(json_object_get(m, "depth"));
	snprintf(d, sizeof(d), "%lld", (long long)(depth < 1 ? 1 : depth > 16 ? 16 : depth));
	envd_sbx_path(&p, q->id, "/files/list");
	apath_query(&p, "path", path);
	apath_query(&p, "depth", d);
	if (fs_call(r, "GET", &p, NULL, &out) == 0) {
		json_t *arr = json_array(), *e;
		size_t i;
		json_array_foreach(json_object_get(out, "entries"), i, e)
			json_array_append_new(arr, entry_info(e));
		rpc_reply(r, json_pack("{s:o}", "entries", arr));
	}
out:
	json_decref(m), json_decref(out);
	return 0;
}

/* MakeDir {path}: made with its parents; one that exists is
 * already_exists, as envd says it (the SDK then answers false). */
static int make_dir(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	int stream;
	json_t *m = rpc_request(r, &stream), *out = NULL, *body = NULL;
	const char *path;
	struct apath p;
	struct api *a = NULL;
	if (!m || !(path = msg_path(r, m, "path")))
		goto out;
	envd_sbx_path(&p, q->id, "/files/stat");
	apath_query(&p, "path", path);
	if (e2b_api(r, &a) < 0) {
		rpc_error(r, 0, 500, "out of memory");
		goto out;
	}
	if (api_json(a, "GET", &p, NULL, &out) == 0) {
		rpc_error_code(r, "already_exists", "'%s' already exists", path);
		goto out;
	} else if (api_status(a) != 404) {
		rpc_api_error(r, 0, a);
		goto out;
	}
	envd_sbx_path(&p, q->id, "/files/mkdir");
	body = json_pack("{s:s, s:b, s:s}", "path", path, "parents", 1, "user", q->user);
	if (fs_call(r, "POST", &p, body, &out) == 0)
		rpc_reply(r, json_pack("{s:o}", "entry", entry_info(out)));
out:
	api_free(a);
	json_decref(m), json_decref(out), json_decref(body);
	return 0;
}

static int move(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	int stream;
	json_t *m = rpc_request(r, &stream), *out = NULL, *body = NULL;
	const char *from, *to;
	struct apath p;
	if (!m || !(from = msg_path(r, m, "source")) || !(to = msg_path(r, m, "destination")))
		goto out;
	envd_sbx_path(&p, q->id, "/files/rename");
	body = json_pack("{s:s, s:s}", "from", from, "to", to);
	if (fs_call(r, "POST", &p, body, &out) == 0)
		rpc_reply(r, json_pack("{s:o}", "entry", entry_info(out)));
out:
	json_decref(m), json_decref(out), json_decref(body);
	return 0;
}

static int remove_(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	int stream;
	json_t *m = rpc_request(r, &stream);
	const char *path;
	struct apath p;
	if (!m || !(path = msg_path(r, m, "path")))
		goto out;
	envd_sbx_path(&p, q->id, "/files");
	apath_query(&p, "path", path);
	apath_query(&p, "recursive", "true");
	if (fs_call(r, "DELETE", &p, NULL, NULL) == 0)
		rpc_reply(r, json_object());
out:
	json_decref(m);
	return 0;
}

/* ---- /files ---- */

/* GET /files?path=&username=: the file's bytes, streamed. */
struct download {
	struct api *a;
	struct apath path;
	int fd;
	unsigned long long skip, left; /* bytes to drop, then to send: the range, or
					* the size stat said (the Content-Length) */
};

static void download_free(void *arg)
{
	struct download *d = arg;
	api_free(d->a);
	free(d);
}

static int download_sink(void *arg, const char *p, size_t n)
{
	struct download *d = arg;
	size_t drop = d->skip < n ? (size_t)d->skip : n;
	d->skip -= drop, p += drop, n -= drop;
	if (n > d->left)
		n = (size_t)d->left;
	d->left -= n;
	if (n && pump_put(d->fd, p, n) < 0)
		return -EPIPE;
	return d->left || d->skip ? 0 : -ECANCELED; /* the range is sent: stop */
}

/* A Range header of one range, "bytes=A-B", "bytes=A-" or "bytes=-N",
 * for a file of size bytes: 1 with [*from, *to], 0 to send it whole (no
 * header, or one this does not take: several ranges, other units), -1
 * when it lies past the end (416). */
static int range_of(const char *h, unsigned long long size, unsigned long long *from,
		    unsigned long long *to)
{
	char *end;
	if (!h || strncmp(h, "bytes=", 6) || strchr(h, ','))
		return 0;
	h += 6;
	if (*h == '-') { /* the last N bytes */
		errno = 0;
		unsigned long long n = strtoull(h + 1, &end, 10);
		if (end == h + 1 || *end || errno)
			return 0;
		if (!n || !size)
			return -1;
		*from = n >= size ? 0 : size - n;
		*to = size - 1;
		return 1;
	}
	errno = 0;
	unsigned long long a = strtoull(h, &end, 10), b;
	if (end == h || *end != '-' || errno || *h < '0' || *h > '9')
		return 0;
	h = end + 1;
	if (!*h) {
		b = size ? size - 1 : 0;
	} else {
		b = strtoull(h, &end, 10);
		if (*end || errno || *h < '0' || *h > '9' || b < a)
			return 0;
	}
	if (a >= size)
		return -1;
	*from = a;
	*to = b >= size ? size - 1 : b;
	return 1;
}

static void download_run(int fd, void *arg)
{
	struct download *d = arg;
	d->fd = fd;
	/* A failure or a file cut short ends the pipe before the
	 * Content-Length: the connection is cut, which the client sees. */
	if (d->left)
		api_download(d->a, &d->path, download_sink, d);
}

int envd_files_get(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	int bad = 0;
	const char *path = httpd_query(r, "path", &bad);
	struct download *d;
	json_t *st = NULL;
	if (bad || !path || !*path)
		return e2b_reply_error(r, 400, "path is required");
	if (!(d = calloc(1, sizeof(*d))) || e2b_api(r, &d->a) < 0) {
		free(d);
		return e2b_reply_error(r, 500, "out of memory");
	}
	/* Asked first, so that a missing file or a directory is a clean 4xx
	 * and not a stream cut short. */
	envd_sbx_path(&d->path, q->id, "/files/stat");
	apath_query(&d->path, "path", path);
	if (api_json(d->a, "GET", &d->path, NULL, &st) < 0) {
		e2b_reply_api_error(r, d->a);
		download_free(d);
		return 0;
	}
	const char *type = json_string_value(json_object_get(st, "type"));
	int dir = type && !strcmp(type, "dir");
	json_int_t size = json_integer_value(json_object_get(st, "size"));
	json_decref(st);
	if (dir) {
		download_free(d);
		return e2b_reply_error(r, 400, "'%s' is a directory", path);
	}
	unsigned long long from = 0, to = 0;
	char cr[96];
	int rg = range_of(httpd_header(r, "Range"), size > 0 ? (unsigned long long)size : 0, &from,
			  &to);
	if (rg < 0) {
		download_free(d);
		snprintf(cr, sizeof(cr), "bytes */%lld", (long long)size);
		httpd_add_header(r, "Content-Range", cr);
		return e2b_reply_error(r, 416, "the range lies past the end of '%s'", path);
	}
	httpd_add_header(r, "Accept-Ranges", "bytes");
	d->skip = 0, d->left = size > 0 ? (unsigned long long)size : 0;
	if (rg > 0) {
		d->skip = from, d->left = to - from + 1;
		snprintf(cr, sizeof(cr), "bytes %llu-%llu/%lld", from, to, (long long)size);
		httpd_add_header(r, "Content-Range", cr);
	}
	envd_sbx_path(&d->path, q->id, "/files");
	apath_query(&d->path, "path", path);
	pump_start(r, rg > 0 ? 206 : 200, "application/octet-stream", d->left, download_run,
		   download_free, d);
	return 0;
}

/* POST /files: raw bytes (?path=) stream to cpuosd as they come; a
 * multipart body (each part's filename its path, or ?path= for one) is
 * read whole first, up to MULTIPART_MAX. */
struct upload {
	int multipart;
	struct buf body;
	char boundary[MP_BOUNDARY_MAX + 3];
	/* raw: a pipe to a worker that runs the PUT */
	int wfd, rfd;
	atomic_int aborted;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done, refs, rc;
	struct api *a;
	struct apath path;
	char target[4097];
	/* Content-Encoding: gzip, inflated as it comes, bounded */
	z_stream z;
	int gz, gz_end;
	unsigned long long inflated;
};

static void up_unref(struct upload *u)
{
	pthread_mutex_lock(&u->mu);
	int last = --u->refs == 0;
	pthread_mutex_unlock(&u->mu);
	if (!last)
		return;
	if (u->wfd >= 0)
		close(u->wfd);
	if (u->rfd >= 0)
		close(u->rfd);
	api_free(u->a);
	buf_release(&u->body);
	if (u->gz)
		inflateEnd(&u->z);
	pthread_cond_destroy(&u->cv);
	pthread_mutex_destroy(&u->mu);
	free(u);
}

static ssize_t up_source(void *arg, char *p, size_t max)
{
	struct upload *u = arg;
	for (;;) {
		ssize_t n = read(u->rfd, p, max);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		/* The writer closes its end at the body's end, and also when
		 * the client left: then the file must not be committed. */
		if (n == 0 && atomic_load(&u->aborted))
			return -ECANCELED;
		return n;
	}
}

static void up_run(void *arg)
{
	struct upload *u = arg;
	int rc = api_upload_from(u->a, "PUT", &u->path, up_source, u, NULL);
	pthread_mutex_lock(&u->mu);
	u->rc = rc;
	u->done = 1;
	pthread_cond_broadcast(&u->cv);
	pthread_mutex_unlock(&u->mu);
	close(u->rfd); /* a writer still writing gets EPIPE */
	u->rfd = -1;
	up_unref(u);
}

static json_t *write_info(const char *path)
{
	const char *slash = strrchr(path, '/');
	return json_pack("{s:s, s:s, s:s}", "name", slash ? slash + 1 : path, "type", "file",
			 "path", path);
}

static int up_begin(struct httpd_req *r)
{
	struct e2b *g = r->arg;
	struct e2b_req *q = r->app;
	const char *ct = httpd_header(r, "Content-Type");
	const char *enc = httpd_header(r, "Content-Encoding");
	int bad = 0;
	const char *path = httpd_query(r, "path", &bad);
	struct upload *u = calloc(1, sizeof(*u));
	if (!u)
		return e2b_reply_error(r, 500, "out of memory");
	u->wfd = u->rfd = -1;
	u->refs = 1;
	pthread_mutex_init(&u->mu, NULL);
	pthread_cond_init(&u->cv, NULL);
	buf_init(&u->body, MULTIPART_MAX);
	q->up = u;
	if (bad)
		return e2b_reply_error(r, 400, "invalid path");
	if (enc && !strcasecmp(enc, "gzip")) {
		if (inflateInit2(&u->z, 16 + MAX_WBITS) != Z_OK) /* gzip's header, not zlib's */
			return e2b_reply_error(r, 500, "out of memory");
		u->gz = 1;
	} else if (enc && strcasecmp(enc, "identity")) {
		return e2b_reply_error(r, 415, "Content-Encoding '%s' is not taken: gzip, or the "
					       "bytes as they are", enc);
	}
	if (ct && !strncasecmp(ct, "multipart/", 10)) {
		if (multipart_boundary(ct, u->boundary) < 0)
			return e2b_reply_error(r, 400, "multipart/form-data without a boundary");
		u->multipart = 1;
		return 0;
	}
	if (!path || !*path || strlen(path) >= sizeof(u->target))
		return e2b_reply_error(r, 400, "path is required for a raw upload");
	snprintf(u->target, sizeof(u->target), "%s", path);
	int fds[2];
	if (e2b_api(r, &u->a) < 0 || pipe2(fds, O_CLOEXEC) < 0)
		return e2b_reply_error(r, 500, "cannot start the upload");
	u->rfd = fds[0], u->wfd = fds[1];
	envd_sbx_path(&u->path, q->id, "/files");
	apath_query(&u->path, "path", path);
	apath_query(&u->path, "user", q->user);
	u->refs++;
	if (workers_spawn(&g->pumps, up_run, u) < 0) {
		u->refs--;
		return e2b_reply_error(r, 503, "cannot start the upload");
	}
	return 0;
}

/* The raw upload's end: waits for the PUT and answers. */
static int up_end_raw(struct httpd_req *r, struct upload *u)
{
	close(u->wfd);
	u->wfd = -1;
	pthread_mutex_lock(&u->mu);
	while (!u->done)
		pthread_cond_wait(&u->cv, &u->mu);
	int rc = u->rc;
	pthread_mutex_unlock(&u->mu);
	if (rc < 0)
		return e2b_reply_api_error(r, u->a);
	return e2b_reply_json(r, 200, json_pack("[o]", write_info(u->target)));
}

static ssize_t mem_source(void *arg, char *p, size_t max)
{
	struct buf *b = arg; /* p: the rest, len: its bytes */
	size_t n = b->len < max ? b->len : max;
	memcpy(p, b->p, n);
	b->p += n, b->len -= n;
	return (ssize_t)n;
}

/* A multipart body, whole: each part with a filename (or the first,
 * with ?path=) is PUT there. */
struct parts {
	struct httpd_req *r;
	struct api *a;
	const char *qpath;
	json_t *out;
	int n;
};

static int put_part(void *arg, const struct mp_part *mp)
{
	struct parts *ps = arg;
	struct e2b_req *q = ps->r->app;
	if (!mp->has_filename && !(ps->qpath && *ps->qpath && ps->n == 0))
		return 0; /* a form field: nothing to write */
	/* A signed URL writes its one signed path, never a part's name. */
	if (q->signed_url && (ps->n || !ps->qpath)) {
		e2b_reply_error(ps->r, 403, "a signed upload URL writes one file, at its path");
		return -EPERM;
	}
	const char *name = ps->qpath && *ps->qpath && ps->n == 0 ? ps->qpath : mp->filename;
	if (name[0] != '/') {
		e2b_reply_error(ps->r, 400, "a part's path must be absolute: '%s'", name);
		return -EINVAL;
	}
	struct apath path;
	struct buf src = { .p = (char *)mp->data, .len = mp->len };
	envd_sbx_path(&path, q->id, "/files");
	apath_query(&path, "path", name);
	apath_query(&path, "user", q->user);
	if (api_upload_from(ps->a, "PUT", &path, mem_source, &src, NULL) < 0) {
		e2b_reply_api_error(ps->r, ps->a);
		return -EIO;
	}
	json_array_append_new(ps->out, write_info(name));
	ps->n++;
	return 0;
}

static int up_end_multipart(struct httpd_req *r, struct upload *u)
{
	int bad = 0;
	struct parts ps = { .r = r, .qpath = httpd_query(r, "path", &bad), .out = json_array() };
	if (bad || !ps.out || e2b_api(r, &ps.a) < 0) {
		json_decref(ps.out);
		return e2b_reply_error(r, bad ? 400 : 500, bad ? "invalid path" : "out of memory");
	}
	int rc = multipart_each(u->body.p ? u->body.p : "", u->body.len, u->boundary, put_part, &ps);
	api_free(ps.a);
	if (!rc && ps.n)
		return e2b_reply_json(r, 200, ps.out);
	json_decref(ps.out);
	if (r->status) /* a part's refusal */
		return 0;
	return e2b_reply_error(r, 400, rc ? "malformed multipart body" : "no file in the multipart body");
}

/* Answers an upload's failure: a raw upload's PUT is aborted first, so
 * nothing of it is written. */
static int up_fail(struct httpd_req *r, struct upload *u, unsigned status, const char *msg)
{
	if (!u->multipart && u->wfd >= 0) {
		atomic_store(&u->aborted, 1);
		close(u->wfd);
		u->wfd = -1;
	}
	return e2b_reply_error(r, status, "%s", msg);
}

/* Bytes of the body as they are (inflated already, if they were not). */
static int up_take(struct httpd_req *r, struct upload *u, const char *data, size_t n)
{
	const struct e2b *g = r->arg;
	if ((u->inflated += n) > (unsigned long long)g->cfg->max_file_bytes)
		return up_fail(r, u, 413, "the file is over --max-file-bytes");
	if (u->multipart) {
		if (buf_add(&u->body, data, n) < 0)
			return up_fail(r, u, 413, "a multipart body is at most 256 MiB: send one "
						  "file as raw bytes");
		return 0;
	}
	if (pump_put(u->wfd, data, n) < 0)
		return up_end_raw(r, u); /* cpuosd refused it: its answer */
	return 0;
}

/* Bytes of a gzip body: inflated in pieces, each taken. */
static int up_inflate(struct httpd_req *r, struct upload *u, const char *data, size_t n)
{
	char out[64 * 1024];
	u->z.next_in = (Bytef *)data;
	u->z.avail_in = (uInt)n;
	while (u->z.avail_in && !u->gz_end) {
		u->z.next_out = (Bytef *)out;
		u->z.avail_out = sizeof(out);
		int z = inflate(&u->z, Z_NO_FLUSH);
		if (z != Z_OK && z != Z_STREAM_END && !(z == Z_BUF_ERROR && u->z.avail_out))
			return up_fail(r, u, 400, "the body is not gzip");
		if (z == Z_STREAM_END)
			u->gz_end = 1;
		size_t got = sizeof(out) - u->z.avail_out;
		if (got && (up_take(r, u, out, got) < 0 || r->status))
			return 0;
	}
	return 0;
}

int envd_upload(struct httpd_req *r, enum httpd_up phase, const char *data, size_t n)
{
	struct e2b_req *q = r->app;
	struct upload *u = q->up;
	switch (phase) {
	case HTTPD_UP_BEGIN:
		return up_begin(r);
	case HTTPD_UP_DATA:
		if (!u->gz)
			return up_take(r, u, data, n);
		return up_inflate(r, u, data, n);
	case HTTPD_UP_END:
		if (u->gz && !u->gz_end)
			return up_fail(r, u, 400, "the gzip body ends before its end");
		return u->multipart ? up_end_multipart(r, u) : up_end_raw(r, u);
	case HTTPD_UP_ABORT:
		break;
	}
	return 0;
}

void envd_upload_drop(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	struct upload *u = q->up;
	if (!u)
		return;
	q->up = NULL;
	atomic_store(&u->aborted, 1);
	if (u->wfd >= 0)
		close(u->wfd), u->wfd = -1;
	up_unref(u);
}

static int health(struct httpd_req *r)
{
	return httpd_reply_empty(r, 204);
}

/* Any other port of a sandbox: a 307 to cpuosd's port URL for it (the
 * method and body go along), which checks its traffic token or that the
 * sandbox is public, as for any client of it. */
static int not_served(struct httpd_req *r)
{
	const struct e2b *g = r->arg;
	struct e2b_req *q = r->app;
	if (!q->port || !q->id[0])
		return e2b_reply_error(r, 404, "E2b-Sandbox-Id and E2b-Sandbox-Port name no sandbox's "
					       "port");
	if (g->cfg->port_urls[0]) {
		struct buf b;
		char port[16];
		snprintf(port, sizeof(port), "%u", q->port);
		buf_init(&b, 8192);
		for (const char *t = g->cfg->port_urls; *t;) {
			if (!strncmp(t, "{id}", 4))
				buf_adds(&b, q->id), t += 4;
			else if (!strncmp(t, "{port}", 6))
				buf_adds(&b, port), t += 6;
			else
				buf_add(&b, t++, 1);
		}
		/* the request's own path and query, as it came */
		if (b.len && b.p[b.len - 1] == '/' && r->url[0] == '/')
			b.len--;
		/* the path as libmicrohttpd decoded it, encoded again ("%3F"
		 * stays in the path, a CR or LF cannot end the header) */
		static const char hex[] = "0123456789ABCDEF";
		int bad = 0;
		for (const unsigned char *c = (const unsigned char *)r->url; *c && !bad; c++) {
			char e[3] = { '%', hex[*c >> 4], hex[*c & 15] };
			bad = strchr("/-._~!$&'()*+,;=:@", *c) || (*c >= '0' && *c <= '9') ||
					      ((*c | 32) >= 'a' && (*c | 32) <= 'z')
				      ? buf_add(&b, c, 1) < 0
				      : buf_add(&b, e, 3) < 0;
		}
		bad = bad || httpd_query_string(r, &b) < 0 || !b.p ||
			  httpd_add_header(r, "Location", b.p) < 0;
		buf_release(&b);
		if (!bad)
			return e2b_reply_json(r, 307, json_pack("{s:i, s:s}", "code", 307, "message",
								"see Location"));
	}
	return e2b_reply_error(r, 502, "port %u of sandbox %s is not served by cpuos-e2b: use "
				       "cpuosd's port URLs", q->port, q->id);
}

static int envs(struct httpd_req *r)
{
	return e2b_reply_json(r, 200, json_object());
}

#define FS(name, h) { "POST", "/filesystem.Filesystem/" name, HTTPD_OPEN, h, NULL }
#define PROC(name, h) { "POST", "/process.Process/" name, HTTPD_OPEN, h, NULL }
const struct httpd_route e2b_envd_routes[] = {
	{ "GET", "/health", HTTPD_OPEN, health, e2b_auth_none },
	{ "GET", "/files", HTTPD_OPEN, envd_files_get, e2b_auth_signed },
	{ "POST", "/files", HTTPD_OPEN | HTTPD_UPLOAD, NULL, e2b_auth_signed },
	{ "GET", "/envs", HTTPD_OPEN, envs, NULL },
	FS("Stat", stat_),
	FS("ListDir", list_dir),
	FS("MakeDir", make_dir),
	FS("Move", move),
	FS("Remove", remove_),
	FS("WatchDir", watch_dir),
	FS("CreateWatcher", watch_create),
	FS("GetWatcherEvents", watch_events),
	FS("RemoveWatcher", watch_remove),
	PROC("Start", proc_start),
	PROC("Connect", proc_connect),
	PROC("List", proc_list),
	PROC("SendInput", proc_send_input),
	{ "POST", "/process.Process/StreamInput", HTTPD_OPEN | HTTPD_UPLOAD, NULL, NULL },
	PROC("SendSignal", proc_send_signal),
	PROC("CloseStdin", proc_close_stdin),
	PROC("Update", proc_update),
	{ 0 },
};

#define ANY(m) { m, "*", HTTPD_OPEN, not_served, e2b_auth_none }
const struct httpd_route e2b_port_routes[] = {
	ANY("GET"), ANY("POST"), ANY("PUT"), ANY("DELETE"), ANY("PATCH"), ANY("HEAD"),
	ANY("OPTIONS"), { 0 },
};
