/*
 * objstore: scripts/objstore.sh driven from C; see objstore.h.
 */
#include "tests/lib/objstore.h"

#include "lib/s3.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char up_dir[256];
static pid_t up_pid;

/* 1 if nothing listens on 127.0.0.1:port (bind works). */
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

void objstore_down(void)
{
	if (!up_dir[0] || getpid() != up_pid)
		return;
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "scripts/objstore.sh down '%s' >/dev/null 2>&1", up_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "objstore: could not stop the store in %s\n", up_dir);
	up_dir[0] = '\0';
}

int objstore_up(const char *dir, const char *bucket)
{
	/* Five ports in a row, from a spot that depends on the pid. */
	int base = 0;
	for (int i = 0; i < 200 && !base; i++) {
		int p = 20000 + (int)((getpid() * 7 + i * 5) % 8000) / 5 * 5;
		int ok = 1;
		for (int j = 0; j < 5 && ok; j++)
			ok = port_free(p + j);
		if (ok)
			base = p;
	}
	if (!base) {
		fprintf(stderr, "objstore: no five free ports on 127.0.0.1\n");
		return -1;
	}
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "scripts/objstore.sh up '%s' %d", dir, base);
	FILE *f = popen(cmd, "r");
	if (!f) {
		perror("objstore: popen");
		return -1;
	}
	snprintf(up_dir, sizeof(up_dir), "%s", dir);
	up_pid = getpid();
	atexit(objstore_down);
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
	if (pclose(f) != 0 || vars < 4) {
		fprintf(stderr, "objstore: scripts/objstore.sh up failed (its message is above)\n");
		return -1;
	}
	setenv("CPUOS_S3_BUCKET", bucket, 1);
	struct s3_conf c;
	struct s3 *s = NULL;
	char err[256];
	if (s3_conf_env(&c, "CPUOS_S3", err, sizeof(err)) < 0 ||
	    s3_open(&s, &c, err, sizeof(err)) < 0 || s3_bucket_create(s, err, sizeof(err)) < 0) {
		fprintf(stderr, "objstore: %s\n", err);
		s3_close(s);
		return -1;
	}
	s3_close(s);
	return 0;
}
