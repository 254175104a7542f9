/* Unit tests for worker groups (lib/workers): the bound, the drain that
 * waits on the condition variable, and its deadline. */
#include "common/clock.h"
#include "lib/workers.h"
#include "tests/lib/tap.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open;
static atomic_int ran;

static void open_gate(int open)
{
	pthread_mutex_lock(&gate_mu);
	gate_open = open;
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_mu);
}

/* Waits until the test opens the gate. */
static void held(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&gate_mu);
	while (!gate_open)
		pthread_cond_wait(&gate_cv, &gate_mu);
	pthread_mutex_unlock(&gate_mu);
	atomic_fetch_add(&ran, 1);
}

static void test_bound(void)
{
	struct workers w;
	if (!CHECK(workers_init(&w, 3, 128 << 10, "test") == 0))
		return;
	open_gate(0);
	atomic_store(&ran, 0);
	int ok = 0;
	for (int i = 0; i < 3; i++)
		ok += workers_spawn(&w, held, NULL) == 0;
	CHECK(ok == 3 && workers_count(&w) == 3);
	CHECK(workers_spawn(&w, held, NULL) == -EAGAIN); /* and held is not called */
	/* a drain with a deadline gives up while they are held */
	int64_t t0 = clock_ms();
	CHECK(workers_drain(&w, 100) == -ETIMEDOUT);
	CHECK(clock_ms() - t0 >= 90);
	open_gate(1);
	CHECK(workers_drain(&w, -1) == 0 && workers_count(&w) == 0);
	CHECK(atomic_load(&ran) == 3);
	/* room again once they ended */
	CHECK(workers_spawn(&w, held, NULL) == 0);
	CHECK(workers_drain(&w, 5000) == 0 && atomic_load(&ran) == 4);
	workers_release(&w);
}

static void quick(void *arg)
{
	atomic_fetch_add((atomic_int *)arg, 1);
}

/* Many short workers, no bound: the drain ends when the last does, and
 * an empty group drains at once. */
static void test_many(void)
{
	struct workers w;
	if (!CHECK(workers_init(&w, 0, 0, NULL) == 0))
		return;
	CHECK(workers_drain(&w, 0) == 0);
	atomic_int n = 0;
	int spawned = 0;
	for (int i = 0; i < 200; i++)
		spawned += workers_spawn(&w, quick, &n) == 0;
	CHECK(workers_drain(&w, 10000) == 0);
	CHECK(spawned == 200 && atomic_load(&n) == 200);
	workers_release(&w);
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "bound", test_bound },
		{ "many", test_many },
		{ 0 },
	};
	return t_main(argc, argv, cases);
}
