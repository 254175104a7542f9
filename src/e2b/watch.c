/*
 * watch: envd's watches on cpuosd's GET .../files/watch: WatchDir, a
 * Connect stream of FilesystemEvent (E2B's JS and async SDKs), and the
 * watchers the sync Python SDK polls (CreateWatcher, GetWatcherEvents,
 * RemoveWatcher), kept here with their events queued until asked for.
 */
#include "e2b/watch.h"

#include "cli/cpuos/http.h"
#include "common/clock.h"
#include "e2b/e2b.h"
#include "e2b/envd.h"
#include "e2b/rpc.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define KEEPALIVE_MS 15000 /* a silent watch's stream says it lives */

/* ---- WatchDir: a stream of FilesystemEvent ---- */

struct watch {
	struct api *a;
	struct apath path;
	char dir[4097];
	int fd;
	long long last;
};

static void watch_free(void *arg)
{
	struct watch *w = arg;
	api_free(w->a);
	free(w);
}

/* envd's FilesystemEvent of one of cpuosd's watch lines under dir (the
 * name relative to it), NULL for a line it has no event for. */
static json_t *fs_event(const char *dir, const char *line, size_t n)
{
	static const char *const names[][2] = {
		{ "create", "EVENT_TYPE_CREATE" }, { "write", "EVENT_TYPE_WRITE" },
		{ "remove", "EVENT_TYPE_REMOVE" }, { "rename", "EVENT_TYPE_RENAME" },
		{ "chmod", "EVENT_TYPE_CHMOD" },
	};
	json_t *j = json_loadb(line, n, 0, NULL), *ev = NULL;
	const char *type = json_string_value(json_object_get(j, "type"));
	const char *path = json_string_value(json_object_get(j, "path"));
	const char *e2b = NULL;
	for (size_t i = 0; type && i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(type, names[i][0]))
			e2b = names[i][1];
	if (e2b && path) {
		size_t dl = strlen(dir);
		const char *rel = !strncmp(path, dir, dl) && path[dl] == '/' ? path + dl + 1
				  : !strcmp(dir, "/") && path[0] == '/' ? path + 1
									: path;
		ev = json_pack("{s:s, s:s}", "name", rel, "type", e2b);
	}
	json_decref(j);
	return ev;
}

static int watch_line(void *arg, const char *line, size_t n)
{
	struct watch *w = arg;
	w->last = clock_ms();
	if (!line) /* the watch is in place */
		return pump_msg(w->fd, json_pack("{s:{}}", "start")) < 0 ? -EPIPE : 0;
	json_t *ev = fs_event(w->dir, line, n);
	if (ev && pump_msg(w->fd, json_pack("{s:o}", "filesystem", ev)) < 0)
		return -EPIPE;
	return 0;
}

static int watch_tick(void *arg)
{
	struct watch *w = arg;
	if (atomic_load(&e2b_stopping))
		return -ESHUTDOWN;
	if (clock_ms() - w->last < KEEPALIVE_MS)
		return 0;
	w->last = clock_ms();
	return pump_msg(w->fd, json_pack("{s:{}}", "keepalive")) < 0 ? -EPIPE : 0;
}

static void watch_run(int fd, void *arg)
{
	struct watch *w = arg;
	w->fd = fd;
	w->last = clock_ms();
	int rc = api_lines_open(w->a, &w->path, watch_line, watch_tick, w);
	if (rc == -EPIPE)
		return;
	if (rc == -ESHUTDOWN) {
		pump_end(fd, "unavailable", "cpuos-e2b is stopping");
		return;
	}
	if (rc < 0)
		pump_end(fd, api_status(w->a) == 404 ? "not_found" : "unavailable", "%s",
			 api_message(w->a));
	else
		pump_end(fd, NULL, NULL);
}

int watch_dir(struct httpd_req *r)
{
	struct e2b_req *q = r->app;
	int stream;
	json_t *m = rpc_request(r, &stream);
	struct watch *w = NULL;
	const char *path = m ? json_string_value(json_object_get(m, "path")) : NULL;
	if (!m)
		return 0;
	if (!path || !*path || strlen(path) >= sizeof(w->dir)) {
		rpc_error(r, stream, 400, "path is required");
		goto out;
	}
	if (!(w = calloc(1, sizeof(*w))) || e2b_api(r, &w->a) < 0) {
		free(w);
		rpc_error(r, stream, 500, "out of memory");
		goto out;
	}
	snprintf(w->dir, sizeof(w->dir), "%s", path);
	size_t dl = strlen(w->dir);
	while (dl > 1 && w->dir[dl - 1] == '/')
		w->dir[--dl] = '\0';
	envd_sbx_path(&w->path, q->id, "/files/watch");
	apath_query(&w->path, "path", path);
	if (json_is_true(json_object_get(m, "recursive")))
		apath_query(&w->path, "recursive", "true");
	pump_start(r, 200, "application/connect+json", HTTPD_SIZE_UNKNOWN, watch_run, watch_free, w);
out:
	json_decref(m);
	return 0;
}

