/* wipe: see wipe.h. */
#include "daemon/wipe.h"

#include <jansson.h>
#include <malloc.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

static void wiping_free(void *p)
{
	if (p)
		explicit_bzero(p, malloc_usable_size(p));
	free(p);
}

static void *sq_malloc(int n)
{
	return malloc((size_t)n);
}

/* A new block, the bytes copied and the old one wiped: realloc would free
 * it as it is. */
static void *sq_realloc(void *p, int n)
{
	size_t old = p ? malloc_usable_size(p) : 0;
	void *q = malloc((size_t)n);
	if (!q)
		return NULL;
	if (p) {
		memcpy(q, p, old < (size_t)n ? old : (size_t)n);
		wiping_free(p);
	}
	return q;
}

static int sq_size(void *p)
{
	return p ? (int)malloc_usable_size(p) : 0;
}

static int sq_roundup(int n)
{
	return (n + 7) & ~7;
}

static int sq_init(void *arg)
{
	(void)arg;
	return SQLITE_OK;
}

static void sq_shutdown(void *arg)
{
	(void)arg;
}

int wipe_install(void)
{
	static const sqlite3_mem_methods m = {
		.xMalloc = sq_malloc, .xFree = wiping_free, .xRealloc = sq_realloc,
		.xSize = sq_size, .xRoundup = sq_roundup, .xInit = sq_init,
		.xShutdown = sq_shutdown,
	};
	json_set_alloc_funcs(malloc, wiping_free);
	return sqlite3_config(SQLITE_CONFIG_MALLOC, &m) == SQLITE_OK &&
			       sqlite3_config(SQLITE_CONFIG_LOOKASIDE, 0, 0) == SQLITE_OK
		       ? 0
		       : -1;
}
