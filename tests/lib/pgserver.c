/*
 * pgserver: scripts/pg.sh driven from C; see pgserver.h.
 */
#include "tests/lib/pgserver.h"

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char up_dir[256];
static pid_t up_pid;

static int port_free(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

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
	int port = 0;
	for (int i = 0; i < 200 && !port; i++) {
		int p = 30000 + (int)((getpid() * 13 + i * 7) % 20000);
		if (port_free(p))
			port = p;
	}
	if (!port) {
		fprintf(stderr, "pgserver: no free port on 127.0.0.1\n");
		return -1;
	}
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "scripts/pg.sh up '%s' %d", dir, port);
	FILE *f = popen(cmd, "r");
	if (!f) {
		perror("pgserver: popen");
		return -1;
	}
	snprintf(up_dir, sizeof(up_dir), "%s", dir);
	up_pid = getpid();
	atexit(pgserver_down);
	char line[512];
	int vars = 0;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		char *eq = strchr(line, '=');
		if (strncmp(line, "export ", 7) || !eq)
			continue;
		*eq = '\0';
		setenv(line + 7, eq + 1, 1);
		vars++;
	}
	if (pclose(f) != 0 || vars < 2) {
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
