/*
 * objstore: scripts/objstore.sh driven from C; see objstore.h.
 */
#include "tests/lib/objstore.h"
#include "tests/lib/upscript.h"

#include "lib/s3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char up_dir[256];
static pid_t up_pid;

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
	int base = upscript_ports(5, 20000, 8000);
	if (!base) {
		fprintf(stderr, "objstore: no five free ports on 127.0.0.1\n");
		return -1;
	}
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "scripts/objstore.sh up '%s' %d", dir, base);
	snprintf(up_dir, sizeof(up_dir), "%s", dir);
	up_pid = getpid();
	atexit(objstore_down); /* also what a failed start left */
	if (upscript_run(cmd) < 4) {
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
