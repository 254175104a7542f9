/* Unit tests for the event loop (lib/loop): callbacks, taking a
 * descriptor out (released in the loop's thread), pauses, timers, and a
 * stop from another thread. */
#include "common/clock.h"
#include "lib/loop.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

struct seen {
	struct loop *l;
	int fd;
	atomic_int reads, releases;
	pthread_t released_in;
	int close_on_release;
};

static void on_read(struct loop *l, int fd, short revents, void *arg)
{
	(void)l;
	struct seen *s = arg;
	char c[64];
	if (revents & POLLIN && read(fd, c, sizeof(c)) > 0)
		atomic_fetch_add(&s->reads, 1);
}

static void on_release(int fd, void *arg)
{
	struct seen *s = arg;
	s->released_in = pthread_self();
	if (s->close_on_release)
		close(fd);
	atomic_fetch_add(&s->releases, 1);
}

static void *run(void *arg)
{
	loop_run(arg);
	return NULL;
}

/* Waits up to ms for *v to reach want. */
static int reaches(atomic_int *v, int want, int ms)
{
	for (int64_t end = clock_ms() + ms; clock_ms() < end;) {
		if (atomic_load(v) >= want)
			return 1;
		poll(NULL, 0, 5);
	}
	return atomic_load(v) >= want;
}

static void test_fds(void)
{
	struct loop *l;
	int p[2];
	if (!CHECK(loop_new(&l) == 0) || !CHECK(pipe(p) == 0))
		return;
	static struct seen s;
	s = (struct seen){ .l = l, .fd = p[0], .close_on_release = 1 };
	pthread_t t;
	CHECK(loop_add(l, p[0], POLLIN, on_read, on_release, &s) == 0);
	CHECK(loop_add(l, p[0], POLLIN, on_read, on_release, &s) == -EEXIST);
	CHECK(pthread_create(&t, NULL, run, l) == 0);
	CHECK(write(p[1], "a", 1) == 1);
	CHECK(reaches(&s.reads, 1, 2000));
	CHECK(write(p[1], "b", 1) == 1);
	CHECK(reaches(&s.reads, 2, 2000));
	/* paused: bytes wait, then are read once the pause is over */
	int64_t t0 = clock_ms();
	CHECK(loop_pause(l, p[0], 150) == 0);
	CHECK(write(p[1], "c", 1) == 1);
	poll(NULL, 0, 50);
	CHECK(atomic_load(&s.reads) == 2);
	CHECK(reaches(&s.reads, 3, 2000) && clock_ms() - t0 >= 140);
	/* taken out: released (and closed) by the loop's own thread */
	CHECK(loop_del(l, p[0]) == 0);
	CHECK(loop_del(l, p[0]) == -ENOENT);
	CHECK(reaches(&s.releases, 1, 2000));
	CHECK(pthread_equal(s.released_in, t));
	loop_stop(l);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(atomic_load(&s.releases) == 1);
	loop_free(l);
	close(p[1]);
}

struct tick {
	atomic_int fired;
	int64_t at;
};

static void on_timer(struct loop *l, void *arg)
{
	(void)l;
	struct tick *k = arg;
	k->at = clock_ms();
	atomic_fetch_add(&k->fired, 1);
}

static void test_timers(void)
{
	struct loop *l;
	if (!CHECK(loop_new(&l) == 0))
		return;
	static struct tick a, b;
	a = (struct tick){ 0 };
	b = (struct tick){ 0 };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, run, l) == 0);
	int64_t t0 = clock_ms();
	long ia = loop_timer(l, 100, on_timer, &a);
	long ib = loop_timer(l, 50, on_timer, &b);
	CHECK(ia > 0 && ib > 0 && ia != ib);
	CHECK(loop_cancel(l, ia) == 0);
	CHECK(loop_cancel(l, ia) == -ENOENT);
	CHECK(reaches(&b.fired, 1, 2000) && b.at - t0 >= 45);
	poll(NULL, 0, 150);
	CHECK(atomic_load(&a.fired) == 0 && atomic_load(&b.fired) == 1);
	loop_stop(l);
	CHECK(pthread_join(t, NULL) == 0);
	loop_free(l);
}

/* A descriptor still in the loop when it is freed is released then. */
static void test_free_releases(void)
{
	struct loop *l;
	int p[2];
	if (!CHECK(loop_new(&l) == 0) || !CHECK(pipe(p) == 0))
		return;
	static struct seen s;
	s = (struct seen){ .close_on_release = 1 };
	CHECK(loop_add(l, p[0], POLLIN, on_read, on_release, &s) == 0);
	loop_stop(l);
	CHECK(loop_run(l) == 0); /* stopped before it began: returns at once */
	loop_free(l);
	CHECK(atomic_load(&s.releases) == 1);
	close(p[1]);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "fds", test_fds },
		{ "timers", test_timers },
		{ "free_releases", test_free_releases },
		{ 0 },
	};
	return t_main(argc, argv, cases);
}
