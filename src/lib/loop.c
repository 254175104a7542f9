/*
 * loop: see loop.h. The table of descriptors is a small array behind a
 * mutex; each turn the loop's thread drops the descriptors taken out
 * (releasing them after it unlocks), builds the pollfd set and the
 * timeout from the table, polls, then looks each ready descriptor up
 * again under the lock, so one taken out meanwhile gets no callback.
 */
#include "lib/loop.h"

#include "common/buf.h"
#include "common/clock.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct entry {
	int fd;
	short events;
	int gone;          /* taken out: released at the next turn */
	int64_t resume_at; /* paused until then (clock_ms), 0: not paused */
	loop_fd_fn fn;
	loop_release_fn release;
	void *arg;
};

struct timer {
	long id;
	int64_t at;
	loop_timer_fn fn;
	void *arg;
};

struct loop {
	pthread_mutex_t mu;
	int wakefd;
	int stop;
	long next_id;
	struct buf entries; /* struct entry[] */
	struct buf timers;  /* struct timer[] */
};

#define ENTRIES(l) ((struct entry *)(l)->entries.p)
#define NENTRIES(l) ((l)->entries.len / sizeof(struct entry))
#define TIMERS(l) ((struct timer *)(l)->timers.p)
#define NTIMERS(l) ((l)->timers.len / sizeof(struct timer))

int loop_new(struct loop **out)
{
	struct loop *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	buf_init(&l->entries, 0);
	buf_init(&l->timers, 0);
	l->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->wakefd < 0) {
		int e = errno;
		free(l);
		return -e;
	}
	pthread_mutex_init(&l->mu, NULL);
	*out = l;
	return 0;
}

void loop_free(struct loop *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < NENTRIES(l); i++)
		if (ENTRIES(l)[i].release)
			ENTRIES(l)[i].release(ENTRIES(l)[i].fd, ENTRIES(l)[i].arg);
	buf_release(&l->entries);
	buf_release(&l->timers);
	close(l->wakefd);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

static void wake(struct loop *l)
{
	uint64_t one = 1;
	if (write(l->wakefd, &one, sizeof(one)) < 0) {
		/* saturated: the loop is awake anyway */
	}
}

void loop_stop(struct loop *l)
{
	pthread_mutex_lock(&l->mu);
	l->stop = 1;
	pthread_mutex_unlock(&l->mu);
	wake(l);
}

/* The entry of fd not taken out yet, or NULL (locked). */
static struct entry *find(struct loop *l, int fd)
{
	for (size_t i = 0; i < NENTRIES(l); i++)
		if (ENTRIES(l)[i].fd == fd && !ENTRIES(l)[i].gone)
			return &ENTRIES(l)[i];
	return NULL;
}

int loop_add(struct loop *l, int fd, short events, loop_fd_fn fn, loop_release_fn release,
	     void *arg)
{
	int r = 0;
	pthread_mutex_lock(&l->mu);
	for (size_t i = 0; i < NENTRIES(l); i++)
		if (ENTRIES(l)[i].fd == fd)
			r = -EEXIST; /* a descriptor taken out is the same until released */
	struct entry *e = r ? NULL : buf_push(&l->entries, sizeof(*e));
	if (e)
		*e = (struct entry){ .fd = fd, .events = events, .fn = fn, .release = release,
				     .arg = arg };
	else if (!r)
		r = -ENOMEM;
	pthread_mutex_unlock(&l->mu);
	if (!r)
		wake(l);
	return r;
}

int loop_del(struct loop *l, int fd)
{
	pthread_mutex_lock(&l->mu);
	struct entry *e = find(l, fd);
	if (e)
		e->gone = 1;
	pthread_mutex_unlock(&l->mu);
	if (e)
		wake(l);
	return e ? 0 : -ENOENT;
}

int loop_pause(struct loop *l, int fd, int ms)
{
	pthread_mutex_lock(&l->mu);
	struct entry *e = find(l, fd);
	if (e)
		e->resume_at = clock_ms() + (ms > 0 ? ms : 0);
	pthread_mutex_unlock(&l->mu);
	if (e)
		wake(l);
	return e ? 0 : -ENOENT;
}

long loop_timer(struct loop *l, int ms, loop_timer_fn fn, void *arg)
{
	pthread_mutex_lock(&l->mu);
	struct timer *t = buf_push(&l->timers, sizeof(*t));
	long id = t ? ++l->next_id : -ENOMEM;
	if (t)
		*t = (struct timer){ .id = id, .at = clock_ms() + (ms > 0 ? ms : 0), .fn = fn,
				     .arg = arg };
	pthread_mutex_unlock(&l->mu);
	if (id > 0)
		wake(l);
	return id;
}

