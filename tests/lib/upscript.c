/*
 * upscript: see upscript.h.
 */
#include "tests/lib/upscript.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

int upscript_ports(int n, int lo, int span)
{
	for (int i = 0; i < 200; i++) {
		int p = lo + (int)((getpid() * 7 + i * n) % (span - n)) / n * n;
		int ok = 1;
		for (int j = 0; j < n && ok; j++)
			ok = port_free(p + j);
		if (ok)
			return p;
	}
	return 0;
}

int upscript_run(const char *cmd)
{
	FILE *f = popen(cmd, "r");
	if (!f) {
		perror("popen");
		return -1;
	}
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
	return pclose(f) == 0 ? vars : -1;
}
