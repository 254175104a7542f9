/*
 * store_impl: internals shared by the store's files, and included by
 * nothing else. The helpers are defined in store.c; those taking a store
 * expect the caller to hold s->lock.
 */
#ifndef CPUOS_STORE_IMPL_H
#define CPUOS_STORE_IMPL_H

#include "lib/sql.h"

#include <pthread.h>
#include <stddef.h>

struct store {
	pthread_mutex_t lock; /* serialises every use of db */
	struct sql *db;
	/* The node this store writes as (store_node_join), and its epoch:
	 * "" and 0 on a single host. Under lock. */
	char node[64];
	long long node_epoch;
};

/* 1 if s is min..size-1 printable ASCII bytes (space only if space is set). */
int store__text_ok(const char *s, size_t size, size_t min, int space);
/* 1 if s is a valid key name or account: 1..127 printable bytes. */
int store__name_ok(const char *s);
/* Writes the lowercase hex of in[0..n) and a NUL to out[2n + 1]. */
void store__hex(char *out, const unsigned char *in, size_t n);
/* Copies text column col into dst[size]: 0, or -EIO if NULL or too long. */
int store__col_copy(struct sql_stmt *st, int col, char *dst, size_t size);
/* Binds s (copied) to parameter i: an SQLite result code. */
int store__bind_text(struct sql_stmt *st, int i, const char *s);
/* Prepares sql into *st (NULL on failure): 0 or -EIO. */
int store__prep(struct store *s, const char *sql, struct sql_stmt **st);
/* Starts an IMMEDIATE (write-locked) transaction: 0 or -EIO. */
int store__begin(struct store *s);
/* Commits the open transaction: 0 or -EIO. */
int store__commit(struct store *s);
/* Rolls back the open transaction, if SQLite has not already done so. */
void store__rollback(struct store *s);
/* Steps a statement that returns no rows: 0, -EEXIST on a clash of a
 * primary key or a UNIQUE column, -EIO. */
int store__step_done(struct sql_stmt *st);
/* Runs sql, which returns no rows, with the n texts bound to ?1..?n,
 * under the store's lock: 0, -ENOENT when it changed no row, -errno. */
int store__change(struct store *s, const char *sql, int n, const char *const *texts);
/* Binds ?8 and ?9 of a statement that ends in store_sbx.c's OWNED to this
 * store's node and epoch: SQL_OK or SQL_ERROR. */
int store__bind_owner(struct store *s, struct sql_stmt *st);
/* In the caller's transaction: this store's node is at its epoch and not
 * down, and (PostgreSQL) its row is held so till the end: 0, -ESTALE,
 * -EIO. 0 on a single host. */
int store__node_alive(struct store *s);
/* Creates the account if new, inside the caller's transaction: 0 or -EIO. */
int store__ensure_account(struct store *s, const char *account);
struct store_usage_event;
/* 1 if e is a usage event the store may record (store_usage_add's checks). */
int store__usage_ok(const struct store_usage_event *e);
/* Appends usage event e (checked) inside the caller's transaction or on
 * its own: 0 or -EIO. */
int store__usage_insert(struct store *s, const struct store_usage_event *e);

#endif
