/*
 * pgserver: scripts/pg.sh driven from C; see pgserver.h.
 */
#include "tests/lib/pgserver.h"
#include "tests/lib/upscript.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char up_dir[256];
static pid_t up_pid;

void pgserver_down(void)
{
	if (!up_dir[0] || getpid() != up_pid)
		return;
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "scripts/pg.sh down '%s' >/dev/null 2>&1", up_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "pgserver: could not stop the server in %s\n", up_dir);
	up_dir[0] = '\0';
}

int pgserver_up(const char *dir)
{
	int port = upscript_ports(1, 30000, 20000);
	if (!port) {
		fprintf(stderr, "pgserver: no free port on 127.0.0.1\n");
		return -1;
	}
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "scripts/pg.sh up '%s' %d", dir, port);
	snprintf(up_dir, sizeof(up_dir), "%s", dir);
	up_pid = getpid();
	atexit(pgserver_down); /* also what a failed start left */
	if (upscript_run(cmd) < 2) {
		fprintf(stderr, "pgserver: scripts/pg.sh up failed (its message is above)\n");
		return -1;
	}
	return 0;
}

/* Runs one statement on the server's own database: 0 or -1. */
static int admin(const char *sql)
{
	const char *url = getenv("CPUOS_PG_URL");
	if (!url) {
		fprintf(stderr, "pgserver: no server (CPUOS_PG_URL unset)\n");
		return -1;
	}
	PGconn *c = PQconnectdb(url);
	PGresult *r = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;
	int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
	if (!ok)
		fprintf(stderr, "pgserver: %s: %s", sql, PQerrorMessage(c));
	PQclear(r);
	PQfinish(c);
	return ok ? 0 : -1;
}

int pgserver_db(char *url, size_t n)
{
	static unsigned seq;
	const char *base = getenv("CPUOS_PG_URL");
	const char *slash = base ? strrchr(base, '/') : NULL;
	if (!slash)
		return admin("SELECT"); /* says why */
	char name[64], sql[128];
	snprintf(name, sizeof(name), "t_%d_%u", (int)getpid(), seq++);
	snprintf(sql, sizeof(sql), "CREATE DATABASE %s", name);
	if (admin(sql) < 0)
		return -1;
	snprintf(url, n, "%.*s/%s", (int)(slash - base), base, name);
	return 0;
}

void pgserver_drop(const char *url)
{
	const char *name = strrchr(url, '/');
	char sql[128];
	snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s", name ? name + 1 : "none");
	admin(sql);
}

static void quiet(void *arg, const char *message)
{
	(void)arg; /* NOTICEs ("drop cascades to ...") are no failure */
	(void)message;
}

int pgserver_query(const char *url, const char *sql, char *out, size_t outlen)
{
	if (out && outlen)
		out[0] = '\0';
	PGconn *c = PQconnectdb(url);
	PQsetNoticeProcessor(c, quiet, NULL);
	PGresult *r = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;
	ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
	int ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
	if (!ok)
		fprintf(stderr, "pgserver: %s: %s", sql, PQerrorMessage(c));
	else if (out && outlen && st == PGRES_TUPLES_OK && PQntuples(r) > 0 && PQnfields(r) > 0)
		snprintf(out, outlen, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	PQfinish(c);
	return ok ? 0 : -1;
}

int pgserver_is_url(const char *url)
{
	return !strncmp(url, "postgresql://", 13);
}
