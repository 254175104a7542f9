/*
 * api_files: guest files. Bodies stream both ways through the agent in
 * 64 KiB frames: an upload waits while the channel's queue is long, a
 * download is paced by its reader, so the daemon never holds a whole file.
 */
#include "daemon/api/api.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses an octal mode ("0644", "755") from a query or JSON string. */
static int parse_mode(const char *s, uint32_t *out)
{
	char *end;
	unsigned long v = strtoul(s, &end, 8);
	if (!*s || *end || v > 07777)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* Sends q (a request on a path) and waits for its end. Returns the
 * finished sop with *st, or NULL after answering. */
static struct sop *path_op(struct req *r, struct sbx *s, const struct sbx_request *q,
			   struct sop_state *st)
{
	struct sop *op = sop_new(SOP_COLLECT, 0);
	if (api_send(r, s, op, q, "the path is too long") < 0) {
		sop_free(s, op);
		return NULL;
	}
	int e = api_wait(r, s, op, 0, r->api->answer_ms, st);
	if (e < 0) {
		api_wait_error(r, e);
		sop_free(s, op);
		return NULL;
	}
	return op;
}

/* The entry of path (stat), answered with status. */
static int reply_entry(struct req *r, struct sbx *s, const char *path, unsigned status)
{
	struct sop_state st;
	struct sbx_request q = { .kind = SBX_STAT, .path = path };
	struct sop *op = path_op(r, s, &q, &st);
	if (!op)
		return 0;
	json_t *e = st.end == P_OK ? api_item_json(sop_entry(op)) : NULL;
	if (e) {
		char copy[PROTO_MAX_STR + 1];
		snprintf(copy, sizeof(copy), "%s", path);
		json_object_set_new(e, "path", json_string(path));
		json_object_set_new(e, "name", json_string(basename(copy)));
		reply_json(r, status, e);
	} else {
		api_agent_error(r, &st);
	}
	sop_free(s, op);
	return 0;
}

struct upload {
	struct sbx *s;
	struct sop *op;
	char path[PROTO_MAX_STR + 1];
	uint64_t size;
};

static void upload_end(struct req *r, struct upload *up)
{
	sop_free(up->s, up->op); /* a live fwrite is cancelled: no half file */
	sbx_put(up->s);
	free(up);
	r->stream = NULL;
}

int api_file_put(struct req *r, enum up_phase phase, const char *data, size_t n)
{
	struct upload *up = r->stream;
	if (phase == UP_BEGIN) {
		int bad = 0;
		const char *path = api_query_path(r, "path");
		const char *mode_s = req_query(r, "mode", &bad);
		const char *user = req_query(r, "user", &bad);
		uint32_t mode = 0644;
		if (!path)
			return 0;
		if (bad || (mode_s && parse_mode(mode_s, &mode) < 0))
			return reply_error(r, 400, "bad_request", "mode must be octal, e.g. 0644");
		if (user && (!*user || strlen(user) > 64))
			return reply_error(r, 400, "bad_request", "invalid user");
		struct sbx *s = api_sbx(r);
		if (!s)
			return 0;
		up = calloc(1, sizeof(*up));
		struct sop *op = up ? sop_new(SOP_COLLECT, 0) : NULL;
		struct sbx_request q = { .kind = SBX_WRITE, .path = path, .mode = mode, .user = user };
		if (api_send(r, s, op, &q, "the path is too long") < 0) {
			free(up);
			sop_free(s, op);
			sbx_put(s);
			return 0;
		}
		*up = (struct upload){ .s = s, .op = op };
		snprintf(up->path, sizeof(up->path), "%s", path);
		r->stream = up;
		return 0;
	}
	if (phase == UP_ABORT) {
		upload_end(r, up);
		return 0;
	}
	int e = sbx_data(up->s, up->op, phase == UP_END ? PF_EOF : 0, data, n, r->api->answer_ms);
	up->size += n;
	if (e == 0 && phase == UP_DATA)
		return 0;
	/* The end, or the agent refused early (say, the path is a directory). */
	struct sop_state st;
	int w = api_wait(r, up->s, up->op, 0, e == 0 ? r->api->answer_ms : 5000, &st);
	if (st.end == P_OK)
		reply_json(r, 201, json_pack("{s:s,s:I}", "path", up->path, "size", (json_int_t)up->size));
	else if (st.end == P_ERROR)
		api_agent_error(r, &st);
	else if (w < 0 || e == -ETIMEDOUT)
		api_wait_error(r, w < 0 ? w : e);
	else
		reply_error(r, 503, "unavailable", "the sandbox did not take the file");
	upload_end(r, up);
	return 0;
}

int api_file_get(struct req *r)
{
	const char *path = api_query_path(r, "path");
	if (!path)
		return 0;
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop *op = sop_new(SOP_QUEUE, 0);
	struct sbx_request q = { .kind = SBX_READ, .path = path };
	if (api_send(r, s, op, &q, "the path is too long") < 0) {
		sop_free(s, op);
		sbx_put(s);
		return 0;
	}
	/* Wait for the first data or the end: a missing file must be a 404,
	 * which cannot be said once a 200 went out. */
	struct sop_state st;
	int e = api_wait(r, s, op, 1, r->api->answer_ms, &st);
	if (e < 0 || st.end == P_ERROR) {
		e < 0 ? api_wait_error(r, e) : api_agent_error(r, &st);
		sop_free(s, op);
		sbx_put(s);
		return 0;
	}
	return api_reply_sop(r, s, op, API_STREAM_RAW);
}

int api_file_stat(struct req *r)
{
	const char *path = api_query_path(r, "path");
	if (!path)
		return 0;
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	reply_entry(r, s, path, 200);
	sbx_put(s);
	return 0;
}

int api_file_list(struct req *r)
{
	const char *path = api_query_path(r, "path");
	if (!path)
		return 0;
	const char *ds = req_query(r, "depth", NULL);
	uint32_t depth = 1;
	if (ds) {
		char *end;
		long v = strtol(ds, &end, 10);
		if (!*ds || *end || v < 1 || v > 16)
			return reply_error(r, 400, "bad_request", "depth must be an integer from 1 to 16");
		depth = (uint32_t)v;
	}
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop_state st;
	struct sbx_request q = { .kind = SBX_LIST, .path = path, .depth = depth };
	struct sop *op = path_op(r, s, &q, &st);
	if (op && st.end == P_OK) {
		reply_json(r, 200, json_pack("{s:o}", "entries", api_items_json(op)));
	} else if (op) {
		api_agent_error(r, &st);
	}
	sop_free(s, op);
	sbx_put(s);
	return 0;
}

int api_file_watch(struct req *r)
{
	const char *path = api_query_path(r, "path");
	if (!path)
		return 0;
	const char *rs = req_query(r, "recursive", NULL);
	int recursive = rs && (!strcmp(rs, "true") || !strcmp(rs, "1"));
	if (rs && !recursive && strcmp(rs, "false") && strcmp(rs, "0"))
		return reply_error(r, 400, "bad_request", "recursive must be true or false");
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop *op = sop_new(SOP_NDJSON, 0);
	struct sbx_request q = { .kind = SBX_WATCH, .path = path, .recursive = recursive };
	struct sop_state st = { 0 };
	if (api_send(r, s, op, &q, "the path is too long") < 0) {
		sop_free(s, op);
		sbx_put(s);
		return 0;
	}
	/* Answered once the watches are in place: a write after the answer
	 * is seen. */
	int e = api_wait(r, s, op, 1, r->api->answer_ms, &st);
	if (e < 0 || !st.started) {
		if (e < 0)
			api_wait_error(r, e);
		else
			api_agent_error(r, &st);
		sop_free(s, op);
		sbx_put(s);
		return 0;
	}
	return api_reply_watch(r, s, op, path, recursive);
}

int api_file_mkdir(struct req *r)
{
	const char *path = NULL, *mode_s = NULL, *user = "user";
	int parents = 1;
	if (!r->body)
		return reply_error(r, 400, "bad_request", "a JSON body with \"path\" is required");
	if (api_str(r, "path", 1 << 20, &path) < 0 || api_bool(r, "parents", &parents) < 0 ||
	    api_str(r, "user", 64, &user) < 0)
		return 0;
	json_t *mv = json_object_get(r->body, "mode");
	uint32_t mode = 0755;
	if (json_is_string(mv))
		mode_s = json_string_value(mv);
	if ((mode_s && parse_mode(mode_s, &mode) < 0) || (mv && !json_is_string(mv) && !json_is_null(mv)))
		return reply_error(r, 422, "invalid_argument", "'mode' must be an octal string like \"0755\"");
	if (api_check_path(r, "path", path) < 0)
		return 0;
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sbx_request q = { .kind = SBX_MKDIR, .path = path, .mode = mode, .parents = parents,
				 .user = user };
	struct sop_state st;
	struct sop *op = path_op(r, s, &q, &st);
	if (op && st.end == P_OK)
		reply_entry(r, s, path, 201);
	else if (op)
		api_agent_error(r, &st);
	sop_free(s, op);
	sbx_put(s);
	return 0;
}

int api_file_rename(struct req *r)
{
	const char *from = NULL, *to = NULL;
	if (!r->body)
		return reply_error(r, 400, "bad_request", "a JSON body with \"from\" and \"to\" is required");
	if (api_str(r, "from", 1 << 20, &from) < 0 || api_str(r, "to", 1 << 20, &to) < 0 ||
	    api_check_path(r, "from", from) < 0 || api_check_path(r, "to", to) < 0)
		return 0;
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop_state st;
	struct sbx_request q = { .kind = SBX_RENAME, .path = from, .path2 = to };
	struct sop *op = path_op(r, s, &q, &st);
	if (op && st.end == P_OK)
		reply_entry(r, s, to, 200);
	else if (op)
		api_agent_error(r, &st);
	sop_free(s, op);
	sbx_put(s);
	return 0;
}

int api_file_delete(struct req *r)
{
	const char *path = api_query_path(r, "path");
	if (!path)
		return 0;
	const char *rec = req_query(r, "recursive", NULL);
	uint32_t recursive = rec && (!strcmp(rec, "true") || !strcmp(rec, "1"));
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	struct sop_state st;
	struct sbx_request q = { .kind = SBX_REMOVE, .path = path, .recursive = (int)recursive };
	struct sop *op = path_op(r, s, &q, &st);
	if (op && st.end == P_OK)
		reply_empty(r, 204);
	else if (op)
		api_agent_error(r, &st);
	sop_free(s, op);
	sbx_put(s);
	return 0;
}

/* ---- directories as tar streams: GET and PUT .../files/archive ---- */

/* A download: tar in the guest writes the directory (or the file) at path
 * to its stdout, which streams out as it comes. A tar that fails midway
 * cuts the stream, so the client never takes a part for the whole. */
int api_file_archive_get(struct req *r)
{
	const char *path = api_query_path(r, "path");
	if (!path)
		return 0;
	struct sbx *s = api_sbx(r);
	if (!s)
		return 0;
	/* What is there first: a missing path is a 404, which cannot be said
	 * once a 200 went out. */
	struct sop_state st;
	struct sbx_request sq = { .kind = SBX_STAT, .path = path };
	struct sop *op = path_op(r, s, &sq, &st);
	if (op && st.end != P_OK)
		api_agent_error(r, &st);
	int ok = op && st.end == P_OK;
	const struct sbx_item *it = ok ? sop_entry(op) : NULL;
	int dir = it && (it->file.mode & 0170000) == 0040000;
	sop_free(s, op);
	if (!ok) {
		sbx_put(s);
		return 0;
	}
	char copy[PROTO_MAX_STR + 1], copy2[PROTO_MAX_STR + 1];
	snprintf(copy, sizeof(copy), "%s", path);
	snprintf(copy2, sizeof(copy2), "%s", path);
	/* A directory's entries as ./NAME; a file as its name. With
	 * one_file_system, what is mounted below (the root's /proc, /sys,
	 * /dev) is left out: a template build's export of "/". */
	int bad = 0;
	const char *ofs = req_query(r, "one_file_system", &bad);
	int one = ofs && !strcmp(ofs, "true");
	const char *argv[] = { "tar", "-C", dir ? path : dirname(copy), "-cf", "-",
			       one ? "--one-file-system" : "--", one ? "--" : dir ? "." : basename(copy2),
			       dir ? "." : basename(copy2) };
	op = sop_new(SOP_QUEUE, 0);
	struct sbx_request q = { .kind = SBX_EXEC, .argv = argv, .argc = one ? 8 : 7, .user = "root" };
	if (api_send(r, s, op, &q, "the path is too long") < 0) {
		sop_free(s, op);
		sbx_put(s);
		return 0;
	}
	int e = api_wait(r, s, op, 1, r->api->answer_ms, &st);
	if (e < 0 || st.end == P_ERROR) {
		e < 0 ? api_wait_error(r, e) : api_agent_error(r, &st);
		sop_free(s, op);
		sbx_put(s);
		return 0;
	}
	return api_reply_sop(r, s, op, API_STREAM_TAR);
}

struct unpack {
	struct sbx *s;
	struct sop *op;
	char path[PROTO_MAX_STR + 1];
	uint64_t size;
};

static void unpack_end(struct req *r, struct unpack *up)
{
	sop_free(up->s, up->op); /* a tar still running is killed */
	sbx_put(up->s);
	free(up);
	r->stream = NULL;
}

/* An upload: the body goes to a tar in the guest that unpacks it under
 * path (made first), as user, owning what it writes. What a hostile
 * archive does with ".." or links is the guest's own business; tar drops
 * leading "/" and refuses names with "..". */
int api_file_archive_put(struct req *r, enum up_phase phase, const char *data, size_t n)
{
	struct unpack *up = r->stream;
	if (phase == UP_BEGIN) {
		int bad = 0;
		const char *path = api_query_path(r, "path");
		const char *user = req_query(r, "user", &bad);
		if (!path)
			return 0;
		if (bad || (user && (!*user || strlen(user) > 64)))
			return reply_error(r, 400, "bad_request", "invalid user");
		struct sbx *s = api_sbx(r);
		if (!s)
			return 0;
		up = calloc(1, sizeof(*up));
		struct sop *op = up ? sop_new(SOP_COLLECT, 64 * 1024) : NULL;
		const char *argv[] = { "sh", "-c",
				       "mkdir -p -- \"$0\" && exec tar -C \"$0\" -xf - --no-same-owner "
				       "--no-overwrite-dir",
				       path };
		struct sbx_request q = { .kind = SBX_EXEC, .argv = argv, .argc = 4,
					 .user = user ? user : "user", .with_stdin = 1 };
		if (api_send(r, s, op, &q, "the path is too long") < 0) {
			free(up);
			sop_free(s, op);
			sbx_put(s);
			return 0;
		}
		*up = (struct unpack){ .s = s, .op = op };
		snprintf(up->path, sizeof(up->path), "%s", path);
		r->stream = up;
		return 0;
	}
	if (phase == UP_ABORT) {
		unpack_end(r, up);
		return 0;
	}
	int e = sbx_data(up->s, up->op, phase == UP_END ? PF_EOF : 0, data, n, r->api->answer_ms);
	up->size += n;
	if (e == 0 && phase == UP_DATA)
		return 0;
	/* The end, or tar stopped early (not an archive, no room, no right). */
	struct sop_state st;
	int w = api_wait(r, up->s, up->op, 0, e == 0 ? 10 * r->api->answer_ms : 5000, &st);
	if (st.end == P_EXIT && st.exit_code == 0) {
		/* (tar may end at the archive's end marker, before its padding) */
		reply_json(r, 201, json_pack("{s:s,s:I}", "path", up->path, "size", (json_int_t)up->size));
	} else if (st.end == P_EXIT) {
		/* tar's last words, on one line: what was wrong with the archive. */
		int cut;
		const struct pbuf *err = sop_output(up->op, 1, &cut);
		char msg[512];
		size_t k = err->len < sizeof(msg) - 1 ? err->len : sizeof(msg) - 1;
		memcpy(msg, err->data + err->len - k, k);
		msg[k] = '\0';
		for (char *p = msg; *p; p++)
			if (*p == '\n' || (unsigned char)*p < 0x20)
				*p = ' ';
		while (k && msg[k - 1] == ' ')
			msg[--k] = '\0';
		reply_error(r, 422, "invalid_argument", "the archive was not unpacked%s%s",
			    k ? ": " : "", msg);
	} else if (st.end == P_ERROR) {
		api_agent_error(r, &st);
	} else if (w < 0 || e == -ETIMEDOUT) {
		api_wait_error(r, w < 0 ? w : e);
	} else {
		reply_error(r, 503, "unavailable", "the sandbox did not take the archive");
	}
	unpack_end(r, up);
	return 0;
}