/* ---- CreateWatcher, GetWatcherEvents, RemoveWatcher ----
 * The sync SDK polls: a watcher is a watch cpuos-e2b keeps open, its
 * events queued until asked for. One not asked for in WATCHER_IDLE_MS,
 * or whose sandbox's watch ended, goes. */

#define WATCHERS_MAX	    1024
#define WATCHERS_PER_SANDBOX 32
#define WATCHER_EVENTS	    10000
#define WATCHER_IDLE_MS	    (10 * 60 * 1000)

struct watcher {
	char id[24];
	char sbx[E2B_ID_LEN + 1];
	char dir[4097];
	struct api *a;
	struct apath path;
	json_t *events;
	int state; /* 0 starting, 1 open, -1 ended */
	int opened; /* was open once: its create answered its id */
	int stop, refs;
	long long asked;
	unsigned status; /* a failed start's, for its answer */
	char error[256];
};

static pthread_mutex_t watchers_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watchers_cv = PTHREAD_COND_INITIALIZER;
static struct watcher *watchers[WATCHERS_MAX];

static void watcher_unref(struct watcher *w) /* under watchers_mu */
{
	if (--w->refs)
		return;
	api_free(w->a);
	json_decref(w->events);
	free(w);
}

static void watcher_forget(struct watcher *w) /* under watchers_mu */
{
	for (int i = 0; i < WATCHERS_MAX; i++)
		if (watchers[i] == w) {
			watchers[i] = NULL;
			watcher_unref(w);
		}
}

static int watcher_line(void *arg, const char *line, size_t n)
{
	struct watcher *w = arg;
	json_t *ev = line ? fs_event(w->dir, line, n) : NULL;
	pthread_mutex_lock(&watchers_mu);
	int stop = w->stop;
	if (!line) {
		w->state = w->opened = 1;
		pthread_cond_broadcast(&watchers_cv);
	} else if (ev && json_array_size(w->events) < WATCHER_EVENTS) {
		json_array_append(w->events, ev);
	}
	pthread_mutex_unlock(&watchers_mu);
	json_decref(ev);
	return stop ? 1 : 0;
}

static int watcher_tick(void *arg)
{
	struct watcher *w = arg;
	pthread_mutex_lock(&watchers_mu);
	if (clock_ms() - w->asked > WATCHER_IDLE_MS || atomic_load(&e2b_stopping))
		w->stop = 1;
	int stop = w->stop;
	pthread_mutex_unlock(&watchers_mu);
	return stop ? 1 : 0;
}

static void watcher_run(void *arg)
{
	struct watcher *w = arg;
	int rc = api_lines_open(w->a, &w->path, watcher_line, watcher_tick, w);
	pthread_mutex_lock(&watchers_mu);
	if (rc < 0 && w->state == 0) {
		w->status = api_status(w->a) >= 400 ? (unsigned)api_status(w->a) : 503;
		snprintf(w->error, sizeof(w->error), "%s", api_message(w->a));
	}
	w->state = -1;
	pthread_cond_broadcast(&watchers_cv);
	if (w->stop)
		watcher_forget(w);
	watcher_unref(w);
	pthread_mutex_unlock(&watchers_mu);
}

