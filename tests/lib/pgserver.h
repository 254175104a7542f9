/*
 * pgserver: a real PostgreSQL server for a test binary, started once
 * before its cases (scripts/pg.sh: Debian's PostgreSQL on loopback, on a
 * free port, a cluster in a directory of its own) and stopped at exit.
 * The cases, each in a child process, make a database of their own with
 * pgserver_db and drop it with pgserver_drop; the server's URL and
 * password are in the environment pgserver_up sets (CPUOS_PG_URL,
 * PGPASSWORD).
 */
#ifndef CPUOS_TESTS_PGSERVER_H
#define CPUOS_TESTS_PGSERVER_H

#include <stddef.h>

/* Starts the server under dir: 0, or -1 after one line on stderr saying
 * why (the binary then fails every case that needs it). */
int pgserver_up(const char *dir);
/* Stops the server pgserver_up started (also run at exit). */
void pgserver_down(void);
/* Makes an empty database and writes its URL to url[n]: 0 or -1 with a
 * line on stderr. */
int pgserver_db(char *url, size_t n);
/* Runs sql (one or more statements) on the database of url and writes the
 * first column of its first row, if any, as text to out[outlen] ("" if
 * none; out may be NULL): 0 or -1 with a note. */
int pgserver_query(const char *url, const char *sql, char *out, size_t outlen);
/* 1 if url is one pgserver_db made (a test's target is one or a path). */
int pgserver_is_url(const char *url);
/* Drops the database of url (no connection to it may be left). */
void pgserver_drop(const char *url);

#endif
