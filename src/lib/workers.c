/* workers: see workers.h. */
#include "lib/workers.h"

#include "common/clock.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct job {
	struct workers *w;
	void (*fn)(void *arg);
	void *arg;
};

int workers_init(struct workers *w, unsigned max, size_t stack, const char *tag)
{
	*w = (struct workers){ .max = max, .stack = stack };
	snprintf(w->tag, sizeof(w->tag), "%s", tag ? tag : "");
	int r = pthread_mutex_init(&w->mu, NULL);
	if (r)
		return -r;
	if ((r = clock_cond_init(&w->idle))) {
		pthread_mutex_destroy(&w->mu);
		return -r;
	}
	return 0;
}

void workers_release(struct workers *w)
{
	pthread_cond_destroy(&w->idle);
	pthread_mutex_destroy(&w->mu);
}

static void *trampoline(void *p)
{
	struct job j = *(struct job *)p;
	free(p);
	if (j.w->tag[0])
		log_set_tag(j.w->tag);
	j.fn(j.arg);
	/* The last touch of w: a drain may free it as soon as this unlocks. */
	pthread_mutex_lock(&j.w->mu);
	if (--j.w->n == 0)
		pthread_cond_broadcast(&j.w->idle);
	pthread_mutex_unlock(&j.w->mu);
	return NULL;
}

int workers_spawn(struct workers *w, void (*fn)(void *arg), void *arg)
{
	struct job *j = malloc(sizeof(*j));
	if (!j)
		return -ENOMEM;
	*j = (struct job){ w, fn, arg };
	pthread_mutex_lock(&w->mu);
	if (w->max && w->n >= w->max) {
		pthread_mutex_unlock(&w->mu);
		free(j);
		return -EAGAIN;
	}
	w->n++; /* before the thread exists, so a drain cannot miss it */
	pthread_mutex_unlock(&w->mu);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (w->stack)
		pthread_attr_setstacksize(&attr, w->stack);
	pthread_t t;
	int e = pthread_create(&t, &attr, trampoline, j);
	pthread_attr_destroy(&attr);
	if (e) {
		free(j);
		pthread_mutex_lock(&w->mu);
		if (--w->n == 0)
			pthread_cond_broadcast(&w->idle);
		pthread_mutex_unlock(&w->mu);
		return -e;
	}
	return 0;
}

unsigned workers_count(struct workers *w)
{
	pthread_mutex_lock(&w->mu);
	unsigned n = w->n;
	pthread_mutex_unlock(&w->mu);
	return n;
}

int workers_drain(struct workers *w, int timeout_ms)
{
	struct timespec until;
	if (timeout_ms >= 0)
		clock_deadline(&until, timeout_ms);
	int r = 0;
	pthread_mutex_lock(&w->mu);
	while (w->n && r == 0) {
		if (timeout_ms < 0)
			pthread_cond_wait(&w->idle, &w->mu);
		else if (pthread_cond_timedwait(&w->idle, &w->mu, &until) == ETIMEDOUT)
			r = w->n ? -ETIMEDOUT : 0;
	}
	pthread_mutex_unlock(&w->mu);
	return r;
}
