/*
 * watch: file system events over inotify (docs/agent-protocol.md, Watches).
 * One inotify instance per watch operation, one watch per directory it
 * follows (the root only, or every directory under it when recursive, new
 * ones included as they appear). Events go out as P_FSEVENT frames while
 * the operation has credit; without credit the instance is not read, the
 * kernel queues events (fs.inotify.max_queued_events) and, once that is
 * full, says IN_Q_OVERFLOW, which goes out as an overflow event. Names of
 * the agent's own temporary files (a P_FWRITE in progress, renamed into
 * place at its end) are left out: a write through the API shows as the
 * create of its file.
 */
#include "agent/watch.h"

#include "agent/agent.h"
#include "agent/conn.h"
#include "common/proto.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define WATCH_MASK                                                                                  \
	(IN_CREATE | IN_MODIFY | IN_ATTRIB | IN_DELETE | IN_DELETE_SELF | IN_MOVED_FROM |           \
	 IN_MOVED_TO | IN_MOVE_SELF | IN_EXCL_UNLINK)
#define MAX_DEPTH   64
/* Events are read into a watch's buffer and sent one by one while there is
 * credit: a read's worth could cost far more than a window (a short name
 * in a long directory path). */
#define READ_BUF    4096
#define TURN_EVENTS 256 /* events sent per loop turn and watch */
/* A frame's cost beyond its path: header and the kind and dir attributes. */
#define FRAME_EXTRA 40

struct wdir {
	int wd;
	char *path;
};

struct watch {
	uint32_t op; /* the operation's id; 0: a free slot */
	int fd;
	bool recursive;
	bool capped; /* more directories than MAX_WATCH_DIRS: told once */
	int root_wd;
	struct wdir *dirs; /* by wd, ascending (the kernel hands them out so) */
	size_t ndirs, cap;
	char *buf;	   /* READ_BUF bytes read from fd; [off, have) not sent yet */
	size_t off, have;
};

static struct watch watches[MAX_WATCHES];

static struct wdir *find_wd(struct watch *w, int wd)
{
	size_t lo = 0, hi = w->ndirs;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (w->dirs[mid].wd == wd)
			return &w->dirs[mid];
		if (w->dirs[mid].wd < wd)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static void drop_dir(struct watch *w, struct wdir *d)
{
	free(d->path);
	size_t i = (size_t)(d - w->dirs);
	memmove(d, d + 1, (w->ndirs - i - 1) * sizeof(*d));
	w->ndirs--;
}

/* Watches path (a directory below the root: only as one, not followed if a
 * symlink): 0, 1 when the cap is reached, -errno. An existing wd (a
 * directory moved within the tree) takes the new path. */
static int add_one(struct watch *w, const char *path, bool root)
{
	if (w->ndirs >= MAX_WATCH_DIRS)
		return 1;
	uint32_t mask = WATCH_MASK | (root ? 0 : IN_ONLYDIR | IN_DONT_FOLLOW);
	int wd = inotify_add_watch(w->fd, path, mask);
	if (wd < 0)
		return -errno;
	char *copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	struct wdir *d = find_wd(w, wd);
	if (d) {
		free(d->path);
		d->path = copy;
		return 0;
	}
	if (w->ndirs == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 16;
		struct wdir *n = realloc(w->dirs, cap * sizeof(*n));
		if (!n) {
			free(copy);
			inotify_rm_watch(w->fd, wd);
			return -ENOMEM;
		}
		w->dirs = n;
		w->cap = cap;
	}
	/* Ascending as the kernel counts; a wrapped counter is far off. */
	size_t i = w->ndirs;
	while (i > 0 && w->dirs[i - 1].wd > wd)
		i--;
	memmove(&w->dirs[i + 1], &w->dirs[i], (w->ndirs - i) * sizeof(*w->dirs));
	w->dirs[i] = (struct wdir){.wd = wd, .path = copy};
	w->ndirs++;
	if (root)
		w->root_wd = wd;
	return 0;
}

/* Watches path and, when recursive, the directories under it (symlinks not
 * followed). Directories that vanish meanwhile are skipped. 0, 1 at the
 * cap, -errno for path itself. */
static int add_tree(struct watch *w, const char *path, bool root, int depth)
{
	int r = add_one(w, path, root);
	if (r != 0 || !w->recursive || depth >= MAX_DEPTH)
		return r;
	DIR *dir = opendir(path);
	if (!dir)
		return 0; /* a file, or gone already */
	struct dirent *e;
	char sub[PATH_MAX];
	while ((e = readdir(dir)) != NULL && r == 0) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (snprintf(sub, sizeof(sub), "%s/%s", strcmp(path, "/") ? path : "", e->d_name) >=
		    (int)sizeof(sub))
			continue;
		struct stat st;
		if (e->d_type == DT_DIR ||
		    (e->d_type == DT_UNKNOWN && lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)))
			r = add_tree(w, sub, false, depth + 1) == 1 ? 1 : 0;
	}
	closedir(dir);
	return r;
}