/* Removes timer i (locked). */
static void drop_timer(struct loop *l, size_t i)
{
	memmove(&TIMERS(l)[i], &TIMERS(l)[i + 1], (NTIMERS(l) - i - 1) * sizeof(struct timer));
	l->timers.len -= sizeof(struct timer);
}

int loop_cancel(struct loop *l, long id)
{
	int r = -ENOENT;
	pthread_mutex_lock(&l->mu);
	for (size_t i = 0; i < NTIMERS(l) && r; i++)
		if (TIMERS(l)[i].id == id) {
			drop_timer(l, i);
			r = 0;
		}
	pthread_mutex_unlock(&l->mu);
	return r;
}

/* One turn's set: the wake descriptor first, then each watched one. The
 * poll timeout: the next timer or pause to end, -1 for none (locked). */
static int build(struct loop *l, struct buf *fds, struct buf *gone, int64_t now)
{
	int64_t next = -1;
	fds->len = 0;
	struct pollfd *w = buf_push(fds, sizeof(*w));
	if (!w)
		return -ENOMEM;
	*w = (struct pollfd){ .fd = l->wakefd, .events = POLLIN };
	for (size_t i = 0; i < NENTRIES(l);) {
		struct entry *e = &ENTRIES(l)[i];
		if (e->gone) { /* released by the caller once unlocked */
			if (buf_add(gone, e, sizeof(*e)) < 0)
				return -ENOMEM;
			*e = ENTRIES(l)[NENTRIES(l) - 1];
			l->entries.len -= sizeof(*e);
			continue;
		}
		i++;
		if (e->resume_at && e->resume_at <= now)
			e->resume_at = 0;
		if (e->resume_at) {
			next = next < 0 || e->resume_at < next ? e->resume_at : next;
			continue;
		}
		if (!e->events)
			continue;
		struct pollfd *p = buf_push(fds, sizeof(*p));
		if (!p)
			return -ENOMEM;
		*p = (struct pollfd){ .fd = e->fd, .events = e->events };
	}
	for (size_t i = 0; i < NTIMERS(l); i++)
		next = next < 0 || TIMERS(l)[i].at < next ? TIMERS(l)[i].at : next;
	if (next < 0)
		return -1;
	return next <= now ? 0 : next - now > INT32_MAX ? INT32_MAX : (int)(next - now);
}

/* Calls the timers that are due, each taken out before it runs. */
static void fire_timers(struct loop *l)
{
	for (;;) {
		struct timer t = { 0 };
		int64_t now = clock_ms();
		pthread_mutex_lock(&l->mu);
		for (size_t i = 0; i < NTIMERS(l) && !t.fn; i++)
			if (TIMERS(l)[i].at <= now) {
				t = TIMERS(l)[i];
				drop_timer(l, i);
			}
		pthread_mutex_unlock(&l->mu);
		if (!t.fn)
			return;
		t.fn(l, t.arg);
	}
}

int loop_run(struct loop *l)
{
	struct buf fds, gone;
	buf_init(&fds, 0);
	buf_init(&gone, 0);
	int r = 0;
	for (;;) {
		pthread_mutex_lock(&l->mu);
		int stop = l->stop;
		gone.len = 0;
		int timeout = stop ? 0 : build(l, &fds, &gone, clock_ms());
		pthread_mutex_unlock(&l->mu);
		for (size_t i = 0; i < gone.len / sizeof(struct entry); i++) {
			struct entry *e = &((struct entry *)gone.p)[i];
			if (e->release)
				e->release(e->fd, e->arg);
		}
		if (stop)
			break;
		if (timeout < -1) {
			r = timeout;
			break;
		}
		struct pollfd *p = (struct pollfd *)fds.p;
		size_t n = fds.len / sizeof(*p);
		if (poll(p, (nfds_t)n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		uint64_t v;
		if (p[0].revents && read(l->wakefd, &v, sizeof(v)) < 0) {
			/* drained already */
		}
		fire_timers(l);
		for (size_t i = 1; i < n; i++) {
			if (!p[i].revents)
				continue;
			pthread_mutex_lock(&l->mu);
			struct entry *e = find(l, p[i].fd);
			struct entry c = e && !e->resume_at ? *e : (struct entry){ 0 };
			pthread_mutex_unlock(&l->mu);
			if (c.fn)
				c.fn(l, p[i].fd, p[i].revents, c.arg);
		}
	}
	buf_release(&fds);
	buf_release(&gone);
	return r;
}
