/*
 * xfer: file content over the channel. FWRITE writes P_DATA frames into a
 * temporary file beside the target and renames it into place at PF_EOF; FREAD
 * sends a file in P_DATA chunks only as fast as the out queue drains.
 */
#include "agent/xfer.h"

#include "agent/conn.h"
#include "agent/files.h"
#include "agent/user.h"
#include "common/fs.h"
#include "common/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TMP_BASE_MAX 200 /* keeps ".NAME.cpuos-XXXXXX" under NAME_MAX */

void xfer_fwrite_release(struct conn_op *op)
{
	if (op->fd >= 0)
		close(op->fd);
	op->fd = -1;
	if (op->tmp)
		unlink(op->tmp);
	free(op->tmp);
	free(op->path);
	op->tmp = op->path = NULL;
}

static void fwrite_fail(struct conn *c, struct conn_op *op, int err, const char *what)
{
	conn_send_error(c, op->id, err, "cannot %s '%s': %s", what, op->path, strerror(err));
	conn_op_close(c, op);
}

void xfer_fwrite(struct conn *c, const struct proto_frame *f)
{
	char path[PROTO_MAX_STR + 1];
	if (files_get_path(c, f, A_PATH, path, "path") < 0)
		return;
	size_t len = strlen(path);
	if (path[len - 1] == '/') {
		conn_send_error(c, f->id, EISDIR, "cannot write '%s': %s", path, strerror(EISDIR));
		return;
	}
	uint32_t mode = 0644;
	int r = proto_get_u32(f, A_MODE, &mode);
	if (r == -EPROTO) {
		conn_send_attr_error(c, f->id, r, "mode");
		return;
	}
	struct user u;
	bool given;
	if (files_get_user(c, f, &u, &given) < 0)
		return;
	if (c->nfwrite >= MAX_FWRITES) {
		conn_send_error(c, f->id, EAGAIN, "too many file writes (%d)", MAX_FWRITES);
		return;
	}
	struct conn_op *op = conn_op_open(c, f->id, OP_FWRITE);
	if (!op)
		return;
	op->mode = mode & 07777;
	op->uid = u.uid;
	op->gid = u.gid;
	/* Without root we cannot give files away (--listen as a user). */
	op->own = geteuid() == 0;
	op->path = strdup(path);
	op->tmp = malloc(len + TMP_BASE_MAX + 32);
	if (!op->path || !op->tmp) {
		free(op->tmp);
		op->tmp = NULL;
		conn_send_error(c, f->id, ENOMEM, "out of memory");
		conn_op_close(c, op);
		return;
	}
	char *slash = strrchr(path, '/');
	*slash = '\0';
	const char *dir = slash == path ? "/" : path;
	r = slash == path ? 0 : fs_mkdir_p(path, 0755, op->own && given ? u.uid : (uid_t)-1, u.gid);
	sprintf(op->tmp, "%s/.%.*s.cpuos-XXXXXX", slash == path ? "" : dir, TMP_BASE_MAX,
		slash + 1);
	*slash = '/';
	if (r < 0) {
		free(op->tmp);
		op->tmp = NULL;
		fwrite_fail(c, op, -r, "create parent directories of");
		return;
	}
	op->fd = mkostemp(op->tmp, O_CLOEXEC);
	if (op->fd < 0) {
		int err = errno;
		free(op->tmp);
		op->tmp = NULL;
		fwrite_fail(c, op, err, "create a temporary file for");
	}
}