/* Stops following path and the directories under it (moved away). */
static void drop_tree(struct watch *w, const char *path)
{
	size_t n = strlen(path);
	for (size_t i = w->ndirs; i-- > 0;) {
		const char *p = w->dirs[i].path;
		if (w->dirs[i].wd != w->root_wd && !strncmp(p, path, n) && (!p[n] || p[n] == '/')) {
			inotify_rm_watch(w->fd, w->dirs[i].wd);
			drop_dir(w, &w->dirs[i]);
		}
	}
}

static void release(struct watch *w)
{
	if (w->fd >= 0)
		close(w->fd);
	for (size_t i = 0; i < w->ndirs; i++)
		free(w->dirs[i].path);
	free(w->dirs);
	free(w->buf);
	*w = (struct watch){.fd = -1};
}

static struct watch *of_op(uint32_t id)
{
	for (int i = 0; i < MAX_WATCHES; i++)
		if (watches[i].op == id)
			return &watches[i];
	return NULL;
}

void watch_start(struct conn *c, const struct proto_frame *f)
{
	char path[PROTO_MAX_STR + 1];
	uint32_t recursive = 0;
	int r = proto_get_str(f, A_PATH, path, sizeof(path));
	if (r < 0) {
		conn_send_attr_error(c, f->id, r, "path");
		return;
	}
	if (path[0] != '/') {
		conn_send_error(c, f->id, EINVAL, "path '%s' is not absolute", path);
		return;
	}
	if ((r = proto_get_u32(f, A_RECURSIVE, &recursive)) == -EPROTO) {
		conn_send_attr_error(c, f->id, r, "recursive");
		return;
	}
	struct stat st;
	if (stat(path, &st) < 0) {
		conn_send_error(c, f->id, errno, "cannot watch '%s': %s", path, strerror(errno));
		return;
	}
	struct watch *w = of_op(0);
	if (!w) {
		conn_send_error(c, f->id, EAGAIN, "too many watches (%d)", MAX_WATCHES);
		return;
	}
	int64_t window;
	if (conn_op_window(c, f, &window) < 0)
		return;
	*w = (struct watch){.fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC),
			    .recursive = recursive && S_ISDIR(st.st_mode), .root_wd = -1,
			    .buf = aligned_alloc(__alignof__(struct inotify_event), READ_BUF)};
	if (w->fd < 0 || !w->buf) {
		r = w->fd < 0 ? errno : ENOMEM;
		release(w);
		conn_send_error(c, f->id, r, "inotify: %s", strerror(r));
		return;
	}
	/* "/a/b/" is watched as "/a/b": event paths join with one slash. */
	size_t n = strlen(path);
	while (n > 1 && path[n - 1] == '/')
		path[--n] = '\0';
	r = add_tree(w, path, true, 0);
	if (r < 0) {
		release(w);
		conn_send_error(c, f->id, -r, "cannot watch '%s': %s", path, strerror(-r));
		return;
	}
	struct conn_op *op = conn_op_open(c, f->id, OP_WATCH);
	if (!op) {
		release(w);
		return;
	}
	op->credit = window;
	w->op = f->id;
	w->capped = r == 1;
	int e = conn_out_begin(c, P_STARTED, 0, f->id);
	if (e == 0 && w->capped)
		e = proto_put_u32(&c->out, A_SIZE, MAX_WATCH_DIRS); /* followed no more than that */
	conn_out_end(c, e);
}

void watch_op_closed(struct conn_op *op)
{
	struct watch *w = op->id ? of_op(op->id) : NULL;
	if (w)
		release(w);
}

static void send_event(struct conn *c, struct conn_op *op, uint32_t kind, const char *path,
		       bool dir)
{
	int r = conn_out_begin(c, P_FSEVENT, 0, op->id);
	if (r == 0)
		r = proto_put_u32(&c->out, A_FSOP, kind);
	if (r == 0)
		r = proto_put_str(&c->out, A_PATH, path);
	if (r == 0 && dir)
		r = proto_put_u32(&c->out, A_ISDIR, 1);
	conn_out_end(c, r);
	op->credit -= proto_cost(strlen(path) + FRAME_EXTRA);
}

/* A P_FWRITE's temporary file: ".NAME.cpuos-XXXXXX" (xfer.c). */
static bool agent_tmp(const char *name)
{
	size_t n = strlen(name);
	return name[0] == '.' && n > 14 && !memcmp(name + n - 13, ".cpuos-", 7);
}

