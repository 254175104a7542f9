/*
 * api_logs: GET /v1/sandboxes/{id}/logs, a sandbox's console log (the
 * guest kernel's and its agent's messages; sbx_logs.c keeps it past the
 * sandbox's end). Its last bytes, or with follow=true those and then what
 * is written after, until the client leaves or the sandbox has stopped and
 * all of it was sent. The file is held open: when a stopped sandbox's log
 * moves out of its run directory, the stream reads on to its end.
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

#define LOG_TAIL_DEFAULT (64 * 1024)
#define LOG_TAIL_MAX	 (1024 * 1024)
#define FOLLOW_POLL_MS	 250

struct follow {
	int fd, client;
	struct store *store;
	char id[80];
	int growing; /* the sandbox was running or paused at the last look */
	int quiet;   /* polls since the last byte, for the next look at its state */
};

static ssize_t follow_read(void *arg, char *buf, size_t max)
{
	struct follow *f = arg;
	for (;;) {
		ssize_t n = read(f->fd, buf, max);
		if (n > 0) {
			f->quiet = 0;
			return n;
		}
		if (n < 0 && errno != EINTR)
			return -1;
		if (!f->growing)
			return 0; /* stopped, and all of it sent */
		if (http_fd_gone(f->client))
			return -1;
		if (++f->quiet % 4 == 0) {
			struct store_sbx row;
			if (store_sbx_get(f->store, f->id, &row) == 0) {
				f->growing = !strcmp(row.state, "running") || !strcmp(row.state, "paused");
				store_sbx_release(&row);
			} else {
				f->growing = 0;
			}
			continue; /* read once more: what came before the stop */
		}
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

int api_sbx_logs(struct req *r)
{
	long long tail = LOG_TAIL_DEFAULT;
	const char *ts = req_query(r, "tail", NULL), *fs = req_query(r, "follow", NULL);
	if (ts) {
		char *end;
		tail = strtoll(ts, &end, 10);
		if (!*ts || *end || tail < 0 || tail > LOG_TAIL_MAX)
			return reply_error(r, 400, "bad_request",
					   "tail must be a number of bytes from 0 to %d", LOG_TAIL_MAX);
	}
	int follow = fs && (!strcmp(fs, "true") || !strcmp(fs, "1"));
	if (fs && !follow && strcmp(fs, "false") && strcmp(fs, "0"))
		return reply_error(r, 400, "bad_request", "follow must be true or false");
	struct store_sbx row;
	if (api_row(r, &row) < 0)
		return 0;
	char path[600];
	int growing = sbx_log_path(r->api->sbx, &row, path, sizeof(path));
	store_sbx_release(&row);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && !growing)
		return reply_error(r, 404, "not_found",
				   "no console log is kept of sandbox '%s' (they are kept %d days "
				   "after it stops, on the host it ran on)",
				   r->param[0], SBX_LOG_KEEP_S / 86400);
	struct stat st;
	off_t size = fd >= 0 && fstat(fd, &st) == 0 ? st.st_size : 0;
	off_t from = size > tail ? size - tail : 0;
	if (!follow || fd < 0) {
		/* Not written yet (a sandbox just made): nothing. */
		char *buf = malloc((size_t)(size - from) + 1);
		ssize_t n = buf && fd >= 0 ? pread(fd, buf, (size_t)(size - from), from) : 0;
		if (fd >= 0)
			close(fd);
		if (!buf || n < 0) {
			free(buf);
			return reply_error(r, 500, "internal", "cannot read the console log");
		}
		return reply_buffer(r, 200, "text/plain; charset=utf-8", buf, (size_t)n);
	}
	struct follow *f = calloc(1, sizeof(*f));
	if (!f || lseek(fd, from, SEEK_SET) < 0) {
		free(f);
		close(fd);
		return reply_error(r, 500, "internal", "cannot read the console log");
	}
	*f = (struct follow){ .fd = fd, .client = req_fd(r), .store = r->api->store,
			      .growing = growing };
	snprintf(f->id, sizeof(f->id), "%s", r->param[0]);
	return reply_stream(r, 200, "text/plain; charset=utf-8", follow_read, follow_done, f);
}
