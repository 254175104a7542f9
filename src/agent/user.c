/*
 * user: user lookup from /etc/passwd and /etc/group. The agent is a static
 * glibc binary, where getpwnam and friends would need NSS modules at run time,
 * so it reads the files itself.
 */
#include "agent/user.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Splits line at ':' into at most n fields; returns how many. */
static int split(char *line, char **field, int n)
{
	int k = 0;
	line[strcspn(line, "\n")] = '\0';
	while (k < n) {
		field[k++] = line;
		char *colon = strchr(line, ':');
		if (!colon)
			break;
		*colon = '\0';
		line = colon + 1;
	}
	return k;
}

static int parse_id(const char *s, unsigned *v)
{
	char *end;
	errno = 0;
	unsigned long n = strtoul(s, &end, 10);
	if (errno || end == s || *end || n > 0xfffffffeul)
		return -EINVAL;
	*v = (unsigned)n;
	return 0;
}

/* Supplementary groups: the primary one plus those listing the user. */
static void load_groups(struct user *u)
{
	u->groups[0] = u->gid;
	u->ngroups = 1;
	FILE *f = fopen("/etc/group", "re");
	if (!f)
		return;
	char line[8192];
	while (fgets(line, sizeof(line), f) && u->ngroups < MAX_GROUPS) {
		char *field[4];
		unsigned gid;
		if (split(line, field, 4) < 4 || parse_id(field[2], &gid) < 0)
			continue;
		for (char *m = strtok(field[3], ","); m; m = strtok(NULL, ",")) {
			if (strcmp(m, u->name) == 0 && gid != u->gid) {
				u->groups[u->ngroups++] = gid;
				break;
			}
		}
	}
	fclose(f);
}

int user_lookup(const char *name, struct user *u)
{
	memset(u, 0, sizeof(*u));
	if (strlen(name) >= sizeof(u->name) || !*name)
		return -ENOENT;
	int r = -ENOENT;
	FILE *f = fopen("/etc/passwd", "re");
	if (!f && errno != ENOENT)
		return -errno;
	char line[8192];
	while (f && fgets(line, sizeof(line), f)) {
		char *field[7];
		unsigned uid, gid;
		if (split(line, field, 7) < 6 || strcmp(field[0], name) != 0)
			continue;
		if (parse_id(field[2], &uid) < 0 || parse_id(field[3], &gid) < 0)
			continue;
		u->uid = uid;
		u->gid = gid;
		snprintf(u->home, sizeof(u->home), "%s", *field[5] ? field[5] : "/");
		r = 0;
		break;
	}
	if (f)
		fclose(f);
	if (r < 0 && strcmp(name, "root") == 0) {
		u->uid = u->gid = 0;
		strcpy(u->home, "/root");
		r = 0;
	}
	if (r == 0) {
		snprintf(u->name, sizeof(u->name), "%s", name);
		load_groups(u);
	}
	return r;
}