/* Handles one event: false when the operation ended (its root is gone). */
static bool on_event(struct conn *c, struct conn_op *op, struct watch *w,
		     const struct inotify_event *e)
{
	if (e->mask & IN_Q_OVERFLOW) {
		struct wdir *root = find_wd(w, w->root_wd);
		send_event(c, op, FS_OVERFLOW, root ? root->path : "/", false);
		return true;
	}
	struct wdir *d = find_wd(w, e->wd);
	if (!d)
		return true; /* a watch we dropped: its last events */
	if (e->mask & IN_IGNORED) {
		bool root = e->wd == w->root_wd;
		drop_dir(w, d);
		if (root) {
			/* Removed, moved away or unmounted: nothing left to watch. */
			conn_send_ok(c, op->id);
			conn_op_close(c, op);
			return false;
		}
		return true;
	}
	const char *name = e->len ? e->name : "";
	if (name[0] && agent_tmp(name))
		return true;
	/* A directory's own events come from its parent's watch too. */
	if (!name[0] && e->wd != w->root_wd)
		return true;
	char path[PATH_MAX];
	if (!name[0])
		snprintf(path, sizeof(path), "%s", d->path);
	else if (snprintf(path, sizeof(path), "%s/%s", strcmp(d->path, "/") ? d->path : "", name) >=
		 (int)sizeof(path))
		return true;
	bool dir = e->mask & IN_ISDIR;
	bool self = !name[0];
	uint32_t kind = 0;
	if (e->mask & (IN_CREATE | IN_MOVED_TO))
		kind = FS_CREATE;
	else if (e->mask & IN_MODIFY)
		kind = FS_WRITE;
	else if (e->mask & IN_ATTRIB)
		kind = FS_CHMOD;
	else if (e->mask & (IN_DELETE | IN_DELETE_SELF))
		kind = FS_REMOVE;
	else if (e->mask & (IN_MOVED_FROM | IN_MOVE_SELF))
		kind = FS_RENAME;
	if (!kind)
		return true;
	if (self && e->wd == w->root_wd)
		dir = w->recursive || dir;
	send_event(c, op, kind, path, dir);
	if (w->recursive && dir && !self) {
		if (kind == FS_CREATE && !w->capped && add_tree(w, path, false, 1) == 1) {
			w->capped = true;
			send_event(c, op, FS_OVERFLOW, path, true);
		} else if (kind == FS_RENAME || kind == FS_REMOVE) {
			drop_tree(w, path);
		}
	}
	return true;
}

/* Sends what the watch has read and, while credit lasts, reads more: at
 * most TURN_EVENTS, so a flood leaves the loop its other work. */
static void drain(struct conn *c, struct conn_op *op, struct watch *w)
{
	for (int k = 0; k < TURN_EVENTS && op->credit > 0; k++) {
		if (w->off >= w->have) {
			ssize_t n = read(w->fd, w->buf, READ_BUF);
			w->off = w->have = 0;
			if (n <= 0)
				return;
			w->have = (size_t)n;
		}
		const struct inotify_event *e = (const struct inotify_event *)(w->buf + w->off);
		w->off += sizeof(*e) + e->len;
		if (!on_event(c, op, w, e))
			return; /* ended: w is released */
	}
}

static struct conn_op *live_op(struct conn *c, const struct watch *w, bool throttled)
{
	struct conn_op *op = w->op && !throttled ? conn_op_find(c, w->op) : NULL;
	return op && op->credit > 0 ? op : NULL;
}

bool watch_pending(bool throttled)
{
	struct conn *c = &agent.conn;
	for (int i = 0; i < MAX_WATCHES; i++)
		if (watches[i].off < watches[i].have && live_op(c, &watches[i], throttled))
			return true;
	return false;
}

void watch_pump(bool throttled)
{
	struct conn *c = &agent.conn;
	for (int i = 0; i < MAX_WATCHES; i++) {
		struct conn_op *op = live_op(c, &watches[i], throttled);
		if (op && watches[i].off < watches[i].have)
			drain(c, op, &watches[i]);
	}
}

int watch_poll_fill(struct pollfd *pfd, struct watch_tag *tag, int max, bool throttled)
{
	struct conn *c = &agent.conn;
	int n = 0;
	for (int i = 0; i < MAX_WATCHES && n < max; i++) {
		/* Events already read are watch_pump's. */
		if (!live_op(c, &watches[i], throttled) || watches[i].off < watches[i].have)
			continue;
		pfd[n] = (struct pollfd){.fd = watches[i].fd, .events = POLLIN};
		tag[n++] = (struct watch_tag){.slot = i};
	}
	return n;
}

void watch_poll_event(const struct watch_tag *t, short revents)
{
	struct conn *c = &agent.conn;
	struct watch *w = &watches[t->slot];
	(void)revents;
	struct conn_op *op = live_op(c, w, false);
	if (op)
		drain(c, op, w);
}