int watch_create(struct httpd_req *r)
{
	struct e2b *g = r->arg;
	struct e2b_req *q = r->app;
	int stream, slot = -1;
	json_t *m = rpc_request(r, &stream);
	const char *path = m ? json_string_value(json_object_get(m, "path")) : NULL;
	struct watcher *w = NULL;
	unsigned char rnd[8];
	if (!m)
		return 0;
	if (!path || !*path || strlen(path) >= sizeof(w->dir)) {
		rpc_error(r, 0, 400, "path is required");
		goto out;
	}
	if (!(w = calloc(1, sizeof(*w))) || !(w->events = json_array()) || e2b_api(r, &w->a) < 0 ||
	    getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		if (w)
			json_decref(w->events), api_free(w->a);
		free(w);
		rpc_error(r, 0, 500, "out of memory");
		goto out;
	}
	snprintf(w->id, sizeof(w->id), "w%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
		 rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
	snprintf(w->sbx, sizeof(w->sbx), "%s", q->id);
	snprintf(w->dir, sizeof(w->dir), "%s", path);
	size_t dl = strlen(w->dir);
	while (dl > 1 && w->dir[dl - 1] == '/')
		w->dir[--dl] = '\0';
	envd_sbx_path(&w->path, q->id, "/files/watch");
	apath_query(&w->path, "path", path);
	if (json_is_true(json_object_get(m, "recursive")))
		apath_query(&w->path, "recursive", "true");
	w->asked = clock_ms();
	w->refs = 2; /* the table's, the thread's */
	pthread_mutex_lock(&watchers_mu);
	int mine = 0;
	for (int i = 0; i < WATCHERS_MAX; i++) {
		struct watcher *o = watchers[i];
		/* what ended, or went unasked, goes now: a client that left
		 * never removes its watchers */
		if (o && (o->state < 0 || clock_ms() - o->asked > WATCHER_IDLE_MS)) {
			o->stop = 1;
			watcher_forget(o);
			o = NULL;
		}
		if (!o && slot < 0)
			slot = i;
		mine += o && !strcmp(o->sbx, q->id);
	}
	if (slot >= 0 && mine < WATCHERS_PER_SANDBOX)
		watchers[slot] = w;
	pthread_mutex_unlock(&watchers_mu);
	if (slot < 0 || mine >= WATCHERS_PER_SANDBOX) {
		api_free(w->a), json_decref(w->events), free(w);
		rpc_error(r, 0, 429, "too many watchers%s: remove some",
			  mine >= WATCHERS_PER_SANDBOX ? " on this sandbox" : "");
		goto out;
	}
	if (workers_spawn(&g->pumps, watcher_run, w) < 0) {
		pthread_mutex_lock(&watchers_mu);
		w->refs = 1;
		watcher_forget(w);
		pthread_mutex_unlock(&watchers_mu);
		rpc_error(r, 0, 503, "cannot start a watcher");
		goto out;
	}
	pthread_mutex_lock(&watchers_mu);
	while (!w->state)
		pthread_cond_wait(&watchers_cv, &watchers_mu);
	if (w->opened) { /* its events wait for the next get, even if it ended */
		rpc_reply(r, json_pack("{s:s}", "watcherId", w->id));
	} else {
		rpc_error(r, 0, w->status ? w->status : 503, "%s",
			  w->error[0] ? w->error : "the watch did not start");
		watcher_forget(w);
	}
	pthread_mutex_unlock(&watchers_mu);
out:
	json_decref(m);
	return 0;
}

/* The watcher a message names, of this sandbox's: under watchers_mu, or
 * NULL after answering not_found. */
static struct watcher *watcher_of(struct httpd_req *r, json_t *m)
{
	struct e2b_req *q = r->app;
	const char *id = json_string_value(json_object_get(m, "watcherId"));
	for (int i = 0; id && i < WATCHERS_MAX; i++)
		if (watchers[i] && !strcmp(watchers[i]->id, id) && !strcmp(watchers[i]->sbx, q->id))
			return watchers[i];
	rpc_error(r, 0, 404, "watcher '%s' not found", id ? id : "");
	return NULL;
}

int watch_events(struct httpd_req *r)
{
	int stream;
	json_t *m = rpc_request(r, &stream);
	if (!m)
		return 0;
	pthread_mutex_lock(&watchers_mu);
	struct watcher *w = watcher_of(r, m);
	if (w) {
		json_t *evs = w->events;
		w->events = json_array();
		w->asked = clock_ms();
		rpc_reply(r, json_pack("{s:o}", "events", evs));
		if (w->state < 0) /* its watch ended: it goes once drained */
			watcher_forget(w);
	}
	pthread_mutex_unlock(&watchers_mu);
	json_decref(m);
	return 0;
}

int watch_remove(struct httpd_req *r)
{
	int stream;
	json_t *m = rpc_request(r, &stream);
	if (!m)
		return 0;
	pthread_mutex_lock(&watchers_mu);
	struct watcher *w = watcher_of(r, m);
	if (w) {
		w->stop = 1; /* its thread ends at its next tick */
		watcher_forget(w);
		rpc_reply(r, json_object());
	}
	pthread_mutex_unlock(&watchers_mu);
	json_decref(m);
	return 0;
}