void xfer_fwrite_data(struct conn *c, struct conn_op *op, const struct proto_frame *f)
{
	if (op->fd < 0)
		return;
	const uint8_t *p = f->payload;
	size_t n = f->len;
	/* Blocking writes: the file is local and a frame is small. */
	while (n > 0) {
		ssize_t w = write(op->fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			fwrite_fail(c, op, errno, "write");
			return;
		}
		p += w;
		n -= (size_t)w;
		op->size += (uint64_t)w;
	}
	if (!(f->flags & PF_EOF)) {
		conn_op_input_taken(c, op, f->len);
		return;
	}
	if (fchmod(op->fd, op->mode) < 0) {
		fwrite_fail(c, op, errno, "set the mode of");
		return;
	}
	if (op->own && fchown(op->fd, op->uid, op->gid) < 0) {
		fwrite_fail(c, op, errno, "set the owner of");
		return;
	}
	int fd = op->fd;
	op->fd = -1;
	if (close(fd) < 0) {
		fwrite_fail(c, op, errno, "write");
		return;
	}
	if (rename(op->tmp, op->path) < 0) {
		fwrite_fail(c, op, errno, "rename into");
		return;
	}
	free(op->tmp);
	op->tmp = NULL; /* in place: nothing left to remove */
	int r = conn_out_begin(c, P_OK, 0, op->id);
	if (r == 0)
		r = proto_put_u64(&c->out, A_SIZE, op->size);
	conn_out_end(c, r);
	conn_op_close(c, op);
}

void xfer_fread(struct conn *c, const struct proto_frame *f)
{
	char path[PROTO_MAX_STR + 1];
	int64_t window;
	if (files_get_path(c, f, A_PATH, path, "path") < 0 || conn_op_window(c, f, &window) < 0)
		return;
	/* O_NONBLOCK: opening a FIFO must not hang the agent. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		conn_send_error(c, f->id, errno, "cannot open '%s': %s", path, strerror(errno));
		return;
	}
	struct stat st;
	int err = 0;
	if (fstat(fd, &st) < 0)
		err = errno;
	else if (S_ISDIR(st.st_mode))
		err = EISDIR;
	else if (!S_ISREG(st.st_mode))
		err = EINVAL;
	if (err) {
		close(fd);
		conn_send_error(c, f->id, err, "cannot read '%s': %s", path,
				err == EINVAL ? "Not a regular file" : strerror(err));
		return;
	}
	struct conn_op *op = conn_op_open(c, f->id, OP_FREAD);
	if (!op) {
		close(fd);
		return;
	}
	op->fd = fd;
	op->credit = window;
	op->limit = (uint64_t)st.st_size;
	/* The loop sends the content as the out queue drains (xfer_fread_pump). */
}

/* Sends the next chunk of an fread; ends the operation at end of file.
 * Returns false when it made no progress. */
static bool fread_chunk(struct conn *c, struct conn_op *op)
{
	static uint8_t buf[PROTO_DATA_CHUNK];
	ssize_t n = read(op->fd, buf, sizeof(buf));
	if (n < 0) {
		if (errno == EINTR || errno == EAGAIN)
			return false;
		conn_send_error(c, op->id, errno, "cannot read file: %s", strerror(errno));
		conn_op_close(c, op);
		return true;
	}
	op->size += (uint64_t)n;
	/* A short read is the end; so is reaching the size seen at open, which
	 * spares an empty last frame (files in /proc report size 0). */
	bool eof = (size_t)n < sizeof(buf) || (op->limit && op->size >= op->limit);
	conn_send_raw(c, P_DATA, eof ? PF_EOF : 0, op->id, buf, (size_t)n);
	op->credit -= proto_cost((size_t)n);
	if (!eof)
		return true;
	int r = conn_out_begin(c, P_OK, 0, op->id);
	if (r == 0)
		r = proto_put_u64(&c->out, A_SIZE, op->size);
	conn_out_end(c, r);
	conn_op_close(c, op);
	return true;
}

void xfer_fread_pump(struct conn *c)
{
	bool progress = true;
	while (progress && c->nfread > 0 && c->up && !c->broken && !c->throttled) {
		progress = false;
		for (int i = c->nops - 1; i >= 0 && !c->throttled && !c->broken; i--) {
			struct conn_op *op = i < c->nops ? c->ops[i] : NULL;
			if (op && op->kind == OP_FREAD && op->credit > 0 && fread_chunk(c, op))
				progress = true;
		}
	}
}

bool xfer_fread_ready(const struct conn *c)
{
	for (int i = 0; c->nfread > 0 && i < c->nops; i++)
		if (c->ops[i]->kind == OP_FREAD && c->ops[i]->credit > 0)
			return true;
	return false;
}
