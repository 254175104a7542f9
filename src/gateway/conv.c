/*
 * conv: see conv.h. A list under one mutex: entries live while a request
 * holds or waits for them, so the list is as long as the requests in
 * flight, which the HTTP server's connection limit bounds.
 */
#include "gateway/conv.h"

#include "common/clock.h"
#include "gateway/gw_store.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct entry {
	struct entry *next;
	char key_id[GW_KEY_ID_LEN];
	char conv[GW_CONV_MAX + 1];
	int held;
	int users; /* the holder and the waiters */
};

struct conv_locks {
	pthread_mutex_t lock;
	pthread_cond_t given;
	struct entry *list;
	int n;
};

int conv_locks_new(struct conv_locks **out)
{
	struct conv_locks *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* clock_deadline's clock */
	pthread_cond_init(&l->given, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&l->lock, NULL);
	*out = l;
	return 0;
}

void conv_locks_free(struct conv_locks *l)
{
	if (!l)
		return;
	while (l->list) {
		struct entry *e = l->list;
		l->list = e->next;
		free(e);
	}
	pthread_cond_destroy(&l->given);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

static struct entry **find(struct conv_locks *l, const char *key_id, const char *conv)
{
	struct entry **p = &l->list;
	while (*p && (strcmp((*p)->key_id, key_id) || strcmp((*p)->conv, conv)))
		p = &(*p)->next;
	return p;
}

/* Drops a user of *p, and the entry with its last. Lock held. */
static void unuse(struct conv_locks *l, struct entry **p)
{
	struct entry *e = *p;
	if (--e->users)
		return;
	*p = e->next;
	free(e);
	l->n--;
}

int conv_take(struct conv_locks *l, const char *key_id, const char *conv, int wait_ms)
{
	if (strlen(key_id) >= GW_KEY_ID_LEN || strlen(conv) > GW_CONV_MAX)
		return -EINVAL;
	struct timespec deadline;
	clock_deadline(&deadline, wait_ms);
	pthread_mutex_lock(&l->lock);
	struct entry **p = find(l, key_id, conv);
	if (!*p) {
		struct entry *e = l->n < CONV_MAX ? calloc(1, sizeof(*e)) : NULL;
		if (!e) {
			pthread_mutex_unlock(&l->lock);
			return l->n < CONV_MAX ? -ENOMEM : -EAGAIN;
		}
		strcpy(e->key_id, key_id);
		strcpy(e->conv, conv);
		e->next = l->list;
		l->list = e;
		l->n++;
		p = &l->list;
	}
	struct entry *e = *p;
	e->users++;
	int r = 0;
	while (e->held && r != ETIMEDOUT)
		r = pthread_cond_timedwait(&l->given, &l->lock, &deadline);
	if (e->held) { /* timed out: the list may have changed, so find it again */
		unuse(l, find(l, key_id, conv));
		pthread_mutex_unlock(&l->lock);
		return -EBUSY;
	}
	e->held = 1;
	pthread_mutex_unlock(&l->lock);
	return 0;
}

void conv_give(struct conv_locks *l, const char *key_id, const char *conv)
{
	pthread_mutex_lock(&l->lock);
	struct entry **p = find(l, key_id, conv);
	if (*p) {
		(*p)->held = 0;
		unuse(l, p);
		pthread_cond_broadcast(&l->given);
	}
	pthread_mutex_unlock(&l->lock);
}
