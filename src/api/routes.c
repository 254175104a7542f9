/* routes: see routes.h. */
#include "api/routes.h"

#include "api/capi.h"
#include "common/clock.h"
#include "common/log.h"
#include "lib/sql.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

struct slot {
	char id[32];
	char node[64];
};

struct routes {
	struct capi *a;
	char url[1024];
	pthread_t listener;
	atomic_int quit;
	pthread_mutex_t mu;       /* what follows */
	struct slot slots[ROUTES_SLOTS];
	unsigned long long gen;   /* one more at each change announced */
	int listening;            /* the LISTEN connection is up */
	struct store_node *nodes;
	size_t nnodes;
	long long nodes_at;       /* when read; 0: read again */
};

static unsigned slot_of(const char *id)
{
	unsigned h = 2166136261u; /* FNV-1a */
	for (const char *p = id; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	return h % ROUTES_SLOTS;
}

static void forget_all(struct routes *r)
{
	memset(r->slots, 0, sizeof(r->slots));
	r->gen++;
	r->nodes_at = 0;
}

static void on_notify(void *arg, const char *channel, const char *payload)
{
	struct routes *r = arg;
	pthread_mutex_lock(&r->mu);
	r->gen++;
	if (!strcmp(channel, "cpuos_route")) {
		struct slot *s = &r->slots[slot_of(payload)];
		if (!strcmp(s->id, payload))
			memset(s, 0, sizeof(*s));
	} else {
		r->nodes_at = 0;
	}
	pthread_mutex_unlock(&r->mu);
}

static void *listener_main(void *arg)
{
	struct routes *r = arg;
	static const char *const channels[] = { "cpuos_route", "cpuos_nodes" };
	struct sql_listen *l = NULL;
	int warned = 0;
	while (!atomic_load(&r->quit)) {
		if (!l) {
			char err[512];
			if (sql_listen_open(r->url, "cpuos-api", channels, 2, &l, err, sizeof(err)) < 0) {
				if (!warned++)
					log_warn("routes: no LISTEN connection (every request asks "
						 "the store meanwhile): %s", err);
				struct timespec ts = { .tv_sec = 1 };
				nanosleep(&ts, NULL);
				continue;
			}
			/* what changed while nobody listened is unknown */
			pthread_mutex_lock(&r->mu);
			forget_all(r);
			r->listening = 1;
			pthread_mutex_unlock(&r->mu);
			if (warned)
				log_info("routes: listening again");
			warned = 0;
		}
		if (sql_listen_wait(l, 1000, on_notify, r) < 0) {
			pthread_mutex_lock(&r->mu);
			r->listening = 0;
			forget_all(r);
			pthread_mutex_unlock(&r->mu);
			sql_listen_close(l);
			l = NULL;
		}
	}
	sql_listen_close(l);
	return NULL;
}

int routes_open(struct capi *a, const char *url, struct routes **out, char *err, size_t errlen)
{
	struct routes *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->a = a;
	if (snprintf(r->url, sizeof(r->url), "%s", url) >= (int)sizeof(r->url)) {
		free(r);
		snprintf(err, errlen, "the database URL is too long");
		return -EINVAL;
	}
	pthread_mutex_init(&r->mu, NULL);
	int e = pthread_create(&r->listener, NULL, listener_main, r);
	if (e) {
		pthread_mutex_destroy(&r->mu);
		free(r);
		snprintf(err, errlen, "cannot start a thread: %s", strerror(e));
		return -e;
	}
	*out = r;
	return 0;
}

void routes_close(struct routes *r)
{
	if (!r)
		return;
	atomic_store(&r->quit, 1);
	pthread_join(r->listener, NULL);
	pthread_mutex_destroy(&r->mu);
	free(r->nodes);
	free(r);
}

/* Reads the nodes again when they are stale; the caller holds mu. */
static int fresh_nodes(struct routes *r)
{
	long long now = clock_ms(); /* monotonic: an age, not a lease */
	if (r->nodes_at && now - r->nodes_at < NODES_MAX_AGE_MS)
		return 0;
	struct store_node *ns;
	size_t n;
	int e = store_node_list(capi_db(r->a), &ns, &n);
	if (e < 0)
		return -EIO;
	free(r->nodes);
	r->nodes = ns;
	r->nnodes = n;
	r->nodes_at = now;
	return 0;
}

static int usable(const struct store_node *n, long long now)
{
	return !strcmp(n->state, "ready") && n->lease_until_ms > now && n->url[0];
}

static int owner(struct routes *r, const char *id, int ports, char *url, size_t urllen,
		 char compat[24])
{
	if (compat)
		compat[0] = '\0';
	char node[64] = "";
	unsigned at = slot_of(id);
	pthread_mutex_lock(&r->mu);
	if (r->listening && !strcmp(r->slots[at].id, id))
		snprintf(node, sizeof(node), "%s", r->slots[at].node);
	unsigned long long gen = r->gen;
	pthread_mutex_unlock(&r->mu);
	if (!node[0]) {
		struct store_sbx x;
		int e = store_sbx_get(capi_db(r->a), id, &x);
		if (e == -ENOENT || e == -EINVAL)
			return 0;
		if (e < 0)
			return -EIO;
		snprintf(node, sizeof(node), "%s", x.node);
		/* what restores its stored pause, if it says: where it may
		 * resume when its node is gone or let go of it */
		unsigned g;
		char sha[65];
		if (compat && store_stored_split(x.stored, &g, sha, compat) < 0)
			compat[0] = '\0';
		store_sbx_release(&x);
		pthread_mutex_lock(&r->mu);
		/* unless it moved meanwhile: then the next request asks again */
		if (r->listening && gen == r->gen && node[0] && strlen(id) < sizeof(r->slots[at].id)) {
			snprintf(r->slots[at].id, sizeof(r->slots[at].id), "%s", id);
			snprintf(r->slots[at].node, sizeof(r->slots[at].node), "%s", node);
		}
		pthread_mutex_unlock(&r->mu);
	}
	int found = 0;
	pthread_mutex_lock(&r->mu);
	int e = fresh_nodes(r);
	long long now = capi_now_ms();
	for (size_t i = 0; !e && i < r->nnodes && !found; i++)
		if (!strcmp(r->nodes[i].name, node)) {
			const char *u = ports ? r->nodes[i].ports_url : r->nodes[i].url;
			if (usable(&r->nodes[i], now)) {
				snprintf(url, urllen, "%s", u);
				found = u[0] != '\0';
			} else if (compat && !compat[0]) {
				snprintf(compat, 24, "%s", r->nodes[i].compat);
			}
		}
	pthread_mutex_unlock(&r->mu);
	return e < 0 ? e : found;
}

int routes_owner(struct routes *r, const char *id, char *url, size_t urllen, char compat[24])
{
	return owner(r, id, 0, url, urllen, compat);
}

int routes_owner_ports(struct routes *r, const char *id, char *url, size_t urllen)
{
	return owner(r, id, 1, url, urllen, NULL);
}

static unsigned pick(unsigned n)
{
	static _Thread_local unsigned long long s;
	if (!s && getrandom(&s, sizeof(s), 0) != sizeof(s))
		s = (unsigned long long)time(NULL) ^ (unsigned long long)(size_t)&s;
	s ^= s << 13; /* xorshift64 */
	s ^= s >> 7;
	s ^= s << 17;
	return (unsigned)(s % n);
}

/* Whether node n restores what compat names (either unknown: yes). */
static int restores(const struct store_node *n, const char *compat)
{
	return !compat || !compat[0] || !n->compat[0] || !strcmp(n->compat, compat);
}

int routes_any(struct routes *r, int takes_new, const char *compat, char *url, size_t urllen)
{
	pthread_mutex_lock(&r->mu);
	int e = fresh_nodes(r);
	long long now = capi_now_ms();
	unsigned n = 0, open = 0, same = 0;
	for (size_t i = 0; !e && i < r->nnodes; i++) {
		n += usable(&r->nodes[i], now);
		open += usable(&r->nodes[i], now) && !r->nodes[i].drained;
	}
	/* drained nodes still answer what is not new, when they are all
	 * there is */
	int only_open = open || takes_new;
	n = only_open ? open : n;
	/* of those, the ones that restore the sandbox's pause, if any do */
	for (size_t i = 0; !e && i < r->nnodes; i++)
		same += usable(&r->nodes[i], now) && (!only_open || !r->nodes[i].drained) &&
			restores(&r->nodes[i], compat);
	int only_same = same > 0;
	n = only_same ? same : n;
	if (!e && !n)
		e = -ENOENT;
	if (!e) {
		unsigned k = pick(n);
		for (size_t i = 0; i < r->nnodes; i++)
			if (usable(&r->nodes[i], now) && (!only_open || !r->nodes[i].drained) &&
			    (!only_same || restores(&r->nodes[i], compat)) && k-- == 0) {
				snprintf(url, urllen, "%s", r->nodes[i].url);
				break;
			}
	}
	pthread_mutex_unlock(&r->mu);
	return e;
}

int routes_ready(struct routes *r)
{
	pthread_mutex_lock(&r->mu);
	int e = fresh_nodes(r);
	long long now = capi_now_ms();
	int n = 0;
	for (size_t i = 0; !e && i < r->nnodes; i++)
		n += usable(&r->nodes[i], now);
	pthread_mutex_unlock(&r->mu);
	return e < 0 ? e : n;
}
